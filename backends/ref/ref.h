/*
 * The reference backend, private to backends/ref: the run function of each op family and the
 * scalar activations and their derivatives that the activation and gated kernels share.
 *
 * Every ref kernel reads f32/f16/bf16 elements as float, computes in double and rounds once per
 * output (double -> float -> dtype). Speed is not a goal; being obviously right is.
 */
#ifndef KITE_REF_H
#define KITE_REF_H

#include <math.h>
#include <stdbool.h>

#include "kite/backend.h"
#include "kite/dtype.h"

/* Each family's forward and backward (rope_backward is ref_rope_run's). */
kite_status ref_act_run(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status ref_act_bwd_run(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status ref_gated_run(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status ref_gated_bwd_run(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status ref_norm_run(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status ref_norm_bwd_run(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status ref_rope_run(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status ref_softmax_run(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status ref_softmax_bwd_run(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status ref_embedding_run(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status ref_embedding_bwd_run(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status ref_store_kv_run(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status ref_paged_attn_run(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status ref_sdpa_run(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status ref_sdpa_fp8_run(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status ref_sdpa_backward_run(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status ref_sdpa_varlen_run(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status ref_sdpa_varlen_backward_run(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status ref_linear_run(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status ref_group_gemm_run(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status ref_topk_gating_run(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status ref_fused_moe_run(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status ref_fused_moe_ex_run(const kite_kernel *k, kite_ctx *ctx, const void *args);
/* ref_moe_route.c */
kite_status ref_moe_route_run(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status ref_moe_aux_loss_run(const kite_kernel *k, kite_ctx *ctx, const void *args); /* + bwd */
kite_status ref_quant_run(const kite_kernel *k, kite_ctx *ctx, const void *args); /* + dequant */
kite_status ref_quant_fp8_blocks_run(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status ref_linear_quant_run(const kite_kernel *k, kite_ctx *ctx, const void *args);
/* ref_loss.c */
kite_status ref_ce_run(const kite_kernel *k, kite_ctx *ctx, const void *args); /* + backward */
kite_status ref_flce_run(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status ref_sample_run(const kite_kernel *k, kite_ctx *ctx, const void *args); /* + argmax */
kite_status ref_penalties_run(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status ref_logprobs_run(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status ref_softcap_run(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status ref_linear_wq4_run(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status ref_gguf_run(const kite_kernel *k, kite_ctx *ctx, const void *args); /* + dequant */
/* Weight i of GGUF block b of type t, exactly (kite.h's formula in float64); linear_wq4's blocks
 * are Q4_0 (SYM) and Q4_1 (MIN). */
double ref_gguf_exact(kite_gguf_type t, const uint8_t *b, int i);
/* ref_mla.c */
kite_status ref_mla_store_kv_run(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status ref_mla_decode_run(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status ref_group_gguf_run(const kite_kernel *k, kite_ctx *ctx, const void *args);
/* ref_comm.c: all_reduce, all_gather, reduce_scatter, all_reduce_add_rms_norm over the ranks of
 * a ref comm (threads of this process), and the comm operations of kite_backend */
bool ref_comm_supports(const kite_kernel *k, const void *args, const char **why);
kite_status ref_comm_run(const kite_kernel *k, kite_ctx *ctx, const void *args);
kite_status ref_comm_unique_id(const kite_backend *b, kite_ctx *ctx, kite_comm_id *id);
kite_status ref_comm_create(const kite_backend *b, kite_ctx *ctx, const kite_comm_id *id,
                            int nranks, int rank, void **comm);
void ref_comm_destroy(const kite_backend *b, void *comm);
/* The ref backend's own struct (a comm kernel runs only on comms it made). */
const kite_backend *ref_backend(void);

/* The float types that kite_load_f32 / kite_store_f32 handle. */
static inline bool ref_is_float(kite_dtype t) {
  return t == KITE_DTYPE_F32 || t == KITE_DTYPE_F16 || t == KITE_DTYPE_BF16;
}

/* Names for error messages, never NULL even for an id out of range. */
static inline const char *ref_op_str(kite_op op) {
  const char *s = kite_op_name(op);
  return s ? s : "unknown op";
}
static inline const char *ref_dtype_str(kite_dtype t) {
  const char *s = (unsigned)t < KITE_DTYPE_COUNT ? kite_dtype_name(t) : NULL;
  return s ? s : "unknown dtype";
}

/* ---- scalar activations, in double --------------------------------------------------------
 * The smooth activations at +-inf are their limits (kite.h): act(+inf) = +inf, act(-inf) = -0,
 * where the formulas would give -inf * 0 = NaN. */
static inline double ref_sigmoid(double x) {
  return 1.0 / (1.0 + exp(-x));
}

static inline double ref_silu(double x) {
  return isinf(x) ? (x > 0 ? x : -0.0) : x * ref_sigmoid(x);
}

/* x * Phi(x), Phi the standard normal CDF = (1 + erf(x / sqrt(2))) / 2. */
static inline double ref_gelu(double x) {
  return isinf(x) ? (x > 0 ? x : -0.0) : 0.5 * x * (1.0 + erf(x * 0.70710678118654752440));
}

/* The tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
static inline double ref_gelu_tanh(double x) {
  const double sqrt_2_over_pi = 0.79788456080286535588;
  if (isinf(x)) return x > 0 ? x : -0.0;
  return 0.5 * x * (1.0 + tanh(sqrt_2_over_pi * (x + 0.044715 * x * x * x)));
}

static inline double ref_gelu_quick(double x) {
  return isinf(x) ? (x > 0 ? x : -0.0) : x * ref_sigmoid(1.702 * x);
}

/* NaN stays NaN, as max(x, 0) does in the frameworks. */
static inline double ref_relu(double x) {
  return isnan(x) || x > 0.0 ? x : 0.0;
}

/* ---- their derivatives, in double (the backward kernels) ------------------------------------
 * Past |x| = 128 (and at +-inf) each smooth one is its limit, 0 below and 1 above (kite.h):
 * ref_d_limit gives that, or NaN to say "compute it". */
static inline double ref_d_limit(double x) {
  return x < -128.0 ? 0.0 : x > 128.0 ? 1.0 : NAN;
}

static inline double ref_d_sigmoid_mul(double x, double a) { /* d/dx of x sigmoid(a x) */
  if (!isnan(ref_d_limit(x))) return ref_d_limit(x);
  const double s = ref_sigmoid(a * x);
  return s + a * x * s * (1.0 - s);
}

static inline double ref_d_silu(double x) {
  return ref_d_sigmoid_mul(x, 1.0);
}

static inline double ref_d_gelu(double x) {
  if (!isnan(ref_d_limit(x))) return ref_d_limit(x);
  const double phi = exp(-0.5 * x * x) * 0.39894228040143267794; /* 1 / sqrt(2 pi) */
  return 0.5 * (1.0 + erf(x * 0.70710678118654752440)) + x * phi;
}

static inline double ref_d_gelu_tanh(double x) {
  if (!isnan(ref_d_limit(x))) return ref_d_limit(x);
  const double k = 0.79788456080286535588, c = 0.044715;
  const double t = tanh(k * (x + c * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * c * x * x);
}

static inline double ref_d_gelu_quick(double x) {
  return ref_d_sigmoid_mul(x, 1.702);
}

static inline double ref_d_relu(double x) {
  return x > 0.0 ? 1.0 : 0.0;
}

/* act and act' of an activation op, or of the gate of a gated op (kite_gated_op_act); false for
 * any other op. */
static inline bool ref_act_fns(kite_op op, double (**f)(double), double (**df)(double)) {
  switch (kite_op_is_gated(op) ? kite_gated_op_act(op) : op) {
#define REF_ACT_CASE(ID, name)                                                                     \
  case KITE_OP_##ID:                                                                               \
    *f = ref_##name, *df = ref_d_##name;                                                           \
    return true;
    KITE_ACTIVATION_OPS(REF_ACT_CASE)
#undef REF_ACT_CASE
  default:
    return false;
  }
}

/* What both activation backward kernels check first: args, dtype, and a->act, whose act and act'
 * come back in *f and *df. */
static inline kite_status ref_act_bwd_begin(const kite_act_bwd_args *a, double (**f)(double),
                                            double (**df)(double)) {
  if (!a) return kite_set_error(KITE_ERR_INVALID_ARG, "activation backward: ref: NULL args");
  const char *name = ref_op_str(a->op);
  if (!ref_is_float(a->dtype))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: ref: dtype %s is not supported", name,
                          ref_dtype_str(a->dtype));
  if (!ref_act_fns(a->act, f, df))
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: ref: act %d is not an activation", name,
                          (int)a->act);
  return KITE_OK;
}

#endif /* KITE_REF_H */
