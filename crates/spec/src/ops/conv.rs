//! 2-D convolution over `[C,H,W]` or `[N,C,H,W]`: zero padding on both sides, no dilation,
//! one group, weight `[O,C,kH,kW]`, bias `[O]`.

use crate::error::{Result, SpecError};
use crate::scalar::Scalar;
use crate::shape::Shape;
use crate::tensor::Tensor;

/// Geometry of a 2-D convolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Conv2dSpec {
    pub in_channels: usize,
    pub out_channels: usize,
    pub kernel_h: usize,
    pub kernel_w: usize,
    pub stride: usize,
    pub padding: usize,
}

/// Output extent of a sliding window: `(input + 2·padding − kernel) / stride + 1`, or `None`
/// when the kernel or stride is 0 or the window does not fit in the padded input (checked
/// before any subtraction, so nothing saturates).
pub fn window_out(input: usize, kernel: usize, stride: usize, padding: usize) -> Option<usize> {
    if kernel == 0 || stride == 0 {
        return None;
    }
    let padded = input.checked_add(padding.checked_mul(2)?)?;
    if padded < kernel {
        return None;
    }
    Some((padded - kernel) / stride + 1)
}

/// Splits `[C,H,W]` / `[N,C,H,W]` into `(N, C, H, W)`.
pub(crate) fn nchw(op: &'static str, x: &Shape) -> Result<(usize, usize, usize, usize)> {
    match x.dims() {
        [c, h, w] => Ok((1, *c, *h, *w)),
        [n, c, h, w] => Ok((*n, *c, *h, *w)),
        _ => Err(SpecError::OpShape {
            op,
            shapes: vec![x.clone()],
            reason: "expects [C,H,W] or [N,C,H,W]".into(),
        }),
    }
}

/// The output shape with the leading batch axis kept if the input had one.
pub(crate) fn with_batch(x: &Shape, c: usize, h: usize, w: usize) -> Shape {
    if x.rank() == 4 {
        Shape::from([x.dims()[0], c, h, w])
    } else {
        Shape::from([c, h, w])
    }
}

impl Conv2dSpec {
    const OP: &'static str = super::desc::CONV2D.name;

    fn attr_err(attr: &'static str, reason: String) -> SpecError {
        SpecError::OpAttr {
            op: Self::OP,
            attr,
            reason,
        }
    }

    /// Output `(Ho, Wo)` for an input of spatial size `(h, w)`.
    fn out_hw(&self, h: usize, w: usize) -> Result<(usize, usize)> {
        for (attr, v) in [
            ("kH", self.kernel_h),
            ("kW", self.kernel_w),
            ("stride", self.stride),
        ] {
            if v == 0 {
                return Err(Self::attr_err(attr, "must be positive".into()));
            }
        }
        let ho = window_out(h, self.kernel_h, self.stride, self.padding).ok_or_else(|| {
            Self::attr_err(
                "kH",
                format!(
                    "= {} does not fit the input height {h} padded by {}",
                    self.kernel_h, self.padding
                ),
            )
        })?;
        let wo = window_out(w, self.kernel_w, self.stride, self.padding).ok_or_else(|| {
            Self::attr_err(
                "kW",
                format!(
                    "= {} does not fit the input width {w} padded by {}",
                    self.kernel_w, self.padding
                ),
            )
        })?;
        Ok((ho, wo))
    }

    /// Weight `[outC, inC, kH, kW]` and bias `[outC]`: the one rule for a conv's payload.
    pub(crate) fn payload_shapes(&self) -> Vec<Shape> {
        self.payload_shapes_array().to_vec()
    }

    fn payload_shapes_array(&self) -> [Shape; 2] {
        [
            Shape::from([
                self.out_channels,
                self.in_channels,
                self.kernel_h,
                self.kernel_w,
            ]),
            Shape::from([self.out_channels]),
        ]
    }

    /// Output `(Ho, Wo)` for an input of spatial size `(h, w)` (validated attributes), for
    /// engines.
    pub fn output_hw(&self, h: usize, w: usize) -> Result<(usize, usize)> {
        self.out_hw(h, w)
    }

    pub(crate) fn infer(&self, x: &Shape, w: &Shape, b: &Shape) -> Result<Shape> {
        let (_, c, h, wd) = nchw(Self::OP, x)?;
        if c != self.in_channels {
            return Err(SpecError::OpShape {
                op: Self::OP,
                shapes: vec![x.clone()],
                reason: format!("the input has {c} channels, inC is {}", self.in_channels),
            });
        }
        let [want_w, want_b] = self.payload_shapes_array();
        if w != &want_w {
            return Err(SpecError::OpShape {
                op: Self::OP,
                shapes: vec![x.clone(), w.clone(), b.clone()],
                reason: format!("the weight must be {want_w} (outC, inC, kH, kW)"),
            });
        }
        if b != &want_b {
            return Err(SpecError::OpShape {
                op: Self::OP,
                shapes: vec![x.clone(), w.clone(), b.clone()],
                reason: format!("the bias must be [{}]", self.out_channels),
            });
        }
        let (ho, wo) = self.out_hw(h, wd)?;
        Ok(with_batch(x, self.out_channels, ho, wo))
    }

    /// Input row/column read by output position `o` and kernel offset `k`, if not padding.
    #[inline]
    fn src(&self, o: usize, k: usize, extent: usize) -> Option<usize> {
        (o * self.stride + k)
            .checked_sub(self.padding)
            .filter(|&v| v < extent)
    }

    pub(crate) fn forward<A: Scalar>(
        &self,
        x: &Tensor<A>,
        w: &Tensor<A>,
        b: &Tensor<A>,
        out: &Shape,
    ) -> Result<Tensor<A>> {
        let (n, c, h, wd) = nchw(Self::OP, x.shape())?;
        let (ho, wo) = self.out_hw(h, wd)?;
        let (kh, kw, oc) = (self.kernel_h, self.kernel_w, self.out_channels);
        let (xd, wt, bd) = (x.data(), w.data(), b.data());
        let mut data = Vec::with_capacity(out.size());
        for bn in 0..n {
            for o in 0..oc {
                for i in 0..ho {
                    for j in 0..wo {
                        let mut acc = A::zero();
                        for ci in 0..c {
                            for u in 0..kh {
                                let Some(r) = self.src(i, u, h) else { continue };
                                for v in 0..kw {
                                    let Some(s) = self.src(j, v, wd) else {
                                        continue;
                                    };
                                    let xv = &xd[((bn * c + ci) * h + r) * wd + s];
                                    let wv = &wt[((o * c + ci) * kh + u) * kw + v];
                                    acc = acc.add(&xv.mul(wv));
                                }
                            }
                        }
                        data.push(acc.add(&bd[o]));
                    }
                }
            }
        }
        Tensor::new(out.clone(), data)
    }

    /// `(dx, dW, db)`, accumulated by visiting output positions in row-major order.
    pub(crate) fn vjp<A: Scalar>(
        &self,
        x: &Tensor<A>,
        w: &Tensor<A>,
        dy: &Tensor<A>,
    ) -> Result<(Tensor<A>, Tensor<A>, Tensor<A>)> {
        let (n, c, h, wd) = nchw(Self::OP, x.shape())?;
        let (ho, wo) = self.out_hw(h, wd)?;
        let (kh, kw, oc) = (self.kernel_h, self.kernel_w, self.out_channels);
        let mut dx = Tensor::<A>::zeros(x.shape().clone())?;
        let mut dw = Tensor::<A>::zeros(w.shape().clone())?;
        let mut db = Tensor::<A>::zeros(Shape::from([oc]))?;
        let (xd, wt, dd) = (x.data(), w.data(), dy.data());
        for bn in 0..n {
            for o in 0..oc {
                for i in 0..ho {
                    for j in 0..wo {
                        let d = &dd[((bn * oc + o) * ho + i) * wo + j];
                        let slot = &mut db.data_mut()[o];
                        *slot = slot.add(d);
                        for ci in 0..c {
                            for u in 0..kh {
                                let Some(r) = self.src(i, u, h) else { continue };
                                for v in 0..kw {
                                    let Some(s) = self.src(j, v, wd) else {
                                        continue;
                                    };
                                    let xi = ((bn * c + ci) * h + r) * wd + s;
                                    let wi = ((o * c + ci) * kh + u) * kw + v;
                                    let gx = &mut dx.data_mut()[xi];
                                    *gx = gx.add(&d.mul(&wt[wi]));
                                    let gw = &mut dw.data_mut()[wi];
                                    *gw = gw.add(&d.mul(&xd[xi]));
                                }
                            }
                        }
                    }
                }
            }
        }
        Ok((dx, dw, db))
    }
}
