//! The run-time-sized layers and the typed ones are one layer system: the same parameters
//! (names and values) and the same outputs, bit for bit, for the same seeds; a sequence sized
//! at run time prints the PyTorch module that loads its `state_dict`.
#![allow(clippy::unwrap_used)]

use torchlean_nn::layers::{self, Conv2d, Flatten, Linear};
use torchlean_nn::{seq, DynConv2d, DynLayer, DynLinear, DynSequential, Layer, Mode, Ops, Session};
use torchlean_spec::{PoolKind, Tensor, UnaryOp};

fn input(shape: &[usize]) -> Tensor<f64> {
    let n: usize = shape.iter().product();
    Tensor::new(
        shape.to_vec(),
        (0..n).map(|i| ((i * 5 % 13) as f64 - 6.0) / 7.0).collect(),
    )
    .unwrap()
}

/// A small CNN sized at run time: conv, ReLU, max pool, flatten, linear.
fn dynamic_cnn() -> DynSequential {
    DynSequential::new(vec![
        DynLayer::Conv2d(DynConv2d::new(1, 3, 3, 1, 1, 7).unwrap()),
        DynLayer::Activation(UnaryOp::Relu),
        DynLayer::Pool2d {
            kind: PoolKind::Max,
            kernel: 2,
            stride: 2,
            padding: 0,
        },
        DynLayer::Flatten,
        DynLayer::Linear(DynLinear::new(12, 4, 8).unwrap()),
    ])
}

#[test]
fn a_sequence_sized_at_run_time_is_the_typed_one() {
    let typed = seq![
        Conv2d::<1, 3, 3>::new(1, 1, 7).unwrap(),
        layers::relu(),
        layers::max_pool2d::<3, 2>(2, 0),
        Flatten::<3, 12>,
        Linear::<12, 4>::new(8).unwrap(),
    ];
    let dynamic = dynamic_cnn();
    assert_eq!(dynamic.positions(), typed.positions());
    let run = |f: &dyn Fn(&mut Session<Tensor<f64>>, &torchlean_nn::Var) -> torchlean_nn::Var| {
        let mut s = Session::<Tensor<f64>>::new();
        let x = s.input("x", &input(&[2, 1, 4, 4]), false).unwrap();
        let y = f(&mut s, &x);
        (s.value(&y).unwrap().clone(), s.params().clone())
    };
    let (want, want_params) = run(&|s, x| typed.forward(s, x, Mode::Train).unwrap());
    let (got, got_params) = run(&|s, x| dynamic.forward(s, x, Mode::Train).unwrap());
    assert!(got.bit_eq(&want));
    let names: Vec<&String> = got_params.keys().collect();
    assert_eq!(names, ["0.bias", "0.weight", "4.bias", "4.weight"]);
    for (name, value) in &got_params {
        assert!(value.bit_eq(&want_params[name]), "{name}");
    }
    let named: Vec<String> = dynamic.named_params().into_iter().map(|(n, _)| n).collect();
    assert_eq!(named, ["0.weight", "0.bias", "4.weight", "4.bias"]);
}

#[test]
fn a_sequence_prints_the_pytorch_module_that_loads_its_parameters() {
    assert_eq!(
        dynamic_cnn().torch_expr(),
        "nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), \
         nn.Flatten(), nn.Linear(12, 4))"
    );
    assert_eq!(
        dynamic_cnn().describe(),
        "Conv2d(1 → 3, 3×3, stride 1, padding 1), relu, MaxPool2d(2×2), Flatten, Linear(12 → 4)"
    );
}

#[test]
fn a_layer_that_does_not_fit_its_input_fails_naming_it_when_it_runs() {
    // 3 channels of 2×2 after the pool are 12 features; a Linear(10, 4) does not take them
    let mut layers = dynamic_cnn().layers().to_vec();
    layers[4] = DynLayer::Linear(DynLinear::new(10, 4, 8).unwrap());
    let model = DynSequential::new(layers);
    let mut s = Session::<Tensor<f64>>::new();
    let x = s.input("x", &input(&[2, 1, 4, 4]), false).unwrap();
    let e = model.forward(&mut s, &x, Mode::Eval).unwrap_err();
    let text = e.to_string();
    assert!(text.contains("linear") && text.contains("12"), "{text}");
}
