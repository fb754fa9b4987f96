/*
 * Mixture of experts: topk_gating and fused_moe.
 *
 * topk_gating, a warp per token: the k picks are the largest logits in the order "larger value,
 * then lower id", each the largest ranked strictly below the previous one, so no taken-list is
 * needed. Weights are the softmax probabilities of the picks (over all experts), renormalized
 * over the k on request.
 *
 * fused_moe, all on the device (no expert count reaches the host):
 *   1. route (one block): count the (token, pick) pairs per expert, give each pair a row of a
 *      permuted order grouped by expert, and build the tile schedule of the grouped GEMMs;
 *   2. h[P, 2*inter] = x[token of row] . w13[e]^T   (f32, rows gathered from x);
 *   3. a[P, inter] = act(gate) * up, rounded to the dtype (as the reference stores it);
 *   4. o[P, hidden] = a . w2[e]^T                  (f32);
 *   5. y[t] = sum over picks j, in order, of weight[t, j] * o[row of (t, j)].
 * Picks with an out-of-range expert id are skipped. The order of rows within an expert depends
 * on atomics, but each pair's row is its own, so the result does not.
 */
#include "moe.cuh"

using namespace kite_cuda;

namespace {

/* (v, e) ranks above (w, f) when v > w, or v == w and e < f. */
__device__ __forceinline__ bool ranks_above(float v, int e, float w, int f) {
  return v > w || (v == w && e < f);
}

template <typename T> __global__ void topk_kernel(kite_topk_args a) {
  const int64_t t = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32;
  if (t >= a.tokens) return;
  const int lane = threadIdx.x & 31;
  const T *x = (const T *)a.logits + t * a.logits_stride;
  float mx = -INFINITY;
  for (int64_t e = lane; e < a.experts; e += 32) mx = fmaxf(mx, to_float(x[e]));
  mx = warp_reduce(mx, Max());
  float sum = 0.0f;
  for (int64_t e = lane; e < a.experts; e += 32) sum += expf(to_float(x[e]) - mx);
  sum = warp_reduce(sum, Sum());

  float prev_v = INFINITY, chosen = 0.0f;
  int prev_e = -1;
  for (int64_t j = 0; j < a.k; j++) {
    float bv = -INFINITY;
    int be = 0x7fffffff;
    for (int64_t e = lane; e < a.experts; e += 32) {
      const float v = to_float(x[e]);
      const bool below = prev_e < 0 || ranks_above(prev_v, prev_e, v, (int)e);
      if (below && (be == 0x7fffffff || ranks_above(v, (int)e, bv, be))) bv = v, be = (int)e;
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
      const int oe = __shfl_xor_sync(0xffffffffu, be, off);
      if (oe != 0x7fffffff && (be == 0x7fffffff || ranks_above(ov, oe, bv, be))) bv = ov, be = oe;
    }
    const float pj = expf(bv - mx) / sum;
    chosen += pj;
    if (lane == 0) {
      a.ids[t * a.ids_stride + j] = be;
      a.weights[t * a.weights_stride + j] = pj;
    }
    prev_v = bv, prev_e = be;
  }
  __syncwarp();
  if (a.renormalize)
    for (int64_t j = lane; j < a.k; j += 32) a.weights[t * a.weights_stride + j] /= chosen;
}

__global__ void route_kernel(kite_moe_args a, MoeWork w, int64_t max_tiles, int64_t pad) {
  const int64_t pairs = a.tokens * a.topk;
  for (int64_t e = threadIdx.x; e < a.experts; e += blockDim.x) w.count[e] = 0;
  __syncthreads();
  for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) {
    const int32_t e = a.ids[(p / a.topk) * a.ids_stride + p % a.topk];
    if (e >= 0 && e < a.experts) atomicAdd(&w.count[e], 1);
  }
  __syncthreads();
  if (pad > 0) {
    for (int64_t e = threadIdx.x; e < a.experts; e += blockDim.x) w.cursor[e] = (int32_t)(e * pad);
  } else if (threadIdx.x == 0) { /* expert offsets and the tiles of each expert's rows */
    int64_t row = 0, n = 0;
    for (int64_t e = 0; e < a.experts; e++) {
      const int32_t c = w.count[e];
      w.cursor[e] = (int32_t)row;
      for (int64_t r = 0; r < c && n < max_tiles; r += 64)
        w.tiles[n++] = GemmTile{row + r, (int32_t)(c - r < 64 ? c - r : 64), (int32_t)e};
      row += c;
    }
    *w.tile_count = (int32_t)n;
  }
  __syncthreads();
  for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) {
    const int32_t e = a.ids[(p / a.topk) * a.ids_stride + p % a.topk];
    int32_t r = -1;
    if (e >= 0 && e < a.experts) {
      r = atomicAdd(&w.cursor[e], 1);
      w.src_row[r] = (int32_t)(p / a.topk);
      if (w.row_expert) w.row_expert[r] = e;
    }
    w.row_of[p] = r;
  }
}

template <typename T, Act A>
__global__ void moe_act_kernel(const float *h, T *out, int64_t rows, int64_t inter) {
  const int64_t total = rows * inter;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / inter, c = i % inter;
    const float g = h[r * 2 * inter + c], u = h[r * 2 * inter + inter + c];
    out[i] = from_float<T>(activate<A>(g) * u);
  }
}

template <typename T> __global__ void combine_kernel(kite_moe_args a, MoeWork w, const T *b2) {
  for (int64_t t = blockIdx.y; t < a.tokens; t += gridDim.y)
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < a.hidden;
         c += (int64_t)gridDim.x * blockDim.x) {
      float acc = 0.0f;
      for (int64_t j = 0; j < a.topk; j++) {
        const int32_t r = w.row_of[t * a.topk + j];
        if (r < 0) continue;
        float v = w.o[r * a.hidden + c];
        if (b2) v += to_float(b2[(int64_t)a.ids[t * a.ids_stride + j] * a.hidden + c]);
        acc = fmaf(a.weights[t * a.weights_stride + j], v, acc);
      }
      ((T *)a.y)[t * a.y_stride + c] = from_float<T>(acc);
    }
}

size_t align256(size_t n) {
  return (n + 255) & ~(size_t)255;
}

} // namespace

namespace kite_cuda {

void moe_route_launch(const kite_moe_args &a, const MoeWork &w, int64_t max_tiles, int64_t pad,
                      cudaStream_t s) {
  route_kernel<<<1, 1024, 0, s>>>(a, w, max_tiles, pad);
}

template <typename T>
void moe_combine_launch(const kite_moe_args &a, const MoeWork &w, const void *b2, cudaStream_t s) {
  const dim3 grid((unsigned)((a.hidden + 255) / 256),
                  (unsigned)(a.tokens < 65535 ? a.tokens : 65535));
  combine_kernel<T><<<grid, 256, 0, s>>>(a, w, (const T *)b2);
}
template void moe_combine_launch<float>(const kite_moe_args &, const MoeWork &, const void *,
                                        cudaStream_t);
template void moe_combine_launch<__half>(const kite_moe_args &, const MoeWork &, const void *,
                                         cudaStream_t);
template void moe_combine_launch<__nv_bfloat16>(const kite_moe_args &, const MoeWork &,
                                                const void *, cudaStream_t);

} // namespace kite_cuda

extern "C" CUDA_RUN(cuda_topk_gating_run) {
  const kite_topk_args *a = (const kite_topk_args *)args;
  if (a->k < 1 || a->k > a->experts)
    return kite_set_error(KITE_ERR_INVALID_ARG, "topk_gating: cuda: k %lld outside [1, %lld]",
                          (long long)a->k, (long long)a->experts);
  if (a->tokens <= 0) return KITE_OK;
  return launch_typed(ctx, "topk_gating", "warp", a->dtype, [&](auto tag, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    topk_kernel<T><<<(unsigned)((a->tokens + 7) / 8), 256, 0, s>>>(*a);
    return KITE_OK;
  });
}

extern "C" CUDA_RUN(cuda_fused_moe_run) {
  const kite_moe_args *a = (const kite_moe_args *)args;
  if (a->tokens <= 0 || a->hidden <= 0) return KITE_OK;
  cudaStream_t s;
  kite_status st = begin(ctx, "fused_moe", &s);
  if (st != KITE_OK) return st;
  const int64_t P = a->tokens * a->topk, I = a->inter, H = a->hidden, E = a->experts;
  const int64_t max_tiles = tile_gemm_max_tiles(P, E);
  const size_t es = kite_dtype_size(a->dtype);
  size_t off[9], total = 0;
  const size_t sizes[9] = {(size_t)E * 4,         (size_t)E * 4,          (size_t)P * 4,
                           (size_t)P * 4,         (size_t)max_tiles * 16, 4,
                           (size_t)P * 2 * I * 4, (size_t)P * H * 4,      (size_t)P * I * es};
  for (int i = 0; i < 9; i++) off[i] = total, total += align256(sizes[i] ? sizes[i] : 1);
  void *ws;
  st = kite_ctx_workspace(ctx, total, &ws);
  if (st != KITE_OK) return st;
  char *base = (char *)ws;
  MoeWork w = {};
  w.count = (int32_t *)(base + off[0]), w.cursor = (int32_t *)(base + off[1]);
  w.src_row = (int32_t *)(base + off[2]), w.row_of = (int32_t *)(base + off[3]);
  w.tiles = (GemmTile *)(base + off[4]), w.tile_count = (int32_t *)(base + off[5]);
  w.h = (float *)(base + off[6]), w.o = (float *)(base + off[7]), w.act = base + off[8];

  moe_route_launch(*a, w, max_tiles, 0, s);
  st = with_float_type(a->dtype, "fused_moe", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (P > 0 && I > 0) {
      TileGemm g = {};
      g.m = P, g.n = 2 * I, g.k = H;
      g.a = a->x, g.a_stride = a->x_stride, g.a_rows = w.src_row;
      g.b = a->w13, g.b_stride_g = 2 * I * H, g.b_stride_n = H;
      g.c = w.h, g.c_stride = 2 * I;
      g.tiles = w.tiles, g.tile_count = w.tile_count, g.max_tiles = max_tiles;
      tile_gemm_launch<T, float>(g, s);
      const int64_t n = P * I;
      const unsigned blocks = (unsigned)((n + 255) / 256 < 65535 ? (n + 255) / 256 : 65535);
      if (a->act == KITE_MOE_GELU)
        moe_act_kernel<T, Act::gelu><<<blocks, 256, 0, s>>>(w.h, (T *)w.act, P, I);
      else
        moe_act_kernel<T, Act::silu><<<blocks, 256, 0, s>>>(w.h, (T *)w.act, P, I);
      g.m = P, g.n = H, g.k = I;
      g.a = w.act, g.a_stride = I, g.a_rows = nullptr;
      g.b = a->w2, g.b_stride_g = H * I, g.b_stride_n = I;
      g.c = w.o, g.c_stride = H;
      tile_gemm_launch<T, float>(g, s);
    } else if (P > 0) { /* no intermediate: every expert's output is zero */
      cudaMemsetAsync(w.o, 0, (size_t)P * H * 4, s);
    }
    moe_combine_launch<T>(*a, w, nullptr, s);
    return KITE_OK;
  });
  return st != KITE_OK ? st : cuda_check_launch("fused_moe", "grouped");
}
