// The random kernels (see kernels/mod.rs for the rules).
