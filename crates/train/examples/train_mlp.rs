//! The library's training loop: an MLP on the digits, in an eager Session on the CPU engine.
//! `cargo run --release --example train_mlp` (what `torchlean train mlp` does, by hand).
use torchlean_engine_cpu::CpuF32;
use torchlean_nn::layers::{relu, Linear};
use torchlean_nn::{seq, Layer, Mode, Ops, Session, Sweep};
use torchlean_spec::Reduction;
use torchlean_train::{epoch_order, Dataset, EngineOptimizer, OptimConfig, Standardizer};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (mut train, mut test) = Dataset::digits()?.split(0.2, 0)?; // 64 pixels, 10 classes
    let stats = Standardizer::fit(&train);
    train.standardize(&stats)?;
    test.standardize(&stats)?;
    let model = seq![
        Linear::<64, 128>::new(1)?,
        relu(),
        Linear::<128, 10>::new(2)?
    ];
    let mut s = Session::<CpuF32>::new();
    let mut opt = EngineOptimizer::new(OptimConfig::adam(1e-3))?;
    for epoch in 0..10 {
        for rows in epoch_order(train.len(), 0, epoch).chunks(32) {
            s.reset(); // a fresh tape each step; the parameters stay
            let (x, labels) = train.batch(rows)?;
            let x = s.input("x", &x, false)?;
            let logits = model.forward(&mut s, &x, Mode::Train)?;
            let loss = s.cross_entropy(&logits, &labels, Reduction::Mean)?;
            s.backward(&loss, Sweep::Releasing)?;
            opt.step_session(&mut s)?; // optimizer.step(), gradients consumed
        }
        s.reset();
        let (x, labels) = test.batch(&(0..test.len()).collect::<Vec<_>>())?;
        let x = s.input("x", &x, false)?;
        let logits = model.forward(&mut s, &x, Mode::Eval)?;
        let scores = s.value_f64(&logits)?; // row-major [N, 10]
        let rows = scores.data().chunks(10).zip(&labels);
        let right = rows.filter(|(r, &l)| r.iter().all(|&v| v <= r[l])).count();
        let accuracy = 100.0 * right as f64 / test.len() as f64;
        println!("epoch {epoch}: held-out accuracy {accuracy:.2} %");
    }
    Ok(())
}
