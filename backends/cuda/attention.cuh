/*
 * Parameters of the attention kernels (attention.cu): paged decode and prefill, dense sdpa and
 * sdpa_varlen in one shape. A query row is a token (paged, varlen) or (batch, query index)
 * (sdpa); q, o and lse are addressed as b * stride[0] + head * stride[1] + i * stride[2], with
 * b = 0 for token rows. Varlen keys are dense rows kfirst + j of sequence b (cu_k_lens).
 * Also the device helpers of the tensor-core kernels (attention_mma.cu, attention_sm90.cu): PTX
 * wrappers, the query tile of a CTA and the keys each query row sees.
 */
#ifndef KITE_CUDA_ATTENTION_CUH
#define KITE_CUDA_ATTENTION_CUH

#include "common.cuh"

namespace kite_cuda {

enum AttnKind { ATTN_DECODE, ATTN_PREFILL, ATTN_SDPA, ATTN_VARLEN };
enum MaskKind { MASK_NONE, MASK_BOOL, MASK_F32, MASK_SAME };

struct AttnParams {
  int kind;
  kite_dtype dtype;
  int64_t batch, rows, hq, hkv, group, head_dim;
  int64_t sq, sk;   /* sdpa */
  int64_t max_keys; /* paged: max_blocks * block_size; sdpa: sk */
  const void *q;
  int64_t q_stride[3];
  void *o;
  int64_t o_stride[3];
  float *lse;
  int64_t lse_stride[3];
  const void *k, *v; /* paged: the caches; sdpa: dense with strides [b, h, j] */
  int64_t k_stride[3], v_stride[3];
  int64_t num_blocks, block_size;
  const int32_t *block_table;
  int64_t block_table_stride;
  const int32_t *seq_lens, *cu_q_lens;
  const int32_t *cu_k_lens; /* varlen: key rows of sequence b, [cu[b], cu[b + 1]) of total_keys */
  int64_t total_keys;
  const void *mask;
  int mask_kind;
  int64_t mask_stride[4];
  float scale, softcap;
  int64_t window_left;
  bool gqa_interleaved, causal;
  const float *sinks; /* NULL or [hq] (kite.h, "Sinks") */
  /* sdpa_fp8: q, k, v are e4m3 codes; q_scale [batch, hq, ceil(sq / 128)], k_scale and v_scale
   * [batch, hkv, ceil(sk / 128)], compact (kite.h, kite_sdpa_fp8); dtype is o's */
  const float *q_scale, *k_scale, *v_scale;
  float *part_o, *part_lse; /* split-KV partials: [splits, rows, hq, (D)] */
};

/* ---- device helpers of the tensor-core kernels --------------------------------------------- */
constexpr float kLn2 = 0.69314718055994531f;

/* kite.h's sink of q head h joins a finished row's max m and sum l of base-2 scores (the
 * kernels' online softmax, before o = acc / l): m' = max(m, sink), l' = l 2^(m - m') +
 * 2^(sink - m'). Returns 2^(m - m'), the factor of the row's acc; 1 (nothing changed) without
 * sinks. A split-KV kernel leaves it to attn_merge_splits, so each row counts its sink once. */
__device__ __forceinline__ float join_sink(const AttnParams &p, int64_t h, float *m, float *l) {
  if (!p.sinks) return 1.0f;
  const float sink = p.sinks[h] * kLog2e;
  if (sink == -INFINITY) return 1.0f;
  const float mn = fmaxf(*m, sink), f = *m == -INFINITY ? 0.0f : exp2f(*m - mn);
  *l = *l * f + exp2f(sink - mn);
  *m = mn;
  return f;
}

/* 2^x on the special-function unit; -inf gives 0. */
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

/* Two floats as a packed pair of T, lo in the low half. */
template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same<T, __nv_bfloat16>::value) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&v);
  }
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

/* c[16x8] += a[16x16] b[16x8], f32 accumulators. */
template <typename T>
__device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0,
                                         uint32_t b1) {
  if constexpr (std::is_same<T, __nv_bfloat16>::value) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

/* One sequence's view: its keys n, its query count, the token index of its first query, the
 * row of its first key (varlen; 0 otherwise). */
struct Seq {
  int b, q_len, n, first, kfirst;
};

/* The tile of packed rows that CTA x works on: false when x is past the last tile. For prefill,
 * and varlen, the tiles of the sequences are laid end to end (ceil(q_len * group / BM) each) and
 * every warp finds its sequence by a prefix sum over 32 sequences at a time. */
template <int BM>
__device__ __forceinline__ bool find_tile(const AttnParams &p, int64_t x, Seq *s, int *m0) {
  const int group = (int)p.group;
  if (p.kind == ATTN_PREFILL || p.kind == ATTN_VARLEN) {
    const int lane = threadIdx.x & 31;
    int64_t before = 0;
    bool found = false;
    for (int64_t base = 0; base < p.batch && !found; base += 32) {
      const int64_t b = base + lane;
      int64_t q_len = 0, first = 0;
      if (b < p.batch) {
        first = p.cu_q_lens[b], q_len = (int64_t)p.cu_q_lens[b + 1] - first;
        if (first < 0 || q_len < 0 || first + q_len > p.rows) q_len = 0; /* bad cu_q_lens */
      }
      int64_t tiles = (q_len * group + BM - 1) / BM, incl = tiles;
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const int64_t v = __shfl_up_sync(0xffffffffu, incl, off);
        if (lane >= off) incl += v;
      }
      const int64_t total = __shfl_sync(0xffffffffu, incl, 31);
      const unsigned hit = __ballot_sync(0xffffffffu, before + incl > x);
      if (hit) {
        const int src = __ffs(hit) - 1;
        const int64_t excl = __shfl_sync(0xffffffffu, incl - tiles, src);
        s->b = (int)(base + src);
        s->first = (int)__shfl_sync(0xffffffffu, first, src);
        s->q_len = (int)__shfl_sync(0xffffffffu, q_len, src);
        *m0 = (int)(x - before - excl) * BM;
        found = true;
      }
      before += total;
    }
    if (!found) return false;
  } else {
    const int64_t q_len = p.kind == ATTN_SDPA ? p.sq : 1;
    const int64_t per = (q_len * group + BM - 1) / BM;
    const int64_t b = x / per;
    if (b >= p.batch) return false;
    s->b = (int)b, s->q_len = (int)q_len, *m0 = (int)(x % per) * BM;
    s->first = p.kind == ATTN_SDPA ? 0 : (int)b;
  }
  int64_t n, kfirst = 0;
  if (p.kind == ATTN_VARLEN) { /* keys outside [0, total_keys) make the sequence keyless */
    kfirst = p.cu_k_lens[s->b], n = (int64_t)p.cu_k_lens[s->b + 1] - kfirst;
    if (kfirst < 0 || n < 0 || kfirst + n > p.total_keys) kfirst = 0, n = 0;
  } else {
    n = p.kind == ATTN_SDPA ? p.sk : p.seq_lens[s->b];
  }
  n = n < 0 ? 0 : n > p.max_keys ? p.max_keys : n;
  s->n = (int)n, s->kfirst = (int)kfirst;
  return true;
}

/* Visible keys [lo, hi) of query token t. */
__device__ __forceinline__ void key_range(const AttnParams &p, const Seq &s, int t, int *lo,
                                          int *hi) {
  const int64_t pos = (int64_t)s.n - s.q_len + t;
  const bool causal = p.kind != ATTN_DECODE && p.causal;
  int64_t h = s.n, l = 0;
  if (causal || p.window_left >= 0) h = pos + 1 < 0 ? 0 : pos + 1 > s.n ? s.n : pos + 1;
  if (p.window_left >= 0) l = pos - p.window_left < 0 ? 0 : pos - p.window_left;
  if (l > h) l = h;
  *lo = (int)l, *hi = (int)h;
}

/* The query tile of CTA x with its keys: false when x has no rows. rows: the tile's packed rows
 * (at most BM); [lo_first, hi_first) and [lo_last, hi_last): the keys of its first and last rows
 * (positions grow with the token, so the others lie between). */
struct CtaTile {
  Seq s;
  int m0, rows, lo_first, hi_first, lo_last, hi_last;
};
template <int BM>
__device__ __forceinline__ bool cta_tile(const AttnParams &p, int64_t x, CtaTile *c) {
  if (!find_tile<BM>(p, x, &c->s, &c->m0)) return false;
  const int group = (int)p.group, rows_total = c->s.q_len * group;
  if (c->m0 >= rows_total) return false;
  c->rows = rows_total - c->m0 < BM ? rows_total - c->m0 : BM;
  key_range(p, c->s, c->m0 / group, &c->lo_first, &c->hi_first);
  key_range(p, c->s, (c->m0 + c->rows - 1) / group, &c->lo_last, &c->hi_last);
  return true;
}
/* In a kernel body: CTA x's tile (cta_tile) as the locals s, m0, rows_here and the CTA's keys, from
 * the first row's lo to the last row's hi (lo_first, hi_first, lo_last, hi_last); the kernel
 * returns when x has no rows. */
#define KITE_CTA_TILE(BM, p, x)                                                                    \
  CtaTile ct_;                                                                                     \
  if (!cta_tile<BM>(p, x, &ct_)) return;                                                           \
  const Seq s = ct_.s;                                                                             \
  const int m0 = ct_.m0, rows_here = ct_.rows, lo_first = ct_.lo_first, hi_first = ct_.hi_first,   \
            lo_last = ct_.lo_last, hi_last = ct_.hi_last

/* Element offsets of key j's K and V rows for kv head g; -1 when the key is absent. */
template <bool PAGED>
__device__ __forceinline__ void key_offsets(const AttnParams &p, const Seq &s, int g, int j,
                                            int khi, int64_t *ko, int64_t *vo) {
  *ko = *vo = -1;
  if (j >= khi) return;
  if (PAGED) {
    const int bs = (int)p.block_size, idx = j / bs;
    const int64_t blk = p.block_table[(int64_t)s.b * p.block_table_stride + idx];
    if (blk < 0 || blk >= p.num_blocks) return;
    *ko = *vo = ((blk * p.hkv + g) * bs + (j - idx * bs)) * p.head_dim;
  } else {
    const int64_t row = (int64_t)s.kfirst + j;
    *ko = (int64_t)s.b * p.k_stride[0] + g * p.k_stride[1] + row * p.k_stride[2];
    *vo = (int64_t)s.b * p.v_stride[0] + g * p.v_stride[1] + row * p.v_stride[2];
  }
}

/* attention.cu: the parameters of an op's arguments and the merge of split-KV partials
 * (part_o/part_lse of `splits` splits) into o and lse. */
AttnParams attn_paged_params(const kite_paged_attn_args *a);
AttnParams attn_sdpa_params(const kite_sdpa_args *a);
AttnParams attn_varlen_params(const kite_sdpa_varlen_args *a);
/* attention_fp8.cu: sdpa_fp8's (q, k, v e4m3 codes, the scales, dtype o's). */
AttnParams attn_fp8_params(const kite_sdpa_fp8_args *a);
void attn_merge_splits(const AttnParams &p, int splits, cudaStream_t s);
/* The key splits of `units` CTAs (> 0): enough to fill the GPU with >= per_sm CTAs per SM,
 * keeping >= 256 keys per split, at most 64; with more than one, p.part_o / p.part_lse get the
 * partials' room in the ctx's workspace. */
kite_status attn_split_keys(kite_ctx *ctx, AttnParams &p, int64_t units, int per_sm,
                            int64_t *splits);

} // namespace kite_cuda

#endif /* KITE_CUDA_ATTENTION_CUH */
