/*
 * The CUDA backend, private to backends/cuda: the run and supports functions of each op family
 * (one .cu file each, listed in the kernel table of cuda_plugin.c) and the host helpers they share.
 * Plain C so that cuda_plugin.c is C11; the .cu files include it through common.cuh.
 *
 * Adding an op: a new .cu file defining cuda_<op>_run (and a supports function per restricted
 * variant), its declarations here, and its rows in the table of cuda_plugin.c.
 */
#ifndef KITE_CUDA_BACKEND_H
#define KITE_CUDA_BACKEND_H

#include <stdbool.h>

#include "kite/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- cuda_device.c: the bottom of the plugin's host code ---- */
/* Makes the ctx's device current and returns its stream (NULL = the default stream).
 * Errors: DEVICE naming op. The .cu files call it through kite_cuda::begin (common.cuh). */
kite_status cuda_begin(kite_ctx *ctx, const char *op, void **stream);
/* Turns a failed launch (cudaGetLastError) into DEVICE "<op>: <variant>: launch failed: ...". */
kite_status cuda_check_launch(const char *op, const char *variant);
/* Makes device_id current (skipped when it is). Errors: DEVICE naming op. */
kite_status cuda_use_device(const char *op, int device_id);
/* DEVICE "<op>: <what>: <CUDA's message for e>" (e a cudaError_t), the error cleared. */
kite_status cuda_device_error(const char *op, const char *what, int e);

/* cuda_graph.c: the backend's graph operations (backend.h graph_*). */
kite_status cuda_graph_begin(const kite_backend *b, int device_id, void *stream, void **recording);
kite_status cuda_graph_end(const kite_backend *b, int device_id, void *recording, void **graph);
kite_status cuda_graph_launch(const kite_backend *b, int device_id, void *stream, void *graph);
void cuda_graph_destroy(const kite_backend *b, int device_id, void *graph);

/* index_check.cu: under KITE_CHECK_INDICES (kite_ctx_checks), launches the check of the index
 * values of args (store_kv, paged_decode, paged_prefill, mla_*, group_gemm) on the ctx's stream
 * before the op's kernels; a no-op otherwise. cuda_index_report, after a stream synchronization,
 * returns INVALID_ARG for the first bad value recorded on the device since the last report. */
kite_status cuda_index_check(kite_ctx *ctx, const void *args);
kite_status cuda_index_report(int device_id);

/* Names for messages, never NULL. */
const char *cuda_op_str(kite_op op);
const char *cuda_dtype_str(kite_dtype t);

/* Feature bits of the backend (kite_kernel.features): present when every visible GPU has them. */
#define CUDA_FEATURE_SM90 (1ull << 0) /* thread block clusters, distributed shared memory */

/* Signatures of kite_kernel.supports and .run, for the declarations below. */
#define CUDA_SUPPORTS(name) bool name(const kite_kernel *k, const void *args, const char **why)
#define CUDA_RUN(name) kite_status name(const kite_kernel *k, kite_ctx *ctx, const void *args)

/* cuda_device.c: an f32, f16 or bf16 dtype (else false with *why set); and the supports() of
 * every kernel that takes any layout of those, which is that check alone. */
bool cuda_float_dtype(kite_dtype t, const char **why);
CUDA_SUPPORTS(cuda_float_supports);

/* activation.cu: silu, gelu, gelu_tanh, gelu_quick, relu and the gated forms */
CUDA_SUPPORTS(cuda_act_vec_supports);
CUDA_RUN(cuda_act_vec_run);
CUDA_RUN(cuda_act_generic_run);

/* activation.cu: silu_and_mul, gelu_and_mul, gelu_tanh_and_mul */
CUDA_SUPPORTS(cuda_gated_vec_supports);
CUDA_RUN(cuda_gated_vec_run);
CUDA_RUN(cuda_gated_generic_run);

/* norm.cu: rms_norm, layer_norm, add_rms_norm, add_layer_norm */
CUDA_SUPPORTS(cuda_norm_vec_supports);
CUDA_RUN(cuda_norm_vec_run);
CUDA_RUN(cuda_norm_generic_run);

/* rope.cu */
CUDA_SUPPORTS(cuda_rope_vec_supports);
CUDA_RUN(cuda_rope_vec_run);
CUDA_RUN(cuda_rope_generic_run);

/* softmax.cu, softmax_cluster.cu */
CUDA_SUPPORTS(cuda_softmax_cluster_supports);
CUDA_RUN(cuda_softmax_cluster_run);
CUDA_SUPPORTS(cuda_softmax_split_supports);
CUDA_SUPPORTS(cuda_softmax_vec_supports);
CUDA_RUN(cuda_softmax_split_run);
CUDA_RUN(cuda_softmax_vec_run);
CUDA_RUN(cuda_softmax_generic_run);

/* embedding.cu */
CUDA_SUPPORTS(cuda_embedding_vec_supports);
CUDA_RUN(cuda_embedding_vec_run);
CUDA_RUN(cuda_embedding_generic_run);

/* ---- training: backward ops (kite.h "Training") ---- */
/* activation.cu: activation_backward, gated_backward */
CUDA_SUPPORTS(cuda_act_bwd_vec_supports);
CUDA_RUN(cuda_act_bwd_vec_run);
CUDA_RUN(cuda_act_bwd_generic_run);
/* norm_backward.cu: rms_norm_backward, layer_norm_backward (and their fused pre-rule forms) */
CUDA_SUPPORTS(cuda_norm_bwd_rows_supports);
CUDA_SUPPORTS(cuda_norm_bwd_vec_supports);
CUDA_SUPPORTS(cuda_norm_bwd_wide_supports);
CUDA_RUN(cuda_norm_bwd_rows_fused_run);
CUDA_RUN(cuda_norm_bwd_rows_fused_wide_run);
CUDA_RUN(cuda_norm_bwd_vec_run);
CUDA_RUN(cuda_norm_bwd_generic_run);
/* rope_backward: rope.cu's kernels (cuda_rope_*), turning by -theta */
/* softmax.cu: softmax_backward */
CUDA_SUPPORTS(cuda_softmax_bwd_vec_supports);
CUDA_RUN(cuda_softmax_bwd_vec_run);
CUDA_RUN(cuda_softmax_bwd_generic_run);
/* embedding.cu: embedding_backward */
CUDA_SUPPORTS(cuda_embedding_bwd_supports);
CUDA_RUN(cuda_embedding_bwd_run);

/* sampling.cu: argmax, sample (one run), logprobs, apply_penalties, softcap */
CUDA_RUN(cuda_sample_run);
CUDA_RUN(cuda_logprobs_run);
CUDA_RUN(cuda_penalties_run);
CUDA_RUN(cuda_softcap_run);
/* sampling_cluster.cu: argmax, sample, logprobs of long rows, a cluster of blocks per row */
CUDA_SUPPORTS(cuda_sample_cluster_supports);
CUDA_SUPPORTS(cuda_logprobs_cluster_supports);
CUDA_RUN(cuda_sample_cluster_run);
CUDA_RUN(cuda_logprobs_cluster_run);
/* sampling_select.cu: sample with top-k, candidates above a running threshold, 1-16 blocks a row */
CUDA_SUPPORTS(cuda_sample_select_supports);
CUDA_RUN(cuda_sample_select_run);
CUDA_SUPPORTS(cuda_sample_select16_supports);
CUDA_RUN(cuda_sample_select16_run);

/* attention.cu: store_kv, paged_decode, paged_prefill, sdpa, sdpa_varlen */
CUDA_RUN(cuda_store_kv_run);
CUDA_SUPPORTS(cuda_paged_vec_supports);
CUDA_SUPPORTS(cuda_paged_generic_supports);
CUDA_RUN(cuda_paged_vec_run);
CUDA_RUN(cuda_paged_generic_run);
CUDA_SUPPORTS(cuda_sdpa_vec_supports);
CUDA_SUPPORTS(cuda_sdpa_generic_supports);
CUDA_RUN(cuda_sdpa_vec_run);
CUDA_RUN(cuda_sdpa_generic_run);
CUDA_SUPPORTS(cuda_sdpa_varlen_vec_supports);
CUDA_SUPPORTS(cuda_sdpa_varlen_generic_supports);
CUDA_RUN(cuda_sdpa_varlen_vec_run);
CUDA_RUN(cuda_sdpa_varlen_generic_run);
/* mla.cu: mla_store_kv, mla_decode on CUDA cores (any dtype and size); mla_mma.cu: mla_decode on
 * tensor cores (bf16/f16, kv_lora_rank 512, rope dim 64) */
CUDA_RUN(cuda_mla_store_kv_run);
CUDA_SUPPORTS(cuda_mla_decode_generic_supports);
CUDA_RUN(cuda_mla_decode_generic_run);
CUDA_SUPPORTS(cuda_mla_decode_mma_supports);
CUDA_RUN(cuda_mla_decode_mma_run);
/* attention_mma.cu: paged_decode, paged_prefill, sdpa, sdpa_varlen on tensor cores (bf16/f16) */
CUDA_SUPPORTS(cuda_paged_mma_supports);
CUDA_RUN(cuda_paged_mma_run);
CUDA_SUPPORTS(cuda_sdpa_mma_supports);
CUDA_RUN(cuda_sdpa_mma_run);
CUDA_SUPPORTS(cuda_sdpa_varlen_mma_supports);
CUDA_RUN(cuda_sdpa_varlen_mma_run);
/* attention_backward.cu (delta, generic row kernels) and attention_backward_mma.cu (tensor
 * cores, bf16/f16, head_dim 64 / 128): sdpa_backward, sdpa_varlen_backward */
CUDA_SUPPORTS(cuda_sdpa_bwd_sm90ws_supports);
CUDA_SUPPORTS(cuda_sdpa_bwd_mma_supports);
CUDA_SUPPORTS(cuda_sdpa_bwd_generic_supports);
CUDA_RUN(cuda_sdpa_bwd_sm90ws_run);
CUDA_RUN(cuda_sdpa_bwd_mma_run);
CUDA_RUN(cuda_sdpa_bwd_generic_run);
CUDA_SUPPORTS(cuda_sdpa_varlen_bwd_sm90ws_supports);
CUDA_SUPPORTS(cuda_sdpa_varlen_bwd_mma_supports);
CUDA_SUPPORTS(cuda_sdpa_varlen_bwd_generic_supports);
CUDA_RUN(cuda_sdpa_varlen_bwd_sm90ws_run);
CUDA_RUN(cuda_sdpa_varlen_bwd_mma_run);
CUDA_RUN(cuda_sdpa_varlen_bwd_generic_run);

/* attention_sm90.cu: paged_prefill and sdpa on Hopper (wgmma, warp-specialized; bf16/f16, compute
 * capability 9.0): cuda.sm90 takes head_dim 256, cuda.sm90pp (the pipelined loop of
 * attention_sm90pp.cu) 64 and 128; one run function per op serves both (the kernel follows
 * head_dim) */
CUDA_SUPPORTS(cuda_paged_sm90_supports);
CUDA_SUPPORTS(cuda_paged_sm90pp_supports);
CUDA_RUN(cuda_paged_sm90_run);
CUDA_SUPPORTS(cuda_sdpa_sm90_supports);
CUDA_SUPPORTS(cuda_sdpa_sm90pp_supports);
CUDA_RUN(cuda_sdpa_sm90_run);

/* attention_fp8.cu (cuda.generic: any call) and attention_fp8_sm90.cu (cuda.sm90fp8: Hopper,
 * e4m3 wgmma for Q K^T, head_dim 128, o bf16 / f16): sdpa_fp8; quant_fp8_blocks (generic) */
CUDA_RUN(cuda_quant_fp8_blocks_generic_run);
CUDA_SUPPORTS(cuda_sdpa_fp8_generic_supports);
CUDA_RUN(cuda_sdpa_fp8_generic_run);
CUDA_SUPPORTS(cuda_sdpa_fp8_sm90_supports);
CUDA_RUN(cuda_sdpa_fp8_sm90_run);

/* gemm.cu: linear (cuBLASLt, tiled), group_gemm (cuBLASLt per group, tiled with a device-side
 * schedule) */
CUDA_RUN(cuda_linear_cublaslt_run);
CUDA_RUN(cuda_linear_tiles_run);
CUDA_RUN(cuda_group_gemm_tiles_run);
CUDA_RUN(cuda_group_gemm_cublaslt_run);
/* group_gemm_sm90.cu: group_gemm on Hopper, one persistent wgmma launch with its schedule read on
 * the device (f16/bf16, TMA-aligned x and w, compute capability 9.0): 128 x 256 tiles shared by
 * both consumer warpgroups, y staged in shared memory and TMA-stored behind the next tile */
CUDA_SUPPORTS(cuda_group_gemm_wgmma_supports);
CUDA_RUN(cuda_group_gemm_wgmma_run);

/* moe.cu: topk_gating, fused_moe */
CUDA_RUN(cuda_topk_gating_run);
CUDA_RUN(cuda_fused_moe_run);
/* moe_route.cu: moe_route, moe_aux_loss (+ backward) */
CUDA_RUN(cuda_moe_route_run);
CUDA_RUN(cuda_moe_aux_loss_run);
/* moe_pairs.cu: fused_moe_ex as matrix-vector products per (token, pick) pair: any float dtype,
 * any T, graph-safe */
CUDA_RUN(cuda_fused_moe_ex_run);
/* moe_grouped.cu: fused_moe_ex through cuBLASLt products per expert, f16/bf16, many pairs */
CUDA_SUPPORTS(cuda_fused_moe_ex_grouped_supports);
CUDA_RUN(cuda_fused_moe_ex_grouped_run);

/* quant.cu: quant, dequant, linear_quant */
CUDA_SUPPORTS(cuda_quant_supports);
CUDA_SUPPORTS(cuda_linear_quant_supports);
CUDA_RUN(cuda_quant_run);
CUDA_RUN(cuda_linear_quant_run);
CUDA_SUPPORTS(cuda_linear_quant_lt_supports);
CUDA_RUN(cuda_linear_quant_lt_run);
/* norm.cu: add_rms_norm through its best kernel for a (the collectives' fused norm) */
kite_status cuda_add_rms_norm(kite_ctx *ctx, const kite_norm_args *a);

/* nccl.c: communicators through NCCL (dlopen'ed), and cuda.nccl's collectives; cuda_plugin.c
 * puts them in its backend and table (nccl.c never calls back into it) */
const char *cuda_nccl_unavailable(const kite_backend *b, const kite_kernel *k);
kite_status cuda_comm_unique_id(const kite_backend *b, kite_ctx *ctx, kite_comm_id *id);
kite_status cuda_comm_create(const kite_backend *b, kite_ctx *ctx, const kite_comm_id *id,
                             int nranks, int rank, void **comm);
kite_status cuda_comm_create_all(const kite_backend *b, kite_ctx *const *ctxs, int nranks,
                                 void **comms);
void cuda_comm_destroy(const kite_backend *b, void *comm);
CUDA_SUPPORTS(cuda_nccl_supports);
CUDA_RUN(cuda_nccl_run);

/* A comm of this backend (the handle of its kite_comm_ref): NCCL's communicator, the device and
 * the peer-memory buffers of peer_comm.cu (NULL where the ranks cannot map each other's memory,
 * or for a single rank). */
typedef struct cuda_peer_group cuda_peer_group;
typedef struct cuda_comm {
  struct nccl_comm *nccl;
  int device;
  cuda_peer_group *peer;
} cuda_comm;

/* peer_comm.cu: all_reduce and all_reduce_add_rms_norm over peer memory. Made in three steps
 * around nccl.c's exchange: cuda_peer_alloc makes rank's buffer on device (*out NULL, and
 * KITE_OK, when nranks has no peer kernels) and fills its record; every rank's record is then
 * handed to every rank, in rank order, and cuda_peer_attach maps the peers' buffers (false when
 * some peer cannot be reached: then no rank may use the group, and each frees it). */
#define CUDA_PEER_MAX_RANKS 8 /* groups of 2 to 8 ranks have peer kernels */
typedef struct cuda_peer_record {
  unsigned char bytes[128];
} cuda_peer_record;
kite_status cuda_peer_alloc(int device, int nranks, int rank, cuda_peer_group **out,
                            cuda_peer_record *rec);
bool cuda_peer_attach(cuda_peer_group *g, const cuda_peer_record *recs);
void cuda_peer_free(cuda_peer_group *g);
CUDA_SUPPORTS(cuda_peer_oneshot_supports);
CUDA_SUPPORTS(cuda_peer_twoshot_supports);
CUDA_SUPPORTS(cuda_peer_norm_supports);
CUDA_RUN(cuda_peer_oneshot_run);
CUDA_RUN(cuda_peer_twoshot_run);
CUDA_RUN(cuda_peer_norm_run);

/* wq4.cu: linear_wq4 */
CUDA_RUN(cuda_linear_wq4_run);
/* gguf.cu: linear_gguf, dequant_gguf */
CUDA_RUN(cuda_gguf_run);
/* gguf_mma.cu: linear_gguf (m >= 16) and group_gemm_gguf on tensor cores, f16/bf16 */
CUDA_SUPPORTS(cuda_gguf_mma_supports);
CUDA_RUN(cuda_gguf_mma_run);
CUDA_SUPPORTS(cuda_group_gguf_mma_supports);
CUDA_RUN(cuda_group_gguf_mma_run);

/* cross_entropy.cu: cross_entropy, cross_entropy_backward, cross_entropy_with_grad */
CUDA_SUPPORTS(cuda_ce_vec_supports);
CUDA_RUN(cuda_ce_vec_run);
CUDA_RUN(cuda_ce_generic_run);
CUDA_SUPPORTS(cuda_ce_cluster_supports);
CUDA_RUN(cuda_ce_cluster_run);
/* flce.cu: fused_linear_cross_entropy */
CUDA_RUN(cuda_flce_cublaslt_run);
CUDA_RUN(cuda_flce_generic_run);

#ifdef __cplusplus
}
#endif

#endif /* KITE_CUDA_BACKEND_H */
