// Elementwise kernels (see kernels/mod.rs for the rules every kernel follows).

// y[i] = value
extern "C" __global__ void tl_fill(float* __restrict__ y, float value, tl_index n) {
  for (tl_index i = tl_first(); i < n; i += tl_stride()) y[i] = value;
}

// y[i] += x[i]  (the gradient accumulation `existing + new`)
extern "C" __global__ void tl_accumulate(float* __restrict__ y, const float* __restrict__ x,
                                         tl_index n) {
  for (tl_index i = tl_first(); i < n; i += tl_stride()) y[i] = y[i] + x[i];
}

// y[i] = c * x[i]
extern "C" __global__ void tl_scale(float* __restrict__ y, const float* __restrict__ x, float c,
                                    tl_index n) {
  for (tl_index i = tl_first(); i < n; i += tl_stride()) y[i] = c * x[i];
}
