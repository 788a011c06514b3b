//! Empty: Cargo resolves a package's build-dependencies only when it has a build script, and
//! this package's are there for feature unification alone (its Cargo.toml says why).
fn main() {}
