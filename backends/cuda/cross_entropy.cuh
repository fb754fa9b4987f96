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

} // namespace kite_cuda

#endif /* KITE_CUDA_CROSS_ENTROPY_CUH */
