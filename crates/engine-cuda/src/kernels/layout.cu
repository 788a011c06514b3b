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
  const long long* kept_dims = table;
  const long long* kept_strides = table + n_kept;
  const long long* sum_dims = table + 2 * n_kept;
  const long long* sum_strides = table + 2 * n_kept + n_sum;
  for (tl_index i = tl_first(); i < n; i += tl_stride()) {
    tl_index rem = i, base = 0;
    for (tl_index k = n_kept - 1; k >= 0; --k) {
      base += (rem % kept_dims[k]) * kept_strides[k];
      rem /= kept_dims[k];
    }
    double acc = 0.0;
    for (tl_index j = 0; j < count; ++j) {
      tl_index r = j, off = base;
      for (tl_index k = n_sum - 1; k >= 0; --k) {
        off += (r % sum_dims[k]) * sum_strides[k];
        r /= sum_dims[k];
      }
      acc += (double)dy[off];
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
