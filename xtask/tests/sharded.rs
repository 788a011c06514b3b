//! `mpirun -np N xtask check-equivalence` (built with `--features mpi`): the ranks share the
//! run and rank 0 prints, once, the report a single process prints at the same seed and case
//! count. `cargo test -p xtask --features mpi --test sharded`.
#![cfg(feature = "mpi")]
#![allow(clippy::unwrap_used)]

use std::process::{Command, Output};

fn check(ranks: Option<usize>, args: &[&str]) -> Output {
    let xtask = env!("CARGO_BIN_EXE_xtask");
    let mut c = match ranks {
        None => Command::new(xtask),
        Some(n) => {
            let mut c = Command::new("mpirun");
            c.args(["--oversubscribe", "-np", &n.to_string(), xtask])
                .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
                .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
            c
        }
    };
    c.arg("check-equivalence").args(args).output().unwrap()
}

/// The report without its timing (graphs per second differ from run to run).
fn untimed(o: &Output) -> Vec<String> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| match l.find(" random graphs in ") {
            Some(at) => {
                let rows = l.find("; ").map_or("", |r| &l[r..]);
                format!("{}{rows}", &l[..at])
            }
            None => l.to_string(),
        })
        .collect()
}

#[test]
fn ranks_print_once_the_totals_of_one_process() {
    let args = ["--cases", "32", "--seed", "5"];
    let one = check(None, &args);
    assert!(
        one.status.success(),
        "{}",
        String::from_utf8_lossy(&one.stderr)
    );
    for ranks in [2, 3] {
        let shared = check(Some(ranks), &args);
        assert!(
            shared.status.success(),
            "{}",
            String::from_utf8_lossy(&shared.stderr)
        );
        assert_eq!(untimed(&shared), untimed(&one), "{ranks} ranks");
    }
    // the closing lines, once
    let text = String::from_utf8_lossy(&check(Some(2), &args).stdout).into_owned();
    assert_eq!(text.matches("random graphs in").count(), 1, "{text}");
}

#[test]
fn a_fault_found_by_the_ranks_fails_every_rank() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--cases",
        "16",
        "--inject-fault",
        "flip-sign",
        "--shrink-steps",
        "20",
        "--out",
        dir.path().to_str().unwrap(),
    ];
    let one = check(None, &args);
    let shared = check(Some(2), &args);
    assert_eq!(one.status.code(), Some(1));
    assert_ne!(shared.status.code(), Some(0));
    assert_eq!(untimed(&shared), untimed(&one));
}
