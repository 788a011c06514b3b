//! The trainer on a model of your own: a residual MLP written against `Ops`, trained on the
//! digits with every 50th step re-checked on the reference engine in f64, saved, and read back
//! to classify raw pixels. `cargo run --release --example train_own_model`.
use torchlean_engine_cpu::CpuF32;
use torchlean_nn::dynamic::DynLinear;
use torchlean_nn::{Layer, Mode, Ops, Var};
use torchlean_spec::UnaryOp;
use torchlean_train::{Arch, Classify, Dataset, SavedClassifier, TrainConfig, Trainer};

/// `h = relu(input(x)); h = h + relu(block(h)); head(h)`, parameters named by scope.
struct ResidualMlp {
    layers: [(&'static str, DynLinear); 3],
}

impl Classify for ResidualMlp {
    fn example_shape(&self) -> Vec<usize> {
        vec![64] // the digits' 8×8 pixels, flat
    }

    fn logits<O: Ops>(&self, ops: &mut O, x: &Var, mode: Mode) -> torchlean_nn::Result<Var> {
        let [(n0, input), (n1, block), (n2, head)] = &self.layers;
        let h = ops.scoped(n0, |ops| input.forward(ops, x, mode))?;
        let h = ops.unary(UnaryOp::Relu, &h)?;
        let b = ops.scoped(n1, |ops| block.forward(ops, &h, mode))?;
        let b = ops.unary(UnaryOp::Relu, &b)?;
        let h = ops.add(&h, &b)?;
        ops.scoped(n2, |ops| head.forward(ops, &h, mode))
    }

    fn description(&self) -> String {
        "ResidualMlp(64 → 64 → 10)".into()
    }
}

fn model(seed: u64) -> Result<ResidualMlp, Box<dyn std::error::Error>> {
    let layers = [
        ("input", DynLinear::new(64, 64, seed)?),
        ("block", DynLinear::new(64, 64, seed + 1)?),
        ("head", DynLinear::new(64, 10, seed + 2)?),
    ];
    Ok(ResidualMlp { layers })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut cfg = TrainConfig::new(Arch::Custom); // SGD(lr=0.05, momentum=0.9), batch 32
    cfg.verify_every = Some(50);
    let mut trainer = Trainer::<CpuF32, _>::with_model(cfg, model(1)?, &Dataset::digits()?)?;
    let s = trainer.run(&mut torchlean_train::Quiet)?;
    let v = s.verify.as_ref().map_or(0.0, |v| v.worst);
    println!(
        "{} steps, held-out accuracy {:.2} %, worst verified deviation {v:.1e}",
        s.steps,
        100.0 * s.held_out_after.accuracy
    );
    let path = std::env::temp_dir().join("own_model.safetensors");
    trainer.save(&path)?; // input.weight, block.bias, …, and the input normalization
    let mut saved = SavedClassifier::load_with(&path, model(0)?)?;
    let (pixels, labels) = Dataset::digits_raw()?; // raw 0..16 pixels, as the file holds them
    let classes = saved.predict::<CpuF32>(&pixels)?;
    let right = classes.iter().zip(&labels).filter(|(c, l)| c == l).count();
    println!(
        "{right} of {} digits classified right from raw pixels ({})",
        labels.len(),
        path.display()
    );
    Ok(())
}
