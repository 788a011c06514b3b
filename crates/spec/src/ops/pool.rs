//! Max and average pooling over the last two axes of `[C,H,W]` or `[N,C,H,W]`.
//!
//! Edges: symmetric zero padding of at most half the kernel (PyTorch's constraint), so every
//! window holds at least one real cell. Max pooling ignores padded cells; the winner is the
//! first maximum in row-major window order, except that a NaN always wins (PyTorch's rule).
//! Average pooling counts padded cells in the divisor (`kH·kW`, PyTorch's
//! `count_include_pad=True`). A zero input extent gives a zero output extent.

use super::conv::{nchw, window_out, with_batch};
use crate::error::{Result, SpecError};
use crate::scalar::Scalar;
use crate::shape::Shape;
use crate::tensor::Tensor;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PoolKind {
    Max,
    Avg,
}

/// Geometry of a 2-D pooling window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PoolSpec {
    pub kind: PoolKind,
    pub kernel_h: usize,
    pub kernel_w: usize,
    pub stride: usize,
    pub padding: usize,
    /// The `_pad` kinds (`max_pool2d_pad`, `avg_pool2d_pad`), which carry `padding`; the
    /// unpadded kinds have padding 0.
    pub padded: bool,
}

impl PoolSpec {
    /// The wire name (the descriptor's: keyed on `padded`, never on the padding's value).
    pub fn name(&self) -> &'static str {
        crate::Op::Pool(*self).name()
    }

    /// Output `(Ho, Wo)` for an input of spatial size `(h, w)`, for engines.
    pub fn output_hw(&self, h: usize, w: usize) -> Result<(usize, usize)> {
        self.out_hw(h, w)
    }

    fn attr_err(&self, attr: &'static str, reason: String) -> SpecError {
        SpecError::OpAttr {
            op: self.name(),
            attr,
            reason,
        }
    }

    fn out_hw(&self, h: usize, w: usize) -> Result<(usize, usize)> {
        for (attr, v) in [
            ("kH", self.kernel_h),
            ("kW", self.kernel_w),
            ("stride", self.stride),
        ] {
            if v == 0 {
                return Err(self.attr_err(attr, "must be positive".into()));
            }
        }
        if !self.padded && self.padding > 0 {
            return Err(self.attr_err(
                "padding",
                format!("= {} needs the `_pad` kind", self.padding),
            ));
        }
        if self.padding > self.kernel_h / 2 || self.padding > self.kernel_w / 2 {
            return Err(self.attr_err(
                "padding",
                format!(
                    "= {} exceeds half the kernel {}x{}",
                    self.padding, self.kernel_h, self.kernel_w
                ),
            ));
        }
        let fit = |extent: usize, k: usize, attr: &'static str| -> Result<usize> {
            if extent == 0 {
                return Ok(0);
            }
            window_out(extent, k, self.stride, self.padding).ok_or_else(|| {
                self.attr_err(
                    attr,
                    format!(
                        "= {k} does not fit the extent {extent} padded by {}",
                        self.padding
                    ),
                )
            })
        };
        if self.kind == PoolKind::Avg {
            self.divisor()?;
        }
        Ok((fit(h, self.kernel_h, "kH")?, fit(w, self.kernel_w, "kW")?))
    }

    pub(crate) fn infer(&self, x: &Shape) -> Result<Shape> {
        let (_, c, h, w) = nchw(self.name(), x)?;
        let (ho, wo) = self.out_hw(h, w)?;
        Ok(with_batch(x, c, ho, wo))
    }

    /// The real input cells `(flat offset within the plane)` of window `(i, j)`, row-major:
    /// only the rows and columns inside the input are visited, so the time is bounded by the
    /// input's size whatever the kernel (a kernel of 2^62 over a 1×1 input is one cell).
    fn window(&self, i: usize, j: usize, h: usize, w: usize) -> impl Iterator<Item = usize> + '_ {
        let (rows, cols) = (
            self.real(i, self.kernel_h, h),
            self.real(j, self.kernel_w, w),
        );
        rows.flat_map(move |r| cols.clone().map(move |c| r * w + c))
    }

    /// The input indices `[lo, hi)` of output index `o`'s window along an axis of `extent`
    /// with kernel `k`, clipped to the input. `o·stride + k ≤ extent + 2·padding` for every
    /// output index of a validated pooling, so nothing overflows.
    fn real(&self, o: usize, k: usize, extent: usize) -> std::ops::Range<usize> {
        let start = o * self.stride;
        let lo = start.saturating_sub(self.padding).min(extent);
        let hi = (start + k).saturating_sub(self.padding).min(extent);
        lo..hi.max(lo)
    }

    /// Average pooling's divisor `kH·kW` (padded cells count), or an error naming `kW` when
    /// the product overflows: the one place it is computed (the shape rule checks it, the
    /// engines read it).
    pub fn divisor(&self) -> Result<usize> {
        self.kernel_h.checked_mul(self.kernel_w).ok_or_else(|| {
            self.attr_err(
                "kW",
                format!(
                    "= {} times kH = {} overflows the average's divisor kH·kW",
                    self.kernel_w, self.kernel_h
                ),
            )
        })
    }

    /// Index (within the plane) of the winning cell of window `(i, j)`.
    fn argmax<A: Scalar>(
        &self,
        plane: &[A],
        i: usize,
        j: usize,
        h: usize,
        w: usize,
    ) -> Option<usize> {
        let mut best: Option<usize> = None;
        for cell in self.window(i, j, h, w) {
            let take = match best {
                None => true,
                Some(b) => plane[cell].greater(&plane[b]) || plane[cell].is_nan(),
            };
            if take {
                best = Some(cell);
            }
        }
        best
    }

    pub(crate) fn forward<A: Scalar>(&self, x: &Tensor<A>, out: &Shape) -> Result<Tensor<A>> {
        let (n, c, h, w) = nchw(self.name(), x.shape())?;
        let (ho, wo) = self.out_hw(h, w)?;
        // the divisor only for averages (a max pool's kernel may be any size)
        let area = match self.kind {
            PoolKind::Max => A::one(),
            PoolKind::Avg => A::from_usize(self.divisor()?),
        };
        let mut data = Vec::with_capacity(out.size());
        for pc in 0..n * c {
            let plane = &x.data()[pc * h * w..(pc + 1) * h * w];
            for i in 0..ho {
                for j in 0..wo {
                    data.push(match self.kind {
                        PoolKind::Max => match self.argmax(plane, i, j, h, w) {
                            Some(k) => plane[k].clone(),
                            None => A::zero(),
                        },
                        PoolKind::Avg => {
                            let mut acc = A::zero();
                            for cell in self.window(i, j, h, w) {
                                acc = acc.add(&plane[cell]);
                            }
                            acc.div(&area)?
                        }
                    });
                }
            }
        }
        Tensor::new(out.clone(), data)
    }

    /// Routes each output cotangent to its window's winner.
    pub(crate) fn max_vjp<A: Scalar>(&self, x: &Tensor<A>, dy: &Tensor<A>) -> Result<Tensor<A>> {
        let (n, c, h, w) = nchw(self.name(), x.shape())?;
        let (ho, wo) = self.out_hw(h, w)?;
        let mut dx = Tensor::<A>::zeros(x.shape().clone())?;
        for pc in 0..n * c {
            let plane = &x.data()[pc * h * w..(pc + 1) * h * w];
            for i in 0..ho {
                for j in 0..wo {
                    if let Some(k) = self.argmax(plane, i, j, h, w) {
                        let d = &dy.data()[(pc * ho + i) * wo + j];
                        let slot = &mut dx.data_mut()[pc * h * w + k];
                        *slot = slot.add(d);
                    }
                }
            }
        }
        Ok(dx)
    }

    /// Spreads `dy / (kH·kW)` over each window's real cells.
    pub(crate) fn avg_vjp<A: Scalar>(&self, in_shape: &Shape, dy: &Tensor<A>) -> Result<Tensor<A>> {
        let (n, c, h, w) = nchw(self.name(), in_shape)?;
        let (ho, wo) = self.out_hw(h, w)?;
        let area = A::from_usize(self.divisor()?);
        let mut dx = Tensor::<A>::zeros(in_shape.clone())?;
        for pc in 0..n * c {
            for i in 0..ho {
                for j in 0..wo {
                    let g = dy.data()[(pc * ho + i) * wo + j].div(&area)?;
                    for cell in self.window(i, j, h, w) {
                        let slot = &mut dx.data_mut()[pc * h * w + cell];
                        *slot = slot.add(&g);
                    }
                }
            }
        }
        Ok(dx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: PoolKind, k: usize, padding: usize) -> PoolSpec {
        PoolSpec {
            kind,
            kernel_h: k,
            kernel_w: k,
            stride: 1,
            padding,
            padded: true,
        }
    }

    /// A kernel of 2^62 over a 1×1 input used to scan 2^124 window cells per output (a hang);
    /// windows now visit only the real cells.
    #[test]
    fn a_huge_max_kernel_runs_in_time_bounded_by_the_input() {
        let k = 1usize << 62;
        let sp = spec(PoolKind::Max, k, k / 2);
        let x = Tensor::new([1, 1, 1], vec![3.0f64]).unwrap();
        let out = sp.infer(x.shape()).unwrap();
        assert_eq!(out, Shape::from([1, 2, 2]));
        let y = sp.forward(&x, &out).unwrap();
        assert_eq!(y.data(), &[3.0; 4]);
        let dy = Tensor::new([1, 2, 2], vec![1.0f64; 4]).unwrap();
        assert_eq!(sp.max_vjp(&x, &dy).unwrap().data(), &[4.0]);
    }

    /// `kH·kW` = 2^64 used to wrap to 0 (an `inf` average, exit 0); it is an error naming `kW`.
    #[test]
    fn an_average_divisor_that_overflows_is_an_error() {
        let k = 1usize << 32;
        let sp = spec(PoolKind::Avg, k, k / 2);
        let e = sp.infer(&Shape::from([1, 1, 1])).unwrap_err();
        assert_eq!(e.field(), Some("kW"), "{e}");
        assert!(e.to_string().contains("divisor"), "{e}");
        // a max pool has no divisor: the same kernel is fine
        assert!(spec(PoolKind::Max, k, k / 2)
            .infer(&Shape::from([1, 1, 1]))
            .is_ok());
        // the largest divisor that fits is exact in f64 and divides
        let big = spec(PoolKind::Avg, 1 << 31, 1 << 30);
        assert_eq!(big.divisor().unwrap(), 1 << 62);
        let x = Tensor::new([1, 1, 1], vec![2.0f64.powi(62)]).unwrap();
        let out = big.infer(x.shape()).unwrap();
        assert!(big
            .forward(&x, &out)
            .unwrap()
            .data()
            .iter()
            .all(|&v| v == 1.0));
    }
}
