// A convolution's images fed straight into a Linear layer: a Flatten is missing.
use torchlean_nn::layers::{Conv2d, Linear};
use torchlean_nn::seq;

fn main() {
    let _model = seq![
        Conv2d::<1, 3, 3>::new(1, 1, 0).unwrap(),
        Linear::<12, 4>::new(1).unwrap(),
    ];
}
