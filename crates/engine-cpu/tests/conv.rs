//! The CPU engine's convolution on inputs the random suites do not draw: NaN and infinity
//! (which must reach exactly the outputs and gradients the reference engine's do, whatever
//! patch layout the engine picks, even with one in every lane of its finiteness scan), empty
//! output- and input-channel axes, a batch the backward cannot split evenly, tap chunks that
//! do not start at a channel, and a direct (1×1) convolution past the chunk cap.

use crate::common::{agrees, values, with};
use torchlean_spec::ops::{BackwardChunks, PATCH_CHUNK_ELEMENTS};
use torchlean_spec::{Conv2dSpec, Op, Shape};

#[test]
fn non_finite_values_reach_what_the_reference_engines_reach() {
    // (stride, padding, kernel): the wide layout, the compact one, the direct one
    for (s, pad, k) in [(1, 1, 3), (2, 1, 3), (1, 0, 1)] {
        let spec = Conv2dSpec::ungrouped(2, 3, (k, k), s, pad);
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
fn non_finite_values_in_every_lane_of_the_finiteness_scan_still_avoid_the_wide_layout() {
    // The backward's finiteness scan folds the data eight lanes at a time. Here x's first
    // column is NaN in every row (flat indices 0, 9, …, 72: every lane, with a finite
    // remainder) and w's first eight taps are NaN: a scan that missed non-finite values once
    // every lane holds one would pick the wide layout, whose dropped columns read the next
    // row's first pixel (times a zero cotangent: NaN) into dW's taps v >= 1, finite here.
    let spec = Conv2dSpec::ungrouped(1, 1, (3, 3), 1, 0);
    let mut x = values(&[1, 1, 9, 9], 10);
    for r in 0..9 {
        x = with(&x, r * 9, f64::NAN);
    }
    let mut w = values(&[1, 1, 3, 3], 11);
    for t in 0..8 {
        w = with(&w, t, f64::NAN);
    }
    agrees(
        "NaN in every lane",
        &Op::Conv2d(spec),
        &[x, w, values(&[1], 12)],
        1e-12,
    );
}

#[test]
fn tap_chunks_that_start_mid_channel_rebuild_every_patch_row() {
    // The backward builds a big image's patch matrix a range of taps at a time in one buffer.
    // With 61 channels × 3×3 taps split in two at tap 274 (4 taps into a channel), a buffer row
    // holds a tap of another kernel row in the second range than in the first, with other
    // padded margins: each range must rewrite its margins, not trust the previous range's.
    let (c, hw, k) = (61, 248, 3);
    let spec = Conv2dSpec::ungrouped(c, 1, (k, k), 2, 1);
    let g = spec.geometry(&Shape::from([c, hw, hw])).unwrap();
    let chunks = BackwardChunks::new(g.kk(), g.p(), PATCH_CHUNK_ELEMENTS);
    let ranges: Vec<_> = chunks.taps.ranges().collect();
    assert_eq!(chunks.cols.count(), 1, "the columns whole");
    assert_eq!(ranges.len(), 2, "two tap ranges");
    assert_ne!(
        ranges[1].start % (k * k),
        0,
        "the second range starts mid-channel"
    );
    agrees(
        "tap ranges across channels",
        &Op::Conv2d(spec),
        &[
            values(&[1, c, hw, hw], 13),
            values(&[1, c, k, k], 14),
            values(&[1], 15),
        ],
        1e-12,
    );
}

#[test]
fn a_direct_convolution_keeps_its_patch_matrix_whole_past_the_chunk_cap() {
    // A 1×1, stride-1, unpadded convolution reads the image itself as its patch matrix (the
    // direct layout), so its backward is one product whatever the size. At 1 × 2050² columns
    // the chunk rule would split the columns of a patch matrix it built; the direct backward
    // must not follow it (its operands are the image, not a chunk buffer).
    let (c, hw) = (1, 2050);
    let spec = Conv2dSpec::ungrouped(c, 1, (1, 1), 1, 0);
    let g = spec.geometry(&Shape::from([c, hw, hw])).unwrap();
    let chunks = BackwardChunks::new(g.kk(), g.p(), PATCH_CHUNK_ELEMENTS);
    assert!(chunks.cols.count() > 1, "the rule splits the columns");
    agrees(
        "direct layout past the cap",
        &Op::Conv2d(spec),
        &[
            values(&[1, c, hw, hw], 19),
            values(&[1, c, 1, 1], 20),
            values(&[1], 21),
        ],
        1e-12,
    );
}

#[test]
fn no_output_channels_give_empty_results() {
    let spec = Conv2dSpec::ungrouped(2, 0, (3, 3), 1, 1);
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
fn no_input_channels_give_the_bias() {
    // no taps (C·k² = 0) but a non-empty output: every output is its channel's bias, and the
    // schedule's work estimate (oc · taps · columns) is 0
    let spec = Conv2dSpec::ungrouped(0, 2, (3, 3), 1, 1);
    let op = Op::Conv2d(spec);
    for n in [1, 3] {
        agrees(
            &format!("no input channels, {n} images"),
            &op,
            &[
                values(&[n, 0, 4, 4], 16),
                values(&[2, 0, 3, 3], 17),
                values(&[2], 18),
            ],
            1e-12,
        );
    }
}

#[test]
fn a_batch_whose_last_group_of_images_is_short() {
    // the backward splits a batch into at most 8 groups of equal size but the last: 17 images
    // make 6 groups of 3 and a last of 2
    let spec = Conv2dSpec::ungrouped(2, 3, (3, 3), 1, 1);
    let inputs = [
        values(&[17, 2, 5, 5], 7),
        values(&[3, 2, 3, 3], 8),
        values(&[3], 9),
    ];
    agrees("17 images", &Op::Conv2d(spec), &inputs, 1e-12);
}
