/*
 * quant_fp8_blocks (cuda.generic: a CTA per block of 128 rows), and sdpa_fp8 on CUDA cores
 * (cuda.generic): every call the Hopper kernel (attention_fp8_sm90.cu,
 * cuda.sm90fp8) does not take: other head dims, an f32 output, unaligned layouts, other GPUs.
 *
 * One warp per (query row, q head): lane l holds elements l, l + 32, ... (up to 8) of the row's
 * dequantized q (times opts.scale, in base 2) and of its output; keys one at a time: the dot
 * product by a warp reduction, times the key block's k_scale, the online softmax, and acc += p
 * v_scale v. Everything in f32 (no rounding of P or V): the speed of a reference.
 */
#include <cuda_fp8.h>
#include <string.h>

#include "attention.cuh"

using namespace kite_cuda;

namespace {

constexpr int kThreads = 128, kMaxPerLane = 8; /* head_dim <= 256 */
constexpr float kLn2 = 0.69314718055994531f;

__device__ __forceinline__ float e4m3_float(uint8_t v) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)v, __NV_E4M3)));
}

template <typename To> __global__ void __launch_bounds__(kThreads) attend_fp8_kernel(AttnParams p) {
  const int64_t row = ((int64_t)blockIdx.x * kThreads + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (row >= p.batch * p.hq * p.sq) return; /* the whole warp */
  const int64_t i = row % p.sq, h = row / p.sq % p.hq, b = row / p.sq / p.hq;
  const int64_t g = p.gqa_interleaved ? h % p.hkv : h / p.group;
  const int D = (int)p.head_dim;
  const int64_t nbq = (p.sq + KITE_FP8_ATTN_BLOCK - 1) / KITE_FP8_ATTN_BLOCK;
  const int64_t nbk = (p.sk + KITE_FP8_ATTN_BLOCK - 1) / KITE_FP8_ATTN_BLOCK;

  const uint8_t *qr =
      (const uint8_t *)p.q + b * p.q_stride[0] + h * p.q_stride[1] + i * p.q_stride[2];
  const float qs = p.q_scale[(b * p.hq + h) * nbq + i / KITE_FP8_ATTN_BLOCK] * p.scale * kLog2e;
  float q[kMaxPerLane], acc[kMaxPerLane];
#pragma unroll
  for (int e = 0; e < kMaxPerLane; e++) {
    const int d = lane + 32 * e;
    q[e] = d < D ? e4m3_float(qr[d]) * qs : 0.0f;
    acc[e] = 0.0f;
  }
  /* causal: query i sits at position i + Sk - Sq and sees the keys up to it */
  int64_t hi = p.sk;
  if (p.causal) {
    hi = i + p.sk - p.sq + 1;
    hi = hi < 0 ? 0 : hi > p.sk ? p.sk : hi;
  }
  const uint8_t *kb = (const uint8_t *)p.k + b * p.k_stride[0] + g * p.k_stride[1];
  const uint8_t *vb = (const uint8_t *)p.v + b * p.v_stride[0] + g * p.v_stride[1];
  const float *ksc = p.k_scale + (b * p.hkv + g) * nbk, *vsc = p.v_scale + (b * p.hkv + g) * nbk;
  float m = -INFINITY, l = 0.0f;
  for (int64_t j = 0; j < hi; j++) {
    const uint8_t *kr = kb + j * p.k_stride[2], *vr = vb + j * p.v_stride[2];
    float dot = 0.0f;
#pragma unroll
    for (int e = 0; e < kMaxPerLane; e++) {
      const int d = lane + 32 * e;
      if (d < D) dot = fmaf(q[e], e4m3_float(kr[d]), dot);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
    const float s = dot * ksc[j / KITE_FP8_ATTN_BLOCK];
    const float mn = fmaxf(m, s), corr = m == -INFINITY ? 0.0f : exp2f(m - mn);
    const float pr = exp2f(s - mn), pv = pr * vsc[j / KITE_FP8_ATTN_BLOCK];
    l = l * corr + pr;
#pragma unroll
    for (int e = 0; e < kMaxPerLane; e++) {
      const int d = lane + 32 * e;
      acc[e] = fmaf(pv, d < D ? e4m3_float(vr[d]) : 0.0f, acc[e] * corr);
    }
    m = mn;
  }
  const bool none = m == -INFINITY || !(l > 0.0f);
  const float inv = none ? 0.0f : 1.0f / l;
  To *orow = (To *)p.o + b * p.o_stride[0] + h * p.o_stride[1] + i * p.o_stride[2];
#pragma unroll
  for (int e = 0; e < kMaxPerLane; e++) {
    const int d = lane + 32 * e;
    if (d < D) orow[d] = from_float<To>(acc[e] * inv);
  }
  if (p.lse && lane == 0)
    p.lse[b * p.lse_stride[0] + h * p.lse_stride[1] + i * p.lse_stride[2]] =
        none ? -INFINITY : (m + log2f(l)) * kLn2;
}

/* quant_fp8_blocks: a CTA per block of 128 rows of one (b, h): the finite amax by a CTA
 * reduction, then every code x / scale (IEEE f32 division, as kite.h requires) rounded to e4m3
 * by the hardware conversion (nearest even, saturating: +-inf to +-448, NaN to NaN). */
template <typename T>
__global__ void __launch_bounds__(kThreads) quant_fp8_blocks_kernel(kite_quant_fp8_blocks_args a) {
  __shared__ float warp_max[kThreads / 32];
  const int64_t nb = (a.rows + KITE_FP8_ATTN_BLOCK - 1) / KITE_FP8_ATTN_BLOCK, it = blockIdx.x;
  const int64_t b = it / (a.heads * nb), h = it / nb % a.heads, i0 = it % nb * KITE_FP8_ATTN_BLOCK;
  const int64_t n = a.rows - i0 < KITE_FP8_ATTN_BLOCK ? a.rows - i0 : KITE_FP8_ATTN_BLOCK;
  const T *x = (const T *)a.x + b * a.x_stride[0] + h * a.x_stride[1] + i0 * a.x_stride[2];
  uint8_t *q = a.q + b * a.q_stride[0] + h * a.q_stride[1] + i0 * a.q_stride[2];
  float mx = 0.0f;
  for (int64_t e = threadIdx.x; e < n * a.dim; e += kThreads) {
    const float v = fabsf(to_float(x[e / a.dim * a.x_stride[2] + e % a.dim]));
    if (v < INFINITY) mx = fmaxf(mx, v); /* NaN and inf left out */
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = mx;
  __syncthreads();
#pragma unroll
  for (int w = 0; w < kThreads / 32; w++) mx = fmaxf(mx, warp_max[w]);
  const float scale = mx / 448.0f;
  const bool none = !(scale > 0.0f);
  if (threadIdx.x == 0) a.scales[it] = none ? 1.0f : scale;
  for (int64_t e = threadIdx.x; e < n * a.dim; e += kThreads) {
    const int64_t i = e / a.dim, d = e % a.dim;
    q[i * a.q_stride[2] + d] =
        none ? (uint8_t)0
             : (uint8_t)__nv_cvt_float_to_fp8(to_float(x[i * a.x_stride[2] + d]) / scale,
                                              __NV_SATFINITE, __NV_E4M3);
  }
}

} // namespace

/* sdpa's parameters of the same call without mask and sinks, and the scales. */
AttnParams kite_cuda::attn_fp8_params(const kite_sdpa_fp8_args *a) {
  kite_sdpa_args s = {};
  s.op = KITE_OP_SDPA, s.dtype = a->dtype, s.batch = a->batch, s.hq = a->hq, s.hkv = a->hkv;
  s.sq = a->sq, s.sk = a->sk, s.head_dim = a->head_dim, s.q = a->q, s.k = a->k, s.v = a->v;
  s.mask_dtype = KITE_DTYPE_U8, s.opts = a->opts, s.o = a->o, s.lse = a->lse;
  memcpy(s.q_stride, a->q_stride, sizeof s.q_stride);
  memcpy(s.k_stride, a->k_stride, sizeof s.k_stride);
  memcpy(s.v_stride, a->v_stride, sizeof s.v_stride);
  memcpy(s.o_stride, a->o_stride, sizeof s.o_stride);
  AttnParams p = attn_sdpa_params(&s);
  p.q_scale = a->q_scale, p.k_scale = a->k_scale, p.v_scale = a->v_scale;
  return p;
}

extern "C" CUDA_SUPPORTS(cuda_sdpa_fp8_generic_supports) {
  const kite_sdpa_fp8_args *a = (const kite_sdpa_fp8_args *)args;
  if (!float_dtype(a->dtype, why)) return false;
  return ok_unless(a->head_dim > 32 * kMaxPerLane, "head_dim must be at most 256", why);
}

extern "C" CUDA_RUN(cuda_sdpa_fp8_generic_run) {
  const kite_sdpa_fp8_args *a = (const kite_sdpa_fp8_args *)args;
  const AttnParams p = attn_fp8_params(a);
  const int64_t warps = p.batch * p.hq * p.sq,
                blocks = (warps + kThreads / 32 - 1) / (kThreads / 32);
  if (blocks == 0) return KITE_OK;
  if (blocks > 0x7fffffff)
    return kite_set_error(KITE_ERR_UNSUPPORTED, "sdpa_fp8: cuda.generic: too many query rows");
  return launch_typed(ctx, "sdpa_fp8", "generic", a->dtype, [&](auto tag, cudaStream_t s) {
    using To = typename decltype(tag)::type;
    attend_fp8_kernel<To><<<(unsigned)blocks, kThreads, 0, s>>>(p);
    return KITE_OK;
  });
}

extern "C" CUDA_RUN(cuda_quant_fp8_blocks_generic_run) {
  const kite_quant_fp8_blocks_args *a = (const kite_quant_fp8_blocks_args *)args;
  const int64_t blocks =
      a->batch * a->heads * ((a->rows + KITE_FP8_ATTN_BLOCK - 1) / KITE_FP8_ATTN_BLOCK);
  if (blocks == 0) return KITE_OK;
  if (blocks > 0x7fffffff)
    return kite_set_error(KITE_ERR_UNSUPPORTED, "quant_fp8_blocks: cuda.generic: too many blocks");
  return launch_typed(ctx, "quant_fp8_blocks", "generic", a->dtype, [&](auto tag, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    quant_fp8_blocks_kernel<T><<<(unsigned)blocks, kThreads, 0, s>>>(*a);
    return KITE_OK;
  });
}
