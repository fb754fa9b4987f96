/*
 * The frame shared by the norm backward's kernels (norm_backward.cu: vec, generic;
 * norm_backward_rows.cu: the persistent rows kernels).
 *
 * Backward of the norms over rows of length cols (kite.h "Training"): rms_norm_backward and
 * layer_norm_backward, with dres for the fused pre rule. Per row, with wf = offset + w (rms),
 * w (layer) or 1, g = dy * wf and xhat = (x - mean) * rstd (mean 0 for rms):
 *   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) + dres      (mean(g) dropped for rms)
 *   dw = sum over rows of dy * xhat,   db = sum over rows of dy.
 * Statistics are recomputed from x as the forward does. Layer norm works on d = x - x0, x0 the
 * row's first element: d is exact for x within a factor 2 of x0 (a row far from 0), and
 * xhat = (d - mean(d)) * rstd then never carries the rounding of a large mean (x0's ulp, 7.6e-6
 * at 100) into every element; the variance is taken around mean(d) in a second pass, and
 * mean(g * xhat) from xhat, never from sum(g x) - mean sum(g) (except in rows_fused, which
 * trades that for one reduction per row: norm_backward_rows.cu).
 *
 * dw and db are deterministic: a block takes a fixed run of rows (the split depends on rows and
 * cols only, never on the device), sums its rows' terms per column in row order into f32
 * partials in the ctx workspace, and a second kernel adds each column's partials in block order.
 * dx may be dy or dres: each element of dx is written by the thread that read those inputs,
 * after it read them.
 */
#pragma once

#include "common.cuh"

namespace kite_cuda {

constexpr int64_t kMaxPartials = 1 << 22; /* floats per gradient's partials (16 MiB) */

/* Launch plan: blocks of rows_per_block consecutive rows (the last one shorter). */
struct Plan {
  int64_t blocks, rows_per_block;
};

/* dw[c] (db[c]) = the column's partials of blocks 0, 1, ... : a block takes 32 columns, its
 * warp s adds blocks s, s + kReduceSlices, ... in order, then the kReduceSlices sums are added in
 * s order. The order depends on the number of blocks only. */
constexpr int kReduceCols = 32, kReduceSlices = 8;

template <typename T>
__global__ __launch_bounds__(kReduceSlices *kReduceCols) void norm_bwd_reduce_kernel(
    const float *part_w, const float *part_b, int64_t blocks, int64_t cols, T *dw, T *db) {
  __shared__ float2 sums[kReduceSlices][kReduceCols];
  const int lane = threadIdx.x % kReduceCols, slice = threadIdx.x / kReduceCols;
  for (int64_t c0 = blockIdx.x * (int64_t)kReduceCols; c0 < cols;
       c0 += (int64_t)gridDim.x * kReduceCols) {
    const int64_t c = c0 + lane;
    float sw = 0.0f, sb = 0.0f;
    if (c < cols) {
#pragma unroll 4
      for (int64_t b = slice; b < blocks; b += kReduceSlices) {
        if (dw) sw += part_w[b * cols + c];
        if (db) sb += part_b[b * cols + c];
      }
    }
    sums[slice][lane] = make_float2(sw, sb);
    __syncthreads();
    if (slice == 0 && c < cols) {
      sw = sb = 0.0f;
      for (int s = 0; s < kReduceSlices; s++) {
        sw += sums[s][lane].x;
        sb += sums[s][lane].y;
      }
      if (dw) dw[c] = from_float<T>(sw);
      if (db) db[c] = from_float<T>(sb);
    }
    __syncthreads();
  }
}

inline bool is_norm_bwd(kite_op op) {
  return op == KITE_OP_RMS_NORM_BACKWARD || op == KITE_OP_LAYER_NORM_BACKWARD;
}

inline bool partials_wanted(const kite_norm_bwd_args *a) {
  return a->dw || (a->db && a->op == KITE_OP_LAYER_NORM_BACKWARD);
}

/* The shared frame of the variants: checks, the launch plan (plan_of() on the ctx's device), the
 * workspace of the partials (a row per block), the main launch (main(type tag, plan, part_w,
 * part_b, stream) -> status, skipped for 0 rows), then the reduction into dw and db. */
template <typename PlanOf, typename Main>
kite_status run_norm_bwd(kite_ctx *ctx, const kite_norm_bwd_args *a, const char *variant,
                         PlanOf plan_of, Main main) {
  const char *name = cuda_op_str(a->op);
  if (!is_norm_bwd(a->op))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: cuda.%s: not a norm backward", name, variant);
  if (a->cols <= 0 || a->rows < 0) return KITE_OK;
  const bool db_wanted = a->db && a->op == KITE_OP_LAYER_NORM_BACKWARD;
  const bool partials = partials_wanted(a);
  if (a->rows == 0 && !partials) return KITE_OK;
  cudaStream_t s;
  kite_status st = begin(ctx, name, &s);
  if (st != KITE_OK) return st;
  const Plan plan = plan_of();
  float *part_w = nullptr, *part_b = nullptr;
  if (partials && plan.blocks > 0) {
    const size_t per = (size_t)plan.blocks * (size_t)a->cols;
    void *ws = nullptr;
    st =
        kite_ctx_workspace(ctx, per * sizeof(float) * ((a->dw ? 1 : 0) + (db_wanted ? 1 : 0)), &ws);
    if (st != KITE_OK) return st;
    part_w = a->dw ? (float *)ws : nullptr;
    part_b = db_wanted ? (float *)ws + (a->dw ? per : 0) : nullptr;
  }
  return with_float_type(a->dtype, name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (plan.blocks > 0) {
      if ((st = main(tag, plan, part_w, part_b, s)) != KITE_OK) return st;
      if ((st = cuda_check_launch(name, variant)) != KITE_OK) return st;
    }
    if (!partials) return KITE_OK;
    const int64_t gb = (a->cols + kReduceCols - 1) / kReduceCols;
    const unsigned grid = (unsigned)(gb < 65535 ? gb : 65535);
    T *dw = (T *)a->dw, *db = db_wanted ? (T *)a->db : nullptr;
    norm_bwd_reduce_kernel<T>
        <<<grid, kReduceSlices * kReduceCols, 0, s>>>(part_w, part_b, plan.blocks, a->cols, dw, db);
    return cuda_check_launch(name, variant);
  });
}

/* The 16-byte layout vec, rows_fused and rows_fused_wide need. */
inline bool packed_layout(const kite_kernel *k, const void *args, const char **why) {
  const kite_norm_bwd_args *a = (const kite_norm_bwd_args *)args;
  return vec_rows_fit(a->dtype, a->rows, a->cols,
                      {{a->x, a->x_stride},
                       {a->dy, a->dy_stride},
                       {a->dx, a->dx_stride},
                       {a->dres, a->dres_stride},
                       {a->w, 0}},
                      why);
}

} // namespace kite_cuda
