//! Whether a launcher started this process as one of several: the environment each MPI
//! launcher sets for its processes, read before MPI is initialized (so a build without MPI can
//! say it cannot take part, instead of training alone N times over).

use std::env;

/// A launcher's word on this process: which launcher, this process's rank, how many.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    pub launcher: &'static str,
    pub rank: usize,
    pub size: usize,
}

/// The launchers' (size, rank) variables, in the order they are read: OpenMPI's `mpirun`,
/// MPICH's and Intel MPI's Hydra (PMI), then Slurm's `srun` (its job step's task count, which a PMIx
/// `srun --mpi=pmix` job shares with MPI).
const LAUNCHERS: [(&str, &str, &str); 3] = [
    (
        "OpenMPI's mpirun",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_RANK",
    ),
    ("a PMI launcher (MPICH, Intel MPI)", "PMI_SIZE", "PMI_RANK"),
    ("Slurm's srun", "SLURM_STEP_NUM_TASKS", "SLURM_PROCID"),
];

/// What the environment says about how this process was launched (`None`: by hand).
pub fn launched() -> Option<Launch> {
    launched_from(|k| env::var(k).ok())
}

fn launched_from(var: impl Fn(&str) -> Option<String>) -> Option<Launch> {
    LAUNCHERS.iter().find_map(|&(launcher, size, rank)| {
        let size: usize = var(size)?.trim().parse().ok()?;
        let rank: usize = var(rank)?.trim().parse().ok()?;
        // a batch script is not a step; a one-task step is not a launch
        (size > 0 && rank < size && !(launcher.starts_with("Slurm") && size == 1)).then_some(
            Launch {
                launcher,
                rank,
                size,
            },
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn check(vars: &[(&str, &str)], want: Option<(&str, usize, usize)>) {
        let map: HashMap<&str, &str> = vars.iter().copied().collect();
        let got = launched_from(|k| map.get(k).map(|v| v.to_string()));
        let got = got.map(|l| (l.launcher, l.rank, l.size));
        assert_eq!(got, want, "{vars:?}");
    }

    #[test]
    fn each_launcher_is_read_and_nonsense_is_ignored() {
        check(&[], None);
        check(
            &[("OMPI_COMM_WORLD_SIZE", "2"), ("OMPI_COMM_WORLD_RANK", "1")],
            Some(("OpenMPI's mpirun", 1, 2)),
        );
        check(
            &[("PMI_SIZE", "4"), ("PMI_RANK", "3")],
            Some(("a PMI launcher (MPICH, Intel MPI)", 3, 4)),
        );
        check(
            &[("SLURM_STEP_NUM_TASKS", "8"), ("SLURM_PROCID", "0")],
            Some(("Slurm's srun", 0, 8)),
        );
        // a one-task Slurm step is not a launch; a rank past the size is nonsense
        check(
            &[("SLURM_STEP_NUM_TASKS", "1"), ("SLURM_PROCID", "0")],
            None,
        );
        check(&[("PMI_SIZE", "2"), ("PMI_RANK", "2")], None);
        check(&[("PMI_SIZE", "two"), ("PMI_RANK", "0")], None);
        // mpirun inside a Slurm allocation: mpirun's word wins
        check(
            &[
                ("SLURM_STEP_NUM_TASKS", "8"),
                ("SLURM_PROCID", "0"),
                ("OMPI_COMM_WORLD_SIZE", "2"),
                ("OMPI_COMM_WORLD_RANK", "0"),
            ],
            Some(("OpenMPI's mpirun", 0, 2)),
        );
    }
}
