// The pooling kernels (see kernels/mod.rs for the rules).
