/*
 * cuda.sm90fp8: sdpa_fp8 on Hopper (sm_90a), head_dim 128, o bf16 or f16: the host side and V's
 * dequantization. The kernel is attention_sm90pp.cu's pipelined one in its LOAD_TMA_FP8 mode
 * (same grid of 128 packed query rows x kv head, producer warpgroup, K/V ring, softmax, masks and
 * epilogue), on e4m3 Q and K:
 *
 *   S = Q K^T   wgmma m64n128k32 e4m3.e4m3, Q [128 rows][128 bytes] and K [128 keys][128 bytes]
 *               K-major from shared memory (a row of 128 e4m3 codes is one 128-byte swizzle row);
 *               the products of e4m3 values are exact in the f32 accumulators.
 *   scores      times the q_scale of each row's block and the k_scale of the tile's key block
 *               (tiles are 128 keys at multiples of 128: one scale block each), folded with
 *               sdpa's scale into the exponent's FMA (row_pscale); the causal mask (softmax_tile).
 *   O += P V    sdpa's bf16 wgmma on P rounded to bf16 and V dequantized (v v_scale) and rounded
 *               to bf16 before the kernel, into the workspace [B][Hkv][Sk][128] (dequant_v_kernel,
 *               one pass over V: 3 bytes moved per element against the attention's B Hq Sq / 128
 *               reads of each); the producer loads it by TMA as sdpa's bf16 V.
 *
 * So the producer warpgroup only issues copies (one thread, 24 registers) and the consumers keep
 * 240, as in the 16-bit kernel: a producer that widened e4m3 V in shared memory took issue slots
 * from the consumers, whose softmax is issue-bound (docs/performance.md). Q comes from global
 * memory in 16-byte loads into the swizzled tile (load_q). Shared memory: the 16 KB Q tile, 3
 * stages of K (16 KB) and V (32 KB).
 */
#include <cuda.h>

#include "attention_sm90.cuh"

using namespace kite_cuda;
using namespace kite_cuda::sm90;

namespace {

constexpr int kD = 128, kChunks = kD / 16; /* 16-byte chunks of codes in a row of V */

/* V's codes times their block's v_scale, rounded to bf16: w[b][h][j][d] (compact, Sk rows a head)
 * = bf16(v[b, h, j, d] * v_scale[b, h, j / 128]) (an f32 product); a thread per 16 codes. */
__global__ void __launch_bounds__(256)
    dequant_v_kernel(const uint8_t *v, int64_t s0, int64_t s1, int64_t s2, const float *v_scale,
                     __nv_bfloat16 *w, int64_t hkv, int64_t sk, int64_t chunks) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= chunks) return;
  const int64_t row = i / kChunks, c = i % kChunks, j = row % sk, bh = row / sk;
  const int64_t b = bh / hkv, h = bh % hkv;
  const uint4 x = *(const uint4 *)(v + b * s0 + h * s1 + j * s2 + 16 * c);
  const float sc = v_scale[bh * ((sk + KITE_FP8_ATTN_BLOCK - 1) / KITE_FP8_ATTN_BLOCK) +
                           j / KITE_FP8_ATTN_BLOCK];
  const uint32_t in[4] = {x.x, x.y, x.z, x.w};
  uint32_t out[8];
#pragma unroll
  for (int e = 0; e < 8; e++) {
    const __half2 hv = __nv_cvt_fp8x2_to_halfraw2(
        (__nv_fp8x2_storage_t)((in[e / 2] >> (16 * (e % 2))) & 0xffffu), __NV_E4M3);
    const float2 f = __half22float2(hv);
    out[e] = pack2<__nv_bfloat16>(f.x * sc, f.y * sc);
  }
  uint4 *dst = (uint4 *)(w + row * kD + 16 * c);
  dst[0] = make_uint4(out[0], out[1], out[2], out[3]);
  dst[1] = make_uint4(out[4], out[5], out[6], out[7]);
}

/* ---- host side ----------------------------------------------------------------------------- */
/* w: the workspace of dequant_v_kernel, already written on stream s. */
template <typename To>
kite_status launch(const AttnParams &p, const __nv_bfloat16 *w, dim3 grid, cudaStream_t s) {
  constexpr int BN = tile_keys<kD>();
  static_assert(BN == KITE_FP8_ATTN_BLOCK, "a key tile is one scale block");
  CUtensorMap tk, tv;
  memset(&tk, 0, sizeof tk);
  memset(&tv, 0, sizeof tv);
  const int64_t w_stride[3] = {p.hkv * p.sk * kD, p.sk * kD, kD};
  if (!dense_tensor_map(&tk, p, p.k, p.k_stride, BN, 1) ||
      !rows_tensor_map(&tv, KITE_DTYPE_BF16, 2, w, w_stride, kD, p.sk, p.hkv, p.batch, BN))
    return kite_set_error(KITE_ERR_DEVICE, "sdpa_fp8: cuda.sm90fp8: no TMA descriptor for k / v");
  const Kernel k = fp8_pipelined_kernel<To>();
  if (cudaFuncSetAttribute(k.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)k.smem) !=
      cudaSuccess) {
    const cudaError_t e = cudaGetLastError();
    return kite_set_error(KITE_ERR_DEVICE, "sdpa_fp8: cuda.sm90fp8: %zu bytes of shared memory: %s",
                          k.smem, cudaGetErrorString(e));
  }
  k.fn<<<grid, kThreads, k.smem, s>>>(p, tk, tv);
  return KITE_OK;
}

} // namespace

/* head_dim 128, o bf16 / f16, keys present, 16-byte aligned q, k, v rows (16-byte loads and TMA)
 * and positive k strides (TMA), 4-byte aligned o pairs. */
extern "C" CUDA_SUPPORTS(cuda_sdpa_fp8_sm90_supports) {
  const kite_sdpa_fp8_args *a = (const kite_sdpa_fp8_args *)args;
  if (a->dtype != KITE_DTYPE_BF16 && a->dtype != KITE_DTYPE_F16) {
    *why = "o must be bf16 or f16 (cuda.generic takes f32)";
    return false;
  }
  if (a->head_dim != kD) {
    *why = "head_dim 128 only";
    return false;
  }
  if (a->sk < 1 || a->sk > 0x7fffffff || a->sq > 0x7fffffff) {
    *why = "needs 1 <= Sk and Sq, Sk below 2^31";
    return false;
  }
  for (int i = 0; i < 3; i++)
    if (a->k_stride[i] <= 0) {
      *why = "needs positive k strides (TMA)";
      return false;
    }
  if (!aligned16(a->q) || !aligned16(a->k) || !aligned16(a->v) ||
      !strides_aligned(a->q_stride, 3, 1) || !strides_aligned(a->k_stride, 3, 1) ||
      !strides_aligned(a->v_stride, 3, 1) || ((uintptr_t)a->o & 3u) != 0 ||
      (a->o_stride[0] | a->o_stride[1] | a->o_stride[2]) & 1) {
    *why = "needs 16-byte aligned q, k, v rows and 4-byte aligned o pairs";
    return false;
  }
  return ok_unless(!all_devices_sm90(), "needs compute capability 9.0", why);
}

extern "C" CUDA_RUN(cuda_sdpa_fp8_sm90_run) {
  const kite_sdpa_fp8_args *a = (const kite_sdpa_fp8_args *)args;
  const AttnParams p = attn_fp8_params(a);
  if (p.rows <= 0 || p.hq <= 0 || p.hkv <= 0) return KITE_OK;
  cudaStream_t s;
  kite_status st = begin(ctx, "sdpa_fp8", &s);
  if (st != KITE_OK) return st;
  const int64_t tiles = p.batch * ((p.sq * p.group + kBM - 1) / kBM);
  if (tiles > 0x7fffffff || p.hkv > 65535)
    return kite_set_error(KITE_ERR_UNSUPPORTED,
                          "sdpa_fp8: cuda.sm90fp8: too many query tiles or kv heads");
  const int64_t chunks = p.batch * p.hkv * p.sk * kChunks;
  if ((chunks + 255) / 256 > 0x7fffffff)
    return kite_set_error(KITE_ERR_UNSUPPORTED, "sdpa_fp8: cuda.sm90fp8: too many keys");
  void *w = nullptr;
  if ((st = kite_ctx_workspace(ctx, (size_t)chunks * 16 * sizeof(__nv_bfloat16), &w)) != KITE_OK)
    return st;
  dequant_v_kernel<<<(unsigned)((chunks + 255) / 256), 256, 0, s>>>(
      (const uint8_t *)p.v, p.v_stride[0], p.v_stride[1], p.v_stride[2], p.v_scale,
      (__nv_bfloat16 *)w, p.hkv, p.sk, chunks);
  const dim3 grid((unsigned)tiles, (unsigned)p.hkv, 1);
  const __nv_bfloat16 *wv = (const __nv_bfloat16 *)w;
  st = a->dtype == KITE_DTYPE_BF16 ? launch<__nv_bfloat16>(p, wv, grid, s)
                                   : launch<__half>(p, wv, grid, s);
  return st != KITE_OK ? st : cuda_check_launch("sdpa_fp8", "sm90fp8");
}
