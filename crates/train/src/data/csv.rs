//! A small hand-written CSV reader: RFC 4180 basics (quoted fields with commas, line ends and
//! `""` escapes), `\n` or `\r\n` (or a lone `\r`) line ends, blank lines skipped, a UTF-8 byte
//! order mark ignored. Unquoted fields borrow from the text; only quoted ones allocate.
//!
//! Every problem is a [`CsvProblem`] reported with the file and the 1-based line where the
//! offending field starts (inside [`TrainError::Csv`]).

use std::borrow::Cow;
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
    /// A quoted field is not closed before the end of the text (the line is where it opens).
    UnterminatedQuote {
        /// Where the quote opens.
        column: Column,
    },
    /// Something other than whitespace, a comma or a line end follows a closing quote.
    AfterClosingQuote {
        /// Where.
        column: Column,
        /// The character found.
        found: char,
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
            CsvProblem::UnterminatedQuote { column } => {
                write!(f, "{column}: a quoted field opens here and is never closed")
            }
            CsvProblem::AfterClosingQuote { column, found } => write!(
                f,
                "{column}: {found:?} after a closing quote (expected a comma or a line end)"
            ),
        }
    }
}

/// One field: its text (unquoted, `""` unescaped) and the 1-based line it starts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Field<'a> {
    pub text: Cow<'a, str>,
    pub line: usize,
}

/// One record (a non-blank line, or several when a quoted field holds line ends).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record<'a> {
    pub line: usize,
    pub fields: Vec<Field<'a>>,
}

/// A tokenizer error before the header names are known: the line, the 0-based field index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TokenError {
    Unterminated {
        line: usize,
        field: usize,
    },
    AfterQuote {
        line: usize,
        field: usize,
        found: char,
    },
}

impl TokenError {
    /// The error, naming columns with `names` (the header) where the index has one.
    pub(crate) fn into_train(self, origin: &str, names: &[String]) -> TrainError {
        let column = |field: usize| Column {
            index: field + 1,
            name: names.get(field).cloned(),
        };
        let (line, problem) = match self {
            TokenError::Unterminated { line, field } => (
                line,
                CsvProblem::UnterminatedQuote {
                    column: column(field),
                },
            ),
            TokenError::AfterQuote { line, field, found } => (
                line,
                CsvProblem::AfterClosingQuote {
                    column: column(field),
                    found,
                },
            ),
        };
        csv_error(origin, line, problem)
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

/// The records of a CSV text, blank lines skipped.
#[derive(Debug)]
pub(crate) struct Records<'a> {
    text: &'a str,
    pos: usize,
    line: usize,
    failed: bool,
}

impl<'a> Records<'a> {
    pub(crate) fn new(text: &'a str) -> Self {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        Records {
            text,
            pos: 0,
            line: 1,
            failed: false,
        }
    }

    fn byte(&self, at: usize) -> Option<u8> {
        self.text.as_bytes().get(at).copied()
    }

    fn skip_blanks(&self, mut at: usize) -> usize {
        while matches!(self.byte(at), Some(b' ' | b'\t')) {
            at += 1;
        }
        at
    }

    /// Consumes a line end at `at` (`\r\n`, `\n` or `\r`), returning the position after it.
    fn line_end(&mut self, at: usize) -> usize {
        self.line += 1;
        match (self.byte(at), self.byte(at + 1)) {
            (Some(b'\r'), Some(b'\n')) => at + 2,
            _ => at + 1,
        }
    }

    fn record(&mut self) -> std::result::Result<Record<'a>, TokenError> {
        let bytes = self.text.as_bytes();
        let mut fields = Vec::new();
        let record_line = self.line;
        loop {
            let field_line = self.line;
            let start = self.skip_blanks(self.pos);
            let (text, mut at) = if self.byte(start) == Some(b'"') {
                let mut buf = String::new();
                let mut seg = start + 1;
                let mut at = seg;
                loop {
                    match bytes.get(at) {
                        None => {
                            return Err(TokenError::Unterminated {
                                line: field_line,
                                field: fields.len(),
                            })
                        }
                        Some(b'"') if bytes.get(at + 1) == Some(&b'"') => {
                            buf.push_str(&self.text[seg..=at]);
                            at += 2;
                            seg = at;
                        }
                        Some(b'"') => {
                            buf.push_str(&self.text[seg..at]);
                            at += 1;
                            break;
                        }
                        Some(b'\n') => {
                            self.line += 1;
                            at += 1;
                        }
                        Some(_) => at += 1,
                    }
                }
                let at = self.skip_blanks(at);
                match self.text[at..].chars().next() {
                    None | Some(',' | '\r' | '\n') => {}
                    Some(found) => {
                        return Err(TokenError::AfterQuote {
                            line: self.line,
                            field: fields.len(),
                            found,
                        })
                    }
                }
                (Cow::Owned(buf), at)
            } else {
                let mut at = self.pos;
                while !matches!(bytes.get(at), None | Some(b',' | b'\r' | b'\n')) {
                    at += 1;
                }
                (Cow::Borrowed(&self.text[self.pos..at]), at)
            };
            fields.push(Field {
                text,
                line: field_line,
            });
            match bytes.get(at) {
                Some(b',') => {
                    at += 1;
                    self.pos = at;
                }
                Some(_) => {
                    self.pos = self.line_end(at);
                    break;
                }
                None => {
                    self.pos = at;
                    break;
                }
            }
        }
        Ok(Record {
            line: record_line,
            fields,
        })
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = std::result::Result<Record<'a>, TokenError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        // skip blank (empty or whitespace-only) lines
        loop {
            let at = self.skip_blanks(self.pos);
            match self.byte(at) {
                None => {
                    self.pos = at;
                    return None;
                }
                Some(b'\r' | b'\n') => self.pos = self.line_end(at),
                Some(_) => break,
            }
        }
        let record = self.record();
        self.failed = record.is_err();
        Some(record)
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
pub(crate) fn table<'a>(
    origin: &str,
    names: &[String],
    header_line: usize,
    label: usize,
    records: impl Iterator<Item = std::result::Result<Record<'a>, TokenError>>,
) -> Result<Table> {
    let column = |i: usize| Column {
        index: i + 1,
        name: names.get(i).cloned(),
    };
    let want = names.len();
    let mut x = Vec::new();
    let mut raw_labels: Vec<(Cow<'a, str>, usize)> = Vec::new();
    for record in records {
        let record = record.map_err(|e| e.into_train(origin, names))?;
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
                let text = match field.text {
                    Cow::Borrowed(s) => Cow::Borrowed(s.trim()),
                    Cow::Owned(s) => Cow::Owned(s.trim().to_string()),
                };
                raw_labels.push((text, field.line));
                continue;
            }
            let cell = field.text.trim();
            match cell.parse::<f64>() {
                Ok(v) if v.is_finite() => x.push(v),
                Ok(_) => {
                    let problem = CsvProblem::NotFinite {
                        column: column(i),
                        cell: field.text.into_owned(),
                    };
                    return Err(csv_error(origin, field.line, problem));
                }
                Err(_) => {
                    let problem = CsvProblem::NotNumber {
                        column: column(i),
                        cell: field.text.into_owned(),
                    };
                    return Err(csv_error(origin, field.line, problem));
                }
            }
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

/// Class ids and names: integer labels are their own ids (`classes = max + 1`, names
/// `"0"`, `"1"`, ...); otherwise the distinct strings in sorted order.
fn class_ids(
    origin: &str,
    column: &Column,
    raw: &[(Cow<'_, str>, usize)],
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
        Records::new(text)
            .map(|r| {
                r.expect("well-formed")
                    .fields
                    .into_iter()
                    .map(|f| (f.text.into_owned(), f.line))
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
        assert_eq!(texts("  \"a\"  ,b\n"), vec![vec!["a", "b"]]);
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
    fn tokenizer_errors_name_the_line_and_field() {
        let errs: Vec<_> = Records::new("a,b\n1,\"open\n2,3\n").collect();
        assert_eq!(
            errs.last(),
            Some(&Err(TokenError::Unterminated { line: 2, field: 1 }))
        );
        let errs: Vec<_> = Records::new("a,b\n\"x\"y,2\n").collect();
        assert_eq!(
            errs.last(),
            Some(&Err(TokenError::AfterQuote {
                line: 2,
                field: 0,
                found: 'y'
            }))
        );
    }

    #[test]
    fn integer_labels_are_their_own_ids() {
        let col = Column {
            index: 1,
            name: None,
        };
        let raw: Vec<(Cow<'_, str>, usize)> = ["2", "0", "5", "007"]
            .iter()
            .map(|s| (Cow::Borrowed(*s), 1))
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
        let raw: Vec<(Cow<'_, str>, usize)> = ["b", "10", "a", "2", "b", "-1"]
            .iter()
            .map(|s| (Cow::Borrowed(*s), 1))
            .collect();
        let (ids, names) = class_ids("t", &col, &raw).expect("strings");
        assert_eq!(names, ["-1", "10", "2", "a", "b"]);
        assert_eq!(ids, vec![4, 1, 3, 2, 4, 0]);
    }
}
