/*
 * cuda.sm90fp8: sdpa_fp8 on Hopper (sm_90a), head_dim 128, o bf16 or f16. The warp-specialized
 * attention of attention_sm90.cu with attention_sm90pp.cu's pipelined consumer loop (same grid of
 * 128 packed query rows x kv head, producer warpgroup, K/V ring, softmax, masks and epilogue), on
 * e4m3 Q and K:
 *
 *   S = Q K^T   wgmma m64n128k32 e4m3.e4m3, Q [128 rows][128 bytes] and K [128 keys][128 bytes]
 *               K-major from shared memory (a row of 128 e4m3 codes is one 128-byte swizzle row);
 *               the products of e4m3 values are exact in the f32 accumulators.
 *   scores      times the q_scale of each row's block and the k_scale of the tile's key block
 *               (tiles are 128 keys at multiples of 128: one scale block each), then sdpa's scale
 *               and causal mask (softmax_tile).
 *   O += P V    sdpa's bf16 wgmma: P times the tile's v_scale, rounded to bf16 (pack_p); V's e4m3
 *               tile lands by TMA in a staging tile that the producer warpgroup widens, exactly,
 *               into the stage's bf16 V in issue_pv's layout (LOAD_TMA_FP8 of produce()).
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

using E4M3 = __nv_fp8_e4m3;
constexpr int kD = 128;
using SmemFP8 = Smem<kD, 3, false, 1>;
static_assert(SmemFP8::BN == KITE_FP8_ATTN_BLOCK, "a key tile is one scale block");

template <typename To>
__global__ void __launch_bounds__(kThreads, 1)
    attend_fp8_sm90_kernel(AttnParams p, const __grid_constant__ CUtensorMap tmap_k,
                           const __grid_constant__ CUtensorMap tmap_v) {
#ifdef KITE_SM90_DEVICE
  using SM = SmemFP8;
  using PV = __nv_bfloat16;
  constexpr int D = kD, BN = SM::BN, kStages = SM::kStages;
  constexpr int kProducerRegs = 40, kConsumerRegs = 232;
  static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= 384 * 168, "registers of the launch");

  KITE_SM90_HEAD(E4M3, D, LOAD_TMA_FP8, SM, kProducerRegs);

  /* ---- consumers: warpgroup cw owns tile rows [64 cw, 64 cw + 64) ---- */
  reg_alloc<kConsumerRegs>();
  const int cw = wg - 1, ctid = tid & 127, warp = ctid >> 5;
  load_q<E4M3, D>(p, s, g, m0, rows_here, sh.q, cw, ctid);
  const Rows r = consumer_rows(p, s, m0, rows_here, cw, warp, lane >> 2);
  /* the q_scale of the thread's two rows (padding rows: 0, never stored) and the kv head's
   * k_scale and v_scale rows */
  const int group = (int)p.group;
  const int64_t nbq = (p.sq + BN - 1) / BN, nbk = (p.sk + BN - 1) / BN;
  float qsc[2];
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int row = 64 * cw + 16 * warp + 8 * h + (lane >> 2);
    qsc[h] = 0.0f;
    if (row < rows_here) {
      const int m = m0 + row, qi = m % group, tq = m / group;
      const int64_t head = p.gqa_interleaved ? g + (int64_t)qi * p.hkv : (int64_t)g * group + qi;
      qsc[h] = p.q_scale[((int64_t)s.b * p.hq + head) * nbq + (s.first + tq) / BN];
    }
  }
  const float *ksc = p.k_scale + ((int64_t)s.b * p.hkv + g) * nbk;
  const float *vsc = p.v_scale + ((int64_t)s.b * p.hkv + g) * nbk;

  float o[D / 2], sc[BN / 2], m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  float corr[2];
  uint32_t pa[BN / 16][4];
#pragma unroll
  for (int i = 0; i < D / 2; i++) o[i] = 0.0f;
  const uint32_t q_addr = smem_addr(sh.q) + 64 * cw * 128;
  const uint32_t widened0 = bar0 + 2 * kStages * 8;
  /* K of stage st; its bf16 V follows */
  const auto k_of = [&](int st) { return smem_addr(sh.kv + (size_t)st * SM::stage_bytes); };
  const auto v_of = [&](int st) { return k_of(st) + (uint32_t)SM::k_bytes; };
  /* tile t's scores times the rows' q_scale and the keys' k_scale, the softmax step, then P
   * times the keys' v_scale (P V then sums p v_scale v over the e4m3 codes v) */
  const auto scores = [&](int t) {
    const int j0 = klo + t * BN, blk = j0 / BN;
    const float ks = ksc[blk];
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const float f = qsc[h] * ks;
#pragma unroll
      for (int nb = 0; nb < BN / 8; nb++) sc[4 * nb + 2 * h] *= f, sc[4 * nb + 2 * h + 1] *= f;
    }
    softmax_tile<BN, false>(sc, r, j0, khi, lo_last, hi_first, sh.ok, lane, m_run, l_run, corr);
    const float vs = vsc[blk];
#pragma unroll
    for (int i = 0; i < BN / 2; i++) sc[i] *= vs;
  };

  /* attention_sm90pp.cu's loop: tile t issues S_t, then P_{t-1} V_{t-1} once its V is widened,
   * and runs the softmax of S_t while P V runs. */
  if (ntiles > 0) {
    mbar_wait(bar0, 0);
    issue_qk<E4M3, D, BN>(sc, q_addr, k_of(0));
    wgmma_wait<0>();
    fence_regs(sc);
    scores(0);
    pack_p<PV, BN>(pa, sc);
  }
  for (int t = 1; t < ntiles; t++) {
    const int st = t % kStages, pst = (t - 1) % kStages;
    mbar_wait(bar0 + st * 8, (t / kStages) & 1);
    issue_qk<E4M3, D, BN>(sc, q_addr, k_of(st));
    rescale_o<D>(o, corr);
    mbar_wait(widened0 + pst * 8, ((t - 1) / kStages) & 1);
    issue_pv<PV, D, BN>(o, pa, v_of(pst));
    wgmma_wait<1>(); /* S_t; P_{t-1} V_{t-1} runs on */
    fence_regs(sc);
    scores(t);
    wgmma_wait<0>();
    fence_regs(o);
    release_stage(bar0 + (kStages + pst) * 8, lane);
    pack_p<PV, BN>(pa, sc);
  }
  /* the last P V */
  if (ntiles > 0) {
    const int lst = (ntiles - 1) % kStages;
    rescale_o<D>(o, corr);
    mbar_wait(widened0 + lst * 8, ((ntiles - 1) / kStages) & 1);
    issue_pv<PV, D, BN>(o, pa, v_of(lst));
  }
  wgmma_wait<0>(); /* outside the branch: the epilogue reads o on every path */
  fence_regs(o);
  if (ntiles > 0) release_stage(bar0 + (kStages + (ntiles - 1) % kStages) * 8, lane);
  store_rows<To, D>(p, s, g, m0, rows_here, cw, warp, lane, o, m_run, l_run);
#else
  (void)p;
#endif
}

/* ---- host side ----------------------------------------------------------------------------- */
template <typename To> kite_status launch(const AttnParams &p, dim3 grid, cudaStream_t s) {
  CUtensorMap tk, tv;
  memset(&tk, 0, sizeof tk);
  memset(&tv, 0, sizeof tv);
  if (!dense_tensor_map(&tk, p, p.k, p.k_stride, SmemFP8::BN, 1) ||
      !dense_tensor_map(&tv, p, p.v, p.v_stride, SmemFP8::BN, 1))
    return kite_set_error(KITE_ERR_DEVICE, "sdpa_fp8: cuda.sm90fp8: no TMA descriptor for k / v");
  const auto fn = attend_fp8_sm90_kernel<To>;
  if (cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SmemFP8::total) !=
      cudaSuccess) {
    const cudaError_t e = cudaGetLastError();
    return kite_set_error(KITE_ERR_DEVICE, "sdpa_fp8: cuda.sm90fp8: %zu bytes of shared memory: %s",
                          SmemFP8::total, cudaGetErrorString(e));
  }
  fn<<<grid, kThreads, SmemFP8::total, s>>>(p, tk, tv);
  return KITE_OK;
}

} // namespace

/* head_dim 128, o bf16 / f16, keys present, 16-byte aligned q, k, v rows (TMA and the Q tile's
 * loads), 4-byte aligned o pairs. */
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
