/*
 * The reference backend: one "generic" kernel per op, priority 0, so that any faster kernel that
 * can run wins, and ref remains the ground truth to test against. Host memory is the core's.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ref.h"

/* Ref kernels finish before they return: there is nothing to wait for. */
static kite_status ref_synchronize(const kite_backend *b, int device_id, void *stream) {
  return KITE_OK;
}

static int ref_device_count(const kite_backend *b) {
  return 1;
}

#define REF_ROW(op_id, supports_fn, run_fn, desc)                                                  \
  {                                                                                                \
    .op = (op_id), .variant = "generic", .priority = 0, .features = 0, .features_str = "",         \
    .supports = (supports_fn), .run = (run_fn), .description = (desc), .userdata = NULL            \
  }
#define REF_KERNEL(op_id, run_fn, desc) REF_ROW(op_id, NULL, run_fn, desc)

/* The collectives: ranks are threads meeting in a rendezvous (ref_comm.c). */
#define REF_COMM_KERNEL(op_id, desc) REF_ROW(op_id, ref_comm_supports, ref_comm_run, desc)

static const kite_kernel ref_kernels[] = {
/* the activations of backend.h's lists, one row each */
#define REF_ACT_ROW(ID, name) REF_KERNEL(KITE_OP_##ID, ref_act_run, #name ", float64 scalar loop"),
#define REF_GATED_ROW(ID, name, AID, aname)                                                        \
  REF_KERNEL(KITE_OP_##ID, ref_gated_run, #aname "(gate) * up, float64 scalar loop"),
    KITE_ACTIVATION_OPS(REF_ACT_ROW)
        REF_KERNEL(KITE_OP_ACTIVATION_BACKWARD, ref_act_bwd_run, "dy * act'(x) in float64"),
    KITE_GATED_OPS(REF_GATED_ROW)
        REF_KERNEL(KITE_OP_GATED_BACKWARD, ref_gated_bwd_run,
                   "d gate, d up of act(gate) * up in float64, zero where clamped"),
    REF_KERNEL(KITE_OP_RMS_NORM, ref_norm_run, "rms norm, two passes per row in float64"),
    REF_KERNEL(KITE_OP_LAYER_NORM, ref_norm_run, "layer norm, two-pass mean/variance in float64"),
    REF_KERNEL(KITE_OP_ADD_RMS_NORM, ref_norm_run, "residual add + rms norm in float64"),
    REF_KERNEL(KITE_OP_ADD_LAYER_NORM, ref_norm_run, "residual add + layer norm in float64"),
    REF_KERNEL(KITE_OP_RMS_NORM_BACKWARD, ref_norm_bwd_run,
               "rms norm dx, dw (+ residual gradient) in float64, rows in order"),
    REF_KERNEL(KITE_OP_LAYER_NORM_BACKWARD, ref_norm_bwd_run,
               "layer norm dx, dw, db (+ residual gradient) in float64, rows in order"),
    REF_KERNEL(KITE_OP_ROPE, ref_rope_run, "neox/gptj rotary embedding, float64 rotation"),
    REF_KERNEL(KITE_OP_ROPE_BACKWARD, ref_rope_run, "rotation by -theta, float64"),
    REF_KERNEL(KITE_OP_SOFTMAX, ref_softmax_run, "max-subtracted softmax in float64"),
    REF_KERNEL(KITE_OP_SOFTMAX_BACKWARD, ref_softmax_bwd_run, "scale y (dy - y.dy) in float64"),
    REF_KERNEL(KITE_OP_EMBEDDING, ref_embedding_run, "row copy per token, zeros for bad ids"),
    REF_KERNEL(KITE_OP_EMBEDDING_BACKWARD, ref_embedding_bwd_run,
               "scatter-add by a counting sort of the ids, float64 sums in token order"),
    REF_KERNEL(KITE_OP_STORE_KV, ref_store_kv_run, "row copy per token into the paged caches"),
    REF_KERNEL(KITE_OP_PAGED_DECODE, ref_paged_attn_run,
               "paged decode attention, two-pass softmax in float64"),
    REF_KERNEL(KITE_OP_PAGED_PREFILL, ref_paged_attn_run,
               "paged prefill attention, two-pass softmax in float64"),
    REF_KERNEL(KITE_OP_SDPA, ref_sdpa_run,
               "dense attention with masks, two-pass softmax in float64"),
    REF_KERNEL(KITE_OP_SDPA_FP8, ref_sdpa_fp8_run,
               "e4m3 inputs dequantized per block, then sdpa's two-pass softmax in float64"),
    REF_KERNEL(KITE_OP_SDPA_VARLEN, ref_sdpa_varlen_run,
               "packed sequences, each as sdpa's two-pass softmax in float64"),
    REF_KERNEL(KITE_OP_SDPA_BACKWARD, ref_sdpa_backward_run,
               "dq, dk, dv from the saved lse in float64, query heads of a kv head in order"),
    REF_KERNEL(KITE_OP_SDPA_VARLEN_BACKWARD, ref_sdpa_varlen_backward_run,
               "sdpa_backward per packed sequence in float64"),
    REF_KERNEL(KITE_OP_LINEAR, ref_linear_run, "x w^T + bias, one float64 dot per output"),
    REF_KERNEL(KITE_OP_GROUP_GEMM, ref_group_gemm_run, "per-group x w[g]^T, float64 dots"),
    REF_KERNEL(KITE_OP_TOPK_GATING, ref_topk_gating_run,
               "top-k of the logits (lower id on ties), softmax weights in float64"),
    REF_KERNEL(KITE_OP_FUSED_MOE, ref_fused_moe_run,
               "per token and expert: w2 (act(gate) * up), float64 dots"),
    REF_KERNEL(KITE_OP_MOE_ROUTE, ref_moe_route_run,
               "float64 scores, f32 keys, groups by top-2 sums, repeated arg-max (lower id on "
               "ties)"),
    REF_KERNEL(KITE_OP_FUSED_MOE_EX, ref_fused_moe_ex_run,
               "per token and expert: w2 act(w13 x + b13) + b2, clamp, float64 dots"),
    REF_KERNEL(KITE_OP_MOE_AUX_LOSS, ref_moe_aux_loss_run,
               "expert counts and softmax sums over the rows in order, float64"),
    REF_KERNEL(KITE_OP_MOE_AUX_LOSS_BACKWARD, ref_moe_aux_loss_run,
               "counts, then p (c - c.p) per row, float64"),
    REF_KERNEL(KITE_OP_QUANT, ref_quant_run, "per-token symmetric int8 / fp8 e4m3, scalar"),
    REF_KERNEL(KITE_OP_QUANT_FP8_BLOCKS, ref_quant_fp8_blocks_run,
               "e4m3 codes and one scale per 128 rows, scalar"),
    REF_KERNEL(KITE_OP_DEQUANT, ref_quant_run, "int8 / fp8 e4m3 codes times the row scale"),
    REF_KERNEL(KITE_OP_LINEAR_QUANT, ref_linear_quant_run,
               "int64 int8 dots / float64 e4m3 dots, then scales and bias"),
    REF_KERNEL(KITE_OP_CROSS_ENTROPY, ref_ce_run, "loss and lse per row in float64"),
    REF_KERNEL(KITE_OP_CROSS_ENTROPY_BACKWARD, ref_ce_run, "dlogits per row in float64"),
    REF_KERNEL(KITE_OP_CROSS_ENTROPY_WITH_GRAD, ref_ce_run,
               "loss, lse and dlogits per row in float64"),
    REF_KERNEL(KITE_OP_FUSED_LINEAR_CROSS_ENTROPY, ref_flce_run,
               "row by row: float64 logits, loss, dh; float64 dw, db accumulators"),
    REF_KERNEL(KITE_OP_ARGMAX, ref_sample_run, "lowest index of the row maximum, scalar loop"),
    REF_KERNEL(KITE_OP_SAMPLE, ref_sample_run,
               "sorted top-k / top-p, min-p, exponential race over Philox draws, float64"),
    REF_KERNEL(KITE_OP_APPLY_PENALTIES, ref_penalties_run,
               "repetition / presence / frequency penalties from per-row id counts, float64"),
    REF_KERNEL(KITE_OP_LOGPROBS, ref_logprobs_run,
               "float64 log-sum-exp, top n by repeated selection"),
    REF_KERNEL(KITE_OP_SOFTCAP, ref_softcap_run, "cap * tanh(l / cap) in float64"),
    REF_KERNEL(KITE_OP_LINEAR_WQ4, ref_linear_wq4_run,
               "4-bit blocks decoded exactly, float64 dots, bias"),
    REF_COMM_KERNEL(KITE_OP_ALL_REDUCE, "sum over ranks (threads) in float64, rounded once"),
    REF_COMM_KERNEL(KITE_OP_ALL_GATHER, "each rank's x copied into every rank's y"),
    REF_COMM_KERNEL(KITE_OP_REDUCE_SCATTER, "float64 sums of each rank's slice, rounded once"),
    REF_COMM_KERNEL(KITE_OP_ALL_REDUCE_ADD_RMS_NORM,
                    "float64 sum rounded once, then the ref add_rms_norm per rank"),
    REF_KERNEL(KITE_OP_LINEAR_GGUF, ref_gguf_run,
               "GGUF blocks decoded by kite.h's formula in float64, float64 dots, bias"),
    REF_KERNEL(KITE_OP_DEQUANT_GGUF, ref_gguf_run, "GGUF blocks decoded by kite.h's formula"),
    REF_KERNEL(KITE_OP_MLA_STORE_KV, ref_mla_store_kv_run,
               "row copy per token into the latent caches"),
    REF_KERNEL(KITE_OP_MLA_DECODE, ref_mla_decode_run,
               "absorbed MLA decode, two-pass softmax in float64"),
    REF_KERNEL(KITE_OP_LINEAR_GGUF_Q8, ref_gguf_run,
               "x blocks quantized to int8 as kite.h says, float64 dots with the GGUF weights"),
    REF_KERNEL(KITE_OP_GROUP_GEMM_GGUF, ref_group_gguf_run,
               "each group's rows against its GGUF blocks, float64 dots, bias"),
};

static const kite_backend ref_backend_def = {
    .name = "ref",
    .device_type = kDLCPU,
    .description = "portable C reference kernels, float64 accumulation: the ground truth",
    .device_count = ref_device_count,
    .features_present = NULL,
    .synchronize = ref_synchronize,
    .kernels = ref_kernels,
    .num_kernels = sizeof ref_kernels / sizeof ref_kernels[0],
    .userdata = NULL,
    .comm_unique_id = ref_comm_unique_id,
    .comm_create = ref_comm_create,
    .comm_destroy = ref_comm_destroy,
};

const kite_backend *ref_backend(void) {
  return &ref_backend_def;
}

kite_status kite_backend_init_ref(void);
kite_status kite_backend_init_ref(void) {
  return kite_backend_register(&ref_backend_def);
}
