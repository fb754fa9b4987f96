/*
 * Row kernels, one work-group per row (a power-of-two group, items striding over the row):
 * rms_norm, layer_norm and their fused residual forms, softmax. Statistics in f32.
 */

/* norm: is_layer 0 = rms (y = x * rstd * (offset + w)), 1 = layer (y = (x - mean) * rstd * w +
 * b). res NULL for the plain norms; pos 0 = PRE (residual <- round(x + res), norm of that
 * rounded sum), 1 = POST (norm of the f32 sum, residual <- y). y may alias x. */
kernel void norm(int dt, int is_layer, long cols, global const uchar *x, ulong xo, long xs,
                 global uchar *res, ulong ro, long rs, global const uchar *w, ulong wo,
                 global const uchar *b, ulong bo, global uchar *y, ulong yo, long ys, float eps,
                 float offset, int pos, local float *scratch) {
  const long r = get_group_id(0), lid = get_local_id(0), n = get_local_size(0);
  global const uchar *xr = AT(x, xo);
  global uchar *rr = res ? AT(res, ro) : 0;
  const long x0 = r * xs, r0 = r * rs, y0 = r * ys;
  /* pass 1: the sum the norm sees (PRE: stored, rounded, then read back) */
  float s1 = 0.0f;
  for (long i = lid; i < cols; i += n) {
    float v = ld(xr, x0 + i, dt);
    if (rr) {
      v += ld(rr, r0 + i, dt);
      if (pos == 0) {
        st(rr, r0 + i, dt, v);
        v = ld(rr, r0 + i, dt);
      }
    }
    s1 += is_layer ? v : v * v;
  }
  s1 = group_sum(s1, scratch);
  float mean = 0.0f, rstd;
  if (is_layer) {
    mean = s1 / (float)cols;
    float s2 = 0.0f;
    for (long i = lid; i < cols; i += n) {
      float v = ld(xr, x0 + i, dt);
      if (rr) v = pos == 0 ? ld(rr, r0 + i, dt) : v + ld(rr, r0 + i, dt);
      s2 += (v - mean) * (v - mean);
    }
    s2 = group_sum(s2, scratch);
    rstd = rsqrt(s2 / (float)cols + eps);
  } else {
    rstd = rsqrt(s1 / (float)cols + eps);
  }
  for (long i = lid; i < cols; i += n) {
    float v;
    if (rr && pos == 0)
      v = ld(rr, r0 + i, dt);
    else
      v = ld(xr, x0 + i, dt) + (rr ? ld(rr, r0 + i, dt) : 0.0f);
    float o;
    if (is_layer)
      o = (v - mean) * rstd * (w ? ld(AT(w, wo), i, dt) : 1.0f) + (b ? ld(AT(b, bo), i, dt) : 0.0f);
    else
      o = v * rstd * (w ? offset + ld(AT(w, wo), i, dt) : 1.0f);
    st(AT(y, yo), y0 + i, dt, o);
    if (rr && pos == 1) st(rr, r0 + i, dt, o);
  }
}

/* y[r, :] = softmax(scale * x[r, :]); y may alias x */
kernel void softmax(int dt, long cols, global const uchar *x, ulong xo, long xs, global uchar *y,
                    ulong yo, long ys, float scale, local float *scratch) {
  const long r = get_group_id(0), lid = get_local_id(0), n = get_local_size(0);
  global const uchar *xr = AT(x, xo);
  float m = -INFINITY;
  for (long i = lid; i < cols; i += n) m = fmax(m, scale * ld(xr, r * xs + i, dt));
  m = group_max(m, scratch);
  float s = 0.0f;
  for (long i = lid; i < cols; i += n) s += exp(scale * ld(xr, r * xs + i, dt) - m);
  s = group_sum(s, scratch);
  const float inv = 1.0f / s;
  for (long i = lid; i < cols; i += n)
    st(AT(y, yo), r * ys + i, dt, exp(scale * ld(xr, r * xs + i, dt) - m) * inv);
}
