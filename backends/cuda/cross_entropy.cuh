/*
 * The row kernels of cross_entropy (cross_entropy.cu), shared with fused_linear_cross_entropy
 * (flce.cu), which runs them on its pieces of logits.
 */
#ifndef KITE_CUDA_CROSS_ENTROPY_CUH
#define KITE_CUDA_CROSS_ENTROPY_CUH

#include "common.cuh"

namespace kite_cuda {

/* fwd: lse and loss of each row. bwd: the gradient from a given lse. fused: both, the gradient
 * written over the logits row by row once its statistics are known (fused_linear_cross_entropy). */
enum class CeMode { fwd, bwd, fused };

/* One call of the row kernel: logits[rows, vocab] (row stride), targets[rows].
 * row_loss[rows]: each row's loss (fwd, fused); lse[rows]: written by fwd and fused when not NULL,
 * read by bwd. The gradient scale of row i is dloss (NULL: 1; [rows] for reduction none, else
 * [1]), divided by *valid for reduction mean (0 when *valid is 0). dlogits may be logits. */
struct CeRows {
  int64_t rows, vocab;
  const void *logits;
  int64_t logits_stride;
  const int32_t *targets;
  kite_ce_opts o;
  float *row_loss;
  float *lse;
  const float *dloss;
  const int64_t *valid;
  void *dlogits;
  int64_t dlogits_stride;
};

/* Launches the row kernel on s: vec takes 16-byte accesses (rows of logits and dlogits 16-byte
 * aligned), else one element at a time. */
kite_status ce_rows_launch(kite_dtype t, CeMode mode, bool vec, const CeRows &p, cudaStream_t s);
/* *valid = the number of targets[0..rows) that are not ignore_index (one block). */
void ce_count_launch(const int32_t *targets, int64_t rows, int32_t ignore_index, int64_t *valid,
                     cudaStream_t s);
/* loss[0] = the sum of row_loss[0..rows), or for mean that sum over *valid (0 when *valid is 0);
 * one block in a fixed order, double inside. */
void ce_reduce_launch(const float *row_loss, int64_t rows, kite_reduction reduction,
                      const int64_t *valid, float *loss, cudaStream_t s);

/* ---- per-row pieces shared by the row and cluster kernels ---------------------------------- */
constexpr float kLn2 = 0.6931471805599453f;

/* z: the logit x after the softcap c (none for c = 0) */
__device__ __forceinline__ float ce_cap(float x, float c) {
  return c > 0.0f ? c * tanhf(x / c) : x;
}

/* 2^x by the multi-function unit alone (ex2.approx.ftz: 2 ulp, a result under 2^-126 is 0;
 * -inf gives 0, NaN stays NaN): the gradient's one transcendental per logit. */
__device__ __forceinline__ float ce_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

/* The gradient of one logit x (row constants precomputed by ce_row_grad). lse2 is the lse in
 * log2 units as the statistics formed it, and z log2 e is rounded as there (ce_add): a row of one
 * class gets p = 2^0 = 1 and a gradient of exactly 0. */
struct CeGrad {
  float c, zf, off, hit, lse2;
  int64_t tg;
  __device__ __forceinline__ float value(float x, bool target) const {
    const float z = ce_cap(x, c);
    float d = zf * ce_exp2(__fmul_rn(z, kLog2e) - lse2) - off - (target ? hit : 0.0f);
    if (c > 0.0f) {
      const float t = z / c;
      d *= 1.0f - t * t;
    }
    return d;
  }
  __device__ __forceinline__ float operator()(float x, int64_t j) const {
    return value(x, j == tg);
  }
};

/* Row r's loss (to row_loss) and lse (to lse when wanted) from its statistics: m2 the max of
 * z log2 e, sum the sum of 2^(z log2 e - m2), sz the sum of z, zt the target's z. */
__device__ __forceinline__ void ce_row_out(const CeRows &p, int64_t r, float m2, float sum,
                                           float sz, float zt, bool ignored, bool bad) {
  const float ls = p.o.label_smoothing, lse = (m2 + log2f(sum)) * kLn2;
  /* lse - z taken as differences from the row max first (as ref does), in log2 units where m2
   * was formed: no cancellation of large terms when the loss is small */
  /* __fmul_rn: rounded like ce_add's products (an fma would leave 2^-24 of z behind) */
  const float dt = m2 - __fmul_rn(zt, kLog2e);
  const float dm = m2 - __fmul_rn(sz / (float)p.vocab, kLog2e);
  /* the smoothing term only where it is on: 0 * dm is NaN for a -inf logit */
  const float smooth = ls > 0.0f ? ls * dm : 0.0f;
  float loss = (log2f(sum) + (1.0f - ls) * dt + smooth) * kLn2 + p.o.z_loss * lse * lse;
  if (ignored) loss = 0.0f;
  if (bad) loss = __int_as_float(0x7fc00000); /* NaN */
  p.row_loss[r] = loss;
  if (p.lse) p.lse[r] = lse;
}

/* The gradient scale of row r (0 for an ignored or bad row) and the constants of its CeGrad. */
__device__ __forceinline__ CeGrad ce_row_grad(const CeRows &p, int64_t r, float lse, float lse2,
                                              int32_t tg, bool zero) {
  float g = 0.0f;
  if (!zero) {
    g = !p.dloss ? 1.0f : p.o.reduction == KITE_REDUCTION_NONE ? p.dloss[r] : p.dloss[0];
    if (p.o.reduction == KITE_REDUCTION_MEAN) {
      const int64_t n = *p.valid;
      g = n > 0 ? g / (float)n : 0.0f;
    }
  }
  const float ls = p.o.label_smoothing;
  return {p.o.softcap,
          g * (1.0f + 2.0f * p.o.z_loss * lse),
          g * ls / (float)p.vocab,
          g * (1.0f - ls),
          lse2,
          zero ? -1 : (int64_t)tg};
}

/* ---- cross_entropy_with_grad in one pass (cross_entropy_cluster.cu, sm_90) ----------------- */
/* The cluster's shape for a row of `packs` 16-byte packs: K blocks of B threads holding VPT packs
 * each (K <= 8, B <= 256, VPT <= 8). */
struct CeClusterShape {
  int blocks, threads, vpt;
};
/* The shape for `packs` packs; false when the row does not fit a cluster. */
bool ce_cluster_shape(int64_t packs, CeClusterShape *sh);
/* The one-pass kernel of cross_entropy_with_grad ("cluster"), the shape checked by
 * ce_cluster_shape: a block's share of the row taken into registers at once, its shared buffer
 * refilled right away with the block's next row, max and sum folded into one pass. */
kite_status ce_cluster_launch(kite_dtype t, const CeRows &p, cudaStream_t s);

} // namespace kite_cuda

#endif /* KITE_CUDA_CROSS_ENTROPY_CUH */
