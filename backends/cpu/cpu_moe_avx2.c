/*
 * fused_moe and fused_moe_ex on AVX2, one grouped kernel (fused_moe is fused_moe_ex's plain case:
 * no biases, split layout, no clamp, weights as [outputs, inputs]): the (token, slot) pairs are
 * grouped by expert and each expert's two GEMMs run over its gathered rows (the packing reads
 * rows through an index list), not one GEMV per token.
 */
#include "cpu_gemm_avx2.h"

/* ---- the grouped MoE ---------------------------------------------------------------------------
 * Per block of tokens, the pairs (t, j) with a valid id are bucketed by expert (counting sort,
 * token order kept) and pos[t k + j] remembers where each went. Per expert with rows:
 *   h = x[rows] w13[e]^T ([n_e, 2I] f32), a = act(gate + b13, up + b13) rounded to the dtype,
 *   o[rows] = a w2[e]^T ([n_e, H] f32, the expert's slice of o [pairs, H]);
 * then y[t] = sum over j of weights[t, j] (o[pos] + b2[e]), the slots in order (the same sums
 * whatever the grouping or the threads), rounded once. o holds every pair of a block of tokens:
 * blocks of MOE_BLOCK_FLOATS / (k H) tokens bound it (32 MB) on long prompts. */
#define MOE_BLOCK_FLOATS ((int64_t)1 << 23)

typedef struct moe_job {
  const kite_moe_args *a;
  const void *b13, *b2;
  const kite_moe_opts *o;
  int64_t t0, e;   /* the block's first token; the expert of act_task */
  const float *h;  /* act_task: [rows, 2I] */
  float *act;      /* act_task: [rows, I] */
  const float *po; /* combine_task: o [pairs, H] */
  const int32_t *pos;
} moe_job;

/* 8 gate and 8 up values of an interleaved row (g0 u0 g1 u1 ...) from its 16 floats at p: the
 * even / odd split vf_load2_f32_as makes of bf16 pairs. */
static inline void deinterleave(const float *p, vf *g, vf *u) {
  vf_load2_f32_as(KITE_DTYPE_BF16, p, 0, g, u);
}

/* Rows [begin, end) of h -> act: the biases, the clamp, the activation, rounded to the dtype. */
static void act_task(const void *job, int64_t begin, int64_t end, int part) {
  const moe_job *j = job;
  const kite_moe_args *a = j->a;
  const kite_moe_opts *o = j->o;
  const kite_dtype t = a->dtype;
  const int64_t I = a->inter;
  const bool il = o->layout == KITE_MOE_INTERLEAVED, clamp = o->limit > 0;
  const char *b = j->b13 ? (const char *)j->b13 + j->e * 2 * I * esize(t) : NULL;
  const vf lim = _mm256_set1_ps(o->limit), nlim = _mm256_set1_ps(-o->limit);
  const vf alpha = _mm256_set1_ps(o->alpha), one = _mm256_set1_ps(1.0f);
  for (int64_t r = begin; r < end; r++) {
    const float *hr = j->h + r * 2 * I;
    for (int64_t i = 0; i < I; i += 8) {
      const int64_t m = MIN(8, I - i);
      vf g, u;
      if (il) { /* the 2m values from 2i, bias added in the stored order, then split */
        float buf[16];
        vf lo = vf_load(KITE_DTYPE_F32, hr, 2 * i, MIN(8, 2 * m));
        vf hi = vf_load(KITE_DTYPE_F32, hr, 2 * i + 8, 2 * m - MIN(8, 2 * m));
        if (b) {
          lo = _mm256_add_ps(lo, vf_load(t, b, 2 * i, MIN(8, 2 * m)));
          hi = _mm256_add_ps(hi, vf_load(t, b, 2 * i + 8, 2 * m - MIN(8, 2 * m)));
        }
        _mm256_storeu_ps(buf, lo);
        _mm256_storeu_ps(buf + 8, hi);
        deinterleave(buf, &g, &u);
      } else {
        g = vf_load(KITE_DTYPE_F32, hr, i, m), u = vf_load(KITE_DTYPE_F32, hr, I + i, m);
        if (b) {
          g = _mm256_add_ps(g, vf_load(t, b, i, m));
          u = _mm256_add_ps(u, vf_load(t, b, I + i, m));
        }
      }
      if (clamp) { /* min / max return the bound for a NaN, as fminf / fmaxf do */
        g = _mm256_min_ps(g, lim);
        u = _mm256_max_ps(_mm256_min_ps(u, lim), nlim);
      }
      vf v;
      if (o->act == KITE_MOE_SWIGLU_OAI) /* (up + 1) gate sigmoid(alpha gate) */
        v = _mm256_mul_ps(vf_div_pos(g, vf_sigmoid_den(_mm256_mul_ps(alpha, g))),
                          _mm256_add_ps(u, one));
      else if (o->act == KITE_MOE_GELU) /* gate Phi(gate) up */
        v = _mm256_mul_ps(_mm256_mul_ps(g, vf_normal_cdf(g)), u);
      else /* gate / (1 + e^-gate) up */
        v = _mm256_mul_ps(vf_div_pos(g, vf_sigmoid_den(g)), u);
      vf_store(KITE_DTYPE_F32, j->act + r * I, i, vf_round_to(t, v), m, false);
    }
  }
}

/* Tokens [begin, end) of the block: y[t] = the weighted sum of its slots' rows of o (+ b2), in
 * slot order, rounded once. */
static void combine_task(const void *job, int64_t begin, int64_t end, int part) {
  const moe_job *j = job;
  const kite_moe_args *a = j->a;
  const kite_dtype t = a->dtype;
  const int64_t H = a->hidden, K = a->topk;
  for (int64_t r = begin; r < end; r++) {
    const int64_t tok = j->t0 + r;
    for (int64_t c = 0; c < H; c += 8) {
      const int64_t m = MIN(8, H - c);
      vf acc = _mm256_setzero_ps();
      for (int64_t s = 0; s < K; s++) {
        const int32_t p = j->pos[r * K + s];
        if (p < 0) continue;
        vf v = vf_load(KITE_DTYPE_F32, j->po + (int64_t)p * H, c, m);
        if (j->b2) {
          const int64_t e = a->ids[tok * a->ids_stride + s];
          v = _mm256_add_ps(v, vf_load(t, j->b2, e * H + c, m));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(a->weights[tok * a->weights_stride + s]), v, acc);
      }
      vf_store(t, a->y, tok * a->y_stride + c, acc, m, false);
    }
  }
}

static bool valid_id(const kite_moe_args *a, int64_t t, int64_t j) {
  const int32_t e = a->ids[t * a->ids_stride + j];
  return e >= 0 && e < a->experts;
}

/* The grouped kernel of both ops (op names them in errors); b13, b2 NULL when absent. */
static kite_status moe_grouped(kite_ctx *ctx, const char *op, const kite_moe_args *a,
                               const void *b13, const void *b2, const kite_moe_opts *o) {
  const int64_t T = a->tokens, H = a->hidden, I = a->inter, E = a->experts, K = a->topk;
  const int64_t es = esize(a->dtype);
  const bool tr = o->transposed != 0;
  const int64_t block = MOE_BLOCK_FLOATS / (K * H > 0 ? K * H : 1),
                bt = MIN(T, block > 0 ? block : 1);

  int64_t *count = calloc((size_t)(E + 1), sizeof *count);
  if (!count) return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "%s: cpu.avx2: no memory", op);
  /* the largest bucket of any block sizes h, act and the GEMM workspace */
  int64_t most = 0;
  for (int64_t t0 = 0; t0 < T; t0 += bt) {
    memset(count, 0, (size_t)(E + 1) * sizeof *count);
    for (int64_t t = t0; t < MIN(T, t0 + bt); t++)
      for (int64_t j = 0; j < K; j++)
        if (valid_id(a, t, j)) {
          const int64_t n = ++count[a->ids[t * a->ids_stride + j]];
          most = n > most ? n : most;
        }
  }
  const size_t g1 = cpu_avx2_lin_bytes_upto(ctx, most, 2 * I, H, KITE_DTYPE_F32),
               g2 = cpu_avx2_lin_bytes_upto(ctx, most, H, I, KITE_DTYPE_F32);
  const size_t sz_h = (size_t)(most * 2 * I) * 4, sz_a = (size_t)(most * I) * 4,
               sz_o = (size_t)(bt * K * H) * 4, sz_list = (size_t)(bt * K) * 4;
  const size_t total = sz_h + sz_a + sz_o + 2 * sz_list + (g1 > g2 ? g1 : g2) + 7 * ALIGN;
  char *ws = NULL;
  kite_status s = cpu_avx2_workspace(ctx, op, total, &ws);
  if (s != KITE_OK) {
    free(count);
    return s;
  }
  char *p = cpu_avx2_align_up(ws);
  float *h = (float *)p;
  p = cpu_avx2_align_up(p + sz_h);
  float *act = (float *)p;
  p = cpu_avx2_align_up(p + sz_a);
  float *out = (float *)p;
  p = cpu_avx2_align_up(p + sz_o);
  int32_t *tok = (int32_t *)p;
  p = cpu_avx2_align_up(p + sz_list);
  int32_t *pos = (int32_t *)p;
  p = cpu_avx2_align_up(p + sz_list);
  char *gws = p;

  moe_job mj = {.a = a, .b13 = b13, .b2 = b2, .o = o, .h = h, .act = act, .po = out, .pos = pos};
  for (int64_t t0 = 0; t0 < T; t0 += bt) {
    const int64_t nt = MIN(T, t0 + bt) - t0;
    memset(count, 0, (size_t)(E + 1) * sizeof *count);
    for (int64_t t = t0; t < t0 + nt; t++)
      for (int64_t j = 0; j < K; j++)
        if (valid_id(a, t, j)) count[a->ids[t * a->ids_stride + j] + 1]++;
    for (int64_t e = 0; e < E; e++) count[e + 1] += count[e]; /* bucket starts */
    for (int64_t t = t0; t < t0 + nt; t++) /* counting sort: token order within each bucket */
      for (int64_t j = 0; j < K; j++) {
        int32_t at = -1;
        if (valid_id(a, t, j)) {
          at = (int32_t)count[a->ids[t * a->ids_stride + j]]++;
          tok[at] = (int32_t)t;
        }
        pos[(t - t0) * K + j] = at;
      }
    if (I == 0) /* no products: each pair's row is 0 (y is then the weighted b2) */
      memset(out, 0, (size_t)(count[E > 0 ? E - 1 : 0] * H) * 4);
    /* count[e] is now the end of bucket e, which is where bucket e + 1 starts */
    int64_t start = 0;
    for (int64_t e = 0; e < E && I > 0; e++) {
      const int64_t end = count[e], rows = end - start;
      if (rows == 0) continue;
      /* w13[e]: [2I, H], or stored [H, 2I]; w2[e]: [H, I], or stored [I, H] */
      lin up = {
          .m = rows,
          .n = 2 * I,
          .k = H,
          .x = {a->x, a->x_stride, a->dtype, tok + start, false},
          .w = {(const char *)a->w13 + e * 2 * I * H * es, tr ? 2 * I : H, a->dtype, NULL, tr},
          .yt = KITE_DTYPE_F32,
          .y = h,
          .ldy = 2 * I};
      cpu_avx2_lin_run(ctx, &up, gws);
      mj.e = e;
      cpu_parallel_run(cpu_parallel_parts(ctx, rows, rows * I), rows, act_task, &mj);
      lin down = {.m = rows,
                  .n = H,
                  .k = I,
                  .x = {act, I, KITE_DTYPE_F32, NULL, false},
                  .w = {(const char *)a->w2 + e * H * I * es, tr ? H : I, a->dtype, NULL, tr},
                  .yt = KITE_DTYPE_F32,
                  .y = out + start * H,
                  .ldy = H};
      cpu_avx2_lin_run(ctx, &down, gws);
      start = end;
    }
    mj.t0 = t0;
    cpu_parallel_run(cpu_parallel_parts(ctx, nt, nt * K * H), nt, combine_task, &mj);
  }
  free(count);
  return KITE_OK;
}

kite_status cpu_fused_moe_avx2(const kite_kernel *kk, kite_ctx *ctx, const void *args) {
  const kite_moe_args *a = args;
  const kite_moe_opts o = {
      .act = a->act, .layout = KITE_MOE_SPLIT, .alpha = 0, .limit = 0, .transposed = 0};
  return moe_grouped(ctx, "fused_moe", a, NULL, NULL, &o);
}

kite_status cpu_fused_moe_ex_avx2(const kite_kernel *kk, kite_ctx *ctx, const void *args) {
  const kite_moe_ex_args *a = args;
  return moe_grouped(ctx, "fused_moe_ex", &a->moe, a->b13, a->b2, &a->opts);
}
