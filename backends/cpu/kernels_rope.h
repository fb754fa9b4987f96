/*
 * Rotary position embedding, in place on q[tokens, hq, D] and k[tokens, hkv, D]. Pair i turns by
 * the angle whose cosine and sine are cache row p's [i] and [half + i]:
 *   (x0, x1) -> (x0 cos - x1 sin, x1 cos + x0 sin).
 * neox pairs (i, i + half): contiguous cosines meet contiguous halves, plain vector code; the
 *   cosines and sines of a token are copied once (by blocks of dims) into the order of lanes a
 *   pair of vectors of the heads' type is loaded in (vf_load2_f32_as), so that every head of the
 *   token goes through vf_load2 / vf_store2, which for bf16 are far cheaper than single vectors.
 * gptj pairs (2i, 2i + 1): the angles are expanded once per token (and block of dims) into
 *   ce = (c0 c0 c1 c1 ...), se = (-s0 s0 -s1 s1 ...), and then y = x * ce + swap_pairs(x) * se
 *   for every head of the token; where a pair of vectors of the heads' type holds the even
 *   elements in one and the odd ones in the other (bf16 on AVX2), full chunks need neither.
 * rope_backward turns by -angle: the sines are negated once per token and block, into a copy.
 * Threads split the tokens. Part of kernels.h.
 */

#define ROPE_BLOCK 256 /* dims (gptj) or pairs (neox) whose angles sit on the stack at once */

static inline char *rope_head(const kite_rope_args *a, int64_t tok, int64_t h, int64_t es) {
  if (h < a->hq) return cpu_row(a->q, 1, tok * a->q_stride_t + h * a->q_stride_h, es);
  return cpu_row(a->k, 1, tok * a->k_stride_t + (h - a->hq) * a->k_stride_h, es);
}

CPU_INLINE void rope_neox_chunk(kite_dtype t, char *v, const float *co, const float *so,
                                int64_t half, int64_t i, int64_t m) {
  const vf c = vf_load(KITE_DTYPE_F32, co, i, m), s = vf_load(KITE_DTYPE_F32, so, i, m);
  const vf x0 = vf_load(t, v, i, m), x1 = vf_load(t, v, half + i, m);
  vf_store(t, v, i, vf_sub(vf_mul(x0, c), vf_mul(x1, s)), m, false);
  vf_store(t, v, half + i, vf_fma(x1, c, vf_mul(x0, s)), m, false);
}

/* The same on the pair of chunks at i, with co / so in vf_load2's order of lanes. */
CPU_INLINE void rope_neox_pair(kite_dtype t, char *v, const float *co, const float *so,
                               int64_t half, int64_t i) {
  vf x0a, x0b, x1a, x1b;
  vf_load2(t, v, i, &x0a, &x0b);
  vf_load2(t, v, half + i, &x1a, &x1b);
  const vf ca = vf_load(KITE_DTYPE_F32, co, i, VL), cb = vf_load(KITE_DTYPE_F32, co, i + VL, VL);
  const vf sa = vf_load(KITE_DTYPE_F32, so, i, VL), sb = vf_load(KITE_DTYPE_F32, so, i + VL, VL);
  vf_store2(t, v, i, vf_sub(vf_mul(x0a, ca), vf_mul(x1a, sa)),
            vf_sub(vf_mul(x0b, cb), vf_mul(x1b, sb)), false);
  vf_store2(t, v, half + i, vf_fma(x1a, ca, vf_mul(x0a, sa)), vf_fma(x1b, cb, vf_mul(x0b, sb)),
            false);
}

/* n cosines (or sines) from src into dst, the pairs of chunks that CPU_ROW_PAIRS walks in
 * vf_load2(t)'s order of lanes, the single chunks as they are. */
CPU_INLINE void rope_order_chunk(const float *src, float *dst, int64_t i, int64_t m) {
  vf_store(KITE_DTYPE_F32, dst, i, vf_load(KITE_DTYPE_F32, src, i, m), m, false);
}
CPU_INLINE void rope_order_pair(kite_dtype t, const float *src, float *dst, int64_t i) {
  vf a, b;
  vf_load2_f32_as(t, src, i, &a, &b);
  vf_store(KITE_DTYPE_F32, dst, i, a, VL, false);
  vf_store(KITE_DTYPE_F32, dst, i + VL, b, VL, false);
}

CPU_INLINE void rope_gptj_chunk(kite_dtype t, char *v, const float *ce, const float *se, int64_t i,
                                int64_t m) {
  const vf x = vf_load(t, v, i, m);
  const vf turned = vf_mul(vf_swap_pairs(x), vf_load(KITE_DTYPE_F32, se, i, m));
  vf_store(t, v, i, vf_fma(x, vf_load(KITE_DTYPE_F32, ce, i, m), turned), m, false);
}

/* gptj on the pair of chunks at i when vf_load2(t) splits even and odd elements: a pair's two
 * elements meet in the same lane of a and b, and its angles are contiguous in the cache (co, so:
 * the cosines and sines of the block's first pair). */
CPU_INLINE void rope_gptj_pair(kite_dtype t, char *v, const float *co, const float *so, int64_t i) {
  vf x0, x1;
  vf_load2(t, v, i, &x0, &x1);
  const vf c = vf_load(KITE_DTYPE_F32, co, i / 2, VL), s = vf_load(KITE_DTYPE_F32, so, i / 2, VL);
  vf_store2(t, v, i, vf_sub(vf_mul(x0, c), vf_mul(x1, s)), vf_fma(x1, c, vf_mul(x0, s)), false);
}

CPU_INLINE void rope_tokens(kite_dtype t, const kite_rope_args *a, int64_t begin, int64_t end) {
  const int64_t es = cpu_esize(t), half = a->rot_dim / 2, heads = a->hq + a->hkv;
  const bool back = a->op == KITE_OP_ROPE_BACKWARD;
  const float sgn = back ? -1.0f : 1.0f;
  for (int64_t tok = begin; tok < end; tok++) {
    const float *cs = a->cos_sin + (int64_t)a->positions[tok] * a->rot_dim;
    float ce[ROPE_BLOCK], se[ROPE_BLOCK], sneg[ROPE_BLOCK];
    if (a->style == KITE_ROPE_NEOX) {
      for (int64_t i0 = 0; i0 < half; i0 += ROPE_BLOCK) {
        const int64_t n = half - i0 < ROPE_BLOCK ? half - i0 : ROPE_BLOCK;
        const float *co = cs + i0, *so = cs + half + i0;
        if (back) {
          for (int64_t i = 0; i < n; i++) sneg[i] = -so[i];
          so = sneg;
        }
        if (VF_PAIR_LANES_SPLIT(t)) {
          CPU_ROW_PAIRS(i, m, n, VL, rope_order_chunk(co, ce, i, m), rope_order_pair(t, co, ce, i));
          CPU_ROW_PAIRS(i, m, n, VL, rope_order_chunk(so, se, i, m), rope_order_pair(t, so, se, i));
          co = ce, so = se;
        }
        for (int64_t h = 0; h < heads; h++) {
          char *v = rope_head(a, tok, h, es) + i0 * es;
          CPU_ROW_PAIRS(i, m, n, VL, rope_neox_chunk(t, v, co, so, half, i, m),
                        rope_neox_pair(t, v, co, so, half, i));
        }
      }
      continue;
    }
    for (int64_t d0 = 0; d0 < a->rot_dim; d0 += ROPE_BLOCK) {
      const int64_t n = a->rot_dim - d0 < ROPE_BLOCK ? a->rot_dim - d0 : ROPE_BLOCK;
      /* split pairs use the cache as it is; only a partial tail needs the expanded angles */
      const bool split = VF_PAIR_LANES_SPLIT(t);
      for (int64_t d = split ? n - n % (2 * VL) : 0; d < n; d++) {
        const int64_t pair = (d0 + d) / 2; /* d0 is even: d and d0 + d have the same parity */
        ce[d] = cs[pair];
        se[d] = sgn * (d % 2 ? cs[half + pair] : -cs[half + pair]);
      }
      const float *co = cs + d0 / 2, *so = cs + half + d0 / 2;
      if (back && split) {
        for (int64_t i = 0; i < n / 2; i++) sneg[i] = -so[i];
        so = sneg;
      }
      for (int64_t h = 0; h < heads; h++) {
        char *v = rope_head(a, tok, h, es) + d0 * es;
        if (split)
          CPU_ROW_PAIRS(i, m, n, VL, rope_gptj_chunk(t, v, ce, se, i, m),
                        rope_gptj_pair(t, v, co, so, i));
        else
          CPU_ROW(i, m, n, VL, rope_gptj_chunk(t, v, ce, se, i, m));
      }
    }
  }
}

static void rope_task(const void *job, int64_t begin, int64_t end, int slot) {
  const kite_rope_args *a = job;
  CPU_WITH_DTYPE(a->dtype, rope_tokens, a, begin, end);
}

static const char *back_name(const kite_rope_args *a) {
  return a->op == KITE_OP_ROPE_BACKWARD ? "rope_backward" : "rope";
}

static kite_status rope_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_rope_args *a = args;
  if (a->tokens <= 0 || a->rot_dim <= 0 || a->hq + a->hkv <= 0) return KITE_OK;
  /* every position first, so that a bad call leaves q and k untouched */
  for (int64_t tok = 0; tok < a->tokens; tok++) {
    if (a->positions[tok] < 0 || a->positions[tok] >= a->max_pos)
      return kite_set_error(
          KITE_ERR_INVALID_ARG, "%s: positions[%lld] = %d is outside the cos/sin cache [0, %lld)",
          back_name(a), (long long)tok, (int)a->positions[tok], (long long)a->max_pos);
  }
  const int64_t work = a->tokens * (a->hq + a->hkv) * a->rot_dim * 2;
  cpu_parallel_run(cpu_parallel_parts(ctx, a->tokens, work), a->tokens, rope_task, a);
  return KITE_OK;
}
