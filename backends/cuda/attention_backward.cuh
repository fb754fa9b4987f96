/*
 * Parameters of the attention backward kernels (attention_backward.cu: the row kernels and the
 * host side; attention_backward_mma.cu: the tensor-core kernel) for sdpa_backward and
 * sdpa_varlen_backward in one shape.
 *
 * Every per-query tensor (q, o, dout, dq, lse, delta, the dq accumulator) is addressed as
 * b * st[0] + head * st[1] + (first + i) * st[2]: dense calls have first = 0 and the batch stride,
 * varlen calls st[0] = 0 and first = the sequence's first row (cu_seqlens). Keys alike.
 */
#ifndef KITE_CUDA_ATTENTION_BACKWARD_CUH
#define KITE_CUDA_ATTENTION_BACKWARD_CUH

#include "attention.cuh"

namespace kite_cuda {

struct BwdParams {
  kite_dtype dtype;
  bool varlen;
  int64_t batch, hq, hkv, group, head_dim;
  int64_t sq, sk;     /* dense: the lengths; varlen: max_seqlen_q / max_seqlen_k */
  int64_t rows, keys; /* rows of q per head (dense: batch * sq; varlen: tq), keys alike */
  int64_t tq, tk;     /* varlen: the row counts that bound cu_seqlens */
  const int32_t *cu_q, *cu_k;
  const void *q, *k, *v, *o, *dout;
  void *dq, *dk, *dv;
  int64_t q_st[3], k_st[3], v_st[3], o_st[3], do_st[3], dq_st[3], dk_st[3], dv_st[3];
  const float *lse;
  float *delta, *dq_acc; /* the workspace: delta[rows * hq] and dq_acc[rows * hq * D] */
  int *dq_turn;          /* the workspace: [batch][hq][mtiles] adds done per query tile (zeroed) */
  int64_t mtiles;        /* query tiles per sequence: ceil(sq / the kernel's tile rows) */
  bool acc_swizzled;     /* dq_acc row i keeps column d at d ^ 8 (i % 4) (cuda.sm90ws) */
  int64_t lse_st[3], delta_st[3], acc_st[3];
  const void *mask;
  int mask_kind;
  int64_t mask_st[4];
  float scale, softcap;
  int64_t window_left;
  bool interleaved, causal;
  const float *sinks; /* NULL or [hq]; dq, dk, dv need nothing of them (kite.h) */
  float *dsinks;      /* NULL or [hq]: the sinks' gradient, from delta and lse */
};

/* Sequence b's rows: queries [qf, qf + ql), keys [kf, kf + kl). Varlen bounds are clamped to
 * the tensors and the max_seqlen values whatever cu_seqlens holds. */
struct BwdSeq {
  int64_t qf, ql, kf, kl;
};

__device__ __forceinline__ void bwd_span(const int32_t *cu, int64_t b, int64_t total, int64_t max,
                                         int64_t *first, int64_t *len) {
  int64_t f = cu[b], e = cu[b + 1];
  f = f < 0 ? 0 : f > total ? total : f;
  e = e < f ? f : e > total ? total : e;
  *first = f, *len = e - f < max ? e - f : max;
}

__device__ __forceinline__ BwdSeq bwd_seq(const BwdParams &p, int64_t b) {
  BwdSeq s = {0, p.sq, 0, p.sk};
  if (p.varlen) {
    bwd_span(p.cu_q, b, p.tq, p.sq, &s.qf, &s.ql);
    bwd_span(p.cu_k, b, p.tk, p.sk, &s.kf, &s.kl);
  }
  return s;
}

/* Query head r (0 <= r < group) of kv head g. */
__device__ __forceinline__ int64_t bwd_head(const BwdParams &p, int64_t g, int64_t r) {
  return p.interleaved ? g + r * p.hkv : g * p.group + r;
}

/* Visible keys [lo, hi) of query i of sequence s (kite_sdpa's rule, bottom-right aligned). */
__device__ __forceinline__ void bwd_key_range(const BwdParams &p, const BwdSeq &s, int64_t i,
                                              int64_t *lo, int64_t *hi) {
  const int64_t pos = s.kl - s.ql + i;
  int64_t h = s.kl, l = 0;
  if (p.causal || p.window_left >= 0) h = pos + 1 < 0 ? 0 : pos + 1 > s.kl ? s.kl : pos + 1;
  if (p.window_left >= 0) l = pos - p.window_left < 0 ? 0 : pos - p.window_left;
  *lo = l < h ? l : h, *hi = h;
}

/* Queries [*ilo, *ihi) of sequence s that see any key of [j0, j1) (j0 < j1 <= s.kl). */
__device__ __forceinline__ void bwd_query_range(const BwdParams &p, const BwdSeq &s, int64_t j0,
                                                int64_t j1, int64_t *ilo, int64_t *ihi) {
  const int64_t shift = s.kl - s.ql; /* query i sits at position i + shift */
  int64_t lo = 0, hi = s.ql;
  if (p.causal || p.window_left >= 0) lo = j0 - shift > 0 ? j0 - shift : 0;
  if (p.window_left >= 0) {
    const int64_t h = j1 - 1 + p.window_left - shift + 1;
    hi = h < hi ? h : hi;
  }
  *ilo = lo, *ihi = hi > lo ? hi : lo;
}

/* The mask term of score (b, head, i, j): false when a bool mask hides it, else *add (the float
 * mask's value, 0 without one). */
template <typename T>
__device__ __forceinline__ bool bwd_mask(const BwdParams &p, int64_t b, int64_t head, int64_t i,
                                         int64_t j, float *add) {
  *add = 0.0f;
  if (p.mask_kind == MASK_NONE) return true;
  const int64_t mo = b * p.mask_st[0] + head * p.mask_st[1] + i * p.mask_st[2] + j * p.mask_st[3];
  if (p.mask_kind == MASK_BOOL) return ((const uint8_t *)p.mask)[mo] != 0;
  *add = p.mask_kind == MASK_F32 ? ((const float *)p.mask)[mo] : to_float(((const T *)p.mask)[mo]);
  return true;
}

/* A sequence's score rules as the tensor-core kernels apply them to S = Q K^T: the exponent u of
 * p = exp2(u - lse log2(e)) (scaled, softcapped), which (query i, key j) pairs are visible under
 * causal / window, and whether a whole tile is (no test per element then). */
struct BwdRules {
  bool capped, causal, windowed;
  float sl2, cs, cap2;            /* scale log2(e); scale / softcap; softcap log2(e) */
  int64_t shift, window_left, ql; /* query i sits at position i + shift */

  /* u of score s; *fac = d u / d (s sl2), 1 - tanh^2 under softcap */
  __device__ __forceinline__ float exponent(float s, float *fac) const {
    if (!capped) {
      *fac = 1.0f;
      return s * sl2;
    }
    const float th = tanhf(s * cs);
    *fac = 1.0f - th * th;
    return cap2 * th;
  }
  /* key j (below the block end j1) is seen by query i */
  __device__ __forceinline__ bool visible(int64_t i, int64_t j, int64_t j1) const {
    const int64_t pos = i + shift;
    return j < j1 && i < ql && (!causal || j <= pos) && (!windowed || j >= pos - window_left);
  }
  /* every key of the full block [j0, j0 + bn) is seen by every query of [i0, i0 + bq) */
  __device__ __forceinline__ bool tile_full(int64_t i0, int bq, int64_t j0, int64_t j1,
                                            int bn) const {
    const int64_t ilast = i0 + bq - 1;
    return j1 == j0 + bn && ilast < ql && (!causal || i0 + shift >= j0 + bn - 1) &&
           (!windowed || ilast + shift - window_left <= j0);
  }
};

__device__ __forceinline__ BwdRules bwd_rules(const BwdParams &p, const BwdSeq &s) {
  BwdRules r;
  r.capped = p.softcap > 0.0f;
  r.causal = p.causal || p.window_left >= 0, r.windowed = p.window_left >= 0;
  r.sl2 = p.scale * kLog2e, r.cs = r.capped ? p.scale / p.softcap : 0.0f;
  r.cap2 = p.softcap * kLog2e;
  r.shift = s.kl - s.ql, r.window_left = p.window_left, r.ql = s.ql;
  return r;
}

/* Query row `row` of (b, h)'s statistics as the tensor-core kernels keep them: *l2 = lse log2(e)
 * (inf for a row that sees no key, lse -inf: every p = exp2(s - inf) is then 0) and *dl = its
 * delta (rowsum(dO o O)). */
__device__ __forceinline__ void bwd_row_stats(const BwdParams &p, int64_t b, int64_t h, int64_t row,
                                              float *l2, float *dl) {
  const float lse = p.lse[b * p.lse_st[0] + h * p.lse_st[1] + row * p.lse_st[2]];
  *l2 = lse == -INFINITY ? INFINITY : lse * kLog2e;
  *dl = p.delta[b * p.delta_st[0] + h * p.delta_st[1] + row * p.delta_st[2]];
}

/* Query tiles [lo, hi) (tile m: rows [m bq, m bq + bq) of the sequence) that key block n (keys
 * [n bn, n bn + bn)) visits: those holding a query that sees one of its keys; empty past the
 * sequence's keys. lo and hi never decrease with n (bwd_query_range). */
struct BwdTiles {
  int64_t lo, hi;
};

__device__ __forceinline__ BwdTiles bwd_tiles(const BwdParams &p, const BwdSeq &s, int64_t n,
                                              int bn, int bq) {
  const int64_t j0 = n * bn;
  if (j0 >= s.kl) return {0, 0};
  const int64_t j1 = j0 + bn < s.kl ? j0 + bn : s.kl;
  int64_t ilo, ihi;
  bwd_query_range(p, s, j0, j1, &ilo, &ihi);
  if (ihi <= ilo) return {0, 0};
  return {ilo / bq, (ihi + bq - 1) / bq};
}

/* dq in a fixed order: the key blocks that visit a query tile add their dq into its f32
 * accumulator from the highest block down, each after the one above (the grid runs the highest
 * blocks first, so a block only waits on blocks already started). The visitors of tile m are
 * key blocks [a, b]; visitor n's turn is b - n, the blocks above it (binary search: above n,
 * the visitors are a prefix, since the tile spans never move down). */
__device__ __forceinline__ int bwd_turn(const BwdParams &p, const BwdSeq &s, int64_t n, int64_t m,
                                        int bn, int bq) {
  int64_t lo = n, hi = (s.kl + bn - 1) / bn - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    const BwdTiles t = bwd_tiles(p, s, mid, bn, bq);
    if (t.lo <= m && m < t.hi)
      lo = mid;
    else
      hi = mid - 1;
  }
  return (int)(lo - n);
}

/* One thread: waits until the tile's counter reaches turn (acquire). The CTA then syncs. */
__device__ __forceinline__ void bwd_turn_wait(const int *c, int turn) {
  for (;;) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(c) : "memory");
    if (v == turn) return;
    __nanosleep(64);
  }
}

/* One thread, after a CTA barrier that follows every thread's adds: hands the tile on (release,
 * cumulative over the CTA's adds). */
__device__ __forceinline__ void bwd_turn_pass(int *c) {
  asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(c) : "memory");
}

/* dst[0..1] += (a, b): one 8-byte atomic on sm_90, two otherwise. */
__device__ __forceinline__ void atomic_add2(float *dst, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2 *>(dst), make_float2(a, b));
#else
  atomicAdd(dst, a);
  atomicAdd(dst + 1, b);
#endif
}

/* Key block n's dQ of query tile m of head h into the f32 accumulator, in turn: waits for the
 * blocks above (bwd_turn), runs add() on every thread, then keeps the tile in *pending: the CTA
 * hands it on at its next tile's first barrier (bwd_turn_flush), when its adds have mostly
 * landed, so the release does not hold the CTA up while they travel. The hand-on is one tile
 * late; the block below waits on it only when it is less than a tile behind. Holds CTA
 * barriers: every thread of the CTA calls it. */
template <typename F>
__device__ __forceinline__ void bwd_dq_in_turn(const BwdParams &p, const BwdSeq &s, int64_t b,
                                               int64_t h, int64_t n, int64_t m, int bn, int bq,
                                               int **pending, F add) {
  int *cnt = p.dq_turn + (b * p.hq + h) * p.mtiles + m;
  if (threadIdx.x == 0) bwd_turn_wait(cnt, bwd_turn(p, s, n, m, bn, bq));
  __syncthreads();
  add();
  __syncthreads(); /* every add issued (and the tile's shared memory free again) */
  if (threadIdx.x == 0) *pending = cnt;
}

/* Hands on the tile kept by bwd_dq_in_turn (thread 0; after a CTA barrier that follows the adds:
 * the release is cumulative over the CTA's adds). Every thread calls it after each tile's first
 * barrier and once after the last tile. */
__device__ __forceinline__ void bwd_turn_flush(int **pending) {
  if (threadIdx.x == 0 && *pending) {
    bwd_turn_pass(*pending);
    *pending = nullptr;
  }
}

/* The head of tile t of a tensor-core kernel's loop over double-buffered cp.async tiles: tile
 * t + 1's loads into the other buffer, tile t's awaited, before_barrier() (sm_90: the fence that
 * makes them visible to wgmma), a CTA barrier, then the dq tile kept from tile t - 1 handed on
 * (bwd_turn_flush). */
template <typename Load, typename Fence>
__device__ __forceinline__ void bwd_tile_head(int64_t t, int64_t ntiles, Load load,
                                              Fence before_barrier, int **pending) {
  if (t + 1 < ntiles) load(t + 1, (int)((t + 1) & 1));
  cp_async_commit();
  cp_async_wait<1>();
  before_barrier();
  __syncthreads();
  bwd_turn_flush(pending);
}

/* The K and V rows of key block [j0, j1) (kv head g of sequence b) by 16-byte cp.async, chunk c
 * (8 elements) of row r to the shared addresses dst_k(r, c) and dst_v(r, c), zeros for rows past
 * j1; the thread takes chunks first, first + step, ... of the BN x D / 8. Commits nothing. */
template <typename T, int D, int BN, typename DstK, typename DstV>
__device__ __forceinline__ void bwd_load_kv(const BwdParams &p, const BwdSeq &s, int64_t b,
                                            int64_t g, int64_t j0, int64_t j1, int first, int step,
                                            DstK dst_k, DstV dst_v) {
  constexpr int CH = D / 8;
  const T *kb = (const T *)p.k + b * p.k_st[0] + g * p.k_st[1];
  const T *vb = (const T *)p.v + b * p.v_st[0] + g * p.v_st[1];
  for (int idx = first; idx < BN * CH; idx += step) {
    const int r = idx / CH, c = idx % CH;
    const bool ok = j0 + r < j1;
    const int64_t row = s.kf + j0 + r;
    cp_async16(dst_k(r, c), ok ? kb + row * p.k_st[2] + c * 8 : kb, ok);
    cp_async16(dst_v(r, c), ok ? vb + row * p.v_st[2] + c * 8 : vb, ok);
  }
}

/* dK (times scale) and dV of a warp's 16 keys [kw, kw + 16) of key block [j0, j1) from mma
 * accumulator fragments: f[4 dn + 2 hh + e] is key kw + lane / 4 + 8 hh, column
 * 8 dn + 2 (lane % 4) + e. */
template <typename T, int D>
__device__ __forceinline__ void bwd_store_dkdv(const BwdParams &p, const BwdSeq &s, int64_t b,
                                               int64_t g, int64_t j0, int64_t j1, int kw, int lane,
                                               const float (&dk)[D / 2], const float (&dv)[D / 2]) {
  const int qg = lane >> 2, qt = lane & 3;
  T *dkb = (T *)p.dk + b * p.dk_st[0] + g * p.dk_st[1];
  T *dvb = (T *)p.dv + b * p.dv_st[0] + g * p.dv_st[1];
#pragma unroll
  for (int hh = 0; hh < 2; hh++) {
    const int64_t j = j0 + kw + qg + 8 * hh;
    if (j >= j1) continue;
    T *rk = dkb + (s.kf + j) * p.dk_st[2] + 2 * qt, *rv = dvb + (s.kf + j) * p.dv_st[2] + 2 * qt;
#pragma unroll
    for (int dn = 0; dn < D / 8; dn++) {
      *(uint32_t *)(rk + dn * 8) =
          pack2<T>(dk[4 * dn + 2 * hh] * p.scale, dk[4 * dn + 2 * hh + 1] * p.scale);
      *(uint32_t *)(rv + dn * 8) = pack2<T>(dv[4 * dn + 2 * hh], dv[4 * dn + 2 * hh + 1]);
    }
  }
}

/* attention_backward_mma.cu: the tensor-core kernel (bf16/f16, head_dim 64 / 128) after the
 * delta kernel and the zeroed dq accumulator; false when no instantiation fits. */
bool attn_bwd_mma_head_dim(int64_t d);
int attn_bwd_mma_tile_rows(int64_t d); /* query rows per tile */
kite_status attn_bwd_mma_launch(const BwdParams &p, cudaStream_t s);

/* attention_backward_sm90ws.cu: the warp-specialized wgmma kernel (sm_90a; bf16/f16, head_dim
 * 64 / 128, no mask), the same workspace; sets p.acc_swizzled. */
bool attn_bwd_sm90ws_head_dim(int64_t d);
int attn_bwd_sm90ws_tile_rows(); /* query rows per tile */
kite_status attn_bwd_sm90ws_launch(BwdParams &p, cudaStream_t s);

} // namespace kite_cuda

#endif /* KITE_CUDA_ATTENTION_BACKWARD_CUH */
