/*
 * The check of the oracle itself: every ref backward op against central finite differences of
 * ref's forward ops (kt_fd_check). The drivers of the backward ops live with their forward
 * families (driver_act.c, driver_norm.c, driver_core.c, driver_loss.c, driver_moe.c).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "families.h"
#include "rows.h"
#include "util.h"

/* On small f32 shapes, every op pinned to ref: for a loss L = sum(dy * forward outputs) (dy
 * fixed and random), each input element x_i is moved both ways, x_i +- h with h = 2^-8, and
 * (L(+) - L(-)) / (x+ - x-) (the moved values as f32 holds them; L summed in double) is that
 * element's gradient by central differences. The backward op's gradient must match it:
 * NMSE <= FD_BOUND over the tensor (the f32 rounding of the forward's outputs, about 1e-7
 * relative, divided by 2h, and h^2 truncation leave NMSE near 1e-8). Inputs stay 0.05 away from
 * kinks (relu at 0, a gated clamp at +-limit), where differences do not tell the gradient. */

#define FD_H 0x1p-8
#define FD_BOUND 1e-5
#define FD_MAX 64 /* elements per tensor */

typedef struct fd_t {
  float p[FD_MAX];
  int64_t shape[4];
  int ndim;
  int64_t n;
} fd_t;

/* A compact f32 tensor of up to 3 dims; NULL data pointer never (p is inline). */
static void fd_make(fd_t *t, int ndim, int64_t a, int64_t b, int64_t c) {
  memset(t, 0, sizeof *t);
  t->ndim = ndim, t->shape[0] = a, t->shape[1] = b, t->shape[2] = c;
  t->n = a * (ndim > 1 ? b : 1) * (ndim > 2 ? c : 1);
}

static DLTensor fd_dl(fd_t *t) {
  DLTensor d = {.data = t->p,
                .device = {kDLCPU, 0},
                .ndim = t->ndim,
                .dtype = {kDLFloat, 32, 1},
                .shape = t->shape,
                .strides = NULL,
                .byte_offset = 0};
  return d;
}

static void fd_fill(fd_t *t, uint64_t seed, float lo, float hi) {
  for (int64_t i = 0; i < t->n; i++) t->p[i] = lo + (hi - lo) * kt_unit(seed, (uint64_t)i);
}

/* Moves values within 0.05 of a kink k out to k +- 0.05. */
static void fd_avoid(fd_t *t, float k) {
  for (int64_t i = 0; i < t->n; i++)
    if (fabsf(t->p[i] - k) < 0.05f) t->p[i] = t->p[i] < k ? k - 0.05f : k + 0.05f;
}

static double fd_dot(const fd_t *a, const fd_t *b) {
  double s = 0;
  for (int64_t i = 0; i < a->n; i++) s += (double)a->p[i] * b->p[i];
  return s;
}

/* One finite-difference problem: the op's inputs and the upstream gradients. */
typedef struct fd_case {
  kite_ctx *ctx;
  kite_op op;  /* the backward op checked */
  kite_op act; /* activations */
  int variant; /* norms: 1 = fused pre rule; ce / flce: option set */
  float limit, eps, offset, scale;
  kite_ce_opts ce;
  fd_t x, w, b, res, q, k, ids, dy, dy2, out, out2, pos, cs;
  int32_t idv[FD_MAX];
  /* attention: k, x = v, w = a float mask or bmask a bool one (variant 1), b = the sinks [Hq]
   * when sinks is set; varlen: idv holds cu_seqlens_q then cu_seqlens_k (nseq + 1 each) */
  kite_attn_opts attn;
  int sinks;
  uint8_t bmask[FD_MAX];
  int nseq;
  int64_t cu_shape[1];
} fd_case;

/* cu_seqlens_q (which 0) or cu_seqlens_k (1) of a varlen case: nseq + 1 int32 in idv. */
static DLTensor fd_cu(fd_case *f, int which) {
  f->cu_shape[0] = f->nseq + 1;
  DLTensor d = {.data = f->idv + which * (f->nseq + 1),
                .device = {kDLCPU, 0},
                .ndim = 1,
                .dtype = {kDLInt, 32, 1},
                .shape = f->cu_shape};
  return d;
}

/* L for the current inputs, through ref's forward op; NaN when the call fails. */
static double fd_loss(fd_case *f) {
  kite_status s = KITE_ERR_INTERNAL;
  DLTensor x = fd_dl(&f->x), w = fd_dl(&f->w), b = fd_dl(&f->b), y = fd_dl(&f->out);
  switch (f->op) {
  case KITE_OP_ACTIVATION_BACKWARD:
    switch (f->act) {
    case KITE_OP_SILU:
      s = kite_silu(f->ctx, &x, &y);
      break;
    case KITE_OP_GELU:
      s = kite_gelu(f->ctx, &x, &y);
      break;
    case KITE_OP_GELU_TANH:
      s = kite_gelu_tanh(f->ctx, &x, &y);
      break;
    case KITE_OP_GELU_QUICK:
      s = kite_gelu_quick(f->ctx, &x, &y);
      break;
    default:
      s = kite_relu(f->ctx, &x, &y);
      break;
    }
    break;
  case KITE_OP_GATED_BACKWARD:
    s = f->act == KITE_OP_SILU_AND_MUL   ? kite_silu_and_mul(f->ctx, &x, f->limit, &y)
        : f->act == KITE_OP_GELU_AND_MUL ? kite_gelu_and_mul(f->ctx, &x, f->limit, &y)
                                         : kite_gelu_tanh_and_mul(f->ctx, &x, f->limit, &y);
    break;
  case KITE_OP_RMS_NORM_BACKWARD:
  case KITE_OP_LAYER_NORM_BACKWARD: {
    const int rms = f->op == KITE_OP_RMS_NORM_BACKWARD;
    if (f->variant) { /* pre rule: residual <- x + residual, y = norm(that) */
      fd_t res = f->res;
      DLTensor r = fd_dl(&res);
      s = rms ? kite_add_rms_norm(f->ctx, &x, &r, &w, f->eps, f->offset, KITE_NORM_PRE, &y)
              : kite_add_layer_norm(f->ctx, &x, &r, &w, &b, f->eps, KITE_NORM_PRE, &y);
      if (s != KITE_OK) return NAN;
      return fd_dot(&f->dy, &f->out) + fd_dot(&f->dy2, &res);
    }
    s = rms ? kite_rms_norm(f->ctx, &x, &w, f->eps, f->offset, &y)
            : kite_layer_norm(f->ctx, &x, &w, &b, f->eps, &y);
    break;
  }
  case KITE_OP_ROPE_BACKWARD: {
    fd_t q = f->q, k = f->k;
    DLTensor qd = fd_dl(&q), kd = fd_dl(&k), p = fd_dl(&f->pos), c = fd_dl(&f->cs);
    p.data = f->idv, p.dtype = (DLDataType){kDLInt, 32, 1};
    s = kite_rope(f->ctx, &qd, &kd, &p, &c, f->cs.shape[1],
                  f->variant ? KITE_ROPE_GPTJ : KITE_ROPE_NEOX);
    if (s != KITE_OK) return NAN;
    return fd_dot(&f->dy, &q) + fd_dot(&f->dy2, &k);
  }
  case KITE_OP_SOFTMAX_BACKWARD:
    s = kite_softmax(f->ctx, &x, f->scale, &y);
    break;
  case KITE_OP_EMBEDDING_BACKWARD: {
    DLTensor ids = fd_dl(&f->ids);
    ids.data = f->idv, ids.dtype = (DLDataType){kDLInt, 32, 1};
    s = kite_embedding(f->ctx, &ids, &w, &y);
    break;
  }
  case KITE_OP_CROSS_ENTROPY_BACKWARD:
  case KITE_OP_FUSED_LINEAR_CROSS_ENTROPY: {
    DLTensor tg = fd_dl(&f->ids);
    tg.data = f->idv, tg.dtype = (DLDataType){kDLInt, 32, 1};
    if (f->op == KITE_OP_CROSS_ENTROPY_BACKWARD) {
      s = kite_cross_entropy(f->ctx, &x, &tg, &f->ce, &y, NULL);
    } else {
      kite_flce_opts o = {.ce = f->ce, .chunk_bytes = 0};
      s = kite_fused_linear_cross_entropy(f->ctx, &x, &w, &b, &tg, &o, &y, NULL, NULL, NULL);
    }
    break;
  }
  case KITE_OP_SDPA_BACKWARD:
  case KITE_OP_SDPA_VARLEN_BACKWARD: {
    DLTensor q = fd_dl(&f->q), k = fd_dl(&f->k), m = fd_dl(&f->w);
    const DLTensor *sinks = f->sinks ? &b : NULL;
    if (f->op == KITE_OP_SDPA_VARLEN_BACKWARD) {
      DLTensor cq = fd_cu(f, 0), ck = fd_cu(f, 1);
      s = kite_sdpa_varlen(f->ctx, &q, &k, &x, &cq, &ck, 16, 16, sinks, &f->attn, &y, NULL);
      break;
    }
    if (f->variant == 1) m.data = f->bmask, m.dtype = (DLDataType){KITE_DL_BOOL, 8, 1};
    s = kite_sdpa(f->ctx, &q, &k, &x, &m, sinks, &f->attn, &y, NULL);
    break;
  }
  case KITE_OP_MOE_AUX_LOSS_BACKWARD: {
    DLTensor ids = fd_dl(&f->ids), mask = fd_dl(&f->w);
    ids.data = f->idv, ids.dtype = (DLDataType){kDLInt, 32, 1};
    s = kite_moe_aux_loss(f->ctx, &x, &ids, f->variant ? &mask : NULL, &y);
    break;
  }
  default:
    break;
  }
  return s == KITE_OK ? fd_dot(&f->dy, &f->out) : NAN;
}

/* NMSE of grad against the central differences of L over the elements of x. */
static double fd_nmse(fd_case *f, fd_t *x, const fd_t *grad) {
  double sd = 0, sb = 0;
  for (int64_t i = 0; i < x->n; i++) {
    const float x0 = x->p[i], xp = (float)(x0 + FD_H), xm = (float)(x0 - FD_H);
    x->p[i] = xp;
    const double lp = fd_loss(f);
    x->p[i] = xm;
    const double lm = fd_loss(f);
    x->p[i] = x0;
    const double fd = (lp - lm) / ((double)xp - (double)xm), d = fd - grad->p[i];
    sd += d * d, sb += fd * fd;
  }
  return sb > 0 ? sd / sb : sd;
}

typedef struct fd_report {
  int verbose, *passed, *failed;
} fd_report;

static void fd_judge(const fd_report *rp, const fd_case *f, const char *what, const char *arg,
                     kite_status s, double nmse) {
  const int ok = s == KITE_OK && nmse <= FD_BOUND;
  ok ? ++*rp->passed : ++*rp->failed;
  if (ok && !rp->verbose) return;
  printf("%s %-18s %-20s cpu  f32  [finite differences: %s, d%s]", ok ? "ok  " : "FAIL",
         kite_op_name(f->op), "ref.generic", what, arg);
  if (s != KITE_OK)
    printf(": %s: %s\n", kite_status_name(s), kite_last_error());
  else
    printf(" nmse=%.2e%s\n", nmse, ok ? "" : " above the finite-difference bound");
  fflush(stdout);
}

static void fd_act(const fd_report *rp, kite_ctx *ctx, kite_op bwd, kite_op act, float limit,
                   uint64_t seed) {
  fd_case f = {.ctx = ctx, .op = bwd, .act = act, .limit = limit};
  const int g = bwd == KITE_OP_GATED_BACKWARD;
  fd_make(&f.x, 2, 3, g ? 10 : 7, 0);
  fd_fill(&f.x, seed, -2.5f, 2.5f);
  if (act == KITE_OP_RELU) fd_avoid(&f.x, 0.0f);
  if (limit > 0) fd_avoid(&f.x, limit), fd_avoid(&f.x, -limit);
  fd_make(&f.dy, 2, 3, g ? 5 : 7, 0);
  fd_make(&f.out, 2, 3, g ? 5 : 7, 0);
  fd_fill(&f.dy, seed + 1, -1, 1);
  fd_t dx = f.x;
  DLTensor X = fd_dl(&f.x), DY = fd_dl(&f.dy), DX = fd_dl(&dx);
  kite_status s = g ? kite_gated_backward(ctx, act, &X, &DY, limit, &DX)
                    : kite_activation_backward(ctx, act, &X, &DY, &DX);
  char what[64];
  snprintf(what, sizeof what, "%s%s", kite_op_name(act), limit > 0 ? " limit=1" : "");
  fd_judge(rp, &f, what, "x", s, s == KITE_OK ? fd_nmse(&f, &f.x, &dx) : 0);
}

static void fd_norm(const fd_report *rp, kite_ctx *ctx, kite_op bwd, int pre, float offset,
                    uint64_t seed) {
  const int rms = bwd == KITE_OP_RMS_NORM_BACKWARD;
  fd_case f = {.ctx = ctx, .op = bwd, .variant = pre, .eps = 1e-5f, .offset = offset};
  fd_make(&f.x, 2, 3, 9, 0);
  fd_fill(&f.x, seed, -1.0f, 1.5f);
  fd_make(&f.res, 2, 3, 9, 0);
  fd_fill(&f.res, seed + 5, -1, 1);
  fd_make(&f.w, 1, 9, 0, 0);
  fd_fill(&f.w, seed + 2, -1, 1);
  fd_make(&f.b, 1, 9, 0, 0);
  fd_fill(&f.b, seed + 3, -1, 1);
  fd_make(&f.dy, 2, 3, 9, 0), fd_fill(&f.dy, seed + 4, -1, 1);
  fd_make(&f.dy2, 2, 3, 9, 0), fd_fill(&f.dy2, seed + 6, -1, 1);
  fd_make(&f.out, 2, 3, 9, 0);
  /* the backward's input: the norm's input (for the pre rule, s = x + residual) */
  fd_t in = f.x, dx = f.x, dw = f.w, db = f.b;
  if (pre)
    for (int64_t i = 0; i < in.n; i++) in.p[i] = f.x.p[i] + f.res.p[i];
  DLTensor IN = fd_dl(&in), W = fd_dl(&f.w), DY = fd_dl(&f.dy), DR = fd_dl(&f.dy2);
  DLTensor DX = fd_dl(&dx), DW = fd_dl(&dw), DB = fd_dl(&db);
  kite_status s;
  if (rms)
    s = pre ? kite_add_rms_norm_backward(ctx, &IN, &W, &DY, &DR, f.eps, offset, &DX, &DW)
            : kite_rms_norm_backward(ctx, &IN, &W, &DY, f.eps, offset, &DX, &DW);
  else
    s = pre ? kite_add_layer_norm_backward(ctx, &IN, &W, &DY, &DR, f.eps, &DX, &DW, &DB)
            : kite_layer_norm_backward(ctx, &IN, &W, &DY, f.eps, &DX, &DW, &DB);
  char what[64];
  snprintf(what, sizeof what, "%s%s offset=%g", rms ? "rms" : "layer", pre ? " pre+dres" : "",
           (double)offset);
  fd_judge(rp, &f, what, "x", s, s == KITE_OK ? fd_nmse(&f, &f.x, &dx) : 0);
  fd_judge(rp, &f, what, "w", s, s == KITE_OK ? fd_nmse(&f, &f.w, &dw) : 0);
  if (!rms) fd_judge(rp, &f, what, "b", s, s == KITE_OK ? fd_nmse(&f, &f.b, &db) : 0);
}

static void fd_rope(const fd_report *rp, kite_ctx *ctx, int gptj, uint64_t seed) {
  fd_case f = {.ctx = ctx, .op = KITE_OP_ROPE_BACKWARD, .variant = gptj};
  fd_make(&f.q, 3, 2, 2, 8), fd_fill(&f.q, seed, -1, 1);
  fd_make(&f.k, 3, 2, 1, 8), fd_fill(&f.k, seed + 1, -1, 1);
  fd_make(&f.dy, 3, 2, 2, 8), fd_fill(&f.dy, seed + 2, -1, 1);
  fd_make(&f.dy2, 3, 2, 1, 8), fd_fill(&f.dy2, seed + 3, -1, 1);
  fd_make(&f.pos, 1, 2, 0, 0);
  f.idv[0] = 3, f.idv[1] = 6; /* the positions */
  fd_make(&f.cs, 2, 8, 6, 0);
  kite_status s = kite_rope_cache_build(f.cs.p, 8, 6, 100.0, NULL);
  fd_t dq = f.dy, dk = f.dy2;
  DLTensor DQ = fd_dl(&dq), DK = fd_dl(&dk), P = fd_dl(&f.pos), C = fd_dl(&f.cs);
  P.data = f.idv, P.dtype = (DLDataType){kDLInt, 32, 1};
  if (s == KITE_OK)
    s = kite_rope_backward(ctx, &DQ, &DK, &P, &C, 6, gptj ? KITE_ROPE_GPTJ : KITE_ROPE_NEOX);
  const char *what = gptj ? "gptj rot=6 of D=8" : "neox rot=6 of D=8";
  fd_judge(rp, &f, what, "q", s, s == KITE_OK ? fd_nmse(&f, &f.q, &dq) : 0);
  fd_judge(rp, &f, what, "k", s, s == KITE_OK ? fd_nmse(&f, &f.k, &dk) : 0);
}

static void fd_softmax(const fd_report *rp, kite_ctx *ctx, uint64_t seed) {
  fd_case f = {.ctx = ctx, .op = KITE_OP_SOFTMAX_BACKWARD, .scale = 0.7f};
  fd_make(&f.x, 2, 3, 7, 0), fd_fill(&f.x, seed, -3, 3);
  fd_make(&f.dy, 2, 3, 7, 0), fd_fill(&f.dy, seed + 1, -1, 1);
  fd_make(&f.out, 2, 3, 7, 0);
  fd_t y = f.out, dx = f.x;
  DLTensor X = fd_dl(&f.x), Y = fd_dl(&y), DY = fd_dl(&f.dy), DX = fd_dl(&dx);
  kite_status s = kite_softmax(ctx, &X, f.scale, &Y);
  if (s == KITE_OK) s = kite_softmax_backward(ctx, &Y, &DY, f.scale, &DX);
  fd_judge(rp, &f, "scale=0.7 (from y)", "x", s, s == KITE_OK ? fd_nmse(&f, &f.x, &dx) : 0);
}

static void fd_embedding(const fd_report *rp, kite_ctx *ctx, uint64_t seed) {
  fd_case f = {.ctx = ctx, .op = KITE_OP_EMBEDDING_BACKWARD};
  static const int32_t ids[6] = {2, 0, 2, -1, 5, 3}; /* repeats; -1 and 5 outside [0, 4) */
  memcpy(f.idv, ids, sizeof ids);
  fd_make(&f.ids, 1, 6, 0, 0);
  fd_make(&f.w, 2, 4, 3, 0), fd_fill(&f.w, seed, -1, 1);
  fd_make(&f.dy, 2, 6, 3, 0), fd_fill(&f.dy, seed + 1, -1, 1);
  fd_make(&f.out, 2, 6, 3, 0);
  fd_t dt = f.w;
  DLTensor I = fd_dl(&f.ids), DY = fd_dl(&f.dy), DT = fd_dl(&dt);
  I.data = f.idv, I.dtype = (DLDataType){kDLInt, 32, 1};
  kite_status s = kite_embedding_backward(ctx, &I, &DY, &DT);
  fd_judge(rp, &f, "T=6 V=4 H=3, repeated and bad ids", "table", s,
           s == KITE_OK ? fd_nmse(&f, &f.w, &dt) : 0);
}

/* Option sets of the losses: 0 plain mean, 1 sum with smoothing and z-loss, 2 none with a
 * softcap, 3 mean with everything. */
static kite_ce_opts fd_ce_opts(int v) {
  kite_ce_opts o = kite_ce_opts_default();
  o.ignore_index = 1;
  if (v == 1) o.reduction = KITE_REDUCTION_SUM, o.label_smoothing = 0.2f, o.z_loss = 0.05f;
  if (v == 2) o.reduction = KITE_REDUCTION_NONE, o.softcap = 2.0f;
  if (v == 3) o.label_smoothing = 0.1f, o.z_loss = 0.02f, o.softcap = 3.0f;
  return o;
}

static void fd_ce(const fd_report *rp, kite_ctx *ctx, int v, uint64_t seed) {
  fd_case f = {.ctx = ctx, .op = KITE_OP_CROSS_ENTROPY_BACKWARD, .variant = v};
  f.ce = fd_ce_opts(v);
  static const int32_t tg[4] = {4, 1, 0, 5}; /* row 1 is ignored (ignore_index 1) */
  memcpy(f.idv, tg, sizeof tg);
  fd_make(&f.ids, 1, 4, 0, 0);
  fd_make(&f.x, 2, 4, 6, 0), fd_fill(&f.x, seed, -3, 3);
  const int64_t nl = f.ce.reduction == KITE_REDUCTION_NONE ? 4 : 1;
  fd_make(&f.out, 1, nl, 0, 0), fd_make(&f.dy, 1, nl, 0, 0), fd_fill(&f.dy, seed + 1, 0.5f, 1.5f);
  fd_t lse, dx = f.x;
  fd_make(&lse, 1, 4, 0, 0);
  DLTensor X = fd_dl(&f.x), T = fd_dl(&f.ids), L = fd_dl(&f.out), E = fd_dl(&lse);
  DLTensor DL = fd_dl(&f.dy), DX = fd_dl(&dx);
  T.data = f.idv, T.dtype = (DLDataType){kDLInt, 32, 1};
  kite_status s = kite_cross_entropy(ctx, &X, &T, &f.ce, &L, &E);
  if (s == KITE_OK) s = kite_cross_entropy_backward(ctx, &X, &T, &E, &DL, &f.ce, &DX);
  char what[96];
  snprintf(what, sizeof what, "%s ls=%g z_loss=%g softcap=%g, a row ignored",
           kt_reduction_name(f.ce.reduction), (double)f.ce.label_smoothing, (double)f.ce.z_loss,
           (double)f.ce.softcap);
  fd_judge(rp, &f, what, "logits", s, s == KITE_OK ? fd_nmse(&f, &f.x, &dx) : 0);
}

static void fd_flce(const fd_report *rp, kite_ctx *ctx, int v, uint64_t seed) {
  fd_case f = {.ctx = ctx, .op = KITE_OP_FUSED_LINEAR_CROSS_ENTROPY, .variant = v};
  f.ce = fd_ce_opts(v);
  static const int32_t tg[3] = {6, 1, 0};
  memcpy(f.idv, tg, sizeof tg);
  fd_make(&f.ids, 1, 3, 0, 0);
  fd_make(&f.x, 2, 3, 5, 0), fd_fill(&f.x, seed, -1, 1);
  fd_make(&f.w, 2, 7, 5, 0), fd_fill(&f.w, seed + 1, -1, 1);
  fd_make(&f.b, 1, 7, 0, 0), fd_fill(&f.b, seed + 2, -1, 1);
  const int64_t nl = f.ce.reduction == KITE_REDUCTION_NONE ? 3 : 1;
  fd_make(&f.out, 1, nl, 0, 0), fd_make(&f.dy, 1, nl, 0, 0);
  for (int64_t i = 0; i < nl; i++) f.dy.p[i] = 1.0f; /* the gradients are of sum(loss) */
  fd_t dh = f.x, dw = f.w, db = f.b;
  DLTensor H = fd_dl(&f.x), W = fd_dl(&f.w), B = fd_dl(&f.b), T = fd_dl(&f.ids), L = fd_dl(&f.out);
  DLTensor DH = fd_dl(&dh), DW = fd_dl(&dw), DB = fd_dl(&db);
  T.data = f.idv, T.dtype = (DLDataType){kDLInt, 32, 1};
  kite_flce_opts o = {.ce = f.ce, .chunk_bytes = 0};
  kite_status s = kite_fused_linear_cross_entropy(ctx, &H, &W, &B, &T, &o, &L, &DH, &DW, &DB);
  char what[96];
  snprintf(what, sizeof what, "N=3 H=5 V=7 %s ls=%g z_loss=%g softcap=%g",
           kt_reduction_name(f.ce.reduction), (double)f.ce.label_smoothing, (double)f.ce.z_loss,
           (double)f.ce.softcap);
  fd_judge(rp, &f, what, "h", s, s == KITE_OK ? fd_nmse(&f, &f.x, &dh) : 0);
  fd_judge(rp, &f, what, "w", s, s == KITE_OK ? fd_nmse(&f, &f.w, &dw) : 0);
  fd_judge(rp, &f, what, "bias", s, s == KITE_OK ? fd_nmse(&f, &f.b, &db) : 0);
}

/* sdpa_backward on [1, 4, 3, 5] x 4 (GQA 2): variant 0 grouped, causal, softcap 2, window 3,
 * a float mask with a -inf entry and a fully hidden row 1 (lse -inf); variant 1 interleaved,
 * not causal, a bool mask, Sq 4 > Sk 3. varlen (variant 2): sequences of (2, 3), (0, 1),
 * (2, 0), (1, 2) queries and keys, grouped, causal, softcap 3. With sinks, each with sinks[Hq]
 * in [-1, 2] (the hidden rows then see only their sink), and dsinks checked too. */
static void fd_attn(const fd_report *rp, kite_ctx *ctx, int v, int sinks, uint64_t seed) {
  const int vl = v == 2;
  fd_case f = {.ctx = ctx,
               .op = vl ? KITE_OP_SDPA_VARLEN_BACKWARD : KITE_OP_SDPA_BACKWARD,
               .variant = v,
               .sinks = sinks};
  f.attn = kite_attn_opts_default();
  const int64_t hq = vl ? 2 : 4, hkv = vl ? 1 : 2, D = 4, sq = v == 1 ? 4 : 3, sk = v == 1 ? 3 : 5;
  if (vl) {
    static const int32_t cu[10] = {0, 2, 2, 4, 5, 0, 3, 4, 4, 6};
    f.nseq = 4, memcpy(f.idv, cu, sizeof cu);
    f.attn.softcap = 3.0f;
    fd_make(&f.q, 3, 5, hq, D), fd_make(&f.k, 3, 6, hkv, D);
  } else {
    fd_make(&f.q, 3, hq, sq, D), fd_make(&f.k, 3, hkv, sk, D);
    /* [1, H, S, D] */
    for (fd_t *t = &f.q; t; t = t == &f.q ? &f.k : NULL) {
      t->ndim = 4, t->shape[3] = t->shape[2], t->shape[2] = t->shape[1];
      t->shape[1] = t->shape[0], t->shape[0] = 1;
    }
    fd_make(&f.w, 2, sq, sk, 0);
    for (int64_t i = 0; i < f.w.n; i++) {
      f.w.p[i] = -1.0f + 2.0f * kt_unit(seed + 9, (uint64_t)i);
      f.bmask[i] = kt_hash(seed + 9, (uint64_t)i) % 4 != 0;
      if (i / sk == 1) f.w.p[i] = -INFINITY, f.bmask[i] = 0;
    }
    f.w.p[2] = -INFINITY;
    if (v == 0) f.attn.softcap = 2.0f, f.attn.window_left = 3;
    if (v == 1) f.attn.gqa = KITE_GQA_INTERLEAVED, f.attn.causal = 0;
  }
  f.x = f.k;
  fd_fill(&f.q, seed, -1.5f, 1.5f), fd_fill(&f.k, seed + 1, -1.5f, 1.5f);
  fd_fill(&f.x, seed + 2, -1, 1);
  f.dy = f.out = f.q;
  fd_fill(&f.dy, seed + 3, -1, 1);
  fd_make(&f.b, 1, hq, 0, 0), fd_fill(&f.b, seed + 4, -1, 2);
  fd_t lse, dq = f.q, dk = f.k, dv = f.k, dsinks = f.b;
  if (vl)
    fd_make(&lse, 2, 5, hq, 0);
  else
    fd_make(&lse, 3, 1, hq, sq);
  DLTensor Q = fd_dl(&f.q), K = fd_dl(&f.k), V = fd_dl(&f.x), M = fd_dl(&f.w), O = fd_dl(&f.out);
  DLTensor L = fd_dl(&lse), DY = fd_dl(&f.dy), DQ = fd_dl(&dq), DK = fd_dl(&dk), DV = fd_dl(&dv);
  DLTensor S = fd_dl(&f.b), DS = fd_dl(&dsinks);
  DLTensor *ps = sinks ? &S : NULL, *pds = sinks ? &DS : NULL;
  if (v == 1) M.data = f.bmask, M.dtype = (DLDataType){KITE_DL_BOOL, 8, 1};
  kite_status s;
  if (vl) {
    DLTensor cq = fd_cu(&f, 0), ck = fd_cu(&f, 1);
    s = kite_sdpa_varlen(ctx, &Q, &K, &V, &cq, &ck, 16, 16, ps, &f.attn, &O, &L);
    if (s == KITE_OK)
      s = kite_sdpa_varlen_backward(ctx, &Q, &K, &V, &cq, &ck, 16, 16, ps, &f.attn, &O, &L, &DY,
                                    &DQ, &DK, &DV, pds);
  } else {
    s = kite_sdpa(ctx, &Q, &K, &V, &M, ps, &f.attn, &O, &L);
    if (s == KITE_OK)
      s = kite_sdpa_backward(ctx, &Q, &K, &V, &M, ps, &f.attn, &O, &L, &DY, &DQ, &DK, &DV, pds);
  }
  static const char *const what[2][3] = {
      {"grouped causal softcap window f32 mask, a row unseen",
       "interleaved bool mask Sq>Sk, a row unseen", "varlen causal softcap, empty sides"},
      {"grouped causal softcap window f32 mask sinks, a row unseen",
       "interleaved bool mask Sq>Sk sinks, a row unseen",
       "varlen causal softcap sinks, empty sides"}};
  const char *w = what[sinks != 0][v];
  fd_judge(rp, &f, w, "q", s, s == KITE_OK ? fd_nmse(&f, &f.q, &dq) : 0);
  fd_judge(rp, &f, w, "k", s, s == KITE_OK ? fd_nmse(&f, &f.k, &dk) : 0);
  fd_judge(rp, &f, w, "v", s, s == KITE_OK ? fd_nmse(&f, &f.x, &dv) : 0);
  if (sinks) fd_judge(rp, &f, w, "sinks", s, s == KITE_OK ? fd_nmse(&f, &f.b, &dsinks) : 0);
}

/* The load-balancing loss over T=5 E=6 k=2 (ids fixed: the selection is a constant of the
 * gradient), without and with a mask that drops a token. */
static void fd_aux(const fd_report *rp, kite_ctx *ctx, int masked, uint64_t seed) {
  fd_case f = {.ctx = ctx, .op = KITE_OP_MOE_AUX_LOSS_BACKWARD, .variant = masked};
  static const int32_t ids[10] = {0, 3, 1, 3, 5, 2, 3, 0, 4, 6}; /* 6 is outside [0, 6) */
  memcpy(f.idv, ids, sizeof ids);
  fd_make(&f.ids, 2, 5, 2, 0);
  fd_make(&f.x, 2, 5, 6, 0), fd_fill(&f.x, seed, -2, 2);
  fd_make(&f.w, 1, 5, 0, 0);
  for (int i = 0; i < 5; i++) f.w.p[i] = i == 2 ? 0.0f : 1.0f;
  fd_make(&f.out, 1, 1, 0, 0), fd_make(&f.dy, 1, 1, 0, 0), fd_fill(&f.dy, seed + 1, 0.5f, 1.5f);
  fd_t dx = f.x;
  DLTensor X = fd_dl(&f.x), I = fd_dl(&f.ids), M = fd_dl(&f.w), DL = fd_dl(&f.dy), DX = fd_dl(&dx);
  I.data = f.idv, I.dtype = (DLDataType){kDLInt, 32, 1};
  kite_status s = kite_moe_aux_loss_backward(ctx, &X, &I, masked ? &M : NULL, &DL, &DX);
  fd_judge(rp, &f, masked ? "T=5 E=6 k=2, a token masked, an id out of range" : "T=5 E=6 k=2",
           "logits", s, s == KITE_OK ? fd_nmse(&f, &f.x, &dx) : 0);
}

int kt_fd_covers(kite_op op) {
  switch (op) {
  case KITE_OP_ACTIVATION_BACKWARD:
  case KITE_OP_GATED_BACKWARD:
  case KITE_OP_RMS_NORM_BACKWARD:
  case KITE_OP_LAYER_NORM_BACKWARD:
  case KITE_OP_ROPE_BACKWARD:
  case KITE_OP_SOFTMAX_BACKWARD:
  case KITE_OP_EMBEDDING_BACKWARD:
  case KITE_OP_CROSS_ENTROPY:
  case KITE_OP_CROSS_ENTROPY_BACKWARD:
  case KITE_OP_FUSED_LINEAR_CROSS_ENTROPY:
  case KITE_OP_SDPA_BACKWARD:
  case KITE_OP_SDPA_VARLEN_BACKWARD:
  case KITE_OP_MOE_AUX_LOSS:
  case KITE_OP_MOE_AUX_LOSS_BACKWARD:
    return 1;
  default:
    return 0;
  }
}

void kt_fd_check(kite_ctx *ctx, int verbose, int only_op, int *passed, int *failed) {
  /* every op pinned to ref: the forward ops are the oracle's */
  char cfg[48 * KITE_OP_COUNT]; /* "op=ref," under 48 characters each */
  size_t len = 0;
  cfg[0] = '\0';
  for (int op = 0; op < KITE_OP_COUNT; op++)
    kt_cat(cfg, sizeof cfg, &len, "%s%s=ref", len ? "," : "", kite_op_name((kite_op)op));
  if (kite_config_set(cfg) != KITE_OK) {
    printf("FAIL finite differences: cannot pin the ops to ref: %s\n", kite_last_error());
    ++*failed;
    return;
  }
  const fd_report rp = {verbose, passed, failed};
  const uint64_t seed = 0x6b697465u;
#define FD_WANT(op) (only_op < 0 || only_op == (int)(op))
  static const kite_op acts[] = {KITE_ACTIVATION_OPS(KT_OP_ITEM)};
  static const kite_op gated[] = {KITE_GATED_OPS(KT_GATED_ITEM)};
  const int na = (int)(sizeof acts / sizeof *acts), ng = (int)(sizeof gated / sizeof *gated);
  for (int i = 0; i < na && FD_WANT(KITE_OP_ACTIVATION_BACKWARD); i++)
    fd_act(&rp, ctx, KITE_OP_ACTIVATION_BACKWARD, acts[i], 0.0f, seed + (uint64_t)i);
  for (int i = 0; i < 2 * ng && FD_WANT(KITE_OP_GATED_BACKWARD); i++) /* without, with a clamp */
    fd_act(&rp, ctx, KITE_OP_GATED_BACKWARD, gated[i % ng], i < ng ? 0.0f : 1.0f,
           seed + 10 + (uint64_t)i);
  for (int pre = 0; pre <= 1; pre++) {
    for (int off = 0; off <= 1 && FD_WANT(KITE_OP_RMS_NORM_BACKWARD); off++)
      fd_norm(&rp, ctx, KITE_OP_RMS_NORM_BACKWARD, pre, (float)off, seed + 20 + (uint64_t)off);
    if (FD_WANT(KITE_OP_LAYER_NORM_BACKWARD))
      fd_norm(&rp, ctx, KITE_OP_LAYER_NORM_BACKWARD, pre, 0.0f, seed + 30 + (uint64_t)pre);
  }
  for (int gptj = 0; gptj <= 1 && FD_WANT(KITE_OP_ROPE_BACKWARD); gptj++)
    fd_rope(&rp, ctx, gptj, seed + 40 + (uint64_t)gptj);
  if (FD_WANT(KITE_OP_SOFTMAX_BACKWARD)) fd_softmax(&rp, ctx, seed + 50);
  if (FD_WANT(KITE_OP_EMBEDDING_BACKWARD)) fd_embedding(&rp, ctx, seed + 60);
  for (int v = 0; v < 4; v++) {
    if (FD_WANT(KITE_OP_CROSS_ENTROPY_BACKWARD)) fd_ce(&rp, ctx, v, seed + 70 + (uint64_t)v);
    if (FD_WANT(KITE_OP_FUSED_LINEAR_CROSS_ENTROPY)) fd_flce(&rp, ctx, v, seed + 80 + (uint64_t)v);
  }
  for (int sinks = 0; sinks <= 1; sinks++) {
    for (int v = 0; v < 2 && FD_WANT(KITE_OP_SDPA_BACKWARD); v++)
      fd_attn(&rp, ctx, v, sinks, seed + 90 + (uint64_t)v);
    if (FD_WANT(KITE_OP_SDPA_VARLEN_BACKWARD)) fd_attn(&rp, ctx, 2, sinks, seed + 95);
  }
  for (int v = 0;
       v < 2 && (FD_WANT(KITE_OP_MOE_AUX_LOSS) || FD_WANT(KITE_OP_MOE_AUX_LOSS_BACKWARD)); v++)
    fd_aux(&rp, ctx, v, seed + 90 + (uint64_t)v);
#undef FD_WANT
  kite_config_set("");
}
