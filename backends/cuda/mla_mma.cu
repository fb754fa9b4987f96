/*
 * Absorbed MLA decode on tensor cores (mma.sync m16n8k16, f32 accumulators) for bf16/f16 with
 * DeepSeek's sizes: kv_lora_rank R = 512, rope dim P = 64 (keys W = 576 wide, values the first
 * 512 of them).
 *
 * The query heads of a sequence play the part of a flash-attention query tile: a CTA of 8 warps
 * takes one sequence, BM = 64 of its heads and a share of its keys (gridDim.z splits, merged by
 * attention.cu's split merge). Every latent row is read into shared memory once for the 64 heads
 * (the cache is read H / 64 times in all, not H times). Key tiles of BN = 32 rows (c_kv | k_pe,
 * gathered slot by slot through the block table with cp.async, two stages) feed:
 *   S = Q K^T   [64 x 32]: warp (rg, dg) = (warp / 4, warp % 4) multiplies its 32 rows by the
 *               keys over the k-range dg of 4 (144 of the 576 columns) and leaves the partial in
 *               shared memory; each warp then sums the 4 partials of its rows;
 *   softmax     online, base 2, the row max and sum per lane, reduced over the quad (every warp
 *               of a row group computes the same values from the same sums);
 *   O += P V    warp (rg, dg) owns O[32 rows x 128 dims], dims dg * 128 ..: P rounded to T as
 *               the A operand, V = the tile's first 512 columns by ldmatrix.trans.
 * A key past the split's range or of an out-of-range block id is absent (its row zero-filled,
 * its score -inf); a head that sees no key gets zeros and lse -inf.
 */
#include "attention.cuh"

using namespace kite_cuda;

namespace {

constexpr int R = 512, P = 64, W = R + P; /* latent, rope and key widths */
constexpr int BM = 64, BN = 32, kWarps = 8, kThreads = kWarps * 32, STAGES = 2;
constexpr int LD = W + 8;           /* smem row pitch of Q and K tiles (+16 bytes: conflict-free) */
constexpr int SLD = BN + 4;         /* f32 pitch of the partial scores */
constexpr int KSPLIT = 4;           /* k-range slices of Q K^T, one per warp of a row group */
constexpr int KS = W / 16 / KSPLIT; /* k16 steps per slice: 9 */
constexpr int DW = R / KSPLIT;      /* output dims per warp: 128 */
constexpr int CH = W / 8;           /* 16-byte chunks per row: 72 */

constexpr size_t kQBytes = (size_t)BM * LD * 2;
constexpr size_t kKBytes = (size_t)STAGES * BN * LD * 2;
constexpr size_t kSBytes = (size_t)KSPLIT * BM * SLD * 4;
constexpr size_t kOffBytes = (size_t)STAGES * BN * 8;
constexpr size_t kSmem = kQBytes + kKBytes + kSBytes + kOffBytes;

struct MlaParams {
  kite_mla_decode_args a;
  float qk;                 /* scale * log2(e) */
  float *part_o, *part_lse; /* splits > 1: [splits, batch, heads, (R)] */
};

template <typename T> __global__ void __launch_bounds__(kThreads, 1) mla_mma_kernel(MlaParams mp) {
  const kite_mla_decode_args &a = mp.a;
  extern __shared__ __align__(16) unsigned char smem[];
  T *sQ = (T *)smem;
  T *sK = (T *)(smem + kQBytes);
  float *sS = (float *)(smem + kQBytes + kKBytes);
  int64_t *sOff = (int64_t *)(smem + kQBytes + kKBytes + kSBytes);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int rg = warp >> 2, dg = warp & 3;
  const int qg = lane >> 2, qt = lane & 3;
  const int64_t b = blockIdx.x, h0 = (int64_t)blockIdx.y * BM;
  const int split = blockIdx.z, splits = gridDim.z;

  /* this split's keys [klo, khi) of the sequence's n, whole tiles */
  const int64_t capacity = a.max_blocks * a.block_size;
  int64_t n = a.seq_lens[b];
  n = n < 0 ? 0 : n > capacity ? capacity : n;
  const int64_t per = ((n + splits - 1) / splits + BN - 1) / BN * BN;
  const int64_t klo = (int64_t)split * per < n ? (int64_t)split * per : n;
  const int64_t khi = klo + per < n ? klo + per : n;
  const int ntiles = (int)((khi - klo + BN - 1) / BN);

  /* Q tile: row r = head h0 + r, [q_nope | q_pe]; rows past the heads are zeros */
  const T *qn = (const T *)a.q_nope, *qp = (const T *)a.q_pe;
  for (int idx = tid; idx < BM * CH; idx += kThreads) {
    const int r = idx / CH, c = idx % CH;
    const int64_t h = h0 + r;
    const bool ok = h < a.heads;
    const T *src = !ok         ? qn
                   : c < R / 8 ? qn + b * a.q_nope_stride_b + h * a.q_nope_stride_h + c * 8
                               : qp + b * a.q_pe_stride_b + h * a.q_pe_stride_h + (c - R / 8) * 8;
    cp_async16(smem_addr(sQ + r * LD + c * 8), src, ok);
  }

  const T *ckv = (const T *)a.ckv_cache, *kpe = (const T *)a.kpe_cache;
  const int32_t *row = a.block_table + b * a.block_table_stride;
  /* threads 0..BN-1 resolve the slots of tile t's keys into sOff[t % STAGES] (-1: absent) */
  auto resolve = [&](int t) {
    if (tid < BN) {
      const int64_t j = klo + (int64_t)t * BN + tid;
      int64_t slot = -1;
      if (j < khi) {
        const int64_t blk = row[j / a.block_size];
        if (blk >= 0 && blk < a.num_blocks) slot = blk * a.block_size + j % a.block_size;
      }
      sOff[(t % STAGES) * BN + tid] = slot;
    }
  };
  auto issue = [&](int t) {
    if (t < ntiles) {
      const int st = t % STAGES;
      T *dst = sK + (size_t)st * BN * LD;
      for (int idx = tid; idx < BN * CH; idx += kThreads) {
        const int r = idx / CH, c = idx % CH;
        const int64_t slot = sOff[st * BN + r];
        const bool ok = slot >= 0;
        const T *src = !ok         ? ckv
                       : c < R / 8 ? ckv + slot * R + c * 8
                                   : kpe + slot * P + (c - R / 8) * 8;
        cp_async16(smem_addr(dst + r * LD + c * 8), src, ok);
      }
    }
    cp_async_commit();
  };

  resolve(0);
  __syncthreads();
  issue(0); /* the Q copies ride in the first group */

  float acc[2][DW / 8][4], m_run[2][2], l_run[2][2];
#pragma unroll
  for (int mb = 0; mb < 2; mb++) {
#pragma unroll
    for (int hh = 0; hh < 2; hh++) m_run[mb][hh] = -INFINITY, l_run[mb][hh] = 0.0f;
#pragma unroll
    for (int dn = 0; dn < DW / 8; dn++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[mb][dn][e] = 0.0f;
  }

  for (int it = 0; it < ntiles; it++) {
    if (it + 1 < ntiles) resolve(it + 1);
    __syncthreads(); /* sOff of tile it + 1 written; stage (it + 1) % 2 no longer read */
    issue(it + 1);
    cp_async_wait<1>(); /* tile it (and Q) landed */
    __syncthreads();
    const int st = it % STAGES;
    const T *tK = sK + (size_t)st * BN * LD;

    /* partial S over k-range dg: rows rg * 32 .. + 32, all BN keys */
    float sc[2][BN / 8][4];
#pragma unroll
    for (int mb = 0; mb < 2; mb++)
#pragma unroll
      for (int nb = 0; nb < BN / 8; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++) sc[mb][nb][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KS; kk++) {
      const int kc = (dg * KS + kk) * 16;
      uint32_t af[2][4];
#pragma unroll
      for (int mb = 0; mb < 2; mb++)
        ldmatrix_x4(af[mb],
                    smem_addr(sQ + (rg * 32 + mb * 16 + (lane & 15)) * LD + kc + 8 * (lane >> 4)));
#pragma unroll
      for (int nb2 = 0; nb2 < BN / 16; nb2++) {
        uint32_t bf[4];
        ldmatrix_x4(bf, smem_addr(tK + (nb2 * 16 + (lane & 7) + 8 * (lane >> 4)) * LD + kc +
                                  8 * ((lane >> 3) & 1)));
#pragma unroll
        for (int mb = 0; mb < 2; mb++) {
          mma16816<T>(sc[mb][2 * nb2], af[mb], bf[0], bf[1]);
          mma16816<T>(sc[mb][2 * nb2 + 1], af[mb], bf[2], bf[3]);
        }
      }
    }
#pragma unroll
    for (int mb = 0; mb < 2; mb++)
#pragma unroll
      for (int hh = 0; hh < 2; hh++)
#pragma unroll
        for (int nb = 0; nb < BN / 8; nb++) {
          const int r = rg * 32 + mb * 16 + hh * 8 + qg, c = nb * 8 + 2 * qt;
          *(float2 *)(sS + ((size_t)dg * BM + r) * SLD + c) =
              make_float2(sc[mb][nb][2 * hh], sc[mb][nb][2 * hh + 1]);
        }
    __syncthreads();

    /* full scores of this warp's rows (the same sum in every warp of the row group), base 2;
     * absent keys -inf; then the online softmax, P over S */
#pragma unroll
    for (int mb = 0; mb < 2; mb++)
#pragma unroll
      for (int hh = 0; hh < 2; hh++) {
        const int r = rg * 32 + mb * 16 + hh * 8 + qg;
        float mx = m_run[mb][hh];
#pragma unroll
        for (int nb = 0; nb < BN / 8; nb++)
#pragma unroll
          for (int e = 0; e < 2; e++) {
            const int c = nb * 8 + 2 * qt + e;
            float s = 0.0f;
#pragma unroll
            for (int k = 0; k < KSPLIT; k++) s += sS[((size_t)k * BM + r) * SLD + c];
            s = sOff[st * BN + c] >= 0 ? s * mp.qk : -INFINITY;
            sc[mb][nb][2 * hh + e] = s;
            mx = fmaxf(mx, s);
          }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float base = mx == -INFINITY ? 0.0f : mx; /* every key so far absent */
        const float corr = fast_exp2(m_run[mb][hh] - base);
        m_run[mb][hh] = mx;
        float sum = 0.0f;
#pragma unroll
        for (int nb = 0; nb < BN / 8; nb++)
#pragma unroll
          for (int e = 0; e < 2; e++) {
            const float pv = fast_exp2(sc[mb][nb][2 * hh + e] - base);
            sc[mb][nb][2 * hh + e] = pv;
            sum += pv;
          }
        l_run[mb][hh] = l_run[mb][hh] * corr + sum;
#pragma unroll
        for (int dn = 0; dn < DW / 8; dn++)
          acc[mb][dn][2 * hh] *= corr, acc[mb][dn][2 * hh + 1] *= corr;
      }

      /* O += P V over this warp's 128 dims */
#pragma unroll
    for (int kj = 0; kj < BN / 16; kj++) {
      uint32_t af[2][4];
#pragma unroll
      for (int mb = 0; mb < 2; mb++) {
        af[mb][0] = pack2<T>(sc[mb][2 * kj][0], sc[mb][2 * kj][1]);
        af[mb][1] = pack2<T>(sc[mb][2 * kj][2], sc[mb][2 * kj][3]);
        af[mb][2] = pack2<T>(sc[mb][2 * kj + 1][0], sc[mb][2 * kj + 1][1]);
        af[mb][3] = pack2<T>(sc[mb][2 * kj + 1][2], sc[mb][2 * kj + 1][3]);
      }
#pragma unroll
      for (int dn2 = 0; dn2 < DW / 16; dn2++) {
        uint32_t bf[4];
        ldmatrix_x4_trans(bf, smem_addr(tK + (kj * 16 + (lane & 7) + 8 * ((lane >> 3) & 1)) * LD +
                                        dg * DW + dn2 * 16 + 8 * (lane >> 4)));
#pragma unroll
        for (int mb = 0; mb < 2; mb++) {
          mma16816<T>(acc[mb][2 * dn2], af[mb], bf[0], bf[1]);
          mma16816<T>(acc[mb][2 * dn2 + 1], af[mb], bf[2], bf[3]);
        }
      }
    }
    __syncthreads(); /* sS and this stage are read no more */
  }
  cp_async_wait<0>();

  /* epilogue: o = acc / l (or the split's normalized partial and its base-2 lse) */
  T *o = (T *)a.o;
  const int64_t bh = (int64_t)split * a.batch * a.heads + b * a.heads;
#pragma unroll
  for (int mb = 0; mb < 2; mb++)
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
      float l = l_run[mb][hh];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const int64_t h = h0 + rg * 32 + mb * 16 + hh * 8 + qg;
      if (h >= a.heads) continue;
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      const float lse2 = l > 0.0f ? m_run[mb][hh] + log2f(l) : -INFINITY;
      if (splits > 1) {
        float *dst = mp.part_o + (bh + h) * R + dg * DW + 2 * qt;
#pragma unroll
        for (int dn = 0; dn < DW / 8; dn++)
          *(float2 *)(dst + dn * 8) =
              make_float2(acc[mb][dn][2 * hh] * inv, acc[mb][dn][2 * hh + 1] * inv);
        if (dg == 0 && qt == 0) mp.part_lse[bh + h] = lse2;
      } else {
        T *dst = o + b * a.o_stride_b + h * a.o_stride_h + dg * DW + 2 * qt;
#pragma unroll
        for (int dn = 0; dn < DW / 8; dn++) {
          dst[dn * 8] = from_float<T>(acc[mb][dn][2 * hh] * inv);
          dst[dn * 8 + 1] = from_float<T>(acc[mb][dn][2 * hh + 1] * inv);
        }
        if (a.lse && dg == 0 && qt == 0) a.lse[b * a.heads + h] = lse2 * kLn2;
      }
    }
}

} // namespace

extern "C" CUDA_SUPPORTS(cuda_mla_decode_mma_supports) {
  const kite_mla_decode_args *a = (const kite_mla_decode_args *)args;
  if (a->dtype != KITE_DTYPE_BF16 && a->dtype != KITE_DTYPE_F16) {
    *why = "dtype must be bf16 or f16";
    return false;
  }
  if (a->kv_rank != R || a->rope_dim != P) {
    *why = "kv_lora_rank 512 and rope dim 64 only (DeepSeek-V2/V3)";
    return false;
  }
  const int64_t st[6] = {a->q_nope_stride_b, a->q_nope_stride_h, a->q_pe_stride_b,
                         a->q_pe_stride_h,   a->o_stride_b,      a->o_stride_h};
  if (!aligned16(a->q_nope) || !aligned16(a->q_pe) || !aligned16(a->o) ||
      !aligned16(a->ckv_cache) || !aligned16(a->kpe_cache) || !strides_aligned(st, 6, 2)) {
    *why = "needs 16-byte aligned queries, output and caches, and query / output strides";
    return false;
  }
  int dev = 0, optin = 0; /* the shared memory a block may opt in to (227 KB on Hopper) */
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
    (void)cudaGetLastError();
  if ((size_t)optin < kSmem) {
    *why = "needs 183 KB of shared memory per block (Hopper)";
    return false;
  }
  return ok_unless(a->batch > 0x7fffffff || (a->heads + BM - 1) / BM > 65535 ||
                       a->max_blocks * a->block_size > 0x7fff0000,
                   "too many sequences, heads or keys", why);
}

extern "C" CUDA_RUN(cuda_mla_decode_mma_run) {
  const kite_mla_decode_args *a = (const kite_mla_decode_args *)args;
  const char *op = "mla_decode";
  cudaStream_t cs;
  kite_status st = begin(ctx, op, &cs);
  if (st != KITE_OK) return st;
  /* the split-KV merge of attention.cu reads decode rows: row b, o at b * o_stride[2] */
  AttnParams p = {};
  p.kind = ATTN_DECODE, p.dtype = a->dtype, p.batch = p.rows = a->batch, p.hq = a->heads;
  p.head_dim = R, p.max_keys = a->max_blocks * a->block_size, p.o = a->o, p.lse = a->lse;
  p.o_stride[1] = a->o_stride_h, p.o_stride[2] = a->o_stride_b;
  p.lse_stride[1] = 1, p.lse_stride[2] = a->heads;
  const int64_t groups = (a->heads + BM - 1) / BM;
  int64_t splits = 1; /* one CTA per SM fits: split the keys until the GPU is full */
  if ((st = attn_split_keys(ctx, p, a->batch * groups, 1, &splits)) != KITE_OK) return st;
  MlaParams mp = {*a, a->scale * kLog2e, p.part_o, p.part_lse};
  st = with_float_type(a->dtype, op, [&](auto tag) -> kite_status {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same<T, float>::value) {
      return kite_set_error(KITE_ERR_INTERNAL, "%s: cuda.mma: f32 has no tensor-core kernel", op);
    } else {
      /* above the 48 KB default (per device, so at every launch, as attention_mma.cu does) */
      const cudaError_t e = cudaFuncSetAttribute(
          mla_mma_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kSmem);
      if (e != cudaSuccess) return cuda_device_error(op, "cudaFuncSetAttribute", e);
      const dim3 grid((unsigned)a->batch, (unsigned)groups, (unsigned)splits);
      mla_mma_kernel<T><<<grid, kThreads, kSmem, cs>>>(mp);
      if (splits > 1) attn_merge_splits(p, (int)splits, cs);
      return KITE_OK;
    }
  });
  return st != KITE_OK ? st : cuda_check_launch(op, "mma");
}
