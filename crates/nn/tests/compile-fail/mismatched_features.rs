// A Linear(6 → 8) followed by a Linear(4 → 3): the second takes 4 features, the first gives 8.
use torchlean_nn::layers::Linear;
use torchlean_nn::seq;

fn main() {
    let _model = seq![Linear::<6, 8>::new(0).unwrap(), Linear::<4, 3>::new(1).unwrap()];
}
