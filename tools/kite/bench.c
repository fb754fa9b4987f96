/*
 * kite bench: times every kernel that runs here (pinned through kite_config_set) on LLM shapes,
 * reports GB/s against a memcpy ceiling measured in the same run and the speedup over ref.
 * `kite bench --dispatch` (bench_dispatch.c) measures what one call through the public API costs
 * over a direct call of the same kernel. Benchmarks report; they never fail on time.
 *
 * Timing: one warm-up call, then batches of calls followed by kite_ctx_synchronize on the host
 * clock, each batch >= ~20 ms; the median over the batches (default 5) per call. On the CPU a
 * 256 MB host copy is timed before every batch and %memcpy compares the kernel's median with the
 * median of those copies. A (kernel, shape) gets at most a fixed time budget: batches shrink, then
 * fewer batches, and a kernel whose single call exceeds the budget (ref on the largest shapes) is
 * measured by that one call.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"
#include "families.h"
#include "util.h"

#define BATCH_SECONDS 0.02
#define KERNEL_BUDGET 1.0 /* seconds of timed calls per (kernel, shape) */
#define REF_BUDGET 0.5    /* ref is slow by design: fewer calls */
#define SLOW_FACTOR                                                                                \
  100 /* a kernel whose first call is this many times the fastest one's is not timed */
#define CEILING_BYTES ((size_t)256 << 20)
/* A device copy far larger than any L2 (50 MB on an H100), timed by the device's own timer where
 * it has one: a smaller copy or the host clock would flatter or blur the ceiling. */
#define DEVICE_CEILING_BYTES ((size_t)1 << 30)
#define DEFAULT_MAX_MB 4096 /* skip shapes whose buffers exceed this (--max-mb) */
/* Compute-bound cases the CPU would take minutes over: not timed there (a GPU shape). */
#define CPU_MAX_FLOPS 2e11
#define REF_MAX_FLOPS 1e9 /* ref (float64 loops) is not timed above this: no speedup column */

/* ---- timing ------------------------------------------------------------------------------ */

typedef struct timing {
  double us;      /* median per call */
  double first;   /* seconds of the first (warm-up) call */
  int skipped;    /* the first call was over the cap: not timed, msg says why */
  int calls;      /* timed calls */
  double ceiling; /* GB/s, median of the host copies timed between the batches; 0: none */
  char msg[256];
} timing;

typedef kite_status (*call_fn)(kt_run *r);

static kite_status call_sync(kt_run *r, call_fn call) {
  kite_status s = call(r);
  if (s == KITE_OK) s = kite_ctx_synchronize(r->ctx);
  return s;
}

/* Times call(r) with r's op pinned to k (NULL: default dispatch). With `beside`, one host copy is
 * timed before every batch (then one untimed call, so that the batch finds the caches as a run of
 * calls leaves them): a shared host's bandwidth drifts within seconds, and a ceiling sampled in
 * the same moments as the kernel keeps %memcpy a comparison of like with like. */
static kite_status time_call(kt_run *r, const kt_kernel *k, call_fn call, double budget, int repeat,
                             kt_host_copy *beside, double cap, timing *tm) {
  memset(tm, 0, sizeof *tm);
  kite_status s = kt_pin(r->c.op, k);
  double t0 = kt_now();
  if (s == KITE_OK) s = call_sync(r, call); /* warm-up */
  double first = kt_now() - t0;
  tm->first = first;
  if (s != KITE_OK) {
    snprintf(tm->msg, sizeof tm->msg, "%s", kite_last_error());
    return s;
  }
  if (cap > 0 && first > cap) {
    tm->skipped = 1;
    snprintf(tm->msg, sizeof tm->msg,
             "not timed: first call %.3g ms, over %dx the fastest first call on this shape (%.3g "
             "ms)",
             first * 1e3, SLOW_FACTOR, cap / SLOW_FACTOR * 1e3);
    return KITE_OK;
  }
  if (first >= budget) { /* one call is all the budget allows */
    tm->us = first * 1e6;
    tm->calls = 1;
    if (beside) tm->ceiling = kt_host_copy_gbs(beside);
    return KITE_OK;
  }
  /* per-call estimate over >= 10 ms (one call for slow kernels); the warm-up call may have
   * paid one-time costs (page faults, module loading) */
  int n = 0;
  t0 = kt_now();
  do {
    s = call(r);
    n++;
  } while (s == KITE_OK && kt_now() - t0 < 0.01);
  if (s == KITE_OK) s = kite_ctx_synchronize(r->ctx);
  double est = (kt_now() - t0) / n;
  long batch = (long)ceil(BATCH_SECONDS / (est > 1e-9 ? est : 1e-9));
  int reps = repeat;
  if (batch < 1) batch = 1;
  while ((double)reps * (double)batch * est > budget && batch > 1) batch /= 2;
  while ((double)reps * (double)batch * est > budget && reps > 2) reps--;

  double t[1000], g[1000];
  for (int i = 0; i < reps && s == KITE_OK; i++) {
    if (beside) {
      g[i] = kt_host_copy_gbs(beside);
      s = call_sync(r, call);
      if (s != KITE_OK) break;
    }
    t0 = kt_now();
    for (long j = 0; j < batch && s == KITE_OK; j++) s = call(r);
    if (s == KITE_OK) s = kite_ctx_synchronize(r->ctx);
    t[i] = (kt_now() - t0) / (double)batch;
  }
  if (s != KITE_OK) {
    snprintf(tm->msg, sizeof tm->msg, "%s", kite_last_error());
    return s;
  }
  tm->us = kt_median(t, reps) * 1e6;
  tm->calls = reps * (int)batch;
  if (beside) tm->ceiling = kt_median(g, reps);
  return KITE_OK;
}

static kite_status time_kernel(kt_run *r, const kt_kernel *k, double budget, int repeat,
                               kt_host_copy *beside, double cap, timing *tm) {
  return time_call(r, k, kt_call, budget, repeat, beside, cap, tm);
}

static int by_priority_desc(const void *a, const void *b) {
  const kt_kernel *x = *(const kt_kernel *const *)a, *y = *(const kt_kernel *const *)b;
  return (x->priority < y->priority) - (x->priority > y->priority);
}

/* Allocates r on ctx and fills its inputs. On the CPU the buffers are host memory and are
 * filled in place, so a multi-GB case needs no second host copy. */
static kite_status prepare(kt_run *r, kite_ctx *ctx, DLDeviceType type) {
  kite_status s = kt_alloc(r, ctx);
  if (s != KITE_OK) return s;
  unsigned char *img[KT_MAX_BUFS];
  if (type == kDLCPU) {
    for (int b = 0; b < r->nbufs; b++) img[b] = r->buf[b].dev;
    kt_fill(r, 1, img);
    return KITE_OK;
  }
  for (int b = 0; b < r->nbufs; b++) img[b] = NULL;
  for (int b = 0; b < r->nbufs && s == KITE_OK; b++) {
    img[b] = malloc(kt_buf_bytes(r, b));
    if (!img[b]) s = KITE_ERR_OUT_OF_MEMORY;
  }
  if (s == KITE_OK) {
    kt_fill(r, 1, img);
    s = kt_upload(r, img);
  }
  for (int b = 0; b < r->nbufs; b++) free(img[b]);
  if (s != KITE_OK) kt_release(r);
  return s;
}

/* ---- output ------------------------------------------------------------------------------ */

static double ceiling_of(const kt_bench *b, DLDeviceType t) {
  for (int d = 0; d < b->dev.n; d++)
    if (b->dev.type[d] == t) return b->ceiling[d];
  return 0;
}

static void table_header(kt_bench *b) {
  if (b->o->json || b->header_done) return;
  b->header_done = 1;
  printf("%-18s %-22s %-5s %-24s %11s %9s %8s %8s %9s %9s\n", "op", "kernel", "dtype", "shape",
         "us", "GB/s", "memcpy", "%memcpy", "GFLOP/s", "x vs ref");
}

static void print_result(kt_bench *b, const kt_case *c, const char *kernel, DLDeviceType dev,
                         const timing *tm, double ref_us) {
  char shape[64];
  kt_case_shape(c, shape, sizeof shape);
  double gbs = kt_case_bytes(c) / (tm->us * 1e-6) * 1e-9;
  double ceil_gbs = tm->ceiling > 0 ? tm->ceiling : ceiling_of(b, dev);
  double pct = ceil_gbs > 0 ? 100.0 * gbs / ceil_gbs : 0;
  double gflops = kt_case_flops(c) / (tm->us * 1e-6) * 1e-9; /* 0: a memory-bound op */
  const char *asked = b->o->backend;
  if (asked && strncmp(kernel, asked, strlen(asked)) == 0) b->rows_asked++;
  /* no op moves its bytes faster than a copy does: a row far above the ceiling means the
   * ceiling was measured while the host was busy, or the op's byte count is wrong */
  int unstable = pct > 120.0;
  b->over_ceiling += unstable;
  if (b->o->json) {
    printf("{\"op\":\"%s\",\"kernel\":", kite_op_name(c->op));
    kt_json_str(kernel);
    printf(",\"dtype\":\"%s\",\"shape\":\"%s\",\"us\":%.3f,\"gb_s\":%.3f,\"ceiling_gb_s\":%.3f,"
           "\"pct_ceiling\":%.2f,",
           kite_dtype_name(c->dtype), shape, tm->us, gbs, ceil_gbs, pct);
    if (gflops > 0) printf("\"gflop_s\":%.3f,", gflops);
    printf("\"speedup_vs_ref\":");
    if (ref_us > 0)
      printf("%.3f", ref_us / tm->us);
    else
      printf("null");
    printf(",\"threads\":%d,\"device\":\"%s\",\"bytes\":%.0f,\"calls\":%d}\n", b->threads,
           kite_device_name(dev), kt_case_bytes(c), tm->calls);
  } else {
    table_header(b);
    printf("%-18s %-22s %-5s %-24s %11.2f %9.2f %8.1f %7.1f%%", kite_op_name(c->op), kernel,
           kite_dtype_name(c->dtype), shape, tm->us, gbs, ceil_gbs, pct);
    if (gflops > 0)
      printf(" %9.1f", gflops);
    else
      printf(" %9s", "-");
    if (ref_us > 0)
      printf(" %8.2fx", ref_us / tm->us);
    else
      printf(" %9s", "-");
    printf("%s\n", unstable ? "  (above the copy ceiling: unstable ceiling)" : "");
  }
  fflush(stdout);
}

static void print_skip(kt_bench *b, const kt_case *c, const char *kernel, const char *why) {
  char shape[64];
  kt_case_shape(c, shape, sizeof shape);
  if (b->o->json) {
    printf("{\"op\":\"%s\",\"kernel\":", kite_op_name(c->op));
    kt_json_str(kernel);
    printf(",\"dtype\":\"%s\",\"shape\":\"%s\",\"skipped\":", kite_dtype_name(c->dtype), shape);
    kt_json_str(why);
    printf("}\n");
  } else {
    table_header(b);
    printf("%-18s %-22s %-5s %-24s skipped: %s\n", kite_op_name(c->op), kernel,
           kite_dtype_name(c->dtype), shape, why);
  }
  fflush(stdout);
}

/* ---- the benchmark ----------------------------------------------------------------------- */

/* One shape: ref on the CPU first (its time is the speedup baseline), then every selected kernel
 * on its device. */
static void bench_case(kt_bench *b, const kt_case *c, const kt_kernel *ref, size_t max_bytes) {
  const kt_opts *o = b->o;
  int repeat = o->repeat ? o->repeat : 5;
  kt_run r;
  if (kt_plan(&r, c)) return;
  if (kt_run_bytes(&r) > max_bytes) {
    char why[128];
    snprintf(why, sizeof why, "needs %.0f MB of buffers (> --max-mb %zu)",
             (double)kt_run_bytes(&r) / (1 << 20), max_bytes >> 20);
    print_skip(b, c, "*", why);
    return;
  }
  double ref_us = 0;
  for (int d = 0; d < b->dev.n; d++) {
    DLDeviceType type = b->dev.type[d];
    int any = 0;
    for (size_t i = 0; i < b->reg.n; i++) {
      const kt_kernel *k = &b->reg.k[i];
      any |= k->op == c->op && k->device == type && k->runs_here && kt_kernel_selected(k, o);
    }
    double flops = kt_case_flops(c);
    if (type == kDLCPU && flops > CPU_MAX_FLOPS) {
      char why[128];
      snprintf(why, sizeof why, "%.0f GFLOP per call: a GPU shape, not timed on the CPU",
               flops * 1e-9);
      if (any) print_skip(b, c, "*", why);
      continue;
    }
    int ref_here = type == kDLCPU && ref && flops <= REF_MAX_FLOPS;
    if (!any && !ref_here) continue;
    kite_status s = prepare(&r, b->dev.ctx[d], type);
    if (s != KITE_OK) {
      print_skip(b, c, "*", kite_last_error());
      continue;
    }
    timing tm;
    if (ref_here) {
      s = time_kernel(&r, ref, REF_BUDGET, repeat, NULL, 0, &tm);
      if (s == KITE_OK) ref_us = tm.us;
      if (kt_kernel_selected(ref, o)) {
        if (s == KITE_OK)
          print_result(b, c, ref->name, type, &tm, ref_us);
        else
          print_skip(b, c, ref->name, tm.msg);
      }
    }
    /* best first: the fastest first call so far caps the others (SLOW_FACTOR), so that a slow
     * fallback on a large shape costs one call, not minutes */
    const kt_kernel **order = malloc(b->reg.n * sizeof *order);
    size_t nk = 0;
    for (size_t i = 0; order && i < b->reg.n; i++) {
      const kt_kernel *k = &b->reg.k[i];
      if (k != ref && k->op == c->op && k->device == type && k->runs_here &&
          kt_kernel_selected(k, o))
        order[nk++] = k;
    }
    if (nk > 1) qsort(order, nk, sizeof *order, by_priority_desc);
    double fastest = 0;
    for (size_t i = 0; i < nk; i++) {
      const kt_kernel *k = order[i];
      s = time_kernel(&r, k, KERNEL_BUDGET, repeat, type == kDLCPU ? b->copy : NULL,
                      fastest > 0 ? fastest * SLOW_FACTOR : 0, &tm);
      if (s == KITE_OK && !tm.skipped && (fastest == 0 || tm.first < fastest)) fastest = tm.first;
      if (s == KITE_OK && !tm.skipped)
        print_result(b, c, k->name, type, &tm, ref_us);
      else
        print_skip(b, c, k->name, tm.msg);
    }
    free(order);
    /* the same work another way (per-expert linear calls for fused_moe), default dispatch */
    const kt_family_ops *fam = kt_family(c->op);
    if (any && fam->alt_call && fam->alt_name && fam->alt_name(c)) {
      char name[96];
      snprintf(name, sizeof name, "(%s)", fam->alt_name(c));
      s = time_call(&r, NULL, fam->alt_call, KERNEL_BUDGET, repeat, type == kDLCPU ? b->copy : NULL,
                    0, &tm);
      if (s == KITE_OK)
        print_result(b, c, name, type, &tm, ref_us);
      else
        print_skip(b, c, name, tm.msg);
    }
    kt_release(&r);
  }
}

static void measure_ceilings(kt_bench *b) {
  for (int d = 0; d < b->dev.n; d++) {
    if (b->dev.type[d] != kDLCPU) {
      b->ceiling[d] = kt_device_memcpy_gbs(b->dev.ctx[d], DEVICE_CEILING_BYTES);
      continue;
    }
    if (!b->copy) b->copy = kt_host_copy_open(b->threads, CEILING_BYTES);
    b->ceiling[d] = b->copy ? kt_host_copy_median_gbs(b->copy, 5) : 0;
  }
}

static void print_machine(const kt_bench *b, const char *shapes) {
  if (b->o->json) {
    printf("{\"ceiling_gb_s\":%.3f,\"ceilings\":{", b->ceiling[0]);
    for (int d = 0; d < b->dev.n; d++)
      printf("%s\"%s\":%.3f", d ? "," : "", kite_device_name(b->dev.type[d]), b->ceiling[d]);
    printf("},\"machine\":{\"cpu_model\":");
    kt_json_str(kt_cpu_model());
    printf(",\"cpus\":%d,\"threads\":%d,\"devices\":[", kt_online_cpus(), b->threads);
    for (int d = 0; d < b->dev.n; d++)
      printf("%s\"%s\"", d ? "," : "", kite_device_name(b->dev.type[d]));
    printf("]},\"kite_version\":\"%d.%d.%d\",\"shapes\":\"%s\"}\n", KITE_VERSION_MAJOR,
           KITE_VERSION_MINOR, KITE_VERSION_PATCH, shapes);
    return;
  }
  printf("kite bench: %s, %d cpus, %d threads, shapes %s\n", kt_cpu_model(), kt_online_cpus(),
         b->threads, shapes);
  for (int d = 0; d < b->dev.n; d++)
    printf("ceiling: %s memcpy %.1f GB/s (read + write, %zu MB%s)\n",
           kite_device_name(b->dev.type[d]), b->ceiling[d],
           (b->dev.type[d] == kDLCPU ? CEILING_BYTES : DEVICE_CEILING_BYTES) >> 20,
           b->dev.type[d] == kDLCPU ? ", same threads" : ", device to device, device-timed");
  fflush(stdout);
}

int kt_bench_open(kt_bench *b, const kt_opts *o) {
  memset(b, 0, sizeof *b);
  b->o = o;
  b->threads = o->threads ? o->threads : kt_online_cpus();
  if (kt_registry_load(&b->reg)) {
    fprintf(stderr, "kite bench: cannot read the registry: %s\n", kite_last_error());
    return 1;
  }
  if (kt_devices_open(&b->dev, o->threads)) {
    kt_registry_free(&b->reg);
    return 1;
  }
  return 0;
}

void kt_bench_close(kt_bench *b) {
  kt_host_copy_close(b->copy);
  kt_devices_close(&b->dev);
  kt_registry_free(&b->reg);
}

/* ---- entry points ------------------------------------------------------------------------ */

static void usage(void) {
  printf("usage: kite bench [--op NAME] [--backend NAME] [--dtype T] [--threads N] [--json]\n"
         "                  [--shapes small|llm] [--repeat N] [--max-mb N]\n"
         "       kite bench --dispatch [--json]\n"
         "\n"
         "Times every kernel that runs here (pinned with kite_config_set), one warm-up call then\n"
         "the median of N batches (each >= 20 ms) per call, and reports the bytes the op must\n"
         "move per second beside a memcpy ceiling measured in the same run (CPU: a multithreaded\n"
         "memcpy of 256 MB with the same threads, measured again beside every row; other devices:\n"
         "a device-to-device copy of 1 GiB on the device's timer) and the speedup over ref\n"
         "(which runs on the CPU, whatever the kernel's device).\n"
         "Compute-bound ops (attention, GEMM, MoE) also report GFLOP/s; a case over 200 GFLOP\n"
         "per call is a GPU shape and is not timed on the CPU, nor ref over 1 GFLOP. fused_moe\n"
         "also times the same work as per-expert linear calls, shown as \"(per-expert ...)\".\n"
         "Kernels are timed best priority first; one whose first call takes over 100x the\n"
         "fastest first call on that shape is skipped with a note (a fallback on a GPU-sized\n"
         "shape would take minutes).\n"
         "\n"
         "  --op NAME        only this op (default shapes: llm)\n"
         "  --backend NAME   only this backend (\"cpu\") or kernel (\"cpu.avx2\"); ref is still\n"
         "                   timed for the speedup column\n"
         "  --dtype T        f32, f16 or bf16 (default: bf16 and f32)\n"
         "  --threads N      kite_ctx_params.num_threads (default: all cores)\n"
         "  --shapes S       small: one mid shape per op (default without --op);\n"
         "                   llm: T in {1,16,512,8192}, H in {4096,5120}, I=14336, rope\n"
         "                   Hq32/Hkv8/D128, softmax over 32000 and 4096, embedding 32000x4096;\n"
         "                   paged decode B{1,8,32,64} x ctx{512,4096}, prefill, GEMM 2048^3 + "
         "decode, MoE\n"
         "  --repeat N       timed batches (default 5)\n"
         "  --max-mb N       skip shapes needing more than N MB of buffers (default %d)\n"
         "  --json           one JSON object per line; the first describes the machine\n"
         "  --dispatch       ns per call through the public API vs a direct kernel call\n",
         DEFAULT_MAX_MB);
}

int kt_cmd_bench(int argc, char **argv) {
  kt_opts o;
  int rc = kt_parse_opts(argc, argv,
                         "--op --backend --dtype --threads --json --dispatch --shapes --repeat "
                         "--max-mb",
                         &o);
  if (rc) return rc;
  if (o.help) {
    usage();
    return 0;
  }
  if (o.dispatch) return kt_bench_dispatch(&o);

  kt_bench b;
  if (kt_bench_open(&b, &o)) return 2;
  if (o.backend && !kt_backend_known(&b.reg, o.backend)) {
    fprintf(stderr, "kite bench: no kernel of backend '%s' is registered (see kite list)\n",
            o.backend);
    kt_bench_close(&b);
    return 2;
  }
  const char *shapes = o.shapes ? o.shapes : o.op >= 0 ? "llm" : "small";
  int llm = strcmp(shapes, "llm") == 0;
  size_t max_bytes = (size_t)(o.max_mb ? o.max_mb : DEFAULT_MAX_MB) << 20;
  size_t cfg_len = strlen(kite_config_get());
  char *saved = malloc(cfg_len + 1);
  if (!saved) {
    kt_bench_close(&b);
    return 2;
  }
  memcpy(saved, kite_config_get(), cfg_len + 1);

  measure_ceilings(&b);
  print_machine(&b, shapes);
  static const kite_dtype default_dtypes[] = {KITE_DTYPE_BF16, KITE_DTYPE_F32};
  double t0 = kt_now();
  for (int op = 0; op < KITE_OP_COUNT; op++) {
    if (o.op >= 0 && op != o.op) continue;
    const kt_family_ops *fam = kt_family((kite_op)op);
    if (!fam) {
      if (o.op >= 0 && !o.json)
        printf("%s: the CLI has no bench driver for this op yet\n", kite_op_name((kite_op)op));
      continue;
    }
    const kt_kernel *ref = kt_ref_kernel(&b.reg, (kite_op)op);
    for (int d = 0; d < 2; d++) {
      kite_dtype t = o.dtype >= 0 ? (kite_dtype)o.dtype : default_dtypes[d];
      if (o.dtype >= 0 && d > 0) break;
      kt_case_list cases = {0};
      fam->bench_cases((kite_op)op, t, llm, &cases);
      for (int i = 0; i < cases.n; i++) bench_case(&b, &cases.c[i], ref, max_bytes);
      kt_case_list_free(&cases);
    }
  }
  kite_config_set(saved);
  free(saved);
  if (!o.json) printf("kite bench: %.1f s\n", kt_now() - t0);
  if (b.over_ceiling)
    fprintf(stderr,
            "kite bench: warning: %d row%s above 120 %% of the copy ceiling: the ceiling was "
            "measured on a busy host; rerun on an idle one before quoting %%memcpy\n",
            b.over_ceiling, b.over_ceiling == 1 ? "" : "s");
  int nothing = o.backend && b.rows_asked == 0;
  if (nothing)
    fprintf(stderr, "kite bench: no kernel of '%s' ran here (kite list says why)\n", o.backend);
  kt_bench_close(&b);
  return nothing ? 2 : 0;
}

/* For plain `kite`: a handful of ops at one mid shape, default dispatch against ref. */
void kt_bench_summary(void) {
  static const kite_op ops[] = {KITE_OP_RMS_NORM, KITE_OP_ADD_RMS_NORM, KITE_OP_SILU_AND_MUL,
                                KITE_OP_ROPE, KITE_OP_SOFTMAX};
  kt_opts o;
  memset(&o, 0, sizeof o);
  o.op = o.dtype = -1;
  kt_bench b;
  if (kt_bench_open(&b, &o)) return;
  size_t cfg_len = strlen(kite_config_get());
  char *saved = malloc(cfg_len + 1);
  if (!saved) {
    kt_bench_close(&b);
    return;
  }
  memcpy(saved, kite_config_get(), cfg_len + 1);
  measure_ceilings(&b);
  for (int d = 0; d < b.dev.n; d++)
    printf("%s memcpy ceiling %.1f GB/s%s\n", kite_device_name(b.dev.type[d]), b.ceiling[d],
           b.dev.type[d] == kDLCPU ? " (all threads)" : "");
  printf("bf16, default dispatch (kernel as kite list predicts it) vs ref:\n");
  printf("  %-14s %-14s %-6s %-20s %9s %8s %8s %9s\n", "op", "shape", "device", "kernel", "us",
         "GB/s", "%memcpy", "x vs ref");
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    kt_case_list cases = {0};
    kt_family(ops[i])->bench_cases(ops[i], KITE_DTYPE_BF16, 0, &cases);
    kt_run r;
    if (cases.n == 0 || kt_plan(&r, &cases.c[0])) {
      kt_case_list_free(&cases);
      continue;
    }
    const kt_kernel *ref = kt_ref_kernel(&b.reg, ops[i]);
    char shape[64];
    kt_case_shape(&cases.c[0], shape, sizeof shape);
    double ref_us = 0;
    /* the CPU comes first: its ref time is every device's baseline */
    for (int d = 0; d < b.dev.n; d++) {
      DLDeviceType type = b.dev.type[d];
      const kt_kernel *def = kt_default_kernel(&b.reg, ops[i], type);
      if (!def || prepare(&r, b.dev.ctx[d], type) != KITE_OK) continue;
      timing tm, tr;
      if (type == kDLCPU && ref && time_kernel(&r, ref, 0.25, 3, NULL, 0, &tr) == KITE_OK)
        ref_us = tr.us;
      kite_status s = time_kernel(&r, NULL, 0.25, 5, NULL, 0, &tm);
      printf("  %-14s %-14s %-6s %-20s", kite_op_name(ops[i]), shape, kite_device_name(type),
             def->name);
      if (s == KITE_OK) {
        double gbs = kt_case_bytes(&cases.c[0]) / (tm.us * 1e-6) * 1e-9;
        printf(" %9.1f %8.1f %7.0f%%", tm.us, gbs,
               b.ceiling[d] > 0 ? 100 * gbs / b.ceiling[d] : 0.0);
        if (ref_us > 0)
          printf(" %8.1fx\n", ref_us / tm.us);
        else
          printf(" %9s\n", "-");
      } else {
        printf(" failed: %s\n", tm.msg);
      }
      fflush(stdout);
      kt_release(&r);
    }
    kt_case_list_free(&cases);
  }
  kite_config_set(saved);
  free(saved);
  kt_bench_close(&b);
}
