//! The reduce and norm families free every temporary they allocate (partial sums, batch
//! statistics): the live-buffer count returns to its baseline once the results are dropped.
//! One test in its own binary, so no other test allocates meanwhile.
#![allow(clippy::unwrap_used)]

use torchlean_engine_cuda::{emulation_ready, live_buffers, Emu, EmuF32};
use torchlean_runtime::{forward, vjp, Kernels, Saved};
use torchlean_spec::{Op, Reduction, Tensor};

fn tensor(shape: &[usize]) -> EmuF32 {
    let n: usize = shape.iter().product();
    let data = (0..n)
        .map(|i| ((i * 37) % 101) as f64 / 50.0 - 1.0)
        .collect();
    EmuF32::from_f64(&Tensor::new(shape, data).unwrap()).unwrap()
}

#[test]
fn a_forward_and_backward_leave_only_their_results_and_then_nothing() {
    emulation_ready().unwrap();
    let x = tensor(&[4, 3, 30, 30]);
    let gamma = tensor(&[3]);
    let beta = tensor(&[3]);
    let flat = tensor(&[70_000]);
    let logits = tensor(&[600, 7]);
    let ids =
        EmuF32::from_f64(&Tensor::new([600], (0..600).map(|i| (i % 7) as f64).collect()).unwrap())
            .unwrap();
    let before = live_buffers::<Emu>();
    let bn = Op::BatchNormTrain {
        channels: 3,
        eps: None,
    };
    let ce = Op::CrossEntropy {
        reduction: Reduction::Mean,
    };
    let runs: [(Op, Vec<&EmuF32>); 4] = [
        (bn, vec![&x, &gamma, &beta]),
        (Op::Sum, vec![&flat]),
        (Op::ReduceMean { axis: 2 }, vec![&x]),
        (ce, vec![&logits, &ids]),
    ];
    for (op, args) in &runs {
        let y = forward::<EmuF32>(op, args).unwrap();
        let cot = EmuF32::full(y.shape(), 0.5).unwrap();
        let grads = vjp::<EmuF32>(op, &Saved::for_op(op, args, &y), &cot).unwrap();
        // the results: the output, the cotangent, one gradient per differentiable operand
        let held = live_buffers::<Emu>().buffers - before.buffers;
        let results = 2 + grads.into_vec().iter().flatten().count();
        assert_eq!(held, results, "{op:?}: temporaries outlived the call");
    }
    assert_eq!(live_buffers::<Emu>(), before);
}
