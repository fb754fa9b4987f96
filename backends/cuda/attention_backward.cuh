/*
 * Parameters of the attention backward kernels (attention_backward.cu: the row kernels and the
 * host side; attention_backward_mma.cu: the tensor-core kernel) for sdpa_backward and
 * sdpa_varlen_backward in one shape.
 *
 * Every per-query tensor (q, o, dout, dq, lse, delta, the dq accumulator) is addressed as
 * b * st[0] + head * st[1] + (first + i) * st[2]: dense calls have first = 0 and the batch stride,
 * varlen calls st[0] = 0 and first = the sequence's first row (cu_seqlens). Keys alike.
 */
#ifndef KITE_CUDA_ATTENTION_BACKWARD_CUH
#define KITE_CUDA_ATTENTION_BACKWARD_CUH

#include "attention.cuh"

namespace kite_cuda {

struct BwdParams {
  kite_dtype dtype;
  bool varlen;
  int64_t batch, hq, hkv, group, head_dim;
  int64_t sq, sk;     /* dense: the lengths; varlen: max_seqlen_q / max_seqlen_k */
  int64_t rows, keys; /* rows of q per head (dense: batch * sq; varlen: tq), keys alike */
  int64_t tq, tk;     /* varlen: the row counts that bound cu_seqlens */
  const int32_t *cu_q, *cu_k;
  const void *q, *k, *v, *o, *dout;
  void *dq, *dk, *dv;
  int64_t q_st[3], k_st[3], v_st[3], o_st[3], do_st[3], dq_st[3], dk_st[3], dv_st[3];
  const float *lse;
  float *delta, *dq_acc; /* the workspace: delta[rows * hq] and dq_acc[rows * hq * D] */
  int64_t lse_st[3], delta_st[3], acc_st[3];
  const void *mask;
  int mask_kind;
  int64_t mask_st[4];
  float scale, softcap;
  int64_t window_left;
  bool interleaved, causal;
  const float *sinks; /* NULL or [hq]; dq, dk, dv need nothing of them (kite.h) */
  float *dsinks;      /* NULL or [hq]: the sinks' gradient, from delta and lse */
};

/* Sequence b's rows: queries [qf, qf + ql), keys [kf, kf + kl). Varlen bounds are clamped to
 * the tensors and the max_seqlen values whatever cu_seqlens holds. */
struct BwdSeq {
  int64_t qf, ql, kf, kl;
};

__device__ __forceinline__ void bwd_span(const int32_t *cu, int64_t b, int64_t total, int64_t max,
                                         int64_t *first, int64_t *len) {
  int64_t f = cu[b], e = cu[b + 1];
  f = f < 0 ? 0 : f > total ? total : f;
  e = e < f ? f : e > total ? total : e;
  *first = f, *len = e - f < max ? e - f : max;
}

__device__ __forceinline__ BwdSeq bwd_seq(const BwdParams &p, int64_t b) {
  BwdSeq s = {0, p.sq, 0, p.sk};
  if (p.varlen) {
    bwd_span(p.cu_q, b, p.tq, p.sq, &s.qf, &s.ql);
    bwd_span(p.cu_k, b, p.tk, p.sk, &s.kf, &s.kl);
  }
  return s;
}

/* Query head r (0 <= r < group) of kv head g. */
__device__ __forceinline__ int64_t bwd_head(const BwdParams &p, int64_t g, int64_t r) {
  return p.interleaved ? g + r * p.hkv : g * p.group + r;
}

/* Visible keys [lo, hi) of query i of sequence s (kite_sdpa's rule, bottom-right aligned). */
__device__ __forceinline__ void bwd_key_range(const BwdParams &p, const BwdSeq &s, int64_t i,
                                              int64_t *lo, int64_t *hi) {
  const int64_t pos = s.kl - s.ql + i;
  int64_t h = s.kl, l = 0;
  if (p.causal || p.window_left >= 0) h = pos + 1 < 0 ? 0 : pos + 1 > s.kl ? s.kl : pos + 1;
  if (p.window_left >= 0) l = pos - p.window_left < 0 ? 0 : pos - p.window_left;
  *lo = l < h ? l : h, *hi = h;
}

/* Queries [*ilo, *ihi) of sequence s that see any key of [j0, j1) (j0 < j1 <= s.kl). */
__device__ __forceinline__ void bwd_query_range(const BwdParams &p, const BwdSeq &s, int64_t j0,
                                                int64_t j1, int64_t *ilo, int64_t *ihi) {
  const int64_t shift = s.kl - s.ql; /* query i sits at position i + shift */
  int64_t lo = 0, hi = s.ql;
  if (p.causal || p.window_left >= 0) lo = j0 - shift > 0 ? j0 - shift : 0;
  if (p.window_left >= 0) {
    const int64_t h = j1 - 1 + p.window_left - shift + 1;
    hi = h < hi ? h : hi;
  }
  *ilo = lo, *ihi = hi > lo ? hi : lo;
}

/* The mask term of score (b, head, i, j): false when a bool mask hides it, else *add (the float
 * mask's value, 0 without one). */
template <typename T>
__device__ __forceinline__ bool bwd_mask(const BwdParams &p, int64_t b, int64_t head, int64_t i,
                                         int64_t j, float *add) {
  *add = 0.0f;
  if (p.mask_kind == MASK_NONE) return true;
  const int64_t mo = b * p.mask_st[0] + head * p.mask_st[1] + i * p.mask_st[2] + j * p.mask_st[3];
  if (p.mask_kind == MASK_BOOL) return ((const uint8_t *)p.mask)[mo] != 0;
  *add = p.mask_kind == MASK_F32 ? ((const float *)p.mask)[mo] : to_float(((const T *)p.mask)[mo]);
  return true;
}

/* attention_backward_mma.cu: the tensor-core kernel (bf16/f16, head_dim 64 / 128) after the
 * delta kernel and the zeroed dq accumulator; false when no instantiation fits. */
bool attn_bwd_mma_head_dim(int64_t d);
kite_status attn_bwd_mma_launch(const BwdParams &p, cudaStream_t s);

} // namespace kite_cuda

#endif /* KITE_CUDA_ATTENTION_BACKWARD_CUH */
