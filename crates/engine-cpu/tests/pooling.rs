//! The pooling kernels on outputs large enough to be split across threads: each part must
//! start at its own plane, in the input gradient as in the output.

use crate::common::{agrees, values};
use torchlean_engine_cpu::with_threads;
use torchlean_spec::{Op, PoolKind, PoolSpec};

#[test]
fn pooling_split_across_threads_matches_the_reference() {
    // 128 planes of 32×32: enough work for the pool to split the planes (of 1,024 cells) in
    // the forward and the VJP
    for kind in [PoolKind::Max, PoolKind::Avg] {
        let op = Op::Pool(PoolSpec {
            kind,
            kernel_h: 2,
            kernel_w: 2,
            stride: 2,
            padding: 0,
            padded: false,
        });
        with_threads(3, || {
            agrees(
                &format!("{kind:?} pooling on three threads"),
                &op,
                &[values(&[8, 16, 32, 32], 5)],
                1e-12,
            );
        });
    }
}
