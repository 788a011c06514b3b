//! CSV tables on the `csv` crate: RFC 4180 fields (quoted fields with commas, line ends and
//! `""` escapes), `\n`, `\r\n` or a lone `\r` line ends, blank lines (empty or whitespace only)
//! skipped, a UTF-8 byte order mark ignored. Quoting is read as the `csv` crate reads it, which
//! recovers instead of failing: text after a closing quote is kept (`"1"x` is `1x`) and a quote
//! that never closes runs to the end of the text; both then fail as a cell that is not a number
//! or a row with too few fields.
//!
//! Every problem is a [`CsvProblem`] reported with the file and the 1-based line where the
//! offending field starts (inside [`TrainError::Csv`]); the `csv` crate's own line count skips
//! blank lines, so lines are counted here from its byte offsets.

use std::fmt;

use crate::error::{Result, TrainError};

/// The largest number of classes an integer label column may imply (`max label + 1`). A
/// column of identifiers or measurements picked as the label by mistake would otherwise ask
/// for millions of empty classes.
pub const MAX_INTEGER_CLASSES: usize = 65_536;

/// A column of a CSV file, as an error names it: its 1-based position and, once the header is
/// known, its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// 1-based position in the line.
    pub index: usize,
    /// The header's name for it (`None` while the header itself is read, or past its end).
    pub name: Option<String>,
}

impl fmt::Display for Column {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(name) => write!(f, "column {} `{name}`", self.index),
            None => write!(f, "column {}", self.index),
        }
    }
}

/// What is wrong at one line of a CSV file (the file and line are in [`TrainError::Csv`]).
#[derive(Debug, Clone, PartialEq)]
pub enum CsvProblem {
    /// The text has no line that is not blank.
    NoHeader,
    /// Two header fields have the same name (after trimming whitespace).
    DuplicateColumn {
        /// The second occurrence.
        column: Column,
        /// 1-based position of the first.
        first: usize,
    },
    /// No header field is the label column that was asked for.
    NoLabelColumn {
        /// The name asked for.
        wanted: String,
        /// The header's names, in order.
        available: Vec<String>,
    },
    /// The header has only the label column.
    NoFeatures {
        /// The label column's name.
        label: String,
    },
    /// The header is not followed by any data row.
    NoRows,
    /// A row has a different number of fields than the header.
    Ragged {
        /// Fields in this row.
        got: usize,
        /// Fields in the header.
        want: usize,
        /// The first column without a value (fewer fields) or the last named one (more).
        column: Column,
    },
    /// A feature cell does not parse as a number (or is empty).
    NotNumber {
        /// Where.
        column: Column,
        /// The cell as written (unquoted).
        cell: String,
    },
    /// The header lacks columns a saved model reads (by name).
    MissingColumns {
        /// The names not found, in the model's order.
        missing: Vec<String>,
        /// The header's names, in order.
        available: Vec<String>,
    },
    /// A feature cell parses as a number that is infinite or NaN.
    NotFinite {
        /// Where.
        column: Column,
        /// The cell as written (unquoted).
        cell: String,
    },
    /// A label cell is empty (or only whitespace).
    EmptyLabel {
        /// The label column.
        column: Column,
    },
    /// An integer label asks for more classes than [`MAX_INTEGER_CLASSES`].
    TooManyClasses {
        /// The label column.
        column: Column,
        /// The label as written.
        label: String,
    },
}

impl fmt::Display for CsvProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CsvProblem::NoHeader => write!(f, "the file is empty: no header line"),
            CsvProblem::DuplicateColumn { column, first } => write!(
                f,
                "duplicate header name: {column} has the same name as column {first}"
            ),
            CsvProblem::NoLabelColumn { wanted, available } => {
                write!(
                    f,
                    "no column named `{wanted}` for the labels; the columns are "
                )?;
                for (i, name) in available.iter().enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    write!(f, "{sep}`{name}`")?;
                }
                Ok(())
            }
            CsvProblem::NoFeatures { label } => write!(
                f,
                "no feature columns: the header has only the label column `{label}`"
            ),
            CsvProblem::NoRows => write!(f, "the header is not followed by any data row"),
            CsvProblem::MissingColumns { missing, available } => {
                // the first few of a long list, and how many more
                let quoted = |v: &[String]| {
                    let mut s: Vec<String> = v.iter().take(8).map(|n| format!("`{n}`")).collect();
                    if v.len() > 8 {
                        s.push(format!("and {} more", v.len() - 8));
                    }
                    s.join(", ")
                };
                write!(
                    f,
                    "no column for the model's feature(s) {}; the columns are {}",
                    quoted(missing),
                    quoted(available)
                )
            }
            CsvProblem::Ragged { got, want, column } => {
                write!(f, "got {got} fields, the header has {want}: ")?;
                if got < want {
                    write!(f, "no value for {column}")
                } else {
                    write!(f, "{} past the last {column}", got - want)
                }
            }
            CsvProblem::NotNumber { column, cell } if cell.trim().is_empty() => {
                write!(f, "{column}: empty cell, expected a number")
            }
            CsvProblem::NotNumber { column, cell } => {
                write!(f, "{column}: `{cell}` is not a number")
            }
            CsvProblem::NotFinite { column, cell } => {
                write!(f, "{column}: `{cell}` is not a finite number")
            }
            CsvProblem::EmptyLabel { column } => write!(f, "{column}: the label is empty"),
            CsvProblem::TooManyClasses { column, label } => write!(
                f,
                "{column}: integer label `{label}` would make more than \
                 {MAX_INTEGER_CLASSES} classes (class id = label); is this the label column?"
            ),
        }
    }
}

/// A [`TrainError::Csv`].
pub(crate) fn csv_error(origin: &str, line: usize, problem: CsvProblem) -> TrainError {
    TrainError::Csv {
        origin: origin.to_string(),
        line,
        problem,
    }
}

/// One field: its text (unquoted, `""` unescaped) and the 1-based line it starts on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Field {
    pub text: String,
    pub line: usize,
}

/// One record (a non-blank line, or several when a quoted field holds line ends).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    pub line: usize,
    pub fields: Vec<Field>,
}

/// The records of a CSV text, blank lines skipped, each with the line it starts on.
pub(crate) struct Records<'a> {
    origin: &'a str,
    text: &'a str,
    reader: ::csv::Reader<&'a [u8]>,
    record: ::csv::StringRecord,
    /// A byte offset into `text` and the 1-based line it is on (counting moves forward only).
    counted: (usize, usize),
}

impl<'a> Records<'a> {
    /// The records of `text`; `origin` names it in errors.
    pub(crate) fn new(origin: &'a str, text: &'a str) -> Self {
        let reader = ::csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .from_reader(text.as_bytes());
        Records {
            origin,
            text,
            reader,
            record: ::csv::StringRecord::new(),
            counted: (0, 1),
        }
    }

    /// The line `at` is on, counting line ends (`\r\n`, `\n` or a lone `\r`) from the last
    /// offset counted; `at` never moves backwards.
    fn line_at(&mut self, at: usize) -> usize {
        let (from, line) = self.counted;
        let line = line + line_ends(&self.text.as_bytes()[from..at]);
        self.counted = (at, line);
        line
    }
}

/// How many line ends `bytes` holds (`\r\n` is one).
fn line_ends(bytes: &[u8]) -> usize {
    let lone_cr = |i: usize| bytes[i] == b'\r' && bytes.get(i + 1) != Some(&b'\n');
    (0..bytes.len())
        .filter(|&i| bytes[i] == b'\n' || lone_cr(i))
        .count()
}

impl Iterator for Records<'_> {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.reader.read_record(&mut self.record) {
                Ok(false) => return None,
                Ok(true) => {}
                Err(source) => {
                    let origin = self.origin.to_string();
                    return Some(Err(TrainError::CsvRead { origin, source }));
                }
            }
            let blank = self.record.len() == 1 && self.record[0].trim().is_empty();
            if blank {
                continue;
            }
            // the reader's offset is where the blank lines before the record start
            let bytes = self.text.as_bytes();
            let mut at = self.record.position().map_or(0, |p| p.byte() as usize);
            while matches!(bytes.get(at), Some(b'\r' | b'\n')) {
                at += 1;
            }
            let line = self.line_at(at);
            let mut field_line = line;
            let fields = self
                .record
                .iter()
                .map(|text| {
                    let field = Field {
                        text: text.to_string(),
                        line: field_line,
                    };
                    field_line += line_ends(text.as_bytes());
                    field
                })
                .collect();
            return Some(Ok(Record { line, fields }));
        }
    }
}

/// A parsed table: feature rows, raw labels, the names.
#[derive(Debug)]
pub(crate) struct Table {
    pub feature_names: Vec<String>,
    pub x: Vec<f64>,
    pub labels: Vec<usize>,
    pub class_names: Vec<String>,
}

/// Parses `records` (the header already taken) into a table with the label in column
/// `label` of `names`. `header_line` is where the header was (for [`CsvProblem::NoRows`]).
pub(crate) fn table(
    origin: &str,
    names: &[String],
    header_line: usize,
    label: usize,
    records: impl Iterator<Item = Result<Record>>,
) -> Result<Table> {
    let column = |i: usize| Column {
        index: i + 1,
        name: names.get(i).cloned(),
    };
    let want = names.len();
    let mut x = Vec::new();
    let mut raw_labels: Vec<(String, usize)> = Vec::new();
    for record in records {
        let record = record?;
        let got = record.fields.len();
        if got != want {
            let at = if got < want { got } else { want - 1 };
            return Err(csv_error(
                origin,
                record.line,
                CsvProblem::Ragged {
                    got,
                    want,
                    column: column(at),
                },
            ));
        }
        for (i, field) in record.fields.into_iter().enumerate() {
            if i == label {
                if field.text.trim().is_empty() {
                    let problem = CsvProblem::EmptyLabel { column: column(i) };
                    return Err(csv_error(origin, field.line, problem));
                }
                raw_labels.push((field.text.trim().to_string(), field.line));
                continue;
            }
            x.push(number(origin, column(i), field)?);
        }
    }
    if raw_labels.is_empty() {
        return Err(csv_error(origin, header_line, CsvProblem::NoRows));
    }
    let (labels, class_names) = class_ids(origin, &column(label), &raw_labels)?;
    let feature_names = names
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != label)
        .map(|(_, n)| n.clone())
        .collect();
    Ok(Table {
        feature_names,
        x,
        labels,
        class_names,
    })
}

/// A feature cell's value: a finite number (whitespace trimmed).
fn number(origin: &str, column: Column, field: Field) -> Result<f64> {
    match field.text.trim().parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        Ok(_) => {
            let problem = CsvProblem::NotFinite {
                column,
                cell: field.text,
            };
            Err(csv_error(origin, field.line, problem))
        }
        Err(_) => {
            let problem = CsvProblem::NotNumber {
                column,
                cell: field.text,
            };
            Err(csv_error(origin, field.line, problem))
        }
    }
}

/// The header's names (trimmed) and the line it is on; an empty text is
/// [`CsvProblem::NoHeader`].
pub(crate) fn header(origin: &str, records: &mut Records<'_>) -> Result<(Vec<String>, usize)> {
    let header = match records.next() {
        None => return Err(csv_error(origin, 1, CsvProblem::NoHeader)),
        Some(h) => h?,
    };
    let names = header
        .fields
        .iter()
        .map(|f| f.text.trim().to_string())
        .collect();
    Ok((names, header.line))
}

/// The columns `wanted` (by header name, in that order) of every row of `text`, row-major:
/// a saved model's features from a file that may hold other columns too (its label, an id).
/// Every wanted name the header lacks is one [`CsvProblem::MissingColumns`].
pub(crate) fn columns(origin: &str, text: &str, wanted: &[String]) -> Result<Vec<f64>> {
    let mut records = Records::new(origin, text);
    let (names, header_line) = header(origin, &mut records)?;
    let at: Vec<Option<usize>> = wanted
        .iter()
        .map(|w| names.iter().position(|n| n == w))
        .collect();
    let missing: Vec<String> = wanted
        .iter()
        .zip(&at)
        .filter(|(_, i)| i.is_none())
        .map(|(w, _)| w.clone())
        .collect();
    if !missing.is_empty() {
        let problem = CsvProblem::MissingColumns {
            missing,
            available: names,
        };
        return Err(csv_error(origin, header_line, problem));
    }
    let column = |i: usize| Column {
        index: i + 1,
        name: names.get(i).cloned(),
    };
    let mut x = Vec::new();
    for record in records {
        let mut record = record?;
        let (got, want) = (record.fields.len(), names.len());
        if got != want {
            let at = if got < want { got } else { want - 1 };
            let problem = CsvProblem::Ragged {
                got,
                want,
                column: column(at),
            };
            return Err(csv_error(origin, record.line, problem));
        }
        for &i in at.iter().flatten() {
            let field = std::mem::take(&mut record.fields[i]);
            x.push(number(origin, column(i), field)?);
        }
    }
    if x.is_empty() {
        return Err(csv_error(origin, header_line, CsvProblem::NoRows));
    }
    Ok(x)
}

/// Class ids and names: integer labels are their own ids (`classes = max + 1`, names
/// `"0"`, `"1"`, ...); otherwise the distinct strings in sorted order.
fn class_ids(
    origin: &str,
    column: &Column,
    raw: &[(String, usize)],
) -> Result<(Vec<usize>, Vec<String>)> {
    let integer = raw
        .iter()
        .all(|(s, _)| s.bytes().all(|b| b.is_ascii_digit()));
    if integer {
        let mut ids = Vec::with_capacity(raw.len());
        for (s, line) in raw {
            match s.parse::<usize>() {
                Ok(id) if id < MAX_INTEGER_CLASSES => ids.push(id),
                _ => {
                    let problem = CsvProblem::TooManyClasses {
                        column: column.clone(),
                        label: s.to_string(),
                    };
                    return Err(csv_error(origin, *line, problem));
                }
            }
        }
        let classes = ids.iter().max().map_or(0, |m| m + 1);
        let names = (0..classes).map(|c| c.to_string()).collect();
        return Ok((ids, names));
    }
    let mut names: Vec<String> = raw.iter().map(|(s, _)| s.to_string()).collect();
    names.sort();
    names.dedup();
    let ids = raw
        .iter()
        .map(|(s, _)| {
            names
                .binary_search_by(|n| n.as_str().cmp(s))
                .expect("every label is among the sorted distinct labels")
        })
        .collect();
    Ok((ids, names))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(text: &str) -> Vec<Vec<(String, usize)>> {
        Records::new("t", text)
            .map(|r| {
                r.expect("well-formed")
                    .fields
                    .into_iter()
                    .map(|f| (f.text, f.line))
                    .collect()
            })
            .collect()
    }

    fn texts(text: &str) -> Vec<Vec<String>> {
        fields(text)
            .into_iter()
            .map(|r| r.into_iter().map(|(t, _)| t).collect())
            .collect()
    }

    #[test]
    fn plain_records_and_line_ends() {
        let want = vec![vec!["a", "b"], vec!["1", "2"]];
        assert_eq!(texts("a,b\n1,2\n"), want);
        assert_eq!(texts("a,b\r\n1,2\r\n"), want);
        assert_eq!(texts("a,b\r1,2"), want);
        assert_eq!(texts("a,b\n1,2"), want);
    }

    #[test]
    fn blank_lines_are_skipped_and_counted() {
        let f = fields("\n  \na,b\n\n1,2\n\n \n");
        assert_eq!(f[0][0], ("a".to_string(), 3));
        assert_eq!(f[1][1], ("2".to_string(), 5));
        assert_eq!(f.len(), 2);
    }

    #[test]
    fn empty_fields_are_kept() {
        assert_eq!(texts("a,,b,\n"), vec![vec!["a", "", "b", ""]]);
        assert_eq!(texts(",\n"), vec![vec!["", ""]]);
    }

    #[test]
    fn quoted_fields() {
        assert_eq!(texts("\"a,b\",c\n"), vec![vec!["a,b", "c"]]);
        assert_eq!(
            texts("\"say \"\"hi\"\"\",x\n"),
            vec![vec!["say \"hi\"", "x"]]
        );
        assert_eq!(texts("\"\",x\n"), vec![vec!["", "x"]]);
        // a quote after blanks is text, as the csv crate reads it (the cell then fails to parse)
        assert_eq!(texts("  \"a\"  ,b\n"), vec![vec!["  \"a\"  ", "b"]]);
        // an unquoted field keeps a stray quote as written
        assert_eq!(texts("a\"b,c\n"), vec![vec!["a\"b", "c"]]);
    }

    #[test]
    fn quoted_line_ends_advance_the_line_count() {
        let f = fields("\"two\nlines\",x\ny,z\n");
        assert_eq!(f[0][0], ("two\nlines".to_string(), 1));
        assert_eq!(f[0][1], ("x".to_string(), 2));
        assert_eq!(f[1][0], ("y".to_string(), 3));
    }

    #[test]
    fn a_byte_order_mark_is_ignored() {
        assert_eq!(texts("\u{feff}a,b\n"), vec![vec!["a", "b"]]);
    }

    #[test]
    fn unicode_passes_through() {
        assert_eq!(texts("é,\"ü,ß\"\n"), vec![vec!["é", "ü,ß"]]);
    }

    #[test]
    fn lone_carriage_returns_and_blank_lines_count_as_lines() {
        let f = fields("a,b\r\r\n \r1,2\r\"x\r\ny\",3\n4,5");
        assert_eq!(f[1][0], ("1".to_string(), 4));
        assert_eq!(f[2][0], ("x\r\ny".to_string(), 5));
        assert_eq!(f[2][1], ("3".to_string(), 6));
        assert_eq!(f[3][0], ("4".to_string(), 7));
    }

    #[test]
    fn unclosed_quotes_are_recovered_as_the_csv_crate_does() {
        assert_eq!(texts("1,\"2,0\n3\n"), vec![vec!["1", "2,0\n3\n"]]);
        assert_eq!(texts("\"1\"x,2\n"), vec![vec!["1x", "2"]]);
    }

    #[test]
    fn integer_labels_are_their_own_ids() {
        let col = Column {
            index: 1,
            name: None,
        };
        let raw: Vec<(String, usize)> = ["2", "0", "5", "007"]
            .iter()
            .map(|s| (s.to_string(), 1))
            .collect();
        let (ids, names) = class_ids("t", &col, &raw).expect("integers");
        assert_eq!(ids, vec![2, 0, 5, 7]);
        assert_eq!(names, ["0", "1", "2", "3", "4", "5", "6", "7"]);
    }

    #[test]
    fn other_labels_are_sorted_strings() {
        let col = Column {
            index: 1,
            name: None,
        };
        let raw: Vec<(String, usize)> = ["b", "10", "a", "2", "b", "-1"]
            .iter()
            .map(|s| (s.to_string(), 1))
            .collect();
        let (ids, names) = class_ids("t", &col, &raw).expect("strings");
        assert_eq!(names, ["-1", "10", "2", "a", "b"]);
        assert_eq!(ids, vec![4, 1, 3, 2, 4, 0]);
    }
}
