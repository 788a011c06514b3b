//! `TrainValue` on the CUDA engine (through its host emulation, so without a GPU): reading
//! downloads, `update_all` downloads, updates on the host and uploads, changes nothing when
//! the update fails (the live-buffer accounting over a run is `cuda_memory.rs`).
#![allow(clippy::unwrap_used)]

use std::borrow::Cow;
use torchlean_engine_cuda::{emulation_ready, EmuF32};
use torchlean_train::{TrainError, TrainValue};

fn tensor(data: &[f32]) -> EmuF32 {
    emulation_ready().unwrap();
    EmuF32::from_host([data.len()], data).unwrap()
}

#[test]
fn read_is_the_row_major_data_downloaded() {
    let x = tensor(&[1.0, -2.0, 0.5]);
    let r = x.read().unwrap();
    assert!(matches!(r, Cow::Owned(_)));
    assert_eq!(&*r, &[1.0, -2.0, 0.5]);
}

#[test]
fn update_all_writes_every_value_and_leaves_a_sharer_alone() {
    let mut a = tensor(&[1.0, 2.0]);
    let mut b = tensor(&[10.0, 20.0, 30.0]);
    let old_a = a.clone();
    let r = EmuF32::update_all(&mut [&mut a, &mut b], |s| {
        assert_eq!(s.len(), 2);
        s[0][1] = 5.0;
        s[1][0] = -1.0;
        Ok::<_, torchlean_runtime::RuntimeError>(7)
    })
    .unwrap();
    assert_eq!(r, 7);
    assert_eq!(a.to_host().unwrap(), [1.0, 5.0]);
    assert_eq!(b.to_host().unwrap(), [-1.0, 20.0, 30.0]);
    assert_eq!(old_a.to_host().unwrap(), [1.0, 2.0]);
    assert_eq!(torchlean_runtime::GradValue::shape(&b).dims(), &[3]);
}

#[test]
fn a_failed_update_changes_nothing_on_the_device() {
    let mut a = tensor(&[1.0, 2.0]);
    let r: Result<(), TrainError> = EmuF32::update_all(&mut [&mut a], |s| {
        s[0][0] = 99.0;
        Err(TrainError::DuplicateParam { name: "w".into() })
    });
    assert!(matches!(r, Err(TrainError::DuplicateParam { .. })));
    assert_eq!(a.to_host().unwrap(), [1.0, 2.0]);
}
