/*
 * The run functions of the cpu backend's kernels, one naming rule for all: cpu_<op>_<isa>.
 * Templated families (kernels/<family>.inc) are instantiated by cpu_isa_<isa>.c; hand-written
 * ones live in cpu_<family>_<isa>.c. cpu_backend.c's table is their only user.
 */
#ifndef KITE_CPU_KERNELS_H
#define KITE_CPU_KERNELS_H

#include <stdbool.h>

#include "kite/backend.h"

#define CPU_RUN_DECL(name) kite_status name(const kite_kernel *k, kite_ctx *ctx, const void *args)

/* Elementwise and row families, each forward beside its backward (act and act_bwd also serve
 * the gated ops; norm and norm_bwd every norm op; rope serves rope_backward), and the
 * cross-entropy loss (kernels/loss.inc; ce also serves its backward). */
#define CPU_ROW_KERNELS(isa)                                                                       \
  CPU_RUN_DECL(cpu_act_##isa);                                                                     \
  CPU_RUN_DECL(cpu_act_bwd_##isa);                                                                 \
  CPU_RUN_DECL(cpu_gated_##isa);                                                                   \
  CPU_RUN_DECL(cpu_norm_##isa);                                                                    \
  CPU_RUN_DECL(cpu_norm_bwd_##isa);                                                                \
  CPU_RUN_DECL(cpu_rope_##isa);                                                                    \
  CPU_RUN_DECL(cpu_softmax_##isa);                                                                 \
  CPU_RUN_DECL(cpu_softmax_bwd_##isa);                                                             \
  CPU_RUN_DECL(cpu_embedding_##isa);                                                               \
  CPU_RUN_DECL(cpu_embedding_bwd_##isa);                                                           \
  CPU_RUN_DECL(cpu_ce_##isa)

/* fused_linear_cross_entropy, every ISA (cpu_flce.c): vocabulary chunks through kite_linear. */
CPU_RUN_DECL(cpu_flce_chunked);

/* Attention (paged serves paged_decode and paged_prefill; sdpa_bwd sdpa_backward and
 * sdpa_varlen_backward). */
#define CPU_ATTN_KERNELS(isa)                                                                      \
  CPU_RUN_DECL(cpu_store_kv_##isa);                                                                \
  CPU_RUN_DECL(cpu_paged_##isa);                                                                   \
  CPU_RUN_DECL(cpu_sdpa_##isa);                                                                    \
  CPU_RUN_DECL(cpu_sdpa_fp8_##isa);                                                                \
  CPU_RUN_DECL(cpu_quant_fp8_blocks_##isa);                                                        \
  CPU_RUN_DECL(cpu_sdpa_varlen_##isa);                                                             \
  CPU_RUN_DECL(cpu_sdpa_bwd_##isa)

/* Sampling (sample also serves argmax; kernels/sampling.inc), apply_penalties and softcap (one
 * portable build, cpu_penalties.c). */
#define CPU_SAMPLING_KERNELS(isa)                                                                  \
  CPU_RUN_DECL(cpu_sample_##isa);                                                                  \
  CPU_RUN_DECL(cpu_logprobs_##isa)
CPU_RUN_DECL(cpu_apply_penalties_scalar);
CPU_RUN_DECL(cpu_softcap_scalar);
/* linear_wq4, portable (cpu_wq4.c). */
CPU_RUN_DECL(cpu_linear_wq4_scalar);
/* moe_route, fused_moe_ex, moe_aux_loss (+ backward), portable (cpu_moe_route.c). */
CPU_RUN_DECL(cpu_moe_route_scalar);
CPU_RUN_DECL(cpu_fused_moe_ex_scalar);
CPU_RUN_DECL(cpu_moe_aux_loss_scalar);
/* mla_store_kv and mla_decode, portable (cpu_mla.c). */
CPU_RUN_DECL(cpu_mla_store_kv_scalar);
CPU_RUN_DECL(cpu_mla_decode_scalar);
/* linear_gguf, dequant_gguf and group_gemm_gguf (kernels/gguf.inc), one per ISA. */
CPU_RUN_DECL(cpu_gguf_scalar);
CPU_RUN_DECL(cpu_group_gguf_scalar);

CPU_ROW_KERNELS(scalar);
CPU_ATTN_KERNELS(scalar);
CPU_SAMPLING_KERNELS(scalar);
#if defined(__x86_64__)
CPU_ROW_KERNELS(avx2);
CPU_ATTN_KERNELS(avx2);
CPU_SAMPLING_KERNELS(avx2);
CPU_ROW_KERNELS(avx512);
CPU_SAMPLING_KERNELS(avx512);
CPU_ROW_KERNELS(avx512bf16);

/* Hand-written GEMM-family kernels (cpu_gemm_avx2.c, cpu_moe_avx2.c, cpu_topk_avx2.c,
 * cpu_quant_avx2.c, cpu_gemm_avx512.c, cpu_wq4_avx2.c, cpu_wq4_avx512.c). */
CPU_RUN_DECL(cpu_linear_avx2);
CPU_RUN_DECL(cpu_group_gemm_avx2);
CPU_RUN_DECL(cpu_linear_quant_avx2);
CPU_RUN_DECL(cpu_fused_moe_avx2); /* fused_moe and fused_moe_ex: one grouped kernel */
CPU_RUN_DECL(cpu_fused_moe_ex_avx2);
CPU_RUN_DECL(cpu_topk_gating_avx2);
CPU_RUN_DECL(cpu_quant_avx2);
CPU_RUN_DECL(cpu_linear_avx512);
CPU_RUN_DECL(cpu_linear_avx512bf16);
CPU_RUN_DECL(cpu_linear_quant_avx512vnni);
CPU_RUN_DECL(cpu_linear_amx);
CPU_RUN_DECL(cpu_linear_quant_amx);
CPU_RUN_DECL(cpu_linear_wq4_avx2);
CPU_RUN_DECL(cpu_linear_wq4_avx512);
CPU_RUN_DECL(cpu_gguf_avx2);
CPU_RUN_DECL(cpu_group_gguf_avx2);
CPU_RUN_DECL(cpu_gguf_avx512);
/* linear_gguf_q8 (cpu_gguf_q8.inc), AVX2 and AVX-512 VNNI. */
CPU_RUN_DECL(cpu_gguf_q8_avx2);
CPU_RUN_DECL(cpu_gguf_q8_avx512vnni);
CPU_RUN_DECL(cpu_group_gguf_avx512);
/* Whether this process may use the AMX tiles (asks Linux once); false where it may not. */
bool cpu_amx_ready(void);
#endif

/* Library variants (cpu_gemm_onednn.c, cpu_gemm_blas.c) with their own predicates. */
#if defined(KITE_HAVE_ONEDNN)
CPU_RUN_DECL(cpu_linear_onednn);
CPU_RUN_DECL(cpu_linear_quant_onednn);
bool cpu_onednn_supports_linear(const kite_kernel *k, const void *args, const char **why);
bool cpu_onednn_supports_linear_bf16(const kite_kernel *k, const void *args, const char **why);
bool cpu_onednn_supports_linear_quant(const kite_kernel *k, const void *args, const char **why);
/* Opens oneDNN (once, at backend init); false when it is not installed here. */
bool cpu_onednn_load(void);
#endif
#if defined(KITE_HAVE_OPENBLAS)
CPU_RUN_DECL(cpu_linear_openblas);
bool cpu_openblas_supports_linear(const kite_kernel *k, const void *args, const char **why);
/* Opens OpenBLAS (once, at backend init); false when it is not installed here. */
bool cpu_openblas_load(void);
#endif

#endif /* KITE_CPU_KERNELS_H */
