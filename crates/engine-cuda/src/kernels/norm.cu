// The norm kernels (see kernels/mod.rs for the rules).
