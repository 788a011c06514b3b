//! No code: this package unifies the features of host dependencies across the workspace's
//! builds (its Cargo.toml says which and why).
