//! Loss plots: a well-formed SVG with one line per series, the legend and axis labels, the
//! log scale past two decades, errors for bad input, atomic writes.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use torchlean_train::plot::{HELD_OUT_COLOR, HELD_OUT_LABEL, TRAIN_COLOR, TRAIN_LABEL};
use torchlean_train::{loss_svg, TrainError};

fn hex(c: plotters::style::RGBColor) -> String {
    format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
}

/// The `points` of every `<polyline>` stroked in `color`, as lists of (x, y).
fn polylines(svg: &str, color: &str) -> Vec<Vec<(f64, f64)>> {
    svg.split("<polyline")
        .skip(1)
        .map(|rest| &rest[..rest.find("/>").expect("a closed polyline")])
        .filter(|tag| {
            tag.to_ascii_uppercase()
                .contains(&format!("STROKE=\"{}\"", color.to_ascii_uppercase()))
        })
        .map(|tag| {
            let start = tag.find("points=\"").expect("points") + 8;
            let end = start + tag[start..].find('"').expect("closing quote");
            tag[start..end]
                .split_whitespace()
                .map(|xy| {
                    let (x, y) = xy.split_once(',').expect("x,y");
                    (x.parse().unwrap(), y.parse().unwrap())
                })
                .collect()
        })
        .collect()
}

/// The text content of every `<text>` element.
fn texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .map(|rest| {
            let body = &rest[rest.find('>').unwrap() + 1..];
            body[..body.find("</text>").unwrap()].trim().to_string()
        })
        .collect()
}

fn check_well_formed(svg: &str) {
    assert!(svg.trim_start().starts_with("<svg"), "{}", &svg[..80]);
    assert!(svg.trim_end().ends_with("</svg>"));
    // every opened element is closed, in order (a minimal parse)
    let mut stack = Vec::new();
    let mut rest = svg;
    while let Some(i) = rest.find('<') {
        rest = &rest[i + 1..];
        let end = rest.find('>').expect("an unclosed tag");
        let tag = &rest[..end];
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(
                stack.pop(),
                Some(name.trim().to_string()),
                "mismatched </{name}>"
            );
        } else if !tag.ends_with('/') {
            stack.push(tag.split_whitespace().next().unwrap().to_string());
        }
        rest = &rest[end + 1..];
    }
    assert!(stack.is_empty(), "unclosed: {stack:?}");
}

fn curve(n: usize, f: impl Fn(f64) -> f64) -> Vec<(f64, f64)> {
    (0..n).map(|i| (i as f64, f(i as f64))).collect()
}

#[test]
fn both_series_legend_and_axes_are_drawn() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("loss.svg");
    let train = curve(50, |s| 2.0 - s * 0.02);
    let held = vec![
        (9.0, 1.9),
        (19.0, 1.7),
        (29.0, 1.6),
        (39.0, 1.5),
        (49.0, 1.45),
    ];
    loss_svg(&path, "digits: MLP <64-32-10> & Adam", &train, &held).unwrap();
    let svg = std::fs::read_to_string(&path).unwrap();
    check_well_formed(&svg);

    // each series is one polyline with one point per loss, plus its legend swatch (2 points)
    let t = polylines(&svg, &hex(TRAIN_COLOR));
    let h = polylines(&svg, &hex(HELD_OUT_COLOR));
    let lens = |v: &Vec<Vec<(f64, f64)>>| {
        let mut l: Vec<usize> = v.iter().map(Vec::len).collect();
        l.sort();
        l
    };
    assert_eq!(lens(&t), [2, 50], "{t:?}");
    assert_eq!(lens(&h), [2, 5], "{h:?}");
    // linear scale (less than two decades): equal loss steps are equal pixel steps, and the
    // loss falls, so y (downwards in SVG) grows
    let line = t.iter().find(|p| p.len() == 50).unwrap();
    assert!(
        line.windows(2).all(|w| w[1].1 >= w[0].1 && w[1].0 > w[0].0),
        "{line:?}"
    );
    let dy: Vec<f64> = line.windows(2).map(|w| w[1].1 - w[0].1).collect();
    assert!(dy.iter().all(|d| (d - dy[0]).abs() <= 1.0), "{dy:?}");

    let texts = texts(&svg);
    for want in [
        TRAIN_LABEL,
        HELD_OUT_LABEL,
        "step",
        "loss",
        "digits: MLP &lt;64-32-10&gt; &amp; Adam",
    ] {
        assert!(texts.iter().any(|t| t == want), "{want:?} not in {texts:?}");
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "a temporary file was left behind"
    );
}

#[test]
fn more_than_two_decades_is_a_log_scale() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("loss.svg");
    // loss = 10^(-s/10): four decades, a straight line on a log axis
    let train = curve(41, |s| 10f64.powf(-s / 10.0));
    loss_svg(&path, "log", &train, &[]).unwrap();
    let svg = std::fs::read_to_string(&path).unwrap();
    check_well_formed(&svg);
    let t = polylines(&svg, &hex(TRAIN_COLOR));
    let line = t.iter().find(|p| p.len() == 41).expect("the training line");
    let dy: Vec<f64> = line.windows(2).map(|w| w[1].1 - w[0].1).collect();
    assert!(dy[0] > 1.0, "{dy:?}");
    assert!(
        dy.iter().all(|d| (d - dy[0]).abs() <= 1.0),
        "not straight: {dy:?}"
    );
    // no held-out series: no held-out line and no legend entry
    assert!(polylines(&svg, &hex(HELD_OUT_COLOR)).is_empty());
    assert!(!texts(&svg).iter().any(|t| t == HELD_OUT_LABEL));
    assert!(texts(&svg).iter().any(|t| t == TRAIN_LABEL));
}

#[test]
fn a_single_point_or_a_flat_curve_still_plots() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("one.svg");
    loss_svg(&path, "one", &[(0.0, 0.0)], &[(0.0, 0.0)]).unwrap();
    check_well_formed(&std::fs::read_to_string(&path).unwrap());
    loss_svg(&path, "flat", &curve(5, |_| 0.7), &[]).unwrap();
    check_well_formed(&std::fs::read_to_string(&path).unwrap());
    // negative losses (a Gaussian NLL, say) stay linear
    loss_svg(&path, "neg", &curve(5, |s| 1.0 - s), &[]).unwrap();
    check_well_formed(&std::fs::read_to_string(&path).unwrap());
}

#[test]
fn bad_input_is_an_error_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("loss.svg");
    std::fs::write(&path, b"old").unwrap();
    let e = loss_svg(&path, "t", &[], &[(0.0, 1.0)]).unwrap_err();
    assert!(
        matches!(
            &e,
            TrainError::PlotEmpty {
                series: "training",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("loss.svg"), "{e}");
    for (train, held, series, index) in [
        (vec![(0.0, 1.0), (1.0, f64::NAN)], vec![], "training", 1),
        (
            vec![(0.0, 1.0)],
            vec![(0.0, 1.0), (1.0, f64::INFINITY)],
            "held-out",
            1,
        ),
        (vec![(f64::NAN, 1.0)], vec![], "training", 0),
    ] {
        let e = loss_svg(&path, "t", &train, &held).unwrap_err();
        assert!(
            matches!(&e, TrainError::PlotNonFinite { series: s, index: i, .. } if *s == series && *i == index),
            "{e:?}"
        );
    }
    assert_eq!(std::fs::read(&path).unwrap(), b"old");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn a_failing_write_leaves_the_old_file() {
    let dir = tempfile::tempdir().unwrap();
    // the target's temporary name is too long for the file system; the target is not
    let path = dir.path().join(format!("{}.svg", "p".repeat(246)));
    std::fs::write(&path, b"old plot").unwrap();
    let e = loss_svg(&path, "t", &curve(3, |s| s), &[]).unwrap_err();
    assert!(matches!(&e, TrainError::Write { .. }), "{e:?}");
    assert_eq!(std::fs::read(&path).unwrap(), b"old plot");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    let e = loss_svg(
        Path::new("/no/such/dir/loss.svg"),
        "t",
        &curve(3, |s| s),
        &[],
    )
    .unwrap_err();
    assert!(e.to_string().contains("/no/such/dir/loss.svg"), "{e}");
}
