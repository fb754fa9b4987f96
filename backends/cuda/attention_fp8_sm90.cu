/*
 * cuda.sm90fp8: sdpa_fp8 on Hopper (sm_90a), head_dim 128, o bf16 or f16: the host side. The
 * kernel is attention_sm90pp.cu's pipelined one in its LOAD_TMA_FP8 mode (same grid of 128 packed
 * query rows x kv head, producer warpgroup, K/V ring, softmax, masks and epilogue), on e4m3 Q
 * and K:
 *
 *   S = Q K^T   wgmma m64n128k32 e4m3.e4m3, Q [128 rows][128 bytes] and K [128 keys][128 bytes]
 *               K-major from shared memory (a row of 128 e4m3 codes is one 128-byte swizzle row);
 *               the products of e4m3 values are exact in the f32 accumulators.
 *   scores      times the q_scale of each row's block and the k_scale of the tile's key block
 *               (tiles are 128 keys at multiples of 128: one scale block each; fp8_scale_scores),
 *               then sdpa's scale and causal mask (softmax_tile).
 *   O += P V    sdpa's bf16 wgmma: P times the tile's v_scale (fp8_scale_p), rounded to bf16
 *               (pack_p); V's e4m3 tile lands by TMA in a staging tile that the producer
 *               warpgroup widens, exactly, into the stage's bf16 V in issue_pv's layout
 *               (LOAD_TMA_FP8 of produce()); the consumers wait for it before P V.
 *
 * Q comes from global memory in 16-byte loads into the swizzled tile (load_q). Shared memory: the
 * 16 KB Q tile, 3 stages of K (16 KB) and V (32 KB), 32 KB of staging. The producer keeps 40
 * registers (its widening loop), the consumers take 232: 128 x 40 + 256 x 232 = 384 x 168.
 */
#include <cuda.h>

#include "attention_sm90.cuh"

using namespace kite_cuda;
using namespace kite_cuda::sm90;

namespace {

constexpr int kD = 128;

/* ---- host side ----------------------------------------------------------------------------- */
template <typename To> kite_status launch(const AttnParams &p, dim3 grid, cudaStream_t s) {
  constexpr int BN = tile_keys<kD>();
  static_assert(BN == KITE_FP8_ATTN_BLOCK, "a key tile is one scale block");
  CUtensorMap tk, tv;
  memset(&tk, 0, sizeof tk);
  memset(&tv, 0, sizeof tv);
  if (!dense_tensor_map(&tk, p, p.k, p.k_stride, BN, 1) ||
      !dense_tensor_map(&tv, p, p.v, p.v_stride, BN, 1))
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

/* head_dim 128, o bf16 / f16, keys present, 16-byte aligned q, k, v rows and positive k, v
 * strides (TMA and the Q tile's loads), 4-byte aligned o pairs. */
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
    if (a->k_stride[i] <= 0 || a->v_stride[i] <= 0) {
      *why = "needs positive k and v strides (TMA)";
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
  const dim3 grid((unsigned)tiles, (unsigned)p.hkv, 1);
  st = a->dtype == KITE_DTYPE_BF16 ? launch<__nv_bfloat16>(p, grid, s) : launch<__half>(p, grid, s);
  return st != KITE_OK ? st : cuda_check_launch("sdpa_fp8", "sm90fp8");
}
