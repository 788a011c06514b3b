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
        Ok((fit(h, self.kernel_h, "kH")?, fit(w, self.kernel_w, "kW")?))
    }

    pub(crate) fn infer(&self, x: &Shape) -> Result<Shape> {
        let (_, c, h, w) = nchw(self.name(), x)?;
        let (ho, wo) = self.out_hw(h, w)?;
        Ok(with_batch(x, c, ho, wo))
    }

    /// The real input cells `(flat offset within the plane)` of window `(i, j)`, row-major.
    fn window(&self, i: usize, j: usize, h: usize, w: usize) -> impl Iterator<Item = usize> + '_ {
        let (kh, kw, s, p) = (self.kernel_h, self.kernel_w, self.stride, self.padding);
        (0..kh).flat_map(move |u| {
            (0..kw).filter_map(move |v| {
                let r = (i * s + u).checked_sub(p).filter(|&r| r < h)?;
                let c = (j * s + v).checked_sub(p).filter(|&c| c < w)?;
                Some(r * w + c)
            })
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
        let area = A::from_usize(self.kernel_h * self.kernel_w);
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
        let area = A::from_usize(self.kernel_h * self.kernel_w);
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
