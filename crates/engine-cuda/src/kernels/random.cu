// The random kernels (see kernels/mod.rs for the rules).

// One SplitMix64 step (Steele, Lea, Flood 2014): `torchlean_spec::ops::splitmix64`, the same
// wrapping 64-bit arithmetic.
__device__ __forceinline__ unsigned long long tl_splitmix64(unsigned long long x) {
  unsigned long long z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// `torchlean_spec::ops::uniform_at(seed, key, i)` rounded to f32 (exact: the top 24 bits over
// 2^24), given the stream `splitmix64(seed ^ splitmix64(key))`.
__device__ __forceinline__ float tl_uniform_at(unsigned long long stream, tl_index i) {
  unsigned long long u = tl_splitmix64(stream + (unsigned long long)i) >> 40;
  return (float)u * (1.0f / 16777216.0f);
}

// y[i] = uniform_at(seed, key, i)
extern "C" __global__ void tl_rand_uniform(float* __restrict__ y, unsigned long long seed,
                                           unsigned long long key, tl_index n) {
  unsigned long long stream = tl_splitmix64(seed ^ tl_splitmix64(key));
  for (tl_index i = tl_first(); i < n; i += tl_stride()) y[i] = tl_uniform_at(stream, i);
}

// y[i] = 1 where keep_prob[0] > uniform_at(seed, key, i) (rounded to f32 first), else 0; the
// probability is read on the device (no download).
extern "C" __global__ void tl_rand_bernoulli(float* __restrict__ y,
                                             const float* __restrict__ keep_prob,
                                             unsigned long long seed, unsigned long long key,
                                             tl_index n) {
  unsigned long long stream = tl_splitmix64(seed ^ tl_splitmix64(key));
  float p = keep_prob[0];
  for (tl_index i = tl_first(); i < n; i += tl_stride())
    y[i] = p > tl_uniform_at(stream, i) ? 1.0f : 0.0f;
}
