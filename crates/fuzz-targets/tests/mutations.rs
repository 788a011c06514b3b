//! Mutated seeds through the targets, on stable (what libFuzzer does, without its coverage
//! guidance): byte flips, truncations, deletions, splices of two seeds, and JSON-aware
//! mutations (numbers made huge, negative, fractional or strings; members deleted; keys
//! duplicated; strings swapped). Each mutated input runs through its seed's target and one
//! other; every run must return normally. Case counts: `TORCHLEAN_PROPTEST_CASES`.

mod common;

use std::sync::OnceLock;

use common::corpus;
use proptest::prelude::*;
use serde_json::Value;
use torchlean_fuzz_targets::{Target, TARGETS};

fn proptest_cases() -> u32 {
    std::env::var("TORCHLEAN_PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256)
}

/// Every seed with the index of its target in `TARGETS`.
fn seeds() -> &'static [(usize, Vec<u8>)] {
    static SEEDS: OnceLock<Vec<(usize, Vec<u8>)>> = OnceLock::new();
    SEEDS.get_or_init(|| {
        TARGETS
            .iter()
            .enumerate()
            .flat_map(|(i, t)| {
                corpus("seeds", t.name)
                    .into_iter()
                    .map(move |(_, b)| (i, b))
            })
            .collect()
    })
}

/// One edit; positions and indices are taken modulo what the input has.
#[derive(Clone, Debug)]
enum Mutation {
    FlipBit {
        at: usize,
        bit: u8,
    },
    Truncate {
        at: usize,
    },
    Delete {
        at: usize,
        len: usize,
    },
    Insert {
        at: usize,
        bytes: Vec<u8>,
    },
    /// Insert a slice of another seed.
    Splice {
        at: usize,
        seed: usize,
        from: usize,
        len: usize,
    },
    /// Replace the nth number of the JSON document.
    Number {
        nth: usize,
        with: Value,
    },
    /// Delete the nth object member.
    DeleteMember {
        nth: usize,
    },
    /// Write the nth object's first member twice (the second time with another value).
    DuplicateKey {
        nth: usize,
        with: Value,
    },
    /// Replace the nth string with another string of the document.
    SwapString {
        nth: usize,
        other: usize,
    },
    /// Replace the nth array with its first element repeated, or with nothing.
    ResizeArray {
        nth: usize,
        repeat: usize,
    },
}

fn extreme_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(serde_json::json!(1e300)),
        Just(serde_json::json!(-1)),
        Just(serde_json::json!(-1e300)),
        Just(serde_json::json!(0.5)),
        Just(serde_json::json!(0)),
        Just(serde_json::json!(4294967296u64)),
        Just(serde_json::json!(u64::MAX)),
        Just(serde_json::json!(i64::MIN)),
        Just(serde_json::json!("7")),
        Just(serde_json::json!("nan")),
        Just(Value::Null),
        Just(serde_json::json!([])),
        Just(serde_json::json!({})),
        (0u64..40).prop_map(Value::from),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Mutation::FlipBit { at, bit }),
        any::<usize>().prop_map(|at| Mutation::Truncate { at }),
        (any::<usize>(), 1usize..16).prop_map(|(at, len)| Mutation::Delete { at, len }),
        (
            any::<usize>(),
            prop::collection::vec(
                prop_oneof![
                    Just(b'{'),
                    Just(b'}'),
                    Just(b'['),
                    Just(b']'),
                    Just(b','),
                    Just(b'"'),
                    Just(b'9'),
                    Just(b'-'),
                    Just(b'\n'),
                    Just(0xff),
                    any::<u8>()
                ],
                1..6
            )
        )
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        (any::<usize>(), any::<usize>(), any::<usize>(), 1usize..64).prop_map(
            |(at, seed, from, len)| Mutation::Splice {
                at,
                seed,
                from,
                len
            }
        ),
        (any::<usize>(), extreme_value()).prop_map(|(nth, with)| Mutation::Number { nth, with }),
        (any::<usize>(), extreme_value()).prop_map(|(nth, with)| Mutation::Number { nth, with }),
        any::<usize>().prop_map(|nth| Mutation::DeleteMember { nth }),
        (any::<usize>(), extreme_value())
            .prop_map(|(nth, with)| Mutation::DuplicateKey { nth, with }),
        (any::<usize>(), any::<usize>())
            .prop_map(|(nth, other)| Mutation::SwapString { nth, other }),
        (any::<usize>(), 0usize..6).prop_map(|(nth, repeat)| Mutation::ResizeArray { nth, repeat }),
    ]
}

/// Applies `m` to `input` (a JSON-aware mutation of a non-JSON input leaves it unchanged).
fn apply(input: &mut Vec<u8>, m: &Mutation) {
    let n = input.len();
    match m {
        Mutation::FlipBit { at, bit } => {
            if n > 0 {
                input[at % n] ^= 1 << bit;
            }
        }
        Mutation::Truncate { at } => input.truncate(at % (n + 1)),
        Mutation::Delete { at, len } => {
            let start = at % (n + 1);
            let end = (start + len).min(n);
            input.drain(start..end);
        }
        Mutation::Insert { at, bytes } => {
            let at = at % (n + 1);
            input.splice(at..at, bytes.iter().copied());
        }
        Mutation::Splice {
            at,
            seed,
            from,
            len,
        } => {
            let other = &seeds()[seed % seeds().len()].1;
            let from = from % (other.len() + 1);
            let end = (from + len).min(other.len());
            let at = at % (n + 1);
            input.splice(at..at, other[from..end].iter().copied());
        }
        Mutation::Number { .. }
        | Mutation::DeleteMember { .. }
        | Mutation::DuplicateKey { .. }
        | Mutation::SwapString { .. }
        | Mutation::ResizeArray { .. } => {
            if let Ok(mut v) = serde_json::from_slice::<Value>(input) {
                if let Some(text) = apply_json(&mut v, m) {
                    *input = text.into_bytes();
                }
            }
        }
    }
}

/// The JSON mutations; returns the new text (`None`: nothing to mutate).
fn apply_json(v: &mut Value, m: &Mutation) -> Option<String> {
    match m {
        Mutation::Number { nth, with } => {
            let count = count(v, &|x| x.is_number());
            let target = nth.checked_rem(count)?;
            *nth_value(v, &|x| x.is_number(), target)? = with.clone();
        }
        Mutation::DeleteMember { nth } => {
            let count = count(v, &non_empty_object);
            let target = nth.checked_rem(count)?;
            let obj = nth_value(v, &non_empty_object, target)?.as_object_mut()?;
            let key = obj.keys().nth(nth / count.max(1) % obj.len())?.clone();
            obj.remove(&key);
        }
        Mutation::DuplicateKey { nth, with } => {
            // serde_json's map cannot hold a key twice: write a marker, then the text
            let count = count(v, &non_empty_object);
            let target = nth.checked_rem(count)?;
            let slot = nth_value(v, &non_empty_object, target)?;
            let obj = slot.as_object()?;
            let (key, _) = obj.iter().next()?;
            let mut members = vec![format!("{}:{}", Value::from(key.clone()), with)];
            members.extend(
                obj.iter()
                    .map(|(k, x)| format!("{}:{x}", Value::from(k.clone()))),
            );
            let text = format!("{{{}}}", members.join(","));
            const MARKER: &str = "\u{1}duplicate\u{1}";
            *slot = Value::from(MARKER);
            let doc = serde_json::to_string(v).ok()?;
            return Some(doc.replacen(&Value::from(MARKER).to_string(), &text, 1));
        }
        Mutation::SwapString { nth, other } => {
            let count = count(v, &|x| x.is_string());
            let (target, source) = (nth.checked_rem(count)?, other % count);
            let s = nth_value(v, &|x| x.is_string(), source)?.clone();
            *nth_value(v, &|x| x.is_string(), target)? = s;
        }
        Mutation::ResizeArray { nth, repeat } => {
            let count = count(v, &|x| x.is_array());
            let target = nth.checked_rem(count)?;
            let arr = nth_value(v, &|x| x.is_array(), target)?.as_array_mut()?;
            let first = arr.first().cloned();
            arr.clear();
            if let Some(first) = first {
                arr.extend(std::iter::repeat_n(first, *repeat));
            }
        }
        _ => return None,
    }
    serde_json::to_string(v).ok()
}

fn non_empty_object(v: &Value) -> bool {
    v.as_object().is_some_and(|o| !o.is_empty())
}

/// How many values (at any depth, pre-order) satisfy `pred`.
fn count(v: &Value, pred: &dyn Fn(&Value) -> bool) -> usize {
    let inner: usize = match v {
        Value::Array(a) => a.iter().map(|x| count(x, pred)).sum(),
        Value::Object(o) => o.values().map(|x| count(x, pred)).sum(),
        _ => 0,
    };
    inner + usize::from(pred(v))
}

/// The `k`th value (pre-order) satisfying `pred`.
fn nth_value<'a>(
    v: &'a mut Value,
    pred: &dyn Fn(&Value) -> bool,
    k: usize,
) -> Option<&'a mut Value> {
    fn go<'a>(
        v: &'a mut Value,
        pred: &dyn Fn(&Value) -> bool,
        k: &mut usize,
    ) -> Option<&'a mut Value> {
        if pred(v) {
            if *k == 0 {
                return Some(v);
            }
            *k -= 1;
        }
        match v {
            Value::Array(a) => a.iter_mut().find_map(|x| go(x, pred, k)),
            Value::Object(o) => o.values_mut().find_map(|x| go(x, pred, k)),
            _ => None,
        }
    }
    let mut k = k;
    go(v, pred, &mut k)
}

fn run(t: &Target, input: &[u8]) -> Result<(), TestCaseError> {
    let outcome = std::panic::catch_unwind(|| (t.run)(input));
    prop_assert!(
        outcome.is_ok(),
        "{} panicked on {:?}",
        t.name,
        String::from_utf8_lossy(input)
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(proptest_cases()))]

    #[test]
    fn mutated_seeds_return_normally(
        seed in any::<usize>(),
        other in any::<usize>(),
        muts in prop::collection::vec(mutation(), 1..5),
    ) {
        let (owner, bytes) = &seeds()[seed % seeds().len()];
        let mut input = bytes.clone();
        for m in &muts {
            apply(&mut input, m);
        }
        run(&TARGETS[*owner], &input)?;
        run(&TARGETS[other % TARGETS.len()], &input)?;
    }
}

#[test]
fn the_json_mutations_change_a_document() {
    let doc = br#"{"a": [1, 2], "b": {"c": "x", "d": "y"}}"#.to_vec();
    let cases = [
        Mutation::Number {
            nth: 1,
            with: Value::from("huge"),
        },
        Mutation::DeleteMember { nth: 0 },
        Mutation::DuplicateKey {
            nth: 1,
            with: Value::from(9),
        },
        Mutation::SwapString { nth: 0, other: 1 },
        Mutation::ResizeArray { nth: 0, repeat: 3 },
    ];
    let want = [
        r#"{"a":[1,"huge"],"b":{"c":"x","d":"y"}}"#,
        r#"{"b":{"c":"x","d":"y"}}"#,
        r#"{"a":[1,2],"b":{"c":9,"c":"x","d":"y"}}"#,
        r#"{"a":[1,2],"b":{"c":"y","d":"y"}}"#,
        r#"{"a":[1,1,1],"b":{"c":"x","d":"y"}}"#,
    ];
    for (m, want) in cases.iter().zip(want) {
        let mut input = doc.clone();
        apply(&mut input, m);
        assert_eq!(String::from_utf8_lossy(&input), want, "{m:?}");
    }
}
