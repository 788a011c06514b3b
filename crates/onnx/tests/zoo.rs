//! The model zoo (issue 15's acceptance): PyTorch models exported to ONNX by
//! `tools/onnx_zoo/make_zoo.py`, committed with onnxruntime's and PyTorch's outputs and
//! PyTorch's gradients. Each is imported, run forward and backward on the CPU engine and on the
//! reference engine, and compared: f64 models at 1e-9 (relative to the largest magnitude, at
//! least 1), f32
//! models at 1e-4 against the f32 runs and at 1e-9 against PyTorch's float64 run of the same
//! (exactly representable) weights and input. No Python is needed.

use std::collections::BTreeMap;
use torchlean_compiled::{run_grad, GradResult};
use torchlean_engine_cpu::CpuF64;
use torchlean_ir::{denote, Graph, TensorData};
use torchlean_onnx::{import_onnx, ElemType, Imported};
use torchlean_spec::Tensor;

const ZOO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/zoo");

struct Fixture {
    model: Vec<u8>,
    tensors: BTreeMap<String, Tensor<f64>>,
    dtype: String,
}

fn fixture(name: &str) -> Fixture {
    let model = std::fs::read(format!("{ZOO}/{name}.onnx")).expect("the zoo's model is committed");
    let st_bytes = std::fs::read(format!("{ZOO}/{name}.safetensors"))
        .expect("the zoo's tensors are committed");
    let (_, meta) = safetensors::SafeTensors::read_metadata(&st_bytes).expect("a safetensors file");
    let dtype = meta
        .metadata()
        .as_ref()
        .and_then(|m| m.get("dtype").cloned())
        .expect("make_zoo.py writes the dtype");
    let st = safetensors::SafeTensors::deserialize(&st_bytes).expect("a safetensors file");
    let mut tensors = BTreeMap::new();
    for (key, view) in st.tensors() {
        let data = match TensorData::from_le_bytes(view.dtype(), view.data()) {
            Some(TensorData::F64(v)) => v,
            Some(TensorData::F32(v)) => v.into_iter().map(f64::from).collect(),
            // token ids (the GPT's input), exact in f64
            None if view.dtype() == safetensors::Dtype::I64 => view
                .data()
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().expect("8-byte chunks")) as f64)
                .collect(),
            _ => panic!("{name}: {key} is neither F32, F64 nor I64"),
        };
        let t = Tensor::new(view.shape().to_vec(), data).expect("data matches its shape");
        tensors.insert(key, t);
    }
    Fixture {
        model,
        tensors,
        dtype,
    }
}

impl Fixture {
    fn get(&self, key: &str) -> &Tensor<f64> {
        self.tensors
            .get(key)
            .unwrap_or_else(|| panic!("fixture tensor {key}"))
    }
}

/// The largest difference as a fraction of the largest magnitude of `want`, or of 1 when that
/// is smaller (a gradient that is zero in exact arithmetic, such as the key bias's through a
/// softmax, is rounding noise in both runs).
fn rel_err(got: &Tensor<f64>, want: &Tensor<f64>) -> f64 {
    assert_eq!(got.shape(), want.shape(), "shapes");
    let scale = want.data().iter().fold(1f64, |m, x| m.max(x.abs()));
    got.data()
        .iter()
        .zip(want.data())
        .fold(0f64, |m, (a, b)| m.max((a - b).abs()))
        / scale
}

fn close(what: &str, got: &Tensor<f64>, want: &Tensor<f64>, tol: f64) {
    let e = rel_err(got, want);
    assert!(e <= tol, "{what}: relative error {e:e} > {tol:e}");
}

/// Checks one engine's run against the fixture.
fn check_run(name: &str, engine: &str, f: &Fixture, imp: &Imported, r: &GradResult) {
    let at = |what: &str| format!("{name} ({engine}): {what}");
    let native_tol = if f.dtype == "f64" { 1e-9 } else { 1e-4 };
    close(
        &at("output vs onnxruntime"),
        &r.output,
        f.get("output_ort"),
        native_tol,
    );
    close(
        &at("output vs PyTorch"),
        &r.output,
        f.get("output_torch"),
        native_tol,
    );
    // a model over token ids has no input gradient
    let ids = !f.tensors.contains_key("grad_input");
    if !ids {
        close(
            &at("input gradient vs PyTorch"),
            r.grad_input(),
            f.get("grad_input"),
            native_tol,
        );
    }
    let f64_run = f.dtype == "f32";
    if f64_run {
        close(
            &at("output vs PyTorch f64"),
            &r.output,
            f.get("output_torch_f64"),
            1e-9,
        );
        if !ids {
            close(
                &at("input gradient vs PyTorch f64"),
                r.grad_input(),
                f.get("grad_input_f64"),
                1e-9,
            );
        }
    }
    let mut params = 0;
    for (key, want) in &f.tensors {
        let Some(pname) = key.strip_prefix("grad.") else {
            continue;
        };
        params += 1;
        let p = imp
            .param(pname)
            .unwrap_or_else(|| panic!("{}", at(&format!("parameter {pname} not in the payload"))));
        let got = r
            .grad_payload
            .entry(p.node)
            .and_then(|e| e.tensor(p.tensor))
            .unwrap_or_else(|| panic!("{}", at(&format!("no gradient for {pname}"))));
        close(&at(&format!("gradient of {pname}")), got, want, native_tol);
        if f64_run {
            close(
                &at(&format!("gradient of {pname} vs PyTorch f64")),
                got,
                f.get(&format!("grad_f64.{pname}")),
                1e-9,
            );
        }
    }
    assert!(params > 0, "{name}: the fixture has parameter gradients");
}

fn check_model(name: &str, expected_dtype: ElemType) {
    let f = fixture(name);
    let imp = import_onnx(&f.model).unwrap_or_else(|e| panic!("{name}: {:?}", e.lines()));
    assert_eq!(imp.elem_type, expected_dtype, "{name}: input element type");
    // the graph as written (`torchlean import`) reads back as the same graph (batch norm's
    // eps is in the payload, not the node)
    let again = Graph::from_json(&imp.graph.to_json()).expect("the imported graph re-parses");
    assert_eq!(again, imp.graph, "{name}: graph JSON round trip");
    let x = f.get("input");
    let seed = f.get("seed");
    let cpu = run_grad::<CpuF64>(&imp.graph, &imp.payload, x, Some(seed))
        .unwrap_or_else(|e| panic!("{name}: cpu: {e}"));
    check_run(name, "cpu", &f, &imp, &cpu);
    let reference = run_grad::<Tensor<f64>>(&imp.graph, &imp.payload, x, Some(seed))
        .unwrap_or_else(|e| panic!("{name}: reference: {e}"));
    check_run(name, "reference", &f, &imp, &reference);
    // the IR's own denotation agrees with the lowered graph
    let out = denote::<f64>(&imp.graph, &imp.payload, x).expect("the imported graph denotes");
    close(
        &format!("{name}: denotation vs cpu"),
        &out,
        &cpu.output,
        1e-12,
    );
}

#[test]
fn mlp_matches_onnxruntime_and_pytorch() {
    check_model("mlp", ElemType::F64);
}

#[test]
fn cnn_matches_onnxruntime_and_pytorch() {
    check_model("cnn", ElemType::F32);
}

/// The digits classifier `torchlean train --from` fine-tunes (exported at batch 1).
#[test]
fn digits_cnn_matches_onnxruntime_and_pytorch() {
    check_model("digits_cnn", ElemType::F32);
}

#[test]
fn residual_block_matches_onnxruntime_and_pytorch() {
    check_model("residual", ElemType::F32);
}

#[test]
fn transformer_encoder_block_matches_onnxruntime_and_pytorch() {
    check_model("encoder", ElemType::F32);
}

#[test]
fn gpt_over_token_ids_matches_onnxruntime_and_pytorch() {
    check_model("gpt", ElemType::F32);
}

/// Depthwise convolutions (`group` = channels), ReLU6 as `Clip`, inverted residuals.
#[test]
fn mobilenet_v2_matches_onnxruntime_and_pytorch() {
    check_model("mobilenet_v2", ElemType::F32);
}

/// Depthwise 3×3 and 5×5 convolutions, SiLU as `x·Sigmoid(x)`, squeeze-and-excitation.
#[test]
fn efficientnet_b0_matches_onnxruntime_and_pytorch() {
    check_model("efficientnet_b0", ElemType::F32);
}

/// A patchify stem, 7×7 depthwise convolutions, channels-last layer norms through
/// `Transpose`, layer scale.
#[test]
fn convnext_tiny_matches_onnxruntime_and_pytorch() {
    check_model("convnext_tiny", ElemType::F32);
}
