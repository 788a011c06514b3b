//! Permutes the random suites rarely draw: high ranks, where the transpose fast path must be
//! taken exactly when the second-to-last output axis is the source's contiguous one.

use crate::common::{agrees, values};
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
