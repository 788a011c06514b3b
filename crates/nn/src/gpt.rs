//! A GPT with nanoGPT's structure and parameter names, so that its `state_dict` loads into
//! nanoGPT's `GPT` unchanged: token and position embeddings (`transformer.wte`, `wpe`), `n_layer`
//! pre-norm blocks (`transformer.h.{i}`: `ln_1`, causal self-attention `attn.c_attn` /
//! `attn.c_proj`, `ln_2`, an MLP `mlp.c_fc` / `mlp.c_proj` with exact GELU), a final
//! `transformer.ln_f`, and a language-model head tied to `wte` (one parameter: its gradient is
//! the sum of both uses). Biases on, layer-norm eps 1e-5, dropout (`bernoulli_mask`) in training
//! mode when `dropout > 0`.
//!
//! Attention is one `causal_attention` node on `c_attn`'s output (the kind's kernels keep a
//! head's scores in cache and recompute them in the VJP) wherever no dropout falls on the
//! attention weights: with `dropout = 0` (the default) and in evaluation mode. With dropout in
//! training it is composed of IR kinds, as nanoGPT's own: the three projections are slices of
//! `c_attn`'s output, heads a reshape and a permutation to `[B·H, T, hd]`, scores a batched
//! `matmul` scaled by `1/√hd`, the causal mask an added constant (`−∞` above the diagonal, as
//! `masked_fill`), then `softmax`, dropout and a second batched `matmul`. The two agree
//! (`causal_attention` is that composition for finite values; the unit test
//! `fused_attention_is_the_composed_one` compares outputs and gradients).
//!
//! Initialisation is nanoGPT's: every linear and embedding weight `N(0, 0.02²)`, biases zero,
//! the residual projections (`c_proj`) `N(0, (0.02/√(2·n_layer))²)`, layer norms ones and zeros.

use crate::dynamic::{DynLayerNorm, DynLinear};
use crate::error::{NnError, Result, ValueProblem};
use crate::layers::{dropout, normal, Dropout, Layer, Mode};
use crate::ops::{Ops, Var};
use torchlean_spec::{GeluApprox, Op, Reduction, Shape, Tensor, UnaryOp};

/// The sizes of a [`Gpt`] (nanoGPT's `GPTConfig`, bias always on).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GptConfig {
    /// Tokens in the vocabulary (`vocab_size`).
    pub vocab: usize,
    /// The longest context (`block_size`).
    pub block: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_embd: usize,
    /// Drop probability of every dropout (embeddings, attention weights, residuals), in
    /// `[0, 1)`.
    pub dropout: f64,
}

/// Layer-norm epsilon (PyTorch's default, nanoGPT's).
const LN_EPS: f64 = 1e-5;
/// The standard deviation of nanoGPT's weight initialisation.
const INIT_STD: f64 = 0.02;

impl GptConfig {
    /// Every size positive, `n_embd` a multiple of `n_head`, `dropout` in `[0, 1)`.
    pub fn validate(&self) -> Result<()> {
        let bad = |problem| NnError::Invalid {
            what: "GPT configuration",
            layer: String::new(),
            problem,
        };
        for (name, v) in [
            ("vocab", self.vocab),
            ("block", self.block),
            ("n_layer", self.n_layer),
            ("n_head", self.n_head),
            ("n_embd", self.n_embd),
        ] {
            if v == 0 {
                return Err(bad(ValueProblem::ZeroSize { name }));
            }
        }
        if !self.n_embd.is_multiple_of(self.n_head) {
            return Err(bad(ValueProblem::HeadSplit {
                features: self.n_embd,
                heads: self.n_head,
            }));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(bad(ValueProblem::Probability {
                name: "dropout",
                value: self.dropout,
            }));
        }
        Ok(())
    }

    /// The matrix-product FLOPs of one forward pass over `batch` sequences of `t` tokens (each
    /// multiply-add two): the projections, the attention scores and values, and the head.
    pub fn forward_matmul_flops(&self, batch: usize, t: usize) -> f64 {
        let (b, t, c, v) = (
            batch as f64,
            t as f64,
            self.n_embd as f64,
            self.vocab as f64,
        );
        let tokens = b * t;
        // c_attn 3c², c_proj c², c_fc 4c², mlp.c_proj 4c² per token; scores and values t·c each
        let per_layer = 2.0 * tokens * (12.0 * c * c) + 2.0 * 2.0 * b * t * t * c;
        self.n_layer as f64 * per_layer + 2.0 * tokens * c * v
    }
}

/// One block's causal self-attention (`attn`).
#[derive(Clone, Debug)]
struct Attention {
    c_attn: DynLinear,
    c_proj: DynLinear,
}

/// One block's MLP (`mlp`).
#[derive(Clone, Debug)]
struct Mlp {
    c_fc: DynLinear,
    c_proj: DynLinear,
}

/// One transformer block (`transformer.h.{i}`).
#[derive(Clone, Debug)]
struct Block {
    ln_1: DynLayerNorm,
    attn: Attention,
    ln_2: DynLayerNorm,
    mlp: Mlp,
}

/// nanoGPT's `GPT` (see the module docs).
#[derive(Clone, Debug)]
pub struct Gpt {
    cfg: GptConfig,
    wte: Tensor<f64>,
    wpe: Tensor<f64>,
    blocks: Vec<Block>,
    ln_f: DynLayerNorm,
    /// Dropout's masks are drawn from this seed (a fresh key per use).
    seed: u64,
}

impl Gpt {
    /// The model with nanoGPT's initialisation drawn from `seed`.
    pub fn new(cfg: GptConfig, seed: u64) -> Result<Gpt> {
        cfg.validate()?;
        let c = cfg.n_embd;
        let proj_std = INIT_STD / (2.0 * cfg.n_layer as f64).sqrt();
        let mut key = 0u64;
        let mut draw = |shape: Shape, std: f64| {
            key += 1;
            normal(shape, std, seed, key)
        };
        let mut linear = |inputs: usize, outputs: usize, std: f64| -> Result<DynLinear> {
            let w = draw(Shape::from([outputs, inputs]), std)?;
            DynLinear::from_tensors(w, Tensor::zeros(Shape::from([outputs]))?)
        };
        let mut blocks = Vec::with_capacity(cfg.n_layer);
        for _ in 0..cfg.n_layer {
            blocks.push(Block {
                ln_1: DynLayerNorm::new(c, LN_EPS),
                attn: Attention {
                    c_attn: linear(c, 3 * c, INIT_STD)?,
                    c_proj: linear(c, c, proj_std)?,
                },
                ln_2: DynLayerNorm::new(c, LN_EPS),
                mlp: Mlp {
                    c_fc: linear(c, 4 * c, INIT_STD)?,
                    c_proj: linear(4 * c, c, proj_std)?,
                },
            });
        }
        Ok(Gpt {
            wte: normal(Shape::from([cfg.vocab, c]), INIT_STD, seed, 1 << 32)?,
            wpe: normal(Shape::from([cfg.block, c]), INIT_STD, seed, (1 << 32) + 1)?,
            blocks,
            ln_f: DynLayerNorm::new(c, LN_EPS),
            seed,
            cfg,
        })
    }

    pub fn config(&self) -> &GptConfig {
        &self.cfg
    }

    /// Logits `[batch, t, vocab]` of the token ids `ids` (`batch` rows of `t = ids.len() /
    /// batch ≤ block` tokens, row-major).
    pub fn logits<O: Ops>(
        &self,
        ops: &mut O,
        ids: &[usize],
        batch: usize,
        mode: Mode,
    ) -> Result<Var> {
        let t = self.context(ops, ids.len(), batch)?;
        let ids = ops.ids(Shape::from([batch, t]), ids)?;
        self.logits_of(ops, &ids, mode)
    }

    /// [`Gpt::logits`] of the ids constant `ids` `[B, T]`. The causal mask is made once, for
    /// every block.
    fn logits_of<O: Ops>(&self, ops: &mut O, ids: &Var, mode: Mode) -> Result<Var> {
        let (b, t) = match ids.shape().dims() {
            &[b, t] => (b, t),
            _ => unreachable!("the ids are [B, T]"),
        };
        let c = self.cfg.n_embd;
        let mask = if self.fused_attention(mode) {
            None
        } else {
            let mask = ops.constant(&causal_mask(t)?)?;
            Some(ops.broadcast_to(&mask, Shape::from([b * self.cfg.n_head, t, t]))?)
        };
        let x = ops.scoped("transformer", |ops| {
            let wte = ops.scoped("wte", |ops| ops.param("weight", &self.wte))?;
            let tok = ops.embedding(ids, &wte)?;
            let wpe = ops.scoped("wpe", |ops| ops.param("weight", &self.wpe))?;
            let pos = ops.apply(
                Op::Slice {
                    axis: 0,
                    start: 0,
                    len: t,
                },
                &[&wpe],
            )?;
            let pos = ops.broadcast_to(&pos, Shape::from([b, t, c]))?;
            let mut x = ops.add(&tok, &pos)?;
            x = self.dropout(ops, &x, mode)?;
            for (i, block) in self.blocks.iter().enumerate() {
                x = ops.scoped("h", |ops| {
                    ops.scoped(&i.to_string(), |ops| {
                        self.block(ops, block, &x, mask.as_ref(), mode)
                    })
                })?;
            }
            ops.scoped("ln_f", |ops| self.ln_f.forward(ops, &x, mode))
        })?;
        // lm_head: the same parameter as wte
        let wte = ops.scoped("transformer", |ops| {
            ops.scoped("wte", |ops| ops.param("weight", &self.wte))
        })?;
        let head = ops.transpose(&wte, 0, 1)?;
        let flat = ops.reshape(&x, Shape::from([b * t, c]))?;
        let logits = ops.matmul(&flat, &head)?;
        ops.reshape(&logits, Shape::from([b, t, self.cfg.vocab]))
    }

    /// The mean cross-entropy of the logits of `ids` against `targets` (the next tokens, one
    /// per id): nanoGPT's training loss.
    pub fn loss<O: Ops>(
        &self,
        ops: &mut O,
        ids: &[usize],
        targets: &[usize],
        batch: usize,
        mode: Mode,
    ) -> Result<Var> {
        if targets.len() != ids.len() {
            return Err(NnError::Invalid {
                what: "GPT targets",
                layer: ops.scope_path(),
                problem: ValueProblem::Targets {
                    targets: targets.len(),
                    ids: ids.len(),
                },
            });
        }
        // every id and label goes to the engine before the first op runs
        let t = self.context(ops, ids.len(), batch)?;
        let id_var = ops.ids(Shape::from([batch, t]), ids)?;
        let target = ops.ids(Shape::from([targets.len()]), targets)?;
        let logits = self.logits_of(ops, &id_var, mode)?;
        let flat = ops.reshape(&logits, Shape::from([ids.len(), self.cfg.vocab]))?;
        ops.apply(
            Op::CrossEntropy {
                reduction: Reduction::Mean,
            },
            &[&flat, &target],
        )
    }

    /// The context length of `n` ids in `batch` rows: `n / batch`, at most the block.
    fn context<O: Ops>(&self, ops: &O, n: usize, batch: usize) -> Result<usize> {
        let bad = |problem| NnError::Invalid {
            what: "GPT input",
            layer: ops.scope_path(),
            problem,
        };
        if batch == 0 || n == 0 || !n.is_multiple_of(batch) {
            return Err(bad(ValueProblem::Rows { ids: n, batch }));
        }
        let t = n / batch;
        if t > self.cfg.block {
            return Err(bad(ValueProblem::Context {
                tokens: t,
                block: self.cfg.block,
            }));
        }
        Ok(t)
    }

    /// `x + attn(ln_1(x))`, then `x + mlp(ln_2(x))`; `mask` is the causal mask `[B·H, T, T]`
    /// of the composed attention (`None` for the fused one).
    fn block<O: Ops>(
        &self,
        ops: &mut O,
        block: &Block,
        x: &Var,
        mask: Option<&Var>,
        mode: Mode,
    ) -> Result<Var> {
        let h = ops.scoped("ln_1", |ops| block.ln_1.forward(ops, x, mode))?;
        let a = ops.scoped("attn", |ops| {
            self.attention(ops, &block.attn, &h, mask, mode)
        })?;
        let x = ops.add(x, &a)?;
        let h = ops.scoped("ln_2", |ops| block.ln_2.forward(ops, &x, mode))?;
        let m = ops.scoped("mlp", |ops| {
            let h = ops.scoped("c_fc", |ops| block.mlp.c_fc.forward(ops, &h, mode))?;
            let h = ops.unary(UnaryOp::Gelu(GeluApprox::None), &h)?;
            let h = ops.scoped("c_proj", |ops| block.mlp.c_proj.forward(ops, &h, mode))?;
            self.dropout(ops, &h, mode)
        })?;
        ops.add(&x, &m)
    }

    /// Whether attention is the fused `causal_attention` kind: no dropout on its weights.
    fn fused_attention(&self, mode: Mode) -> bool {
        self.cfg.dropout == 0.0 || mode == Mode::Eval
    }

    /// Causal self-attention of `x` `[B, T, C]`: fused, or composed under `mask` `[B·H, T, T]`.
    fn attention<O: Ops>(
        &self,
        ops: &mut O,
        attn: &Attention,
        x: &Var,
        mask: Option<&Var>,
        mode: Mode,
    ) -> Result<Var> {
        let qkv = ops.scoped("c_attn", |ops| attn.c_attn.forward(ops, x, mode))?;
        let y = match mask {
            None => ops.apply(
                Op::CausalAttention {
                    heads: self.cfg.n_head,
                },
                &[&qkv],
            )?,
            Some(mask) => self.composed_attention(ops, &qkv, mask, mode)?,
        };
        let y = ops.scoped("c_proj", |ops| attn.c_proj.forward(ops, &y, mode))?;
        self.dropout(ops, &y, mode)
    }

    /// `causal_attention` of the projections `qkv` `[B, T, 3C]` composed of IR kinds, with
    /// dropout on the weights.
    fn composed_attention<O: Ops>(
        &self,
        ops: &mut O,
        qkv: &Var,
        mask: &Var,
        mode: Mode,
    ) -> Result<Var> {
        let (b, t, c) = match qkv.shape().dims() {
            &[b, t, c3] => (b, t, c3 / 3),
            _ => unreachable!("the projections are [B, T, 3C]"),
        };
        let (h, hd) = (self.cfg.n_head, c / self.cfg.n_head);
        let heads = |ops: &mut O, part: usize| -> Result<Var> {
            let z = ops.apply(
                Op::Slice {
                    axis: 2,
                    start: part * c,
                    len: c,
                },
                &[qkv],
            )?;
            let z = ops.reshape(&z, Shape::from([b, t, h, hd]))?;
            let z = ops.apply(
                Op::Permute {
                    perm: vec![0, 2, 1, 3],
                },
                &[&z],
            )?;
            ops.reshape(&z, Shape::from([b * h, t, hd]))
        };
        let q = heads(ops, 0)?;
        let k = heads(ops, 1)?;
        let v = heads(ops, 2)?;
        let kt = ops.transpose(&k, 1, 2)?;
        let scores = ops.matmul(&q, &kt)?;
        let scores = ops.scale(&scores, 1.0 / (hd as f64).sqrt())?;
        let scores = ops.add(&scores, mask)?;
        let weights = ops.softmax(&scores, 2)?;
        let weights = self.dropout(ops, &weights, mode)?;
        let y = ops.matmul(&weights, &v)?;
        let y = ops.reshape(&y, Shape::from([b, h, t, hd]))?;
        let y = ops.apply(
            Op::Permute {
                perm: vec![0, 2, 1, 3],
            },
            &[&y],
        )?;
        ops.reshape(&y, Shape::from([b, t, c]))
    }

    /// Dropout with the configured probability (none at 0, nor in evaluation mode).
    fn dropout<O: Ops>(&self, ops: &mut O, x: &Var, mode: Mode) -> Result<Var> {
        if self.cfg.dropout == 0.0 {
            return Ok(x.clone());
        }
        let d: Dropout<crate::Dyn> = dropout(self.cfg.dropout, self.seed)?;
        d.forward(ops, x, mode)
    }
}

/// `[t, t]`: 0 on and below the diagonal, `−∞` above (a position sees itself and the past).
fn causal_mask(t: usize) -> Result<Tensor<f64>> {
    Ok(Tensor::new([t, t], torchlean_spec::ops::causal_mask(t))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Session, Sweep};
    use torchlean_spec::ops::splitmix64;

    /// The fused `causal_attention` node and the composition it replaces (slices, heads,
    /// scaled scores, mask, softmax, products) give the same output and the same gradients of
    /// the block's input and of `c_attn` and `c_proj`, on the reference engine.
    #[test]
    fn fused_attention_is_the_composed_one() {
        let cfg = GptConfig {
            vocab: 5,
            block: 8,
            n_layer: 1,
            n_head: 2,
            n_embd: 8,
            dropout: 0.0,
        };
        let gpt = Gpt::new(cfg, 3).unwrap();
        let mut seed = 11;
        let data = (0..2 * 5 * 8)
            .map(|_| {
                seed = splitmix64(seed);
                (seed >> 11) as f64 / (1u64 << 53) as f64 - 0.5
            })
            .collect();
        let x = Tensor::new([2, 5, 8], data).unwrap();
        let run = |composed: bool| {
            let mut s = Session::<Tensor<f64>>::new();
            let xv = s.input("x", &x, true).unwrap();
            let mask = composed.then(|| {
                let m = s.constant(&causal_mask(5).unwrap()).unwrap();
                s.broadcast_to(&m, Shape::from([4, 5, 5])).unwrap()
            });
            let attn = &gpt.blocks[0].attn;
            let y = gpt
                .attention(&mut s, attn, &xv, mask.as_ref(), Mode::Train)
                .unwrap();
            let loss = s.apply(Op::Sum, &[&y]).unwrap();
            s.backward(&loss, Sweep::DenseAll).unwrap();
            let mut got = vec![
                s.value(&y).unwrap().clone(),
                s.grad(&xv).unwrap().unwrap().clone(),
            ];
            for name in ["c_attn.weight", "c_proj.weight"] {
                got.push(s.param_grad(name).unwrap().clone());
            }
            got
        };
        for (fused, composed) in run(false).iter().zip(&run(true)) {
            let worst = fused
                .data()
                .iter()
                .zip(composed.data())
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f64::max);
            assert!(worst < 1e-14, "off by {worst}");
        }
    }
}
