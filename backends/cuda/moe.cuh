/*
 * The pieces of the routed MoE MLP that fused_moe (moe.cu) and fused_moe_ex (moe_pairs.cu's
 * products per (token, pick) pair, moe_grouped.cu's grouped GEMMs) share: the routing of pairs into
 * rows grouped by expert, the weighted combine of the picks' rows, and fused_moe_ex's
 * activation.
 */
#ifndef KITE_CUDA_MOE_CUH
#define KITE_CUDA_MOE_CUH

#include "gemm.cuh"

namespace kite_cuda {

/* Workspace of a grouped MoE call. P = tokens * topk pairs; a "row" is a pair's place in the
 * permuted order where each expert's pairs are consecutive. */
struct MoeWork {
  int32_t *count, *cursor; /* [experts]: pairs per expert; the next free row of each */
  int32_t *src_row;        /* [rows]: the token of each permuted row */
  int32_t *row_of;         /* [tokens * topk]: the permuted row of each pick, -1 if skipped */
  int32_t *row_expert;     /* [rows]: the expert of each row, or NULL (not written) */
  GemmTile *tiles;         /* 64-row tiles of one expert each (max_tiles of them), or unused */
  int32_t *tile_count;
  float *h, *o; /* [rows, 2*inter], [rows, hidden] f32 */
  void *act;    /* [rows, inter] in the dtype */
};

/* One block: counts the pairs of each expert, then gives each pair a row. pad 0: the experts'
 * rows are packed in expert order (row offsets = prefix sums of the counts) and the schedule of
 * 64-row tiles (at most max_tiles) is written; pad > 0 (at least every count): expert e's rows
 * start at e * pad (no tiles). Ids outside [0, experts) get no row (row_of -1). Within an expert
 * the order of rows follows atomics; each pair's row is its own, so results do not depend on it. */
void moe_route_launch(const kite_moe_args &a, const MoeWork &w, int64_t max_tiles, int64_t pad,
                      cudaStream_t s);

/* y[t] = sum over picks j < topk, in order, of weights[t, j] * (o[row_of(t, j)] + b2[ids[t, j]])
 * (b2 [experts, hidden] of T, or NULL): f32 sums, one rounding to T; no atomics. */
template <typename T>
void moe_combine_launch(const kite_moe_args &a, const MoeWork &w, const void *b2, cudaStream_t s);

/* fused_moe_ex's activation of one (gate, up) pair (kite.h): the clamp when limit > 0, then
 * swiglu_oai (up + 1) gate sigmoid(alpha gate), gelu(gate) up (erf form) or silu(gate) up. */
__device__ __forceinline__ float moe_ex_activate(float gate, float up, kite_moe_act act,
                                                 float alpha, float limit) {
  if (limit > 0) gate = fminf(gate, limit), up = fmaxf(fminf(up, limit), -limit);
  if (act == KITE_MOE_SWIGLU_OAI) return gate / (1.0f + expf(-alpha * gate)) * (up + 1.0f);
  if (act == KITE_MOE_GELU) return 0.5f * gate * (1.0f + erff(gate * 0.70710678118654752f)) * up;
  return gate / (1.0f + expf(-gate)) * up;
}

} // namespace kite_cuda

#endif /* KITE_CUDA_MOE_CUH */
