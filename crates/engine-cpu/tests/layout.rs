//! Permutes the random suites rarely draw: high ranks, where the transpose fast path must be
//! taken exactly when the second-to-last output axis is the source's contiguous one, the tiled
//! transpose under several outer axes, and outputs large enough to be split across threads.

use crate::common::{agrees, values};
use torchlean_engine_cpu::with_threads;
use torchlean_spec::Op;

#[test]
fn permutes_of_rank_five_match_the_reference() {
    // [2, 2, 16, 17, 3]: output axis 2 is the source's last (contiguous) axis, the last two
    // output axes are long, yet the second-to-last is not contiguous: the plain walk
    for perm in [
        [0, 1, 4, 2, 3],
        [0, 1, 2, 4, 3],
        [4, 3, 2, 1, 0],
        [1, 0, 3, 2, 4],
    ] {
        let op = Op::Permute {
            perm: perm.to_vec(),
        };
        agrees(
            &format!("permute {perm:?}"),
            &op,
            &[values(&[2, 2, 16, 17, 3], 1)],
            0.0,
        );
    }
}

#[test]
fn a_permute_split_across_threads_starts_each_part_at_its_own_row() {
    // 38,400 elements: enough work for the pool to split the output rows, so a part starts at
    // a row deep inside the outer axes ([40, 8, 20] rows of 6), where its source offset and
    // its odometer must be unravelled over every outer axis; the plain walk (the last output
    // axis is short)
    with_threads(3, || {
        agrees(
            "permute [2, 0, 3, 1] on three threads",
            &Op::Permute {
                perm: vec![2, 0, 3, 1],
            },
            &[values(&[8, 6, 40, 20], 2)],
            0.0,
        );
    });
}

#[test]
fn batched_transposes_under_three_outer_axes_match_the_reference() {
    // the tiled transpose (both inner axes at least a tile long) under three outer axes, once
    // as rank 5 and once as rank 6 with a size-1 axis the walk drops: each tile's source
    // offset unravels the outer index over all of them
    for (shape, perm) in [
        (vec![2, 3, 2, 16, 17], vec![0, 1, 2, 4, 3]),
        (vec![2, 3, 1, 2, 16, 17], vec![0, 1, 2, 3, 5, 4]),
    ] {
        agrees(
            &format!("transpose of {shape:?}"),
            &Op::Permute { perm },
            &[values(&shape, 3)],
            0.0,
        );
    }
}
