/*
 * Elementwise and copy kernels: activations, gated activations, embedding, store_kv, rope, and
 * the f32 <-> dtype conversions around CLBlast's Sgemm. 2-D ranges: dim 0 along the row, dim 1
 * over rows (the host rounds dim 0 up; items past the row return).
 */

/* act codes: the host passes the kite_op of the activation's gate (the ACT_* below). */
#define ACT_SILU 0
#define ACT_GELU 1
#define ACT_GELU_TANH 2
#define ACT_GELU_QUICK 3
#define ACT_RELU 4

inline float act_f(int act, float x) {
  if (act == ACT_RELU) return x > 0.0f ? x : (x != x ? x : 0.0f);
  /* the smooth ones take their limits at +-inf: act(+inf) = +inf, act(-inf) = -0 */
  if (isinf(x)) return x > 0.0f ? x : -0.0f;
  if (act == ACT_SILU) return x / (1.0f + exp(-x));
  if (act == ACT_GELU) return 0.5f * x * (1.0f + erf(x * 0.70710678118654752f));
  if (act == ACT_GELU_TANH) {
    const float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanh(u));
  }
  return x / (1.0f + exp(-1.702f * x)); /* gelu_quick */
}

kernel void act(int act, int dt, long rows, long cols, global const uchar *x, ulong xo, long xs,
                global uchar *y, ulong yo, long ys) {
  const long c = get_global_id(0), r = get_global_id(1);
  if (c >= cols || r >= rows) return;
  st(AT(y, yo), r * ys + c, dt, act_f(act, ld(AT(x, xo), r * xs + c, dt)));
}

/* y[r, c] = act(min(gate, limit)) * clamp(up, -limit, limit); limit <= 0 (or NaN): no clamp */
kernel void gated(int act, int dt, long rows, long cols, global const uchar *x, ulong xo, long xs,
                  global uchar *y, ulong yo, long ys, float limit) {
  const long c = get_global_id(0), r = get_global_id(1);
  if (c >= cols || r >= rows) return;
  float g = ld(AT(x, xo), r * xs + c, dt), u = ld(AT(x, xo), r * xs + cols + c, dt);
  if (limit > 0.0f) {
    if (g > limit) g = limit;
    if (u > limit) u = limit;
    if (u < -limit) u = -limit;
  }
  st(AT(y, yo), r * ys + c, dt, act_f(act, g) * u);
}

/* y[t, :] = table[ids[t], :], zeros for an id outside [0, vocab) */
kernel void embedding(int dt, long tokens, long hidden, long vocab, global const uchar *ids,
                      ulong io, global const uchar *table, ulong to, long ts, global uchar *y,
                      ulong yo, long ys) {
  const long c = get_global_id(0), t = get_global_id(1);
  if (c >= hidden || t >= tokens) return;
  const int id = ((global const int *)AT(ids, io))[t];
  if (id >= 0 && id < vocab)
    copy_elem(AT(y, yo), t * ys + c, AT(table, to), (long)id * ts + c, dt);
  else
    st(AT(y, yo), t * ys + c, dt, 0.0f);
}

/* k and v of token t, head h into the caches [blocks, hkv, bs, d] at slots[t]; a negative slot
 * or one past the cache skips the token. dim 0: d, dim 1: t * hkv + h. */
kernel void store_kv(int dt, long tokens, long hkv, long hd, global const uchar *k, ulong ko,
                     long kst, long ksh, global const uchar *v, ulong vo, long vst, long vsh,
                     global uchar *kc, ulong kco, global uchar *vc, ulong vco, long blocks,
                     long bs, global const uchar *slots, ulong so) {
  const long d = get_global_id(0), th = get_global_id(1);
  if (d >= hd || th >= tokens * hkv) return;
  const long t = th / hkv, h = th % hkv;
  const long slot = ((global const int *)AT(slots, so))[t];
  if (slot < 0 || slot >= blocks * bs) return;
  const long dst = (((slot / bs) * hkv + h) * bs + slot % bs) * hd + d;
  copy_elem(AT(kc, kco), dst, AT(k, ko), t * kst + h * ksh + d, dt);
  copy_elem(AT(vc, vco), dst, AT(v, vo), t * vst + h * vsh + d, dt);
}

/* One rotated pair per item of q (heads [0, hq)) and k (heads [hq, hq + hkv)): dim 0 the pair
 * i < rot / 2, dim 1 t * (hq + hkv) + head. sign -1 rotates by -theta (rope_backward). A
 * position outside [0, max_pos) leaves the token unrotated (never a read outside cos_sin). */
kernel void rope(int dt, long tokens, long hq, long hkv, long rot, long max_pos,
                 global uchar *q, ulong qo, long qst, long qsh, global uchar *k, ulong ko, long kst,
                 long ksh, global const uchar *pos, ulong po, global const uchar *cs, ulong cso,
                 int gptj, float sign) {
  const long i = get_global_id(0), th = get_global_id(1), heads = hq + hkv;
  const long half_rot = rot / 2;
  if (i >= half_rot || th >= tokens * heads) return;
  const long t = th / heads, h = th % heads;
  const long p = ((global const int *)AT(pos, po))[t];
  if (p < 0 || p >= max_pos) return;
  global uchar *base = h < hq ? AT(q, qo) : AT(k, ko);
  const long row = h < hq ? t * qst + h * qsh : t * kst + (h - hq) * ksh;
  const long a = row + (gptj ? 2 * i : i), b = row + (gptj ? 2 * i + 1 : i + half_rot);
  global const float *c = (global const float *)AT(cs, cso) + p * rot;
  const float co = c[i], si = sign * c[half_rot + i];
  const float x0 = ld(base, a, dt), x1 = ld(base, b, dt);
  st(base, a, dt, x0 * co - x1 * si);
  st(base, b, dt, x1 * co + x0 * si);
}

/* dst[r, c] (f32, compact [rows, cols]) = src[r, c] of dtype dt with row stride ss */
kernel void to_f32(int dt, long rows, long cols, global const uchar *src, ulong so, long ss,
                   global uchar *dst, ulong dso) {
  const long c = get_global_id(0), r = get_global_id(1);
  if (c >= cols || r >= rows) return;
  ((global float *)AT(dst, dso))[r * cols + c] = ld(AT(src, so), r * ss + c, dt);
}

/* y[r, c] (dtype dt, row stride ys) = v + bias[c] (NULL: none), rounded once, where v is
 * src[r, c] (f32 compact) when src is set, else y's own value (from_y) or 0 (an empty product) */
kernel void bias_store(int dt, long rows, long cols, global const uchar *src, ulong so,
                       global const uchar *bias, ulong bo, global uchar *y, ulong yo, long ys,
                       int from_y) {
  const long c = get_global_id(0), r = get_global_id(1);
  if (c >= cols || r >= rows) return;
  float v = src    ? ((global const float *)AT(src, so))[r * cols + c]
            : from_y ? ld(AT(y, yo), r * ys + c, dt)
                     : 0.0f;
  if (bias) v += ld(AT(bias, bo), c, dt);
  st(AT(y, yo), r * ys + c, dt, v);
}
