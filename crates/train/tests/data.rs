//! The data module from outside: CSV errors name the file, the line and the column; good CSV
//! parses as written; the embedded digits match facts known from scikit-learn; splits,
//! epoch orders and batches are seeded, reproducible and cover every row.

use std::collections::BTreeSet;
use std::num::NonZeroUsize;

use proptest::prelude::*;
use torchlean_train::data::{batches, epoch_order, Dataset, Standardizer};
use torchlean_train::TrainError;

// ---------------------------------------------------------------------------------------------
// CSV: rejected inputs

/// Parses `text` (origin `bad.csv`, label column `y`) and asserts that it is rejected with a
/// message holding `bad.csv`, `line {line}` and every string in `want`.
fn check_rejected(text: &str, line: usize, want: &[&str]) {
    let err = match Dataset::from_csv_str(text, "bad.csv", "y") {
        Ok(d) => panic!("expected an error for {text:?}, got {} rows", d.len()),
        Err(e) => e,
    };
    assert!(
        matches!(err, TrainError::Csv { line: l, .. } if l == line),
        "expected a CSV error at line {line} for {text:?}, got {err:?}"
    );
    let msg = err.to_string();
    let at = format!("bad.csv, line {line}:");
    assert!(msg.contains(&at), "expected {at:?} in: {msg}");
    for w in want {
        assert!(msg.contains(w), "expected {w:?} in: {msg}");
    }
}

#[test]
fn bad_csv_is_rejected_with_file_line_and_column() {
    #[rustfmt::skip]
    let cases: &[(&str, &str, usize, &[&str])] = &[
        ("ragged, too few fields",
         "a,b,y\n1,2,0\n3,4\n", 3, &["got 2 fields, the header has 3", "column 3 `y`"]),
        ("ragged, too many fields",
         "a,b,y\n1,2,0,9\n", 2, &["got 4 fields, the header has 3", "column 3 `y`"]),
        ("ragged after a blank line",
         "a,b,y\n\n1,2,0\n\n1\n", 5, &["got 1 fields", "column 2 `b`"]),
        ("a word in a feature",
         "a,b,y\n1,2,0\n1,two,1\n", 3, &["column 2 `b`", "`two` is not a number"]),
        ("an empty feature cell",
         "a,b,y\n1,,0\n", 2, &["column 2 `b`", "empty cell"]),
        ("a quoted empty feature cell",
         "a,b,y\n\"\",1,0\n", 2, &["column 1 `a`", "empty cell"]),
        ("infinity",
         "a,b,y\n1,inf,0\n", 2, &["column 2 `b`", "`inf` is not a finite number"]),
        ("NaN, with spaces kept in the message",
         "a,b,y\n1,2,0\n NaN ,2,1\n", 3, &["column 1 `a`", "` NaN ` is not a finite number"]),
        ("a number with a unit",
         "y,a\n0,3kg\n", 2, &["column 2 `a`", "`3kg`"]),
        ("an empty label",
         "a,y\n1,0\n2,\n", 3, &["column 2 `y`", "the label is empty"]),
        ("a blank label",
         "y,a\n  ,1\n", 2, &["column 1 `y`", "the label is empty"]),
        ("no data rows",
         "a,y\n", 1, &["not followed by any data row"]),
        ("no data rows, only blank lines",
         "\r\na,y\r\n\r\n  \r\n", 2, &["not followed by any data row"]),
        ("an empty file",
         "", 1, &["empty", "no header"]),
        ("a blank file",
         "\n \n", 1, &["no header"]),
        ("a duplicate header name",
         "a,b,a,y\n1,2,3,0\n", 1, &["duplicate header name", "column 3 `a`", "column 1"]),
        ("a duplicate header name after trimming",
         "a, y ,y\n1,2,0\n", 1, &["duplicate", "column 3 `y`", "column 2"]),
        ("no such label column",
         "a,b,label\n1,2,0\n", 1, &["no column named `y`", "`a`, `b`, `label`"]),
        ("only the label column",
         "y\n0\n", 1, &["no feature columns", "`y`"]),
        // the csv crate recovers from bad quoting; the recovered row then fails
        ("an unterminated quote in a row (it runs to the end: two fields)",
         "a,b,y\n1,2,0\n1,\"2,0\n3,4,1\n", 3, &["got 2 fields, the header has 3", "column 3 `y`"]),
        ("an unterminated quote in the header (its one field takes the rows)",
         "a,\"b,y\n1,2,0\n", 1, &["no column named `y`", "`a`, `b,y"]),
        ("text after a closing quote is kept",
         "a,b,y\n\"1\"x,2,0\n", 2, &["column 1 `a`", "`1x` is not a number"]),
        ("a quote after blanks is text",
         "a,b,y\n  \"1\" ,2,0\n", 2, &["column 1 `a`", "is not a number"]),
        ("a too large integer label",
         "a,y\n1,0\n2,70000\n", 3, &["column 2 `y`", "`70000`", "65536 classes"]),
        ("an integer label past u64",
         "a,y\n1,99999999999999999999999\n", 2, &["column 2 `y`"]),
        ("an error after a multi-line quoted field names the field's own line",
         "a,b,y\n\"x\ny\",2,0\n", 2, &["column 1 `a`", "is not a number"]),
        ("the line after a multi-line quoted field",
         "a,b,y\n1,2,\"lab\nel\"\n3,x,0\n", 4, &["column 2 `b`", "`x`"]),
    ];
    for &(what, text, line, want) in cases {
        eprintln!("case: {what}");
        check_rejected(text, line, want);
    }
}

#[test]
fn an_unreadable_file_names_the_path_and_keeps_the_io_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("missing.csv");
    let err = Dataset::from_csv(&path, "y").expect_err("no such file");
    assert!(err.to_string().contains("missing.csv"), "{err}");
    let source = std::error::Error::source(&err)
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .expect("the io::Error is the source");
    assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
}

#[test]
fn errors_in_a_file_name_its_path() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("mine.csv");
    std::fs::write(&path, "a,y\n1,0\nx,1\n").expect("write");
    let err = Dataset::from_csv(&path, "y").expect_err("x is not a number");
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("{}, line 3:", path.display())),
        "{msg}"
    );
}

// ---------------------------------------------------------------------------------------------
// CSV: accepted inputs

#[test]
fn quoted_fields_crlf_whitespace_and_trailing_blank_lines() {
    let text =
        "\"x, first\",y,\"z \"\"q\"\"\"\r\n 1.5 ,\"cat, black\",-2e-1\r\n\"3\",dog,  4\r\n\r\n\r\n";
    let d = Dataset::from_csv_str(text, "t", "y").expect("valid");
    assert_eq!(d.feature_names(), ["x, first", "z \"q\""]);
    assert_eq!(d.len(), 2);
    assert_eq!(d.features(), 2);
    assert_eq!(d.data(), &[1.5, -0.2, 3.0, 4.0]);
    assert_eq!(d.class_names(), ["cat, black", "dog"]);
    assert_eq!(d.labels(), &[0, 1]);
    assert_eq!(d.image(), None);
    assert_eq!(d.origin(), "t");
}

#[test]
fn string_labels_are_sorted_and_mapped() {
    let d = Dataset::from_csv_str(
        "y,a\nversicolor,1\nsetosa,2\nvirginica,3\nsetosa,4\n",
        "t",
        "y",
    )
    .expect("valid");
    assert_eq!(d.class_names(), ["setosa", "versicolor", "virginica"]);
    assert_eq!(d.labels(), &[1, 0, 2, 0]);
    assert_eq!(d.class_counts(), vec![2, 1, 1]);
}

#[test]
fn one_non_integer_label_makes_all_labels_strings() {
    // "10" sorts before "2" as a string
    let d = Dataset::from_csv_str("a,y\n1,2\n2,10\n3,x\n", "t", "y").expect("valid");
    assert_eq!(d.class_names(), ["10", "2", "x"]);
    assert_eq!(d.labels(), &[1, 0, 2]);
}

#[test]
fn integer_labels_are_class_ids() {
    let d = Dataset::from_csv_str("a,y\n1, 3\n2,0\n3,\"1\"\n", "t", "y").expect("valid");
    assert_eq!(d.classes(), 4);
    assert_eq!(d.class_names(), ["0", "1", "2", "3"]);
    assert_eq!(d.labels(), &[3, 0, 1]);
    assert_eq!(d.class_counts(), vec![1, 1, 0, 1]);
}

#[test]
fn the_label_column_can_be_anywhere() {
    let d = Dataset::from_csv_str("a,y,b\n1,0,2\n3,1,4\n", "t", "y").expect("valid");
    assert_eq!(d.feature_names(), ["a", "b"]);
    assert_eq!(d.row(1), Some(&[3.0, 4.0][..]));
    assert_eq!(d.row(2), None);
    assert_eq!(d.row(usize::MAX), None);
}

#[test]
fn a_square_feature_count_is_not_an_image_unless_said() {
    let d = Dataset::from_csv_str("a,b,c,d,y\n1,2,3,4,0\n", "t", "y").expect("valid");
    assert_eq!(d.image(), None);
    assert_eq!(d.with_image(2, 2).expect("4 = 2x2").image(), Some((2, 2)));
}

// ---------------------------------------------------------------------------------------------
// The digits: facts computed with numpy from scikit-learn 1.9.1's `digits.csv.gz`
// (`np.loadtxt(..., delimiter=",")`), written here by hand.

#[test]
fn digits_match_scikit_learn() {
    let d = Dataset::digits().expect("embedded data parses");
    assert_eq!(d.len(), 1797);
    assert_eq!(d.features(), 64);
    assert_eq!(d.classes(), 10);
    assert_eq!(d.image(), Some((8, 8)));
    let names: Vec<String> = (0..10).map(|c| c.to_string()).collect();
    assert_eq!(d.class_names(), names.as_slice());
    assert_eq!(
        d.class_counts(),
        vec![178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
    );
    assert_eq!(d.feature_names()[0], "pixel_0_0");
    assert_eq!(d.feature_names()[63], "pixel_7_7");
    // row 0 is a zero
    #[rustfmt::skip]
    let row0: [u8; 64] = [
        0, 0, 5, 13, 9, 1, 0, 0,  0, 0, 13, 15, 10, 15, 5, 0,
        0, 3, 15, 2, 0, 11, 8, 0,  0, 4, 12, 0, 0, 8, 8, 0,
        0, 5, 8, 0, 0, 9, 8, 0,  0, 4, 11, 0, 1, 12, 7, 0,
        0, 2, 14, 5, 10, 12, 0, 0,  0, 0, 6, 13, 10, 0, 0, 0,
    ];
    let want: Vec<f64> = row0.iter().map(|&p| f64::from(p) / 16.0).collect();
    assert_eq!(d.row(0), Some(want.as_slice()));
    assert_eq!(d.labels()[0], 0);
    assert_eq!(d.labels()[1796], 8);
    // the pixel sum over the whole set is 561718 (all exact in f64 after / 16)
    let sum: f64 = d.data().iter().sum();
    assert_eq!(sum, 561718.0 / 16.0);
    let (lo, hi) = d
        .data()
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &v| {
            (l.min(v), h.max(v))
        });
    assert_eq!((lo, hi), (0.0, 1.0));
}

#[test]
fn digits_constant_pixels_keep_scale_one() {
    // pixels 0, 32 and 39 are 0 in every image
    let d = Dataset::digits().expect("embedded");
    let s = Standardizer::fit(&d);
    for j in [0, 32, 39] {
        assert_eq!((s.mean()[j], s.scale()[j]), (0.0, 1.0), "pixel {j}");
    }
    let non_unit = s.scale().iter().filter(|&&v| v != 1.0).count();
    assert_eq!(non_unit, 61);
    let mut z = d.clone();
    z.standardize(&s).expect("same features");
    assert!(z.data().iter().all(|v| v.is_finite()));
}

// ---------------------------------------------------------------------------------------------
// Splits

#[test]
fn the_digits_split_is_disjoint_covering_stratified_and_seeded() {
    let d = Dataset::digits().expect("embedded");
    let (kept, out) = d.split(0.2, 7).expect("split");
    // round(0.2 * 1797) = round(359.4) = 359
    assert_eq!(out.len(), 359);
    assert_eq!(kept.len(), 1797 - 359);
    // each class holds out floor(0.2 * count) (35 or 36), plus one for the classes with the
    // largest remainders until 359: floors are 35 36 35 36 36 36 36 35 34 36 = 355; the
    // remainders (0.6 0.4 0.4 0.6 0.2 0.4 0.2 0.8 0.8 0.0) give classes 7, 8, 0, 3 one more
    assert_eq!(
        out.class_counts(),
        vec![36, 36, 35, 37, 36, 36, 36, 36, 35, 36]
    );
    // rows are identified by their contents and label: check disjoint and covering by
    // re-finding each row of the halves among the original rows
    let key = |ds: &Dataset, i: usize| {
        let mut k: Vec<u64> = ds
            .row(i)
            .expect("row")
            .iter()
            .map(|v| v.to_bits())
            .collect();
        k.push(ds.labels()[i] as u64);
        k
    };
    let mut all: Vec<Vec<u64>> = (0..d.len()).map(|i| key(&d, i)).collect();
    let mut halves: Vec<Vec<u64>> = (0..kept.len())
        .map(|i| key(&kept, i))
        .chain((0..out.len()).map(|i| key(&out, i)))
        .collect();
    all.sort();
    halves.sort();
    assert_eq!(
        all, halves,
        "the halves together are the data set (as a multiset)"
    );

    let (kept2, out2) = d.split(0.2, 7).expect("split");
    assert_eq!((&kept2, &out2), (&kept, &out), "same seed, same split");
    let (_, out3) = d.split(0.2, 8).expect("split");
    assert_ne!(out3, out, "another seed, another split");
}

#[test]
fn a_split_of_row_indices_is_a_partition() {
    // the feature is the row index, so the halves' features name the rows they took
    let mut text = String::from("i,y\n");
    for i in 0..50 {
        text.push_str(&format!("{i},{}\n", ["a", "b", "c"][i % 3]));
    }
    let d = Dataset::from_csv_str(&text, "t", "y").expect("valid");
    let (kept, out) = d.split(0.3, 1).expect("split");
    let ids = |ds: &Dataset| -> Vec<usize> { ds.data().iter().map(|&v| v as usize).collect() };
    let (k, o) = (ids(&kept), ids(&out));
    assert_eq!(o.len(), 15); // round(0.3 * 50)
    assert!(k.windows(2).all(|w| w[0] < w[1]), "kept rows stay in order");
    assert!(
        o.windows(2).all(|w| w[0] < w[1]),
        "held-out rows stay in order"
    );
    let ks: BTreeSet<usize> = k.iter().copied().collect();
    assert!(o.iter().all(|i| !ks.contains(i)), "disjoint");
    let mut both: Vec<usize> = k.into_iter().chain(o).collect();
    both.sort();
    assert_eq!(both, (0..50).collect::<Vec<_>>(), "covering");
    // labels still follow their rows
    for ds in [&kept, &out] {
        for i in 0..ds.len() {
            let row = ds.data()[i] as usize;
            assert_eq!(ds.labels()[i], row % 3, "row {row}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Epoch orders and batches

/// Golden orders from this independent Python replay of the formula documented on
/// `epoch_order` (run with python3; it prints the four tuples below):
///
/// ```python
/// M = (1 << 64) - 1
/// def splitmix64(x):
///     z = (x + 0x9E3779B97F4A7C15) & M
///     z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
///     z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
///     return z ^ (z >> 31)
/// def epoch_order(n, seed, epoch):
///     s = splitmix64(seed ^ splitmix64(epoch))
///     order = list(range(n))
///     for k, i in enumerate(range(n - 1, 0, -1)):
///         r = splitmix64((s + k) & M)
///         j = (r * (i + 1)) >> 64
///         order[i], order[j] = order[j], order[i]
///     return order
/// for args in [(10, 0, 0), (10, 0, 1), (10, 42, 0), (16, 2**64 - 1, 7)]:
///     print(args, epoch_order(*args))
/// ```
#[test]
fn epoch_order_matches_an_independent_replay() {
    assert_eq!(epoch_order(10, 0, 0), [7, 8, 6, 9, 3, 0, 5, 4, 2, 1]);
    assert_eq!(epoch_order(10, 0, 1), [4, 1, 2, 8, 5, 9, 7, 0, 3, 6]);
    assert_eq!(epoch_order(10, 42, 0), [8, 2, 0, 3, 6, 4, 9, 5, 1, 7]);
    assert_eq!(
        epoch_order(16, u64::MAX, 7),
        [7, 1, 10, 5, 4, 14, 0, 2, 13, 11, 15, 8, 9, 3, 12, 6]
    );
}

#[test]
fn epoch_orders_are_permutations_reproducible_and_differ_by_epoch() {
    let n = 1797;
    let orders: Vec<Vec<usize>> = (0..5).map(|e| epoch_order(n, 11, e)).collect();
    for (e, o) in orders.iter().enumerate() {
        let mut sorted = o.clone();
        sorted.sort();
        assert_eq!(
            sorted,
            (0..n).collect::<Vec<_>>(),
            "epoch {e} is a permutation"
        );
        assert_eq!(
            o,
            &epoch_order(n, 11, e as u64),
            "epoch {e} is reproducible"
        );
        assert_ne!(o, &(0..n).collect::<Vec<_>>(), "epoch {e} is shuffled");
    }
    for a in 0..orders.len() {
        for b in a + 1..orders.len() {
            assert_ne!(orders[a], orders[b], "epochs {a} and {b}");
        }
    }
    assert_ne!(epoch_order(n, 12, 0), orders[0], "another seed");
    assert!(epoch_order(0, 1, 2).is_empty());
    assert_eq!(epoch_order(1, 1, 2), [0]);
}

#[test]
fn batches_keep_the_last_partial_batch() {
    let order = [4, 2, 0, 1, 3];
    let b: Vec<&[usize]> = batches(&order, NonZeroUsize::new(2).expect("2")).collect();
    assert_eq!(b, [&[4, 2][..], &[0, 1], &[3]]);
    let b: Vec<&[usize]> = batches(&order, NonZeroUsize::new(9).expect("9")).collect();
    assert_eq!(b, [&order[..]]);
    assert_eq!(batches(&[], NonZeroUsize::MIN).count(), 0);
}

#[test]
fn a_digits_batch_is_a_tensor_of_rows() {
    let d = Dataset::digits().expect("embedded");
    let (x, y) = d.batch(&[1796, 0]).expect("in range");
    assert_eq!(x.shape().dims(), &[2, 64]);
    assert_eq!(&x.data()[64..], d.row(0).expect("row 0"));
    assert_eq!(&x.data()[..64], d.row(1796).expect("last row"));
    assert_eq!(y, vec![8, 0]);
    let err = d.batch(&[1797]).expect_err("past the end");
    assert!(err.to_string().contains("row 1797"), "{err}");
}

proptest! {
    #[test]
    fn batches_of_an_epoch_cover_every_index_once(
        n in 0usize..300, batch in 1usize..40, seed: u64, epoch in 0u64..1000
    ) {
        let order = epoch_order(n, seed, epoch);
        let batch = NonZeroUsize::new(batch).expect("at least 1");
        let parts: Vec<&[usize]> = batches(&order, batch).collect();
        prop_assert_eq!(parts.len(), n.div_ceil(batch.get()));
        for (i, p) in parts.iter().enumerate() {
            let last = i + 1 == parts.len();
            let full = p.len() == batch.get();
            let partial = !p.is_empty() && p.len() <= batch.get();
            prop_assert!(if last { partial } else { full }, "batch {} has {} rows", i, p.len());
        }
        let mut seen = vec![0u32; n];
        for &i in parts.iter().flat_map(|p| p.iter()) {
            prop_assert!(i < n);
            seen[i] += 1;
        }
        prop_assert!(seen.iter().all(|&c| c == 1));
    }
}
