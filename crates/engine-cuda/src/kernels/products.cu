// What the products need around cuBLAS (see kernels/mod.rs for the rules): bias broadcast
// before a beta = 1 product, fixed-order sums for bias gradients, the convolution's patch
// matrix (im2col) and its adjoint as a gather (col2im).

// y[i] = b[(i / inner) % channels] for i < n: the bias of channel `(i / inner) % channels`
// (linear: inner = 1, channels = out features; conv: inner = Ho·Wo, channels = outC).
extern "C" __global__ void tl_prod_bias(float* __restrict__ y, const float* __restrict__ b,
                                        tl_index channels, tl_index inner, tl_index n) {
  for (tl_index i = tl_first(); i < n; i += tl_stride()) y[i] = b[(i / inner) % channels];
}

// Column sums by chunks of rows: for c < chunks, j < cols,
// y[c·cols + j] = Σ x[r·cols + j] over r in [c·chunk, min((c+1)·chunk, rows)), r ascending,
// accumulated in double. chunks = ceil(rows / chunk) (at least 1: rows = 0 writes zeros).
extern "C" __global__ void tl_prod_col_sums(float* __restrict__ y, const float* __restrict__ x,
                                            tl_index rows, tl_index cols, tl_index chunk,
                                            tl_index chunks) {
  const tl_index n = chunks * cols;
  for (tl_index i = tl_first(); i < n; i += tl_stride()) {
    const tl_index c = i / cols, j = i % cols;
    const tl_index r0 = c * chunk;
    const tl_index r1 = r0 + chunk < rows ? r0 + chunk : rows;
    double acc = 0.0;
    for (tl_index r = r0; r < r1; ++r) acc += (double)x[r * cols + j];
    y[i] = (float)acc;
  }
}

// Row sums: y[r] = Σ_{j < len} x[r·len + j] for r < rows, j ascending, accumulated in double.
extern "C" __global__ void tl_prod_row_sums(float* __restrict__ y, const float* __restrict__ x,
                                            tl_index rows, tl_index len) {
  for (tl_index r = tl_first(); r < rows; r += tl_stride()) {
    double acc = 0.0;
    const float* row = x + r * len;
    for (tl_index j = 0; j < len; ++j) acc += (double)row[j];
    y[r] = (float)acc;
  }
}

// The patch matrix of `images` images from image `n0` over output positions [p0, p0 + pc):
// col[(img·kk + t)·pc + q] = x[n0 + img, ci, oy·s + u − pad, ox·s + v − pad] (0 in the
// padding) with tap t = (ci·kh + u)·kw + v, kk = c·kh·kw and (oy, ox) = divmod(p0 + q, wo);
// n = images·kk·pc.
extern "C" __global__ void tl_conv_im2col(float* __restrict__ col, const float* __restrict__ x,
                                          tl_index c, tl_index h, tl_index w, tl_index kh,
                                          tl_index kw, tl_index s, tl_index pad, tl_index wo,
                                          tl_index n0, tl_index p0, tl_index pc, tl_index n) {
  const tl_index kk = c * kh * kw;
  for (tl_index i = tl_first(); i < n; i += tl_stride()) {
    const tl_index q = i % pc;
    const tl_index t = (i / pc) % kk;
    const tl_index img = i / (pc * kk);
    const tl_index p = p0 + q;
    const tl_index oy = p / wo, ox = p % wo;
    const tl_index v = t % kw, u = (t / kw) % kh, ci = t / (kw * kh);
    const tl_index iy = oy * s + u - pad, ix = ox * s + v - pad;
    float value = 0.0f;
    if (iy >= 0 && iy < h && ix >= 0 && ix < w)
      value = x[(((n0 + img) * c + ci) * h + iy) * w + ix];
    col[i] = value;
  }
}

// The adjoint of tl_conv_im2col, as a gather: for i < n = images·c·h·w, i = ((img·c + ci)·h
// + iy)·w + ix, dx[n0·c·h·w + i] += Σ dcol[(img·kk + (ci·kh + u)·kw + v)·pc + p − p0] over the
// taps (u, v), u then v ascending, whose output position p = oy·wo + ox (oy·s + u − pad = iy,
// ox·s + v − pad = ix, oy < ho, ox < wo) lies in [p0, p0 + pc). Each input cell is written by
// one thread; chunks of positions are added in order by successive launches.
extern "C" __global__ void tl_conv_col2im(float* __restrict__ dx,
                                          const float* __restrict__ dcol,
                                          tl_index c, tl_index h, tl_index w, tl_index kh,
                                          tl_index kw, tl_index s, tl_index pad, tl_index ho,
                                          tl_index wo, tl_index n0, tl_index p0, tl_index pc,
                                          tl_index n) {
  const tl_index kk = c * kh * kw;
  for (tl_index i = tl_first(); i < n; i += tl_stride()) {
    const tl_index ix = i % w;
    const tl_index iy = (i / w) % h;
    const tl_index ci = (i / (w * h)) % c;
    const tl_index img = i / (w * h * c);
    const float* base = dcol + img * kk * pc;
    float acc = 0.0f;
    for (tl_index u = 0; u < kh; ++u) {
      const tl_index ty = iy + pad - u;
      if (ty < 0) break;
      if (ty % s != 0 || ty / s >= ho) continue;
      const tl_index oy = ty / s;
      for (tl_index v = 0; v < kw; ++v) {
        const tl_index tx = ix + pad - v;
        if (tx < 0) break;
        if (tx % s != 0 || tx / s >= wo) continue;
        const tl_index p = oy * wo + tx / s;
        if (p < p0 || p >= p0 + pc) continue;
        acc += base[((ci * kh + u) * kw + v) * pc + (p - p0)];
      }
    }
    const tl_index at = n0 * c * h * w + i;
    dx[at] = dx[at] + acc;
  }
}

// Column sums added on: y[j] = y[j] + Σ_{r < rows} x[r·cols + j] for j < cols, r ascending,
// accumulated in double from y[j] (partial weight gradients of a group of images, in order).
extern "C" __global__ void tl_prod_add_col_sums(float* __restrict__ y,
                                                const float* __restrict__ x, tl_index rows,
                                                tl_index cols) {
  for (tl_index j = tl_first(); j < cols; j += tl_stride()) {
    double acc = (double)y[j];
    for (tl_index r = 0; r < rows; ++r) acc += (double)x[r * cols + j];
    y[j] = (float)acc;
  }
}
