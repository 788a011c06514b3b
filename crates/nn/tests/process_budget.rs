//! A new eager session takes the process's memory budget (`Budget::process_default`), which is
//! set once per process: this binary sets a small one, so it shares a process with nothing else.
#![allow(clippy::unwrap_used)]

use torchlean_engine_cpu::CpuF64;
use torchlean_nn::{NnError, Ops, Session};
use torchlean_spec::{Budget, Tensor};

#[test]
fn a_new_session_takes_the_process_budget() {
    assert!(Budget::set_process_default(Budget::bytes(100)));
    let mut s = Session::<CpuF64>::new();
    let e = s
        .input("x", &Tensor::zeros([10]).unwrap(), false)
        .unwrap_err();
    assert!(
        matches!(
            e,
            NnError::OverBudget {
                node: 0,
                op: "input",
                ..
            }
        ),
        "{e}"
    );
}
