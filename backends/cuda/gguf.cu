/*
 * linear_gguf and dequant_gguf on CUDA: GGUF blocks decoded element by element by kite.h's
 * formulas (gguf_weight; the products of an f16 scale and small integers are exact in f32, so
 * contracting a product and a sum into an FMA rounds the same as the separate operations).
 *   dequant_gguf: a thread per weight.
 *   linear_gguf, few rows (m <= 8): a warp per output column, lanes over the row's values
 *     (coalesced reads of x), up to 8 rows of x per warp, a warp reduction.
 *   linear_gguf, many rows: 64 x 64 output tiles; each step decodes a 64 x 32 tile of w and
 *     loads a 64 x 32 tile of x into shared memory as f32, then each thread adds 4 x 4 outputs.
 *     (f16 / bf16 with 16 rows and up go to the tensor-core kernel of gguf_mma.cu first.)
 */
#include "common.cuh"
#include "cuda_backend.h"
#include "gguf.cuh"

using namespace kite_cuda;

namespace {

constexpr int ROWS = 8;                  /* rows of x per warp of the GEMV */
constexpr int TM = 64, TN = 64, TK = 32; /* the tile path: outputs per block and k per step */

/* Weight i (< the type's block values) of block b. */
__device__ float gguf_weight(int t, const uint8_t *b, int i) {
  const int j32 = i % 16, hi32 = i >= 16;
  switch (t) {
  case KITE_GGUF_Q4_0:
  case KITE_GGUF_Q4_1: { /* q4.cuh's decoder, linear_wq4's */
    float d, m;
    const uint8_t *qs = q4_scales(b, t == KITE_GGUF_Q4_1, d, m);
    const int q = q4_nibble(qs, i);
    return t == KITE_GGUF_Q4_1 ? fmaf((float)q, d, m) : (float)(q - 8) * d;
  }
  case KITE_GGUF_IQ4_NL: {
    const int q = hi32 ? b[2 + j32] >> 4 : b[2 + j32] & 15;
    return (float)c_iq4_nl[q] * f16_at(b);
  }
  case KITE_GGUF_Q5_0:
  case KITE_GGUF_Q5_1: {
    const int off = t == KITE_GGUF_Q5_0 ? 2 : 4;
    const int bit = (b[off + i / 8] >> (i % 8)) & 1;
    const uint8_t *qs = b + off + 4;
    const int q = (hi32 ? qs[j32] >> 4 : qs[j32] & 15) | bit << 4;
    if (t == KITE_GGUF_Q5_0) return (float)(q - 16) * f16_at(b);
    return (float)q * f16_at(b) + f16_at(b + 2);
  }
  case KITE_GGUF_Q8_0:
    return (float)(int8_t)b[2 + i] * f16_at(b);
  case KITE_GGUF_Q2_K: {
    const int h = i / 128, j = i % 128 / 32, l = i % 32, s = 8 * h + 2 * j + l / 16;
    const int q = (b[16 + 32 * h + l] >> (2 * j)) & 3;
    return f16_at(b + 80) * (float)(b[s] & 15) * (float)q - f16_at(b + 82) * (float)(b[s] >> 4);
  }
  case KITE_GGUF_Q3_K: {
    const int h = i / 128, j = i % 128 / 32, l = i % 32, s = 8 * h + 2 * j + l / 16;
    const uint8_t *sc = b + 96;
    const int q = ((b[32 + 32 * h + l] >> (2 * j)) & 3) - ((b[l] >> (4 * h + j)) & 1 ? 0 : 4);
    const int low = s < 8 ? sc[s] & 15 : sc[s - 8] >> 4;
    const int scale = (low | ((sc[8 + s % 4] >> (2 * (s / 4))) & 3) << 4) - 32;
    return f16_at(b + 108) * (float)scale * (float)q;
  }
  case KITE_GGUF_Q4_K:
  case KITE_GGUF_Q5_K: {
    const int c = i / 64, l = i % 64, s = 2 * c + l / 32;
    const uint8_t *qs = b + (t == KITE_GGUF_Q4_K ? 16 : 48);
    int q = l < 32 ? qs[32 * c + l] & 15 : qs[32 * c + l - 32] >> 4;
    if (t == KITE_GGUF_Q5_K) q |= ((b[16 + l % 32] >> s) & 1) << 4;
    return f16_at(b) * (float)k4_scale(b + 4, s, false) * (float)q -
           f16_at(b + 2) * (float)k4_scale(b + 4, s, true);
  }
  case KITE_GGUF_Q6_K: {
    const int h = i / 128, j = i % 128 / 32, l = i % 32;
    const uint8_t lo = b[64 * h + 32 * (j % 2) + l];
    const int q = ((j < 2 ? lo & 15 : lo >> 4) | ((b[128 + 32 * h + l] >> (2 * j)) & 3) << 4) - 32;
    return f16_at(b + 208) * (float)(int8_t)b[192 + 8 * h + 2 * j + l / 16] * (float)q;
  }
  case KITE_GGUF_Q8_K: {
    const float d = __uint_as_float((unsigned)b[0] | (unsigned)b[1] << 8 | (unsigned)b[2] << 16 |
                                    (unsigned)b[3] << 24);
    return (float)(int8_t)b[4 + i] * d;
  }
  case KITE_GGUF_MXFP4: {
    const int q = hi32 ? b[1 + j32] >> 4 : b[1 + j32] & 15;
    return (float)c_e2m1x2[q] * mxfp4_scale(b[0]);
  }
  default:
    return 0.0f;
  }
}

__device__ __forceinline__ float weight_at(const kite_gguf_args &a, int64_t n, int64_t i) {
  return gguf_weight(a.type, a.w + n * a.w_stride + i / a.bv * a.bb, (int)(i % a.bv));
}

template <typename T> __global__ void dequant_kernel(kite_gguf_args a) {
  const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  for (int64_t n = blockIdx.y; n < a.n; n += gridDim.y)
    if (i < a.k) ((T *)a.y)[n * a.y_stride + i] = from_float<T>(weight_at(a, n, i));
}

template <typename T> __global__ void gemv_kernel(kite_gguf_args a) {
  const int lane = threadIdx.x & 31;
  const int64_t n = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32;
  if (n >= a.n) return;
  const T *x = (const T *)a.x;
  const int nr = a.m < ROWS ? (int)a.m : ROWS;
  float acc[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; r++) acc[r] = 0.0f;
  for (int64_t i = lane; i < a.k; i += 32) {
    const float w = weight_at(a, n, i);
#pragma unroll
    for (int r = 0; r < ROWS; r++)
      if (r < nr) acc[r] = fmaf(w, to_float(x[r * a.x_stride + i]), acc[r]);
  }
#pragma unroll
  for (int r = 0; r < ROWS; r++) {
    float v = warp_reduce(acc[r], Sum());
    if (lane == 0 && r < nr) {
      if (a.bias) v += to_float(((const T *)a.bias)[n]);
      ((T *)a.y)[r * a.y_stride + n] = from_float<T>(v);
    }
  }
}

/* 256 threads, a 64 x 64 tile of y: thread (ty, tx) = (tid / 16, tid % 16) owns rows ty + 16 i,
 * columns tx + 16 j (i, j < 4). */
template <typename T> __global__ void tile_kernel(kite_gguf_args a) {
  __shared__ float xs[TM][TK + 1], ws[TN][TK + 1];
  const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
  const int64_t m0 = (int64_t)blockIdx.y * TM, n0 = (int64_t)blockIdx.x * TN;
  const T *x = (const T *)a.x;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < a.k; k0 += TK) {
    for (int e = tid; e < TM * TK; e += 256) {
      const int r = e / TK, c = e % TK;
      const int64_t m = m0 + r, n = n0 + r;
      xs[r][c] = m < a.m ? to_float(x[m * a.x_stride + k0 + c]) : 0.0f;
      ws[r][c] = n < a.n ? weight_at(a, n, k0 + c) : 0.0f;
    }
    __syncthreads();
#pragma unroll 8
    for (int c = 0; c < TK; c++)
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
          acc[i][j] = fmaf(xs[ty + 16 * i][c], ws[tx + 16 * j][c], acc[i][j]);
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const int64_t m = m0 + ty + 16 * i, n = n0 + tx + 16 * j;
      if (m >= a.m || n >= a.n) continue;
      float v = acc[i][j];
      if (a.bias) v += to_float(((const T *)a.bias)[n]);
      ((T *)a.y)[m * a.y_stride + n] = from_float<T>(v);
    }
}

unsigned clamp_grid(int64_t v) {
  return (unsigned)(v < 65535 ? v : 65535);
}

} // namespace

extern "C" CUDA_RUN(cuda_gguf_run) {
  const kite_gguf_args *a = (const kite_gguf_args *)args;
  if (a->n <= 0) return KITE_OK;
  const char *op = a->op == KITE_OP_DEQUANT_GGUF ? "dequant_gguf" : "linear_gguf";
  return launch_typed(ctx, op, "simple", a->dtype, [&](auto tag, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    if (a->op == KITE_OP_DEQUANT_GGUF) {
      dequant_kernel<T><<<dim3((unsigned)((a->k + 255) / 256), clamp_grid(a->n)), 256, 0, s>>>(*a);
    } else if (a->m <= ROWS) {
      gemv_kernel<T><<<(unsigned)((a->n + 3) / 4), 128, 0, s>>>(*a);
    } else {
      /* grid.y: row tiles; each launch covers up to 65535 of them */
      for (int64_t r0 = 0; r0 < a->m; r0 += (int64_t)65535 * TM) {
        kite_gguf_args part = *a;
        part.m = a->m - r0 < (int64_t)65535 * TM ? a->m - r0 : (int64_t)65535 * TM;
        part.x = (const T *)a->x + r0 * a->x_stride;
        part.y = (T *)a->y + r0 * a->y_stride;
        tile_kernel<T><<<dim3((unsigned)((a->n + TN - 1) / TN), (unsigned)((part.m + TM - 1) / TM)),
                         256, 0, s>>>(part);
      }
    }
    return KITE_OK;
  });
}
