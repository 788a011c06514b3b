//! Data sets for training: the embedded 8×8 digits, CSV files, seeded stratified splits,
//! standardization, seeded per-epoch shuffles and mini-batches.
//!
//! A [`Dataset`] is `len()` rows of `features()` `f64`s (row-major) with a class id in
//! `0..classes()` per row; it is never empty. Everything random here is a pure function of its
//! arguments (a seed, an epoch), built on [`splitmix64`], so the trainer can save the batch
//! order and a PyTorch twin can replay it (or recompute it from the formula in
//! [`epoch_order`]).
//!
//! The CSV reader ([`csv`], on the `csv` crate) takes a header line of names, one label column named by
//! the caller, every other column a numeric feature; its errors name the file, the 1-based
//! line and the column ([`CsvProblem`]).

pub mod csv;
pub mod text;

use std::num::NonZeroUsize;
use std::path::Path;

use serde::{Deserialize, Serialize};
use torchlean_spec::ops::splitmix64;
use torchlean_spec::Tensor;

pub use self::csv::{Column, CsvProblem, MAX_INTEGER_CLASSES};
pub use self::text::{batch_offsets, CharTokenizer, Draw, Split, TextCorpus, TokenBatch};
use crate::error::{Result, TrainError};

/// The embedded digits file (see `crates/train/data/README.md`): 1,797 lines of 64 pixels
/// (`0..=16`) and a label, no header.
const DIGITS_CSV: &str = include_str!("../data/digits.csv");

/// The digits' largest pixel value: the embedded file's pixels are divided by it.
const DIGITS_PIXEL_MAX: f64 = 16.0;

/// How the embedded digits file is named in errors.
const DIGITS_ORIGIN: &str = "digits.csv (embedded)";

/// A labelled data set: `len()` rows × `features()` values (`f64`, row-major) and one class id
/// in `0..classes()` per row. Never empty.
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    origin: String,
    features: usize,
    x: Vec<f64>,
    labels: Vec<usize>,
    feature_names: Vec<String>,
    class_names: Vec<String>,
    image: Option<(usize, usize)>,
    /// What the file's values were divided by to give `x` (16 for the digits' pixels, else 1):
    /// a saved model's input normalization is in the file's units.
    input_divisor: f64,
}

impl Dataset {
    /// The 8×8 handwritten digits (scikit-learn's copy of the UCI test set, embedded): 1,797
    /// rows, 64 features (pixels in row-major order, divided by 16 so they lie in `[0, 1]`),
    /// 10 classes named `"0"` to `"9"`, image `(8, 8)`, feature names `pixel_<row>_<col>`.
    pub fn digits() -> Result<Dataset> {
        let names: Vec<String> = (0..64)
            .map(|i| format!("pixel_{}_{}", i / 8, i % 8))
            .chain(std::iter::once("label".to_string()))
            .collect();
        let table = csv::table(
            DIGITS_ORIGIN,
            &names,
            1,
            64,
            csv::Records::new(DIGITS_ORIGIN, DIGITS_CSV),
        )?;
        let mut data = Dataset::from_table(DIGITS_ORIGIN, table).with_image(8, 8)?;
        data.input_divisor = DIGITS_PIXEL_MAX;
        for v in &mut data.x {
            *v /= DIGITS_PIXEL_MAX;
        }
        Ok(data)
    }

    /// The columns `names` (by header name, in that order) of every row of the CSV file at
    /// `path`, row-major: a saved model's features from a file that may hold other columns
    /// too. Errors name the file, the line and the column, and list every missing name.
    pub fn columns_from_csv(path: &Path, names: &[String]) -> Result<Vec<f64>> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| TrainError::ReadData {
            path: path.to_path_buf(),
            source,
        })?;
        csv::columns(&origin, &text, names)
    }

    /// The embedded digits' pixels as the file holds them (0 to 16, not divided), row-major,
    /// and their labels: what a saved digits model takes.
    pub fn digits_raw() -> Result<(Vec<f64>, Vec<usize>)> {
        let d = Dataset::digits()?;
        let raw = d.x.iter().map(|v| v * DIGITS_PIXEL_MAX).collect();
        Ok((raw, d.labels))
    }

    /// Reads a CSV file (see [`Dataset::from_csv_str`]); errors name `path`.
    pub fn from_csv(path: &Path, label_column: &str) -> Result<Dataset> {
        let text = std::fs::read_to_string(path).map_err(|source| TrainError::ReadData {
            path: path.to_path_buf(),
            source,
        })?;
        Dataset::from_csv_str(&text, &path.display().to_string(), label_column)
    }

    /// Parses CSV text; `origin` names it in errors (a path, `<stdin>`).
    ///
    /// - The first non-blank line is the header: one name per column, whitespace trimmed,
    ///   no two alike. `label_column` (trimmed too) names the label column; every other column is a
    ///   numeric feature, in file order.
    /// - Fields may be quoted (`"a,b"`, `""` for a quote, line ends inside quotes); blank
    ///   lines are skipped; `\n` and `\r\n` line ends; a UTF-8 byte order mark is ignored.
    /// - Feature cells are `f64`s with surrounding whitespace allowed; empty, non-numeric and
    ///   non-finite (`inf`, `NaN`) cells are errors.
    /// - Labels (whitespace trimmed, never empty): if every label is a non-negative decimal
    ///   integer, the class id is that integer, `classes() = max + 1` (at most
    ///   [`MAX_INTEGER_CLASSES`]) and the names are `"0"`, `"1"`, ...; otherwise the distinct
    ///   labels sorted (byte order, so `"10"` before `"2"`) are the class names and a row's id
    ///   is its label's position among them.
    /// - [`Dataset::image`] is `None` (a square feature count is no evidence of an image; say
    ///   so with [`Dataset::with_image`]).
    pub fn from_csv_str(text: &str, origin: &str, label_column: &str) -> Result<Dataset> {
        let mut records = csv::Records::new(origin, text);
        let (names, header_line) = csv::header(origin, &mut records)?;
        for (i, name) in names.iter().enumerate() {
            if let Some(first) = names[..i].iter().position(|n| n == name) {
                let problem = CsvProblem::DuplicateColumn {
                    column: Column {
                        index: i + 1,
                        name: Some(name.clone()),
                    },
                    first: first + 1,
                };
                return Err(csv::csv_error(origin, header_line, problem));
            }
        }
        let Some(label) = names.iter().position(|n| n == label_column.trim()) else {
            let problem = CsvProblem::NoLabelColumn {
                wanted: label_column.to_string(),
                available: names,
            };
            return Err(csv::csv_error(origin, header_line, problem));
        };
        if names.len() == 1 {
            let problem = CsvProblem::NoFeatures {
                label: label_column.to_string(),
            };
            return Err(csv::csv_error(origin, header_line, problem));
        }
        let table = csv::table(origin, &names, header_line, label, records)?;
        Ok(Dataset::from_table(origin, table))
    }

    fn from_table(origin: &str, table: csv::Table) -> Dataset {
        Dataset {
            origin: origin.to_string(),
            features: table.feature_names.len(),
            x: table.x,
            labels: table.labels,
            feature_names: table.feature_names,
            class_names: table.class_names,
            image: None,
            input_divisor: 1.0,
        }
    }

    /// The same data, declared to be `height × width` images (row-major), for models that
    /// reshape a batch to `[batch, 1, height, width]`. An error unless `height * width` is
    /// [`Dataset::features`].
    pub fn with_image(mut self, height: usize, width: usize) -> Result<Dataset> {
        if height.checked_mul(width) != Some(self.features) {
            return Err(TrainError::ImageShape {
                height,
                width,
                features: self.features,
            });
        }
        self.image = Some((height, width));
        Ok(self)
    }

    /// Where the data came from (a path, `digits.csv (embedded)`).
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The number of rows (at least 1).
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Always `false`: a data set has at least one row.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Values per row.
    pub fn features(&self) -> usize {
        self.features
    }

    /// The number of classes (class ids are `0..classes()`); some may have no rows.
    pub fn classes(&self) -> usize {
        self.class_names.len()
    }

    /// What the file's values were divided by (16 for the digits' pixels, else 1).
    pub fn input_divisor(&self) -> f64 {
        self.input_divisor
    }

    /// The name of each class id (`"0"` to `"9"` for the digits).
    pub fn class_names(&self) -> &[String] {
        &self.class_names
    }

    /// The name of each feature column, in order.
    pub fn feature_names(&self) -> &[String] {
        &self.feature_names
    }

    /// `Some((height, width))` when rows are row-major images (`Some((8, 8))` for the
    /// digits); `None` for CSV data unless [`Dataset::with_image`] said so.
    pub fn image(&self) -> Option<(usize, usize)> {
        self.image
    }

    /// All rows, row-major (`len() * features()` values).
    pub fn data(&self) -> &[f64] {
        &self.x
    }

    /// Row `i`'s features; `None` past the end.
    pub fn row(&self, i: usize) -> Option<&[f64]> {
        let start = i.checked_mul(self.features)?;
        self.x.get(start..start.checked_add(self.features)?)
    }

    /// Each row's class id.
    pub fn labels(&self) -> &[usize] {
        &self.labels
    }

    /// How many rows each class has (`classes()` counts).
    pub fn class_counts(&self) -> Vec<usize> {
        let mut counts = vec![0; self.classes()];
        for &c in &self.labels {
            counts[c] += 1;
        }
        counts
    }

    /// The rows `rows` (in that order, repeats allowed) as a new data set with the same
    /// names and image shape. An error for an out-of-range row or an empty `rows`.
    pub fn subset(&self, rows: &[usize]) -> Result<Dataset> {
        if rows.is_empty() {
            return Err(TrainError::EmptySubset);
        }
        let mut x = Vec::with_capacity(rows.len() * self.features);
        let mut labels = Vec::with_capacity(rows.len());
        for &r in rows {
            x.extend_from_slice(self.checked_row(r)?);
            labels.push(self.labels[r]);
        }
        Ok(Dataset {
            origin: self.origin.clone(),
            features: self.features,
            x,
            labels,
            feature_names: self.feature_names.clone(),
            class_names: self.class_names.clone(),
            image: self.image,
            input_divisor: self.input_divisor,
        })
    }

    fn checked_row(&self, r: usize) -> Result<&[f64]> {
        self.row(r).ok_or(TrainError::RowOutOfRange {
            row: r,
            rows: self.len(),
        })
    }

    /// Splits into `(kept, held_out)`: a seeded split, stratified by class, that holds out
    /// `round(held_out * len())` rows. Each class gives `floor(held_out * count)` rows, and the
    /// rows still missing go one each to the classes with the largest remainders (ties to the
    /// lower class id); within a class the rows held out are a seeded random choice. Both
    /// sides keep the original row order.
    ///
    /// An error unless `0 < held_out < 1` and both sides have at least one row.
    pub fn split(&self, held_out: f64, seed: u64) -> Result<(Dataset, Dataset)> {
        if !(held_out > 0.0 && held_out < 1.0) {
            return Err(TrainError::SplitFraction { held_out });
        }
        let n = self.len();
        let want = (held_out * n as f64).round() as usize;
        if want == 0 || want >= n {
            return Err(TrainError::SplitEmpty {
                held_out,
                rows: n,
                held: want,
            });
        }
        let mut members: Vec<Vec<usize>> = vec![Vec::new(); self.classes()];
        for (i, &c) in self.labels.iter().enumerate() {
            members[c].push(i);
        }
        let exact: Vec<f64> = members.iter().map(|m| held_out * m.len() as f64).collect();
        let mut take: Vec<usize> = exact.iter().map(|e| e.floor() as usize).collect();
        let mut by_remainder: Vec<usize> = (0..members.len()).collect();
        by_remainder.sort_by(|&a, &b| {
            let (ra, rb) = (exact[a] - exact[a].floor(), exact[b] - exact[b].floor());
            rb.total_cmp(&ra).then(a.cmp(&b))
        });
        let mut missing = want.saturating_sub(take.iter().sum());
        for &c in by_remainder.iter().cycle().take(members.len() * 2) {
            if missing == 0 {
                break;
            }
            if take[c] < members[c].len() {
                take[c] += 1;
                missing -= 1;
            }
        }
        let mut held = vec![false; n];
        for (c, rows) in members.iter().enumerate() {
            let order = permutation(rows.len(), stream(seed ^ SPLIT_SALT, c as u64));
            for &k in &order[..take[c]] {
                held[rows[k]] = true;
            }
        }
        let (out, kept): (Vec<usize>, Vec<usize>) = (0..n).partition(|&i| held[i]);
        Ok((self.subset(&kept)?, self.subset(&out)?))
    }

    /// Standardizes every feature in place with `stats` (`(x - mean) / scale`), usually fitted
    /// on the training side and applied to both sides. An error if `stats` was fitted on a
    /// different number of features.
    pub fn standardize(&mut self, stats: &Standardizer) -> Result<()> {
        if stats.mean.len() != self.features {
            return Err(TrainError::StandardizerFeatures {
                fitted: stats.mean.len(),
                features: self.features,
            });
        }
        stats.apply(&mut self.x);
        Ok(())
    }

    /// The rows `rows` as a `[rows.len(), features()]` tensor and their class ids. An error for
    /// an out-of-range row.
    pub fn batch(&self, rows: &[usize]) -> Result<(Tensor<f64>, Vec<usize>)> {
        let mut x = Vec::with_capacity(rows.len() * self.features);
        let mut labels = Vec::with_capacity(rows.len());
        for &r in rows {
            x.extend_from_slice(self.checked_row(r)?);
            labels.push(self.labels[r]);
        }
        Ok((Tensor::new(vec![rows.len(), self.features], x)?, labels))
    }
}

/// Per-feature mean and scale (population standard deviation, as PyTorch's
/// `std(unbiased=False)` and scikit-learn's `StandardScaler`), fitted on a data set. A
/// constant feature keeps scale 1, so it standardizes to 0 rather than dividing by 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Standardizer {
    mean: Vec<f64>,
    scale: Vec<f64>,
}

impl Standardizer {
    /// Fits the mean (two-pass) and the population standard deviation of every feature;
    /// features whose values are all equal get scale 1.
    pub fn fit(data: &Dataset) -> Standardizer {
        let (n, f) = (data.len(), data.features());
        let rows = || data.x.chunks_exact(f);
        let mut mean = vec![0.0; f];
        for row in rows() {
            for (m, v) in mean.iter_mut().zip(row) {
                *m += v;
            }
        }
        for m in &mut mean {
            *m /= n as f64;
        }
        let mut var = vec![0.0; f];
        let mut lo = vec![f64::INFINITY; f];
        let mut hi = vec![f64::NEG_INFINITY; f];
        for row in rows() {
            for j in 0..f {
                let d = row[j] - mean[j];
                var[j] += d * d;
                lo[j] = lo[j].min(row[j]);
                hi[j] = hi[j].max(row[j]);
            }
        }
        let scale = (0..f)
            .map(|j| {
                if lo[j] == hi[j] {
                    1.0
                } else {
                    (var[j] / n as f64).sqrt()
                }
            })
            .collect();
        Standardizer { mean, scale }
    }

    /// Each feature's mean.
    pub fn mean(&self) -> &[f64] {
        &self.mean
    }

    /// Each feature's scale (standard deviation, 1 for a constant feature).
    pub fn scale(&self) -> &[f64] {
        &self.scale
    }

    /// The mean and scale in the units of a file whose values were divided by `divisor`
    /// ([`Dataset::input_divisor`]): `(raw − mean·d) / (scale·d)` is `(raw/d − mean) / scale`
    /// to the bit when `d` is a power of two (the digits' 16), as scaling by one is exact.
    pub fn in_file_units(&self, divisor: f64) -> Standardizer {
        Standardizer {
            mean: self.mean.iter().map(|m| m * divisor).collect(),
            scale: self.scale.iter().map(|s| s * divisor).collect(),
        }
    }

    /// A standardizer of these means and scales, if they are one: as many of each, every
    /// mean finite, every scale positive and finite.
    pub fn new(mean: Vec<f64>, scale: Vec<f64>) -> Option<Standardizer> {
        let fine = mean.len() == scale.len()
            && mean.iter().all(|m| m.is_finite())
            && scale.iter().all(|s| s.is_finite() && *s > 0.0);
        fine.then_some(Standardizer { mean, scale })
    }

    /// Standardizes `rows` (row-major, [`Standardizer::mean`]'s length per row) in place, as
    /// [`Dataset::standardize`] does.
    pub fn apply(&self, rows: &mut [f64]) {
        for row in rows.chunks_exact_mut(self.mean.len().max(1)) {
            for ((v, m), s) in row.iter_mut().zip(&self.mean).zip(&self.scale) {
                *v = (*v - m) / s;
            }
        }
    }
}

/// Keeps the split's streams apart from the epochs' (`"SPLIT"` in ASCII).
const SPLIT_SALT: u64 = 0x0053_504C_4954;

/// The stream of `(seed, key)`: `splitmix64(seed ^ splitmix64(key))`, as
/// [`torchlean_spec::ops::uniform_at`] keys its streams.
fn stream(seed: u64, key: u64) -> u64 {
    splitmix64(seed ^ splitmix64(key))
}

/// Fisher–Yates on `0..n` from `stream`: for `i` from `n - 1` down to 1 (draw `k = n - 1 - i`),
/// `r = splitmix64(stream + k)` (wrapping) and `j = (r * (i + 1)) >> 64` (a 128-bit product),
/// then swap positions `i` and `j`.
fn permutation(n: usize, stream: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    for (k, i) in (1..n).rev().enumerate() {
        let r = splitmix64(stream.wrapping_add(k as u64));
        let j = ((u128::from(r) * (i as u128 + 1)) >> 64) as usize;
        order.swap(i, j);
    }
    order
}

/// The order rows are visited in during epoch `epoch` (0-based): a permutation of `0..n`, a
/// pure function of `(n, seed, epoch)`, different for each epoch.
///
/// The formula, for a replay elsewhere: `s = splitmix64(seed ^ splitmix64(epoch))`; start from
/// `[0, 1, ..., n - 1]`; for `i` from `n - 1` down to 1, with `k = n - 1 - i`,
/// `r = splitmix64(s + k mod 2^64)`, `j = (r * (i + 1)) >> 64` (exact 128-bit product), swap
/// positions `i` and `j`. [`splitmix64`] is `torchlean_spec::ops::splitmix64`.
pub fn epoch_order(n: usize, seed: u64, epoch: u64) -> Vec<usize> {
    permutation(n, stream(seed, epoch))
}

/// `order` in consecutive batches of `batch` rows; the last may be shorter (it is kept).
pub fn batches(order: &[usize], batch: NonZeroUsize) -> std::slice::Chunks<'_, usize> {
    order.chunks(batch.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Dataset {
        Dataset::from_csv_str("a,b,y\n1,2,0\n3,4,1\n5,6,0\n7,8,1\n", "t", "y").expect("valid")
    }

    #[test]
    fn permutation_of_nothing_and_one() {
        assert!(permutation(0, 7).is_empty());
        assert_eq!(permutation(1, 7), vec![0]);
    }

    #[test]
    fn permutation_draws_follow_the_documented_formula() {
        // n = 2: one draw (k = 0, i = 1): j = top bit of r; swap iff j == 0.
        let s = 12345;
        let r = splitmix64(s);
        let want = if r >> 63 == 0 { vec![1, 0] } else { vec![0, 1] };
        assert_eq!(permutation(2, s), want);
    }

    #[test]
    fn batch_copies_rows_in_the_given_order() {
        let d = small();
        let (x, y) = d.batch(&[2, 0]).expect("in range");
        assert_eq!(x.shape().dims(), &[2, 2]);
        assert_eq!(x.data(), &[5.0, 6.0, 1.0, 2.0]);
        assert_eq!(y, vec![0, 0]);
        let (x, y) = d.batch(&[]).expect("empty batch");
        assert_eq!(x.shape().dims(), &[0, 2]);
        assert!(y.is_empty());
    }

    #[test]
    fn out_of_range_rows_are_errors() {
        let d = small();
        let e = d.batch(&[0, 4]).expect_err("row 4 of 4");
        assert!(
            matches!(e, TrainError::RowOutOfRange { row: 4, rows: 4 }),
            "{e}"
        );
        assert!(d.subset(&[9]).is_err());
        assert!(matches!(d.subset(&[]), Err(TrainError::EmptySubset)));
    }

    #[test]
    fn standardize_by_hand() {
        // a = 1, 3, 5, 7: mean 4, population variance (9 + 1 + 1 + 9) / 4 = 5
        let mut d =
            Dataset::from_csv_str("a,c,y\n1,2,0\n3,2,1\n5,2,0\n7,2,1\n", "t", "y").expect("valid");
        let s = Standardizer::fit(&d);
        assert_eq!(s.mean(), &[4.0, 2.0]);
        assert_eq!(s.scale(), &[5f64.sqrt(), 1.0]);
        d.standardize(&s).expect("same features");
        let r5 = 5f64.sqrt();
        assert_eq!(d.row(0), Some(&[-3.0 / r5, 0.0][..]));
        assert_eq!(d.row(3), Some(&[3.0 / r5, 0.0][..]));
    }

    #[test]
    fn standardize_rejects_other_feature_counts() {
        let s = Standardizer::fit(&small());
        let mut d = Dataset::from_csv_str("a,y\n1,0\n", "t", "y").expect("valid");
        let e = d.standardize(&s).expect_err("2 vs 1 features");
        assert!(e.to_string().contains("2 features"), "{e}");
    }

    #[test]
    fn with_image_checks_the_feature_count() {
        assert_eq!(small().with_image(1, 2).expect("1x2").image(), Some((1, 2)));
        let e = small().with_image(2, 2).expect_err("4 != 2");
        assert!(e.to_string().contains("2 features"), "{e}");
    }

    #[test]
    fn split_fraction_and_empty_sides_are_errors() {
        let d = small();
        for bad in [0.0, 1.0, -0.5, 1.5, f64::NAN] {
            assert!(
                matches!(d.split(bad, 0), Err(TrainError::SplitFraction { .. })),
                "{bad}"
            );
        }
        // 4 rows: 0.1 holds out round(0.4) = 0 rows, 0.9 round(3.6) = 4
        for empty in [0.1, 0.9] {
            assert!(
                matches!(d.split(empty, 0), Err(TrainError::SplitEmpty { .. })),
                "{empty}"
            );
        }
    }

    #[test]
    fn split_is_stratified() {
        let (kept, out) = small().split(0.5, 3).expect("2 and 2");
        assert_eq!(kept.class_counts(), vec![1, 1]);
        assert_eq!(out.class_counts(), vec![1, 1]);
    }
}
