// The norm kernels (see kernels/mod.rs for the rules).
//
// Softmax and layer norm: one thread per line (a line of an `outer × n × inner` view, or a
// row of layer norm's suffix), sums in index order in double. Batch norm: elementwise kernels
// over per-channel values the reduce module's segmented sums computed (doubles in two floats,
// `tl_load_f64`), and one thread per channel to finish the parameter gradients.

// The start of line l of an `outer × n × inner` view (lines row-major over (o, i)).
__device__ __forceinline__ tl_index tl_norm_line_start(tl_index l, tl_index n, tl_index inner) {
  tl_index o = l / inner;
  return o * n * inner + (l - o * inner);
}

// Softmax (log = 0) or log-softmax (log = 1) along lines of n elements at stride inner:
// max-shifted by m = fold(m > v ? m : v), sums left to right.
extern "C" __global__ void tl_norm_softmax(float* __restrict__ y, const float* __restrict__ x,
                                           tl_index lines, tl_index n, tl_index inner,
                                           tl_index log_form) {
  if (n <= 0) return;  // lines of nothing: no outputs
  for (tl_index l = tl_first(); l < lines; l += tl_stride()) {
    const float* xs = x + tl_norm_line_start(l, n, inner);
    float* ys = y + tl_norm_line_start(l, n, inner);
    float m = xs[0];
    for (tl_index k = 1; k < n; ++k) m = (m > xs[k * inner]) ? m : xs[k * inner];
    double s = 0.0;
    for (tl_index k = 0; k < n; ++k) s += exp((double)xs[k * inner] - (double)m);
    if (log_form) {
      double lse = log(s);
      for (tl_index k = 0; k < n; ++k)
        ys[k * inner] = (float)(((double)xs[k * inner] - (double)m) - lse);
    } else {
      for (tl_index k = 0; k < n; ++k)
        ys[k * inner] = (float)(exp((double)xs[k * inner] - (double)m) / s);
    }
  }
}

// softmax: dx = (dy − Σ dy·y)·y; log-softmax: dx = dy − e^y·Σ dy (along each line).
extern "C" __global__ void tl_norm_softmax_vjp(float* __restrict__ dx,
                                               const float* __restrict__ y,
                                               const float* __restrict__ dy, tl_index lines,
                                               tl_index n, tl_index inner, tl_index log_form) {
  for (tl_index l = tl_first(); l < lines; l += tl_stride()) {
    tl_index start = tl_norm_line_start(l, n, inner);
    const float* ys = y + start;
    const float* ds = dy + start;
    float* gs = dx + start;
    double s = 0.0;
    if (log_form) {
      for (tl_index k = 0; k < n; ++k) s += (double)ds[k * inner];
      for (tl_index k = 0; k < n; ++k)
        gs[k * inner] = (float)((double)ds[k * inner] - exp((double)ys[k * inner]) * s);
    } else {
      for (tl_index k = 0; k < n; ++k) s += (double)ds[k * inner] * (double)ys[k * inner];
      for (tl_index k = 0; k < n; ++k)
        gs[k * inner] = (float)(((double)ds[k * inner] - s) * (double)ys[k * inner]);
    }
  }
}

// (mean, sigma) of a row: population variance clamped at 0 by `v > 0 ? v : 0`,
// sigma = sqrt(var + eps).
__device__ __forceinline__ void tl_norm_row_stats(const float* row, tl_index n, double eps,
                                                  double* mean, double* sigma) {
  double count = (double)(n > 1 ? n : 1);
  double s = 0.0;
  for (tl_index k = 0; k < n; ++k) s += (double)row[k];
  double mu = s / count;
  double q = 0.0;
  for (tl_index k = 0; k < n; ++k) {
    double c = (double)row[k] - mu;
    q += c * c;
  }
  double var = q / count;
  var = (var > 0.0) ? var : 0.0;
  *mean = mu;
  *sigma = sqrt(var + eps);
}

// Layer norm of rows of `inner` elements: (x − mean)/sigma.
extern "C" __global__ void tl_norm_layer(float* __restrict__ y, const float* __restrict__ x,
                                         tl_index rows, tl_index inner,
                                         unsigned long long eps_bits) {
  double eps = tl_f64_of_bits(eps_bits);
  for (tl_index r = tl_first(); r < rows; r += tl_stride()) {
    const float* row = x + r * inner;
    double mu, sigma;
    tl_norm_row_stats(row, inner, eps, &mu, &sigma);
    for (tl_index k = 0; k < inner; ++k) y[r * inner + k] = (float)(((double)row[k] - mu) / sigma);
  }
}

// dx = (dy − mean(dy) − x̂·mean(dy·x̂)) / sigma per row.
extern "C" __global__ void tl_norm_layer_vjp(float* __restrict__ dx, const float* __restrict__ x,
                                             const float* __restrict__ dy, tl_index rows,
                                             tl_index inner, unsigned long long eps_bits) {
  double eps = tl_f64_of_bits(eps_bits);
  for (tl_index r = tl_first(); r < rows; r += tl_stride()) {
    const float* row = x + r * inner;
    const float* drow = dy + r * inner;
    double mu, sigma;
    tl_norm_row_stats(row, inner, eps, &mu, &sigma);
    double sd = 0.0, sdx = 0.0;
    for (tl_index k = 0; k < inner; ++k) {
      double d = (double)drow[k];
      sd += d;
      sdx += d * (((double)row[k] - mu) / sigma);
    }
    double md = sd / (double)inner;
    double mdx = sdx / (double)inner;
    for (tl_index k = 0; k < inner; ++k) {
      double h = ((double)row[k] - mu) / sigma;
      dx[r * inner + k] = (float)((((double)drow[k] - md) - h * mdx) / sigma);
    }
  }
}

// sqrt(max(var, 0) + eps) with `v > 0 ? v : 0` (a NaN variance counts as 0, as in the
// reference).
__device__ __forceinline__ double tl_norm_bn_sigma(float var, double eps) {
  double v = (double)var;
  return sqrt(((v > 0.0) ? v : 0.0) + eps);
}

// Evaluation-mode batch norm over [N, C, rest]: ((x − mean)/sigma)·γ + β per channel.
extern "C" __global__ void tl_norm_bn_eval(float* __restrict__ y, const float* __restrict__ x,
                                           const float* __restrict__ gamma,
                                           const float* __restrict__ beta,
                                           const float* __restrict__ mean,
                                           const float* __restrict__ var, tl_index total,
                                           tl_index c, tl_index rest,
                                           unsigned long long eps_bits) {
  double eps = tl_f64_of_bits(eps_bits);
  for (tl_index e = tl_first(); e < total; e += tl_stride()) {
    tl_index ch = (e / rest) % c;
    double norm = ((double)x[e] - (double)mean[ch]) / tl_norm_bn_sigma(var[ch], eps);
    y[e] = (float)(norm * (double)gamma[ch] + (double)beta[ch]);
  }
}

// Its input gradient: dx = (dy·γ)/sigma.
extern "C" __global__ void tl_norm_bn_eval_dx(float* __restrict__ dx,
                                              const float* __restrict__ dy,
                                              const float* __restrict__ gamma,
                                              const float* __restrict__ var, tl_index total,
                                              tl_index c, tl_index rest,
                                              unsigned long long eps_bits) {
  double eps = tl_f64_of_bits(eps_bits);
  for (tl_index e = tl_first(); e < total; e += tl_stride()) {
    tl_index ch = (e / rest) % c;
    dx[e] = (float)(((double)dy[e] * (double)gamma[ch]) / tl_norm_bn_sigma(var[ch], eps));
  }
}

// out[2i..2i+2] = the double x[i] (a per-channel center for the reduce module's sums).
extern "C" __global__ void tl_norm_doubles_of(float* __restrict__ out,
                                              const float* __restrict__ x, tl_index n) {
  for (tl_index i = tl_first(); i < n; i += tl_stride()) tl_store_f64(out + 2 * i, (double)x[i]);
}

// The parameter gradients of evaluation-mode batch norm from S1 = Σ dy (sd) and
// S2 = Σ dy·(x − mean) (sdc), per channel: dγ = S2/sigma, dβ = S1, dmean = −γ·S1/sigma,
// dvar = γ·S2·(var < 0 ? 0 : −1/(2 sigma³)).
extern "C" __global__ void tl_norm_bn_eval_grads(float* __restrict__ dgamma,
                                                 float* __restrict__ dbeta,
                                                 float* __restrict__ dmean,
                                                 float* __restrict__ dvar,
                                                 const float* __restrict__ sd,
                                                 const float* __restrict__ sdc,
                                                 const float* __restrict__ gamma,
                                                 const float* __restrict__ var, tl_index c,
                                                 unsigned long long eps_bits) {
  double eps = tl_f64_of_bits(eps_bits);
  for (tl_index ch = tl_first(); ch < c; ch += tl_stride()) {
    double s = tl_norm_bn_sigma(var[ch], eps);
    double s1 = tl_load_f64(sd + 2 * ch);
    double s2 = tl_load_f64(sdc + 2 * ch);
    double g = (double)gamma[ch];
    double coef = (0.0 > (double)var[ch]) ? 0.0 : -0.5 / (s * s * s);
    dgamma[ch] = (float)(s2 / s);
    dbeta[ch] = (float)s1;
    dmean[ch] = (float)(-(g * s1 / s));
    dvar[ch] = (float)(g * s2 * coef);
  }
}

// Training-mode batch norm with the batch's statistics (mean[2ch..], sigma[2ch..] doubles):
// ((x − mean)/sigma)·γ + β.
extern "C" __global__ void tl_norm_bn_train(float* __restrict__ y, const float* __restrict__ x,
                                            const float* __restrict__ gamma,
                                            const float* __restrict__ beta,
                                            const float* __restrict__ mean,
                                            const float* __restrict__ sigma, tl_index total,
                                            tl_index c, tl_index rest) {
  for (tl_index e = tl_first(); e < total; e += tl_stride()) {
    tl_index ch = (e / rest) % c;
    double norm = ((double)x[e] - tl_load_f64(mean + 2 * ch)) / tl_load_f64(sigma + 2 * ch);
    y[e] = (float)(norm * (double)gamma[ch] + (double)beta[ch]);
  }
}

// Its input gradient from S1 = Σ dy (sd) and S2 = Σ dy·(x − mean) (sdc): with dβ = S1,
// dγ = S2/sigma and x̂ = (x − mean)/sigma, dx = γ·((dy − dβ/M) − x̂·dγ/M)/sigma.
extern "C" __global__ void tl_norm_bn_train_dx(float* __restrict__ dx,
                                               const float* __restrict__ x,
                                               const float* __restrict__ dy,
                                               const float* __restrict__ gamma,
                                               const float* __restrict__ mean,
                                               const float* __restrict__ sigma,
                                               const float* __restrict__ sd,
                                               const float* __restrict__ sdc, tl_index total,
                                               tl_index c, tl_index rest, tl_index count) {
  for (tl_index e = tl_first(); e < total; e += tl_stride()) {
    tl_index ch = (e / rest) % c;
    double m = tl_load_f64(mean + 2 * ch);
    double s = tl_load_f64(sigma + 2 * ch);
    double mean_d = tl_load_f64(sd + 2 * ch) / (double)count;
    double mean_dh = (tl_load_f64(sdc + 2 * ch) / s) / (double)count;
    double h = ((double)x[e] - m) / s;
    dx[e] = (float)(((double)gamma[ch] * (((double)dy[e] - mean_d) - h * mean_dh)) / s);
  }
}

// dγ = S2/sigma, dβ = S1 per channel.
extern "C" __global__ void tl_norm_bn_train_grads(float* __restrict__ dgamma,
                                                  float* __restrict__ dbeta,
                                                  const float* __restrict__ sigma,
                                                  const float* __restrict__ sd,
                                                  const float* __restrict__ sdc, tl_index c) {
  for (tl_index ch = tl_first(); ch < c; ch += tl_stride()) {
    dgamma[ch] = (float)(tl_load_f64(sdc + 2 * ch) / tl_load_f64(sigma + 2 * ch));
    dbeta[ch] = (float)tl_load_f64(sd + 2 * ch);
  }
}
