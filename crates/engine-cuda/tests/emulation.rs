//! The host emulation runs the kernel sources: the device plumbing (upload, download, fills,
//! accumulation, buffer accounting) on `EmuF32`.
#![allow(clippy::unwrap_used)]

use torchlean_engine_cuda::{emulation_ready, live_buffers, Emu, EmuF32};
use torchlean_runtime::{GradValue, Kernels};
use torchlean_spec::{Shape, Tensor};

/// The live-buffer counters are process-wide: tests of this binary that allocate hold this
/// lock, so one test's reading never sees another's buffers.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn the_emulation_builds_and_round_trips_values() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    emulation_ready().unwrap();
    let t = Tensor::new([2, 3], vec![1.0, -2.5, 3.0, 0.0, -0.0, 1e-3]).unwrap();
    let x = EmuF32::from_f64(&t).unwrap();
    let back = x.to_f64().unwrap();
    assert_eq!(back.shape(), t.shape());
    for (a, b) in back.data().iter().zip(t.data()) {
        assert_eq!(*a, f64::from(*b as f32));
    }
    let full = EmuF32::full(&Shape::from([1000]), 0.5).unwrap();
    assert!(full.to_host().unwrap().iter().all(|&v| v == 0.5));
    let sum = full.clone().add(full).unwrap();
    assert!(sum.to_host().unwrap().iter().all(|&v| v == 1.0));
}

#[test]
fn buffers_are_counted_while_they_live_and_freed_by_their_last_holder() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    emulation_ready().unwrap();
    let before = live_buffers::<Emu>();
    let x = EmuF32::full(&Shape::from([10]), 1.0).unwrap();
    let view = x.clone().retag(Shape::from([2, 5])).unwrap();
    assert!(view.shares_storage_with(&x));
    let during = live_buffers::<Emu>();
    assert!(during.buffers > before.buffers);
    GradValue::drop(x);
    GradValue::drop(view);
    let after = live_buffers::<Emu>();
    assert!(
        after.buffers < during.buffers,
        "{before:?} {during:?} {after:?}"
    );
}
