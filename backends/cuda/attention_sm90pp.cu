/*
 * cuda.sm90pp (head_dim 64 and 128): the Hopper attention of attention_sm90.cu (same grid,
 * producer, K/V ring, masks and epilogue) with the consumer loop pipelined, so that the tensor
 * cores run while the softmax computes:
 *
 *   within a warpgroup, tile t rescales o, issues S_t = Q K_t^T, then issues O += P_{t-1}
 *   V_{t-1} (P of the previous tile, held as the register A fragment), waits for S_t only
 *   (wgmma wait 1), runs the softmax of S_t while P V runs, then waits for P V and gives the
 *   previous stage back. Registers: o, one S fragment and the packed P (D 128: 64 + 64 + 32).
 *
 *   at head_dim 64, between the two consumer warpgroups, a named barrier each (ping-pong): a
 *   warpgroup issues its wgmma only after the other issued its own, and signals the other once it
 *   issued; so one warpgroup's GEMMs run during the other's softmax. Both pass the barriers once
 *   per tile of the CTA and once more for the last P V (tiles a warpgroup has no keys in
 *   included), so the arrivals and waits pair up whatever rows each owns. Measured on an H100
 *   (B 4, S 4096, 32 / 8 heads, bf16) the turns gave head_dim 64 +12 % and cost head_dim 128 2-3 %,
 *   so head_dim 128 runs without them (PING).
 *
 *   every tile of the CTA's key span goes through both warpgroups (cuda.sm90 skips the tiles a
 *   warpgroup's rows do not see): the wgmma stay out of branches that depend on the thread.
 *
 * The stage of tile t - 1 is held until its P V completed, so with TMA loads head_dim 128 takes 3
 * stages (the cp.async key offsets are not needed there); the producer then gives up more
 * registers (24) for the consumers (240): 128 x 24 + 256 x 240 = 384 x 168, the launch's.
 */
#include "attention_sm90.cuh"

using namespace kite_cuda;
using namespace kite_cuda::sm90;

namespace {

__host__ __device__ constexpr bool tma_load(int load) {
  return load == LOAD_TMA || load == LOAD_PAGED_TMA || load == LOAD_TMA_FP8;
}
template <int D, int LOAD>
using SmemPP = Smem<D,
                    D == 64                      ? 4
                    : D == 128 && tma_load(LOAD) ? 3
                                                 : 2,
                    !tma_load(LOAD), LOAD == LOAD_TMA_FP8 ? 1 : 2>;

#ifdef KITE_SM90_DEVICE
/* named barriers of the ping-pong, one per consumer warpgroup (1 is the producer's, 2 and 3 the
 * consumers' Q tiles) */
constexpr int kTurnBar = 4;
#endif

/* PING: the two consumer warpgroups take turns at issuing; else they run freely and only the tiles
 * within a warpgroup overlap. T: Q and K's element (V's too, but for LOAD_TMA_FP8: e4m3 Q and K,
 * sdpa_fp8's q and k scales, V dequantized to bf16 before the kernel); To: o's (T's but for
 * e4m3). */
template <typename T, int D, int LOAD, bool PING, typename To = T>
__global__ void __launch_bounds__(kThreads, 1)
    attend_sm90pp_kernel(AttnParams p, const __grid_constant__ CUtensorMap tmap_k,
                         const __grid_constant__ CUtensorMap tmap_v) {
#ifdef KITE_SM90_DEVICE
  using SM = SmemPP<D, LOAD>;
  constexpr bool FP8 = LOAD == LOAD_TMA_FP8;
  using PV = typename std::conditional<FP8, __nv_bfloat16, T>::type; /* P and V in P V */
  constexpr int BN = SM::BN, kStages = SM::kStages;
  constexpr bool PAGED = LOAD == LOAD_PAGED || LOAD == LOAD_PAGED_TMA;
  constexpr bool IL = interleaved_cols<D, LOAD>();
  /* the lazy rescale of o (softmax_tile): measured on an H100 it gave e4m3 +0-2 % and cost 16-bit
   * head_dim 128 causal 1.5-2 % (head_dim 64: within noise) */
  constexpr bool LAZY = FP8;
  /* the cp.async producer keeps its registers (its copy loop) */
  constexpr int kProducerRegs = tma_load(LOAD) ? 24 : 40,
                kConsumerRegs = tma_load(LOAD) ? 240 : 232;
  static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= 384 * 168, "registers of the launch");

  KITE_SM90_HEAD(T, D, LOAD, SM, kProducerRegs);

  /* ---- consumers: warpgroup cw owns tile rows [64 cw, 64 cw + 64) ---- */
  reg_alloc<kConsumerRegs>();
  const int cw = wg - 1, ctid = tid & 127, warp = ctid >> 5;
  load_q<T, D>(p, s, g, m0, rows_here, sh.q, cw, ctid);
  const Rows r = consumer_rows(p, s, m0, rows_here, cw, warp, lane >> 2);
  Fp8Scales fs = {};
  if constexpr (FP8) fs = fp8_scales(p, s, g, m0, rows_here, cw, warp, lane >> 2);
  /* warpgroup 0 issues first: warpgroup 1 hands it the first turn */
  const int my_turn = kTurnBar + cw, their_turn = kTurnBar + (cw ^ 1);
  /* (plain branches on PING: with these turns in lambdas ptxas serialized the wgmma) */
  if (PING && cw == 1) named_arrive(kTurnBar, 256);

  float o[D / 2], sc[BN / 2], m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  float corr[2];
  uint32_t pa[BN / 16][4];
#pragma unroll
  for (int i = 0; i < D / 2; i++) o[i] = 0.0f;
  const uint32_t q_addr = smem_addr(sh.q) + 64 * cw * 128;
  /* K of stage st; V follows it */
  const auto k_of = [&](int st) { return smem_addr(sh.kv + (size_t)st * SM::stage_bytes); };
  const auto v_of = [&](int st) { return k_of(st) + (uint32_t)SM::k_bytes; };
  const auto scores = [&](int t) {
    const int st = t % kStages;
    float ps[2];
    row_pscale<FP8, BN>(sc, r, fs, ps);
    softmax_tile<BN, PAGED, LAZY>(sc, r, ps, klo + t * BN, khi, lo_last, hi_first, sh.ok + st * BN,
                                  lane, m_run, l_run, corr);
  };

  /* Every tile of the CTA runs, including those where no row of this warpgroup sees a key (their
   * masks make P zero; padding rows are never stored): a branch on the warpgroup's rows around
   * wgmma would make ptxas serialize them. Tile 0: S only. */
  if (ntiles > 0) {
    fp8_tile_scales<FP8>(fs, klo);
    mbar_wait(bar0, 0);
    if (PING) named_sync(my_turn, 256);
    issue_qk<T, D, BN, IL>(sc, q_addr, k_of(0));
    if (PING) named_arrive(their_turn, 256);
    wgmma_wait<0>();
    fence_regs(sc);
    scores(0);
    pack_p<PV, BN>(pa, sc);
  }
  for (int t = 1; t < ntiles; t++) {
    const int st = t % kStages, pst = (t - 1) % kStages;
    fp8_tile_scales<FP8>(fs, klo + t * BN);
    mbar_wait(bar0 + st * 8, (t / kStages) & 1);
    if (PING) named_sync(my_turn, 256);
    issue_qk<T, D, BN, IL>(sc, q_addr, k_of(st));
    rescale_o<D, LAZY>(o, corr);
    issue_pv<PV, D, BN, IL>(o, pa, v_of(pst));
    if (PING) named_arrive(their_turn, 256);
    wgmma_wait<1>(); /* S_t; P_{t-1} V_{t-1} runs on */
    fence_regs(sc);
    scores(t);
    wgmma_wait<0>();
    fence_regs(o);
    release_stage<PAGED>(bar0 + (kStages + pst) * 8, lane);
    pack_p<PV, BN>(pa, sc);
  }
  /* the last P V */
  if (PING) named_sync(my_turn, 256);
  if (ntiles > 0) {
    rescale_o<D, LAZY>(o, corr);
    issue_pv<PV, D, BN, IL>(o, pa, v_of((ntiles - 1) % kStages));
  }
  if (PING) named_arrive(their_turn, 256);
  wgmma_wait<0>(); /* outside the branch: the epilogue reads o on every path */
  fence_regs(o);
  if (ntiles > 0) release_stage<PAGED>(bar0 + (kStages + (ntiles - 1) % kStages) * 8, lane);
  /* warpgroup 0's barrier took one arrival more (the first turn): its last one */
  if (PING && cw == 0) named_sync(kTurnBar, 256);
  store_rows<To, D>(p, s, g, m0, rows_here, cw, warp, lane, o, m_run, l_run);
#else
  (void)p;
#endif
}

template <typename T, int D, bool PING> Kernel pick(int load) {
  switch (load) {
  case LOAD_DENSE:
    return {attend_sm90pp_kernel<T, D, LOAD_DENSE, PING>, SmemPP<D, LOAD_DENSE>::total};
  case LOAD_PAGED:
    return {attend_sm90pp_kernel<T, D, LOAD_PAGED, PING>, SmemPP<D, LOAD_PAGED>::total};
  case LOAD_TMA:
    return {attend_sm90pp_kernel<T, D, LOAD_TMA, PING>, SmemPP<D, LOAD_TMA>::total};
  default:
    return {attend_sm90pp_kernel<T, D, LOAD_PAGED_TMA, PING>, SmemPP<D, LOAD_PAGED_TMA>::total};
  }
}

} // namespace

/* the ping-pong at head_dim 64 only (see the head of this file) */
template <typename T, int D> Kernel kite_cuda::sm90::pipelined_kernel(int load) {
  return pick<T, D, D == 64>(load);
}

template Kernel kite_cuda::sm90::pipelined_kernel<__nv_bfloat16, 64>(int);
template Kernel kite_cuda::sm90::pipelined_kernel<__nv_bfloat16, 128>(int);
template Kernel kite_cuda::sm90::pipelined_kernel<__half, 64>(int);
template Kernel kite_cuda::sm90::pipelined_kernel<__half, 128>(int);

/* sdpa_fp8 (attention_fp8_sm90.cu): head_dim 128, no ping-pong (as 16-bit head_dim 128) */
template <typename To> Kernel kite_cuda::sm90::fp8_pipelined_kernel() {
  return {attend_sm90pp_kernel<__nv_fp8_e4m3, 128, LOAD_TMA_FP8, false, To>,
          SmemPP<128, LOAD_TMA_FP8>::total};
}

template Kernel kite_cuda::sm90::fp8_pipelined_kernel<__nv_bfloat16>();
template Kernel kite_cuda::sm90::fp8_pipelined_kernel<__half>();
