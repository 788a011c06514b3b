//! `torchlean predict CHECKPOINT --csv FILE | --digits [--json]`: a saved classifier on raw
//! rows, one class name (or JSON object) per row.

use crate::args::PredictArgs;
use crate::out;
use crate::train::bad;
use crate::{BadInput, Outcome, Stop};
use serde_json::json;
use torchlean_ir::DType;
use torchlean_train::data::Dataset;
use torchlean_train::predict::SavedClassifier;
use torchlean_train::TrainValue;

pub fn run(a: &PredictArgs) -> Result<Outcome, Stop> {
    let saved = SavedClassifier::load(&a.checkpoint).map_err(bad)?;
    let trained = match saved.dtype() {
        "f64" => DType::F64,
        _ => DType::F32,
    };
    let dtype = crate::engine::dtype_or(a.engine, a.dtype, trained);
    let rows = match &a.csv {
        Some(path) => Dataset::columns_from_csv(path, saved.feature_names()).map_err(bad)?,
        None => {
            let digits = Dataset::digits().map_err(bad)?;
            if digits.feature_names() != saved.feature_names() {
                return Err(BadInput::one(format!(
                    "{}: --digits: the model was trained on {} other features ({}, …)",
                    a.checkpoint.display(),
                    saved.feature_names().len(),
                    saved.feature_names().first().map_or("", String::as_str)
                ))
                .into());
            }
            Dataset::digits_raw().map_err(bad)?.0
        }
    };
    let sel = crate::engine::select(a.engine, dtype)?;
    crate::engine::with_engine!(sel, V => predict_on::<V>(a, saved, &rows))
}

fn predict_on<V: TrainValue>(
    a: &PredictArgs,
    mut saved: SavedClassifier,
    rows: &[f64],
) -> Result<Outcome, Stop> {
    let classes = saved
        .predict::<V>(rows)
        .map_err(|e| BadInput::at(&a.checkpoint, &e))?;
    let names = saved.class_names();
    for (row, &class) in classes.iter().enumerate() {
        let name = &names[class];
        if a.json {
            out::line(json!({"row": row, "class": class, "name": name}))?;
        } else {
            out::line(name)?;
        }
    }
    Ok(Outcome::Ok)
}
