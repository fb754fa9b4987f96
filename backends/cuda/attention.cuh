/*
 * Parameters of the attention kernels (attention.cu): paged decode and prefill and dense sdpa
 * in one shape. A query row is a token (paged) or (batch, query index) (sdpa); q, o and lse are
 * addressed as b * stride[0] + head * stride[1] + i * stride[2], with b = 0 for paged rows.
 */
#ifndef KITE_CUDA_ATTENTION_CUH
#define KITE_CUDA_ATTENTION_CUH

#include "common.cuh"

namespace kite_cuda {

enum AttnKind { ATTN_DECODE, ATTN_PREFILL, ATTN_SDPA };
enum MaskKind { MASK_NONE, MASK_BOOL, MASK_F32, MASK_SAME };

struct AttnParams {
  int kind;
  kite_dtype dtype;
  int64_t batch, rows, hq, hkv, group, head_dim;
  int64_t sq, sk;   /* sdpa */
  int64_t max_keys; /* paged: max_blocks * block_size; sdpa: sk */
  const void *q;
  int64_t q_stride[3];
  void *o;
  int64_t o_stride[3];
  float *lse;
  int64_t lse_stride[3];
  const void *k, *v; /* paged: the caches; sdpa: dense with strides [b, h, j] */
  int64_t k_stride[3], v_stride[3];
  int64_t num_blocks, block_size;
  const int32_t *block_table;
  int64_t block_table_stride;
  const int32_t *seq_lens, *cu_q_lens;
  const void *mask;
  int mask_kind;
  int64_t mask_stride[4];
  float scale, softcap;
  int64_t window_left;
  bool gqa_interleaved, causal;
  float *part_o, *part_lse; /* split-KV partials: [splits, rows, hq, (D)] */
};

/* attention.cu: the parameters of an op's arguments and the merge of split-KV partials
 * (part_o/part_lse of `splits` splits) into o and lse. */
AttnParams attn_paged_params(const kite_paged_attn_args *a);
AttnParams attn_sdpa_params(const kite_sdpa_args *a);
void attn_merge_splits(const AttnParams &p, int splits, cudaStream_t s);

} // namespace kite_cuda

#endif /* KITE_CUDA_ATTENTION_CUH */
