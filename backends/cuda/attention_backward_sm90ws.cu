/*
 * sdpa_backward / sdpa_varlen_backward on Hopper (sm_90a), warp-specialized (cuda.sm90ws): wgmma,
 * bf16/f16, head_dim 64 / 128, no mask (softcap, causal, window, GQA, varlen; the sinks' gradient
 * comes from delta and lse in attention_backward.cu).
 *
 * A CTA of 3 warpgroups owns 128 keys (key block n) of one kv head g of one sequence and walks the
 * query heads that read g in head order and, for each, the query tiles of 64 rows (tile m: rows
 * [64 m, 64 m + 64)) that see any of its keys, so dK and dV are fixed-order sums:
 *   warpgroup 0, warp 0 (loader): per tile, Q and dO by TMA (one box per 64 columns) and the rows'
 *     lse log2(e) and delta into a ring of 2 stages (full / empty mbarriers). A tile that runs past
 *     a varlen sequence (TMA would read the next sequence's rows), or any tile where TMA cannot
 *     address q or dout, is copied by the warp's lanes, rows past the end as zeros.
 *   warpgroup 0, warps 1 and 2 (dq writers, the even and the odd tiles, each with a shared dQ tile
 *     of its own): per tile, waits for the tile's turn (bwd_turn: the key blocks add into a query
 *     tile from the highest down, so dq is the same bits run after run), adds the consumers' dQ
 *     tile into the f32 accumulator by bulk reduce-add (one for a dense tile, one per row under
 *     varlen), frees the shared tile once the adds have read it and hands the turn on once they
 *     completed. Two writers keep two tiles' adds in flight: with one, waiting for each tile's
 *     adds to complete bounded the whole kernel.
 *   warpgroups 1 and 2 (consumers): keys [64 w, 64 w + 64) of the block each, their dK and dV
 *     (64 x D, f32) in registers. Per tile, with the keys as the wgmma M:
 *       S^T = K Q^T, dP^T = V dO^T      m64n64k16, both operands K-major from shared memory,
 *       P^T = exp2(u - lse), dS^T = P^T (dP^T - delta) (times 1 - tanh^2 under softcap),
 *       dV += P^T dO, dK += dS^T Q      m64nDk16, P^T / dS^T as register A fragments, dO / Q
 *                                       MN-major,
 *       dS^T into shared memory transposed (stmatrix.trans; two buffers, so one warpgroup may
 *       run a tile ahead), then dQ = dS K (m64n64k16 over the block's keys; at head_dim 128
 *       warpgroup w takes columns [64 w, 64 w + 64), at 64 warpgroup t % 2 takes tile t whole
 *       while the other goes on) into the shared dQ tile for the writer.
 * The consumers never wait for a load they issued, for a tile's turn or for its additions; where
 * the same math ran with those on the same warps the tile took about twice as long
 * (docs/performance.md, 2026-11-27). A query whose lse is -inf gets p = 0 (lse2 = +inf).
 */
#include "attention_backward.cuh"
#include "sm90.cuh"

using namespace kite_cuda;

namespace {

constexpr int kBN = 128, kBQ = 64, kStages = 2, kThreads = 384, kConsumers = 256;
constexpr int kWriterRegs = 40, kConsumerRegs = 232;
static_assert(128 * kWriterRegs + 256 * kConsumerRegs <= 65536, "registers of the launch");

/* Named barriers (0 is __syncthreads, used only before the roles split). */
enum {
  BAR_CONSUMERS = 1, /* the 256 consumer threads: K, V loaded; dS of both warpgroups stored */
  BAR_DQ_FULL = 2,   /* + buffer: consumers arrive once a dQ tile is in it; its writer waits */
  BAR_DQ_FREE = 4,   /* + buffer: its writer arrives once its adds read it; consumers wait */
};
/* The threads of a dQ buffer's barriers: its writer and the consumers that fill it (both
 * warpgroups at head_dim 128; at 64 warpgroup t % 2 fills buffer t % 2 alone) */
template <int D> __host__ __device__ constexpr int dq_bar_threads() {
  return (D == 128 ? kConsumers : kConsumers / 2) + 32;
}

/* Shared memory, each tile 1024-byte aligned in the 128-byte swizzled layout (swz): K, V
 * [key][d]; per stage Q and dO [query][d]; two dS [query][key]; two f32 dQ tiles [query][d] (the
 * consumers fill one while a writer adds the other), each as the accumulator keeps it
 * (BwdParams::acc_swizzled: row i's column d at d ^ 8 (i % 4), so the fragments' 8-byte stores
 * meet two-way bank conflicts, the least for that width, and a dense tile is one bulk add); per
 * stage lse log2(e) and delta of the tile's rows; the full and empty barriers. */
template <int D> struct WsSmem {
  static constexpr size_t kv = (size_t)kBN * D * 2;
  static constexpr size_t qd = (size_t)kBQ * D * 2;
  static constexpr size_t ds = (size_t)kBQ * kBN * 2;
  static constexpr int dq_row = D * 4;
  static constexpr size_t off_v = kv, off_stage = 2 * kv, off_ds = off_stage + kStages * 2 * qd;
  static constexpr size_t dq = (size_t)kBQ * dq_row; /* one of the two dQ buffers */
  static constexpr size_t off_dq = off_ds + 2 * ds, off_stat = off_dq + 2 * dq;
  static constexpr size_t off_bar = off_stat + (size_t)kStages * 2 * kBQ * 4;
  static constexpr size_t total = 1024 /* alignment */ + off_bar + 2 * kStages * 8;
  static_assert(total <= 232448, "the shared memory of a CTA on sm_90");
};

#ifdef KITE_SM90_DEVICE
/* A tile TMA must not or cannot load (past a varlen sequence's end; q or dout not addressable),
 * copied by the loader warp's lanes: 16-byte chunks of the rows [i0, i0 + 64) of head h below the
 * sequence's end, zeros after, into the swizzled tile at sQ (Q) and sG (dO); fenced for wgmma. */
template <typename T, int D>
__device__ void ws_copy_tile(const BwdParams &p, const BwdSeq &s, int64_t b, int64_t h, int64_t i0,
                             unsigned char *sQ, unsigned char *sG, int lane) {
  constexpr int CH = D / 8;
  const T *qb = (const T *)p.q + b * p.q_st[0] + h * p.q_st[1];
  const T *gb = (const T *)p.dout + b * p.do_st[0] + h * p.do_st[1];
  for (int idx = lane; idx < kBQ * CH; idx += 32) {
    const int r = idx / CH, c = idx % CH;
    uint4 vq = make_uint4(0, 0, 0, 0), vg = vq;
    if (i0 + r < s.ql) {
      const int64_t row = s.qf + i0 + r;
      vq = *(const uint4 *)(qb + row * p.q_st[2] + c * 8);
      vg = *(const uint4 *)(gb + row * p.do_st[2] + c * 8);
    }
    *(uint4 *)(sQ + swz(kBQ, r, c)) = vq;
    *(uint4 *)(sG + swz(kBQ, r, c)) = vg;
  }
  fence_async_shared();
}
#endif

/* Grid: x = key block from the last (the dq order), y = kv head, z = sequence. tq / tdo: Q and dO
 * as [batch][hq][rows][D] (varlen: batch 1, rows = the packed rows) in boxes of 64 x 64. */
template <typename T, int D, bool CAPPED>
__global__ void __launch_bounds__(kThreads, 1)
    attn_bwd_ws_kernel(BwdParams p, const __grid_constant__ CUtensorMap tq,
                       const __grid_constant__ CUtensorMap tdo, bool tma) {
#ifdef KITE_SM90_DEVICE
  using SM = WsSmem<D>;
  extern __shared__ unsigned char smem_raw[];
  unsigned char *smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  const uint32_t base = smem_addr(smem);
  const uint32_t full0 = base + (uint32_t)SM::off_bar, empty0 = full0 + 8 * kStages;
  float *sStat = (float *)(smem + SM::off_stat); /* stage st: lse2[kBQ], delta[kBQ] */

  const int tid = threadIdx.x, lane = tid & 31;
  const int64_t g = blockIdx.y, b = blockIdx.z;
  const BwdSeq s = bwd_seq(p, b);
  const int64_t n = (s.kl + kBN - 1) / kBN - 1 - (int64_t)blockIdx.x;
  if (n < 0) return;
  const int64_t j0 = n * kBN, j1 = j0 + kBN < s.kl ? j0 + kBN : s.kl;
  const BwdTiles span = bwd_tiles(p, s, n, kBN, kBQ);
  const int64_t nqt = span.hi - span.lo, ntiles = nqt * p.group;

  if (tid == 0)
    for (int st = 0; st < kStages; st++) {
      mbar_init(full0 + 8 * st, 32);
      mbar_init(empty0 + 8 * st, kConsumers);
    }
  __syncthreads();

  if (tid < 128) {
    reg_dealloc<kWriterRegs>();
    const int warp = tid >> 5;
    if (warp == 0) { /* ---- loader ---- */
      for (int64_t t = 0; t < ntiles; t++) {
        const int st = (int)(t % kStages);
        if (t >= kStages) mbar_wait(empty0 + 8 * st, (int)((t / kStages - 1) & 1));
        const int64_t h = bwd_head(p, g, t / nqt), i0 = (span.lo + t % nqt) * kBQ;
        float *stat = sStat + st * 2 * kBQ;
        for (int r = lane; r < kBQ; r += 32) {
          float l2 = INFINITY, dl = 0.0f;
          if (i0 + r < s.ql) bwd_row_stats(p, b, h, s.qf + i0 + r, &l2, &dl);
          stat[r] = l2, stat[kBQ + r] = dl;
        }
        const uint32_t full = full0 + 8 * st,
                       sq = base + (uint32_t)(SM::off_stage + st * 2 * SM::qd);
        if (!tma || (p.varlen && i0 + kBQ > s.ql)) {
          ws_copy_tile<T, D>(p, s, b, h, i0, smem + (sq - base), smem + (sq - base) + SM::qd, lane);
          mbar_arrive(full);
        } else if (lane == 0) {
          mbar_expect_tx(full, (int)(2 * SM::qd));
          const int row = (int)(s.qf + i0), hh = (int)h, bb = p.varlen ? 0 : (int)b;
#pragma unroll
          for (int c = 0; c < D / 64; c++) {
            tma_load_4d(sq + c * kBQ * 128, &tq, 64 * c, row, hh, bb, full);
            tma_load_4d(sq + (uint32_t)SM::qd + c * kBQ * 128, &tdo, 64 * c, row, hh, bb, full);
          }
        } else {
          mbar_arrive(full);
        }
      }
    } else if (warp <= 2) { /* ---- dq writers: warp 1 the even tiles, warp 2 the odd ---- */
      const uint32_t sdq = base + (uint32_t)SM::off_dq;
      float *accb = p.dq_acc + b * p.acc_st[0];
      if (warp - 1 < ntiles) named_arrive(BAR_DQ_FREE + warp - 1, dq_bar_threads<D>());
      for (int64_t t = warp - 1; t < ntiles; t += 2) {
        const int64_t h = bwd_head(p, g, t / nqt), m = span.lo + t % nqt, i0 = m * kBQ;
        int *cnt = p.dq_turn + (b * p.hq + h) * p.mtiles + m;
        const int turn = bwd_turn(p, s, n, m, kBN, kBQ);
        const int buf = (int)(t & 1);
        const uint32_t src = sdq + buf * (uint32_t)SM::dq;
        named_sync(BAR_DQ_FULL + buf, dq_bar_threads<D>());
        bwd_turn_wait(cnt, turn); /* every lane: its own acquire before its adds */
        fence_async_global();
        const int nrows = s.ql - i0 < kBQ ? (int)(s.ql - i0) : kBQ;
        float *dst = accb + h * p.acc_st[1] + (s.qf + i0) * p.acc_st[2];
        if (!p.varlen) { /* dense: the tile's rows are contiguous */
          if (lane == 0) bulk_reduce_add_f32(dst, src, nrows * D * 4);
        } else {
          for (int r = lane; r < nrows; r += 32)
            bulk_reduce_add_f32(dst + r * p.acc_st[2], src + r * SM::dq_row, D * 4);
        }
        bulk_commit();
        bulk_wait_read<0>();
        __syncwarp();
        if (t + 2 < ntiles) named_arrive(BAR_DQ_FREE + buf, dq_bar_threads<D>());
        bulk_wait<0>();
        fence_async_global();
        __syncwarp();
        if (lane == 0) bwd_turn_pass(cnt);
      }
    }
    return;
  }

  /* ---- consumers ---- */
  reg_alloc<kConsumerRegs>();
  const int ctid = tid - 128, wg = ctid >> 7, warp = (ctid >> 5) & 3;
  const int qg = lane >> 2, qt = lane & 3;
  bwd_load_kv<T, D, kBN>(
      p, s, b, g, j0, j1, ctid, kConsumers, [&](int r, int c) { return base + swz(kBN, r, c); },
      [&](int r, int c) { return base + (uint32_t)SM::off_v + swz(kBN, r, c); });
  cp_async_commit();
  cp_async_wait<0>();
  fence_async_shared();
  named_sync(BAR_CONSUMERS, kConsumers);

  float dk[D / 2], dv[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; i++) dk[i] = dv[i] = 0.0f;

  const int kw = wg * 64 + warp * 16; /* this warp's first key in the block */
  const BwdRules rules = bwd_rules(p, s);
  const int cb = D == 128 ? wg : 0;
  const uint32_t k_addr = base, kw_addr = base + wg * 64 * 128;
  const uint32_t vw_addr = base + (uint32_t)SM::off_v + wg * 64 * 128;
  float *sdq = (float *)(smem + SM::off_dq);

  for (int64_t t = 0; t < ntiles; t++) {
    const int st = (int)(t % kStages);
    const int64_t m = span.lo + t % nqt, i0 = m * kBQ;
    const uint32_t q_addr = base + (uint32_t)(SM::off_stage + st * 2 * SM::qd);
    const uint32_t g_addr = q_addr + (uint32_t)SM::qd;
    const uint32_t ds_addr = base + (uint32_t)(SM::off_ds + (t & 1) * SM::ds);
    const float *tL = sStat + st * 2 * kBQ, *tD = tL + kBQ;
    mbar_wait(full0 + 8 * st, (int)((t / kStages) & 1));

    /* S^T = K Q^T, dP^T = V dO^T: k-step kk is 32 bytes into a 128-byte row of column block
     * kk / 4 */
    float sc[kBQ / 2], dp[kBQ / 2];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
      const uint32_t ko = (kk >> 2) * kBN * 128 + (kk & 3) * 32;
      const uint32_t qo = (kk >> 2) * kBQ * 128 + (kk & 3) * 32;
      wgmma_ss_n64<T>(sc, smem_desc(kw_addr + ko, 16, 1024), smem_desc(q_addr + qo, 16, 1024),
                      kk > 0);
      wgmma_ss_n64<T>(dp, smem_desc(vw_addr + ko, 16, 1024), smem_desc(g_addr + qo, 16, 1024),
                      kk > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(sc);
    fence_regs(dp);

    /* P^T into sc, dS^T into dp. Element 4 nb + 2 hh + e: key j0 + kw + qg + 8 hh, query
     * i0 + 8 nb + 2 qt + e. Branch-free: the rules as 32-bit compares of the key and query within
     * the tile (key kl sees query ql when kl < nk, ql < nq and dw <= kl - ql <= dc), softcap by
     * template (with a branch per element here the warps waited for instructions). */
    const bool full = rules.tile_full(i0, kBQ, j0, j1, kBN);
    const auto clampi = [](int64_t v) {
      return (int)(v < -(1 << 20) ? -(1 << 20) : v > (1 << 20) ? (1 << 20) : v);
    };
    const int nk = (int)(j1 - j0), nq = s.ql - i0 < kBQ ? (int)(s.ql - i0) : kBQ;
    const int dc = rules.causal ? clampi(i0 + rules.shift - j0) : 1 << 20;
    const int dw = rules.windowed ? clampi(i0 + rules.shift - p.window_left - j0) : -(1 << 20);
    const auto softmax = [&](auto all_visible) {
#pragma unroll
      for (int nb = 0; nb < kBQ / 8; nb++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++)
#pragma unroll
          for (int e = 0; e < 2; e++) {
            const int x = 4 * nb + 2 * hh + e, ql = nb * 8 + 2 * qt + e, kl = kw + qg + 8 * hh;
            float u, fac = 1.0f;
            if constexpr (CAPPED) {
              const float th = tanhf(sc[x] * rules.cs);
              fac = 1.0f - th * th, u = rules.cap2 * th;
            } else {
              u = sc[x] * rules.sl2;
            }
            float pr = fast_exp2(u - tL[ql]);
            if constexpr (!decltype(all_visible)::value)
              pr = kl < nk && ql < nq && kl - ql <= dc && kl - ql >= dw ? pr : 0.0f;
            sc[x] = pr;
            dp[x] = pr * (dp[x] - tD[ql]) * fac;
          }
    };
    if (full)
      softmax(std::true_type());
    else
      softmax(std::false_type());

    /* k-step kj of the queries: n-blocks 2 kj and 2 kj + 1 of the fragment */
    uint32_t pa[kBQ / 16][4], sa[kBQ / 16][4];
#pragma unroll
    for (int kj = 0; kj < kBQ / 16; kj++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        pa[kj][e] = pack2<T>(sc[8 * kj + 2 * e], sc[8 * kj + 2 * e + 1]);
        sa[kj][e] = pack2<T>(dp[8 * kj + 2 * e], dp[8 * kj + 2 * e + 1]);
      }

    /* dV += P^T dO, dK += dS^T Q: 16 queries are 2048 bytes into each column block */
    wgmma_fence();
#pragma unroll
    for (int kj = 0; kj < kBQ / 16; kj++) {
      const uint64_t dg = smem_desc(g_addr + kj * 2048, kBQ * 128, 1024);
      const uint64_t dq = smem_desc(q_addr + kj * 2048, kBQ * 128, 1024);
      if constexpr (D == 128) {
        wgmma_rs_n128<T>(dv, pa[kj], dg);
        wgmma_rs_n128<T>(dk, sa[kj], dq);
      } else {
        wgmma_rs_n64<T>(dv, pa[kj], dg);
        wgmma_rs_n64<T>(dk, sa[kj], dq);
      }
    }
    wgmma_commit();

    /* dS^T transposed into dS [query][key] */
    {
      const int mtx = lane >> 3, rr = lane & 7, chunk = kw / 8 + (mtx & 1);
#pragma unroll
      for (int kj = 0; kj < kBQ / 16; kj++)
        stmatrix_x4_trans(ds_addr + swz(kBQ, (2 * kj + (mtx >> 1)) * 8 + rr, chunk), sa[kj]);
    }
    fence_async_shared();
    named_sync(BAR_CONSUMERS, kConsumers); /* dS of both warpgroups */

    /* dQ (64 queries x 64 columns from column block cb) = dS K over the block's 128 keys: at
     * head_dim 128 warpgroup w takes column block w, at 64 warpgroup t % 2 takes the tile (the
     * other goes on to the next tile) */
    const bool dq_here = D == 128 || wg == (int)(t & 1);
    float aq[32];
    if (dq_here) {
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBN / 16; kk++)
        wgmma_sst_n64<T>(aq, smem_desc(ds_addr + (kk >> 2) * kBQ * 128 + (kk & 3) * 32, 16, 1024),
                         smem_desc(k_addr + cb * kBN * 128 + kk * 2048, kBN * 128, 1024), kk > 0);
      wgmma_commit();
    }
    wgmma_wait<0>();
    fence_regs(dk);
    fence_regs(dv);
    mbar_arrive(empty0 + 8 * st); /* Q, dO and the stats of this stage are read */

    /* dQ into buffer t % 2 once the writer read tile t - 2 from it */
    if (dq_here) {
      fence_regs(aq);
      float *sdqt = sdq + (t & 1) * (SM::dq / 4);
      named_sync(BAR_DQ_FREE + (int)(t & 1), dq_bar_threads<D>());
#pragma unroll
      for (int hh = 0; hh < 2; hh++) {
        const int r = warp * 16 + qg + 8 * hh, key = (int)((s.qf + i0 + r) & 3);
        float *row = sdqt + r * (SM::dq_row / 4) + cb * 64 + 2 * qt;
#pragma unroll
        for (int nb = 0; nb < 8; nb++)
          *(float2 *)(row + 8 * (nb ^ key)) =
              make_float2(aq[4 * nb + 2 * hh], aq[4 * nb + 2 * hh + 1]);
      }
      fence_async_shared();
      named_arrive(BAR_DQ_FULL + (int)(t & 1), dq_bar_threads<D>());
    }
  }

  bwd_store_dkdv<T, D>(p, s, b, g, j0, j1, kw, lane, dk, dv);
#else
  (void)p;
  (void)tq;
  (void)tdo;
  (void)tma;
  (void)WsSmem<D>::off_v;
  (void)dq_bar_threads<D>(); /* (only the sm_90a code reads these) */
#endif
}

template <typename T, int D, bool CAPPED> kite_status launch_ws(BwdParams &p, cudaStream_t s) {
  /* Q and dO as [batch][hq][rows][D]; varlen: one batch of the packed rows */
  CUtensorMap tq, tdo;
  const int64_t rows = p.varlen ? p.tq : p.sq, batch = p.varlen ? 1 : p.batch;
  int64_t qst[3] = {p.q_st[0], p.q_st[1], p.q_st[2]}, gst[3] = {p.do_st[0], p.do_st[1], p.do_st[2]};
  if (p.varlen) qst[0] = qst[1], gst[0] = gst[1]; /* one batch: any valid stride */
  const bool tma = rows_tensor_map(&tq, p.dtype, 2, p.q, qst, D, rows, p.hq, batch, kBQ) &&
                   rows_tensor_map(&tdo, p.dtype, 2, p.dout, gst, D, rows, p.hq, batch, kBQ);
  if (!tma) memset(&tq, 0, sizeof tq), memset(&tdo, 0, sizeof tdo); /* the loader copies */
  const size_t smem = WsSmem<D>::total;
  auto kernel = attn_bwd_ws_kernel<T, D, CAPPED>;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) !=
      cudaSuccess) {
    const cudaError_t e = cudaGetLastError();
    return kite_set_error(KITE_ERR_DEVICE, "cuda.sm90ws: %zu bytes of shared memory: %s", smem,
                          cudaGetErrorString(e));
  }
  const dim3 grid((unsigned)((p.sk + kBN - 1) / kBN), (unsigned)p.hkv, (unsigned)p.batch);
  p.acc_swizzled = true;
  kernel<<<grid, kThreads, smem, s>>>(p, tq, tdo, tma);
  return KITE_OK;
}

template <typename T> kite_status launch_ws_d(BwdParams &p, cudaStream_t s) {
  if (p.softcap > 0.0f)
    return p.head_dim == 64 ? launch_ws<T, 64, true>(p, s) : launch_ws<T, 128, true>(p, s);
  return p.head_dim == 64 ? launch_ws<T, 64, false>(p, s) : launch_ws<T, 128, false>(p, s);
}

} // namespace

bool kite_cuda::attn_bwd_sm90ws_head_dim(int64_t d) {
  return d == 64 || d == 128;
}

int kite_cuda::attn_bwd_sm90ws_tile_rows() {
  return kBQ;
}

kite_status kite_cuda::attn_bwd_sm90ws_launch(BwdParams &p, cudaStream_t s) {
  if (p.sk <= 0) return KITE_OK;
  if (p.dtype == KITE_DTYPE_BF16) return launch_ws_d<__nv_bfloat16>(p, s);
  return launch_ws_d<__half>(p, s);
}
