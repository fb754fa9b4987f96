/*
 * sdpa_backward / sdpa_varlen_backward on Hopper (sm_90a): wgmma, bf16/f16, head_dim 64 / 128,
 * no mask (softcap, causal, window, GQA, varlen; the sinks' gradient comes from delta and lse in
 * attention_backward.cu).
 *
 * A CTA of 2 warpgroups owns 128 keys (key block n) of one kv head g of one sequence; warpgroup w
 * owns keys [64 w, 64 w + 64) of the block and keeps their dK and dV (64 x D, f32) in registers.
 * The CTA walks the query heads that read g in head order and, for each, the query tiles of 64
 * rows (aligned: tile m is rows [64 m, 64 m + 64)) that see any of its keys, so dK and dV are
 * fixed-order sums. Per tile (Q, dO, lse and delta by cp.async into the 128-byte swizzled layout,
 * double-buffered), per warpgroup, with the keys as the wgmma M:
 *   S^T = K Q^T, dP^T = V dO^T       wgmma m64n64k16, both operands K-major from shared memory,
 *   P^T = exp2(u - lse), dS^T = P^T (dP^T - delta) (times 1 - tanh^2 under softcap), in registers,
 *   dV += P^T dO, dK += dS^T Q       wgmma m64nDk16, P^T / dS^T as register A fragments, dO / Q
 *                                    MN-major (the forward's P V),
 *   dS^T to shared memory transposed (stmatrix.trans: dS as [query][key], K-major),
 *   dQ = dS K                        wgmma m64n64k16, dS K-major, K MN-major; at head_dim 128 each
 *                                    warpgroup takes 64 of the columns, at 64 each its 64 keys,
 * and dQ is added into the f32 accumulator in the workspace in a fixed order (bwd_turn: the key
 * blocks add into a tile from the highest down), so dq is the same bits run after run;
 * attention_backward.cu scales it into dq. A query whose lse is -inf gets p = 0 (lse2 = +inf).
 */
#include "attention_backward.cuh"
#include "sm90.cuh"

using namespace kite_cuda;

namespace {

constexpr int kBN = 128, kBQ = 64, kThreads = 256;

/* Tiles of the 128-byte swizzled layout, each 1024-byte aligned: K, V [key][d]; two buffers of
 * Q and dO [query][d]; dS [query][key]; then lse2 and delta of each buffer. */
template <int D> struct BwdSmem90 {
  static constexpr size_t kv = (size_t)kBN * D * 2;
  static constexpr size_t qd = (size_t)kBQ * D * 2;
  static constexpr size_t ds = (size_t)kBQ * kBN * 2;
  static constexpr size_t stat = (size_t)2 * 2 * kBQ * 4;
  static constexpr size_t total = 1024 /* alignment */ + 2 * kv + 4 * qd + ds + stat;
};

/* Grid: x = key block from the last (the dq order), y = kv head, z = sequence. */
template <typename T, int D>
__global__ void __launch_bounds__(kThreads, 1) attn_bwd_sm90_kernel(BwdParams p) {
#ifdef KITE_SM90_DEVICE
  using SM = BwdSmem90<D>;
  constexpr int CH = D / 8;
  extern __shared__ unsigned char smem_raw[];
  unsigned char *smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  unsigned char *sK = smem, *sV = smem + SM::kv, *sQD = smem + 2 * SM::kv; /* buf: Q, dO */
  unsigned char *sdS = sQD + 4 * SM::qd;
  float *sStat = (float *)(sdS + SM::ds); /* buf: lse2[kBQ], delta[kBQ] */

  const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int qg = lane >> 2, qt = lane & 3;
  const int64_t g = blockIdx.y, b = blockIdx.z;
  const BwdSeq s = bwd_seq(p, b);
  const int64_t n = (s.kl + kBN - 1) / kBN - 1 - (int64_t)blockIdx.x;
  if (n < 0) return;
  const int64_t j0 = n * kBN, j1 = j0 + kBN < s.kl ? j0 + kBN : s.kl;
  const BwdTiles span = bwd_tiles(p, s, n, kBN, kBQ);
  const int64_t nqt = span.hi - span.lo, ntiles = nqt * p.group;

  const T *kb = (const T *)p.k + b * p.k_st[0] + g * p.k_st[1];
  const T *vb = (const T *)p.v + b * p.v_st[0] + g * p.v_st[1];
  for (int idx = tid; idx < kBN * CH; idx += kThreads) {
    const int r = idx / CH, c = idx % CH;
    const bool ok = j0 + r < j1;
    const int64_t row = s.kf + j0 + r;
    cp_async16(smem_addr(sK + swz(kBN, r, c)), ok ? kb + row * p.k_st[2] + c * 8 : kb, ok);
    cp_async16(smem_addr(sV + swz(kBN, r, c)), ok ? vb + row * p.v_st[2] + c * 8 : vb, ok);
  }

  /* Tile t: query head r = t / nqt, tile m = span.lo + t % nqt; rows past the sequence are zeros
   * with lse2 = +inf (p = 0). */
  auto load_tile = [&](int64_t t, int buf) {
    const int64_t h = bwd_head(p, g, t / nqt), i0 = (span.lo + t % nqt) * kBQ;
    unsigned char *tq = sQD + (size_t)(2 * buf) * SM::qd, *tg = tq + SM::qd;
    const T *qb = (const T *)p.q + b * p.q_st[0] + h * p.q_st[1];
    const T *gb = (const T *)p.dout + b * p.do_st[0] + h * p.do_st[1];
    for (int idx = tid; idx < kBQ * CH; idx += kThreads) {
      const int r = idx / CH, c = idx % CH;
      const bool ok = i0 + r < s.ql;
      const int64_t row = s.qf + i0 + r;
      cp_async16(smem_addr(tq + swz(kBQ, r, c)), ok ? qb + row * p.q_st[2] + c * 8 : qb, ok);
      cp_async16(smem_addr(tg + swz(kBQ, r, c)), ok ? gb + row * p.do_st[2] + c * 8 : gb, ok);
    }
    if (tid < kBQ) {
      float l2 = INFINITY, dl = 0.0f;
      if (i0 + tid < s.ql) bwd_row_stats(p, b, h, s.qf + i0 + tid, &l2, &dl);
      sStat[buf * 2 * kBQ + tid] = l2, sStat[buf * 2 * kBQ + kBQ + tid] = dl;
    }
  };

  float dk[D / 2], dv[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; i++) dk[i] = dv[i] = 0.0f;

  const int kw = wg * 64 + warp * 16; /* this warp's first key in the block */
  const BwdRules rules = bwd_rules(p, s);
  /* dQ: at head_dim 128 warpgroup w takes columns [64 w, 64 w + 64) over the 128 keys; at 64, all
   * columns over its own 64 keys (the two partial sums then added one after the other) */
  constexpr int DQ_KS = D == 128 ? kBN / 16 : 4;
  const int cb = D == 128 ? wg : 0, kq0 = D == 128 ? 0 : 4 * wg;
  const uint32_t k_addr = smem_addr(sK), v_addr = smem_addr(sV), ds_addr = smem_addr(sdS);
  const uint32_t kw_addr = k_addr + wg * 64 * 128, vw_addr = v_addr + wg * 64 * 128;

  int *pending = nullptr; /* the tile of dq this CTA has yet to hand on (bwd_dq_in_turn) */
  if (ntiles > 0) load_tile(0, 0);
  cp_async_commit();
  for (int64_t t = 0; t < ntiles; t++) {
    const int buf = (int)(t & 1);
    bwd_tile_head(
        t, ntiles, load_tile, [] { fence_async_shared(); }, &pending);
    const int64_t h = bwd_head(p, g, t / nqt), m = span.lo + t % nqt, i0 = m * kBQ;
    const uint32_t q_addr = smem_addr(sQD + (size_t)(2 * buf) * SM::qd), g_addr = q_addr + SM::qd;
    const float *tL = sStat + buf * 2 * kBQ, *tD = tL + kBQ;

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
     * i0 + 8 nb + 2 qt + e. */
    const bool full = rules.tile_full(i0, kBQ, j0, j1, kBN);
#pragma unroll
    for (int nb = 0; nb < kBQ / 8; nb++)
#pragma unroll
      for (int hh = 0; hh < 2; hh++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
          const int x = 4 * nb + 2 * hh + e, ql = nb * 8 + 2 * qt + e;
          float fac;
          const float u = rules.exponent(sc[x], &fac);
          /* BwdRules::visible spelled out: through the call, ptxas schedules this loop
           * differently (233 registers instead of 255) and the kernel ran 7 % slower on an H100
           * (docs/performance.md, 2026-11-27 (morning)) */
          bool vis = true;
          if (!full) {
            const int64_t i = i0 + ql, j = j0 + kw + qg + 8 * hh, pos = i + rules.shift;
            vis = j < j1 && i < s.ql && (!rules.causal || j <= pos) &&
                  (!rules.windowed || j >= pos - p.window_left);
          }
          const float pr = vis ? fast_exp2(u - tL[ql]) : 0.0f;
          sc[x] = pr;
          dp[x] = pr * (dp[x] - tD[ql]) * fac;
        }

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

    /* dS^T transposed into dS [query][key]: the matrices of sa[kj] are (n-block 2 kj, keys
     * kw..kw+7), (2 kj, kw+8..), (2 kj + 1, kw..), (2 kj + 1, kw+8..) */
    {
      const int mtx = lane >> 3, rr = lane & 7, chunk = kw / 8 + (mtx & 1);
#pragma unroll
      for (int kj = 0; kj < kBQ / 16; kj++)
        stmatrix_x4_trans(ds_addr + swz(kBQ, (2 * kj + (mtx >> 1)) * 8 + rr, chunk), sa[kj]);
    }
    fence_async_shared();
    __syncthreads(); /* dS of both warpgroups */

    /* dQ (64 queries x 64 columns from column block cb) = dS K over the block's 128 keys */
    float aq[32];
    wgmma_fence();
#pragma unroll
    for (int x = 0; x < DQ_KS; x++) {
      const int kk = kq0 + x;
      wgmma_sst_n64<T>(aq, smem_desc(ds_addr + (kk >> 2) * kBQ * 128 + (kk & 3) * 32, 16, 1024),
                       smem_desc(k_addr + cb * kBN * 128 + kk * 2048, kBN * 128, 1024), x > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(dk);
    fence_regs(dv);
    fence_regs(aq);

    /* the tile's dq accumulator, in turn; at head_dim 64 warpgroup 0's partial first */
    bwd_dq_in_turn(p, s, b, h, n, m, kBN, kBQ, &pending, [&] {
      float *accb = p.dq_acc + b * p.acc_st[0] + h * p.acc_st[1];
#pragma unroll
      for (int part = 0; part < (D == 128 ? 1 : 2); part++) {
        if (D == 128 || wg == part) {
#pragma unroll
          for (int hh = 0; hh < 2; hh++) {
            const int64_t i = i0 + warp * 16 + qg + 8 * hh;
            if (i >= s.ql) continue;
            float *row = accb + (s.qf + i) * p.acc_st[2] + cb * 64 + 2 * qt;
#pragma unroll
            for (int nb = 0; nb < 8; nb++)
              atomic_add2(row + nb * 8, aq[4 * nb + 2 * hh], aq[4 * nb + 2 * hh + 1]);
          }
        }
        if (D == 64 && part == 0) __syncthreads();
      }
    });
  }
  bwd_turn_flush(&pending);
  cp_async_wait<0>();

  bwd_store_dkdv<T, D>(p, s, b, g, j0, j1, kw, lane, dk, dv);
#else
  (void)p;
#endif
}

template <typename T, int D> kite_status launch_bwd90(const BwdParams &p, cudaStream_t s) {
  const size_t smem = BwdSmem90<D>::total;
  auto kernel = attn_bwd_sm90_kernel<T, D>;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) !=
      cudaSuccess) {
    const cudaError_t e = cudaGetLastError();
    return kite_set_error(KITE_ERR_DEVICE, "cuda.sm90: %zu bytes of shared memory: %s", smem,
                          cudaGetErrorString(e));
  }
  const dim3 grid((unsigned)((p.sk + kBN - 1) / kBN), (unsigned)p.hkv, (unsigned)p.batch);
  kernel<<<grid, kThreads, smem, s>>>(p);
  return KITE_OK;
}

template <typename T> kite_status launch_bwd90_d(const BwdParams &p, cudaStream_t s) {
  return p.head_dim == 64 ? launch_bwd90<T, 64>(p, s) : launch_bwd90<T, 128>(p, s);
}

} // namespace

bool kite_cuda::attn_bwd_sm90_head_dim(int64_t d) {
  return d == 64 || d == 128;
}

int kite_cuda::attn_bwd_sm90_tile_rows() {
  return kBQ;
}

kite_status kite_cuda::attn_bwd_sm90_launch(const BwdParams &p, cudaStream_t s) {
  if (p.sk <= 0) return KITE_OK;
  if (p.dtype == KITE_DTYPE_BF16) return launch_bwd90_d<__nv_bfloat16>(p, s);
  return launch_bwd90_d<__half>(p, s);
}
