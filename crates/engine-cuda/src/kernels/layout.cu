// The layout kernels (see kernels/mod.rs for the rules).

// y[i] = x[offset + sum_k idx_k(i) * strides[k]], where idx(i) is the row-major multi-index of
// i over dims. `table` = dims[0..rank] then strides[0..rank] (the host drops size-1 axes and
// merges contiguous ones first). Broadcast (stride 0 on broadcast axes), permute, slice and
// concat's VJP are all this gather.
extern "C" __global__ void tl_layout_gather(float* __restrict__ y, const float* __restrict__ x,
                                            const long long* __restrict__ table, tl_index rank,
                                            tl_index offset, tl_index n) {
  const long long* dims = table;
  const long long* strides = table + rank;
  for (tl_index i = tl_first(); i < n; i += tl_stride()) {
    tl_index rem = i, off = offset;
    for (tl_index k = rank - 1; k >= 0; --k) {
      off += (rem % dims[k]) * strides[k];
      rem /= dims[k];
    }
    y[i] = x[off];
  }
}

// embedding: y[p, k] = table[ids[p], k] (ids validated on the host), one thread per element.
extern "C" __global__ void tl_layout_gather_rows(float* __restrict__ y,
                                                 const float* __restrict__ table,
                                                 const long long* __restrict__ ids, tl_index d,
                                                 tl_index n) {
  for (tl_index i = tl_first(); i < n; i += tl_stride()) {
    y[i] = table[ids[i / d] * d + i % d];
  }
}

// Its adjoint: dt[v, k] = the sum of dy[p, k] over the positions p with ids[p] == v, in position
// order and in float as the host adds (0 + first + ...), one thread per table element.
extern "C" __global__ void tl_layout_gather_rows_vjp(float* __restrict__ dt,
                                                     const float* __restrict__ dy,
                                                     const long long* __restrict__ ids,
                                                     tl_index positions, tl_index d, tl_index n) {
  for (tl_index i = tl_first(); i < n; i += tl_stride()) {
    tl_index v = i / d, k = i % d;
    float acc = 0.0f;
    for (tl_index p = 0; p < positions; ++p) {
      if (ids[p] == v) acc += dy[p * d + k];
    }
    dt[i] = acc;
  }
}

// The sum of dy over targets j0..j1 (row-major order of the summed axes: `sum_dims`,
// `sum_strides`, n_sum of them) of the source element whose first target is `base`, in double.
// The innermost summed axis is walked without index arithmetic.
__device__ double tl_sum_targets(const float* __restrict__ dy, tl_index base,
                                 const long long* __restrict__ sum_dims,
                                 const long long* __restrict__ sum_strides, tl_index n_sum,
                                 tl_index j0, tl_index j1) {
  double acc = 0.0;
  if (j0 >= j1) return acc;  // also: every extent is positive below
  tl_index last = n_sum > 0 ? sum_dims[n_sum - 1] : 1;
  tl_index last_stride = n_sum > 0 ? sum_strides[n_sum - 1] : 0;
  tl_index q = j0 / last, t = j0 - q * last;
  for (tl_index j = j0; j < j1; ++q, t = 0) {
    tl_index r = q, off = base;
    for (tl_index k = n_sum - 2; k >= 0; --k) {
      off += (r % sum_dims[k]) * sum_strides[k];
      r /= sum_dims[k];
    }
    tl_index run = last - t < j1 - j ? last - t : j1 - j;
    off += t * last_stride;
    for (tl_index u = 0; u < run; ++u) acc += (double)dy[off + u * last_stride];
    j += run;
  }
  return acc;
}

// The first target of source element i: its row-major multi-index over the kept axes
// (`kept_dims`, `kept_strides`: n_kept of them) at the target strides.
__device__ tl_index tl_first_target(tl_index i, const long long* __restrict__ kept_dims,
                                    const long long* __restrict__ kept_strides,
                                    tl_index n_kept) {
  tl_index base = 0;
  for (tl_index k = n_kept - 1; k >= 0; --k) {
    base += (i % kept_dims[k]) * kept_strides[k];
    i /= kept_dims[k];
  }
  return base;
}

// Broadcast's VJP: dx[i] = the sum of dy over the target elements that read source element i,
// in row-major target order, accumulated in double (one thread per source element, a fixed
// order: deterministic). `table` = kept dims, kept target strides (n_kept each: the target axes
// the source has, whose row-major multi-index is i), then summed dims, summed target strides
// (n_sum each: the axes broadcast over; `count` = their product).
extern "C" __global__ void tl_layout_broadcast_vjp(float* __restrict__ dx,
                                                   const float* __restrict__ dy,
                                                   const long long* __restrict__ table,
                                                   tl_index n_kept, tl_index n_sum,
                                                   tl_index count, tl_index n) {
  const long long* sum_dims = table + 2 * n_kept;
  for (tl_index i = tl_first(); i < n; i += tl_stride()) {
    tl_index base = tl_first_target(i, table, table + n_kept, n_kept);
    dx[i] = (float)tl_sum_targets(dy, base, sum_dims, sum_dims + n_sum, n_sum, 0, count);
  }
}

// The first pass of a long broadcast VJP (few sources, many targets each): item w = c * n + i
// sums chunk c (targets c * len .. (c + 1) * len, in order) of source i, and stores the double
// sum as two floats, hi = (float)s and lo = (float)(s - hi), at partials[2 w], partials[2 w + 1].
// The table is tl_layout_broadcast_vjp's.
extern "C" __global__ void tl_layout_broadcast_vjp_partial(float* __restrict__ partials,
                                                           const float* __restrict__ dy,
                                                           const long long* __restrict__ table,
                                                           tl_index n_kept, tl_index n_sum,
                                                           tl_index count, tl_index len,
                                                           tl_index n, tl_index items) {
  const long long* sum_dims = table + 2 * n_kept;
  for (tl_index w = tl_first(); w < items; w += tl_stride()) {
    tl_index c = w / n, i = w - c * n;
    tl_index base = tl_first_target(i, table, table + n_kept, n_kept);
    tl_index j0 = c * len, j1 = j0 + len < count ? j0 + len : count;
    double s = tl_sum_targets(dy, base, sum_dims, sum_dims + n_sum, n_sum, j0, j1);
    float hi = (float)s;
    partials[2 * w] = hi;
    partials[2 * w + 1] = (float)(s - (double)hi);
  }
}

// The second pass: dx[i] = the sum over chunks c = 0, 1, ... in order of partial (c, i), in
// double.
extern "C" __global__ void tl_layout_sum_partials(float* __restrict__ dx,
                                                  const float* __restrict__ partials,
                                                  tl_index chunks, tl_index n) {
  for (tl_index i = tl_first(); i < n; i += tl_stride()) {
    double acc = 0.0;
    for (tl_index c = 0; c < chunks; ++c) {
      tl_index w = c * n + i;
      acc += (double)partials[2 * w] + (double)partials[2 * w + 1];
    }
    dx[i] = (float)acc;
  }
}

// Concat, one launch per operand: x is rows of `piece` elements; row r goes to
// y[r * row + at ..][..piece] (each element of y is written by exactly one launch and thread).
extern "C" __global__ void tl_layout_place(float* __restrict__ y, const float* __restrict__ x,
                                           tl_index piece, tl_index row, tl_index at,
                                           tl_index n) {
  for (tl_index i = tl_first(); i < n; i += tl_stride()) {
    tl_index r = i / piece, c = i - r * piece;
    y[r * row + at + c] = x[i];
  }
}

// Slice's VJP: dx is rows of `row` elements; columns lo..lo + piece of row r are row r of dy
// (rows of `piece`), the rest zeros.
extern "C" __global__ void tl_layout_pad(float* __restrict__ dx, const float* __restrict__ dy,
                                         tl_index row, tl_index lo, tl_index piece, tl_index n) {
  for (tl_index i = tl_first(); i < n; i += tl_stride()) {
    tl_index r = i / row, c = i - r * row - lo;
    dx[i] = (c >= 0 && c < piece) ? dy[r * piece + c] : 0.0f;
  }
}
