//! The reduce family on the CUDA engine: sums and means over one axis and their spread, whole
//! sums, MSE, cross entropy — and the segmented sums the norm family's statistics use.
//!
//! Every sum is a [`Segments`] reduction run by [`sum_into`]: each output's items are summed
//! into [`parts_for`] interleaved partials (doubles kept in two floats), and those again, until
//! one is left ([`Plan`]). The tree depends only on the number of items, so a sum is the same
//! on every device and grid, run to run; no thread walks more than about [`CHUNK`] values
//! (plus a stride), so a sum over millions of elements spreads over the device.
//!
//! Invariant: the order of every sum is a function of the shapes only.

use super::{launch_into, launch_new};
use crate::buffer::Buffer;
use crate::device::{Arg, Device};
use crate::error::Result;
use crate::geometry::{index, index_table, Launch};
use crate::kernels::REDUCE;
use crate::tensor::CudaTensor;
use torchlean_spec::Shape;

/// The most items one partial sums (before the next level of the tree).
pub const CHUNK: usize = 256;

/// The number of partials of a sum over `items` items: `⌈items / CHUNK⌉`, at least one (a sum
/// over nothing is one partial of zero).
pub fn parts_for(items: usize) -> usize {
    items.div_ceil(CHUNK).max(1)
}

/// The levels of a sum over `items` items: the partials of each level, the last being 1.
/// `[1]` when one partial is the whole sum.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub levels: Vec<usize>,
}

impl Plan {
    pub fn for_items(items: usize) -> Plan {
        let mut levels = vec![parts_for(items)];
        while let Some(&last) = levels.last().filter(|&&l| l > 1) {
            levels.push(parts_for(last));
        }
        Plan { levels }
    }
}

/// Where the items of each output of a reduction are: output `j = (j1, j2)` over
/// `(outputs / j_inner, j_inner)`, item `m = (m1, m2)` over `(items / m_inner, m_inner)`, at
/// offset `j1·sj1 + j2·sj2 + m1·sm1 + m2·sm2` of the operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segments {
    pub outputs: usize,
    pub j_inner: usize,
    pub sj1: usize,
    pub sj2: usize,
    pub items: usize,
    pub m_inner: usize,
    pub sm1: usize,
    pub sm2: usize,
}

impl Segments {
    /// Over `axis` of an `outer × n × inner` view: one output per `(o, i)`, items `k`.
    pub fn along_axis(outer: usize, n: usize, inner: usize) -> Segments {
        Segments {
            outputs: outer * inner,
            j_inner: inner.max(1),
            sj1: n * inner,
            sj2: 1,
            items: n,
            m_inner: n.max(1),
            sm1: 0,
            sm2: inner,
        }
    }

    /// Every element of a flat run of `n`: one output.
    pub fn whole(n: usize) -> Segments {
        Segments::along_axis(1, n, 1)
    }

    /// Per channel of an `n × c × rest` view (batch norm's statistics): one output per channel,
    /// items `(b, r)` in the reference's order (the batch, then each image's positions).
    pub fn per_channel(n: usize, c: usize, rest: usize) -> Segments {
        Segments {
            outputs: c,
            j_inner: c.max(1),
            sj1: 0,
            sj2: rest,
            items: n * rest,
            m_inner: rest.max(1),
            sm1: c * rest,
            sm2: 1,
        }
    }

    /// The operand offset of item `m` of output `j` (what the kernel computes).
    #[cfg(test)]
    pub fn offset(&self, j: usize, m: usize) -> usize {
        (j / self.j_inner) * self.sj1
            + (j % self.j_inner) * self.sj2
            + (m / self.m_inner) * self.sm1
            + (m % self.m_inner) * self.sm2
    }
}

/// What each item of a reduction is (the kernel's `kind`).
pub enum Item<'a, D: Device> {
    /// `a`
    Value(&'a D::Mem),
    /// `(a − b)²`
    SquaredDiff(&'a D::Mem, &'a D::Mem),
    /// `(a − c_j)²`, `c_j` output `j`'s double in `center`
    CentredSquare(&'a D::Mem, &'a D::Mem),
    /// `b·(a − c_j)`
    WeightedCentred(&'a D::Mem, &'a D::Mem, &'a D::Mem),
}

impl<'a, D: Device> Item<'a, D> {
    /// `(kind, a, b, center)` as the kernel takes them (unused operands repeat `a`).
    fn operands(&self) -> (i64, &'a D::Mem, &'a D::Mem, &'a D::Mem) {
        match *self {
            Item::Value(a) => (0, a, a, a),
            Item::SquaredDiff(a, b) => (1, a, b, a),
            Item::CentredSquare(a, c) => (2, a, a, c),
            Item::WeightedCentred(a, b, c) => (3, a, b, c),
        }
    }
}

/// How the final sum `s` of each output is written (the kernel's `mode`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Emit {
    /// `s / denom` as one `f32`.
    Value { denom: usize },
    /// `s / denom` as a double (two floats).
    Double { denom: usize },
    /// `sqrt(s / denom + eps)` as a double (batch norm's sigma).
    Sigma { denom: usize, eps: f64 },
}

impl Emit {
    /// `(denom, mode, eps bits)` as the kernels take them.
    fn args(self) -> (usize, i64, u64) {
        match self {
            Emit::Value { denom } => (denom, 0, 0),
            Emit::Double { denom } => (denom, 1, 0),
            Emit::Sigma { denom, eps } => (denom, 2, eps.to_bits()),
        }
    }

    /// The floats written per output.
    pub fn width(self) -> usize {
        match self {
            Emit::Value { .. } => 1,
            Emit::Double { .. } | Emit::Sigma { .. } => 2,
        }
    }
}

/// The mean denominator `n`: a mean over zero elements is `0/0 = NaN`, as in PyTorch (and the
/// reference).
pub fn denominator(n: usize) -> usize {
    n
}

/// The outputs of `seg` over `item`, emitted by `emit` into a new buffer of
/// `seg.outputs · emit.width()` floats.
pub(crate) fn sum_into<D: Device>(
    op: &'static str,
    seg: &Segments,
    item: Item<'_, D>,
    emit: Emit,
) -> Result<Buffer<D>> {
    let plan = Plan::for_items(seg.items);
    let last = plan.levels.len() - 1;
    let double = Emit::Double { denom: 1 };
    let level_emit = |l: usize| if l == last { emit } else { double };
    let slots = |l: usize| seg.outputs * plan.levels[l] * level_emit(l).width();
    let mut cur = Buffer::<D>::uninit(slots(0))?;
    let (kind, a, b, center) = item.operands();
    let (denom, mode, eps) = level_emit(0).args();
    let parts = plan.levels[0];
    // tl_red_items(float* out, const float* a, const float* b, const float* center,
    //   ll outputs, ll j_inner, ll sj1, ll sj2, ll items, ll m_inner, ll sm1, ll sm2,
    //   ll parts, ll kind, ll denom, ll mode, ull eps_bits)
    launch_into(
        REDUCE.kernel("tl_red_items"),
        Launch::for_items(seg.outputs.saturating_mul(parts)),
        [&mut cur],
        [
            Arg::In(a),
            Arg::In(b),
            Arg::In(center),
            Arg::Index(index(op, "outputs", seg.outputs)?),
            Arg::Index(index(op, "j_inner", seg.j_inner)?),
            Arg::Index(index(op, "stride", seg.sj1)?),
            Arg::Index(index(op, "stride", seg.sj2)?),
            Arg::Index(index(op, "items", seg.items)?),
            Arg::Index(index(op, "m_inner", seg.m_inner)?),
            Arg::Index(index(op, "stride", seg.sm1)?),
            Arg::Index(index(op, "stride", seg.sm2)?),
            Arg::Index(index(op, "parts", parts)?),
            Arg::Index(kind),
            Arg::Index(index(op, "denominator", denom)?),
            Arg::Index(mode),
            Arg::U64(eps),
        ],
    )?;
    for l in 1..=last {
        let mut next = Buffer::<D>::uninit(slots(l))?;
        let (denom, mode, eps) = level_emit(l).args();
        // tl_red_parts(float* out, const float* part, ll outputs, ll parts_in, ll parts_out,
        //   ll denom, ll mode, ull eps_bits)
        launch_into(
            REDUCE.kernel("tl_red_parts"),
            Launch::for_items(seg.outputs.saturating_mul(plan.levels[l])),
            [&mut next],
            [
                Arg::In(cur.mem()),
                Arg::Index(index(op, "outputs", seg.outputs)?),
                Arg::Index(index(op, "parts", plan.levels[l - 1])?),
                Arg::Index(index(op, "parts", plan.levels[l])?),
                Arg::Index(index(op, "denominator", denom)?),
                Arg::Index(mode),
                Arg::U64(eps),
            ],
        )?;
        cur = next;
    }
    Ok(cur)
}

/// A tensor of `shape` holding the outputs of `seg` as `f32` values `s / denom`.
fn sum_tensor<D: Device>(
    op: &'static str,
    shape: Shape,
    seg: &Segments,
    item: Item<'_, D>,
    denom: usize,
) -> Result<CudaTensor<D>> {
    let buf = sum_into(op, seg, item, Emit::Value { denom })?;
    CudaTensor::from_buffer(shape, buf)
}

pub fn reduce_axis<D: Device>(
    x: &CudaTensor<D>,
    axis: usize,
    mean: bool,
    out: &Shape,
) -> Result<CudaTensor<D>> {
    let (outer, n, inner) = x.shape().split_at_axis(axis);
    let denom = if mean { denominator(n) } else { 1 };
    let seg = Segments::along_axis(outer, n, inner);
    sum_tensor(
        "reduce_axis",
        out.clone(),
        &seg,
        Item::Value(x.mem()),
        denom,
    )
}

pub fn spread<D: Device>(
    dy: &CudaTensor<D>,
    in_shape: &Shape,
    axis: usize,
    mean: bool,
) -> Result<CudaTensor<D>> {
    const OP: &str = "spread";
    let (_, n, inner) = in_shape.split_at_axis(axis);
    let total = in_shape.checked_size()?;
    let denom = if mean { denominator(n) } else { 1 };
    // tl_red_spread(float* y, const float* dy, ll total, ll n, ll inner, ll denom)
    launch_new(
        REDUCE.kernel("tl_red_spread"),
        Launch::for_items(total),
        in_shape.clone(),
        [
            Arg::In(dy.mem()),
            Arg::Index(index(OP, "n", total)?),
            Arg::Index(index(OP, "axis", n)?),
            Arg::Index(index(OP, "inner", inner)?),
            Arg::Index(index(OP, "denominator", denom)?),
        ],
    )
}

pub fn sum_all<D: Device>(x: &CudaTensor<D>) -> Result<CudaTensor<D>> {
    let seg = Segments::whole(x.len());
    sum_tensor("sum", Shape::scalar(), &seg, Item::Value(x.mem()), 1)
}

pub fn sum_all_vjp<D: Device>(dy: &CudaTensor<D>, in_shape: &Shape) -> Result<CudaTensor<D>> {
    let n = in_shape.checked_size()?;
    // tl_red_fill_from(float* y, const float* x, ll n)
    launch_new(
        REDUCE.kernel("tl_red_fill_from"),
        Launch::for_items(n),
        in_shape.clone(),
        [Arg::In(dy.mem()), Arg::Index(index("sum_vjp", "n", n)?)],
    )
}

pub fn mse_loss<D: Device>(y: &CudaTensor<D>, t: &CudaTensor<D>) -> Result<CudaTensor<D>> {
    let n = y.len();
    let seg = Segments::whole(n);
    let item = Item::SquaredDiff(y.mem(), t.mem());
    sum_tensor("mse_loss", Shape::scalar(), &seg, item, denominator(n))
}

pub fn mse_loss_vjp<D: Device>(
    y: &CudaTensor<D>,
    t: &CudaTensor<D>,
    dy: &CudaTensor<D>,
) -> Result<(CudaTensor<D>, CudaTensor<D>)> {
    const OP: &str = "mse_loss_vjp";
    let n = y.len();
    let mut gy = Buffer::<D>::uninit(n)?;
    let mut gt = Buffer::<D>::uninit(n)?;
    // tl_red_mse_vjp(float* dy, float* dt, const float* y, const float* t, const float* cot,
    //   ll n, ll denom)
    launch_into(
        REDUCE.kernel("tl_red_mse_vjp"),
        Launch::for_items(n),
        [&mut gy, &mut gt],
        [
            Arg::In(y.mem()),
            Arg::In(t.mem()),
            Arg::In(dy.mem()),
            Arg::Index(index(OP, "n", n)?),
            Arg::Index(index(OP, "denominator", denominator(n))?),
        ],
    )?;
    Ok((
        CudaTensor::from_buffer(y.shape().clone(), gy)?,
        CudaTensor::from_buffer(t.shape().clone(), gt)?,
    ))
}

/// `(N, C)` of validated `[N, C]` logits.
fn rows_classes<D: Device>(logits: &CudaTensor<D>) -> (usize, usize) {
    let d = logits.shape().dims();
    (d[0], d[1])
}

/// The validated class ids as the kernels' `long long` table.
pub fn cross_entropy<D: Device>(
    logits: &CudaTensor<D>,
    target: &[usize],
    mean: bool,
) -> Result<CudaTensor<D>> {
    const OP: &str = "cross_entropy";
    let (n, c) = rows_classes(logits);
    let ids = index_table(OP, "target", target)?;
    let mut rows = Buffer::<D>::uninit(n)?;
    // tl_red_ce_rows(float* loss, const float* x, const long long* ids, ll n, ll c)
    launch_into(
        REDUCE.kernel("tl_red_ce_rows"),
        Launch::for_items(n),
        [&mut rows],
        [
            Arg::In(logits.mem()),
            Arg::Table(&ids),
            Arg::Index(index(OP, "N", n)?),
            Arg::Index(index(OP, "C", c)?),
        ],
    )?;
    let denom = if mean { denominator(n) } else { 1 };
    let seg = Segments::whole(n);
    sum_tensor(OP, Shape::scalar(), &seg, Item::Value(rows.mem()), denom)
}

pub fn cross_entropy_vjp<D: Device>(
    logits: &CudaTensor<D>,
    target: &[usize],
    dy: &CudaTensor<D>,
    mean: bool,
) -> Result<CudaTensor<D>> {
    const OP: &str = "cross_entropy_vjp";
    let (n, c) = rows_classes(logits);
    let ids = index_table(OP, "target", target)?;
    let denom = if mean { denominator(n) } else { 1 };
    // tl_red_ce_vjp(float* dx, const float* x, const long long* ids, const float* cot, ll n,
    //   ll c, ll denom)
    launch_new(
        REDUCE.kernel("tl_red_ce_vjp"),
        Launch::for_items(n),
        logits.shape().clone(),
        [
            Arg::In(logits.mem()),
            Arg::Table(&ids),
            Arg::In(dy.mem()),
            Arg::Index(index(OP, "N", n)?),
            Arg::Index(index(OP, "C", c)?),
            Arg::Index(index(OP, "denominator", denom)?),
        ],
    )
}

/// The elements as `f64` (exact: every `f32` is an `f64`); small operands only.
pub fn values_f64<D: Device>(x: &CudaTensor<D>) -> Result<Vec<f64>> {
    Ok(x.to_host()?.into_iter().map(f64::from).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The offsets the reference visits, per output, in its order.
    fn axis_reference(outer: usize, n: usize, inner: usize) -> Vec<Vec<usize>> {
        let mut out = Vec::new();
        for o in 0..outer {
            for i in 0..inner {
                out.push((0..n).map(|k| (o * n + k) * inner + i).collect());
            }
        }
        out
    }

    fn visited(seg: &Segments) -> Vec<Vec<usize>> {
        (0..seg.outputs)
            .map(|j| (0..seg.items).map(|m| seg.offset(j, m)).collect())
            .collect()
    }

    #[test]
    fn axis_segments_visit_the_reference_offsets_in_order() {
        for (outer, n, inner) in [
            (3, 5, 2),
            (1, 5, 1),
            (4, 1, 3),
            (2, 0, 3),
            (0, 4, 2),
            (1, 7, 1),
        ] {
            let seg = Segments::along_axis(outer, n, inner);
            assert_eq!(seg.outputs, outer * inner);
            assert_eq!(
                visited(&seg),
                axis_reference(outer, n, inner),
                "{outer}x{n}x{inner}"
            );
        }
        assert_eq!(visited(&Segments::whole(4)), vec![vec![0, 1, 2, 3]]);
    }

    #[test]
    fn channel_segments_visit_batch_then_positions() {
        let (n, c, rest) = (2, 3, 4);
        let seg = Segments::per_channel(n, c, rest);
        for ch in 0..c {
            let want: Vec<usize> = (0..n)
                .flat_map(|b| (0..rest).map(move |r| (b * c + ch) * rest + r))
                .collect();
            assert_eq!(visited(&seg)[ch], want, "channel {ch}");
        }
        // an empty batch: channels with no items
        let empty = Segments::per_channel(0, 3, 4);
        assert_eq!(empty.outputs, 3);
        assert_eq!(empty.items, 0);
    }

    #[test]
    fn the_tree_depends_only_on_the_item_count_and_ends_in_one() {
        assert_eq!(Plan::for_items(0).levels, vec![1]);
        assert_eq!(Plan::for_items(1).levels, vec![1]);
        assert_eq!(Plan::for_items(CHUNK).levels, vec![1]);
        assert_eq!(Plan::for_items(CHUNK + 1).levels, vec![2, 1]);
        assert_eq!(
            Plan::for_items(3_000_000).levels,
            vec![11_719, 46, 1],
            "three levels for three million items"
        );
        // every partial of every level sums at most CHUNK values of the level below
        for items in [0, 5, 300, 70_000, 10_000_000] {
            let plan = Plan::for_items(items);
            let mut below = items;
            for &parts in &plan.levels {
                assert!(below.div_ceil(parts) <= CHUNK, "{items}: {plan:?}");
                below = parts;
            }
            assert_eq!(plan.levels.last(), Some(&1));
        }
    }

    #[test]
    fn a_mean_over_nothing_divides_by_zero() {
        assert_eq!(denominator(0), 0);
        assert_eq!(denominator(7), 7);
        assert_eq!(Emit::Value { denom: 1 }.width(), 1);
        assert_eq!(Emit::Sigma { denom: 1, eps: 0.0 }.width(), 2);
    }
}
