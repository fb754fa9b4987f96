/*
 * linear_wq4: y[m, n] = x[m, k] w^T + bias with w in 4-bit blocks of 32 (kite.h: GGUF Q4_0 / Q4_1
 * layouts). A warp per output column n and group of up to 8 rows of x: lane l takes blocks l,
 * l + 32, ...; each block's 16 bytes are read once (4 x 32-bit loads) and its 32 nibbles applied
 * to every row of the group in f32; a warp reduction gives the outputs. Decode (m = 1..8) reads
 * each weight byte once, which is what bounds it.
 */
#include "common.cuh"
#include "cuda_backend.h"
#include "q4.cuh"

using namespace kite_cuda;

namespace {

constexpr int ROWS = 8;

template <typename T, bool MIN> __global__ void wq4_kernel(kite_linear_wq4_args a) {
  const int lane = threadIdx.x & 31;
  const int64_t n = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32;
  if (n >= a.n) return;
  const int bb = MIN ? 20 : 18;
  const uint8_t *row = a.w + n * a.w_stride;
  const T *x = (const T *)a.x;
  for (int64_t r0 = (int64_t)blockIdx.y * ROWS; r0 < a.m; r0 += (int64_t)gridDim.y * ROWS) {
    const int nr = a.m - r0 < ROWS ? (int)(a.m - r0) : ROWS;
    float acc[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; r++) acc[r] = 0.0f;
    for (int64_t b = lane; b < a.k / 32; b += 32) {
      float d, c;
      const uint8_t *nib = q4_scales(row + b * bb, MIN, d, c);
      if (!MIN) c = -8.0f * d;
      uint8_t qs[16];
#pragma unroll
      for (int i = 0; i < 16; i++) qs[i] = nib[i];
#pragma unroll
      for (int r = 0; r < ROWS; r++) {
        if (r >= nr) break;
        const T *xr = x + (r0 + r) * a.x_stride + b * 32;
        float s = 0.0f, sx = 0.0f;
#pragma unroll
        for (int i = 0; i < 16; i++) {
          const float lo = to_float(xr[i]), hi = to_float(xr[i + 16]);
          s = fmaf(lo, (float)(qs[i] & 15), s);
          s = fmaf(hi, (float)(qs[i] >> 4), s);
          sx += lo + hi;
        }
        acc[r] = fmaf(d, s, fmaf(c, sx, acc[r]));
      }
    }
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
      float v = acc[r];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      if (lane == 0 && r < nr) {
        if (a.bias) v += to_float(((const T *)a.bias)[n]);
        ((T *)a.y)[(r0 + r) * a.y_stride + n] = from_float<T>(v);
      }
    }
  }
}

} // namespace

extern "C" CUDA_RUN(cuda_linear_wq4_run) {
  const kite_linear_wq4_args *a = (const kite_linear_wq4_args *)args;
  if (a->m <= 0 || a->n <= 0) return KITE_OK;
  const int64_t groups = (a->m + ROWS - 1) / ROWS;
  return launch_typed(ctx, "linear_wq4", "warp", a->dtype, [&](auto tag, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    const dim3 grid((unsigned)((a->n + 3) / 4), (unsigned)(groups < 65535 ? groups : 65535));
    if (a->format == KITE_WQ4_MIN)
      wq4_kernel<T, true><<<grid, 128, 0, s>>>(*a);
    else
      wq4_kernel<T, false><<<grid, 128, 0, s>>>(*a);
    return KITE_OK;
  });
}
