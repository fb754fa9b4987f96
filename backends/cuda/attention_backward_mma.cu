/*
 * sdpa_backward / sdpa_varlen_backward on tensor cores (bf16/f16, head_dim 64 / 128): one
 * FlashAttention-2-style kernel, mma.sync m16n8k16 with f32 accumulators.
 *
 * A CTA of 8 warps owns 128 keys of one kv head g of one sequence; each warp owns 16 of them
 * and keeps their dK and dV rows in registers. The CTA walks the query heads that read g in head
 * order and, for each, the query tiles of BQ rows that see any of its keys (causal / window
 * tiles outside that range are never visited), so dK and dV are fixed-order sums (the same bits
 * run after run). Per tile (Q, dO, lse and delta by cp.async, double-buffered):
 *   dP^T = V dO^T and S^T = K Q^T (the warp's keys are the rows, queries the columns),
 *   P^T = exp2(u - lse) from the forward's lse (no softmax statistics, no S x S buffer),
 *   dS^T = P^T (dP^T - delta) (times 1 - tanh^2 under softcap),
 *   dV += P^T dO, dK += dS^T Q (P and dS as A operands straight from the accumulators),
 *   dS^T to shared memory, then dQ_tile = dS K over the CTA's 128 keys, added into the f32
 *   accumulator in the workspace in a fixed order (bwd_turn: the key blocks add into a query
 *   tile from the highest down), so dq is the same bits run after run; attention_backward.cu
 *   scales it into dq. Query tiles are aligned (tile m: rows [m BQ, m BQ + BQ)).
 * Masking is applied only on tiles that cross a row's key range, hold keys past the sequence or
 * meet a mask; a query whose lse is -inf (it saw no key) gets p = 0 through lse2 = +inf.
 */
#include "attention_backward.cuh"

using namespace kite_cuda;

namespace {

/* NW warps per CTA of 16 keys each: BN = 16 NW keys per CTA. Rows padded by 16 bytes: the 8
 * rows of an ldmatrix phase land in distinct bank groups. */
template <int D, int BQ, int NW> struct BwdSmem {
  static constexpr int BN = 16 * NW, LD = D + 8, LDS = BQ + 8;
  static constexpr size_t kv = (size_t)2 * BN * LD * 2;     /* K, V */
  static constexpr size_t qd = (size_t)2 * 2 * BQ * LD * 2; /* [buf][Q, dO] */
  static constexpr size_t ds = (size_t)BN * LDS * 2;        /* dS^T [key][query] */
  static constexpr size_t stat = (size_t)2 * 2 * BQ * 4;    /* [buf][lse2, delta] */
  static constexpr size_t total = kv + qd + ds + stat;
};

/* Grid: x = key block from the last (the dq order), y = kv head, z = sequence. See the file
 * comment. */
template <typename T, int D, int BQ, int NW>
__global__ void __launch_bounds__(32 * NW, 8 / NW) attn_bwd_mma_kernel(BwdParams p) {
  using SM = BwdSmem<D, BQ, NW>;
  constexpr int kWarps = NW, kThreads = 32 * NW, kBN = SM::BN;
  constexpr int LD = SM::LD, LDS = SM::LDS, CH = D / 8;
  constexpr int KS = D / 16, DN = D / 8, NQ = BQ / 8; /* k-steps over D, n-blocks of D, of BQ */
  constexpr int MBQ = BQ / 16, WPM = kWarps / MBQ, DC = D / WPM, DCN = DC / 8; /* dQ split */
  static_assert(MBQ * WPM == kWarps && NQ % 2 == 0 && DCN % 2 == 0, "tile shape");

  extern __shared__ __align__(16) unsigned char smem[];
  T *sK = (T *)smem, *sV = sK + kBN * LD;
  T *sQD = sV + kBN * LD; /* buf: Q at buf * 2 * BQ * LD, dO BQ * LD after it */
  T *sdS = (T *)(smem + SM::kv + SM::qd);
  float *sStat = (float *)(smem + SM::kv + SM::qd + SM::ds); /* buf: lse2, then delta */

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, qg = lane >> 2, qt = lane & 3;
  const int64_t g = blockIdx.y, b = blockIdx.z;
  const BwdSeq s = bwd_seq(p, b);
  const int64_t n = (s.kl + kBN - 1) / kBN - 1 - (int64_t)blockIdx.x;
  if (n < 0) return;
  const int64_t j0 = n * kBN, j1 = j0 + kBN < s.kl ? j0 + kBN : s.kl;

  bwd_load_kv<T, D, kBN>(
      p, s, b, g, j0, j1, tid, kThreads,
      [&](int r, int c) { return smem_addr(sK + r * LD + c * 8); },
      [&](int r, int c) { return smem_addr(sV + r * LD + c * 8); });

  const BwdTiles span = bwd_tiles(p, s, n, kBN, BQ);
  const int64_t nqb = span.hi - span.lo, ntiles = nqb * p.group;

  /* Tile t: query head r = t / nqb, tile m = span.lo + t % nqb (rows [m BQ, m BQ + BQ)); rows
   * past the sequence are zeros with lse2 = +inf (p = 0). */
  auto load_tile = [&](int64_t t, int buf) {
    const int64_t h = bwd_head(p, g, t / nqb), i0 = (span.lo + t % nqb) * BQ;
    T *dq = sQD + (size_t)buf * 2 * BQ * LD, *dg = dq + BQ * LD;
    const T *qb = (const T *)p.q + b * p.q_st[0] + h * p.q_st[1];
    const T *gb = (const T *)p.dout + b * p.do_st[0] + h * p.do_st[1];
    for (int idx = tid; idx < BQ * CH; idx += kThreads) {
      const int r = idx / CH, c = idx % CH;
      const bool ok = i0 + r < s.ql;
      const int64_t row = s.qf + i0 + r;
      cp_async16(smem_addr(dq + r * LD + c * 8), ok ? qb + row * p.q_st[2] + c * 8 : qb, ok);
      cp_async16(smem_addr(dg + r * LD + c * 8), ok ? gb + row * p.do_st[2] + c * 8 : gb, ok);
    }
    if (tid < BQ) {
      float l2 = INFINITY, dl = 0.0f;
      if (i0 + tid < s.ql) bwd_row_stats(p, b, h, s.qf + i0 + tid, &l2, &dl);
      sStat[buf * 2 * BQ + tid] = l2, sStat[buf * 2 * BQ + BQ + tid] = dl;
    }
  };

  float dk[DN][4], dv[DN][4];
#pragma unroll
  for (int dn = 0; dn < DN; dn++)
#pragma unroll
    for (int e = 0; e < 4; e++) dk[dn][e] = dv[dn][e] = 0.0f;

  const int kw = warp * 16; /* this warp's first key in the CTA's block */
  const BwdRules rules = bwd_rules(p, s);
  const int mq = warp / WPM, dc0 = (warp % WPM) * DC; /* this warp's dQ rows and columns */

  int *pending = nullptr; /* the tile of dq this CTA has yet to hand on (bwd_dq_in_turn) */
  if (ntiles > 0) load_tile(0, 0);
  cp_async_commit();
  for (int64_t t = 0; t < ntiles; t++) {
    const int buf = (int)(t & 1);
    bwd_tile_head(
        t, ntiles, load_tile, [] {}, &pending);
    const int64_t h = bwd_head(p, g, t / nqb), m = span.lo + t % nqb, i0 = m * BQ;
    const T *tQ = sQD + (size_t)buf * 2 * BQ * LD, *tG = tQ + BQ * LD;
    const float *tL = sStat + buf * 2 * BQ, *tD = tL + BQ;

    /* dP^T = V dO^T, S^T = K Q^T over the warp's 16 keys and the tile's BQ queries */
    float dp[NQ][4], sc[NQ][4];
#pragma unroll
    for (int nb = 0; nb < NQ; nb++)
#pragma unroll
      for (int e = 0; e < 4; e++) dp[nb][e] = sc[nb][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KS; kk++) {
      uint32_t av[4], ak[4];
      const int arow = (kw + (lane & 15)) * LD + kk * 16 + 8 * (lane >> 4);
      ldmatrix_x4(av, smem_addr(sV + arow));
      ldmatrix_x4(ak, smem_addr(sK + arow));
#pragma unroll
      for (int nb2 = 0; nb2 < NQ / 2; nb2++) {
        uint32_t bg[4], bq[4];
        const int brow =
            (nb2 * 16 + (lane & 7) + 8 * (lane >> 4)) * LD + kk * 16 + 8 * ((lane >> 3) & 1);
        ldmatrix_x4(bg, smem_addr(tG + brow));
        ldmatrix_x4(bq, smem_addr(tQ + brow));
        mma16816<T>(dp[2 * nb2], av, bg[0], bg[1]);
        mma16816<T>(dp[2 * nb2 + 1], av, bg[2], bg[3]);
        mma16816<T>(sc[2 * nb2], ak, bq[0], bq[1]);
        mma16816<T>(sc[2 * nb2 + 1], ak, bq[2], bq[3]);
      }
    }

    /* P^T into sc, dS^T into dp. Element (nb, e): key j0 + kw + qg + 8 (e >> 1), query
     * i0 + nb * 8 + 2 qt + (e & 1). */
    const bool full = p.mask_kind == MASK_NONE && rules.tile_full(i0, BQ, j0, j1, kBN);
#pragma unroll
    for (int nb = 0; nb < NQ; nb++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int ql = nb * 8 + 2 * qt + (e & 1);
        float fac;
        float u = rules.exponent(sc[nb][e], &fac);
        bool vis = true;
        if (!full) {
          const int64_t i = i0 + ql, j = j0 + kw + qg + 8 * (e >> 1);
          vis = rules.visible(i, j, j1);
          float add;
          if (vis && p.mask_kind != MASK_NONE) {
            vis = bwd_mask<T>(p, b, h, i, j, &add);
            u += add * kLog2e;
          }
        }
        const float pr = vis ? fast_exp2(u - tL[ql]) : 0.0f;
        sc[nb][e] = pr;
        dp[nb][e] = pr * (dp[nb][e] - tD[ql]) * fac;
      }

      /* dV += P^T dO, dK += dS^T Q */
#pragma unroll
    for (int kq = 0; kq < BQ / 16; kq++) {
      const uint32_t ap[4] = {pack2<T>(sc[2 * kq][0], sc[2 * kq][1]),
                              pack2<T>(sc[2 * kq][2], sc[2 * kq][3]),
                              pack2<T>(sc[2 * kq + 1][0], sc[2 * kq + 1][1]),
                              pack2<T>(sc[2 * kq + 1][2], sc[2 * kq + 1][3])};
      const uint32_t as[4] = {pack2<T>(dp[2 * kq][0], dp[2 * kq][1]),
                              pack2<T>(dp[2 * kq][2], dp[2 * kq][3]),
                              pack2<T>(dp[2 * kq + 1][0], dp[2 * kq + 1][1]),
                              pack2<T>(dp[2 * kq + 1][2], dp[2 * kq + 1][3])};
#pragma unroll
      for (int dn2 = 0; dn2 < DN / 2; dn2++) {
        uint32_t bg[4], bq[4];
        const int brow =
            (kq * 16 + (lane & 7) + 8 * ((lane >> 3) & 1)) * LD + dn2 * 16 + 8 * (lane >> 4);
        ldmatrix_x4_trans(bg, smem_addr(tG + brow));
        ldmatrix_x4_trans(bq, smem_addr(tQ + brow));
        mma16816<T>(dv[2 * dn2], ap, bg[0], bg[1]);
        mma16816<T>(dv[2 * dn2 + 1], ap, bg[2], bg[3]);
        mma16816<T>(dk[2 * dn2], as, bq[0], bq[1]);
        mma16816<T>(dk[2 * dn2 + 1], as, bq[2], bq[3]);
      }
    }
#pragma unroll
    for (int nb = 0; nb < NQ; nb++)
#pragma unroll
      for (int hh = 0; hh < 2; hh++)
        *(uint32_t *)(sdS + (kw + qg + 8 * hh) * LDS + nb * 8 + 2 * qt) =
            pack2<T>(dp[nb][2 * hh], dp[nb][2 * hh + 1]);
    __syncthreads();

    /* dQ rows mq * 16.. of the tile, columns dc0..: dS (from dS^T by ldmatrix.trans) times K */
    float aq[DCN][4];
#pragma unroll
    for (int dn = 0; dn < DCN; dn++)
#pragma unroll
      for (int e = 0; e < 4; e++) aq[dn][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kBN / 16; kk++) {
      uint32_t a[4];
      ldmatrix_x4_trans(a, smem_addr(sdS + (kk * 16 + (lane & 7) + 8 * (lane >> 4)) * LDS +
                                     mq * 16 + 8 * ((lane >> 3) & 1)));
#pragma unroll
      for (int dn2 = 0; dn2 < DCN / 2; dn2++) {
        uint32_t bk[4];
        ldmatrix_x4_trans(bk, smem_addr(sK + (kk * 16 + (lane & 7) + 8 * ((lane >> 3) & 1)) * LD +
                                        dc0 + dn2 * 16 + 8 * (lane >> 4)));
        mma16816<T>(aq[2 * dn2], a, bk[0], bk[1]);
        mma16816<T>(aq[2 * dn2 + 1], a, bk[2], bk[3]);
      }
    }
    /* the tile's dq accumulator, in turn (bwd_turn) */
    bwd_dq_in_turn(p, s, b, h, n, m, kBN, BQ, &pending, [&] {
      float *accb = p.dq_acc + b * p.acc_st[0] + h * p.acc_st[1];
#pragma unroll
      for (int hh = 0; hh < 2; hh++) {
        const int64_t i = i0 + mq * 16 + qg + 8 * hh;
        if (i >= s.ql) continue;
        float *row = accb + (s.qf + i) * p.acc_st[2] + dc0 + 2 * qt;
#pragma unroll
        for (int dn = 0; dn < DCN; dn++)
          atomic_add2(row + dn * 8, aq[dn][2 * hh], aq[dn][2 * hh + 1]);
      }
    });
  }
  bwd_turn_flush(&pending);
  cp_async_wait<0>();

  bwd_store_dkdv<T, D>(p, s, b, g, j0, j1, kw, lane, reinterpret_cast<const float(&)[D / 2]>(dk),
                       reinterpret_cast<const float(&)[D / 2]>(dv));
}

template <typename T, int D, int BQ, int NW>
kite_status launch_bwd(const BwdParams &p, cudaStream_t s) {
  using SM = BwdSmem<D, BQ, NW>;
  const size_t smem = SM::total;
  auto kernel = attn_bwd_mma_kernel<T, D, BQ, NW>;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) !=
      cudaSuccess) {
    const cudaError_t e = cudaGetLastError();
    return kite_set_error(KITE_ERR_DEVICE, "cuda.mma: %zu bytes of shared memory: %s", smem,
                          cudaGetErrorString(e));
  }
  const dim3 grid((unsigned)((p.sk + SM::BN - 1) / SM::BN), (unsigned)p.hkv, (unsigned)p.batch);
  kernel<<<grid, 32 * NW, smem, s>>>(p);
  return KITE_OK;
}

/* 8 warps (128 keys per CTA: half the dq atomics and Q / dO tile loads per key of 4 warps, 6%
 * faster at B 4, S 4096, D 128 on an H100); query tiles of 64 rows at head_dim 64, 32 at 128
 * (dK, dV and the S / dP tiles in registers, no spills). */
template <typename T> kite_status launch_bwd_d(const BwdParams &p, cudaStream_t s) {
  return p.head_dim == 64 ? launch_bwd<T, 64, 64, 8>(p, s) : launch_bwd<T, 128, 32, 8>(p, s);
}

} // namespace

bool kite_cuda::attn_bwd_mma_head_dim(int64_t d) {
  return d == 64 || d == 128;
}

int kite_cuda::attn_bwd_mma_tile_rows(int64_t d) {
  return d == 64 ? 64 : 32;
}

kite_status kite_cuda::attn_bwd_mma_launch(const BwdParams &p, cudaStream_t s) {
  if (p.sk <= 0) return KITE_OK;
  if (p.dtype == KITE_DTYPE_BF16) return launch_bwd_d<__nv_bfloat16>(p, s);
  return launch_bwd_d<__half>(p, s);
}
