//! Insta snapshots of lowered graphs (`torchlean lower` text) for a model zoo. Review changes
//! with `cargo insta review`.
#![allow(clippy::unwrap_used)]

use crate::common;

use torchlean_compiled::{exec_graph_of_ir, lower_text};

fn lowered(name: &str) -> String {
    let case = common::case(name);
    lower_text(&exec_graph_of_ir(&case.graph, &case.payload).unwrap())
}

#[test]
fn lowering_snapshots() {
    insta::assert_snapshot!("mlp", lowered("mlp3_relu_mse"));
    insta::assert_snapshot!("cnn", lowered("cnn_small"));
    insta::assert_snapshot!("attention", lowered("attention_block"));
    insta::assert_snapshot!("residual", lowered("residual_block"));
    insta::assert_snapshot!("batchnorm", lowered("batchnorm_eval_block"));
    insta::assert_snapshot!("fanout_repeated_parent", lowered("add_mul_same_node"));
}
