/*
 * GEMM, grouped GEMM, MoE and quantization: every registered kernel of these ops that runs here
 * against ref (float64), plus the front-ends' argument checks.
 *
 * Each output lives between guard bytes and starts poisoned (all bits set: NaN), so an element
 * left unwritten or a write past the end fails. NMSE bounds, sum((a - b)^2) / sum(b^2):
 *   f32 outputs 1e-9: f32 accumulation over K <= 4096 terms errs about sqrt(K) * 2^-24 per
 *   element relative to the row's scale, NMSE ~ K * 2^-48 = 1.5e-11; 60x headroom.
 *   f16 outputs 1e-6, bf16 1e-5: one output rounding (2^-11 / 2^-8 relative, NMSE about a
 *   tenth of its square) dominates; fused_moe rounds its intermediate too, so 1e-5 / 1e-4.
 * Integer results must be identical: top-k ids, quantized codes and scales (bit for bit), and
 * dequantized values (q * scale is exact in float64, so every backend rounds the same product).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kite/dtype.h"
#include "kite/kite.h"

#define GUARD 64
#define MAX_TENSORS 8

static int g_pass, g_fail;
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static float urand(void) { /* uniform in [-1, 1) */
  g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
  return (float)(g_rng >> 40) * 0x1p-23f - 1.0f;
}

static size_t esize(kite_dtype t) {
  return t == KITE_DTYPE_F32 || t == KITE_DTYPE_I32    ? 4
         : t == KITE_DTYPE_F16 || t == KITE_DTYPE_BF16 ? 2
                                                       : 1;
}

/* A host tensor [rows, cols] (or [g, rows, cols]) with a row stride, inside guard bytes. */
typedef struct tensor {
  DLTensor t;
  int64_t shape[3], strides[3];
  kite_dtype dtype;
  unsigned char *mem; /* GUARD | body | GUARD */
  size_t body;
  int64_t rows, cols, stride, groups;
} tensor;

static tensor *g_live[MAX_TENSORS * 4];
static int g_nlive;

/* ndim 1: [cols]; 2: [rows, cols] with row stride cols + pad; 3: [groups, rows, cols]. */
static tensor *make(kite_dtype t, int ndim, int64_t groups, int64_t rows, int64_t cols,
                    int64_t pad) {
  tensor *x = calloc(1, sizeof *x);
  if (ndim < 3) groups = 1;
  if (ndim < 2) rows = 1, pad = 0;
  x->dtype = t, x->groups = groups, x->rows = rows, x->cols = cols, x->stride = cols + pad;
  const int64_t count = groups * rows * x->stride;
  x->body = (size_t)count * esize(t);
  x->mem = malloc(x->body + 2 * GUARD);
  memset(x->mem, 0xa5, x->body + 2 * GUARD);
  x->t.data = x->mem + GUARD;
  x->t.device = (DLDevice){kDLCPU, 0};
  x->t.dtype = kite_dtype_dlpack(t);
  x->t.ndim = ndim;
  x->t.shape = x->shape;
  x->t.strides = x->strides;
  const int64_t shape[3] = {groups, rows, cols}, strides[3] = {rows * x->stride, x->stride, 1};
  for (int i = 0; i < ndim; i++)
    x->shape[i] = shape[3 - ndim + i], x->strides[i] = strides[3 - ndim + i];
  g_live[g_nlive++] = x;
  return x;
}
static tensor *vec(kite_dtype t, int64_t n) {
  return make(t, 1, 1, 1, n, 0);
}
static tensor *mat(kite_dtype t, int64_t rows, int64_t cols, int64_t pad) {
  return make(t, 2, 1, rows, cols, pad);
}
static tensor *mat3(kite_dtype t, int64_t g, int64_t rows, int64_t cols) {
  return make(t, 3, g, rows, cols, 0);
}

static void release_all(void) {
  for (int i = 0; i < g_nlive; i++) {
    free(g_live[i]->mem);
    free(g_live[i]);
  }
  g_nlive = 0;
}

static void *elem(const tensor *x, int64_t i) { /* flat index over [groups * rows, cols] */
  const int64_t r = i / (x->cols > 0 ? x->cols : 1), c = i % (x->cols > 0 ? x->cols : 1);
  return (unsigned char *)x->t.data + (size_t)(r * x->stride + c) * esize(x->dtype);
}
static int64_t numel(const tensor *x) {
  return x->groups * x->rows * x->cols;
}

static float get(const tensor *x, int64_t i) {
  const void *p = elem(x, i);
  switch (x->dtype) {
  case KITE_DTYPE_I8:
    return *(const int8_t *)p;
  case KITE_DTYPE_I32:
    return (float)*(const int32_t *)p;
  case KITE_DTYPE_FP8_E4M3:
    return kite_fp8_e4m3_to_f32(*(const uint8_t *)p);
  default:
    return kite_load_f32(x->dtype, p, 0);
  }
}

static void set(tensor *x, int64_t i, float v) {
  void *p = elem(x, i);
  switch (x->dtype) {
  case KITE_DTYPE_I8:
    *(int8_t *)p = (int8_t)v;
    break;
  case KITE_DTYPE_I32:
    *(int32_t *)p = (int32_t)v;
    break;
  case KITE_DTYPE_FP8_E4M3:
    *(uint8_t *)p = kite_f32_to_fp8_e4m3(v);
    break;
  default:
    kite_store_f32(x->dtype, p, 0, v);
    break;
  }
}

static void fill(tensor *x, float amp) {
  for (int64_t i = 0; i < numel(x); i++) set(x, i, amp * urand());
}

/* Outputs: every element poisoned (the gaps between rows keep the canary). */
static void poison(tensor *x) {
  for (int64_t i = 0; i < numel(x); i++) memset(elem(x, i), 0xff, esize(x->dtype));
}

/* Bytes outside the elements must still be canaries. */
static int guards_ok(const tensor *x) {
  const size_t es = esize(x->dtype);
  for (size_t i = 0; i < x->body + 2 * GUARD; i++) {
    if (i >= GUARD && i < GUARD + x->body) {
      const size_t off = (i - GUARD) / es;
      if ((int64_t)(off % (size_t)x->stride) < x->cols) continue; /* an element */
    }
    if (x->mem[i] != 0xa5) return 0;
  }
  return 1;
}

/* NMSE of a against b (same shape); +inf when a NaN shows up. */
static double nmse(const tensor *a, const tensor *b) {
  double num = 0.0, den = 0.0;
  for (int64_t i = 0; i < numel(a); i++) {
    const double x = get(a, i), y = get(b, i);
    if (isnan(x) || isnan(y)) return INFINITY;
    num += (x - y) * (x - y), den += y * y;
  }
  return den > 0.0 ? num / den : (num > 1e-20 ? INFINITY : 0.0);
}

static int same_bytes(const tensor *a, const tensor *b) {
  for (int64_t i = 0; i < numel(a); i++)
    if (memcmp(elem(a, i), elem(b, i), esize(a->dtype)) != 0) return 0;
  return 1;
}

static void record(int ok, const char *kernel, const char *what) {
  if (ok) {
    g_pass++;
  } else {
    g_fail++;
    printf("FAIL %s: %s\n", kernel, what);
  }
}

static double float_bound(kite_dtype t, double f32, double f16, double bf16) {
  return t == KITE_DTYPE_F32 ? f32 : t == KITE_DTYPE_F16 ? f16 : bf16;
}

/* ---- the kernels under test ----------------------------------------------------------------- */
typedef struct kernel {
  kite_op op;
  char name[96]; /* "backend.variant" */
} kernel;

static kernel g_kernels[64];
static int g_nkernels;

static void find_kernels(void) {
  const kite_op ops[] = {KITE_OP_LINEAR, KITE_OP_GROUP_GEMM, KITE_OP_TOPK_GATING, KITE_OP_FUSED_MOE,
                         KITE_OP_QUANT,  KITE_OP_DEQUANT,    KITE_OP_LINEAR_QUANT};
  for (size_t i = 0; i < kite_kernel_count(); i++) {
    kite_kernel_info info;
    if (kite_kernel_get(i, &info) != KITE_OK || !info.runs_here) continue;
    if (strcmp(info.backend, "ref") == 0 || info.device_type != kDLCPU) continue;
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
      if (info.op == ops[o] && g_nkernels < 64) {
        g_kernels[g_nkernels].op = info.op;
        snprintf(g_kernels[g_nkernels].name, sizeof g_kernels[0].name, "%s.%s", info.backend,
                 info.variant);
        g_nkernels++;
      }
  }
}

/* Pins op to target; a kernel whose supports() declines the case makes the call UNSUPPORTED,
 * which the caller counts as skipped. */
static void pin(kite_op op, const char *target) {
  char cfg[160];
  snprintf(cfg, sizeof cfg, "%s=%s", kite_op_name(op), target);
  if (kite_config_set(cfg) != KITE_OK) {
    printf("config %s: %s\n", cfg, kite_last_error());
    exit(2);
  }
}

static kite_ctx *g_ctx;

/* ---- cases ------------------------------------------------------------------------------------
 */
static void check_linear(const char *kname, kite_dtype t, int64_t m, int64_t n, int64_t k, int bias,
                         int64_t pad) {
  tensor *x = mat(t, m, k, pad), *w = mat(t, n, k, pad / 2), *b = vec(t, n);
  tensor *y0 = mat(t, m, n, 0), *y1 = mat(t, m, n, pad);
  fill(x, 1.0f), fill(w, 1.0f), fill(b, 1.0f), poison(y0), poison(y1);
  pin(KITE_OP_LINEAR, "ref");
  kite_status s0 = kite_linear(g_ctx, &x->t, &w->t, bias ? &b->t : NULL, &y0->t);
  pin(KITE_OP_LINEAR, kname);
  kite_status s1 = kite_linear(g_ctx, &x->t, &w->t, bias ? &b->t : NULL, &y1->t);
  char what[200];
  if (s1 == KITE_ERR_UNSUPPORTED) return release_all();
  const double e = nmse(y1, y0);
  snprintf(what, sizeof what, "linear %s M=%lld N=%lld K=%lld bias=%d pad=%lld: %s nmse %.3g",
           kite_dtype_name(t), (long long)m, (long long)n, (long long)k, bias, (long long)pad,
           s1 ? kite_last_error() : "", e);
  record(s0 == KITE_OK && s1 == KITE_OK && e <= float_bound(t, 1e-9, 1e-6, 1e-5) && guards_ok(y1),
         kname, what);
  release_all();
}

static void check_group_gemm(const char *kname, kite_dtype t, int64_t m, int64_t n, int64_t k,
                             const int32_t *sizes, int64_t groups) {
  tensor *x = mat(t, m, k, 3), *w = mat3(t, groups, n, k), *gs = vec(KITE_DTYPE_I32, groups);
  tensor *y0 = mat(t, m, n, 0), *y1 = mat(t, m, n, 1);
  fill(x, 1.0f), fill(w, 1.0f), poison(y0), poison(y1);
  for (int64_t g = 0; g < groups; g++) set(gs, g, (float)sizes[g]);
  pin(KITE_OP_GROUP_GEMM, "ref");
  kite_status s0 = kite_group_gemm(g_ctx, &x->t, &w->t, &gs->t, &y0->t);
  pin(KITE_OP_GROUP_GEMM, kname);
  kite_status s1 = kite_group_gemm(g_ctx, &x->t, &w->t, &gs->t, &y1->t);
  if (s1 == KITE_ERR_UNSUPPORTED) return release_all();
  const double e = nmse(y1, y0);
  char what[200];
  snprintf(what, sizeof what, "group_gemm %s M=%lld N=%lld K=%lld G=%lld: %s nmse %.3g",
           kite_dtype_name(t), (long long)m, (long long)n, (long long)k, (long long)groups,
           s1 ? kite_last_error() : "", e);
  record(s0 == KITE_OK && s1 == KITE_OK && e <= float_bound(t, 1e-9, 1e-6, 1e-5) && guards_ok(y1),
         kname, what);
  release_all();
}

static void check_topk(const char *kname, kite_dtype t, int64_t tokens, int64_t experts, int64_t k,
                       int renorm, int ties) {
  tensor *l = mat(t, tokens, experts, 2);
  tensor *w0 = mat(KITE_DTYPE_F32, tokens, k, 0), *w1 = mat(KITE_DTYPE_F32, tokens, k, 1);
  tensor *i0 = mat(KITE_DTYPE_I32, tokens, k, 0), *i1 = mat(KITE_DTYPE_I32, tokens, k, 3);
  fill(l, 4.0f), poison(w0), poison(w1), poison(i0), poison(i1);
  if (ties) /* few distinct values: many exact ties, broken by the lower id */
    for (int64_t i = 0; i < numel(l); i++) set(l, i, floorf(get(l, i)));
  pin(KITE_OP_TOPK_GATING, "ref");
  kite_status s0 = kite_topk_gating(g_ctx, &l->t, k, renorm, &w0->t, &i0->t);
  pin(KITE_OP_TOPK_GATING, kname);
  kite_status s1 = kite_topk_gating(g_ctx, &l->t, k, renorm, &w1->t, &i1->t);
  if (s1 == KITE_ERR_UNSUPPORTED) return release_all();
  const double e = nmse(w1, w0);
  char what[200];
  snprintf(what, sizeof what,
           "topk_gating %s T=%lld E=%lld k=%lld renorm=%d ties=%d: %s nmse %.3g%s",
           kite_dtype_name(t), (long long)tokens, (long long)experts, (long long)k, renorm, ties,
           s1 ? kite_last_error() : "", e, same_bytes(i1, i0) ? "" : " ids differ");
  record(s0 == KITE_OK && s1 == KITE_OK && e <= 1e-10 && same_bytes(i1, i0) && guards_ok(w1) &&
             guards_ok(i1),
         kname, what);
  release_all();
}

static void check_moe(const char *kname, kite_dtype t, int64_t tokens, int64_t h, int64_t inter,
                      int64_t experts, int64_t k, kite_moe_act act) {
  tensor *x = mat(t, tokens, h, 5), *w13 = mat3(t, experts, 2 * inter, h);
  tensor *w2 = mat3(t, experts, h, inter);
  tensor *wt = mat(KITE_DTYPE_F32, tokens, k, 0), *ids = mat(KITE_DTYPE_I32, tokens, k, 2);
  tensor *y0 = mat(t, tokens, h, 0), *y1 = mat(t, tokens, h, 4);
  fill(x, 1.0f), fill(w13, 0.5f), fill(w2, 0.5f), fill(wt, 1.0f), poison(y0), poison(y1);
  for (int64_t i = 0; i < numel(ids); i++) /* ids in [-1, E]: the ends contribute nothing */
    set(ids, i, floorf((urand() * 0.5f + 0.5f) * (float)(experts + 2)) - 1.0f);
  pin(KITE_OP_FUSED_MOE, "ref");
  kite_status s0 = kite_fused_moe(g_ctx, &x->t, &w13->t, &w2->t, &wt->t, &ids->t, act, &y0->t);
  pin(KITE_OP_FUSED_MOE, kname);
  kite_status s1 = kite_fused_moe(g_ctx, &x->t, &w13->t, &w2->t, &wt->t, &ids->t, act, &y1->t);
  if (s1 == KITE_ERR_UNSUPPORTED) return release_all();
  const double e = nmse(y1, y0);
  char what[200];
  snprintf(what, sizeof what,
           "fused_moe %s T=%lld H=%lld I=%lld E=%lld k=%lld act=%d: %s nmse %.3g",
           kite_dtype_name(t), (long long)tokens, (long long)h, (long long)inter,
           (long long)experts, (long long)k, (int)act, s1 ? kite_last_error() : "", e);
  record(s0 == KITE_OK && s1 == KITE_OK && e <= float_bound(t, 1e-9, 1e-5, 1e-4) && guards_ok(y1),
         kname, what);
  release_all();
}

/* kind 0: random; 1: values on rounding ties and exact codes, a zero row, inf/NaN-free;
 * 2: fp8 specials (subnormal range, saturation, zero) through scale = amax / 448. */
static void fill_quant(tensor *x, int kind) {
  fill(x, 3.0f);
  if (kind == 0) return;
  for (int64_t r = 0; r < x->rows; r++)
    for (int64_t c = 0; c < x->cols; c++) {
      const int64_t i = r * x->cols + c;
      float v = get(x, i);
      if (kind == 1) /* amax 127 per row (c == 0), then halves: x / scale lands on .5 exactly */
        v = c == 0 ? 127.0f : (float)((int)(v * 40.0f)) + 0.5f;
      else /* amax 448: codes reach 448, tiny values become e4m3 subnormals or 0 */
        v = c == 0 ? -448.0f : c % 3 == 0 ? v * 1e-2f : c % 3 == 1 ? v * 3e-3f : v * 200.0f;
      if (r == 1) v = 0.0f; /* a zero row: scale 0, codes 0 */
      set(x, i, v);
    }
}

static void check_quant(const char *kname, kite_op op, kite_dtype t, kite_dtype qt, int64_t m,
                        int64_t k, int kind) {
  tensor *x = mat(t, m, k, 3), *q0 = mat(qt, m, k, 0), *q1 = mat(qt, m, k, 2);
  tensor *s0 = vec(KITE_DTYPE_F32, m), *s1 = vec(KITE_DTYPE_F32, m);
  tensor *y0 = mat(t, m, k, 0), *y1 = mat(t, m, k, 1);
  fill_quant(x, kind), poison(q0), poison(q1), poison(s0), poison(s1), poison(y0), poison(y1);
  pin(KITE_OP_QUANT, "ref");
  kite_status a = kite_quant(g_ctx, &x->t, &q0->t, &s0->t), b;
  char what[200];
  if (op == KITE_OP_QUANT) {
    pin(KITE_OP_QUANT, kname);
    b = kite_quant(g_ctx, &x->t, &q1->t, &s1->t);
    if (b == KITE_ERR_UNSUPPORTED) return release_all();
    snprintf(what, sizeof what, "quant %s -> %s M=%lld K=%lld kind=%d: %s%s%s", kite_dtype_name(t),
             kite_dtype_name(qt), (long long)m, (long long)k, kind, b ? kite_last_error() : "",
             same_bytes(q1, q0) ? "" : " codes differ", same_bytes(s1, s0) ? "" : " scales differ");
    record(a == KITE_OK && b == KITE_OK && same_bytes(q1, q0) && same_bytes(s1, s0) &&
               guards_ok(q1) && guards_ok(s1),
           kname, what);
  } else {
    pin(KITE_OP_DEQUANT, "ref");
    kite_status c = kite_dequant(g_ctx, &q0->t, &s0->t, &y0->t);
    pin(KITE_OP_DEQUANT, kname);
    b = kite_dequant(g_ctx, &q0->t, &s0->t, &y1->t);
    if (b == KITE_ERR_UNSUPPORTED) return release_all();
    snprintf(what, sizeof what, "dequant %s -> %s M=%lld K=%lld kind=%d: %s%s", kite_dtype_name(qt),
             kite_dtype_name(t), (long long)m, (long long)k, kind, b ? kite_last_error() : "",
             same_bytes(y1, y0) ? "" : " values differ");
    record(a == KITE_OK && c == KITE_OK && b == KITE_OK && same_bytes(y1, y0) && guards_ok(y1),
           kname, what);
  }
  release_all();
}

static void check_linear_quant(const char *kname, kite_dtype t, kite_dtype qt, int64_t m, int64_t n,
                               int64_t k, int bias) {
  tensor *xq = mat(qt, m, k, 2), *wq = mat(qt, n, k, 1);
  tensor *xs = vec(KITE_DTYPE_F32, m), *ws = vec(KITE_DTYPE_F32, n);
  tensor *b = vec(t, n), *y0 = mat(t, m, n, 0), *y1 = mat(t, m, n, 3);
  /* full code ranges: int8 -128..127, e4m3 up to +-448 */
  for (int64_t i = 0; i < numel(xq); i++)
    set(xq, i, qt == KITE_DTYPE_I8 ? floorf(urand() * 128.0f) : urand() * 448.0f);
  for (int64_t i = 0; i < numel(wq); i++)
    set(wq, i, qt == KITE_DTYPE_I8 ? floorf(urand() * 128.0f) : urand() * 448.0f);
  for (int64_t i = 0; i < m; i++) set(xs, i, 1e-3f * (1.5f + urand()));
  for (int64_t i = 0; i < n; i++) set(ws, i, 1e-3f * (1.5f + urand()));
  fill(b, 1.0f), poison(y0), poison(y1);
  pin(KITE_OP_LINEAR_QUANT, "ref");
  kite_status s0 =
      kite_linear_quant(g_ctx, &xq->t, &xs->t, &wq->t, &ws->t, bias ? &b->t : NULL, &y0->t);
  pin(KITE_OP_LINEAR_QUANT, kname);
  kite_status s1 =
      kite_linear_quant(g_ctx, &xq->t, &xs->t, &wq->t, &ws->t, bias ? &b->t : NULL, &y1->t);
  if (s1 == KITE_ERR_UNSUPPORTED) return release_all();
  const double e = nmse(y1, y0);
  char what[200];
  snprintf(what, sizeof what, "linear_quant %s -> %s M=%lld N=%lld K=%lld bias=%d: %s nmse %.3g",
           kite_dtype_name(qt), kite_dtype_name(t), (long long)m, (long long)n, (long long)k, bias,
           s1 ? kite_last_error() : "", e);
  record(s0 == KITE_OK && s1 == KITE_OK && e <= float_bound(t, 1e-9, 1e-6, 1e-5) && guards_ok(y1),
         kname, what);
  release_all();
}

static void run_kernel(const kernel *kn) {
  static const kite_dtype floats[] = {KITE_DTYPE_F32, KITE_DTYPE_BF16, KITE_DTYPE_F16};
  static const int64_t sizes[] = {1, 3, 17, 64, 127};
  const char *name = kn->name;
  for (int d = 0; d < 3; d++) {
    const kite_dtype t = floats[d];
    switch (kn->op) {
    case KITE_OP_LINEAR:
      /* the cross product of the small sizes, alternating bias and strides */
      for (int a = 0; a < 5; a++)
        for (int b = 0; b < 5; b++)
          for (int c = 0; c < 5; c++)
            if ((a + b + c + d) % 2 == 0)
              check_linear(name, t, sizes[a], sizes[b], sizes[c], (a + c) % 2, (b % 2) * 5);
      /* 4096 in each position, K = 0 (y = bias) */
      check_linear(name, t, 1, 4096, 64, 1, 0);
      check_linear(name, t, 3, 64, 4096, 0, 7);
      check_linear(name, t, 17, 127, 4096, 1, 0);
      check_linear(name, t, 4096, 17, 64, 1, 2);
      check_linear(name, t, 127, 300, 600, 1, 1);
      check_linear(name, t, 16, 33, 2100, 1, 3); /* few rows, several K blocks */
      check_linear(name, t, 9, 17, 1031, 0, 1);
      check_linear(name, t, 6, 50, 77, 1, 2);
      check_linear(name, t, 7, 5, 1030, 0, 0);
      check_linear(name, t, 13, 20, 1030, 1, 0);
      check_linear(name, t, 5, 9, 0, 1, 0);
      check_linear(name, t, 40, 9, 0, 0, 0);
      break;
    case KITE_OP_GROUP_GEMM: {
      const int32_t s1[] = {5, 0, 12, 0, 23}, s2[] = {0, 1, 2}, s3[] = {70, 57, 0, 0},
                    s4[] = {-3, 4, 100}; /* negative counts as empty; rows past M ignored */
      check_group_gemm(name, t, 40, 33, 19, s1, 5);
      check_group_gemm(name, t, 3, 17, 64, s2, 3);
      check_group_gemm(name, t, 127, 64, 127, s3, 4);
      check_group_gemm(name, t, 17, 3, 17, s4, 3);
      check_group_gemm(name, t, 10, 20, 30, s2, 1); /* rows past the sum: zeros */
      break;
    }
    case KITE_OP_TOPK_GATING:
      check_topk(name, t, 17, 8, 2, 1, 0);
      check_topk(name, t, 64, 64, 6, 0, 1);
      check_topk(name, t, 3, 3, 3, 1, 1);
      check_topk(name, t, 1, 127, 1, 0, 0);
      check_topk(name, t, 127, 17, 4, 1, 1);
      break;
    case KITE_OP_FUSED_MOE:
      check_moe(name, t, 1, 64, 48, 4, 2, KITE_MOE_SILU);
      check_moe(name, t, 17, 40, 24, 8, 2, KITE_MOE_GELU);
      check_moe(name, t, 64, 33, 20, 3, 3, KITE_MOE_SILU);
      check_moe(name, t, 3, 17, 0, 3, 2, KITE_MOE_SILU); /* I = 0: y = 0 */
      break;
    case KITE_OP_QUANT:
    case KITE_OP_DEQUANT:
      for (int q = 0; q < 2; q++) {
        const kite_dtype qt = q ? KITE_DTYPE_FP8_E4M3 : KITE_DTYPE_I8;
        check_quant(name, kn->op, t, qt, 17, 127, 0);
        check_quant(name, kn->op, t, qt, 3, 4096, 1);
        check_quant(name, kn->op, t, qt, 4, 64, 2);
        check_quant(name, kn->op, t, qt, 1, 3, 1);
        check_quant(name, kn->op, t, qt, 2, 0, 0);
      }
      break;
    case KITE_OP_LINEAR_QUANT:
      for (int q = 0; q < 2; q++) {
        const kite_dtype qt = q ? KITE_DTYPE_FP8_E4M3 : KITE_DTYPE_I8;
        for (int a = 0; a < 5; a++)
          check_linear_quant(name, t, qt, sizes[a], sizes[(a + 2) % 5], sizes[(a + 3) % 5], a % 2);
        check_linear_quant(name, t, qt, 64, 127, 4096, 1);
        check_linear_quant(name, t, qt, 3, 5, 0, 1);
      }
      break;
    default:
      break;
    }
  }
}

/* ---- the front-ends reject bad arguments with a message ----------------------------------------
 */
static void expect_error(kite_status s, const char *what) {
  char buf[240];
  snprintf(buf, sizeof buf, "%s returned %s (%s)", what, kite_status_name(s), kite_last_error());
  record(s != KITE_OK && kite_last_error()[0] != '\0', "front-end", buf);
}

static void bad_inputs(void) {
  kite_config_set(NULL);
  tensor *x = mat(KITE_DTYPE_F32, 4, 8, 0), *w = mat(KITE_DTYPE_F32, 6, 8, 0);
  tensor *y = mat(KITE_DTYPE_F32, 4, 6, 0), *wrong = mat(KITE_DTYPE_F32, 4, 5, 0);
  tensor *xb = mat(KITE_DTYPE_BF16, 4, 8, 0), *b5 = vec(KITE_DTYPE_F32, 5);
  tensor *w3 = mat3(KITE_DTYPE_F32, 2, 6, 8), *gs = vec(KITE_DTYPE_I32, 2);
  tensor *gsf = vec(KITE_DTYPE_F32, 2), *l = mat(KITE_DTYPE_F32, 4, 8, 0);
  tensor *tw = mat(KITE_DTYPE_F32, 4, 2, 0), *ti = mat(KITE_DTYPE_I32, 4, 2, 0);
  tensor *q = mat(KITE_DTYPE_I8, 4, 8, 0), *s = vec(KITE_DTYPE_F32, 4);
  tensor *q32 = mat(KITE_DTYPE_I32, 4, 8, 0), *ws6 = vec(KITE_DTYPE_F32, 6);
  tensor *w13 = mat3(KITE_DTYPE_F32, 3, 10, 8), *w2 = mat3(KITE_DTYPE_F32, 3, 8, 5);
  tensor *w2bad = mat3(KITE_DTYPE_F32, 3, 8, 4), *ym = mat(KITE_DTYPE_F32, 4, 8, 0);
  tensor *ym2 = mat(KITE_DTYPE_F32, 4, 8, 0);
  fill(x, 1), fill(w, 1), fill(xb, 1), fill(w3, 1), fill(l, 1);
  set(gs, 0, 2), set(gs, 1, 2);
  expect_error(kite_linear(NULL, &x->t, &w->t, NULL, &y->t), "linear: NULL ctx");
  expect_error(kite_linear(g_ctx, NULL, &w->t, NULL, &y->t), "linear: NULL x");
  expect_error(kite_linear(g_ctx, &x->t, &w->t, NULL, &wrong->t), "linear: y of the wrong shape");
  expect_error(kite_linear(g_ctx, &xb->t, &w->t, NULL, &y->t), "linear: mixed dtypes");
  expect_error(kite_linear(g_ctx, &x->t, &w->t, &b5->t, &y->t), "linear: bias of the wrong length");
  expect_error(kite_linear(g_ctx, &x->t, &w3->t, NULL, &y->t), "linear: rank-3 w");
  expect_error(kite_linear(g_ctx, &x->t, &w->t, NULL, &x->t), "linear: y is x");
  expect_error(kite_group_gemm(g_ctx, &x->t, &w->t, &gs->t, &y->t), "group_gemm: rank-2 w");
  expect_error(kite_group_gemm(g_ctx, &x->t, &w3->t, &gsf->t, &y->t), "group_gemm: f32 sizes");
  expect_error(kite_topk_gating(g_ctx, &l->t, 0, 1, &tw->t, &ti->t), "topk_gating: k = 0");
  expect_error(kite_topk_gating(g_ctx, &l->t, 9, 1, &tw->t, &ti->t), "topk_gating: k > E");
  expect_error(kite_topk_gating(g_ctx, &l->t, 2, 1, &ti->t, &ti->t), "topk_gating: i32 weights");
  expect_error(kite_quant(g_ctx, &x->t, &q32->t, &s->t), "quant: i32 codes");
  expect_error(kite_quant(g_ctx, &x->t, &q->t, &ws6->t), "quant: scales of the wrong length");
  expect_error(kite_dequant(g_ctx, &q->t, &s->t, &q32->t), "dequant: int8 y");
  expect_error(kite_linear_quant(g_ctx, &q->t, &s->t, &x->t, &ws6->t, NULL, &y->t),
               "linear_quant: float weights");
  expect_error(
      kite_fused_moe(g_ctx, &ym->t, &w13->t, &w2bad->t, &tw->t, &ti->t, KITE_MOE_SILU, &ym2->t),
      "fused_moe: w2 [E, H, I] mismatch");
  expect_error(
      kite_fused_moe(g_ctx, &ym->t, &w13->t, &w2->t, &tw->t, &ti->t, (kite_moe_act)7, &ym2->t),
      "fused_moe: bad act");
  release_all();
}

int main(void) {
  kite_ctx_params p = kite_ctx_params_default();
  p.num_threads = 2;
  if (kite_ctx_create(&p, &g_ctx) != KITE_OK) {
    printf("ctx: %s\n", kite_last_error());
    return 1;
  }
  find_kernels();
  for (int i = 0; i < g_nkernels; i++) run_kernel(&g_kernels[i]);
  bad_inputs();
  kite_config_set(NULL);
  kite_ctx_destroy(g_ctx);
  printf("%d kernels; %d passed, %d failed\n", g_nkernels, g_pass, g_fail);
  return g_fail != 0;
}
