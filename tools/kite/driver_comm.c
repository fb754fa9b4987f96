/*
 * Drivers of the collectives at one rank: kite check and kite bench run in one process with one
 * ctx per device, so each call runs on a comm of one rank (all_reduce and reduce_scatter copy,
 * all_gather copies, all_reduce_add_rms_norm is add_rms_norm of x). What they check is each
 * backend's path through its communication library (dtypes, in place, the fused norm on the
 * reduced buffer) against ref, with poisoned outputs and canaries; sums over several ranks are
 * tests/test_comm.c's.
 */
#include <stdio.h>
#include <string.h>

#include "driver.h"
#include "util.h"

static int comm_has(kite_op op) {
  return op == KITE_OP_ALL_REDUCE || op == KITE_OP_ALL_GATHER || op == KITE_OP_REDUCE_SCATTER ||
         op == KITE_OP_ALL_REDUCE_ADD_RMS_NORM;
}

static int is_fused(kite_op op) {
  return op == KITE_OP_ALL_REDUCE_ADD_RMS_NORM;
}

/* One comm of one rank per (ctx, device), made at the ctx's first call and kept for the life of
 * the process: a communicator costs far more to make than a call. */
static kite_comm *comm_for(kite_ctx *ctx) {
  static struct {
    kite_ctx *ctx;
    DLDevice dev;
    kite_comm *comm;
  } cache[16];
  static int n;
  DLDevice dev = kite_ctx_device(ctx);
  for (int i = 0; i < n; i++)
    if (cache[i].ctx == ctx && cache[i].dev.device_type == dev.device_type &&
        cache[i].dev.device_id == dev.device_id)
      return cache[i].comm;
  kite_comm *c = NULL;
  if (kite_comm_create_all(&ctx, 1, &c) != KITE_OK) return NULL;
  if (n < (int)(sizeof cache / sizeof cache[0])) {
    cache[n].ctx = ctx;
    cache[n].dev = dev;
    cache[n++].comm = c;
  }
  return c;
}

static void comm_shape(const kt_case *c, char *buf, size_t n) {
  snprintf(buf, n, "%lldx%lld", (long long)c->rows, (long long)c->cols);
}

static void comm_describe(const kt_case *c, char *buf, size_t n) {
  size_t len = 0;
  buf[0] = '\0';
  kt_cat(buf, n, &len, "%lldx%lld 1 rank", (long long)c->rows, (long long)c->cols);
  if (is_fused(c->op)) {
    kt_cat(buf, n, &len, " %s%s off=%g", c->pos == KITE_NORM_PRE ? "pre" : "post",
           c->with_w ? " w" : "", (double)c->offset);
    if (c->pad_x) kt_cat(buf, n, &len, " res+%lld", (long long)c->pad_x);
    if (c->pad_y) kt_cat(buf, n, &len, " y+%lld", (long long)c->pad_y);
  }
  if (c->inplace) kt_cat(buf, n, &len, " inplace");
}

static void comm_plan(kt_run *r, const kt_case *c) {
  const kite_dtype t = c->dtype;
  const float lo = c->shift - c->amp, hi = c->shift + c->amp;
  const int64_t R = c->rows, C = c->cols;
  int x = kt_bind(r, "x", kt_add_matrix(r, "x", t, c->inplace ? KT_INOUT : KT_IN, R, C, 0, lo, hi));
  if (!is_fused(c->op)) {
    kt_bind(r, "y", c->inplace ? x : kt_add_matrix(r, "y", t, KT_OUT, R, C, 0, 0, 0));
    return;
  }
  kt_bind(r, "residual", kt_add_matrix(r, "residual", t, KT_INOUT, R, C, c->pad_x, lo, hi));
  kt_bind(r, "y", c->inplace ? x : kt_add_matrix(r, "y", t, KT_OUT, R, C, c->pad_y, 0, 0));
  if (c->with_w) {
    const int64_t shape[1] = {C};
    kt_bind(r, "w", kt_add_tensor(r, "w", t, KT_IN, 1, shape, KT_FILL_UNIFORM, 0.5f, 1.5f));
  }
}

/* ---- the call ---------------------------------------------------------------------------- */

static kite_comm *comm_of(kt_run *r) {
  return comm_for(r->ctx);
}

KT_SCALARS(comm_scalar, KT_FIELD("eps", 'f', eps), KT_FIELD("offset", 'f', offset),
           KT_FIELD("pos", 'i', pos))

typedef struct shape2 {
  int64_t rows, cols;
} shape2;
static const shape2 g_sizes[] = {{0, 64}, {1, 1}, {3, 17}, {4, 1000}, {2, 4096}, {64, 8192}};
static const shape2 g_quick_sizes[] = {{0, 64}, {3, 17}, {2, 4096}};

static void comm_check_cases(kite_op op, kite_dtype t, int quick, kt_case_list *l) {
  const shape2 *s = quick ? g_quick_sizes : g_sizes;
  const int ns = quick ? 3 : (int)(sizeof g_sizes / sizeof g_sizes[0]);
  for (int i = 0; i < ns; i++) {
    kt_case base = kt_case_default(op, t, s[i].rows, s[i].cols), c;
    base.eps = 1e-5f;
    for (int ip = 0; ip < 2; ip++) {
      base.inplace = ip;
      if (!is_fused(op)) {
        kt_case_push(l, base);
        continue;
      }
      c = base, kt_case_push(l, c);
      c = base, c.pos = KITE_NORM_POST, c.offset = 1.0f, c.pad_x = 3, kt_case_push(l, c);
      c = base, c.with_w = 0, c.pad_y = ip ? 0 : 5, kt_case_push(l, c);
    }
  }
}

/* Decode and prefill sizes of a tensor-parallel layer's output: tokens x hidden. */
static void comm_bench_cases(kite_op op, kite_dtype t, int llm, kt_case_list *l) {
  static const shape2 llm_sizes[] = {{1, 4096}, {16, 4096}, {64, 8192}, {512, 8192}};
  if (!llm) {
    kt_case_push(l, kt_case_default(op, t, 16, 4096));
    return;
  }
  for (size_t i = 0; i < sizeof llm_sizes / sizeof llm_sizes[0]; i++) {
    kt_case c = kt_case_default(op, t, llm_sizes[i].rows, llm_sizes[i].cols);
    c.eps = 1e-5f;
    kt_case_push(l, c);
  }
}

/* At one rank: x read and y written; the fused op also reads and writes the residual and reads
 * w. */
static double comm_bytes(const kt_case *c) {
  const double n = (double)c->rows * (double)c->cols, es = (double)kite_dtype_size(c->dtype);
  if (!is_fused(c->op)) return 2 * n * es;
  return (4 * n + (c->with_w ? (double)c->cols : 0)) * es;
}

/* Copies are exact; the fused norm is add_rms_norm's bound. */
static double comm_bound(kite_op op, kite_dtype t) {
  (void)op;
  return t == KITE_DTYPE_F16 ? 1e-6 : t == KITE_DTYPE_BF16 ? 1e-4 : 1e-10;
}

const kt_family_ops kt_family_comm = {KT_FAMILY_FIELDS(comm, comm_has, NULL), .comm = comm_of};
