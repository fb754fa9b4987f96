/*
 * ggml_peer_bench: times ggml's CPU backend on the shapes `kite bench --shapes llm` uses, so the
 * two can be read side by side. Built outside the kite tree against a ggml checkout by
 * scripts/ggml-peer.sh; it does not link kite.
 *
 * Each case is one ggml graph computed with ggml_graph_compute on a persistent threadpool of
 * --threads threads (a pool made once, as llama.cpp does; without it ggml would start threads
 * on every call). Timing: one warm-up compute, then batches of computes of >= 20 ms each, the
 * median over --repeat batches (default 5) per call.
 *
 * GB/s uses kite bench's byte counts (minimum bytes read + written), e = element size:
 *   rms_norm (+ mul w)  (2 R C + C) e, alone 2 R C e
 *   swiglu  x[R, 2I]    3 R I e
 *   rope                2 T (Hq + Hkv) rot e + 4 T + 4 T rot   (positions, cos/sin rows)
 *   softmax             2 R C e
 *   flash attention     K + V bytes read: 2 B ctx Hkv D e_kv
 *
 * Output: one line per case, "op shape dtype us gb_s", whitespace separated.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ggml-cpu.h"
#include "ggml.h"

#define BATCH_SECONDS 0.02

static int g_threads = 2;
static int g_repeat = 5;
static struct ggml_threadpool *g_pool;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Fills t with values in [-amp, amp) from a fixed LCG, in t's own type. */
static void fill(struct ggml_tensor *t, float amp, uint32_t seed) {
  int64_t n = ggml_nelements(t);
  uint32_t s = seed * 2654435761u + 1u;
  for (int64_t i = 0; i < n; i++) {
    s = s * 1664525u + 1013904223u;
    float v = amp * ((float)(s >> 8) / 8388608.0f - 1.0f);
    switch (t->type) {
    case GGML_TYPE_F32:
      ((float *)t->data)[i] = v;
      break;
    case GGML_TYPE_F16:
      ((ggml_fp16_t *)t->data)[i] = ggml_fp32_to_fp16(v);
      break;
    case GGML_TYPE_BF16:
      ((ggml_bf16_t *)t->data)[i] = ggml_fp32_to_bf16(v);
      break;
    default:
      break;
    }
  }
}

/* A context big enough for the case's tensors (data bytes given) and one small graph. */
static struct ggml_context *new_ctx(size_t data_bytes) {
  struct ggml_init_params p = {
      data_bytes + 64 * ggml_tensor_overhead() + ggml_graph_overhead() + (1 << 20), NULL, false};
  return ggml_init(p);
}

/* Median seconds per ggml_graph_compute of the graph ending in out and out2 (NULL: none). */
static double time_graph(struct ggml_context *ctx, struct ggml_tensor *out,
                         struct ggml_tensor *out2) {
  struct ggml_cgraph *gf = ggml_new_graph(ctx);
  ggml_build_forward_expand(gf, out);
  if (out2) ggml_build_forward_expand(gf, out2);
  struct ggml_cplan plan = ggml_graph_plan(gf, g_threads, g_pool);
  uint8_t *work = NULL;
  if (plan.work_size) {
    work = malloc(plan.work_size);
    if (!work) return -1;
    plan.work_data = work;
  }
  ggml_graph_compute(gf, &plan); /* warm-up: first touch of the output, caches */
  int n = 0;
  double t0 = now();
  do {
    ggml_graph_compute(gf, &plan);
    n++;
  } while (now() - t0 < 0.01);
  double est = (now() - t0) / n;
  long batch = (long)ceil(BATCH_SECONDS / (est > 1e-9 ? est : 1e-9));
  if (batch < 1) batch = 1;
  double t[64];
  int reps = g_repeat < 64 ? g_repeat : 64;
  for (int i = 0; i < reps; i++) {
    t0 = now();
    for (long j = 0; j < batch; j++) ggml_graph_compute(gf, &plan);
    t[i] = (now() - t0) / (double)batch;
  }
  free(work);
  qsort(t, (size_t)reps, sizeof t[0], cmp_double);
  return t[reps / 2];
}

static void report(const char *op, const char *shape, enum ggml_type type, double sec,
                   double bytes) {
  printf("%-16s %-22s %-5s %12.2f %9.2f\n", op, shape, ggml_type_name(type), sec * 1e6,
         bytes / sec * 1e-9);
  fflush(stdout);
}

/* ---- cases ------------------------------------------------------------------------------- */

/* x[T, C] (ggml: ne0 = C) -> rms_norm, optionally times w[C]. */
static void bench_rms_norm(int64_t T, int64_t C, enum ggml_type type, int with_w) {
  size_t e = ggml_type_size(type);
  struct ggml_context *ctx = new_ctx((size_t)(4 * T * C + C) * e);
  struct ggml_tensor *x = ggml_new_tensor_2d(ctx, type, C, T);
  struct ggml_tensor *w = ggml_new_tensor_1d(ctx, type, C);
  fill(x, 2.0f, 1), fill(w, 1.0f, 2);
  struct ggml_tensor *y = ggml_rms_norm(ctx, x, 1e-6f);
  if (with_w) y = ggml_mul(ctx, y, w);
  char shape[64];
  snprintf(shape, sizeof shape, "%lldx%lld", (long long)T, (long long)C);
  double bytes = (double)(2 * T * C + (with_w ? C : 0)) * (double)e;
  report(with_w ? "rms_norm" : "rms_norm_alone", shape, type, time_graph(ctx, y, NULL), bytes);
  ggml_free(ctx);
}

/* x[T, 2I] -> silu(x[:, :I]) * x[:, I:]: y[T, I]. */
static void bench_swiglu(int64_t T, int64_t I, enum ggml_type type) {
  size_t e = ggml_type_size(type);
  struct ggml_context *ctx = new_ctx((size_t)(3 * T * I) * e);
  struct ggml_tensor *x = ggml_new_tensor_2d(ctx, type, 2 * I, T);
  fill(x, 4.0f, 3);
  struct ggml_tensor *y = ggml_swiglu(ctx, x);
  char shape[64];
  snprintf(shape, sizeof shape, "%lldx%lld", (long long)T, (long long)I);
  report("silu_and_mul", shape, type, time_graph(ctx, y, NULL), 3.0 * (double)(T * I) * (double)e);
  ggml_free(ctx);
}

/* NeoX RoPE on q[T, Hq, D] and k[T, Hkv, D], positions 0..T-1, full rotary dim, base 1e4. Both
 * ropes are nodes of one graph, as in a transformer layer. */
static void bench_rope(int64_t T, int64_t hq, int64_t hkv, int64_t D, enum ggml_type type) {
  size_t e = ggml_type_size(type);
  struct ggml_context *ctx = new_ctx((size_t)(2 * T * (hq + hkv) * D) * e + (size_t)T * 4);
  struct ggml_tensor *q = ggml_new_tensor_3d(ctx, type, D, hq, T);
  struct ggml_tensor *k = ggml_new_tensor_3d(ctx, type, D, hkv, T);
  struct ggml_tensor *pos = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, T);
  fill(q, 1.0f, 4), fill(k, 1.0f, 5);
  for (int64_t i = 0; i < T; i++) ((int32_t *)pos->data)[i] = (int32_t)i;
  int mode = GGML_ROPE_TYPE_NEOX;
  struct ggml_tensor *qr =
      ggml_rope_ext(ctx, q, pos, NULL, (int)D, mode, 0, 10000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f);
  struct ggml_tensor *kr =
      ggml_rope_ext(ctx, k, pos, NULL, (int)D, mode, 0, 10000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f);
  char shape[64];
  snprintf(shape, sizeof shape, "%lldx%lld/%lldx%lld", (long long)T, (long long)hq, (long long)hkv,
           (long long)D);
  double bytes =
      2.0 * (double)(T * (hq + hkv) * D) * (double)e + 4.0 * (double)T + 4.0 * (double)(T * D);
  report("rope", shape, type, time_graph(ctx, qr, kr), bytes);
  ggml_free(ctx);
}

/* softmax over the last dim of x[T, C]. */
static void bench_softmax(int64_t T, int64_t C, enum ggml_type type) {
  size_t e = ggml_type_size(type);
  struct ggml_context *ctx = new_ctx((size_t)(2 * T * C) * e);
  struct ggml_tensor *x = ggml_new_tensor_2d(ctx, type, C, T);
  fill(x, 8.0f, 6);
  struct ggml_tensor *y = ggml_soft_max(ctx, x);
  char shape[64];
  snprintf(shape, sizeof shape, "%lldx%lld", (long long)T, (long long)C);
  report("softmax", shape, type, time_graph(ctx, y, NULL), 2.0 * (double)(T * C) * (double)e);
  ggml_free(ctx);
}

/* Decode: B sequences, one f32 query each, q[B, Hq, D]; each sequence's own K/V
 * [B, Hkv, ctx, D] in kv_type (ggml: ne = D, ctx, Hkv, B). No mask: every key is visible. */
static void bench_flash_decode(int64_t B, int64_t n_ctx, int64_t hq, int64_t hkv, int64_t D,
                               enum ggml_type kv_type) {
  size_t ekv = ggml_type_size(kv_type);
  size_t kv_bytes = (size_t)(B * n_ctx * hkv * D) * ekv;
  struct ggml_context *ctx = new_ctx(2 * kv_bytes + (size_t)(2 * B * hq * D) * 4);
  struct ggml_tensor *q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, D, 1, hq, B);
  struct ggml_tensor *k = ggml_new_tensor_4d(ctx, kv_type, D, n_ctx, hkv, B);
  struct ggml_tensor *v = ggml_new_tensor_4d(ctx, kv_type, D, n_ctx, hkv, B);
  fill(q, 1.0f, 7), fill(k, 1.0f, 8), fill(v, 1.0f, 9);
  struct ggml_tensor *o =
      ggml_flash_attn_ext(ctx, q, k, v, NULL, 1.0f / sqrtf((float)D), 0.0f, 0.0f);
  ggml_flash_attn_ext_set_prec(o, GGML_PREC_F32);
  char shape[64];
  snprintf(shape, sizeof shape, "B%lld/ctx%lld/%lldx%lld/%lld", (long long)B, (long long)n_ctx,
           (long long)hq, (long long)hkv, (long long)D);
  report("flash_decode", shape, kv_type, time_graph(ctx, o, NULL), 2.0 * (double)kv_bytes);
  ggml_free(ctx);
}

static int want(const char *ops, const char *op) {
  if (!ops || !*ops || !strcmp(ops, "all")) return 1;
  size_t n = strlen(op);
  for (const char *p = ops; (p = strstr(p, op)) != NULL; p += n)
    if ((p == ops || p[-1] == ',') && (p[n] == ',' || p[n] == '\0')) return 1;
  return 0;
}

int main(int argc, char **argv) {
  const char *ops = "all";
  int f16 = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--threads") && i + 1 < argc)
      g_threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--repeat") && i + 1 < argc)
      g_repeat = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--ops") && i + 1 < argc)
      ops = argv[++i];
    else if (!strcmp(argv[i], "--f16"))
      f16 = 1; /* also f16 where ggml's CPU ops take it (rope, swiglu) */
    else {
      fprintf(stderr,
              "usage: %s [--threads N] [--repeat N] [--f16] [--ops "
              "rms_norm,rms_norm_alone,silu_and_mul,rope,softmax,flash_decode]\n",
              argv[0]);
      return 2;
    }
  }
  if (g_threads < 1 || g_repeat < 1) return 2;
  ggml_cpu_init();
  struct ggml_threadpool_params tp = ggml_threadpool_params_default(g_threads);
  g_pool = ggml_threadpool_new(&tp);
  if (!g_pool) {
    fprintf(stderr, "cannot create a threadpool of %d threads\n", g_threads);
    return 1;
  }
  printf("# ggml CPU, %d threads, median of %d batches >= 20 ms\n", g_threads, g_repeat);
  printf("%-16s %-22s %-5s %12s %9s\n", "op", "shape", "dtype", "us", "GB/s");
  static const int64_t tokens[] = {1, 16, 512, 8192};
  /* ggml's CPU rms_norm and soft_max take f32 only; rope and swiglu f32 or f16 */
  for (int i = 0; i < 4; i++)
    if (want(ops, "rms_norm")) bench_rms_norm(tokens[i], 4096, GGML_TYPE_F32, 1);
  for (int i = 0; i < 4; i++)
    if (want(ops, "rms_norm_alone")) bench_rms_norm(tokens[i], 4096, GGML_TYPE_F32, 0);
  for (int i = 0; i < 4; i++)
    if (want(ops, "silu_and_mul")) {
      bench_swiglu(tokens[i], 14336, GGML_TYPE_F32);
      if (f16) bench_swiglu(tokens[i], 14336, GGML_TYPE_F16);
    }
  for (int i = 0; i < 4; i++)
    if (want(ops, "rope")) {
      bench_rope(tokens[i], 32, 8, 128, GGML_TYPE_F32);
      if (f16) bench_rope(tokens[i], 32, 8, 128, GGML_TYPE_F16);
    }
  for (int i = 0; i < 4; i++)
    if (want(ops, "softmax")) {
      bench_softmax(tokens[i], 32000, GGML_TYPE_F32);
      bench_softmax(tokens[i], 4096, GGML_TYPE_F32);
    }
  static const int64_t batches[] = {1, 8, 32}, contexts[] = {512, 4096};
  for (int b = 0; b < 3; b++)
    for (int c = 0; c < 2; c++)
      if (want(ops, "flash_decode"))
        bench_flash_decode(batches[b], contexts[c], 32, 8, 128, GGML_TYPE_F16);
  ggml_threadpool_free(g_pool);
  return 0;
}
