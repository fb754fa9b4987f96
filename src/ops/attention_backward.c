/*
 * Front-ends of the training-side attention ops: sdpa_varlen (packed sequences) and the
 * backwards of sdpa and sdpa_varlen. The forward's arguments are checked by the forward's own
 * rules (kite_attn_check_sdpa, check_varlen), then the gradients: dout of q's shape, dq like q,
 * dk / dv like k, no output sharing a byte with an input or another output. cu_seqlens values in
 * host memory are checked here, as the paged ops check theirs.
 */
#include <string.h>

#include "ops/attention.h"

/* cu_seqlens_*: a compact int32 vector of n >= 1 entries (n = B + 1). */
static kite_status check_cu(const kite_ctx *ctx, const char *op, const char *arg, const DLTensor *t,
                            kite_tensor *out) {
  kite_status s;
  if ((s = kite_tensor_check(ctx, op, arg, t, out)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, arg, out, 1)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, arg, out, KITE_DTYPE_I32)) != KITE_OK) return s;
  if (out->shape[0] < 1)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: %s: empty, expected B + 1 >= 1 entries", op,
                          arg);
  return kite_tensor_require_compact(op, arg, out);
}

/* max_seqlen_*: >= 0, and >= 1 when its tensor has rows. */
static kite_status check_max_seqlen(const char *op, const char *arg, int64_t max_seqlen,
                                    int64_t rows) {
  if (max_seqlen < 0 || (rows > 0 && max_seqlen < 1))
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "%s: %s: %lld, expected >= 1 (the tensors have %lld rows)", op, arg,
                          (long long)max_seqlen, (long long)rows);
  return KITE_OK;
}

/* The checked tensors of a varlen call, in this order. */
enum { VL_Q, VL_K, VL_V, VL_CU_Q, VL_CU_K, VL_SINKS, VL_O, VL_LSE, VL_N };

/* Everything kite_sdpa_varlen checks, under the name op (o read, not written, by the
 * backward; lse required there). Fills *a (op KITE_OP_SDPA_VARLEN) and t[VL_N]. */
static kite_status check_varlen(kite_ctx *ctx, const char *op, const DLTensor *q, const DLTensor *k,
                                const DLTensor *v, const DLTensor *cu_seqlens_q,
                                const DLTensor *cu_seqlens_k, int64_t max_seqlen_q,
                                int64_t max_seqlen_k, const DLTensor *sinks,
                                const kite_attn_opts *opts, const DLTensor *o, const DLTensor *lse,
                                bool lse_required, kite_sdpa_varlen_args *a, kite_tensor t[VL_N]) {
  kite_status s;
  memset(t, 0, VL_N * sizeof *t);
  if ((s = kite_attn_check_heads(ctx, op, "q", q, 3, &t[VL_Q])) != KITE_OK) return s;
  if ((s = kite_attn_check_heads(ctx, op, "k", k, 3, &t[VL_K])) != KITE_OK) return s;
  if ((s = kite_attn_check_heads(ctx, op, "v", v, 3, &t[VL_V])) != KITE_OK) return s;
  const kite_tensor *qt = &t[VL_Q], *kt = &t[VL_K], *vt = &t[VL_V];
  if ((s = kite_tensor_require_dtype(op, "k", kt, qt->dtype)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, "v", vt, qt->dtype)) != KITE_OK) return s;
  if ((s = kite_tensor_require_same_shape(op, "v", vt, kt, "k")) != KITE_OK) return s;
  const int64_t tq = qt->shape[0], hq = qt->shape[1], head_dim = qt->shape[2];
  const int64_t tk = kt->shape[0], hkv = kt->shape[1];
  if (kt->shape[2] != head_dim)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: k: head_dim %lld, q has %lld", op,
                          (long long)kt->shape[2], (long long)head_dim);
  if ((s = kite_attn_check_heads_fit(op, hq, hkv, head_dim)) != KITE_OK) return s;

  if ((s = check_cu(ctx, op, "cu_seqlens_q", cu_seqlens_q, &t[VL_CU_Q])) != KITE_OK) return s;
  if ((s = check_cu(ctx, op, "cu_seqlens_k", cu_seqlens_k, &t[VL_CU_K])) != KITE_OK) return s;
  if (t[VL_CU_K].shape[0] != t[VL_CU_Q].shape[0])
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "%s: cu_seqlens_k: length %lld, cu_seqlens_q has %lld (B + 1)", op,
                          (long long)t[VL_CU_K].shape[0], (long long)t[VL_CU_Q].shape[0]);
  if ((s = check_max_seqlen(op, "max_seqlen_q", max_seqlen_q, tq)) != KITE_OK) return s;
  if ((s = check_max_seqlen(op, "max_seqlen_k", max_seqlen_k, tk)) != KITE_OK) return s;
  if ((s = kite_attn_check_sinks(ctx, op, "sinks", sinks, hq, &t[VL_SINKS])) != KITE_OK) return s;

  if ((s = kite_attn_check_like(ctx, op, "o", o, qt, "q", &t[VL_O])) != KITE_OK) return s;
  if (!lse && lse_required)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "%s: lse: tensor is NULL (the forward's lse is required)", op);
  const int64_t lse_dims[2] = {tq, hq};
  if ((s = kite_attn_check_lse(ctx, op, lse, 2, lse_dims, &t[VL_LSE])) != KITE_OK) return s;

  const kite_tensor *in[] = {qt, kt, vt, &t[VL_CU_Q], &t[VL_CU_K], &t[VL_SINKS]};
  const char *in_names[] = {"q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "sinks"};
  if ((s = kite_attn_check_output(op, "o", &t[VL_O], in, in_names, 6)) != KITE_OK) return s;
  if (lse) {
    if ((s = kite_attn_check_output(op, "lse", &t[VL_LSE], in, in_names, 6)) != KITE_OK) return s;
    if ((s = kite_tensor_require_disjoint(op, "lse", &t[VL_LSE], &t[VL_O], "o")) != KITE_OK)
      return s;
  }

  kite_sdpa_varlen_args r = {.op = KITE_OP_SDPA_VARLEN,
                             .dtype = qt->dtype,
                             .batch = t[VL_CU_Q].shape[0] - 1,
                             .tq = tq,
                             .tk = tk,
                             .hq = hq,
                             .hkv = hkv,
                             .head_dim = head_dim,
                             .max_seqlen_q = max_seqlen_q,
                             .max_seqlen_k = max_seqlen_k,
                             .cu_seqlens_q = t[VL_CU_Q].data,
                             .cu_seqlens_k = t[VL_CU_K].data,
                             .q = qt->data,
                             .k = kt->data,
                             .v = vt->data,
                             .o = t[VL_O].data,
                             .lse = lse ? t[VL_LSE].data : NULL,
                             .sinks = sinks ? t[VL_SINKS].data : NULL};
  for (int i = 0; i < 2; i++) {
    r.q_stride[i] = qt->strides[i];
    r.k_stride[i] = kt->strides[i];
    r.v_stride[i] = vt->strides[i];
    r.o_stride[i] = t[VL_O].strides[i];
  }
  if ((s = kite_attn_check_opts(op, opts, head_dim, &r.opts)) != KITE_OK) return s;
  *a = r;
  return KITE_OK;
}

/* One cu_seqlens vector in host memory: starts at 0, does not decrease, ends at rows, and no
 * sequence is longer than max_seqlen. */
static kite_status check_host_cu(const char *op, const char *arg, const int32_t *cu, int64_t batch,
                                 int64_t rows, const char *rows_name, int64_t max_seqlen,
                                 const char *max_name) {
  if (cu[0] != 0 || cu[batch] != rows)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "%s: %s: starts at %d and ends at %d, expected 0 and %s = %lld", op, arg,
                          (int)cu[0], (int)cu[batch], rows_name, (long long)rows);
  for (int64_t b = 0; b < batch; b++) {
    const int64_t len = (int64_t)cu[b + 1] - cu[b];
    if (len < 0)
      return kite_set_error(KITE_ERR_INVALID_ARG,
                            "%s: %s: sequence %lld: %s decreases (%d then %d)", op, arg,
                            (long long)b, arg, (int)cu[b], (int)cu[b + 1]);
    if (len > max_seqlen)
      return kite_set_error(KITE_ERR_INVALID_ARG,
                            "%s: %s: %lld is below the length %lld of sequence %lld (%s)", op,
                            max_name, (long long)max_seqlen, (long long)len, (long long)b, arg);
  }
  return KITE_OK;
}

static kite_status check_host_varlen(kite_ctx *ctx, const char *op,
                                     const kite_sdpa_varlen_args *a) {
  kite_status s;
  if (!kite_indices_on_host(ctx)) return KITE_OK;
  if ((s = check_host_cu(op, "cu_seqlens_q", a->cu_seqlens_q, a->batch, a->tq, "Tq",
                         a->max_seqlen_q, "max_seqlen_q")) != KITE_OK)
    return s;
  return check_host_cu(op, "cu_seqlens_k", a->cu_seqlens_k, a->batch, a->tk, "Tk", a->max_seqlen_k,
                       "max_seqlen_k");
}

kite_status kite_sdpa_varlen(kite_ctx *ctx, const DLTensor *q, const DLTensor *k, const DLTensor *v,
                             const DLTensor *cu_seqlens_q, const DLTensor *cu_seqlens_k,
                             int64_t max_seqlen_q, int64_t max_seqlen_k, const DLTensor *sinks,
                             const kite_attn_opts *opts, DLTensor *o, DLTensor *lse) {
  const char *op = "sdpa_varlen";
  kite_tensor t[VL_N];
  kite_sdpa_varlen_args a;
  kite_status s;
  if ((s = kite_op_begin(ctx, op)) != KITE_OK) return s;
  if ((s = check_varlen(ctx, op, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                        sinks, opts, o, lse, false, &a, t)) != KITE_OK)
    return s;
  if ((s = check_host_varlen(ctx, op, &a)) != KITE_OK) return s;
  if (a.tq == 0 || a.hq == 0) return KITE_OK;
  return kite_dispatch(ctx, KITE_OP_SDPA_VARLEN, a.dtype, &a);
}

/* The gradients of a backward call: dout (read) of q's shape, dq like q, dk and dv like k,
 * dsinks (NULL, or f32 [hq] and then sinks given); the outputs distinct, disjoint from the n
 * inputs and from each other. g: dout, dq, dk, dv, dsinks (zeroed when absent). */
static kite_status check_grads(const kite_ctx *ctx, const char *op, const kite_tensor *qt,
                               const kite_tensor *kt, const DLTensor *dout, const DLTensor *dq,
                               const DLTensor *dk, const DLTensor *dv, const DLTensor *sinks,
                               const DLTensor *dsinks, const kite_tensor **in,
                               const char **in_names, int n, kite_tensor g[5]) {
  kite_status s;
  memset(&g[4], 0, sizeof g[4]);
  if ((s = kite_attn_check_like(ctx, op, "dout", dout, qt, "q", &g[0])) != KITE_OK) return s;
  if ((s = kite_attn_check_like(ctx, op, "dq", dq, qt, "q", &g[1])) != KITE_OK) return s;
  if ((s = kite_attn_check_like(ctx, op, "dk", dk, kt, "k", &g[2])) != KITE_OK) return s;
  if ((s = kite_attn_check_like(ctx, op, "dv", dv, kt, "k", &g[3])) != KITE_OK) return s;
  if (dsinks && !sinks)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "%s: sinks: tensor is NULL while dsinks is given (the sinks' gradient "
                          "needs the forward's sinks)",
                          op);
  if ((s = kite_attn_check_sinks(ctx, op, "dsinks", dsinks, qt->shape[1], &g[4])) != KITE_OK)
    return s;
  in[n] = &g[0], in_names[n] = "dout";
  /* each output against the inputs and the outputs before it */
  const char *names[] = {"dq", "dk", "dv", "dsinks"};
  for (int i = 0; i < 4; i++) {
    if ((s = kite_attn_check_output(op, names[i], &g[1 + i], in, in_names, n + 1 + i)) != KITE_OK)
      return s;
    in[n + 1 + i] = &g[1 + i], in_names[n + 1 + i] = names[i];
  }
  return KITE_OK;
}

/* The gradient fields of a backward args struct a from the checked dout, dq, dk, dv, dsinks
 * g[5]: data and the first n strides. */
#define SET_GRADS(a, g, n)                                                                         \
  do {                                                                                             \
    (a).dtype = (a).fwd.dtype;                                                                     \
    (a).dout = (g)[0].data, (a).dq = (g)[1].data, (a).dk = (g)[2].data, (a).dv = (g)[3].data;      \
    (a).dsinks = (g)[4].data;                                                                      \
    for (int i_ = 0; i_ < (n); i_++) {                                                             \
      (a).dout_stride[i_] = (g)[0].strides[i_], (a).dq_stride[i_] = (g)[1].strides[i_];            \
      (a).dk_stride[i_] = (g)[2].strides[i_], (a).dv_stride[i_] = (g)[3].strides[i_];              \
    }                                                                                              \
  } while (0)

kite_status kite_sdpa_backward(kite_ctx *ctx, const DLTensor *q, const DLTensor *k,
                               const DLTensor *v, const DLTensor *mask, const DLTensor *sinks,
                               const kite_attn_opts *opts, const DLTensor *o, const DLTensor *lse,
                               const DLTensor *dout, DLTensor *dq, DLTensor *dk, DLTensor *dv,
                               DLTensor *dsinks) {
  const char *op = "sdpa_backward";
  kite_tensor t[7], g[5];
  kite_sdpa_backward_args a = {.op = KITE_OP_SDPA_BACKWARD};
  kite_status s;
  if ((s = kite_op_begin(ctx, op)) != KITE_OK) return s;
  if ((s = kite_attn_check_sdpa(ctx, op, q, k, v, mask, sinks, opts, o, lse, true, &a.fwd, t)) !=
      KITE_OK)
    return s;
  const kite_tensor *in[7 + 5] = {&t[0], &t[1], &t[2], &t[3], &t[4], &t[5], &t[6]};
  const char *in_names[7 + 5] = {"q", "k", "v", "mask", "o", "lse", "sinks"};
  if ((s = check_grads(ctx, op, &t[0], &t[1], dout, dq, dk, dv, sinks, dsinks, in, in_names, 7,
                       g)) != KITE_OK)
    return s;
  SET_GRADS(a, g, 3);
  /* no query: dk and dv are still written (zeros), and dsinks (zeros) */
  if (g[1].numel == 0 && g[2].numel == 0 && g[4].numel == 0) return KITE_OK;
  return kite_dispatch(ctx, KITE_OP_SDPA_BACKWARD, a.dtype, &a);
}

kite_status kite_sdpa_varlen_backward(kite_ctx *ctx, const DLTensor *q, const DLTensor *k,
                                      const DLTensor *v, const DLTensor *cu_seqlens_q,
                                      const DLTensor *cu_seqlens_k, int64_t max_seqlen_q,
                                      int64_t max_seqlen_k, const DLTensor *sinks,
                                      const kite_attn_opts *opts, const DLTensor *o,
                                      const DLTensor *lse, const DLTensor *dout, DLTensor *dq,
                                      DLTensor *dk, DLTensor *dv, DLTensor *dsinks) {
  const char *op = "sdpa_varlen_backward";
  kite_tensor t[VL_N], g[5];
  kite_sdpa_varlen_backward_args a = {.op = KITE_OP_SDPA_VARLEN_BACKWARD};
  kite_status s;
  if ((s = kite_op_begin(ctx, op)) != KITE_OK) return s;
  if ((s = check_varlen(ctx, op, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                        sinks, opts, o, lse, true, &a.fwd, t)) != KITE_OK)
    return s;
  const kite_tensor *in[VL_N + 5];
  const char *in_names[VL_N + 5] = {"q",     "k", "v",  "cu_seqlens_q", "cu_seqlens_k",
                                    "sinks", "o", "lse"};
  for (int i = 0; i < VL_N; i++) in[i] = &t[i];
  if ((s = check_grads(ctx, op, &t[VL_Q], &t[VL_K], dout, dq, dk, dv, sinks, dsinks, in, in_names,
                       VL_N, g)) != KITE_OK)
    return s;
  if ((s = check_host_varlen(ctx, op, &a.fwd)) != KITE_OK) return s;
  SET_GRADS(a, g, 2);
  if (g[1].numel == 0 && g[2].numel == 0 && g[4].numel == 0) return KITE_OK;
  return kite_dispatch(ctx, KITE_OP_SDPA_VARLEN_BACKWARD, a.dtype, &a);
}
