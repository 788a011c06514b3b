// What the products need around cuBLAS (see kernels/mod.rs for the rules).
