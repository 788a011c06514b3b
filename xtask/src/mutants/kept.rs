//! The results kept in the repository, `xtask/mutants-kept/<crate>.json`: a crate whose run
//! takes longer than one sitting (`engine-cpu`, about 14 hours on 2 cores) is finished piece by
//! piece on fresh machines, and anyone reads its score without running it again.
//!
//! A kept result counts only while it still describes the code: its mutant is in `cargo
//! mutants --list` (the name carries the line) and its file is byte for byte the one tested
//! (the git blob id recorded when the run started, `blobs.json` beside the shard's results).
//! Results on disk override kept ones, mutant by mutant.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

use super::{Outcome, Sample, Shard, Verdict};

/// The shard-directory file with the git blob id of every file of the mutated crate as the
/// run found it.
pub(super) const BLOBS: &str = "blobs.json";

/// Where crate `name`'s kept results live.
pub(super) fn path(root: &Path, name: &str) -> PathBuf {
    root.join("xtask/mutants-kept").join(format!("{name}.json"))
}

/// The kept results at `path` as one shard (`None` when there are none), sorting before every
/// run on disk.
pub(super) fn read(path: &Path) -> Result<Option<Shard>, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => parse(&text)
            .map(Some)
            .map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

fn parse(text: &str) -> Result<Shard, String> {
    let doc: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let list = doc["outcomes"].as_array().ok_or("no `outcomes` array")?;
    let outcomes = list
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let field = |k: &str| {
                o[k].as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("outcome {i}: no `{k}`"))
            };
            Ok(Outcome {
                name: field("name")?,
                file: field("file")?,
                verdict: Verdict::from_word(&field("verdict")?)
                    .ok_or_else(|| format!("outcome {i}: unknown `verdict`"))?,
                blob: Some(field("blob")?),
                seconds: o["seconds"].as_f64().unwrap_or(0.0),
                oracle: field("oracle")?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    let mut samples = Vec::new();
    for s in doc["samples"].as_array().into_iter().flatten() {
        samples.push(s.as_str().ok_or("a sample is not a string")?.parse()?);
    }
    Ok(Shard {
        outcomes,
        start: String::new(), // before any run on disk: those override
        finished: true,
        samples,
    })
}

/// The kept file for `outcomes` (those with a blob id; one outcome per line, so a diff shows
/// which results changed) and the samples they came from.
pub(super) fn render(outcomes: &[Outcome], samples: &[Sample]) -> String {
    let lines: Vec<String> = outcomes
        .iter()
        .filter_map(|o| {
            let blob = o.blob.as_ref()?;
            Some(
                json!({
                    "name": o.name, "file": o.file, "verdict": o.verdict.word(),
                    "blob": blob, "seconds": (o.seconds * 10.0).round() / 10.0,
                    "oracle": o.oracle,
                })
                .to_string(),
            )
        })
        .collect();
    let samples: Vec<String> = samples.iter().map(|s| format!("{}/{}", s.k, s.n)).collect();
    format!(
        "{{\n\"about\": \"cargo xtask mutants --keep (docs/mutants.md): each mutant's latest result; \
         it counts while its file has this git blob id\",\n\"samples\": {},\n\"outcomes\": [\n{}\n]}}\n",
        json!(samples),
        lines.join(",\n")
    )
}

/// The git blob id of each of `files` (paths relative to `dir`), as `git hash-object` gives it:
/// what `git rev-parse HEAD:<file>` says of the same bytes committed.
pub(super) fn blobs(dir: &Path, files: &[String]) -> Result<BTreeMap<String, String>, String> {
    if files.is_empty() {
        return Ok(BTreeMap::new());
    }
    let out = Command::new("git")
        .current_dir(dir)
        .arg("hash-object")
        .arg("--")
        .args(files)
        .output()
        .map_err(|e| format!("cannot run git hash-object: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "git hash-object failed in {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let ids = String::from_utf8(out.stdout).map_err(|e| format!("git hash-object: {e}"))?;
    let ids: Vec<&str> = ids.lines().collect();
    if ids.len() != files.len() {
        return Err(format!(
            "git hash-object gave {} ids for {} files",
            ids.len(),
            files.len()
        ));
    }
    Ok(files
        .iter()
        .cloned()
        .zip(ids.into_iter().map(str::to_string))
        .collect())
}

/// Every `.rs` file under `dir/<sub>`, relative to `dir`, sorted.
pub(super) fn rust_files(dir: &Path, sub: &str) -> Result<Vec<String>, String> {
    let mut files = Vec::new();
    let mut stack = vec![dir.join(sub)];
    while let Some(d) = stack.pop() {
        let entries = std::fs::read_dir(&d).map_err(|e| format!("{}: {e}", d.display()))?;
        for entry in entries {
            let p = entry.map_err(|e| format!("{}: {e}", d.display()))?.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                let rel = p.strip_prefix(dir).map_err(|e| e.to_string())?;
                files.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(name: &str, verdict: Verdict, blob: Option<&str>) -> Outcome {
        Outcome {
            name: name.to_string(),
            file: "a.rs".to_string(),
            verdict,
            blob: blob.map(str::to_string),
            seconds: 12.34,
            oracle: "cargo test --package=p".to_string(),
        }
    }

    #[test]
    fn kept_results_read_back_as_written_and_sort_before_every_run() {
        let outcomes = vec![
            outcome("a.rs:1:1: replace f with ()", Verdict::Caught, Some("b1")),
            outcome("a.rs:2:1: replace g with ()", Verdict::Unviable, Some("b1")),
            outcome("a.rs:3:1: replace h with ()", Verdict::Missed, Some("b2")),
            outcome("a.rs:4:1: replace k with ()", Verdict::Timeout, Some("b2")),
            // no blob id (a run from before blobs.json): not kept
            outcome("a.rs:5:1: replace m with ()", Verdict::Caught, None),
        ];
        let samples = ["0/50".parse().unwrap(), "7/50".parse().unwrap()];
        let text = render(&outcomes, &samples);
        assert_eq!(text.lines().filter(|l| l.starts_with("{\"")).count(), 4);
        let shard = parse(&text).unwrap();
        let want: Vec<Outcome> = outcomes[..4]
            .iter()
            .map(|o| Outcome {
                seconds: 12.3,
                ..o.clone()
            })
            .collect();
        assert_eq!(shard.outcomes, want);
        assert_eq!(shard.samples, samples);
        assert_eq!((shard.start.as_str(), shard.finished), ("", true));
    }

    #[test]
    fn a_kept_file_missing_a_field_is_refused_by_outcome() {
        let text = r#"{"outcomes": [{"name": "a.rs:1:1: x", "file": "a.rs", "verdict": "caught",
                       "oracle": "cargo test"}]}"#;
        let err = parse(text).unwrap_err();
        assert!(err.contains("outcome 0") && err.contains("`blob`"), "{err}");
        let odd = text
            .replace("\"caught\"", "\"odd\"")
            .replace("\"oracle\"", "\"blob\": \"b\", \"oracle\"");
        assert!(parse(&odd).unwrap_err().contains("`verdict`"));
        assert!(read(Path::new("/nonexistent/kept.json")).unwrap().is_none());
    }

    #[test]
    fn blob_ids_are_gits() {
        let dir = std::env::temp_dir().join(format!("xtask-blobs-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("src/k")).unwrap();
        std::fs::write(dir.join("src/k/a.rs"), "hi\n").unwrap();
        std::fs::write(dir.join("src/b.txt"), "not rust").unwrap();
        let files = rust_files(&dir, "src").unwrap();
        assert_eq!(files, vec!["src/k/a.rs".to_string()]);
        // `printf 'hi\n' | git hash-object --stdin`
        assert_eq!(
            blobs(&dir, &files).unwrap()["src/k/a.rs"],
            "45b983be36b73c0788dc9cbcb76cbb80fc7bb057"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
