// The reduce kernels (see kernels/mod.rs for the rules).
