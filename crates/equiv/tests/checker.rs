//! The checker on the reference engines passes with a fixed budget; with injected faults it
//! fails, names the claim that caught each fault, and writes a minimized case file that
//! reproduces.
#![allow(clippy::unwrap_used)]

use torchlean_equiv::*;
use torchlean_spec::Tensor;

fn budget() -> usize {
    // CI's budget (`check-equivalence --cases 100`), fixed (not scaled by
    // TORCHLEAN_PROPTEST_CASES): the round-robin reaches every (kind, regime) pair within it
    100
}

/// Claims observed on the fixed, hand-made cases only.
fn is_fixed(claim: Claim) -> bool {
    matches!(claim, Claim::LocalSum | Claim::SpecDefaults)
}

#[test]
fn reference_engines_pass_every_claim() {
    let f64e = EngineOf::<Tensor<f64>>::bitwise();
    let f32e = EngineOf::<Tensor<f32>>::with_tolerance(1e-5);
    let cfg = CheckConfig {
        cases: budget(),
        exact_cases: budget() / 2,
        ..CheckConfig::default()
    };
    let report = check(&cfg, &[&f64e, &f32e]);
    assert!(report.ok(), "{}", report.text());
    // every claim of SPEC 2.3 but eager-vs-Session (nn) has rows, and every kind is covered
    for claim in Claim::ALL {
        assert!(
            report.rows.iter().any(|r| r.claim == claim),
            "no rows for {}",
            claim.name()
        );
    }
    let kinds: std::collections::BTreeSet<&str> = report.rows.iter().map(|r| r.kind).collect();
    for k in torchlean_spec::ops::desc::names() {
        assert!(kinds.contains(k), "kind {k} never checked");
    }
    // the round-robin covers every (kind, regime) pair, and the default view says so
    assert!(report.uncovered.is_empty(), "{:?}", report.uncovered);
    assert_eq!(report.claims.len(), Claim::ALL.len());
    let text = report.text();
    println!("{text}");
    assert!(text.contains("every kind and regime covered"), "{text}");
    assert_eq!(
        text.lines().count(),
        Claim::ALL.len() + 6,
        "one line per claim:\n{text}"
    );
}

#[test]
fn every_injected_fault_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = CheckConfig {
        cases: 64,
        exact_cases: 0,
        out_dir: Some(dir.path().to_path_buf()),
        shrink_steps: 300,
        ..CheckConfig::default()
    };
    let reference = EngineOf::<Tensor<f64>>::bitwise();
    // each fault: the check fails, and every minimized counterexample reproduces through the
    // conformance runner (`torchlean conform --inject-fault …`): the faulty engine fails it, the
    // reference engine passes it
    macro_rules! run_fault {
        ($f:expr) => {{
            let faulty = EngineOf::<Faulty<Tensor<f64>, { $f }>>::bitwise();
            let report = check(&cfg, &[&reference, &faulty]);
            // the fixed cases' failures (local sums, defaults) have no case file
            for f in report.failures.iter().filter(|f| !is_fixed(f.claim)) {
                let text = std::fs::read_to_string(f.case_file.path().unwrap()).unwrap();
                let case = torchlean_ir::Case::from_json_str(&text).unwrap();
                let bad = torchlean_compiled::run_case::<Faulty<Tensor<f64>, { $f }>>(&case, None)
                    .unwrap();
                assert!(
                    !bad.pass(),
                    "{}: the counterexample does not reproduce:\n{}\n{}",
                    case.name,
                    torchlean_ir::pretty(&case.graph),
                    text
                );
                let good = torchlean_compiled::run_case::<Tensor<f64>>(&case, None).unwrap();
                assert!(
                    good.pass(),
                    "{}: the reference fails its own expectations",
                    case.name
                );
                // and its replay (the printed rerun) fails the same way: the same claim on
                // the same engine, with the same finding
                let cx = Counterexample::read(f.case_file.path().unwrap()).unwrap();
                assert_eq!(
                    (cx.provenance.claim, cx.provenance.engine.as_str()),
                    (f.claim, f.engine.as_str())
                );
                let observed = replay(&cx, &[&reference, &faulty]).unwrap();
                let failed = observed
                    .iter()
                    .find(|o| !o.measure.pass)
                    .unwrap_or_else(|| panic!("{}: the replay passes", case.name));
                assert_eq!(
                    failed
                        .detail
                        .as_ref()
                        .map(|d| d.to_string())
                        .unwrap_or_default(),
                    cx.provenance.detail
                );
            }
            report
        }};
    }
    let reports = [
        ("flip-sign", run_fault!(fault::FLIP_SIGN)),
        ("drop-contribution", run_fault!(fault::DROP_CONTRIBUTION)),
        ("accumulation-order", run_fault!(fault::ACCUMULATION_ORDER)),
        (
            "broadcast-reduction",
            run_fault!(fault::BROADCAST_REDUCTION),
        ),
        ("pool-off-by-one", run_fault!(fault::POOL_OFF_BY_ONE)),
    ];
    for (name, report) in &reports {
        assert!(!report.ok(), "fault {name} was not caught");
        let caught: Vec<String> = report
            .failing_claims()
            .iter()
            .filter(|(_, e)| e.starts_with("faulty"))
            .map(|(c, _)| c.id().to_string())
            .collect();
        assert!(
            !caught.is_empty(),
            "fault {name}: only the reference failed?\n{}",
            report.text()
        );
        println!("fault {name}: caught by {}", caught.join(", "));
        // every failure of a random graph has a minimized counterexample on disk
        for f in report.failures.iter().filter(|f| !is_fixed(f.claim)) {
            let path = f.case_file.path().unwrap();
            let case =
                torchlean_ir::Case::from_json_str(&std::fs::read_to_string(path).unwrap()).unwrap();
            assert!(
                case.graph.len() <= 40,
                "{name}: not minimized ({} nodes)",
                case.graph.len()
            );
        }
        // the reference engine itself still passes
        assert!(
            report
                .failing_claims()
                .iter()
                .all(|(_, e)| e.starts_with("faulty")),
            "{}",
            report.text()
        );
    }
}

#[test]
fn a_counterexample_that_cannot_be_written_is_reported() {
    // `out_dir` below a regular file: the directory cannot be created
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("not-a-directory");
    std::fs::write(&blocker, "").unwrap();
    let out = blocker.join("counterexamples");
    let cfg = CheckConfig {
        cases: 24,
        exact_cases: 0,
        finite_differences: false,
        out_dir: Some(out.clone()),
        shrink_steps: 50,
        ..CheckConfig::default()
    };
    let reference = EngineOf::<Tensor<f64>>::bitwise();
    let faulty = EngineOf::<Faulty<Tensor<f64>, { fault::DROP_CONTRIBUTION }>>::bitwise();
    let report = check(&cfg, &[&reference, &faulty]);
    assert!(!report.ok());
    assert!(!report.failures.is_empty());
    let random: Vec<&Failure> = report
        .failures
        .iter()
        .filter(|f| !is_fixed(f.claim))
        .collect();
    assert!(!random.is_empty());
    for f in &random {
        let e = f.case_file.error().expect("every failure's write failed");
        assert!(
            matches!(e, EquivError::Io { path, .. } if path == &out),
            "the error names the directory: {e:?}"
        );
        assert!(std::error::Error::source(e)
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .is_some());
    }
    assert_eq!(report.write_errors().count(), random.len());
    let text = report.text();
    assert!(
        text.contains(&format!(
            "counterexample not written: could not create the counterexample directory `{}`",
            out.display()
        )),
        "{text}"
    );
    assert!(report
        .json_lines()
        .contains("\"write_error\":\"could not create the counterexample directory"));
}
