/*
 * Attention on tensor cores for bf16/f16: paged_decode, paged_prefill and dense sdpa as one
 * flash-attention tile kernel (mma.sync m16n8k16, f32 accumulators).
 *
 * A CTA of 4 warps takes one kv head g of one sequence and a tile of "packed" query rows: row m
 * of the sequence is query token m / group and q head m % group of the group reading g, so the
 * keys and values of g are read once for all the heads sharing them (GQA). K/V tiles of 64 keys
 * are gathered row by row (slot by slot through the block table, or dense strides) into shared
 * memory with cp.async, STAGES deep. Two ways to share a tile among the warps:
 *   rows mode (prefill, sdpa): each warp owns 16 * MB query rows and all 64 keys of the tile;
 *   keys mode (decode, short queries): the CTA has 16 rows; each warp takes 16 of the 64 keys,
 *     and the 4 partial softmax states merge by the LSE rule at the end. When even that gives
 *     too few CTAs, the keys are also split over gridDim.z CTAs and merged by a second kernel.
 *   - Sinks (kite.h) join each row's (max, sum) in the last epilogue (join_sink), or in the
 *     merge of a split row.
 * Per warp: S = Q K^T (Q and K from shared memory by ldmatrix), scale / softcap / mask, online
 * softmax in base 2 (row max and sum held per lane, rows reduced over the 4 lanes of a quad),
 * P rounded to T and fed as the A operand of O += P V (V by ldmatrix.trans).
 *
 * Query i of sequence b sits at position n_b - q_len_b + i (n_b its keys); it sees keys in
 * [pos - window_left, pos] (causal and window) of [0, n_b). Keys whose block id is out of range
 * are absent. A row that sees no key gets o = 0 and lse = -inf.
 */
#include "attention.cuh"

using namespace kite_cuda;

namespace {

constexpr int kWarps = 4, kThreads = 128, kBN = 64;

/* Reduces the 2 * NB scores of row half h of an m-block's fragments (c[nb][2h], c[nb][2h+1])
 * in 4 interleaved chains: shorter dependency chains for the few warps of an SM, few registers. */
template <int NB, typename Op>
__device__ __forceinline__ float row_reduce(const float (&c)[NB][4], int h, Op op) {
  static_assert(NB % 2 == 0, "n-blocks come in pairs");
  float a0 = c[0][2 * h], a1 = c[0][2 * h + 1], a2 = c[1][2 * h], a3 = c[1][2 * h + 1];
#pragma unroll
  for (int nb = 2; nb < NB; nb += 2) {
    a0 = op(a0, c[nb][2 * h]), a1 = op(a1, c[nb][2 * h + 1]);
    a2 = op(a2, c[nb + 1][2 * h]), a3 = op(a3, c[nb + 1][2 * h + 1]);
  }
  return op(op(a0, a1), op(a2, a3));
}

/* ---- shapes -------------------------------------------------------------------------------- */
/* Rows of a CTA's query tile; the row pitch of the K/V/Q tiles (+16 bytes: the 8 rows of one
 * ldmatrix phase land in 8 different bank groups); the f32 output staging pitch. */
template <int MB, bool KEYS> constexpr int tile_rows() {
  return KEYS ? 16 : 16 * MB * kWarps;
}
template <int D> constexpr int tile_pitch() {
  return D + 8;
}

template <int D, int MB, bool KEYS, int STAGES> struct Smem {
  static constexpr int BM = tile_rows<MB, KEYS>(), LD = tile_pitch<D>();
  static constexpr int SLICES = KEYS ? kWarps : 1; /* partial softmax states per row */
  static constexpr size_t q_bytes = (size_t)BM * LD * 2;
  static constexpr size_t kv_bytes = (size_t)STAGES * 2 * kBN * LD * 2;
  static constexpr size_t o_bytes = (size_t)SLICES * BM * (D + 8) * 4; /* aliases K/V */
  static constexpr size_t off_bytes = 2 * 2 * kBN * 8;                 /* [buf][k/v][key] */
  static constexpr size_t ok_bytes = (size_t)STAGES * kBN;
  static constexpr size_t ml_bytes = 2 * (size_t)SLICES * BM * 4;
  static constexpr size_t kv_or_o = kv_bytes > o_bytes ? kv_bytes : o_bytes;
  static constexpr size_t total = q_bytes + kv_or_o + off_bytes + ok_bytes + ml_bytes;
};

/* Grid: x = query tile (see find_tile), y = kv head, z = split of the keys. See the file
 * comment. */
template <typename T, int D, int MB, bool KEYS, int STAGES, bool PAGED>
__global__ void __launch_bounds__(kThreads, 2) attend_mma_kernel(AttnParams p) {
  using SM = Smem<D, MB, KEYS, STAGES>;
  constexpr int BM = SM::BM, LD = SM::LD, CH = D / 8, OP = D + 8;
  constexpr int NK = KEYS ? 16 : kBN, NB = NK / 8; /* keys per warp per tile, their n-blocks */
  constexpr int KS = D / 16, DN = D / 8;           /* k-steps of Q K^T, n-blocks of P V */
  constexpr int LPT = kBN * CH / kThreads;         /* 16-byte copies per thread per K or V tile */
  static_assert(!KEYS || MB == 1, "keys mode has one m-block");
  static_assert(D % 16 == 0 && (kBN * CH) % kThreads == 0, "head_dim must be a multiple of 16");

  extern __shared__ __align__(16) unsigned char smem[];
  T *sQ = (T *)smem;
  T *sKV = (T *)(smem + SM::q_bytes); /* stage s: K at s * 2, V at s * 2 + 1 */
  float *sO = (float *)(smem + SM::q_bytes);
  int64_t *sOff = (int64_t *)(smem + SM::q_bytes + SM::kv_or_o);
  uint8_t *sOk = (uint8_t *)(smem + SM::q_bytes + SM::kv_or_o + SM::off_bytes);
  float *sM = (float *)(smem + SM::q_bytes + SM::kv_or_o + SM::off_bytes + SM::ok_bytes);
  float *sL = sM + SM::SLICES * BM;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int qg = lane >> 2, qt = lane & 3; /* mma fragment row and column pair */
  const int g = blockIdx.y, group = (int)p.group;
  const bool packed_seqs = p.kind == ATTN_PREFILL || p.kind == ATTN_VARLEN;
  const int64_t x = packed_seqs ? (int64_t)gridDim.x - 1 - blockIdx.x : blockIdx.x;

  KITE_CTA_TILE(BM, p, x);
  int klo = lo_first, khi = hi_last > lo_first ? hi_last : lo_first;
  if (gridDim.z > 1) { /* this split's share, whole tiles */
    const int per = ((khi - klo + (int)gridDim.z - 1) / (int)gridDim.z + kBN - 1) / kBN * kBN;
    const int a = klo + (int)blockIdx.z * per;
    klo = a < khi ? a : khi;
    khi = klo + per < khi ? klo + per : khi;
  }
  const int ntiles = (khi - klo + kBN - 1) / kBN;

  /* The rows this lane holds in the fragments: m-block mb, half h -> tile row
   * wrow0 + mb * 16 + h * 8 + qg. */
  const int wrow0 = KEYS ? 0 : warp * 16 * MB;

  /* Q tile: packed row -> (token, head); padding rows are zeros. */
  const T *qbase = (const T *)p.q;
  const int64_t qb = (int64_t)s.b * p.q_stride[0];
  for (int idx = tid; idx < BM * CH; idx += kThreads) {
    const int row = idx / CH, c = idx % CH, m = m0 + row;
    const bool ok = row < rows_here;
    const int qi = m % group, t = m / group;
    const int64_t head = p.gqa_interleaved ? g + (int64_t)qi * p.hkv : (int64_t)g * group + qi;
    const T *src =
        ok ? qbase + qb + head * p.q_stride[1] + (int64_t)(s.first + t) * p.q_stride[2] + c * 8
           : qbase;
    cp_async16(smem_addr(sQ + row * LD + c * 8), src, ok);
  }

  const T *kc = (const T *)p.k, *vc = (const T *)p.v;
  /* Threads 0..63 resolve one key each into sOff[buf]; everyone then copies from there. */
  auto resolve = [&](int tile, int buf) {
    if (tid < kBN) {
      int64_t ko, vo;
      key_offsets<PAGED>(p, s, g, klo + tile * kBN + tid, khi, &ko, &vo);
      sOff[(buf * 2 + 0) * kBN + tid] = ko;
      sOff[(buf * 2 + 1) * kBN + tid] = vo;
    }
  };
  auto issue = [&](int tile) {
    if (tile < ntiles) {
      const int st = tile % STAGES, buf = tile & 1;
      T *dk = sKV + (size_t)(st * 2) * kBN * LD, *dv = dk + kBN * LD;
#pragma unroll
      for (int i = 0; i < LPT; i++) {
        const int idx = tid + i * kThreads, r = idx / CH, c = idx % CH;
        const int64_t ko = sOff[(buf * 2 + 0) * kBN + r], vo = sOff[(buf * 2 + 1) * kBN + r];
        const bool ok = ko >= 0;
        cp_async16(smem_addr(dk + r * LD + c * 8), ok ? kc + ko + c * 8 : kc, ok);
        cp_async16(smem_addr(dv + r * LD + c * 8), ok ? vc + vo + c * 8 : vc, ok);
        if (c == 0) sOk[st * kBN + r] = ok;
      }
    }
    cp_async_commit(); /* empty groups too: the wait count below stays STAGES - 2 */
  };

#pragma unroll
  for (int t = 0; t < STAGES - 1; t++) {
    resolve(t, t & 1);
    __syncthreads();
    issue(t);
    __syncthreads(); /* the next resolve reuses a buffer that issue just read */
  }
  resolve(STAGES - 1, (STAGES - 1) & 1);

  float acc[MB][DN][4], m_run[MB][2], l_run[MB][2];
#pragma unroll
  for (int mb = 0; mb < MB; mb++) {
#pragma unroll
    for (int h = 0; h < 2; h++) m_run[mb][h] = -INFINITY, l_run[mb][h] = 0.0f;
#pragma unroll
    for (int dn = 0; dn < DN; dn++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[mb][dn][e] = 0.0f;
  }
  const bool capped = p.softcap > 0.0f;
  const float qk_scale = capped ? p.scale / p.softcap : p.scale * kLog2e;
  const float cap2 = p.softcap * kLog2e;
  /* Without softcap the scale rides in the exponent's FMA: max(c s) = c max(s) for c > 0. */
  const bool fold = !capped && qk_scale > 0.0f;
  const float pscale = fold ? qk_scale : 1.0f;

  for (int it = 0; it < ntiles; it++) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    issue(it + STAGES - 1);
    const int st = it % STAGES, j0 = klo + it * kBN;
    const T *tK = sKV + (size_t)(st * 2) * kBN * LD, *tV = tK + kBN * LD;
    bool full = j0 + kBN <= khi && j0 >= lo_last && j0 + kBN <= hi_first;
    if (PAGED && full)
      full = __all_sync(0xffffffffu, *(const uint16_t *)(sOk + st * kBN + 2 * lane) == 0x0101) != 0;
    const int kw = KEYS ? warp * 16 : 0; /* this warp's first key in the tile */

    /* S = Q K^T over this warp's NK keys */
    float sc[MB][NB][4];
#pragma unroll
    for (int mb = 0; mb < MB; mb++)
#pragma unroll
      for (int nb = 0; nb < NB; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++) sc[mb][nb][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KS; kk++) {
      uint32_t a[MB][4];
#pragma unroll
      for (int mb = 0; mb < MB; mb++)
        ldmatrix_x4(a[mb], smem_addr(sQ + (wrow0 + mb * 16 + (lane & 15)) * LD + kk * 16 +
                                     8 * (lane >> 4)));
#pragma unroll
      for (int nb2 = 0; nb2 < NB / 2; nb2++) {
        uint32_t b[4];
        ldmatrix_x4(b, smem_addr(tK + (kw + nb2 * 16 + (lane & 7) + 8 * (lane >> 4)) * LD +
                                 kk * 16 + 8 * ((lane >> 3) & 1)));
#pragma unroll
        for (int mb = 0; mb < MB; mb++) {
          mma16816<T>(sc[mb][2 * nb2], a[mb], b[0], b[1]);
          mma16816<T>(sc[mb][2 * nb2 + 1], a[mb], b[2], b[3]);
        }
      }
    }

    /* scores in base 2 (times pscale); masks only on tiles that cross a row's range or hold
     * absent keys */
    if (capped) {
#pragma unroll
      for (int mb = 0; mb < MB; mb++)
#pragma unroll
        for (int nb = 0; nb < NB; nb++)
#pragma unroll
          for (int e = 0; e < 4; e++) sc[mb][nb][e] = cap2 * tanhf(sc[mb][nb][e] * qk_scale);
    } else if (!fold) {
#pragma unroll
      for (int mb = 0; mb < MB; mb++)
#pragma unroll
        for (int nb = 0; nb < NB; nb++)
#pragma unroll
          for (int e = 0; e < 4; e++) sc[mb][nb][e] *= qk_scale;
    }
    if (!full) {
#pragma unroll
      for (int mb = 0; mb < MB; mb++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
          const int row = wrow0 + mb * 16 + h * 8 + qg;
          int lo = 0, hi = 0x7fffffff; /* padding rows are never stored */
          if (row < rows_here) key_range(p, s, (m0 + row) / group, &lo, &hi);
#pragma unroll
          for (int nb = 0; nb < NB; nb++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
              const int jl = kw + nb * 8 + 2 * qt + e, j = j0 + jl;
              if (j < lo || j >= hi || !sOk[st * kBN + jl]) sc[mb][nb][2 * h + e] = -INFINITY;
            }
        }
    }

    /* online softmax per row; P overwrites S */
#pragma unroll
    for (int mb = 0; mb < MB; mb++) {
#pragma unroll
      for (int h = 0; h < 2; h++) {
        float mx = fmaxf(m_run[mb][h], row_reduce<NB>(sc[mb], h, Max()) * pscale);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float base = mx == -INFINITY ? 0.0f : mx; /* every key so far masked */
        const float corr = fast_exp2(m_run[mb][h] - base);
        m_run[mb][h] = mx;
#pragma unroll
        for (int nb = 0; nb < NB; nb++)
#pragma unroll
          for (int e = 0; e < 2; e++)
            sc[mb][nb][2 * h + e] = fast_exp2(fmaf(sc[mb][nb][2 * h + e], pscale, -base));
        l_run[mb][h] = l_run[mb][h] * corr + row_reduce<NB>(sc[mb], h, Sum());
#pragma unroll
        for (int dn = 0; dn < DN; dn++) acc[mb][dn][2 * h] *= corr, acc[mb][dn][2 * h + 1] *= corr;
      }
    }

    /* O += P V */
#pragma unroll
    for (int kj = 0; kj < NK / 16; kj++) {
      uint32_t a[MB][4];
#pragma unroll
      for (int mb = 0; mb < MB; mb++) {
        a[mb][0] = pack2<T>(sc[mb][2 * kj][0], sc[mb][2 * kj][1]);
        a[mb][1] = pack2<T>(sc[mb][2 * kj][2], sc[mb][2 * kj][3]);
        a[mb][2] = pack2<T>(sc[mb][2 * kj + 1][0], sc[mb][2 * kj + 1][1]);
        a[mb][3] = pack2<T>(sc[mb][2 * kj + 1][2], sc[mb][2 * kj + 1][3]);
      }
#pragma unroll
      for (int dn2 = 0; dn2 < DN / 2; dn2++) {
        uint32_t b[4];
        ldmatrix_x4_trans(b,
                          smem_addr(tV + (kw + kj * 16 + (lane & 7) + 8 * ((lane >> 3) & 1)) * LD +
                                    dn2 * 16 + 8 * (lane >> 4)));
#pragma unroll
        for (int mb = 0; mb < MB; mb++) {
          mma16816<T>(acc[mb][2 * dn2], a[mb], b[0], b[1]);
          mma16816<T>(acc[mb][2 * dn2 + 1], a[mb], b[2], b[3]);
        }
      }
    }

    /* after the math: the block table read stalls only warps 0 and 1, once per tile */
    if (it + STAGES < ntiles) resolve(it + STAGES, (it + STAGES) & 1);
  }
  cp_async_wait<0>();
  __syncthreads(); /* K/V tiles are dead: sO takes their place */

  /* Epilogue 1: each warp's (m, l) per row, sums reduced over the quad. */
  const int slice = KEYS ? warp : 0;
#pragma unroll
  for (int mb = 0; mb < MB; mb++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      float l = l_run[mb][h];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      if (qt == 0) {
        const int row = wrow0 + mb * 16 + h * 8 + qg;
        sM[slice * BM + row] = m_run[mb][h], sL[slice * BM + row] = l;
      }
    }
  __syncthreads();
  /* Epilogue 2: acc scaled to the row's max over the slices, staged as f32. */
#pragma unroll
  for (int mb = 0; mb < MB; mb++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int row = wrow0 + mb * 16 + h * 8 + qg;
      float M = -INFINITY;
#pragma unroll
      for (int k = 0; k < SM::SLICES; k++) M = fmaxf(M, sM[k * BM + row]);
      const float f = m_run[mb][h] == -INFINITY ? 0.0f : exp2f(m_run[mb][h] - M);
      float *dst = sO + (size_t)(slice * BM + row) * OP + 2 * qt;
#pragma unroll
      for (int dn = 0; dn < DN; dn++)
        *(float2 *)(dst + dn * 8) = make_float2(acc[mb][dn][2 * h] * f, acc[mb][dn][2 * h + 1] * f);
    }
  __syncthreads();
  /* Epilogue 3: sum the slices, normalize, store 8 elements per thread. */
  const bool split = gridDim.z > 1;
  for (int idx = tid; idx < rows_here * CH; idx += kThreads) {
    const int row = idx / CH, c = idx % CH, m = m0 + row;
    float M = -INFINITY, L = 0.0f;
#pragma unroll
    for (int k = 0; k < SM::SLICES; k++) M = fmaxf(M, sM[k * BM + row]);
#pragma unroll
    for (int k = 0; k < SM::SLICES; k++) {
      const float mk = sM[k * BM + row];
      if (mk != -INFINITY) L += sL[k * BM + row] * exp2f(mk - M);
    }
    const int qi = m % group, t = m / group;
    const int64_t head = p.gqa_interleaved ? g + (int64_t)qi * p.hkv : (int64_t)g * group + qi;
    const float f = split ? 1.0f : join_sink(p, head, &M, &L); /* split: the merge adds it */
    const bool none = M == -INFINITY || !(L > 0.0f);
    const float inv = none ? 0.0f : f / L;
    float o[8];
#pragma unroll
    for (int e = 0; e < 8; e++) o[e] = 0.0f;
#pragma unroll
    for (int k = 0; k < SM::SLICES; k++) {
      const float *src = sO + (size_t)(k * BM + row) * OP + c * 8;
#pragma unroll
      for (int e = 0; e < 8; e++) o[e] += src[e];
    }
#pragma unroll
    for (int e = 0; e < 8; e++) o[e] *= inv;
    const float lse2 = none ? -INFINITY : M + log2f(L);
    const int64_t i = s.first + t;
    if (!split) {
      store_floats<8>((T *)p.o + (int64_t)s.b * p.o_stride[0] + head * p.o_stride[1] +
                          i * p.o_stride[2] + c * 8,
                      o);
      if (p.lse && c == 0)
        p.lse[(int64_t)s.b * p.lse_stride[0] + head * p.lse_stride[1] + i * p.lse_stride[2]] =
            none ? -INFINITY : lse2 * kLn2;
    } else {
      const int64_t row_id = p.kind == ATTN_SDPA ? (int64_t)s.b * p.sq + t : i;
      const int64_t pidx = ((int64_t)blockIdx.z * p.rows + row_id) * p.hq + head;
      store_floats<8>(p.part_o + pidx * D + c * 8, o);
      if (c == 0) p.part_lse[pidx] = lse2;
    }
  }
}

/* ---- host side ----------------------------------------------------------------------------- */
template <typename T, int D, int MB, bool KEYS, int STAGES>
kite_status launch_mma(const AttnParams &p, dim3 grid, cudaStream_t s) {
  const size_t smem = Smem<D, MB, KEYS, STAGES>::total;
  auto run = [&](auto kernel) {
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) !=
        cudaSuccess)
      return false;
    kernel<<<grid, kThreads, smem, s>>>(p);
    return true;
  };
  const bool dense = p.kind == ATTN_SDPA || p.kind == ATTN_VARLEN;
  const bool ok = dense ? run(attend_mma_kernel<T, D, MB, KEYS, STAGES, false>)
                        : run(attend_mma_kernel<T, D, MB, KEYS, STAGES, true>);
  if (!ok) {
    const cudaError_t e = cudaGetLastError();
    return kite_set_error(KITE_ERR_DEVICE, "cuda.mma: %zu bytes of shared memory: %s", smem,
                          cudaGetErrorString(e));
  }
  return KITE_OK;
}

/* Keys mode: 16 rows per CTA, the 4 warps split each key tile; rows mode: 16 * MB rows per warp
 * (32 up to head_dim 128: every K/V fragment feeds two m-blocks). */
template <typename T, int D>
kite_status launch_mma_d(const AttnParams &p, bool keys, dim3 grid, cudaStream_t s) {
  if (keys) return launch_mma < T, D, 1, true, D <= 128 ? 3 : 2 > (p, grid, s);
  return launch_mma < T, D, D <= 128 ? 2 : 1, false, 2 > (p, grid, s);
}

bool mma_head_dim(int64_t d) {
  return d == 64 || d == 80 || d == 96 || d == 128 || d == 256;
}

kite_status run_mma(kite_ctx *ctx, AttnParams p, const char *op) {
  if (p.rows <= 0 || p.hq <= 0 || p.hkv <= 0) return KITE_OK;
  cudaStream_t cs;
  kite_status st = begin(ctx, op, &cs);
  if (st != KITE_OK) return st;
  /* keys mode when a sequence has few packed rows on average (decode, speculative steps) */
  const int64_t packed = p.rows * p.group;
  const bool keys = p.kind == ATTN_DECODE || packed <= 32 * p.batch;
  const int64_t bm = keys ? 16 : (p.head_dim <= 128 ? 128 : 64);
  int64_t tiles;
  if (p.kind == ATTN_PREFILL || p.kind == ATTN_VARLEN)
    tiles = (packed + bm - 1) / bm + p.batch; /* >= the sum of each sequence's tiles */
  else
    tiles = p.batch * (((p.kind == ATTN_SDPA ? p.sq : 1) * p.group + bm - 1) / bm);
  if (tiles > 0x7fffffff || p.hkv > 65535)
    return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: cuda.mma: too many query tiles or kv heads",
                          op);
  int64_t splits = 1; /* keys mode splits the keys to fill the GPU; rows mode has CTAs enough */
  if (keys && (st = attn_split_keys(ctx, p, tiles * p.hkv, 8, &splits)) != KITE_OK) return st;
  const dim3 grid((unsigned)tiles, (unsigned)p.hkv, (unsigned)splits);
  st = with_float_type(p.dtype, op, [&](auto tag) -> kite_status {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same<T, float>::value) {
      return kite_set_error(KITE_ERR_INTERNAL, "%s: cuda.mma: f32 has no tensor-core kernel", op);
    } else {
      kite_status r;
      switch (p.head_dim) {
      case 64:
        r = launch_mma_d<T, 64>(p, keys, grid, cs);
        break;
      case 80:
        r = launch_mma_d<T, 80>(p, keys, grid, cs);
        break;
      case 96:
        r = launch_mma_d<T, 96>(p, keys, grid, cs);
        break;
      case 128:
        r = launch_mma_d<T, 128>(p, keys, grid, cs);
        break;
      case 256:
        r = launch_mma_d<T, 256>(p, keys, grid, cs);
        break;
      default:
        return kite_set_error(KITE_ERR_INTERNAL, "%s: cuda.mma: no kernel for head_dim %lld", op,
                              (long long)p.head_dim);
      }
      if (r != KITE_OK) return r;
      if (splits > 1) attn_merge_splits(p, (int)splits, cs);
      return KITE_OK;
    }
  });
  return st != KITE_OK ? st : cuda_check_launch(op, "mma");
}

} // namespace

/* ---- entry points -------------------------------------------------------------------------- */
extern "C" CUDA_SUPPORTS(cuda_paged_mma_supports) {
  const kite_paged_attn_args *a = (const kite_paged_attn_args *)args;
  if (a->dtype != KITE_DTYPE_BF16 && a->dtype != KITE_DTYPE_F16) {
    *why = "dtype must be bf16 or f16";
    return false;
  }
  if (!mma_head_dim(a->head_dim)) {
    *why = "head_dim must be 64, 80, 96, 128 or 256";
    return false;
  }
  const int64_t st[4] = {a->q_stride_t, a->q_stride_h, a->o_stride_t, a->o_stride_h};
  if (!aligned16(a->q) || !aligned16(a->o) || !aligned16(a->key_cache) ||
      !aligned16(a->value_cache) || !strides_aligned(st, 4, 2)) {
    *why = "needs 16-byte aligned q, o and caches and q/o strides";
    return false;
  }
  return ok_unless(a->tokens * (a->hq / (a->hkv > 0 ? a->hkv : 1)) > 0x3fffffff ||
                       a->max_blocks * a->block_size > 0x7fff0000,
                   "too many query rows or keys", why);
}

extern "C" CUDA_RUN(cuda_paged_mma_run) {
  const kite_paged_attn_args *a = (const kite_paged_attn_args *)args;
  const char *op = cuda_op_str(a->op);
  return run_mma(ctx, attn_paged_params(a), op);
}

extern "C" CUDA_SUPPORTS(cuda_sdpa_mma_supports) {
  const kite_sdpa_args *a = (const kite_sdpa_args *)args;
  if (a->dtype != KITE_DTYPE_BF16 && a->dtype != KITE_DTYPE_F16) {
    *why = "dtype must be bf16 or f16";
    return false;
  }
  if (!mma_head_dim(a->head_dim)) {
    *why = "head_dim must be 64, 80, 96, 128 or 256";
    return false;
  }
  if (a->mask) {
    *why = "no mask";
    return false;
  }
  if (!aligned16(a->q) || !aligned16(a->k) || !aligned16(a->v) || !aligned16(a->o) ||
      !strides_aligned(a->q_stride, 3, 2) || !strides_aligned(a->k_stride, 3, 2) ||
      !strides_aligned(a->v_stride, 3, 2) || !strides_aligned(a->o_stride, 3, 2)) {
    *why = "needs 16-byte aligned tensors and strides";
    return false;
  }
  return ok_unless(a->sk > 0x7fffffff ||
                       a->batch * a->sq * (a->hq / (a->hkv > 0 ? a->hkv : 1)) > 0x3fffffff,
                   "sequences too long", why);
}

extern "C" CUDA_RUN(cuda_sdpa_mma_run) {
  return run_mma(ctx, attn_sdpa_params((const kite_sdpa_args *)args), "sdpa");
}

extern "C" CUDA_SUPPORTS(cuda_sdpa_varlen_mma_supports) {
  const kite_sdpa_varlen_args *a = (const kite_sdpa_varlen_args *)args;
  if (a->dtype != KITE_DTYPE_BF16 && a->dtype != KITE_DTYPE_F16) {
    *why = "dtype must be bf16 or f16";
    return false;
  }
  if (!mma_head_dim(a->head_dim)) {
    *why = "head_dim must be 64, 80, 96, 128 or 256";
    return false;
  }
  if (!aligned16(a->q) || !aligned16(a->k) || !aligned16(a->v) || !aligned16(a->o) ||
      !strides_aligned(a->q_stride, 2, 2) || !strides_aligned(a->k_stride, 2, 2) ||
      !strides_aligned(a->v_stride, 2, 2) || !strides_aligned(a->o_stride, 2, 2)) {
    *why = "needs 16-byte aligned tensors and strides";
    return false;
  }
  return ok_unless(a->tk > 0x7fffffff || a->max_seqlen_k > 0x7fff0000 ||
                       a->tq * (a->hq / (a->hkv > 0 ? a->hkv : 1)) > 0x3fffffff,
                   "sequences too long", why);
}

extern "C" CUDA_RUN(cuda_sdpa_varlen_mma_run) {
  return run_mma(ctx, attn_varlen_params((const kite_sdpa_varlen_args *)args), "sdpa_varlen");
}
