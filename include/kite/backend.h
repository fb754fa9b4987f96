/*
 * kite backend API: what a backend (built in, or a plugin .so) implements.
 *
 * A backend is a name, a device type, memory operations for that device (so the conformance
 * harness and users can test any device) and a list of kernel entries. The op front-ends have
 * validated every argument before a kernel runs: kernels receive plain pointers, sizes and
 * strides in the args structs below and never see a DLTensor.
 *
 * Plugins: export
 *   uint32_t kite_plugin_abi_version = KITE_BACKEND_ABI_VERSION;
 *   kite_status kite_plugin_init(uint32_t host_abi_version);
 * The core reads kite_plugin_abi_version first and refuses a mismatch; kite_plugin_init checks the
 * host's version again and calls kite_backend_register().
 *
 * What a plugin's init may do:
 * - Call back into kite: every function works (kite_kernel_count, kite_config_set,
 *   kite_ctx_create, ops, ...). During library init (built-in backends, auto-loaded plugins) such a
 *   call sees the registry as registered so far, without waiting for init to finish; calls from
 *   other threads wait until init is done, so an init must not wait on another thread that calls
 *   kite.
 * - Not load plugins: kite_backend_load from inside a plugin's init returns KITE_ERR_PLUGIN naming
 *   both files (never a hang).
 * - Fail: when kite_plugin_init returns anything but KITE_OK, every backend it registered is
 *   removed again (its kernels are never selected or listed) and the failure is reported with the
 *   plugin's message. The library stays mapped, as a thread may still be inside one of its kernels.
 */
#ifndef KITE_BACKEND_H
#define KITE_BACKEND_H

#include <stdbool.h>

#include "kite/kite.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever a struct below or the op argument layout changes incompatibly. */
/* 2: kite_backend gained timer_start / timer_stop and host_memory.
 * 3: kite_backend gained the communicator operations (comm_unique_id, comm_create,
 *    comm_create_all, comm_destroy) and kernel_unavailable; kite_comm_args, kite_comm_norm_args.
 * 4: kite_backend gained tensor_address, for device types whose memory is named by a handle
 *    (DLPack's OpenCL: DLTensor.data is a cl_mem, byte_offset the offset in it): data +
 *    byte_offset names nothing there, so the backend maps (handle, offset) to the address its
 *    kernels get; copy and memset take such addresses too.
 * 5: kite_backend gained graph_begin / graph_end / graph_launch / graph_destroy (kite.h
 *    "Graphs"); the attention args structs gained sinks (and dsinks for the backwards);
 *    kite_moe_opts (in kite_moe_ex_args) gained transposed (a kernel built before it would read
 *    gpt-oss's transposed experts as [E, 2I, H] / [E, H, I]). */
#define KITE_BACKEND_ABI_VERSION 5u

typedef struct kite_backend kite_backend;

/* Element types as kernels see them (the front-end maps DLDataType to these). */
typedef enum kite_dtype {
  KITE_DTYPE_F32 = 0,
  KITE_DTYPE_F16,
  KITE_DTYPE_BF16,
  KITE_DTYPE_I32,
  KITE_DTYPE_I8,
  KITE_DTYPE_F64,
  KITE_DTYPE_U8,       /* also boolean masks (KITE_DL_BOOL) */
  KITE_DTYPE_FP8_E4M3, /* OCP e4m3fn */
  KITE_DTYPE_I64,      /* per-row seeds and steps of sample */
  KITE_DTYPE_COUNT
} kite_dtype;
KITE_API const char *kite_dtype_name(kite_dtype t); /* "f32", "bf16", ... */
KITE_API size_t kite_dtype_size(kite_dtype t);      /* bytes per element */
/* The DLPack type of t (U8: kDLUInt 8), for building tensors from kite dtypes; bits 0 for an
 * unknown t. */
KITE_API DLDataType kite_dtype_dlpack(kite_dtype t);

/* ---------------------------------------------------------------------------------------------
 * Op arguments. Every struct starts with the head below, member for member (kite_op op;
 * kite_dtype dtype;): the op id and the element type of its main tensor, so that a kernel or
 * predicate serving several ops reads them through kite_args_head_of() whatever the struct. A new
 * args struct must start the same way. Sizes and strides are in elements; strides are between
 * consecutive rows (or tokens/heads). All pointers are on the ctx's device.
 * ------------------------------------------------------------------------------------------- */

/* The common head of every args struct. */
typedef struct kite_args_head {
  kite_op op;
  kite_dtype dtype;
} kite_args_head;

/* The head of any args struct (args points at one of the structs below). */
static inline const kite_args_head *kite_args_head_of(const void *args) {
  return (const kite_args_head *)args;
}

/* The activation ops, listed once for every layer that needs them (front-end checks, kernels,
 * the harness). KITE_ACTIVATION_OPS(X) expands X(ID, name) for each elementwise activation
 * (KITE_OP_<ID>, kite_<name>), the act that activation_backward takes; KITE_GATED_OPS(X) expands
 * X(ID, name, gate ID, gate name) for each gated activation, the act that gated_backward takes,
 * with the activation of its gate. The backend tables, the front-ends and the harness expand
 * them, so a new activation is a row here, not a row in each table. An
 * activation added to kite_op is added here once. */
#define KITE_ACTIVATION_OPS(X)                                                                     \
  X(SILU, silu) X(GELU, gelu) X(GELU_TANH, gelu_tanh) X(GELU_QUICK, gelu_quick) X(RELU, relu)
#define KITE_GATED_OPS(X)                                                                          \
  X(SILU_AND_MUL, silu_and_mul, SILU, silu)                                                        \
  X(GELU_AND_MUL, gelu_and_mul, GELU, gelu)                                                        \
  X(GELU_TANH_AND_MUL, gelu_tanh_and_mul, GELU_TANH, gelu_tanh)

/* The lists expanded for the helpers below (o: the op asked about). Items are (ID, name) of
 * KITE_OP_<ID> and kite_<name>, gated ones followed by their gate's (ID, name). */
#define KITE_OP_IS_(ID, name) || o == KITE_OP_##ID
#define KITE_GATED_OP_IS_(ID, name, AID, aname) || o == KITE_OP_##ID
#define KITE_GATED_CASE_(ID, name, AID, aname)                                                     \
  case KITE_OP_##ID:                                                                               \
    return KITE_OP_##AID;

/* Whether o is one of KITE_ACTIVATION_OPS. */
static inline bool kite_op_is_activation(kite_op o) {
  return false KITE_ACTIVATION_OPS(KITE_OP_IS_);
}

/* Whether o is one of KITE_GATED_OPS. */
static inline bool kite_op_is_gated(kite_op o) {
  return false KITE_GATED_OPS(KITE_GATED_OP_IS_);
}

/* The activation of the gate of a gated op (KITE_OP_SILU for KITE_OP_SILU_AND_MUL);
 * KITE_OP_COUNT when op is not one of KITE_GATED_OPS. */
static inline kite_op kite_gated_op_act(kite_op op) {
  switch (op) {
    KITE_GATED_OPS(KITE_GATED_CASE_)
  default:
    return KITE_OP_COUNT;
  }
}

/* silu, gelu, gelu_tanh, gelu_quick, relu: x, y viewed as [rows, cols] (cols unit-stride). */
typedef struct kite_act_args {
  kite_op op;
  kite_dtype dtype;
  int64_t rows, cols;
  const void *x;
  int64_t x_stride;
  void *y;
  int64_t y_stride;
} kite_act_args;

/* silu_and_mul, gelu_and_mul, gelu_tanh_and_mul: x[rows, 2*cols] -> y[rows, cols].
 * limit > 0 clamps (gate <= limit, up in [-limit, limit]); 0 means no clamp. */
typedef struct kite_gated_args {
  kite_op op;
  kite_dtype dtype;
  int64_t rows, cols;
  const void *x;
  int64_t x_stride;
  void *y;
  int64_t y_stride;
  float limit;
} kite_gated_args;

/* rms_norm, layer_norm, add_rms_norm, add_layer_norm over rows of length cols.
 * residual is NULL for the plain norms. w, b: [cols] or NULL. offset only for rms.
 * pos = PRE:  s = x + residual (in float), residual <- round(s), y = norm(round(s)): the norm sees
 *             exactly the residual it stores, as a separate add then norm would.
 * pos = POST: y = norm(x + residual) (sum in float), residual <- y (the same rounded values).
 * y may alias x; residual never aliases x or y. */
typedef struct kite_norm_args {
  kite_op op;
  kite_dtype dtype;
  int64_t rows, cols;
  const void *x;
  int64_t x_stride;
  void *residual;
  int64_t residual_stride;
  const void *w;
  const void *b;
  void *y;
  int64_t y_stride;
  float eps;
  float offset;
  kite_norm_pos pos;
} kite_norm_args;

/* rope: q[tokens, hq, head_dim], k[tokens, hkv, head_dim] (k NULL when hkv == 0), in place.
 * positions[tokens] int32, cos_sin[max_pos, rot_dim] f32 compact. Positions are not checked by
 * the front-end (they may live on a device): a kernel that can read them returns INVALID_ARG for
 * one outside [0, max_pos) before writing anything; any kernel must never read outside cos_sin
 * (a device kernel leaves such a token unrotated). */
typedef struct kite_rope_args {
  kite_op op;
  kite_dtype dtype;
  int64_t tokens, hq, hkv, head_dim, rot_dim, max_pos;
  void *q;
  int64_t q_stride_t, q_stride_h;
  void *k;
  int64_t k_stride_t, k_stride_h;
  const int32_t *positions;
  const float *cos_sin;
  kite_rope_style style;
} kite_rope_args;

/* softmax: y[r, :] = softmax(scale * x[r, :]) over cols. */
typedef struct kite_softmax_args {
  kite_op op;
  kite_dtype dtype;
  int64_t rows, cols;
  const void *x;
  int64_t x_stride;
  void *y;
  int64_t y_stride;
  float scale;
} kite_softmax_args;

/* embedding: y[t, :] = table[ids[t], :] for ids in [0, vocab), else zeros. dtype is table's. */
typedef struct kite_embedding_args {
  kite_op op;
  kite_dtype dtype;
  int64_t tokens, hidden, vocab;
  const int32_t *ids;
  const void *table;
  int64_t table_stride;
  void *y;
  int64_t y_stride;
} kite_embedding_args;

/* store_kv: k/v[tokens, hkv, head_dim] (token and head strides) into caches
 * [num_blocks, hkv, block_size, head_dim] compact at slots[tokens]. */
typedef struct kite_store_kv_args {
  kite_op op;
  kite_dtype dtype;
  int64_t tokens, hkv, head_dim;
  const void *k;
  int64_t k_stride_t, k_stride_h;
  const void *v;
  int64_t v_stride_t, v_stride_h;
  void *key_cache, *value_cache;
  int64_t num_blocks, block_size;
  const int32_t *slots;
} kite_store_kv_args;

/* paged_decode (cu_q_lens NULL: tokens == batch, query b at position seq_lens[b] - 1) and
 * paged_prefill (cu_q_lens[batch + 1]). q/o[tokens, hq, head_dim] with token and head strides;
 * caches compact [num_blocks, hkv, block_size, head_dim]; block_table[batch, max_blocks] with a
 * row stride. opts.scale is already resolved (never 0). lse NULL or compact f32 [tokens, hq].
 * sinks NULL or compact f32 [hq] (kite.h: one more softmax score per head, with no value).
 * Indices read from device memory (block ids, seq_lens, cu_q_lens) are not validated by the
 * front-end: a kernel must never read outside the caches for any value (treat an out-of-range
 * block id's keys as absent, clamp seq_len to max_blocks * block_size). */
typedef struct kite_paged_attn_args {
  kite_op op;
  kite_dtype dtype;
  int64_t batch, tokens, hq, hkv, head_dim;
  const void *q;
  int64_t q_stride_t, q_stride_h;
  const void *key_cache, *value_cache;
  int64_t num_blocks, block_size;
  const int32_t *block_table;
  int64_t max_blocks, block_table_stride;
  const int32_t *seq_lens;
  const int32_t *cu_q_lens;
  kite_attn_opts opts;
  void *o;
  int64_t o_stride_t, o_stride_h;
  float *lse;
  const float *sinks;
} kite_paged_attn_args;

/* sdpa: strides [0] batch, [1] head, [2] sequence (head_dim unit-stride). mask NULL or
 * mask_dtype U8 (nonzero = attend) / F32 / dtype (added), strides [b, h, i, j] (0 broadcasts).
 * opts.scale resolved. lse NULL or compact f32 [batch, hq, sq]. sinks NULL or compact f32 [hq]. */
typedef struct kite_sdpa_args {
  kite_op op;
  kite_dtype dtype;
  int64_t batch, hq, hkv, sq, sk, head_dim;
  const void *q;
  int64_t q_stride[3];
  const void *k;
  int64_t k_stride[3];
  const void *v;
  int64_t v_stride[3];
  const void *mask;
  kite_dtype mask_dtype;
  int64_t mask_stride[4];
  kite_attn_opts opts;
  void *o;
  int64_t o_stride[3];
  float *lse;
  const float *sinks;
} kite_sdpa_args;

/* sdpa_fp8: dtype is o's (f32, f16 or bf16); q, k, v e4m3 codes with strides [0] batch, [1]
 * head, [2] sequence (head_dim unit-stride), o likewise. q_scale compact f32 [batch, hq,
 * ceil(sq / KITE_FP8_ATTN_BLOCK)], k_scale and v_scale compact f32 [batch, hkv,
 * ceil(sk / KITE_FP8_ATTN_BLOCK)]. opts.scale resolved, softcap 0, window_left -1. lse NULL or
 * compact f32 [batch, hq, sq]. */
typedef struct kite_sdpa_fp8_args {
  kite_op op;
  kite_dtype dtype;
  int64_t batch, hq, hkv, sq, sk, head_dim;
  const uint8_t *q;
  int64_t q_stride[3];
  const uint8_t *k;
  int64_t k_stride[3];
  const uint8_t *v;
  int64_t v_stride[3];
  const float *q_scale, *k_scale, *v_scale;
  kite_attn_opts opts;
  void *o;
  int64_t o_stride[3];
  float *lse;
} kite_sdpa_fp8_args;

/* quant_fp8_blocks: x[batch, heads, rows, dim] (dtype) and q (e4m3 codes), strides [0] batch, [1]
 * head, [2] row (dim unit-stride); scales compact f32 [batch, heads,
 * ceil(rows / KITE_FP8_ATTN_BLOCK)], every one written. */
typedef struct kite_quant_fp8_blocks_args {
  kite_op op;
  kite_dtype dtype;
  int64_t batch, heads, rows, dim;
  const void *x;
  int64_t x_stride[3];
  uint8_t *q;
  int64_t q_stride[3];
  float *scales;
} kite_quant_fp8_blocks_args;

/* sdpa_varlen: q/o[tq, hq, head_dim], k/v[tk, hkv, head_dim], strides [0] token, [1] head
 * (head_dim unit-stride). Sequence b (< batch): q rows [cu_seqlens_q[b], cu_seqlens_q[b + 1]),
 * key rows [cu_seqlens_k[b], cu_seqlens_k[b + 1]); max_seqlen_q / max_seqlen_k bound every
 * length. On a host ctx the front-end has checked the cu_seqlens values; in device memory they
 * are not validated: a kernel must never read or write outside the tensors for any value (clamp
 * to [0, tq] / [0, tk] and to the max_seqlen bounds). opts.scale resolved. lse NULL or compact
 * f32 [tq, hq]. sinks NULL or compact f32 [hq]. */
typedef struct kite_sdpa_varlen_args {
  kite_op op;
  kite_dtype dtype;
  int64_t batch, tq, tk, hq, hkv, head_dim, max_seqlen_q, max_seqlen_k;
  const int32_t *cu_seqlens_q, *cu_seqlens_k;
  const void *q;
  int64_t q_stride[2];
  const void *k;
  int64_t k_stride[2];
  const void *v;
  int64_t v_stride[2];
  kite_attn_opts opts;
  void *o;
  int64_t o_stride[2];
  float *lse;
  const float *sinks;
} kite_sdpa_varlen_args;

/* mla_store_kv: c_kv[tokens, kv_rank] and k_pe[tokens, rope_dim] with row strides (last dim
 * unit-stride) into the compact caches ckv_cache[num_blocks, block_size, kv_rank] and
 * kpe_cache[num_blocks, block_size, rope_dim] at slots[tokens] (negative: skipped). Slots in
 * device memory are not validated: a kernel skips a slot >= num_blocks * block_size. */
typedef struct kite_mla_store_kv_args {
  kite_op op;
  kite_dtype dtype;
  int64_t tokens, kv_rank, rope_dim;
  const void *c_kv;
  int64_t c_kv_stride;
  const void *k_pe;
  int64_t k_pe_stride;
  void *ckv_cache, *kpe_cache;
  int64_t num_blocks, block_size;
  const int32_t *slots;
} kite_mla_store_kv_args;

/* mla_decode: q_nope[batch, heads, kv_rank] and q_pe[batch, heads, rope_dim] with batch and head
 * strides, the compact caches of mla_store_kv, block_table[batch, max_blocks] with a row stride,
 * seq_lens[batch]; scale finite and > 0. o[batch, heads, kv_rank] with batch and head strides;
 * lse NULL or compact f32 [batch, heads]. Index values in device memory are not validated (as
 * kite_paged_attn_args: never read outside the caches; an out-of-range block's keys are absent,
 * seq_len clamped to [0, max_blocks * block_size]). */
typedef struct kite_mla_decode_args {
  kite_op op;
  kite_dtype dtype;
  int64_t batch, heads, kv_rank, rope_dim;
  const void *q_nope;
  int64_t q_nope_stride_b, q_nope_stride_h;
  const void *q_pe;
  int64_t q_pe_stride_b, q_pe_stride_h;
  const void *ckv_cache, *kpe_cache;
  int64_t num_blocks, block_size;
  const int32_t *block_table;
  int64_t max_blocks, block_table_stride;
  const int32_t *seq_lens;
  float scale;
  void *o;
  int64_t o_stride_b, o_stride_h;
  float *lse;
} kite_mla_decode_args;

/* sdpa_backward: fwd is the forward's call (fwd.o its output, fwd.lse its lse, never NULL; both
 * read only). dout/dq[batch, hq, sq, head_dim], dk/dv[batch, hkv, sk, head_dim], strides [0]
 * batch, [1] head, [2] sequence, head_dim unit-stride; dq, dk, dv are overwritten. dsinks NULL
 * (then not computed) or compact f32 [hq], overwritten; never given without fwd.sinks. */
typedef struct kite_sdpa_backward_args {
  kite_op op;
  kite_dtype dtype;
  kite_sdpa_args fwd;
  const void *dout;
  int64_t dout_stride[3];
  void *dq;
  int64_t dq_stride[3];
  void *dk;
  int64_t dk_stride[3];
  void *dv;
  int64_t dv_stride[3];
  float *dsinks;
} kite_sdpa_backward_args;

/* sdpa_varlen_backward: as sdpa_backward over kite_sdpa_varlen_args (strides [0] token, [1]
 * head). Key rows no sequence covers get zeros in dk / dv. */
typedef struct kite_sdpa_varlen_backward_args {
  kite_op op;
  kite_dtype dtype;
  kite_sdpa_varlen_args fwd;
  const void *dout;
  int64_t dout_stride[2];
  void *dq;
  int64_t dq_stride[2];
  void *dk;
  int64_t dk_stride[2];
  void *dv;
  int64_t dv_stride[2];
  float *dsinks;
} kite_sdpa_varlen_backward_args;

/* linear: y[m, n] = x[m, k] w[n, k]^T + bias[n] (bias NULL or [n]); row strides. */
typedef struct kite_linear_args {
  kite_op op;
  kite_dtype dtype;
  int64_t m, n, k;
  const void *x;
  int64_t x_stride;
  const void *w;
  int64_t w_stride;
  const void *bias;
  void *y;
  int64_t y_stride;
} kite_linear_args;

/* group_gemm: w[groups, n, k] with strides (group, row). group_sizes is read by the kernel
 * (it may be device memory): negative sizes count as 0, rows past m are ignored, and rows of y
 * past the sum of the sizes are set to zero. */
typedef struct kite_group_gemm_args {
  kite_op op;
  kite_dtype dtype;
  int64_t m, n, k, groups;
  const void *x;
  int64_t x_stride;
  const void *w;
  int64_t w_stride_g, w_stride_n;
  const int32_t *group_sizes;
  void *y;
  int64_t y_stride;
} kite_group_gemm_args;

/* topk_gating: logits[tokens, experts] (row stride) -> weights[tokens, k] f32, ids[tokens, k]
 * int32 (row strides). */
typedef struct kite_topk_args {
  kite_op op;
  kite_dtype dtype;
  int64_t tokens, experts, k;
  int renormalize;
  const void *logits;
  int64_t logits_stride;
  float *weights;
  int64_t weights_stride;
  int32_t *ids;
  int64_t ids_stride;
} kite_topk_args;

/* fused_moe: x[tokens, hidden] (row stride), w13[experts, 2*inter, hidden] and
 * w2[experts, hidden, inter] compact, weights/ids[tokens, topk] (row strides), y row stride. */
typedef struct kite_moe_args {
  kite_op op;
  kite_dtype dtype;
  int64_t tokens, hidden, inter, experts, topk;
  const void *x;
  int64_t x_stride;
  const void *w13;
  const void *w2;
  const float *weights;
  int64_t weights_stride;
  const int32_t *ids;
  int64_t ids_stride;
  kite_moe_act act;
  void *y;
  int64_t y_stride;
} kite_moe_args;

/* moe_route: logits[tokens, experts] (row stride), bias f32 [experts] or NULL -> weights[tokens,
 * k] f32, ids[tokens, k] int32 (row strides); opts validated (groups divide the experts, enough
 * experts in the kept groups). */
typedef struct kite_route_args {
  kite_op op;
  kite_dtype dtype;
  int64_t tokens, experts;
  kite_route_opts opts;
  const void *logits;
  int64_t logits_stride;
  const float *bias;
  float *weights;
  int64_t weights_stride;
  int32_t *ids;
  int64_t ids_stride;
} kite_route_args;

/* fused_moe_ex: kite_moe_args (op KITE_OP_FUSED_MOE_EX; its act is opts.act) plus b13[experts,
 * 2*inter] and b2[experts, hidden] compact or NULL, and the options; with opts.transposed, w13 is
 * [experts, hidden, 2*inter] and w2 [experts, inter, hidden] (compact). */
typedef struct kite_moe_ex_args {
  kite_op op;
  kite_dtype dtype;
  kite_moe_args moe;
  const void *b13;
  const void *b2;
  kite_moe_opts opts;
} kite_moe_ex_args;

/* moe_aux_loss (-> loss f32 [1]) and moe_aux_loss_backward (dloss f32 [1] -> dlogits, row
 * stride): logits[tokens, experts] (row stride), ids[tokens, k] (row stride), mask f32 [tokens]
 * compact or NULL. */
typedef struct kite_aux_loss_args {
  kite_op op;
  kite_dtype dtype;
  int64_t tokens, experts, k;
  const void *logits;
  int64_t logits_stride;
  const int32_t *ids;
  int64_t ids_stride;
  const float *mask;
  float *loss;
  const float *dloss;
  void *dlogits;
  int64_t dlogits_stride;
} kite_aux_loss_args;

/* quant (x -> q, scales) and dequant (q, scales -> y): dtype is the float side's, qdtype I8 or
 * FP8_E4M3; x/y and q with row strides; scales compact f32 [rows]. */
typedef struct kite_quant_args {
  kite_op op;
  kite_dtype dtype;
  kite_dtype qdtype;
  int64_t rows, cols;
  const void *x; /* quant: input; dequant: NULL */
  int64_t x_stride;
  void *q; /* quant: output; dequant: input */
  int64_t q_stride;
  float *scales; /* quant: output; dequant: input */
  void *y;       /* dequant: output; quant: NULL */
  int64_t y_stride;
} kite_quant_args;

/* linear_quant: y[m, n] (dtype) = (xq . wq^T) * x_scales[m] * w_scales[n] + bias[n]. */
typedef struct kite_linear_quant_args {
  kite_op op;
  kite_dtype dtype;
  kite_dtype qdtype;
  int64_t m, n, k;
  const void *xq;
  int64_t x_stride;
  const float *x_scales;
  const void *wq;
  int64_t w_stride;
  const float *w_scales;
  const void *bias;
  void *y;
  int64_t y_stride;
} kite_linear_quant_args;

/* ---- training (kite.h "Training") ----------------------------------------------------------- */

/* activation_backward (act: SILU..RELU) and gated_backward (act: *_AND_MUL):
 * x[rows, cols_x], dy[rows, cols], dx[rows, cols_x] with cols_x = cols (activation) or 2 cols
 * (gated). dx may alias dy for activation_backward. limit as kite_gated_args. */
typedef struct kite_act_bwd_args {
  kite_op op;
  kite_dtype dtype;
  kite_op act;
  int64_t rows, cols;
  const void *x;
  int64_t x_stride;
  const void *dy;
  int64_t dy_stride;
  void *dx;
  int64_t dx_stride;
  float limit;
} kite_act_bwd_args;

/* rms_norm_backward / layer_norm_backward over rows of length cols: x is the norm's input (s for
 * the fused pre rule), dres NULL or the residual's gradient added to dx. w NULL or [cols];
 * dw, db NULL (not wanted) or compact [cols] of dtype. dx may alias dy or dres, never x. */
typedef struct kite_norm_bwd_args {
  kite_op op;
  kite_dtype dtype;
  int64_t rows, cols;
  const void *x;
  int64_t x_stride;
  const void *w;
  const void *dy;
  int64_t dy_stride;
  const void *dres;
  int64_t dres_stride;
  void *dx;
  int64_t dx_stride;
  void *dw;
  void *db;
  float eps;
  float offset;
} kite_norm_bwd_args;

/* rope_backward uses kite_rope_args (q, k hold dq, dk). */

/* softmax_backward: y (forward output), dy -> dx, [rows, cols] each; dx may alias dy. */
typedef struct kite_softmax_bwd_args {
  kite_op op;
  kite_dtype dtype;
  int64_t rows, cols;
  const void *y;
  int64_t y_stride;
  const void *dy;
  int64_t dy_stride;
  void *dx;
  int64_t dx_stride;
  float scale;
} kite_softmax_bwd_args;

/* embedding_backward: dtable[vocab, hidden] = scatter-add of dy[tokens, hidden] at ids. */
typedef struct kite_embedding_bwd_args {
  kite_op op;
  kite_dtype dtype;
  int64_t tokens, hidden, vocab;
  const int32_t *ids;
  const void *dy;
  int64_t dy_stride;
  void *dtable;
  int64_t dtable_stride;
} kite_embedding_bwd_args;

/* cross_entropy (forward: loss, lse), cross_entropy_backward (dloss, lse -> dlogits) and
 * cross_entropy_with_grad (loss, lse and dlogits of dloss = 1; dloss NULL):
 * logits[rows, vocab] with a row stride; targets[rows]; loss f32 [rows] (none) or [1]; lse f32
 * [rows] (forward, with_grad: NULL when not wanted); dloss f32 [rows] (none) or [1]; dlogits with
 * a row stride, possibly == logits (same stride then). Targets are not checked by the front-end. */
typedef struct kite_ce_args {
  kite_op op;
  kite_dtype dtype;
  int64_t rows, vocab;
  const void *logits;
  int64_t logits_stride;
  const int32_t *targets;
  kite_ce_opts opts;
  float *loss;
  float *lse;
  const float *dloss;
  void *dlogits;
  int64_t dlogits_stride;
} kite_ce_args;

/* fused_linear_cross_entropy: h[rows, hidden], w[vocab, hidden] (row strides), bias[vocab] or
 * NULL, targets[rows]; loss f32 as kite_ce_args; dh[rows, hidden], dw[vocab, hidden] (row
 * strides) and db[vocab], each NULL when not wanted. chunk_bytes resolved (never 0). */
typedef struct kite_flce_args {
  kite_op op;
  kite_dtype dtype;
  int64_t rows, hidden, vocab;
  const void *h;
  int64_t h_stride;
  const void *w;
  int64_t w_stride;
  const void *bias;
  const int32_t *targets;
  kite_ce_opts opts;
  size_t chunk_bytes;
  float *loss;
  void *dh;
  int64_t dh_stride;
  void *dw;
  int64_t dw_stride;
  void *db;
} kite_flce_args;

/* argmax and sample: logits[rows, vocab] (row stride) -> tokens[rows] int32, compact.
 * argmax leaves every parameter NULL. The per-row parameters are compact [rows] or NULL (default)
 * and are not validated by the front-end (they may live on a device): kite/sampling.h decodes
 * them the same way for every backend. */
typedef struct kite_sample_args {
  kite_op op;
  kite_dtype dtype;
  int64_t rows, vocab;
  const void *logits;
  int64_t logits_stride;
  const float *temperature;
  const int32_t *top_k;
  const float *top_p;
  const float *min_p;
  const int64_t *seeds;
  const int64_t *steps;
  uint64_t seed, step;
  int32_t *tokens;
} kite_sample_args;

/* apply_penalties, in place on logits[rows, vocab] (row stride). prompt_ids[rows, prompt_len]
 * and output_ids[rows, output_len] int32 with row strides (NULL when absent, length 0); ids
 * outside [0, vocab) are ignored. repetition, presence, frequency compact f32 [rows] or NULL. */
typedef struct kite_penalty_args {
  kite_op op;
  kite_dtype dtype;
  int64_t rows, vocab;
  void *logits;
  int64_t logits_stride;
  const int32_t *prompt_ids;
  int64_t prompt_len, prompt_stride;
  const int32_t *output_ids;
  int64_t output_len, output_stride;
  const float *repetition, *presence, *frequency;
} kite_penalty_args;

/* softcap, in place on logits[rows, vocab] (row stride); cap > 0 and finite. */
typedef struct kite_softcap_args {
  kite_op op;
  kite_dtype dtype;
  int64_t rows, vocab;
  void *logits;
  int64_t logits_stride;
  float cap;
} kite_softcap_args;

/* logprobs: logits[rows, vocab] (row stride); tokens[rows] and token_logprobs[rows] compact (both
 * NULL or both set); top_ids[rows, n] and top_logprobs[rows, n] with row strides (NULL when
 * n == 0). */
typedef struct kite_logprobs_args {
  kite_op op;
  kite_dtype dtype;
  int64_t rows, vocab, n;
  const void *logits;
  int64_t logits_stride;
  const int32_t *tokens;
  float *token_logprobs;
  int32_t *top_ids;
  int64_t top_ids_stride;
  float *top_logprobs;
  int64_t top_logprobs_stride;
} kite_logprobs_args;

/* linear_wq4: y[m, n] (dtype) = x[m, k] w^T + bias[n]; w rows of k / 32 blocks of `format`
 * (kite.h), w_stride in bytes between rows. */
typedef struct kite_linear_wq4_args {
  kite_op op;
  kite_dtype dtype;
  kite_wq4_format format;
  int64_t m, n, k;
  const void *x;
  int64_t x_stride;
  const uint8_t *w;
  int64_t w_stride;
  const void *bias;
  void *y;
  int64_t y_stride;
} kite_linear_wq4_args;

/* linear_gguf and dequant_gguf: w rows of k / bv blocks of `type` (kite.h: bv values in bb
 * bytes each), w_stride in bytes between rows. linear_gguf: y[m, n] (dtype) = x[m, k] w^T +
 * bias[n]; dequant_gguf: y[n, k] (dtype) = w's values, m 0 and x, bias NULL. */
typedef struct kite_gguf_args {
  kite_op op;
  kite_dtype dtype;
  kite_gguf_type type;
  int64_t bv, bb;
  int64_t m, n, k;
  const void *x;
  int64_t x_stride;
  const uint8_t *w;
  int64_t w_stride;
  const void *bias;
  void *y;
  int64_t y_stride;
} kite_gguf_args;

/* group_gemm_gguf: the blocks and x, y as kite_gguf_args; w[groups, n, k / bv blocks] with byte
 * strides w_stride_g, w_stride_n; group_sizes[groups] int32 (kite.h's rule; on a CPU ctx the
 * front-end has checked them: each >= 0, summing to m); bias [groups, n] compact or NULL. */
typedef struct kite_group_gguf_args {
  kite_op op;
  kite_dtype dtype;
  kite_gguf_type type;
  int64_t bv, bb;
  int64_t m, n, k, groups;
  const void *x;
  int64_t x_stride;
  const uint8_t *w;
  int64_t w_stride_g, w_stride_n;
  const int32_t *group_sizes;
  const void *bias;
  void *y;
  int64_t y_stride;
} kite_group_gguf_args;

/* ---- communication (kite.h "Communication between ranks") ----------------------------------- */

/* The comm a collective runs on: the backend that created it (kite_backend.comm_create) and that
 * backend's handle. A kernel runs only on its own backend's comms: its supports() compares
 * comm_backend with its backend and declines any other. */
typedef struct kite_comm_ref {
  const kite_backend *backend;
  void *handle;
  int nranks, rank;
} kite_comm_ref;

/* all_reduce (x, y: count elements), all_gather (x: count, y: nranks * count) and
 * reduce_scatter (x: nranks * count, y: count), compact. In place: all_reduce y == x;
 * all_gather x == y + rank * count; reduce_scatter y == x + rank * count (elements). */
typedef struct kite_comm_args {
  kite_op op;
  kite_dtype dtype;
  kite_comm_ref comm;
  int64_t count;
  const void *x;
  void *y;
} kite_comm_args;

/* all_reduce_add_rms_norm: norm is this rank's add_rms_norm after the all-reduce (norm.op
 * KITE_OP_ADD_RMS_NORM, norm.dtype the dtype) with norm.x this rank's partial sums, compact
 * [rows, cols] (x_stride == cols). A kernel all-reduces norm.x into a buffer of its own (x is
 * never written) and runs add_rms_norm with that buffer as x. */
typedef struct kite_comm_norm_args {
  kite_op op;
  kite_dtype dtype;
  kite_comm_ref comm;
  kite_norm_args norm;
} kite_comm_norm_args;

/* ---------------------------------------------------------------------------------------------
 * Kernel entries
 * ------------------------------------------------------------------------------------------- */
typedef struct kite_kernel kite_kernel;

/* Returns true when the kernel can run these (validated) args; otherwise false and *why, a
 * static string ("dtype f16 not implemented", "head_dim must be 128"). NULL supports = all. */
typedef bool (*kite_supports_fn)(const kite_kernel *k, const void *args, const char **why);
/* Runs the kernel on ctx's device and stream. Returns KITE_OK or an error set through
 * kite_set_error(). Must not block on the device unless the op says so.
 * run may assume that the args were validated by the op's front-end and that supports()
 * returned true for them: dispatch calls it only then, and so does kite_kernel_run() for callers
 * that go around dispatch. It need not check either again. Both callers normalize a failure: a
 * value outside kite_status becomes KITE_ERR_INTERNAL, an error without a message gets one naming
 * the op and the kernel. */
typedef kite_status (*kite_run_fn)(const kite_kernel *k, kite_ctx *ctx, const void *args);

struct kite_kernel {
  kite_op op;
  const char *variant;       /* unique within the backend and op: "generic", "avx2", ... */
  int priority;              /* higher wins among eligible kernels; ref uses 0 */
  uint64_t features;         /* bits of the backend's feature mask this kernel needs (0 = none) */
  const char *features_str;  /* the same, for people: "avx2,fma,f16c" */
  kite_supports_fn supports; /* NULL = accepts every validated call */
  kite_run_fn run;
  const char *description; /* one line */
  const void *userdata;    /* free for the backend */
};

struct kite_backend {
  const char *name; /* "ref", "cpu", "cuda", "acme": [a-z0-9_], unique */
  DLDeviceType device_type;
  const char *description;

  /* Devices of device_type this backend can use now (0: its kernels do not run here). */
  int (*device_count)(const kite_backend *b);
  /* Feature bits present on this machine (compared with kite_kernel.features). NULL = all. */
  uint64_t (*features_present)(const kite_backend *b);

  /* Memory operations. May be NULL when another registered backend drives the same device type
   * (the first backend registered with memory operations for a type serves it); host memory
   * (kDLCPU) is served by the core when no backend brings its own. alloc returns, and free
   * takes, what DLTensor.data holds (a handle where tensor_address is set); copy and memset take
   * device addresses: data + byte_offset, or tensor_address's result where it is set (the core
   * maps kite_memcpy's handles first). */
  kite_status (*alloc)(const kite_backend *b, int device_id, size_t bytes, void **out);
  void (*free)(const kite_backend *b, int device_id, void *ptr);
  /* Asynchronous on `stream` where the device allows; the core synchronizes after it when a
   * host-visible result is promised. */
  kite_status (*copy)(const kite_backend *b, int device_id, void *dst, const void *src,
                      size_t bytes, kite_copy_kind kind, void *stream);
  kite_status (*memset)(const kite_backend *b, int device_id, void *dst, int value, size_t bytes,
                        void *stream);
  kite_status (*synchronize)(const kite_backend *b, int device_id, void *stream);

  const kite_kernel *kernels; /* array, lives as long as the backend */
  size_t num_kernels;
  void *userdata;

  /* Optional device timer, for harnesses (kite bench times the device's copy ceiling with it):
   * timer_start marks the current point of `stream` and returns a handle in *timer; timer_stop
   * marks the end, waits for it, returns the device time between the marks in *seconds and frees
   * the handle. NULL on a backend whose device has none (the host clock is used then). */
  kite_status (*timer_start)(const kite_backend *b, int device_id, void *stream, void **timer);
  kite_status (*timer_stop)(const kite_backend *b, int device_id, void *stream, void *timer,
                            double *seconds);

  /* True when this backend's memory is host memory that the host may read at any time (the
   * core's own host memory is): the op front-ends then check index values (block tables,
   * lengths, slots, group sizes) before dispatch, and kite_memcpy refuses overlapping ranges.
   * False (the default) leaves index values to the kernels, which never read out of bounds. */
  bool host_memory;
  /* Optional communicators (kite.h "Communication between ranks"), all NULL on a backend
   * without them. The core uses the first registered backend of a device type whose comm_create
   * is set. comm_unique_id fills a new group id; comm_create makes rank `rank` of nranks of
   * group id on ctx's device and returns the backend's handle (it may wait for the other ranks);
   * comm_create_all makes the nranks ranks of one new group on ctxs[i]'s devices at once, or is
   * NULL, and the core then takes a new id and calls comm_create for rank 0, 1, ... in turn on
   * one thread (so comm_create must not wait for the other ranks then); comm_destroy frees a
   * handle. Arguments are validated by the core (non-NULL, 0 <= rank < nranks). */
  kite_status (*comm_unique_id)(const kite_backend *b, kite_ctx *ctx, kite_comm_id *id);
  kite_status (*comm_create)(const kite_backend *b, kite_ctx *ctx, const kite_comm_id *id,
                             int nranks, int rank, void **comm);
  kite_status (*comm_create_all)(const kite_backend *b, kite_ctx *const *ctxs, int nranks,
                                 void **comms);
  void (*comm_destroy)(const kite_backend *b, void *comm);

  /* Optional: why kernel k of this backend cannot run on this machine although the device is
   * present (a library it loads at run time is missing: "NCCL not found: ..."), or NULL when it
   * can. kite list shows the reason; dispatch skips the kernel. Called under the registry lock:
   * it must not call back into kite. */
  const char *(*kernel_unavailable)(const kite_backend *b, const kite_kernel *k);

  /* Optional (ABI 4), on the backend that serves the memory of its device type: the device
   * address of the tensor whose DLTensor.data is `data` (never NULL) and byte_offset
   * `byte_offset`, spanning `bytes` bytes from there (0 for an empty tensor), in *out. For
   * device types whose memory is a handle (an OpenCL cl_mem), where data + byte_offset names
   * nothing. The core calls it once per tensor of an op (in the front-end's checks) and for each
   * device side of kite_memcpy, and uses the address as it uses data + byte_offset otherwise:
   * kernels get it, the overlap and disjointness checks compare it, alignment is checked on it.
   * So the same (data, byte_offset) must always give the same address, addresses of one handle
   * must be offsets into one range (address(data, o) == address(data, 0) + o) and ranges of
   * different handles must not meet. Errors (INVALID_ARG: not a handle of this device, the range
   * runs past its end) refuse the call with the backend's message, which the core prefixes with
   * "<op>: <arg>: ". May be called from any thread. NULL: the address is data + byte_offset. */
  kite_status (*tensor_address)(const kite_backend *b, int device_id, void *data,
                                uint64_t byte_offset, uint64_t bytes, void **out);

  /* Optional (ABI 5), on the backend that serves the memory of its device type: graphs
   * (kite.h "Graphs"). graph_begin returns in *recording a stream of device_id whose work is
   * recorded, not run; the core hands it to kernels as the ctx's stream until graph_end, which
   * ends the recording, frees that stream and returns the replayable graph in *graph (on error
   * too it frees the stream and leaves *graph NULL). graph_launch queues graph on stream;
   * graph_destroy frees it. All four set or all four NULL (the core then refuses recording). */
  kite_status (*graph_begin)(const kite_backend *b, int device_id, void *stream, void **recording);
  kite_status (*graph_end)(const kite_backend *b, int device_id, void *recording, void **graph);
  kite_status (*graph_launch)(const kite_backend *b, int device_id, void *stream, void *graph);
  void (*graph_destroy)(const kite_backend *b, int device_id, void *graph);
};

/* Registers a backend and its kernels (copied by reference: both must outlive the library).
 * Called by built-in backends at library init and by plugins from kite_plugin_init.
 * Errors: INVALID_ARG (NULL, empty name, bad kernel entry, two entries with the same op and
 * variant), PLUGIN (duplicate backend name, registry full); nothing is registered then. */
KITE_API kite_status kite_backend_register(const kite_backend *b);

/* Sets the thread-local error message (printf format) and returns s, for kernels and plugins:
 *   return kite_set_error(KITE_ERR_DEVICE, "rms_norm: cuda launch failed: %s", msg); */
KITE_API kite_status kite_set_error(kite_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* slots[tokens] (int32, in host memory) of the store ops (store_kv, mla_store_kv): each below
 * capacity, the cache's num_blocks * block_size (a negative slot is padding), else INVALID_ARG
 * "<op>: slots[i] = ...". The core's check where the slots are readable, and a kernel's that
 * reads them on the host when called directly. */
static inline kite_status kite_check_slots(const char *op, const int32_t *slots, int64_t tokens,
                                           int64_t capacity) {
  for (int64_t i = 0; i < tokens; i++)
    if (slots[i] >= capacity)
      return kite_set_error(KITE_ERR_INVALID_ARG,
                            "%s: slots[%lld] = %d is past the cache's %lld slots", op, (long long)i,
                            (int)slots[i], (long long)capacity);
  return KITE_OK;
}

/* ctx accessors for kernels. */
KITE_API DLDevice kite_ctx_device(const kite_ctx *ctx);
KITE_API void *kite_ctx_stream(const kite_ctx *ctx);
KITE_API int kite_ctx_num_threads(const kite_ctx *ctx); /* >= 1 */
KITE_API uint64_t kite_ctx_seed(const kite_ctx *ctx);
/* kite_check_flags in force (the params' and KITE_CHECK's). A device backend that honours
 * KITE_CHECK_INDICES records the first bad index value its kernels meet and returns it as an
 * INVALID_ARG from its synchronize(); host backends never see bad values (the front-ends
 * refuse them first). */
KITE_API uint32_t kite_ctx_checks(const kite_ctx *ctx);
/* Scratch memory of at least `bytes` on the ctx's device, reused across calls (grows as needed,
 * freed with the ctx). Valid until the next workspace request on the same ctx. */
KITE_API kite_status kite_ctx_workspace(kite_ctx *ctx, size_t bytes, void **out);

/* The registered kernel entry behind kite_kernel_get(i) (for harnesses timing a direct call). */
KITE_API const kite_kernel *kite_kernel_entry(size_t i);

/* The device timer of ctx's device (kite_backend.timer_start / timer_stop): start marks the
 * current point of ctx's stream, stop marks the end, waits and gives the device seconds between.
 * Errors: INVALID_ARG (NULL), UNSUPPORTED (the device has no timer: time on the host). */
KITE_API kite_status kite_ctx_timer_start(kite_ctx *ctx, void **timer);
KITE_API kite_status kite_ctx_timer_stop(kite_ctx *ctx, void *timer, double *seconds);

/* Runs kernel k directly, around dispatch (a harness timing one kernel): first k->supports(),
 * then k->run. args must be a validated args struct of k's op (from the op's front-end, as
 * dispatch gives it); ctx on k's device.
 * Errors: INVALID_ARG (NULL k, ctx or args; args of another op), UNSUPPORTED (supports() said
 * no: "<op>: <variant>: <why>"), or what run returns, normalized as dispatch does (above). */
KITE_API kite_status kite_kernel_run(const kite_kernel *k, kite_ctx *ctx, const void *args);

/* Plugin entry points (exported by the plugin, looked up by the core). */
typedef kite_status (*kite_plugin_init_fn)(uint32_t host_abi_version);
#define KITE_PLUGIN_INIT_SYMBOL "kite_plugin_init"
#define KITE_PLUGIN_ABI_SYMBOL "kite_plugin_abi_version"

#ifdef __cplusplus
}
#endif

#endif /* KITE_BACKEND_H */
