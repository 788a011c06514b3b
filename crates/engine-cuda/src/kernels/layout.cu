// The layout kernels (see kernels/mod.rs for the rules).
