//! Initializers stored as ONNX external data: read from the model's directory by
//! `import_file`, each problem naming the tensor.
#![allow(clippy::unwrap_used)]

mod common;

use common::{model_with_inputs, node};
use prost::Message;
use torchlean_onnx::proto::{tensor_proto::DataLocation, ModelProto, StringStringEntryProto};
use torchlean_onnx::{import_file, import_onnx, OnnxError};
use torchlean_spec::Tensor;

/// `y = x + b` with `b [3]` stored externally at `location` (`offset` 8, `length` 12).
fn model_with_external_bias(location: &str) -> Vec<u8> {
    let bytes = model_with_inputs(
        &[("x", &[3])],
        vec![node("add", "Add", &["x", "b"], &["y"])],
        vec![common::floats("b", &[3], &[0.0; 3])],
        &["y"],
        17,
    );
    let mut m = ModelProto::decode(bytes.as_slice()).unwrap();
    let b = &mut m.graph.as_mut().unwrap().initializer[0];
    b.raw_data = None;
    b.data_location = Some(DataLocation::External as i32);
    let entry = |k: &str, v: &str| StringStringEntryProto {
        key: Some(k.into()),
        value: Some(v.into()),
    };
    b.external_data = vec![
        entry("location", location),
        entry("offset", "8"),
        entry("length", "12"),
    ];
    m.encode_to_vec()
}

/// The data file: 8 bytes of something else, then the bias `[0.5, -1, 2]` as f32.
fn data_file() -> Vec<u8> {
    let mut d = vec![0xAB; 8];
    for v in [0.5f32, -1.0, 2.0] {
        d.extend_from_slice(&v.to_le_bytes());
    }
    d
}

#[test]
fn an_external_initializer_is_read_from_beside_the_model() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("weights.bin"), data_file()).unwrap();
    let path = dir.path().join("model.onnx");
    std::fs::write(&path, model_with_external_bias("weights.bin")).unwrap();
    let imported = import_file(&path, &[]).unwrap();
    assert!(imported.param("b").is_some(), "the bias is a parameter");
    let x = Tensor::new([3], vec![1.0, 1.0, 1.0]).unwrap();
    let out = torchlean_ir::denote(&imported.graph, &imported.payload, &x).unwrap();
    assert_eq!(out.data(), [1.5, 0.0, 3.0]);
    // from bytes alone there is no directory: the problem says how to import it
    let e = import_onnx(&model_with_external_bias("weights.bin")).unwrap_err();
    assert!(e.to_string().contains("import_file"), "{e}");
}

#[test]
fn a_bad_location_or_range_names_the_tensor() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("short.bin"), [0u8; 10]).unwrap();
    for (location, want) in [
        (
            "../outside.bin",
            "not a relative path inside the model's directory",
        ),
        (
            "/etc/passwd",
            "not a relative path inside the model's directory",
        ),
        ("missing.bin", "cannot read"),
        ("short.bin", "past its end"),
    ] {
        let path = dir.path().join("model.onnx");
        std::fs::write(&path, model_with_external_bias(location)).unwrap();
        match import_file(&path, &[]) {
            Err(OnnxError::Problems(ps)) => {
                assert_eq!(ps.len(), 1, "{ps:?}");
                assert_eq!(ps[0].node, "b");
                assert!(
                    ps[0].message.contains(want),
                    "{location}: {}",
                    ps[0].message
                );
            }
            other => panic!("{location}: {other:?}"),
        }
    }
}

#[test]
fn a_model_file_that_cannot_be_read_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let e = import_file(&dir.path().join("absent.onnx"), &[]).unwrap_err();
    assert!(matches!(e, OnnxError::Read { .. }), "{e:?}");
    assert!(e.to_string().starts_with("cannot read "), "{e}");
}
