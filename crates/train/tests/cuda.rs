//! `TrainValue` on the CUDA engine (through its host emulation, so without a GPU): reading
//! gives the data on the host, `update_all` downloads, updates on the host and uploads and
//! changes nothing when the update fails; an optimizer step runs on the device and equals the
//! host optimizer bit for bit; clipping on the device is the host's; one-element values come
//! back together (the live-buffer and transfer accounting over a run is `cuda_memory.rs`).
#![allow(clippy::unwrap_used)]

use std::borrow::Cow;
use torchlean_engine_cuda::{emulation_ready, EmuF32};
use torchlean_train::{EngineOptimizer, OptimConfig, OptimError, Optimizer, Param, TrainValue};

fn tensor(data: &[f32]) -> EmuF32 {
    emulation_ready().unwrap();
    EmuF32::from_host([data.len()], data).unwrap()
}

#[test]
fn read_is_the_row_major_data_on_the_host() {
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
    let r: Result<(), OptimError> = EmuF32::update_all(&mut [&mut a], |s| {
        s[0][0] = 99.0;
        Err(OptimError::DuplicateParam { name: "w".into() })
    });
    assert!(matches!(r, Err(OptimError::DuplicateParam { .. })));
    assert_eq!(a.to_host().unwrap(), [1.0, 2.0]);
}

/// Every optimizer and option that changes the arithmetic: SGD (plain, weight decay, momentum
/// with dampening, Nesterov), Adam (coupled decay, amsgrad), AdamW, RMSprop (centered,
/// momentum, both), Adagrad (decay, initial accumulator).
fn every_update() -> Vec<OptimConfig> {
    let sgd = |momentum, dampening, weight_decay, nesterov| OptimConfig::Sgd {
        lr: 0.1,
        momentum,
        dampening,
        weight_decay,
        nesterov,
    };
    let rms = |momentum, centered| OptimConfig::RmsProp {
        lr: 0.01,
        alpha: 0.4,
        eps: 1e-8,
        weight_decay: 0.1,
        momentum,
        centered,
    };
    vec![
        sgd(0.0, 0.0, 0.0, false),
        sgd(0.0, 0.0, 0.01, false),
        sgd(0.9, 0.1, 0.01, false),
        sgd(0.9, 0.0, 0.0, true),
        OptimConfig::adam(0.01),
        OptimConfig::Adam {
            lr: 0.01,
            betas: (0.3, 0.99),
            eps: 1e-8,
            weight_decay: 0.1,
            amsgrad: true,
        },
        OptimConfig::adamw(0.01),
        OptimConfig::rmsprop(0.01),
        rms(0.0, true),
        rms(0.5, false),
        rms(0.5, true),
        OptimConfig::Adagrad {
            lr: 0.1,
            lr_decay: 0.1,
            weight_decay: 0.1,
            initial_accumulator_value: 0.2,
            eps: 1e-10,
        },
    ]
}

#[test]
fn device_optimizer_steps_equal_the_host_optimizer_bit_for_bit() {
    // the same rule (`UpdateRule`) run by the kernel and by the host loops: identical bits,
    // state included, over three steps (SGD's momentum buffer is created at the first)
    let n = 300;
    let p0: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
    let grads: Vec<Vec<f32>> = (0..3)
        .map(|s| (0..n).map(|i| ((i + 7 * s) as f32 * 0.11).cos()).collect())
        .collect();
    for config in every_update() {
        let mut host = Optimizer::<f32>::new(config.clone()).unwrap();
        let mut p_host = p0.clone();
        let mut device = EngineOptimizer::<EmuF32>::new(config.clone()).unwrap();
        let mut p_device = tensor(&p0);
        for g in &grads {
            let grad = Param {
                name: "w",
                value: &mut p_host,
                grad: g,
            };
            host.step(0.01, &mut [grad]).unwrap();
            let g_device = tensor(g);
            device
                .step(0.01, &mut [("w", &mut p_device, &g_device)])
                .unwrap();
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&p_device.to_host().unwrap()),
            bits(&p_host),
            "{config:?}"
        );
        let (host_state, device_state) = (host.state(), device.host_state().unwrap());
        assert_eq!(device_state["w"].step, host_state["w"].step, "{config:?}");
        assert_eq!(
            device_state["w"].buffers.keys().collect::<Vec<_>>(),
            host_state["w"].buffers.keys().collect::<Vec<_>>(),
            "{config:?}"
        );
        for (name, data) in &host_state["w"].buffers {
            assert_eq!(
                bits(&device_state["w"].buffers[name]),
                bits(data),
                "{config:?}: {name}"
            );
        }
    }
}

#[test]
fn a_device_step_with_a_mismatched_gradient_changes_nothing() {
    let mut opt = EngineOptimizer::<EmuF32>::new(OptimConfig::adam(0.1)).unwrap();
    let mut p = tensor(&[1.0, 2.0]);
    let g = tensor(&[1.0, 2.0, 3.0]);
    let err = opt.step(0.1, &mut [("w", &mut p, &g)]).unwrap_err();
    assert!(
        matches!(
            err,
            OptimError::Length {
                want: 2,
                got: 3,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(p.to_host().unwrap(), [1.0, 2.0]);
    assert!(opt.host_state().unwrap().is_empty());
}

/// Gradients of several sizes (one longer than a reduction block, one empty), seeded.
fn gradients(scale: f32) -> Vec<Vec<f32>> {
    [5usize, 1, 3000, 0, 17]
        .iter()
        .enumerate()
        .map(|(k, &n)| {
            (0..n)
                .map(|i| scale * (((i * 37 + k * 11) % 101) as f32 / 50.0 - 1.0))
                .collect()
        })
        .collect()
}

/// The one element of `v`, read as the trainers read it.
fn scalar<V: TrainValue>(v: &V) -> f64 {
    V::scalars(&[v]).unwrap()[0]
}

/// `clip_to_norm` on the device against the host engine's (f64 sums, in place): the same
/// norm to f32 rounding, the same factor to f32 rounding, gradients scaled alike; a factor of
/// 1 or more leaves them bit for bit; a NaN gradient makes every gradient NaN, as PyTorch's
/// clamp lets NaN through.
#[test]
fn clipping_on_the_device_is_the_host_clipping() {
    use torchlean_spec::Tensor;
    for (scale, max_norm) in [
        (1.0, Some(1.0)),
        (1.0, Some(1e6)),
        (0.01, None),
        (3.0, Some(0.5)),
    ] {
        let grads = gradients(scale);
        let mut host: Vec<Tensor<f32>> = grads
            .iter()
            .map(|g| Tensor::new([g.len()], g.clone()).unwrap())
            .collect();
        let mut device: Vec<EmuF32> = grads.iter().map(|g| tensor(g)).collect();
        let want = Tensor::<f32>::clip_to_norm(&mut host.iter_mut().collect::<Vec<_>>(), max_norm)
            .unwrap();
        let got =
            EmuF32::clip_to_norm(&mut device.iter_mut().collect::<Vec<_>>(), max_norm).unwrap();
        let (want, got) = (scalar(&want), scalar(&got));
        assert!(
            (got - want).abs() <= 1e-6 * want,
            "{scale} {max_norm:?}: {got} against {want}"
        );
        let clipped = max_norm.is_some_and(|m| want > m);
        for ((h, d), g) in host.iter().zip(&device).zip(&grads) {
            let d = d.to_host().unwrap();
            if clipped {
                for (x, y) in h.data().iter().zip(&d) {
                    assert!((x - y).abs() <= 1e-6 * x.abs(), "{x} against {y}");
                }
            } else {
                assert_eq!(
                    &d, g,
                    "{scale} {max_norm:?}: a factor of 1 changed a gradient"
                );
            }
        }
    }
    let mut poisoned = gradients(1.0);
    poisoned[2][7] = f32::NAN;
    let mut device: Vec<EmuF32> = poisoned.iter().map(|g| tensor(g)).collect();
    let norm = EmuF32::clip_to_norm(&mut device.iter_mut().collect::<Vec<_>>(), Some(1.0)).unwrap();
    assert!(scalar(&norm).is_nan());
    for d in &device {
        assert!(d.to_host().unwrap().iter().all(|x| x.is_nan()));
    }
    let none = EmuF32::clip_to_norm(&mut [], Some(1.0)).unwrap();
    assert_eq!(scalar(&none), 0.0);
}

#[test]
fn scalars_come_back_in_order_and_refuse_a_value_of_more_than_one_element() {
    let (a, b) = (tensor(&[2.5]), tensor(&[-1.0]));
    let sum = torchlean_runtime::GradValue::add(a.clone(), b.clone()).unwrap();
    assert_eq!(EmuF32::scalars(&[&a, &sum, &b]).unwrap(), [2.5, 1.5, -1.0]);
    assert_eq!(EmuF32::scalars(&[]).unwrap(), Vec::<f64>::new());
    let two = tensor(&[1.0, 2.0]);
    assert!(EmuF32::scalars(&[&a, &two]).is_err());
}
