/*
 * The sampling family of the cpu backend: the portable build of kernels_sampling.h (argmax,
 * sample, logprobs), apply_penalties (memory-bound scatter, one build), and the kernel entries of
 * every ISA build, which cpu_backend.c appends to its table.
 */
#include "vec_scalar.h"

#define CPU_SAMPLING_ISA scalar
#include "kernels_sampling.h"

#if defined(__x86_64__)
kite_status cpu_sample_run_avx2(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status cpu_logprobs_run_avx2(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status cpu_sample_run_avx512(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status cpu_logprobs_run_avx512(const kite_kernel *k, kite_ctx *ctx, const void *args);
#endif

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
    const double rep = a->repetition ? a->repetition[r] : 1.0;
    const double pres = a->presence ? a->presence[r] : 0.0;
    const double freq = a->frequency ? a->frequency[r] : 0.0;
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

static kite_status cpu_penalties_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
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

/* Every sampling args struct starts with op, dtype; the front-ends only pass float dtypes. */
static bool sm_supports(const kite_kernel *k, const void *args, const char **why) {
  if (!cpu_is_float(((const kite_sample_args *)args)->dtype)) {
    *why = "dtype not supported (f32, f16, bf16)";
    return false;
  }
  return true;
}

#define SM_ENTRY(op_id, isa, prio, feat, feat_str, fn, desc)                                       \
  {                                                                                                \
    .op = (op_id), .variant = #isa, .priority = (prio), .features = (feat),                        \
    .features_str = (feat_str), .supports = sm_supports, .run = fn##isa, .description = (desc)     \
  }
#define SM_ENTRIES(isa, prio, feat, feat_str, what)                                                \
  SM_ENTRY(KITE_OP_ARGMAX, isa, prio, feat, feat_str, cpu_sample_run_,                             \
           "one pass per row, rows or column ranges over threads, " what),                         \
      SM_ENTRY(KITE_OP_SAMPLE, isa, prio, feat, feat_str, cpu_sample_run_,                         \
               "radix-bucket top-k / top-p thresholds, pruned exponential race over Philox "       \
               "draws, " what),                                                                    \
      SM_ENTRY(KITE_OP_LOGPROBS, isa, prio, feat, feat_str, cpu_logprobs_run_,                     \
               "max and top-n pass, log-sum-exp pass, rows over threads, " what)

const kite_kernel cpu_sampling_kernels[] = {
    SM_ENTRIES(scalar, 10, 0, "", "portable C"),
#if defined(__x86_64__)
    SM_ENTRIES(avx2, 20, CPU_ISA_AVX2, "avx2,fma,f16c", "AVX2"),
    SM_ENTRIES(avx512, 30, CPU_ISA_AVX512, "avx512f,avx512bw,avx512vl,avx512dq,fma,f16c",
               "AVX-512"),
#endif
    {.op = KITE_OP_APPLY_PENALTIES,
     .variant = "sorted_ids",
     .priority = 10,
     .features_str = "",
     .supports = sm_supports,
     .run = cpu_penalties_run,
     .description = "per row: sort the seen ids, one float64 update per distinct id"},
};
const size_t cpu_sampling_num_kernels =
    sizeof cpu_sampling_kernels / sizeof cpu_sampling_kernels[0];
