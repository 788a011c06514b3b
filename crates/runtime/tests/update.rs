//! `UpdateRule::apply` against PyTorch's update rules written out element by element (the
//! formulas of `torch.optim`'s single-tensor loops, in f64), for every option that changes the
//! arithmetic, at a length below and one above the SIMD dispatch threshold; and
//! `TrainValue::apply_update` on the reference engine doing what `apply` does on its slices;
//! `clip_grad_norm_`'s parts by hand, and `TrainValue::clip_to_norm` on the reference engine.

use torchlean_runtime::{
    clip_coefficient, clip_grad_norm, sum_of_squares, total_norm, AdamDecay, SgdMomentum,
    TrainValue, UpdateRule,
};
use torchlean_spec::Tensor;

/// Deterministic values in about [-1, 1] (positive where `positive`: squared averages).
fn values(n: usize, salt: u64, positive: bool) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let x = ((i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ salt) >> 11;
            let v = (x as f64 / (1u64 << 53) as f64) * 2.0 - 1.0;
            if positive {
                v.abs() + 0.1
            } else {
                v
            }
        })
        .collect()
}

/// A rule's state before the step: positive, the first buffer at least 2 (a squared average
/// above any squared mean of the others, as centered RMSprop's state always is).
fn state(rule: &UpdateRule, n: usize, salt: u64) -> Vec<Vec<f64>> {
    (0..rule.buffer_count())
        .map(|k| {
            let lift = if k == 0 { 2.0 } else { 0.0 };
            values(n, salt + k as u64, true)
                .into_iter()
                .map(|v| v + lift)
                .collect()
        })
        .collect()
}

/// One step by the written-out formulas: parameters and buffers after it.
fn reference(
    rule: &UpdateRule,
    p: &[f64],
    g: &[f64],
    bufs: &[Vec<f64>],
) -> (Vec<f64>, Vec<Vec<f64>>) {
    let (mut p, mut bufs) = (p.to_vec(), bufs.to_vec());
    for i in 0..p.len() {
        let mut gi = g[i];
        match *rule {
            UpdateRule::Sgd {
                neg_lr,
                weight_decay,
                momentum,
            } => {
                gi += weight_decay.unwrap_or(0.0) * p[i];
                if let Some(m) = momentum {
                    let b = &mut bufs[0][i];
                    *b = if m.first {
                        gi
                    } else {
                        m.momentum * *b + m.one_minus_dampening * gi
                    };
                    gi = if m.nesterov { gi + m.momentum * *b } else { *b };
                }
                p[i] += neg_lr * gi;
            }
            UpdateRule::Adam {
                decay,
                one_minus_beta1,
                beta2,
                one_minus_beta2,
                bias_correction2_sqrt,
                eps,
                neg_step_size,
                amsgrad,
            } => {
                match decay {
                    AdamDecay::None => {}
                    AdamDecay::Coupled(wd) => gi += wd * p[i],
                    AdamDecay::Decoupled(f) => p[i] *= f,
                }
                let m = bufs[0][i] + one_minus_beta1 * (gi - bufs[0][i]);
                let v = beta2 * bufs[1][i] + one_minus_beta2 * gi * gi;
                bufs[0][i] = m;
                bufs[1][i] = v;
                let v = if amsgrad {
                    bufs[2][i] = bufs[2][i].max(v);
                    bufs[2][i]
                } else {
                    v
                };
                let denom = v.sqrt() / bias_correction2_sqrt + eps;
                p[i] += neg_step_size * m / denom;
            }
            UpdateRule::RmsProp {
                weight_decay,
                alpha,
                one_minus_alpha,
                eps,
                momentum,
                centered,
                lr,
            } => {
                gi += weight_decay.unwrap_or(0.0) * p[i];
                bufs[0][i] = alpha * bufs[0][i] + one_minus_alpha * gi * gi;
                let mut avg = bufs[0][i];
                if centered {
                    let ga = bufs[1][i] + one_minus_alpha * (gi - bufs[1][i]);
                    bufs[1][i] = ga;
                    avg -= ga * ga;
                }
                let avg = avg.sqrt() + eps;
                match momentum {
                    Some(mo) => {
                        let k = if centered { 2 } else { 1 };
                        bufs[k][i] = mo * bufs[k][i] + gi / avg;
                        p[i] -= lr * bufs[k][i];
                    }
                    None => p[i] -= lr * gi / avg,
                }
            }
            UpdateRule::Adagrad {
                weight_decay,
                eps,
                neg_clr,
            } => {
                gi += weight_decay.unwrap_or(0.0) * p[i];
                bufs[0][i] += gi * gi;
                p[i] += neg_clr * gi / (bufs[0][i].sqrt() + eps);
            }
        }
    }
    (p, bufs)
}

/// Every option of every rule that changes the arithmetic.
fn rules() -> Vec<UpdateRule> {
    let mut out = Vec::new();
    for weight_decay in [None, Some(0.01)] {
        out.push(UpdateRule::Sgd {
            neg_lr: -0.1,
            weight_decay,
            momentum: None,
        });
        for (first, nesterov, one_minus_dampening) in [
            (true, false, 1.0),
            (false, false, 0.7),
            (false, true, 1.0),
            (true, true, 1.0),
        ] {
            out.push(UpdateRule::Sgd {
                neg_lr: -0.1,
                weight_decay,
                momentum: Some(SgdMomentum {
                    momentum: 0.9,
                    one_minus_dampening,
                    nesterov,
                    first,
                }),
            });
        }
        for (momentum, centered) in [
            (None, false),
            (None, true),
            (Some(0.5), false),
            (Some(0.5), true),
        ] {
            out.push(UpdateRule::RmsProp {
                weight_decay,
                alpha: 0.99,
                one_minus_alpha: 0.01,
                eps: 1e-8,
                momentum,
                centered,
                lr: 0.01,
            });
        }
        out.push(UpdateRule::Adagrad {
            weight_decay,
            eps: 1e-10,
            neg_clr: -0.05,
        });
    }
    for decay in [
        AdamDecay::None,
        AdamDecay::Coupled(0.01),
        AdamDecay::Decoupled(0.999),
    ] {
        for amsgrad in [false, true] {
            out.push(UpdateRule::Adam {
                decay,
                one_minus_beta1: 0.1,
                beta2: 0.999,
                one_minus_beta2: 0.001,
                bias_correction2_sqrt: 0.3,
                eps: 1e-8,
                neg_step_size: -0.002,
                amsgrad,
            });
        }
    }
    out
}

#[test]
fn every_rule_computes_pytorchs_update_on_both_dispatch_paths() {
    for rule in rules() {
        // below and above the loop length where the kernels dispatch to SIMD
        for n in [7, 133] {
            let p = values(n, 1, false);
            let g = values(n, 2, false);
            let bufs = state(&rule, n, 3);
            let (want_p, want_bufs) = reference(&rule, &p, &g, &bufs);
            let (mut got_p, mut got_bufs) = (p.clone(), bufs.clone());
            let mut slices: Vec<&mut [f64]> = got_bufs.iter_mut().map(Vec::as_mut_slice).collect();
            rule.apply(&mut got_p, &g, &mut slices);
            let close = |a: &[f64], b: &[f64]| {
                a.iter()
                    .zip(b)
                    .all(|(x, y)| (x - y).abs() <= 1e-12 * (1.0 + y.abs()))
            };
            assert!(
                close(&got_p, &want_p),
                "{rule:?} n={n}: parameters\n{got_p:?}\n{want_p:?}"
            );
            for (k, (got, want)) in got_bufs.iter().zip(&want_bufs).enumerate() {
                assert!(
                    close(got, want),
                    "{rule:?} n={n}: buffer {k}\n{got:?}\n{want:?}"
                );
            }
            assert_ne!(got_p, p, "{rule:?}: the step moved the parameters");
        }
    }
}

/// The update is elementwise: the first elements of a long loop (SIMD) have the bits of the
/// same elements updated alone (a short loop, the baseline path).
#[test]
fn the_simd_and_the_baseline_path_give_the_same_bits() {
    for rule in rules() {
        let (n, short) = (133, 7);
        let (p, g) = (values(n, 11, false), values(n, 12, false));
        let bufs = state(&rule, n, 13);
        let run = |len: usize| {
            let mut p = p[..len].to_vec();
            let mut b: Vec<Vec<f64>> = bufs.iter().map(|b| b[..len].to_vec()).collect();
            let mut slices: Vec<&mut [f64]> = b.iter_mut().map(Vec::as_mut_slice).collect();
            rule.apply(&mut p, &g[..len], &mut slices);
            let mut bits: Vec<u64> = p[..short].iter().map(|v| v.to_bits()).collect();
            bits.extend(
                b.iter()
                    .flat_map(|b| b[..short].iter().map(|v| v.to_bits())),
            );
            bits
        };
        assert_eq!(run(n), run(short), "{rule:?}");
    }
}

#[test]
fn apply_update_on_the_reference_engine_is_the_rule_on_its_data() {
    let n = 70;
    for rule in rules() {
        let tensor = |v: Vec<f64>| Tensor::new([n], v).expect("a valid shape");
        let (p, g) = (values(n, 5, false), values(n, 6, false));
        let bufs = state(&rule, n, 7);
        let (mut want_p, mut want_bufs) = (p.clone(), bufs.clone());
        let mut slices: Vec<&mut [f64]> = want_bufs.iter_mut().map(Vec::as_mut_slice).collect();
        rule.apply(&mut want_p, &g, &mut slices);

        let mut value = tensor(p);
        let mut state: Vec<Tensor<f64>> = bufs.into_iter().map(tensor).collect();
        let mut refs: Vec<&mut Tensor<f64>> = state.iter_mut().collect();
        TrainValue::apply_update(&rule, &mut value, &tensor(g), &mut refs).expect("a step");
        assert_eq!(value.data(), want_p.as_slice(), "{rule:?}");
        for (got, want) in state.iter().zip(&want_bufs) {
            assert_eq!(got.data(), want.as_slice(), "{rule:?}");
        }
    }
}

#[test]
fn clipping_by_hand() {
    // Norms 3 and 4: total 5; max_norm 1 scales by 1 / (5 + 1e-6).
    let mut a = [3.0f64];
    let mut b = [0.0f64, 4.0];
    let total = clip_grad_norm(&mut [&mut a[..], &mut b[..]], 1.0);
    assert_eq!(total, 5.0);
    let coef = 1.0 / (5.0 + 1e-6);
    assert_eq!(a, [3.0 * coef]);
    assert_eq!(b, [0.0, 4.0 * coef]);
    // Below the limit nothing changes.
    let mut c = [0.3f64, 0.4];
    assert_eq!(clip_grad_norm(&mut [&mut c[..]], 1.0), 0.5);
    assert_eq!(c, [0.3, 0.4]);
}

#[test]
fn the_parts_of_clipping() {
    // eight lanes and a tail: 1² + 2² + … + 11²
    let x: Vec<f32> = (1..=11).map(|i| i as f32).collect();
    assert_eq!(sum_of_squares(&x), 506.0);
    assert_eq!(sum_of_squares::<f64>(&[]), 0.0);
    assert_eq!(total_norm([9.0, 16.0]), 5.0);
    assert_eq!(total_norm([]), 0.0);
    // the factor in the element type: none at or above 1, NaN passes
    assert_eq!(clip_coefficient::<f64>(5.0, 1.0), Some(1.0 / (5.0 + 1e-6)));
    assert_eq!(
        clip_coefficient::<f32>(5.0, 1.0),
        Some(1.0f32 / (5.0f32 + 1e-6f32))
    );
    assert_eq!(clip_coefficient::<f64>(1.0 - 1e-6, 1.0), None);
    assert_eq!(clip_coefficient::<f64>(0.5, 1.0), None);
    assert!(clip_coefficient::<f64>(f64::NAN, 1.0).is_some_and(f64::is_nan));
    assert_eq!(clip_coefficient::<f64>(f64::INFINITY, 1.0), Some(0.0));
}

#[test]
fn clip_to_norm_on_the_reference_engine_clips_in_place_and_returns_the_norm() {
    let grads = || {
        [
            Tensor::new([1], vec![3.0f64]).unwrap(),
            Tensor::new([2], vec![0.0, 4.0]).unwrap(),
        ]
    };
    let [mut a, mut b] = grads();
    let norm = Tensor::<f64>::clip_to_norm(&mut [&mut a, &mut b], Some(1.0)).unwrap();
    assert_eq!(Tensor::<f64>::scalars(&[&norm]).unwrap(), [5.0]);
    let coef = 1.0 / (5.0 + 1e-6);
    assert_eq!(a.data(), &[3.0 * coef]);
    assert_eq!(b.data(), &[0.0, 4.0 * coef]);
    let [mut a, mut b] = grads();
    let norm = Tensor::<f64>::clip_to_norm(&mut [&mut a, &mut b], None).unwrap();
    assert_eq!(*norm.item().unwrap(), 5.0);
    assert_eq!((a, b), grads().into(), "no max_norm: nothing scaled");
}
