#ifndef TORCHLEAN_PRELUDE
#define TORCHLEAN_PRELUDE
// TorchLean-rs CUDA engine: what every kernel module starts with.
//
// On NVRTC this is a few helpers. Under TORCHLEAN_EMU (the host emulation, a plain C++17
// compiler) it also defines CUDA's qualifiers and built-in indices; the emulation runs the
// threads of a launch one after another, which computes what the device computes because no
// kernel shares memory between threads, synchronises or uses atomics.
#ifdef TORCHLEAN_EMU
#include <math.h>
#include <cmath>
#include <cstring>
#include <cstddef>
#include <utility>
#include <type_traits>
struct tl_dim3 { unsigned int x, y, z; };
static thread_local tl_dim3 threadIdx, blockIdx, blockDim, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, sizeof f); return f; }
static inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, sizeof i); return i; }
static inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
// The launch: every block, every thread, in order. `tl_call` unpacks CUDA-style kernel
// parameters (an array of pointers to each argument, as cuLaunchKernel takes them).
template <typename... A, std::size_t... I>
static void tl_call(void (*f)(A...), void** p, std::index_sequence<I...>) {
  f(*static_cast<std::remove_reference_t<A>*>(p[I])...);
}
template <typename... A>
static void tl_launch(void (*f)(A...), unsigned int grid, unsigned int block, void** p) {
  gridDim = tl_dim3{grid, 1, 1};
  blockDim = tl_dim3{block, 1, 1};
  for (unsigned int b = 0; b < grid; ++b) {
    for (unsigned int t = 0; t < block; ++t) {
      blockIdx = tl_dim3{b, 0, 0};
      threadIdx = tl_dim3{t, 0, 0};
      tl_call(f, p, std::index_sequence_for<A...>{});
    }
  }
}
#endif

typedef long long tl_index;

// The first index of this thread and the grid's stride: `for (tl_index i = tl_first(); i < n;
// i += tl_stride())` visits each of 0..n once over the whole grid.
__device__ __forceinline__ tl_index tl_first() {
  return (tl_index)blockIdx.x * (tl_index)blockDim.x + (tl_index)threadIdx.x;
}
__device__ __forceinline__ tl_index tl_stride() {
  return (tl_index)gridDim.x * (tl_index)blockDim.x;
}
#define TL_INF __int_as_float(0x7f800000)
#define TL_NAN __int_as_float(0x7fc00000)
// A double passed to a kernel as its bits (`unsigned long long`, `Arg::U64`), and a double kept
// exactly in two consecutive floats' bits (partial sums and statistics between launches: the
// buffers hold `float`s, and a double keeps long sums accurate).
#ifdef TORCHLEAN_EMU
static inline double tl_f64_of_bits(unsigned long long u) { double d; std::memcpy(&d, &u, sizeof d); return d; }
static inline unsigned long long tl_bits_of_f64(double d) { unsigned long long u; std::memcpy(&u, &d, sizeof u); return u; }
#else
__device__ __forceinline__ double tl_f64_of_bits(unsigned long long u) { return __longlong_as_double((long long)u); }
__device__ __forceinline__ unsigned long long tl_bits_of_f64(double d) { return (unsigned long long)__double_as_longlong(d); }
#endif
__device__ __forceinline__ void tl_store_f64(float* p, double d) {
  unsigned long long u = tl_bits_of_f64(d);
  p[0] = __int_as_float((int)(unsigned int)(u & 0xffffffffull));
  p[1] = __int_as_float((int)(unsigned int)(u >> 32));
}
__device__ __forceinline__ double tl_load_f64(const float* p) {
  unsigned long long lo = (unsigned int)__float_as_int(p[0]);
  unsigned long long hi = (unsigned int)__float_as_int(p[1]);
  return tl_f64_of_bits(lo | (hi << 32));
}
#endif  // TORCHLEAN_PRELUDE
