//! The collectives over real MPI: `mpirun` runs `collectives-check` on 1, 2 and 3 ranks.
//! Built only with the `mpi` feature (`cargo test -p torchlean-distributed --features mpi`),
//! which needs an MPI library and its `mpirun`.
#![cfg(feature = "mpi")]

use std::process::Command;

/// `mpirun --oversubscribe -np N program args`, allowed to run as root (CI does).
pub fn mpirun(n: usize, program: &str, args: &[&str]) -> std::process::Output {
    Command::new("mpirun")
        .args(["--oversubscribe", "-np", &n.to_string(), program])
        .args(args)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .output()
        .expect("mpirun runs (install openmpi-bin)")
}

#[test]
fn every_rank_gets_the_same_bits_and_the_fold_in_rank_order() {
    let bin = env!("CARGO_BIN_EXE_collectives-check");
    for n in [1, 2, 3] {
        for len in ["1003", "2", "0"] {
            let out = mpirun(n, bin, &[len]);
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{n} ranks, {len}: {stdout}\n{stderr}");
            let mut lines: Vec<&str> = stdout.lines().collect();
            lines.sort();
            assert_eq!(lines.len(), n, "{stdout}");
            let hashes: Vec<&str> = lines.iter().map(|l| &l[l.len() - 16..]).collect();
            assert!(hashes.iter().all(|h| *h == hashes[0]), "{stdout}");
            for (r, l) in lines.iter().enumerate() {
                assert!(l.starts_with(&format!("rank {r} of {n}: ok")), "{stdout}");
            }
            if n > 1 {
                assert!(stderr.contains("disagree on its length"), "{stderr}");
            }
        }
    }
}
