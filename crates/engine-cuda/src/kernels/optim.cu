// Optimizer steps: one launch updates one parameter and its state in place, from its gradient
// (`torchlean_runtime::UpdateRule`; the scalars arrive already computed and rounded to float).
// Each loop is the host's (`UpdateRule::apply`) operation by operation: `fmaf` where ATen fuses
// (`add` with `alpha`, `addcmul`, `lerp`), `self + (value * t1) / t2` for `addcdiv`, and no other
// contraction (the modules are compiled with --fmad=false), so both agree bit for bit.
//
// A state buffer a rule does not use (Adam's `vmax` without amsgrad, RMSprop's `ga` and `buf`)
// is given the gradient's address and never read or written.

// torch.lerp as ATen computes it: weight·(end - start) + start for |weight| < 0.5, else
// (weight - 1)·(end - start) + end, one rounding each.
__device__ __forceinline__ float tl_lerp(float start, float end, float weight) {
  bool from_start = fabsf(weight) < 0.5f;
  float coeff = from_start ? weight : weight - 1.0f;
  return fmaf(coeff, end - start, from_start ? start : end);
}

// torch.maximum: NaN on either side is NaN.
__device__ __forceinline__ float tl_maximum(float a, float b) {
  if (a != a || b != b) return TL_NAN;
  return a > b ? a : b;
}

// SGD without momentum: g += wd·p (when has_wd); p += -lr·g.
extern "C" __global__ void tl_opt_sgd(float* __restrict__ p, const float* __restrict__ g,
                                      float neg_lr, float wd, tl_index has_wd, tl_index n) {
  for (tl_index i = tl_first(); i < n; i += tl_stride()) {
    float pi = p[i];
    float gi = has_wd ? fmaf(wd, pi, g[i]) : g[i];
    p[i] = fmaf(neg_lr, gi, pi);
  }
}

// SGD with momentum: the first step's buffer is the gradient, later ones
// buf·momentum + (1 - dampening)·g; Nesterov steps along g + momentum·buf.
extern "C" __global__ void tl_opt_sgd_momentum(float* __restrict__ p, float* __restrict__ buf,
                                               const float* __restrict__ g, float neg_lr,
                                               float wd, tl_index has_wd, float momentum,
                                               float one_minus_dampening, tl_index first,
                                               tl_index nesterov, tl_index n) {
  for (tl_index i = tl_first(); i < n; i += tl_stride()) {
    float pi = p[i];
    float gi = has_wd ? fmaf(wd, pi, g[i]) : g[i];
    float bi = first ? gi : fmaf(one_minus_dampening, gi, buf[i] * momentum);
    buf[i] = bi;
    float d = nesterov ? fmaf(momentum, bi, gi) : bi;
    p[i] = fmaf(neg_lr, d, pi);
  }
}

// Adam and AdamW. decay_mode 0: none; 1: g += wd·p (Adam); 2: p *= wd (AdamW's 1 - lr·wd).
extern "C" __global__ void tl_opt_adam(float* __restrict__ p, float* __restrict__ m,
                                       float* __restrict__ v, float* vmax, const float* g,
                                       tl_index decay_mode, float wd, float one_minus_beta1,
                                       float beta2, float one_minus_beta2,
                                       float bias_correction2_sqrt, float eps,
                                       float neg_step_size, tl_index amsgrad, tl_index n) {
  for (tl_index i = tl_first(); i < n; i += tl_stride()) {
    float pi = p[i];
    float gi = g[i];
    if (decay_mode == 1) {
      gi = fmaf(wd, pi, gi);
    } else if (decay_mode == 2) {
      pi = pi * wd;
    }
    float mi = tl_lerp(m[i], gi, one_minus_beta1);
    float vi = fmaf(one_minus_beta2 * gi, gi, v[i] * beta2);
    m[i] = mi;
    v[i] = vi;
    float second = vi;
    if (amsgrad) {
      second = tl_maximum(vmax[i], vi);
      vmax[i] = second;
    }
    float denom = sqrtf(second) / bias_correction2_sqrt + eps;
    p[i] = pi + neg_step_size * mi / denom;
  }
}

// RMSprop: square_avg, then grad_avg when centered, then the momentum buffer.
extern "C" __global__ void tl_opt_rmsprop(float* __restrict__ p, float* __restrict__ sq,
                                          float* ga, float* buf, const float* g, float wd,
                                          tl_index has_wd, float alpha, float one_minus_alpha,
                                          float eps, float momentum, tl_index has_momentum,
                                          tl_index centered, float lr, tl_index n) {
  float neg_lr = -lr;
  for (tl_index i = tl_first(); i < n; i += tl_stride()) {
    float pi = p[i];
    float gi = has_wd ? fmaf(wd, pi, g[i]) : g[i];
    float si = fmaf(one_minus_alpha * gi, gi, sq[i] * alpha);
    sq[i] = si;
    float avg;
    if (centered) {
      float a = tl_lerp(ga[i], gi, one_minus_alpha);
      ga[i] = a;
      avg = sqrtf(fmaf(-a, a, si));
    } else {
      avg = sqrtf(si);
    }
    avg = avg + eps;
    if (has_momentum) {
      float bi = buf[i] * momentum + gi / avg;
      buf[i] = bi;
      p[i] = fmaf(neg_lr, bi, pi);
    } else {
      p[i] = pi + neg_lr * gi / avg;
    }
  }
}

// Adagrad: sum += g·g; p += -clr·g / (sqrt(sum) + eps).
extern "C" __global__ void tl_opt_adagrad(float* __restrict__ p, float* __restrict__ sum,
                                          const float* __restrict__ g, float wd,
                                          tl_index has_wd, float eps, float neg_clr,
                                          tl_index n) {
  for (tl_index i = tl_first(); i < n; i += tl_stride()) {
    float pi = p[i];
    float gi = has_wd ? fmaf(wd, pi, g[i]) : g[i];
    float si = fmaf(gi, gi, sum[i]);
    sum[i] = si;
    float std_ = sqrtf(si) + eps;
    p[i] = pi + neg_clr * gi / std_;
  }
}
