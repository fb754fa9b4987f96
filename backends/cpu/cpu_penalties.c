/*
 * apply_penalties on the CPU: a memory-bound scatter of a few updates per row, one portable build;
 * softcap, an elementwise pass over the logits, beside it.
 */
#include <math.h>
#include <stdlib.h>

#include "cpu.h"
#include "cpu_kernels.h"
#include "kite/dtype.h"
#include "kite/sampling.h"

/* ---- apply_penalties ----------------------------------------------------------------------- *
 * Per row, without a vocabulary-sized table: the row's in-range ids are sorted (prompt ids tagged
 * apart from output ids), and each run of one id is one logit update, computed in double and
 * rounded once as ref does. */
typedef struct pen_job {
  const kite_penalty_args *a;
  int64_t *scratch; /* [slots, prompt_len + output_len] */
} pen_job;

static int cmp_i64(const void *pa, const void *pb) {
  const int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
  return (a > b) - (a < b);
}

static void pen_rows_task(const void *job, int64_t begin, int64_t end, int slot) {
  const pen_job *j = job;
  const kite_penalty_args *a = j->a;
  int64_t *ids = j->scratch + (size_t)slot * (size_t)(a->prompt_len + a->output_len);
  for (int64_t r = begin; r < end; r++) {
    /* id * 2 + (1 for an output id): sorting groups each id's prompt and output occurrences */
    int64_t n = 0;
    for (int64_t q = 0; q < a->prompt_len; q++) {
      const int32_t id = a->prompt_ids[r * a->prompt_stride + q];
      if (id >= 0 && id < a->vocab) ids[n++] = (int64_t)id * 2;
    }
    for (int64_t q = 0; q < a->output_len; q++) {
      const int32_t id = a->output_ids[r * a->output_stride + q];
      if (id >= 0 && id < a->vocab) ids[n++] = (int64_t)id * 2 + 1;
    }
    qsort(ids, (size_t)n, sizeof *ids, cmp_i64);
    const kite_penalty_row pen = kite_penalty_row_get(a, r);
    const double rep = pen.repetition, pres = pen.presence, freq = pen.frequency;
    const int64_t off = r * a->logits_stride;
    for (int64_t q = 0; q < n;) {
      const int64_t id = ids[q] >> 1;
      int64_t count = 0;
      for (; q < n && ids[q] >> 1 == id; q++) count += ids[q] & 1;
      double l = kite_load_f32(a->dtype, a->logits, off + id);
      l = l > 0.0 ? l / rep : l * rep;
      l -= freq * (double)count + (count > 0 ? pres : 0.0);
      kite_store_f32(a->dtype, a->logits, off + id, (float)l);
    }
  }
}

CPU_RUN_DECL(cpu_apply_penalties_scalar) {
  const kite_penalty_args *a = args;
  const int64_t per_row = a->prompt_len + a->output_len;
  const int slots = cpu_parallel_parts(ctx, a->rows, a->rows * per_row * 16);
  void *ws;
  kite_status s =
      kite_ctx_workspace(ctx, (size_t)slots * (size_t)per_row * sizeof(int64_t) + 8, &ws);
  if (s != KITE_OK) return s;
  pen_job j = {a, ws};
  cpu_parallel_run(slots, a->rows, pen_rows_task, &j);
  return KITE_OK;
}

/* ---- softcap ------------------------------------------------------------------------------- *
 * cap * tanh(l / cap) in f32 (a few ulp of ref's float64), rows over threads. */
static void softcap_rows_task(const void *job, int64_t begin, int64_t end, int slot) {
  (void)slot;
  const kite_softcap_args *a = job;
  const float cap = a->cap;
  for (int64_t r = begin; r < end; r++)
    for (int64_t i = 0, off = r * a->logits_stride; i < a->vocab; i++)
      kite_store_f32(a->dtype, a->logits, off + i,
                     cap * tanhf(kite_load_f32(a->dtype, a->logits, off + i) / cap));
}

CPU_RUN_DECL(cpu_softcap_scalar) {
  const kite_softcap_args *a = args;
  cpu_parallel_run(cpu_parallel_parts(ctx, a->rows, a->rows * a->vocab * 8), a->rows,
                   softcap_rows_task, a);
  return KITE_OK;
}
