// The pooling kernels (see kernels/mod.rs for the rules).
//
// Planes of h × w (every axis before the last two is a plane index), windows kh × kw at
// `stride` with symmetric zero padding `pad`. A window visits only its real cells, row-major:
// max pooling ignores padded cells (the first maximum wins, a NaN always takes over), average
// pooling divides by kh·kw (padded cells count). The VJPs gather: one thread per input cell
// adds the contributions of the windows holding it, in output order (the reference's order of
// accumulation), so no two threads write one cell.

// The real input indices [lo, hi) of output index o's window along an axis of `extent`.
__device__ __forceinline__ void tl_pool_range(tl_index o, tl_index k, tl_index stride,
                                              tl_index pad, tl_index extent, tl_index* lo,
                                              tl_index* hi) {
  tl_index s = o * stride - pad;
  tl_index a = s < 0 ? 0 : (s > extent ? extent : s);
  tl_index b = s + k;
  b = b > extent ? extent : b;
  *lo = a;
  *hi = b > a ? b : a;
}

// The output indices [first, last] along an axis whose windows hold input index r.
__device__ __forceinline__ void tl_pool_covering(tl_index r, tl_index k, tl_index stride,
                                                 tl_index pad, tl_index outs, tl_index* first,
                                                 tl_index* last) {
  tl_index t = r + pad + 1 - k;  // the window of o holds r iff o·stride − pad ≤ r < … + k
  tl_index f = t <= 0 ? 0 : t / stride + (t % stride != 0 ? 1 : 0);
  tl_index l = (r + pad) / stride;
  *first = f;
  *last = l < outs - 1 ? l : outs - 1;
}

// The plane offset of window (i, j)'s winner, or −1 for a window without real cells.
__device__ __forceinline__ tl_index tl_pool_argmax(const float* plane, tl_index i, tl_index j,
                                                   tl_index h, tl_index w, tl_index kh,
                                                   tl_index kw, tl_index stride, tl_index pad) {
  tl_index r0, r1, c0, c1;
  tl_pool_range(i, kh, stride, pad, h, &r0, &r1);
  tl_pool_range(j, kw, stride, pad, w, &c0, &c1);
  tl_index best = -1;
  for (tl_index r = r0; r < r1; ++r) {
    for (tl_index c = c0; c < c1; ++c) {
      float v = plane[r * w + c];
      if (best < 0 || v > plane[best] || isnan(v)) best = r * w + c;
    }
  }
  return best;
}

// y[p, i, j] = the winner of window (i, j) of plane p (0 for a window without real cells).
extern "C" __global__ void tl_pool_max(float* __restrict__ y, const float* __restrict__ x,
                                       tl_index planes, tl_index h, tl_index w, tl_index ho,
                                       tl_index wo, tl_index kh, tl_index kw, tl_index stride,
                                       tl_index pad) {
  tl_index total = planes * ho * wo;
  for (tl_index e = tl_first(); e < total; e += tl_stride()) {
    tl_index p = e / (ho * wo);
    tl_index i = (e / wo) % ho;
    tl_index j = e % wo;
    const float* plane = x + p * h * w;
    tl_index k = tl_pool_argmax(plane, i, j, h, w, kh, kw, stride, pad);
    y[e] = k < 0 ? 0.0f : plane[k];
  }
}

// y[p, i, j] = Σ real cells of window (i, j) / area (area = kh·kw, as its bits' integer).
extern "C" __global__ void tl_pool_avg(float* __restrict__ y, const float* __restrict__ x,
                                       tl_index planes, tl_index h, tl_index w, tl_index ho,
                                       tl_index wo, tl_index kh, tl_index kw, tl_index stride,
                                       tl_index pad, unsigned long long area) {
  tl_index total = planes * ho * wo;
  for (tl_index e = tl_first(); e < total; e += tl_stride()) {
    tl_index p = e / (ho * wo);
    tl_index i = (e / wo) % ho;
    tl_index j = e % wo;
    const float* plane = x + p * h * w;
    tl_index r0, r1, c0, c1;
    tl_pool_range(i, kh, stride, pad, h, &r0, &r1);
    tl_pool_range(j, kw, stride, pad, w, &c0, &c1);
    double s = 0.0;
    for (tl_index r = r0; r < r1; ++r)
      for (tl_index c = c0; c < c1; ++c) s += (double)plane[r * w + c];
    y[e] = (float)(s / (double)area);
  }
}

// dx[p, r, c] = Σ dy[p, i, j] over the windows (i, j), in output order, whose winner is (r, c).
extern "C" __global__ void tl_pool_max_vjp(float* __restrict__ dx, const float* __restrict__ x,
                                           const float* __restrict__ dy, tl_index planes,
                                           tl_index h, tl_index w, tl_index ho, tl_index wo,
                                           tl_index kh, tl_index kw, tl_index stride,
                                           tl_index pad) {
  tl_index total = planes * h * w;
  for (tl_index e = tl_first(); e < total; e += tl_stride()) {
    tl_index p = e / (h * w);
    tl_index cell = e - p * h * w;
    tl_index r = cell / w;
    tl_index c = cell % w;
    const float* plane = x + p * h * w;
    const float* dplane = dy + p * ho * wo;
    tl_index i0, i1, j0, j1;
    tl_pool_covering(r, kh, stride, pad, ho, &i0, &i1);
    tl_pool_covering(c, kw, stride, pad, wo, &j0, &j1);
    double s = 0.0;
    for (tl_index i = i0; i <= i1; ++i)
      for (tl_index j = j0; j <= j1; ++j)
        if (tl_pool_argmax(plane, i, j, h, w, kh, kw, stride, pad) == cell)
          s += (double)dplane[i * wo + j];
    dx[e] = (float)s;
  }
}

// dx[p, r, c] = Σ dy[p, i, j] / area over the windows (i, j) holding (r, c), in output order.
extern "C" __global__ void tl_pool_avg_vjp(float* __restrict__ dx, const float* __restrict__ dy,
                                           tl_index planes, tl_index h, tl_index w, tl_index ho,
                                           tl_index wo, tl_index kh, tl_index kw,
                                           tl_index stride, tl_index pad,
                                           unsigned long long area) {
  tl_index total = planes * h * w;
  double a = (double)area;
  for (tl_index e = tl_first(); e < total; e += tl_stride()) {
    tl_index p = e / (h * w);
    tl_index cell = e - p * h * w;
    tl_index i0, i1, j0, j1;
    tl_pool_covering(cell / w, kh, stride, pad, ho, &i0, &i1);
    tl_pool_covering(cell % w, kw, stride, pad, wo, &j0, &j1);
    const float* dplane = dy + p * ho * wo;
    double s = 0.0;
    for (tl_index i = i0; i <= i1; ++i)
      for (tl_index j = j0; j <= j1; ++j) s += (double)dplane[i * wo + j] / a;
    dx[e] = (float)s;
  }
}
