//! `train --from`: an ONNX model that imports but is no classifier of the data is refused with
//! a cause a caller can match on.

use std::path::PathBuf;

use torchlean_train::imported::{ImportMisfit, ImportedNet, OnnxSource};
use torchlean_train::TrainError;

fn zoo(name: &str) -> OnnxSource {
    OnnxSource {
        path: PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../onnx/tests/zoo")
            .join(name),
        head: None,
    }
}

fn misfit(source: &OnnxSource, features: usize, classes: usize) -> ImportMisfit {
    match ImportedNet::load(source, features, classes, 1) {
        Err(TrainError::ImportedModel { path, problem }) if path == source.path => problem,
        other => panic!("expected a misfit of {}: {other:?}", source.path.display()),
    }
}

#[test]
fn a_model_for_other_rows_or_classes_is_refused_with_what_it_takes() {
    let mlp = zoo("mlp.onnx");
    let ImportMisfit::ExampleSize {
        example, features, ..
    } = misfit(&mlp, 64, 10)
    else {
        panic!("not an example-size misfit");
    };
    assert_eq!((example, features), (vec![6], 64));
    let ImportMisfit::Output {
        batch,
        output,
        outputs,
        classes,
        head_named,
    } = misfit(&mlp, 6, 10)
    else {
        panic!("not an output misfit");
    };
    assert_eq!(
        (batch, output, outputs, classes, head_named),
        (1, Some(vec![1, 3]), 1, 10, false)
    );
    assert!(ImportedNet::load(&mlp, 6, 3, 1).is_ok());
}
