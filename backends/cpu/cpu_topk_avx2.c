/* topk_gating on the cpu.avx2 entry (scalar code: the insertion and the exps are per element). */
#include "cpu_gemm_avx2.h"

/* ---- topk_gating: choose on the logits (NaN below everything, ties to the lower id), weights
 * from an f32 softmax over the whole row ------------------------------------------------------ */
typedef struct topk_job {
  const kite_topk_args *a;
} topk_job;

static void topk_task(const void *job, int64_t begin, int64_t end, int part) {
  const kite_topk_args *a = ((const topk_job *)job)->a;
  const int64_t E = a->experts, K = a->k;
  const int64_t es = esize(a->dtype);
  for (int64_t r = begin; r < end; r++) {
    const char *l = (const char *)a->logits + r * a->logits_stride * es;
    float *w = a->weights + r * a->weights_stride;
    int32_t *id = a->ids + r * a->ids_stride;
    /* insertion into the sorted top-k held in w (keys) and id: strict > keeps earlier ids first */
    int64_t have = 0;
    float m = -INFINITY;
    for (int64_t e = 0; e < E; e++) {
      const float v = kite_load_f32(a->dtype, l, e);
      if (v > m || isnan(v)) m = isnan(m) ? m : v;
      const float key = isnan(v) ? -INFINITY : v;
      if (have == K && !(key > w[K - 1])) continue;
      int64_t at = have < K ? have++ : K - 1;
      while (at > 0 && key > w[at - 1]) {
        w[at] = w[at - 1];
        id[at] = id[at - 1];
        at--;
      }
      w[at] = key;
      id[at] = (int32_t)e;
    }
    float sum = 0.0f;
    for (int64_t e = 0; e < E; e++) sum += expf(kite_load_f32(a->dtype, l, e) - m);
    float chosen = 0.0f;
    for (int64_t j = 0; j < K; j++) {
      w[j] = expf(kite_load_f32(a->dtype, l, id[j]) - m) / sum;
      chosen += w[j];
    }
    if (a->renormalize)
      for (int64_t j = 0; j < K; j++) w[j] /= chosen;
  }
}

kite_status cpu_topk_gating_avx2(const kite_kernel *kk, kite_ctx *ctx, const void *args) {
  const kite_topk_args *a = args;
  topk_job j = {a};
  cpu_parallel_run(cpu_parallel_parts(ctx, a->tokens, a->tokens * a->experts), a->tokens, topk_task,
                   &j);
  return KITE_OK;
}
