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

// y[i] *= c[0]  (in place, by a factor the device computed: gradient clipping's)
extern "C" __global__ void tl_scale_by(float* __restrict__ y, const float* __restrict__ c,
                                       tl_index n) {
  const float f = c[0];
  for (tl_index i = tl_first(); i < n; i += tl_stride()) y[i] = y[i] * f;
}

// y[i] = x[i] + c
extern "C" __global__ void tl_ew_add_scalar(float* __restrict__ y, const float* __restrict__ x,
                                            float c, tl_index n) {
  for (tl_index i = tl_first(); i < n; i += tl_stride()) y[i] = x[i] + c;
}

// The unary functions' codes `TL_UNARY_<NAME>` and the list `TL_UNARY_CASES(CASE)` of them all
// are generated from `kernels::codes::UNARY` and prepended to this file: a new function is a
// row there and a `case` in each of `tl_unary_at` and `tl_unary_vjp_at` here. The constants
// `c0`, `c1`, `c2` come from the host (`torchlean_spec::ops::gelu_consts`, rounded to f32):
// they are written once.

// relu(x) = 0 if x < 0 else x (so relu(NaN) = NaN and relu(-0) = -0, as torch.relu)
__device__ __forceinline__ float tl_relu(float x) { return x < 0.0f ? 0.0f : x; }

__device__ __forceinline__ float tl_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// The function `op` at `v`, in the reference's order of operations (spec ops/elementwise.rs).
// gelu (erf): c0 = sqrt(1/2). gelu (tanh): c0 = beta, c1 = kappa.
__device__ __forceinline__ float tl_unary_at(tl_index op, float v, float c0, float c1) {
  switch (op) {
    case TL_UNARY_ABS: return fabsf(v);
    case TL_UNARY_SQRT: return sqrtf(v);
    case TL_UNARY_INV: return 1.0f / v;
    case TL_UNARY_RELU: return tl_relu(v);
    case TL_UNARY_TANH: return tanhf(v);
    case TL_UNARY_SIGMOID: return tl_sigmoid(v);
    case TL_UNARY_EXP: return expf(v);
    case TL_UNARY_LOG: return logf(v);
    case TL_UNARY_SIN: return sinf(v);
    case TL_UNARY_COS: return cosf(v);
    case TL_UNARY_NEG: return -v;
    // (0 < x) - (x < 0): +0 for +-0 and NaN, as torch.sign
    case TL_UNARY_SIGN: return v > 0.0f ? 1.0f : (v < 0.0f ? -1.0f : 0.0f);
    // max(x, 0) + log1p(exp(-|x|)): no overflow for large |x|
    case TL_UNARY_SOFTPLUS: return tl_relu(v) + log1pf(expf(-fabsf(v)));
    case TL_UNARY_ERF: return erff(v);
    case TL_UNARY_SILU: return v * tl_sigmoid(v);
    // x * 0.5 * (1 + erf(x * sqrt(1/2))), PyTorch's order
    case TL_UNARY_GELU_ERF: return v * 0.5f * (1.0f + erff(v * c0));
    // 0.5 * x * (1 + tanh(beta * (x + kappa * x^3)))
    case TL_UNARY_GELU_TANH: {
      float inner = c0 * (v + c1 * (v * v * v));
      return 0.5f * v * (1.0f + tanhf(inner));
    }
    case TL_UNARY_LEAKY_RELU: return v > 0.0f ? v : v * c0;                 // c0 = negative_slope
    case TL_UNARY_ELU: return v > 0.0f ? v : (expf(v) - 1.0f) * c0;         // c0 = alpha
    default: return TL_NAN;
  }
}

// TL_UNARY_CASES (generated) lists every unary code, for the kernels that switch on the code
// once, outside their loop (each case is the loop with the code a constant, so the inner switch
// folds away).

// y[i] = f_op(x[i]); an unknown code writes NaN
extern "C" __global__ void tl_ew_unary(float* __restrict__ y, const float* __restrict__ x,
                                       tl_index op, float c0, float c1, tl_index n) {
#define TL_CASE(code)                                                  \
  case code:                                                           \
    for (tl_index i = tl_first(); i < n; i += tl_stride())             \
      y[i] = tl_unary_at(code, x[i], c0, c1);                          \
    return;
  switch (op) { TL_UNARY_CASES(TL_CASE) default: break; }
#undef TL_CASE
  for (tl_index i = tl_first(); i < n; i += tl_stride()) y[i] = TL_NAN;
}

// dx from the saved value `s` (the input x or the output y, as the op's descriptor saves) and
// the cotangent d. gelu (erf): c0 = sqrt(1/2), c1 = alpha. gelu (tanh): c0 = beta, c1 = kappa,
// c2 = 3 kappa.
__device__ __forceinline__ float tl_unary_vjp_at(tl_index op, float s, float d, float c0,
                                                 float c1, float c2) {
  switch (op) {
    case TL_UNARY_ABS: return s > 0.0f ? d : (s < 0.0f ? -d : 0.0f);        // s = x
    case TL_UNARY_SQRT: return s > 0.0f ? d / (s + s) : 0.0f;               // s = y
    case TL_UNARY_INV: return -(d * (s * s));                               // s = y
    case TL_UNARY_RELU: return s <= 0.0f ? 0.0f : d;                        // s = y, d at NaN
    case TL_UNARY_TANH: return d * (1.0f - s * s);                          // s = y
    case TL_UNARY_SIGMOID: return d * (1.0f - s) * s;                       // s = y
    case TL_UNARY_EXP: return d * s;                                        // s = y
    case TL_UNARY_LOG: return d / s;                                        // s = x
    case TL_UNARY_SIN: return d * cosf(s);                                  // s = x
    case TL_UNARY_COS: return d * -sinf(s);                                 // s = x
    case TL_UNARY_NEG: return -d;                                           // nothing saved
    case TL_UNARY_SIGN: return 0.0f;                                        // zeros_like(grad)
    case TL_UNARY_SOFTPLUS: return d * tl_sigmoid(s);                       // s = x
    case TL_UNARY_ERF: return 1.12837916709551257f * expf(-(s * s)) * d;    // s = x; 2/sqrt(pi)
    case TL_UNARY_SILU: {                                                   // s = x
      // sigma(x) * (1 + x * (1 - sigma(x)))
      float sg = tl_sigmoid(s);
      return d * (sg * (1.0f + s * (1.0f - sg)));
    }
    case TL_UNARY_GELU_ERF: {                                               // s = x
      // Phi(x) + x * phi(x), PyTorch's order
      float cdf = 0.5f * (1.0f + erff(s * c0));
      float pdf = c1 * expf(-0.5f * s * s);
      return d * (cdf + s * pdf);
    }
    case TL_UNARY_GELU_TANH: {                                              // s = x
      // PyTorch's gelu_backward: 0.5 (1 + t) + 0.5 x (1 - t^2) beta (1 + 3 kappa x^2)
      float sq = s * s;
      float t = tanhf(c0 * (s + c1 * (sq * s)));
      float left = 0.5f * s;
      float left_d = 0.5f * (1.0f + t);
      float right_d = left * (1.0f - t * t) * (c0 * (1.0f + c2 * sq));
      return d * (left_d + right_d);
    }
    case TL_UNARY_LEAKY_RELU: return s > 0.0f ? d : d * c0;                 // s = x, c0 = slope
    case TL_UNARY_ELU: return s <= 0.0f ? d * c0 * expf(s) : d;             // s = x, c0 = alpha
    default: return TL_NAN;
  }
}

// dx[i] = f_op'(...) from s[i] and dy[i] (`s` is unread for neg: pass dy)
extern "C" __global__ void tl_ew_unary_vjp(float* __restrict__ dx, const float* __restrict__ s,
                                           const float* __restrict__ dy, tl_index op, float c0,
                                           float c1, float c2, tl_index n) {
#define TL_CASE(code)                                                  \
  case code:                                                           \
    for (tl_index i = tl_first(); i < n; i += tl_stride())             \
      dx[i] = tl_unary_vjp_at(code, s[i], dy[i], c0, c1, c2);          \
    return;
  switch (op) { TL_UNARY_CASES(TL_CASE) default: break; }
#undef TL_CASE
  for (tl_index i = tl_first(); i < n; i += tl_stride()) dx[i] = TL_NAN;
}

// The binary functions' codes `TL_BINARY_<NAME>` and `TL_BINARY_CASES(CASE)`: generated from
// `kernels::codes::BINARY`, as the unary ones.

__device__ __forceinline__ float tl_binary_at(tl_index op, float a, float b) {
  switch (op) {
    case TL_BINARY_ADD: return a + b;
    case TL_BINARY_SUB: return a - b;
    case TL_BINARY_MUL: return a * b;
    case TL_BINARY_DIV: return a / b;
    // torch.maximum/minimum: NaN on either side is NaN (a is NaN unless b wins), a tie gives a
    case TL_BINARY_MAX: return (b > a || isnan(b)) ? b : a;
    case TL_BINARY_MIN: return (a > b || isnan(b)) ? b : a;
    default: return TL_NAN;
  }
}

// y[i] = a[i] op b[i]
extern "C" __global__ void tl_ew_binary(float* __restrict__ y, const float* __restrict__ a,
                                        const float* __restrict__ b, tl_index op, tl_index n) {
#define TL_CASE(code)                                                  \
  case code:                                                           \
    for (tl_index i = tl_first(); i < n; i += tl_stride())             \
      y[i] = tl_binary_at(code, a[i], b[i]);                           \
    return;
  switch (op) { TL_BINARY_CASES(TL_CASE) default: break; }
#undef TL_CASE
  for (tl_index i = tl_first(); i < n; i += tl_stride()) y[i] = TL_NAN;
}

// PyTorch's maximum/minimum backward: a tie splits the cotangent in half, the loser gets 0, and
// at NaN (no tie, no loser) both sides get all of it.
__device__ __forceinline__ float tl_share(bool loses, bool tie, float d) {
  return tie ? d * 0.5f : (loses ? 0.0f : d);
}

// (da[i], db[i]) of mul, div, max and min (add and sub need no kernel of their own); one thread
// writes both.
extern "C" __global__ void tl_ew_binary_vjp(float* __restrict__ da, float* __restrict__ db,
                                            const float* __restrict__ a,
                                            const float* __restrict__ b,
                                            const float* __restrict__ dy, tl_index op,
                                            tl_index n) {
  for (tl_index i = tl_first(); i < n; i += tl_stride()) {
    float x = a[i], y = b[i], d = dy[i];
    switch (op) {
      case TL_BINARY_MUL: da[i] = d * y; db[i] = d * x; break;
      case TL_BINARY_DIV: da[i] = d / y; db[i] = -((d * x) / (y * y)); break;
      case TL_BINARY_MAX: da[i] = tl_share(x < y, x == y, d); db[i] = tl_share(x > y, x == y, d); break;
      case TL_BINARY_MIN: da[i] = tl_share(x > y, x == y, d); db[i] = tl_share(x < y, x == y, d); break;
      default: da[i] = TL_NAN; db[i] = TL_NAN; break;
    }
  }
}

// torch.clamp: lo where x < lo, hi where x > hi, else x (NaN stays NaN); an absent bound is
// an infinite one
extern "C" __global__ void tl_ew_clamp(float* __restrict__ y, const float* __restrict__ x,
                                       float lo, float hi, tl_index n) {
  for (tl_index i = tl_first(); i < n; i += tl_stride()) {
    float v = x[i];
    y[i] = v < lo ? lo : (v > hi ? hi : v);
  }
}

// dx[i] = dy[i] where lo <= x[i] <= hi (false at NaN), else 0
extern "C" __global__ void tl_ew_clamp_vjp(float* __restrict__ dx, const float* __restrict__ x,
                                           const float* __restrict__ dy, float lo, float hi,
                                           tl_index n) {
  for (tl_index i = tl_first(); i < n; i += tl_stride()) {
    float v = x[i];
    dx[i] = (v >= lo && v <= hi) ? dy[i] : 0.0f;
  }
}
