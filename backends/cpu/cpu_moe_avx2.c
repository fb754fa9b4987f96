/*
 * fused_moe on AVX2: the (token, expert) pairs are grouped by expert and each expert's two GEMMs
 * run over its gathered rows (the packing reads rows through an index list), not one GEMV per
 * token.
 */
#include "cpu_gemm_avx2.h"

/* ---- fused MoE -------------------------------------------------------------------------------
 * Pairs (t, j) with a valid id are bucketed by expert (counting sort, token order kept). Per
 * expert with rows: h = x[rows] w13[e]^T ([n_e, 2I] f32), a = act(gate) * up rounded to the
 * dtype, o = a w2[e]^T ([n_e, H]), and yacc[t] += weight * o. y = yacc rounded once. */
typedef struct act_job {
  const float *h;
  float *a;
  int64_t inter;
  kite_moe_act act;
  kite_dtype t;
} act_job;

static void act_task(const void *job, int64_t begin, int64_t end, int part) {
  const act_job *j = job;
  for (int64_t r = begin; r < end; r++) {
    const float *g = j->h + r * 2 * j->inter, *u = g + j->inter;
    float *o = j->a + r * j->inter;
    for (int64_t i = 0; i < j->inter; i += 8) {
      const int64_t m = MIN(8, j->inter - i);
      const vf x = vf_load(KITE_DTYPE_F32, g, i, m), up = vf_load(KITE_DTYPE_F32, u, i, m);
      vf act;
      if (j->act == KITE_MOE_GELU) /* x Phi(x) */
        act = _mm256_mul_ps(x, vf_normal_cdf(x));
      else /* x / (1 + e^-x) */
        act = vf_div_pos(x, vf_sigmoid_den(x));
      vf_store(KITE_DTYPE_F32, o, i, vf_round_to(j->t, _mm256_mul_ps(act, up)), m, false);
    }
  }
}

typedef struct scatter_job {
  const float *o;
  const int32_t *tok;
  const float *wt;
  int64_t rows, h;
  float *yacc;
} scatter_job;

/* Columns [begin, end) of every row: rows sharing a token never race. */
static void scatter_task(const void *job, int64_t begin, int64_t end, int part) {
  const scatter_job *j = job;
  for (int64_t r = 0; r < j->rows; r++) {
    const float *o = j->o + r * j->h;
    float *y = j->yacc + (int64_t)j->tok[r] * j->h;
    const vf w = _mm256_set1_ps(j->wt[r]);
    int64_t c = begin;
    for (; c + 8 <= end; c += 8)
      _mm256_storeu_ps(y + c, _mm256_fmadd_ps(w, _mm256_loadu_ps(o + c), _mm256_loadu_ps(y + c)));
    for (; c < end; c++) y[c] += j->wt[r] * o[c];
  }
}

typedef struct store_job {
  const float *src;
  int64_t cols;
  kite_dtype t;
  void *y;
  int64_t ldy;
} store_job;

static void store_task(const void *job, int64_t begin, int64_t end, int part) {
  const store_job *j = job;
  for (int64_t r = begin; r < end; r++)
    for (int64_t c = 0; c < j->cols; c += 8) {
      const int64_t m = MIN(8, j->cols - c);
      vf_store(j->t, j->y, r * j->ldy + c, vf_load(KITE_DTYPE_F32, j->src + r * j->cols, c, m), m,
               false);
    }
}

kite_status cpu_fused_moe_avx2(const kite_kernel *kk, kite_ctx *ctx, const void *args) {
  const kite_moe_args *a = args;
  const int64_t T = a->tokens, H = a->hidden, I = a->inter, E = a->experts, K = a->topk;
  const int64_t es = esize(a->dtype);

  /* count pairs per expert: the largest bucket sizes the buffers */
  int64_t pairs = 0;
  for (int64_t t = 0; t < T; t++)
    for (int64_t j = 0; j < K; j++) {
      const int32_t e = a->ids[t * a->ids_stride + j];
      pairs += e >= 0 && e < E;
    }
  int64_t *count = calloc((size_t)(E + 1), sizeof *count);
  if (!count) return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "fused_moe: cpu.avx2: no memory");
  for (int64_t t = 0; t < T; t++)
    for (int64_t j = 0; j < K; j++) {
      const int32_t e = a->ids[t * a->ids_stride + j];
      if (e >= 0 && e < E) count[e + 1]++;
    }
  int64_t most = 0;
  for (int64_t e = 0; e < E; e++) {
    most = count[e + 1] > most ? count[e + 1] : most;
    count[e + 1] += count[e]; /* now bucket starts */
  }

  const size_t g1 = cpu_avx2_lin_bytes_upto(ctx, most, 2 * I, H, KITE_DTYPE_F32),
               g2 = cpu_avx2_lin_bytes_upto(ctx, most, H, I, KITE_DTYPE_F32);
  const size_t sz_yacc = (size_t)(T * H) * 4, sz_h = (size_t)(most * 2 * I) * 4,
               sz_a = (size_t)(most * I) * 4, sz_o = (size_t)(most * H) * 4,
               sz_list = (size_t)(pairs > 0 ? pairs : 1) * 4;
  const size_t total = sz_yacc + sz_h + sz_a + sz_o + 2 * sz_list + (g1 > g2 ? g1 : g2) + 8 * ALIGN;
  char *ws = NULL;
  kite_status s = cpu_avx2_workspace(ctx, "fused_moe", total, &ws);
  if (s != KITE_OK) {
    free(count);
    return s;
  }
  char *p = cpu_avx2_align_up(ws);
  float *yacc = (float *)p;
  p = cpu_avx2_align_up(p + sz_yacc);
  float *h = (float *)p;
  p = cpu_avx2_align_up(p + sz_h);
  float *act = (float *)p;
  p = cpu_avx2_align_up(p + sz_a);
  float *o = (float *)p;
  p = cpu_avx2_align_up(p + sz_o);
  int32_t *tok = (int32_t *)p;
  p = cpu_avx2_align_up(p + sz_list);
  float *wt = (float *)p;
  p = cpu_avx2_align_up(p + sz_list);
  char *gws = p;

  memset(yacc, 0, sz_yacc);
  for (int64_t t = 0; t < T; t++) /* counting sort: token order within each bucket */
    for (int64_t j = 0; j < K; j++) {
      const int32_t e = a->ids[t * a->ids_stride + j];
      if (e < 0 || e >= E) continue;
      const int64_t at = count[e]++;
      tok[at] = (int32_t)t;
      wt[at] = a->weights[t * a->weights_stride + j];
    }
  /* count[e] is now the end of bucket e, which is where bucket e + 1 starts */
  int64_t start = 0;
  for (int64_t e = 0; e < E && I > 0; e++) {
    const int64_t end = count[e], rows = end - start;
    if (rows == 0) continue;
    lin up = {.m = rows,
              .n = 2 * I,
              .k = H,
              .x = {a->x, a->x_stride, a->dtype, tok + start},
              .w = {(const char *)a->w13 + e * 2 * I * H * es, H, a->dtype, NULL},
              .yt = KITE_DTYPE_F32,
              .y = h,
              .ldy = 2 * I};
    cpu_avx2_lin_run(ctx, &up, gws);
    act_job aj = {.h = h, .a = act, .inter = I, .act = a->act, .t = a->dtype};
    cpu_parallel_run(cpu_parallel_parts(ctx, rows, rows * I), rows, act_task, &aj);
    lin down = {.m = rows,
                .n = H,
                .k = I,
                .x = {act, I, KITE_DTYPE_F32, NULL},
                .w = {(const char *)a->w2 + e * H * I * es, I, a->dtype, NULL},
                .yt = KITE_DTYPE_F32,
                .y = o,
                .ldy = H};
    cpu_avx2_lin_run(ctx, &down, gws);
    scatter_job sj = {
        .o = o, .tok = tok + start, .wt = wt + start, .rows = rows, .h = H, .yacc = yacc};
    const int64_t blocks = (H + 255) / 256;
    cpu_parallel_run(cpu_parallel_parts(ctx, blocks, rows * H), H, scatter_task, &sj);
    start = end;
  }
  free(count);
  store_job st = {.src = yacc, .cols = H, .t = a->dtype, .y = a->y, .ldy = a->y_stride};
  cpu_parallel_run(cpu_parallel_parts(ctx, T, T * H), T, store_task, &st);
  return KITE_OK;
}
