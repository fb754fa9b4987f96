/*
 * argmax and sample, one work-group (KITE_GROUP items) per row. The row's parameters are
 * decoded by the rules of kite/sampling.h (kite_sample_row_get, restated here over device
 * buffers); each token's draw is word i % 4 of Philox-4x32-10 (kite/philox.h, compiled into this
 * program from the installed header) at counter (i / 4, row id, step), key seed.
 * top-k and top-p thresholds are found by bisection over the 32-bit order-preserving keys of the
 * logits (no sort): top-k's is the largest key with at least k logits at or above it, top-p's
 * the smallest key whose mass strictly above it is < top_p of the kept mass.
 */
#define SAMPLE_GROUP KITE_GROUP /* the host's row group, a build option */

/* an order-preserving key of a float (NaN already read as -inf) */
inline uint fkey(float f) {
  const uint u = as_uint(f);
  return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

inline float row_val(global const uchar *x, long i, int dt) {
  const float v = ld(x, i, dt);
  return v != v ? -INFINITY : v;
}

/* the best (value, index) of the group: larger value, then lower index */
inline void group_best(float *v, long *i, local float *sv, local long *si) {
  const uint lid = get_local_id(0), n = get_local_size(0);
  sv[lid] = *v;
  si[lid] = *i;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (uint s = n / 2; s > 0; s >>= 1) {
    if (lid < s) {
      const float ov = sv[lid + s];
      const long oi = si[lid + s];
      if (ov > sv[lid] || (ov == sv[lid] && oi < si[lid])) {
        sv[lid] = ov;
        si[lid] = oi;
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  *v = sv[0];
  *i = si[0];
  barrier(CLK_LOCAL_MEM_FENCE);
}

kernel void sample(int dt, int is_argmax, long vocab, global const uchar *x, ulong xo, long xs,
                   global const uchar *temp, ulong tpo, global const uchar *topk, ulong tko,
                   global const uchar *topp, ulong tpp, global const uchar *minp, ulong mpo,
                   global const uchar *seeds, ulong sdo, global const uchar *steps, ulong sto,
                   ulong seed, ulong step, global uchar *tokens, ulong too) {
  local float sv[SAMPLE_GROUP];
  local long si[SAMPLE_GROUP];
  const long r = get_group_id(0), lid = get_local_id(0), n = get_local_size(0);
  global const uchar *row = AT(x, xo);
  const long x0 = r * xs;

  /* the largest logit, lowest index first (a row of -inf gives 0) */
  float m = -INFINITY;
  long best = vocab;
  for (long i = lid; i < vocab; i += n) {
    const float v = row_val(row, x0 + i, dt);
    if (v > m || (v == m && i < best)) m = v, best = i;
  }
  group_best(&m, &best, sv, si);
  if (best >= vocab) best = 0;

  /* the row's parameters (kite_sample_row_get's rules) */
  float t = temp ? ((global const float *)AT(temp, tpo))[r] : 1.0f;
  if (!(t >= 0.0f) || t - t != 0.0f) t = 0.0f;
  /* greedy (below KITE_SAMPLE_GREEDY_BELOW), or a row of -inf / holding +inf: the largest.
   * No early return: every item reaches every barrier (PoCL hangs on a group that returns
   * before one, even all together), so such rows skip the filters and the race instead. */
  const int greedy = is_argmax || t < 1e-5f || isinf(m);
  long k = topk && !greedy ? ((global const int *)AT(topk, tko))[r] : 0;
  if (!(k > 0 && k < vocab)) k = 0;
  float tp = topp && !greedy ? ((global const float *)AT(topp, tpp))[r] : 1.0f;
  tp = tp != tp || tp >= 1.0f ? 1.0f : tp <= 0.0f ? 0.0f : tp;
  float mp = minp ? ((global const float *)AT(minp, mpo))[r] : 0.0f;
  mp = mp > 0.0f ? mp : 0.0f; /* NaN too */
  const ulong sd = seeds ? (ulong)((global const long *)AT(seeds, sdo))[r] : seed;
  const ulong sp = steps ? (ulong)((global const long *)AT(steps, sto))[r] : step;
  const uint prow = seeds ? 0xffffffffu : (uint)r; /* KITE_SAMPLE_SEEDED_ROW */

  /* top-k: the largest key u with count(key >= u) >= k */
  uint lo_key = 0;
  if (k > 0) {
    ulong lo = 0, hi = 0xffffffffu;
    while (lo < hi) {
      const ulong mid = lo + (hi - lo + 1) / 2;
      float cnt = 0.0f;
      for (long i = lid; i < vocab; i += n) cnt += fkey(row_val(row, x0 + i, dt)) >= mid;
      if (group_sum(cnt, sv) >= (float)k)
        lo = mid;
      else
        hi = mid - 1;
    }
    lo_key = (uint)lo;
  }
  /* top-p over top-k's survivors: the smallest key u whose mass strictly above is < tp * z */
  if (tp < 1.0f) {
    float z = 0.0f;
    for (long i = lid; i < vocab; i += n) {
      const float v = row_val(row, x0 + i, dt);
      if (fkey(v) >= lo_key) z += exp((v - m) / t);
    }
    z = group_sum(z, sv);
    ulong lo = lo_key, hi = fkey(m);
    if (tp > 0.0f) {
      while (lo < hi) {
        const ulong mid = lo + (hi - lo) / 2;
        float a = 0.0f;
        for (long i = lid; i < vocab; i += n) {
          const float v = row_val(row, x0 + i, dt);
          const uint kv = fkey(v);
          if (kv >= lo_key && kv > mid) a += exp((v - m) / t);
        }
        if (group_sum(a, sv) < tp * z)
          hi = mid;
        else
          lo = mid + 1;
      }
    }
    lo_key = (uint)(tp > 0.0f ? lo : hi);
  }
  /* the exponential race over the kept tokens */
  float bs = -INFINITY;
  long bi = vocab;
  for (long i = greedy ? vocab : lid; i < vocab; i += n) {
    const float v = row_val(row, x0 + i, dt);
    if (fkey(v) < lo_key) continue;
    const float zi = (v - m) / t;
    if (mp > 0.0f && !(exp(zi) >= mp)) continue;
    const float u = kite_philox_uniform(
        kite_philox4x32_10((uint)(i >> 2), prow, (uint)sp, (uint)(sp >> 32), (uint)sd,
                           (uint)(sd >> 32))
            .v[i & 3]);
    const float s = zi - log(-log(u));
    if (s > bs || (s == bs && i < bi)) bs = s, bi = i;
  }
  group_best(&bs, &bi, sv, si);
  if (lid == 0) ((global int *)AT(tokens, too))[r] = (int)(!greedy && bi < vocab ? bi : best);
}
