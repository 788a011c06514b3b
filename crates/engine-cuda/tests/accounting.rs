//! The emulated engine's accounting: the reduce and norm families free every temporary they
//! allocate (partial sums, batch statistics), and reading back what was uploaded moves
//! nothing until the buffer is written. In a binary of their own, taking turns: the counters
//! are per process, and another test allocating or transferring meanwhile would move them.
#![allow(clippy::unwrap_used)]

use torchlean_engine_cuda::{
    emulation_ready, live_buffers, transfers, Emu, EmuF32, Transfers, HOST_COPY_MAX,
};
use torchlean_runtime::{forward, vjp, GradValue, Kernels, Saved};
use torchlean_spec::{Op, Reduction, Tensor};

static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn moved(since: Transfers) -> (usize, usize) {
    let now = transfers::<Emu>();
    (now.uploads - since.uploads, now.downloads - since.downloads)
}

#[test]
fn an_upload_is_read_back_without_a_transfer_until_it_is_written() {
    emulation_ready().unwrap();
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let start = transfers::<Emu>();
    let a = EmuF32::from_host([3], &[1.0, 2.0, 3.0]).unwrap();
    let b = EmuF32::from_host([3], &[10.0, 20.0, 30.0]).unwrap();
    assert_eq!(moved(start), (2, 0));
    let before = transfers::<Emu>();
    assert_eq!(a.to_host().unwrap(), [1.0, 2.0, 3.0]);
    assert_eq!(a.deep_copy().unwrap().to_host().unwrap(), [1.0, 2.0, 3.0]);
    assert_eq!(moved(before), (0, 0), "reading an upload back moved data");
    // written in place (`a` owns its buffer): the host copy is gone, the new values come down
    let sum = GradValue::add(a, b).unwrap();
    let before = transfers::<Emu>();
    assert_eq!(sum.to_host().unwrap(), [11.0, 22.0, 33.0]);
    assert_eq!(moved(before), (0, 1));
    // a computed value, and an upload too large to keep, are downloaded
    let big = vec![0.5f32; HOST_COPY_MAX + 1];
    let big = EmuF32::from_host([big.len()], &big).unwrap();
    let before = transfers::<Emu>();
    assert_eq!(big.to_host().unwrap().len(), HOST_COPY_MAX + 1);
    assert_eq!(moved(before), (0, 1));
}

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
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
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
