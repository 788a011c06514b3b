//! The CPU engine's convolution on inputs the random suites do not draw: NaN and infinity
//! (which must reach exactly the outputs and gradients the reference engine's do, whatever
//! patch layout the engine picks), an empty output-channel axis, and a batch the backward
//! cannot split evenly.

use crate::common::{agrees, values, with};
use torchlean_spec::{Conv2dSpec, Op};

#[test]
fn non_finite_values_reach_what_the_reference_engines_reach() {
    // (stride, padding, kernel): the wide layout, the compact one, the direct one
    for (s, pad, k) in [(1, 1, 3), (2, 1, 3), (1, 0, 1)] {
        let spec = Conv2dSpec {
            in_channels: 2,
            out_channels: 3,
            kernel_h: k,
            kernel_w: k,
            stride: s,
            padding: pad,
        };
        let op = Op::Conv2d(spec);
        let (x, w, b) = (
            values(&[2, 2, 6, 7], 1),
            values(&[3, 2, k, k], 2),
            values(&[3], 3),
        );
        // the right edge of a row, where the wide layout's dropped columns read it, and the
        // first pixel of the next row
        let edge = 6 + 7 * 2;
        for (what, xs, ws) in [
            ("NaN in x", with(&x, edge, f64::NAN), w.clone()),
            ("inf in x", with(&x, edge + 1, f64::INFINITY), w.clone()),
            ("NaN in w", x.clone(), with(&w, 0, f64::NAN)),
        ] {
            let what = format!("{what}, stride {s}, padding {pad}, kernel {k}");
            agrees(&what, &op, &[xs, ws, b.clone()], 1e-12);
        }
    }
}

#[test]
fn no_output_channels_give_empty_results() {
    let spec = Conv2dSpec {
        in_channels: 2,
        out_channels: 0,
        kernel_h: 3,
        kernel_w: 3,
        stride: 1,
        padding: 1,
    };
    let op = Op::Conv2d(spec);
    agrees(
        "no output channels",
        &op,
        &[
            values(&[2, 2, 5, 5], 4),
            values(&[0, 2, 3, 3], 5),
            values(&[0], 6),
        ],
        1e-12,
    );
}

#[test]
fn a_batch_whose_last_group_of_images_is_short() {
    // the backward splits a batch into at most 8 groups of equal size but the last: 17 images
    // make 6 groups of 3 and a last of 2
    let spec = Conv2dSpec {
        in_channels: 2,
        out_channels: 3,
        kernel_h: 3,
        kernel_w: 3,
        stride: 1,
        padding: 1,
    };
    let inputs = [
        values(&[17, 2, 5, 5], 7),
        values(&[3, 2, 3, 3], 8),
        values(&[3], 9),
    ];
    agrees("17 images", &Op::Conv2d(spec), &inputs, 1e-12);
}
