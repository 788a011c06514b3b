//! Loss curves as SVG, drawn with `plotters`' SVG backend.
//!
//! No font is embedded or looked up: the SVG backend writes text as `<text>` elements with
//! `font-family="sans-serif"`, which the viewer renders, and `plotters` lays labels out with
//! its built-in size estimate (no font feature enabled). So plotting works on a machine with
//! no fonts and no network, and the file stays small.

use crate::error::{Result, TrainError};
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;
use std::ops::Range;
use std::path::Path;
use torchlean_ir::write_atomically;

/// The legend text of the training series.
pub const TRAIN_LABEL: &str = "training loss (per step)";
/// The legend text of the held-out series.
pub const HELD_OUT_LABEL: &str = "held-out loss (per epoch)";
/// The training series' colour (an SVG `stroke`).
pub const TRAIN_COLOR: RGBColor = RGBColor(0x1f, 0x77, 0xb4);
/// The held-out series' colour (an SVG `stroke`).
pub const HELD_OUT_COLOR: RGBColor = RGBColor(0xd6, 0x27, 0x28);

const SIZE: (u32, u32) = (900, 540);

/// Plots training loss (one `(step, loss)` point per step) and held-out loss (one point per
/// epoch, at the step where it was measured) against the step, as an SVG written atomically
/// to `path` ([`torchlean_ir::write_atomically`]). The loss axis is logarithmic when every
/// loss is positive and the largest is more than 100 times the smallest (two decades), linear
/// otherwise. A legend names both series; the axes are labelled `step` and `loss`.
///
/// `train` must have at least one point; `held_out` may be empty (no held-out set, or no epoch
/// finished yet), and is then left out of the plot and the legend. A non-finite step or loss
/// anywhere is an error ([`TrainError::PlotNonFinite`], naming the series and the index), not
/// skipped: a curve that silently stops where training diverged would hide the divergence, so
/// the caller decides what to drop.
pub fn loss_svg(
    path: &Path,
    title: &str,
    train: &[(f64, f64)],
    held_out: &[(f64, f64)],
) -> Result<()> {
    if train.is_empty() {
        return Err(TrainError::PlotEmpty {
            path: path.to_path_buf(),
            series: "training",
        });
    }
    for (series, points) in [("training", train), ("held-out", held_out)] {
        if let Some((index, &(step, loss))) = points
            .iter()
            .enumerate()
            .find(|(_, (s, l))| !s.is_finite() || !l.is_finite())
        {
            return Err(TrainError::PlotNonFinite {
                path: path.to_path_buf(),
                series,
                index,
                step,
                loss,
            });
        }
    }
    let all = || train.iter().chain(held_out);
    let (x_lo, x_hi) = bounds(all().map(|p| p.0));
    let (y_lo, y_hi) = bounds(all().map(|p| p.1));
    let x = padded(x_lo, x_hi, 0.02);
    let mut svg = String::new();
    let drawn = if y_lo > 0.0 && y_hi / y_lo > 100.0 {
        draw(
            &mut svg,
            title,
            train,
            held_out,
            x,
            (y_lo / 1.25..y_hi * 1.25).log_scale(),
        )
    } else {
        draw(
            &mut svg,
            title,
            train,
            held_out,
            x,
            padded(y_lo, y_hi, 0.05),
        )
    };
    drawn.map_err(|e| TrainError::PlotDraw {
        path: path.to_path_buf(),
        source: Box::new(e),
    })?;
    write_atomically(path, svg.as_bytes()).map_err(|source| TrainError::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// The smallest and largest of a non-empty sequence of finite values.
fn bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    })
}

/// `lo..hi` widened by `frac` of its width on each side; a single value gets a width of its
/// own (a tenth of its magnitude, or 1 at zero) so that the axis is never empty.
fn padded(lo: f64, hi: f64, frac: f64) -> Range<f64> {
    let width = hi - lo;
    if width > 0.0 && width.is_finite() {
        lo - width * frac..hi + width * frac
    } else {
        let half = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
        lo - half..hi + half
    }
}

type DrawResult = std::result::Result<(), DrawingAreaErrorKind<std::io::Error>>;

fn draw<Y>(
    svg: &mut String,
    title: &str,
    train: &[(f64, f64)],
    held_out: &[(f64, f64)],
    x: Range<f64>,
    y: Y,
) -> DrawResult
where
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let root = SVGBackend::with_string(svg, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d::<Range<f64>, Y>(x, y)?;
    chart
        .configure_mesh()
        .x_desc("step")
        .y_desc("loss")
        .x_label_formatter(&|step| format!("{step}"))
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 17))
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    let train_style = TRAIN_COLOR.stroke_width(1);
    chart
        .draw_series(LineSeries::new(train.iter().copied(), train_style))?
        .label(TRAIN_LABEL)
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 24, y)], train_style));
    if !held_out.is_empty() {
        let held_style = HELD_OUT_COLOR.stroke_width(2);
        chart
            .draw_series(LineSeries::new(held_out.iter().copied(), held_style))?
            .label(HELD_OUT_LABEL)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 24, y)], held_style));
        chart.draw_series(
            held_out
                .iter()
                .map(|&p| Circle::new(p, 3, HELD_OUT_COLOR.filled())),
        )?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .draw()?;
    root.present()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_never_empty() {
        assert_eq!(padded(0.0, 0.0, 0.05), -1.0..1.0);
        assert_eq!(padded(2.0, 2.0, 0.05), 1.8..2.2);
        assert_eq!(padded(0.0, 10.0, 0.5), -5.0..15.0);
        assert_eq!(bounds([3.0, -1.0, 2.0].into_iter()), (-1.0, 3.0));
    }
}
