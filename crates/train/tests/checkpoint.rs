//! Checkpoints: bit-exact round trips, the byte layout, atomic writes, clear errors for bad
//! files, `check_names`, and (when `TORCHLEAN_PYTHON` names an interpreter with torch and
//! safetensors) loading into a PyTorch `Sequential` and back.

#![allow(clippy::unwrap_used)]

use crate::common;
use std::collections::BTreeMap;
use std::path::Path;
use torchlean_train::checkpoint::{ShapeMismatch, OPTIMIZER_PREFIX};
use torchlean_train::{Checkpoint, NamedTensor, TensorData, TrainError};

fn f32s(shape: &[usize], v: Vec<f32>) -> NamedTensor {
    NamedTensor {
        shape: shape.to_vec(),
        data: TensorData::F32(v),
    }
}

fn f64s(shape: &[usize], v: Vec<f64>) -> NamedTensor {
    NamedTensor {
        shape: shape.to_vec(),
        data: TensorData::F64(v),
    }
}

/// Bitwise equality (NaN payloads, signed zeros and subnormals included).
fn bit_eq(a: &Checkpoint, b: &Checkpoint) -> bool {
    a.metadata == b.metadata
        && a.tensors.len() == b.tensors.len()
        && a.tensors
            .iter()
            .zip(&b.tensors)
            .all(|((ka, ta), (kb, tb))| {
                ka == kb
                    && ta.shape == tb.shape
                    && match (&ta.data, &tb.data) {
                        (TensorData::F32(x), TensorData::F32(y)) => x
                            .iter()
                            .map(|v| v.to_bits())
                            .eq(y.iter().map(|v| v.to_bits())),
                        (TensorData::F64(x), TensorData::F64(y)) => x
                            .iter()
                            .map(|v| v.to_bits())
                            .eq(y.iter().map(|v| v.to_bits())),
                        _ => false,
                    }
            })
}

fn awkward() -> Checkpoint {
    let mut c = Checkpoint::default();
    c.tensors.insert(
        "0.weight".into(),
        f32s(
            &[2, 3],
            vec![
                1.5,
                -0.0,
                f32::from_bits(0x7fc0_1234), // a NaN with a payload
                f32::from_bits(1),           // the smallest subnormal
                f32::MAX,
                f32::NEG_INFINITY,
            ],
        ),
    );
    c.tensors
        .insert("0.bias".into(), f32s(&[2], vec![0.1, -3.25]));
    c.tensors.insert("scalar".into(), f32s(&[], vec![7.0]));
    c.tensors.insert("empty".into(), f64s(&[0, 3], vec![]));
    c.tensors.insert(
        "optimizer.state.0.weight.exp_avg".into(),
        f64s(
            &[3, 2],
            vec![
                0.1,
                f64::from_bits(1),
                -0.0,
                f64::MAX,
                f64::from_bits(0xfff8_0000_0000_0042),
                1e-300,
            ],
        ),
    );
    c
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

#[test]
fn tensors_round_trip_bit_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.safetensors");
    let c = awkward();
    c.save(&path).unwrap();
    let back = Checkpoint::load(&path).unwrap();
    assert!(bit_eq(&c, &back), "{c:?}\n{back:?}");
    assert_eq!(names_in(dir.path()), ["c.safetensors"]);
}

#[test]
fn metadata_round_trips_and_fixes_the_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = awkward();
    c.metadata.insert(
        "config".into(),
        r#"{"lr":0.1,"model":"mlp","layers":[64,32]}"#.into(),
    );
    c.metadata.insert("step".into(), "1200".into());
    c.metadata.insert("epoch".into(), "3".into());
    c.metadata
        .insert("rng".into(), "{\"seed\":7,\"draws\":98304}".into());
    c.metadata
        .insert("note".into(), "ünïcode, \"quotes\", \\ and\nnewline".into());
    c.metadata.insert("empty".into(), String::new());
    for i in 0..16 {
        c.metadata.insert(format!("extra{i}"), i.to_string());
    }
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    c.save(&a).unwrap();
    c.save(&b).unwrap();
    let back = Checkpoint::load(&a).unwrap();
    assert!(bit_eq(&c, &back));
    // same contents, same bytes (the metadata's order does not follow a HashMap's seed)
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());

    // no metadata reads back as no metadata
    let plain = awkward();
    plain.save(&a).unwrap();
    assert!(Checkpoint::load(&a).unwrap().metadata.is_empty());
}

#[test]
fn the_file_is_the_safetensors_layout() {
    // one F32 tensor [1, -2]: 8-byte little-endian header length, the JSON header padded
    // with spaces to a multiple of 8, then the data little-endian; the metadata holds only
    // the checksum, zlib.crc32 of these very bytes with its 8 digits as zeros (computed in
    // Python: `zlib.crc32(struct.pack("<Q", 112) + header_with_zeros + b"   " +
    // struct.pack("<ff", 1, -2))`)
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.safetensors");
    let mut c = Checkpoint::default();
    c.tensors.insert("w".into(), f32s(&[2], vec![1.0, -2.0]));
    c.save(&path).unwrap();
    let header = concat!(
        r#"{"__metadata__":{"torchlean.checksum":"crc32:2f515937"},"#,
        r#""w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#
    )
    .as_bytes();
    assert_eq!(header.len(), 109);
    let mut want = 112u64.to_le_bytes().to_vec();
    want.extend_from_slice(header);
    want.extend_from_slice(b"   ");
    want.extend_from_slice(&[0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0]);
    assert_eq!(std::fs::read(&path).unwrap(), want);
}

#[test]
fn a_failing_write_leaves_the_old_file_and_no_temporary() {
    let dir = tempfile::tempdir().unwrap();
    let c = awkward();

    // a name the target allows but its temporary (`.<name>.<pid>-<n>.tmp`) is too long for
    let long = dir.path().join(format!("{}.st", "c".repeat(247)));
    std::fs::write(&long, b"the old file").unwrap();
    let e = c.save(&long).unwrap_err();
    assert!(
        matches!(&e, TrainError::Write { path, .. } if path == &long),
        "{e:?}"
    );
    assert_eq!(std::fs::read(&long).unwrap(), b"the old file");
    assert_eq!(names_in(dir.path()).len(), 1);

    // the target is a directory: the temporary is written, the rename fails, it is removed
    let target = dir.path().join("is-a-dir");
    std::fs::create_dir_all(target.join("inside")).unwrap();
    let e = c.save(&target).unwrap_err();
    assert!(e.to_string().contains("is-a-dir"), "{e}");
    assert!(target.join("inside").is_dir());
    assert_eq!(names_in(dir.path()).len(), 2);

    // the parent does not exist
    let orphan = dir.path().join("no-such-dir").join("c.safetensors");
    let e = c.save(&orphan).unwrap_err();
    assert!(e.to_string().contains("no-such-dir"), "{e}");
    assert_eq!(names_in(dir.path()).len(), 2);

    // a tensor whose data does not fill its shape: nothing is written
    let good = dir.path().join("good.safetensors");
    c.save(&good).unwrap();
    let before = std::fs::read(&good).unwrap();
    let mut bad = c.clone();
    bad.tensors
        .insert("short".into(), f32s(&[2, 2], vec![1.0; 3]));
    let e = bad.save(&good).unwrap_err();
    assert!(
        matches!(&e, TrainError::CheckpointShape { name, len: 3, .. } if name == "short"),
        "{e:?}"
    );
    assert_eq!(std::fs::read(&good).unwrap(), before);

    // a directory we may not write in (root may write anyway: then this part says so)
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let ro = dir.path().join("read-only");
        std::fs::create_dir(&ro).unwrap();
        let target = ro.join("c.safetensors");
        c.save(&target).unwrap();
        let before = std::fs::read(&target).unwrap();
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
        if std::fs::write(ro.join("probe"), b"").is_ok() {
            eprintln!("skipped: the read-only directory case (this user writes anyway, root?)");
        } else {
            let e = changed(&c).save(&target).unwrap_err();
            assert!(matches!(&e, TrainError::Write { .. }), "{e:?}");
            assert_eq!(std::fs::read(&target).unwrap(), before);
            assert_eq!(names_in(&ro), ["c.safetensors"]);
        }
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// A different but valid checkpoint, so a save that succeeded would change the file.
fn changed(c: &Checkpoint) -> Checkpoint {
    let mut c = c.clone();
    c.metadata.insert("step".into(), "2".into());
    c
}

#[test]
fn truncated_and_garbage_files_are_clear_errors_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("full.safetensors");
    let mut c = awkward();
    c.metadata.insert("step".into(), "5".into());
    c.save(&path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let header = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let cut = dir.path().join("cut.safetensors");
    for len in [
        0,
        3,
        8,
        9,
        8 + header / 2,
        8 + header - 1,
        8 + header,
        8 + header + 5,
        bytes.len() - 1,
    ] {
        std::fs::write(&cut, &bytes[..len]).unwrap();
        let e = Checkpoint::load(&cut).unwrap_err();
        if len >= 8 + header {
            // the whole header is there: it says how long the file should be
            let full = bytes.len() as u64;
            assert!(
                matches!(&e, TrainError::CheckpointTruncated { path, len: l, expected, .. }
                    if path == &cut && *l == len as u64 && *expected == full),
                "cut at {len}: {e:?}"
            );
            let msg = e.to_string();
            assert!(
                msg.contains("cut.safetensors")
                    && msg.contains("truncated")
                    && msg.contains(&format!("{len} bytes"))
                    && msg.contains(&full.to_string()),
                "{msg}"
            );
        } else {
            assert!(
                matches!(&e, TrainError::CheckpointFormat { path, .. } if path == &cut),
                "cut at {len}: {e:?}"
            );
            let msg = e.to_string();
            assert!(
                msg.contains("cut.safetensors") && msg.contains("safetensors"),
                "{msg}"
            );
        }
        assert!(std::error::Error::source(&e).is_some());
    }

    let garbage = dir.path().join("garbage.bin");
    std::fs::write(&garbage, b"this is not a safetensors file, only some text").unwrap();
    let e = Checkpoint::load(&garbage).unwrap_err();
    assert!(matches!(&e, TrainError::CheckpointFormat { .. }), "{e:?}");
    assert!(e.to_string().contains("garbage.bin"), "{e}");

    // a plausible header length, then something that is not the header
    let mut fake = 16u64.to_le_bytes().to_vec();
    fake.extend_from_slice(b"{\"w\": not json!}");
    std::fs::write(&garbage, &fake).unwrap();
    let e = Checkpoint::load(&garbage).unwrap_err();
    assert!(matches!(&e, TrainError::CheckpointFormat { .. }), "{e:?}");

    let missing = dir.path().join("missing.safetensors");
    let e = Checkpoint::load(&missing).unwrap_err();
    assert!(matches!(&e, TrainError::CheckpointRead { .. }), "{e:?}");
    assert!(e.to_string().contains("missing.safetensors"), "{e}");
}

#[test]
fn every_single_bit_flip_is_refused_naming_the_file() {
    // a small checkpoint, so every bit of it can be flipped: header length, header JSON,
    // metadata, padding, tensor data, the checksum itself
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("good.safetensors");
    let mut c = Checkpoint::default();
    c.tensors
        .insert("w".into(), f32s(&[2, 2], vec![1.0, -2.0, 0.5, 3.0]));
    c.tensors.insert("b".into(), f64s(&[1], vec![0.25]));
    c.metadata.insert("step".into(), "7".into());
    c.save(&path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let bad = dir.path().join("flipped.safetensors");
    let mut by_kind = BTreeMap::new();
    for i in 0..bytes.len() {
        for bit in 0..8 {
            let mut b = bytes.clone();
            b[i] ^= 1 << bit;
            std::fs::write(&bad, &b).unwrap();
            let e = Checkpoint::load_checked(&bad)
                .err()
                .unwrap_or_else(|| panic!("byte {i} bit {bit} flipped was accepted"));
            assert!(e.to_string().contains("flipped.safetensors"), "{e}");
            let kind = format!("{e:?}");
            *by_kind
                .entry(kind[..kind.find([' ', '(']).unwrap_or(kind.len())].to_string())
                .or_insert(0) += 1;
        }
    }
    // the data and most of the header are caught by the checksum alone
    assert!(by_kind["CheckpointChecksum"] > 8 * 24, "{by_kind:?}");
    // a flip in the tensor data: the message says what is wrong
    let mut b = bytes.clone();
    let last = b.len() - 1;
    b[last] ^= 0x10;
    std::fs::write(&bad, &b).unwrap();
    let e = Checkpoint::load(&bad).unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(
            &e,
            TrainError::CheckpointChecksum {
                computed: Some(_),
                ..
            }
        ) && msg.contains("corrupt")
            && msg.contains("checksum"),
        "{msg}"
    );
    // the good file is untouched and loads
    assert!(bit_eq(&c, &Checkpoint::load_checked(&path).unwrap()));
}

#[test]
fn a_file_without_a_checksum_loads_but_not_where_one_is_required() {
    // what PyTorch's `save_file` writes: valid safetensors, no torchlean checksum
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plain.safetensors");
    let data = [1.0f32, 2.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect::<Vec<u8>>();
    let view =
        safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![2], &data).unwrap();
    std::fs::write(&path, safetensors::serialize([("w", view)], &None).unwrap()).unwrap();
    let back = Checkpoint::load(&path).unwrap();
    assert_eq!(back.tensors["w"].data, TensorData::F32(vec![1.0, 2.0]));
    let e = Checkpoint::load_checked(&path).unwrap_err();
    assert!(
        matches!(&e, TrainError::CheckpointUnchecked { path: p } if p == &path),
        "{e:?}"
    );
    assert!(e.to_string().contains("plain.safetensors"), "{e}");
}

#[test]
fn an_unsupported_dtype_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ints.safetensors");
    let data = [1i32, 2, 3]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect::<Vec<u8>>();
    let view =
        safetensors::tensor::TensorView::new(safetensors::Dtype::I32, vec![3], &data).unwrap();
    std::fs::write(
        &path,
        safetensors::serialize([("counts", view)], &None).unwrap(),
    )
    .unwrap();
    let e = Checkpoint::load(&path).unwrap_err();
    assert!(
        matches!(&e, TrainError::CheckpointDtype { name, dtype: safetensors::Dtype::I32, .. } if name == "counts"),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("ints.safetensors") && msg.contains("I32"),
        "{msg}"
    );
}

fn expect(list: &[(&str, &[usize])]) -> Vec<(String, Vec<usize>)> {
    list.iter()
        .map(|(n, s)| (n.to_string(), s.to_vec()))
        .collect()
}

#[test]
fn check_names_lists_every_problem_at_once() {
    let mut c = Checkpoint::default();
    c.tensors
        .insert("0.weight".into(), f32s(&[4, 3], vec![0.0; 12]));
    c.tensors.insert("0.bias".into(), f32s(&[4], vec![0.0; 4]));
    c.tensors
        .insert("3.weight".into(), f32s(&[2, 4], vec![0.0; 8]));
    c.tensors.insert("extra".into(), f32s(&[], vec![0.0]));
    c.tensors.insert(
        "optimizer.state.0.weight.exp_avg".into(),
        f64s(&[4, 3], vec![0.0; 12]),
    );
    let model = expect(&[
        ("0.weight", &[4, 2]),
        ("0.bias", &[4]),
        ("2.weight", &[2, 4]),
        ("2.bias", &[2]),
    ]);
    let e = c.check_names(&model, "").unwrap_err();
    let TrainError::CheckpointNames {
        missing,
        unexpected,
        mismatched,
        ..
    } = &e
    else {
        panic!("{e:?}")
    };
    assert_eq!(missing, &["2.weight", "2.bias"]);
    assert_eq!(unexpected, &["3.weight", "extra"]); // the optimizer's tensor is out of scope
    assert_eq!(
        mismatched,
        &[ShapeMismatch {
            name: "0.weight".into(),
            checkpoint: vec![4, 3],
            expected: vec![4, 2],
        }]
    );
    let msg = e.to_string();
    for part in [
        "outside `optimizer.`",
        "missing key(s): \"2.weight\", \"2.bias\"",
        "unexpected key(s): \"3.weight\", \"extra\"",
        "size mismatch for \"0.weight\": shape [4, 3] in the checkpoint, [4, 2] expected",
    ] {
        assert!(msg.contains(part), "{part:?} not in:\n{msg}");
    }

    // the optimizer's names, by prefix
    let opt = expect(&[("optimizer.state.0.weight.exp_avg", &[4, 3])]);
    c.check_names(&opt, OPTIMIZER_PREFIX).unwrap();
    let e = c.check_names(&[], OPTIMIZER_PREFIX).unwrap_err();
    assert!(
        e.to_string().contains("under `optimizer.`")
            && e.to_string()
                .contains("unexpected key(s): \"optimizer.state.0.weight.exp_avg\""),
        "{e}"
    );

    // an exact match passes
    c.tensors.remove("3.weight");
    c.tensors.remove("extra");
    c.tensors
        .insert("0.weight".into(), f32s(&[4, 2], vec![0.0; 8]));
    c.tensors
        .insert("2.weight".into(), f32s(&[2, 4], vec![0.0; 8]));
    c.tensors.insert("2.bias".into(), f32s(&[2], vec![0.0; 2]));
    c.check_names(&model, "").unwrap();
}

#[test]
fn pytorch_loads_the_parameters_strictly_and_writes_them_back() {
    let Some(py) = common::python() else { return };
    let script = common::script("tools/pytorch/load_checkpoint.py");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mlp.safetensors");
    let resaved = dir.path().join("resaved.safetensors");

    // Sequential(Linear(3, 4), ReLU, Linear(4, 2)) under its state_dict names
    #[rustfmt::skip]
    let w1 = vec![
        1.0, 0.0, 0.0,
        0.0, 1.0, 0.0,
        0.0, 0.0, 1.0,
        1.0, 1.0, 1.0,
    ];
    let b1 = vec![0.5, -1.0, 0.0, 0.25];
    #[rustfmt::skip]
    let w2 = vec![
        1.0, 2.0, 3.0, 4.0,
        -1.0, 0.0, 0.0, 2.0,
    ];
    let b2 = vec![0.0, 1.0];
    let mut c = Checkpoint::default();
    c.tensors.insert("0.weight".into(), f32s(&[4, 3], w1));
    c.tensors.insert("0.bias".into(), f32s(&[4], b1));
    c.tensors.insert("2.weight".into(), f32s(&[2, 4], w2));
    c.tensors.insert("2.bias".into(), f32s(&[2], b2));
    c.tensors.insert(
        "optimizer.state.0.weight.exp_avg".into(),
        f64s(
            &[4, 3],
            vec![
                0.1,
                5e-324,
                -0.0,
                1e-300,
                1.0 / 3.0,
                2.0,
                3.0,
                4.0,
                5.0,
                6.0,
                7.0,
                -8.5,
            ],
        ),
    );
    c.metadata
        .insert("config".into(), r#"{"lr":0.1,"optimizer":"adam"}"#.into());
    c.metadata.insert("step".into(), "12".into());
    c.metadata.insert("epoch".into(), "3".into());
    c.save(&path).unwrap();

    let report = common::run_json(
        &py,
        &script,
        &[
            path.as_os_str(),
            "3".as_ref(),
            "4".as_ref(),
            "2".as_ref(),
            "[1.0, 2.0, -3.0]".as_ref(),
            resaved.as_os_str(),
        ],
    );

    // by hand: h = relu(W1 x + b1) = relu([1.5, 1, -3, 0.25]) = [1.5, 1, 0, 0.25];
    // y = W2 h + b2 = [1.5 + 2 + 0 + 1, -1.5 + 0.5 + 1] = [4.5, 0]
    assert_eq!(report["output"], serde_json::json!([4.5, 0.0]));
    assert_eq!(
        report["state_dict"],
        serde_json::json!(["0.weight", "0.bias", "2.weight", "2.bias"])
    );
    let mut meta: BTreeMap<String, String> =
        serde_json::from_value(report["metadata"].clone()).unwrap();
    // the checksum is in the file PyTorch read, and Python's zlib agrees with it
    let checksum = meta
        .remove(torchlean_train::checkpoint::CHECKSUM_KEY)
        .unwrap();
    assert_eq!(report["checksum_by_zlib"], serde_json::json!(checksum));
    assert_eq!(meta, c.metadata);
    let seen = report["tensors"].as_object().unwrap();
    assert_eq!(seen.len(), c.tensors.len());
    for (name, t) in &c.tensors {
        let s = &seen[name];
        assert_eq!(s["shape"], serde_json::json!(t.shape), "{name}");
        let values: Vec<f64> = serde_json::from_value(s["values"].clone()).unwrap();
        match &t.data {
            TensorData::F32(v) => {
                assert_eq!(s["dtype"], "float32", "{name}");
                let got: Vec<u32> = values.iter().map(|&x| (x as f32).to_bits()).collect();
                assert_eq!(
                    got,
                    v.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                    "{name}"
                );
            }
            TensorData::F64(v) => {
                assert_eq!(s["dtype"], "float64", "{name}");
                let got: Vec<u64> = values.iter().map(|x| x.to_bits()).collect();
                assert_eq!(
                    got,
                    v.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                    "{name}"
                );
            }
        }
    }

    // and PyTorch's own file (state_dict + the optimizer tensor + metadata) reads back equal
    let back = Checkpoint::load(&resaved).unwrap();
    assert!(bit_eq(&c, &back), "{c:?}\n{back:?}");
    let names: Vec<(String, Vec<usize>)> = expect(&[
        ("0.weight", &[4, 3]),
        ("0.bias", &[4]),
        ("2.weight", &[2, 4]),
        ("2.bias", &[2]),
    ]);
    back.check_names(&names, "").unwrap();
}
