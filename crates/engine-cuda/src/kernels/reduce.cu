// The reduce kernels (see kernels/mod.rs for the rules).
//
// Sums run in a fixed tree whose shape depends only on the number of items (ops/reduce.rs,
// `Plan`): `tl_red_items` sums each output's items m = p, p + P, p + 2P, ... into P partials
// (interleaved, so neighbouring threads read neighbouring addresses), `tl_red_parts` sums each
// output's partials the same way into fewer, until one is left. Every partial is a double kept
// in two floats (`tl_store_f64`), so a sum is accurate far beyond the f32 tolerance and
// identical run to run, on any grid.

// What a reduction emits: the value s / denom rounded to f32 (mode 0), the double s / denom
// (mode 1, two floats), or the double sqrt(s / denom + eps) (mode 2: batch norm's sigma).
__device__ __forceinline__ void tl_red_emit(float* out, tl_index slot, double s, tl_index denom,
                                            tl_index mode, double eps) {
  double v = s / (double)denom;
  if (mode == 0) {
    out[slot] = (float)v;
  } else if (mode == 1) {
    tl_store_f64(out + 2 * slot, v);
  } else {
    tl_store_f64(out + 2 * slot, sqrt(v + eps));
  }
}

// Item m of output j: j = (j1, j2) over (outputs / j_inner, j_inner), m = (m1, m2) over
// (items / m_inner, m_inner); its offset is j1*sj1 + j2*sj2 + m1*sm1 + m2*sm2.
// kind 0: a; kind 1: (a - b)^2; kind 2: (a - c_j)^2; kind 3: b*(a - c_j), with c_j the double
// center[2j..2j+2].
// Thread t = j*parts + p writes partial p of output j (slot t).
extern "C" __global__ void tl_red_items(float* __restrict__ out, const float* __restrict__ a,
                                        const float* __restrict__ b,
                                        const float* __restrict__ center, tl_index outputs,
                                        tl_index j_inner, tl_index sj1, tl_index sj2,
                                        tl_index items, tl_index m_inner, tl_index sm1,
                                        tl_index sm2, tl_index parts, tl_index kind,
                                        tl_index denom, tl_index mode,
                                        unsigned long long eps_bits) {
  double eps = tl_f64_of_bits(eps_bits);
  tl_index threads = outputs * parts;
  for (tl_index t = tl_first(); t < threads; t += tl_stride()) {
    tl_index j = t / parts;
    tl_index p = t - j * parts;
    tl_index base = (j / j_inner) * sj1 + (j % j_inner) * sj2;
    double c = (kind >= 2) ? tl_load_f64(center + 2 * j) : 0.0;
    // (m1, m2) of item m, stepped by `parts` without a division per item
    tl_index step1 = parts / m_inner, step2 = parts % m_inner;
    tl_index m1 = p / m_inner, m2 = p % m_inner;
    double s = 0.0;
    for (tl_index m = p; m < items; m += parts) {
      tl_index o = base + m1 * sm1 + m2 * sm2;
      m1 += step1;
      m2 += step2;
      if (m2 >= m_inner) {
        m2 -= m_inner;
        m1 += 1;
      }
      double x = (double)a[o];
      double v;
      if (kind == 0) {
        v = x;
      } else if (kind == 1) {
        double d = x - (double)b[o];
        v = d * d;
      } else if (kind == 2) {
        double d = x - c;
        v = d * d;
      } else {
        v = (double)b[o] * (x - c);
      }
      s += v;
    }
    tl_red_emit(out, t, s, denom, mode, eps);
  }
}

// part holds parts_in partials (doubles) per output; thread t = j*parts_out + p sums partials
// p, p + parts_out, ... of output j, in order, and emits slot t.
extern "C" __global__ void tl_red_parts(float* __restrict__ out, const float* __restrict__ part,
                                        tl_index outputs, tl_index parts_in, tl_index parts_out,
                                        tl_index denom, tl_index mode,
                                        unsigned long long eps_bits) {
  double eps = tl_f64_of_bits(eps_bits);
  tl_index threads = outputs * parts_out;
  for (tl_index t = tl_first(); t < threads; t += tl_stride()) {
    tl_index j = t / parts_out;
    tl_index p = t - j * parts_out;
    const float* row = part + 2 * j * parts_in;
    double s = 0.0;
    for (tl_index k = p; k < parts_in; k += parts_out) s += tl_load_f64(row + 2 * k);
    tl_red_emit(out, t, s, denom, mode, eps);
  }
}

// y[(o*n + k)*inner + i] = dy[o*inner + i] / denom: a reduction's cotangent spread back over
// the reduced axis (denom 1 for a sum, n for a mean: 0 only where there are no elements).
extern "C" __global__ void tl_red_spread(float* __restrict__ y, const float* __restrict__ dy,
                                         tl_index total, tl_index n, tl_index inner,
                                         tl_index denom) {
  for (tl_index e = tl_first(); e < total; e += tl_stride()) {
    tl_index i = e % inner;
    tl_index o = e / (n * inner);
    y[e] = (float)((double)dy[o * inner + i] / (double)denom);
  }
}

// y[e] = x[0] (the whole sum's cotangent, read on the device)
extern "C" __global__ void tl_red_fill_from(float* __restrict__ y, const float* __restrict__ x,
                                            tl_index n) {
  for (tl_index e = tl_first(); e < n; e += tl_stride()) y[e] = x[0];
}

// dy[e] = (2/denom)·(y[e] − t[e])·δ and dt[e] = −dy[e], δ = cot[0] (PyTorch's order).
extern "C" __global__ void tl_red_mse_vjp(float* __restrict__ dy, float* __restrict__ dt,
                                          const float* __restrict__ y,
                                          const float* __restrict__ t,
                                          const float* __restrict__ cot, tl_index n,
                                          tl_index denom) {
  double norm = 2.0 / (double)denom;
  double delta = (double)cot[0];
  for (tl_index e = tl_first(); e < n; e += tl_stride()) {
    float v = (float)((norm * ((double)y[e] - (double)t[e])) * delta);
    dy[e] = v;
    dt[e] = -v;
  }
}

// (m, Σ e^(x − m)) of a non-empty row of c logits, m its maximum by `m > v ? m : v`.
__device__ __forceinline__ double tl_red_row_shift_sum(const float* row, tl_index c, float* m) {
  float best = row[0];
  for (tl_index k = 1; k < c; ++k) best = (best > row[k]) ? best : row[k];
  double s = 0.0;
  for (tl_index k = 0; k < c; ++k) s += exp((double)row[k] - (double)best);
  *m = best;
  return s;
}

// loss[i] = −((x[i, t_i] − m_i) − log Σ_k e^(x[i, k] − m_i)) for rows of c logits.
extern "C" __global__ void tl_red_ce_rows(float* __restrict__ loss, const float* __restrict__ x,
                                          const long long* __restrict__ ids, tl_index n,
                                          tl_index c) {
  for (tl_index i = tl_first(); i < n; i += tl_stride()) {
    const float* row = x + i * c;
    float m;
    double s = tl_red_row_shift_sum(row, c, &m);
    loss[i] = (float)(-(((double)row[ids[i]] - (double)m) - log(s)));
  }
}

// dx[i, k] = g·softmax(x_i)[k] − (k == t_i ? g : 0), g = cot[0] / denom; one thread per row.
extern "C" __global__ void tl_red_ce_vjp(float* __restrict__ dx, const float* __restrict__ x,
                                         const long long* __restrict__ ids,
                                         const float* __restrict__ cot, tl_index n, tl_index c,
                                         tl_index denom) {
  double g = (double)cot[0] / (double)denom;
  for (tl_index i = tl_first(); i < n; i += tl_stride()) {
    const float* row = x + i * c;
    float m;
    double s = tl_red_row_shift_sum(row, c, &m);
    for (tl_index k = 0; k < c; ++k) {
      double d = (exp((double)row[k] - (double)m) / s) * g;
      dx[i * c + k] = (float)(k == ids[i] ? d - g : d);
    }
  }
}
