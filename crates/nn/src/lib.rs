//! `torchlean-nn`: models written once, run two ways.
//!
//! A model is ordinary generic Rust over [`Ops`] (TorchLean's `Ops`/`Program`): its one
//! primitive is [`Ops::apply`] of any `torchlean_spec::Op`, with named helpers (`linear`,
//! `relu`, `softmax`, …), `param` for named parameters and `scoped` for layer names. Two
//! interpreters run it:
//!
//! - [`Session<V>`]: eager, on any engine `V` (the reference engine, the CPU engine); every op
//!   runs now and is recorded on a tape; [`Session::backward`] with the dense or the releasing
//!   sweep, [`Session::grad`], `no_grad`, `detach`, [`Session::reset`];
//! - [`Recorder`]: records the typed SSA graph without running anything;
//!   [`Recorded::run`] compiles and differentiates it (`compile` + `backward_dense_all`, the path
//!   TorchLean's link theorem is about) and [`Recorded::to_ir`] writes `torchlean.ir.v1` and
//!   its payload, which every check of the project applies to.
//!
//! The training losses ([`Loss`]: PyTorch's `mse_loss`, `cross_entropy` with label smoothing
//! and `binary_cross_entropy_with_logits`) are written once over [`Ops`] the same way.
//!
//! ```
//! use torchlean_nn::{Ops, Recorder, Session, Sweep};
//! use torchlean_spec::{Shape, Tensor};
//!
//! fn model<O: Ops>(ops: &mut O, x: &torchlean_nn::Var) -> torchlean_nn::Result<torchlean_nn::Var> {
//!     let w = ops.param("weight", &Tensor::full(Shape::from([2, 3]), 0.5)?)?;
//!     let b = ops.param("bias", &Tensor::zeros(Shape::from([2]))?)?;
//!     let h = ops.linear(x, &w, &b)?;
//!     let h = ops.tanh(&h)?;
//!     ops.sum(&h)
//! }
//!
//! let x = Tensor::new([4, 3], (0..12).map(|i| i as f64 / 10.0).collect())?;
//! // eagerly, on the reference engine
//! let mut s = Session::<Tensor<f64>>::new();
//! let input = s.input("x", &x, false)?;
//! let loss = model(&mut s, &input)?;
//! s.backward(&loss, Sweep::Releasing)?;
//! let eager_grad = s.param_grad("weight").expect("a gradient").clone();
//! // recorded, compiled and differentiated: the same gradient
//! let mut r = Recorder::new();
//! let input = r.input("x", &x, false)?;
//! let out = model(&mut r, &input)?;
//! let rec = r.finish(&out)?;
//! let run = rec.run::<Tensor<f64>>()?;
//! assert!(rec.param_grad(&run, "weight").expect("a gradient").bit_eq(&eager_grad));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod dynamic;
pub mod error;
pub mod gpt;
pub mod layers;
pub mod loss;
pub mod ops;
pub mod program;
pub mod record;
pub mod session;
pub mod state;
pub mod zoo;

pub use dynamic::{Dyn, DynConv2d, DynLayer, DynLayerNorm, DynLinear, DynSequential};
pub use error::{ExportProblem, NnError, ProgramProblem, Result, ValueProblem};
pub use gpt::{Gpt, GptConfig};
pub use layers::{Features, Image, Layer, Mode, Seq};
pub use loss::{Loss, LossProblem, Target};
pub use ops::{Ops, Var};
pub use program::{IrProgram, ParamNaming, Program};
pub use record::{IrExport, Leaf, LeafKind, Recorded, RecordedRun, Recorder};
pub use session::{Session, Sweep, Swept};

/// The README's Rust example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeExample;
