/*
 * Attention on CUDA cores: store_kv, paged_decode, and the generic paged_prefill and sdpa.
 *
 * One kernel serves every query row: a CTA takes one query row (a token), one kv head and up to
 * GMAX of the q heads that read it (GQA), so each key and value is read once for all of them.
 * Its 128 threads form lane groups of TPK lanes; a lane group holds one key at a time, each lane
 * EPL consecutive elements of it, and keeps its own online-softmax state per head. The lane
 * groups then merge through shared memory. When the rows and kv heads give too few CTAs (decode
 * at small batch), the keys of a row are split over gridDim.y CTAs whose partial results (o
 * normalized, lse in base 2) a second small kernel merges by the LSE rule.
 *
 * Keys come from the paged cache through the block table (PAGED) or from a dense [Sk, D] slab
 * (sdpa). A key is not seen when its block id is out of range, past the row's causal position,
 * outside the window or masked off; a row that sees no key gets o = 0 and lse = -inf (with a
 * sink: lse = the sink, which joins each row at its end or in the split merge, join_sink).
 * Scores are s = scale q.k, then softcap, then the float mask; exponentials are base 2.
 *
 * bf16/f16 with head_dim 64/80/96/128/256, 16-byte aligned rows and no mask go to the tensor-core
 * kernel of attention_mma.cu (variant "mma"); these kernels serve the rest (f32, other head_dim,
 * masks, unaligned layouts).
 */
#include "attention.cuh"

using namespace kite_cuda;

namespace {

constexpr int kThreads = 128;
constexpr float kLn2 = 0.69314718055994531f;

__device__ __forceinline__ int64_t clamp64(int64_t v, int64_t lo, int64_t hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

/* Where a query row sits: its sequence b, its index i for q/o/lse addressing, the row of its
 * sequence's first key kf (varlen; else 0), its position and its visible keys [lo, hi). false
 * when the row belongs to no sequence (bad cu_q_lens). */
struct Row {
  int64_t b, i, kf, lo, hi;
};

__device__ bool locate_row(const AttnParams &p, int64_t row, Row *r) {
  int64_t n, pos;
  bool causal = p.causal;
  if (p.kind == ATTN_SDPA) {
    r->b = row / p.sq, r->i = row % p.sq, r->kf = 0;
    n = p.sk, pos = r->i + p.sk - p.sq;
  } else {
    int64_t b = row, q_len = 1, first = row;
    r->kf = 0;
    if (p.kind == ATTN_PREFILL ||
        p.kind == ATTN_VARLEN) { /* the last sequence whose first token is at or before row */
      const int32_t *cu = p.cu_q_lens;
      if (row < cu[0] || row >= cu[p.batch]) return false;
      int64_t lo = 0, hi = p.batch - 1;
      while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        if (cu[mid] <= row)
          lo = mid;
        else
          hi = mid - 1;
      }
      b = lo, first = cu[b], q_len = (int64_t)cu[b + 1] - first;
      if (q_len <= 0 || row - first >= q_len) return false;
    } else {
      causal = false; /* every key is at or before the decode query */
    }
    if (p.kind == ATTN_VARLEN) { /* keys outside [0, total_keys) make the sequence keyless */
      const int64_t kf = p.cu_k_lens[b], kn = (int64_t)p.cu_k_lens[b + 1] - kf;
      const bool bad = kf < 0 || kn < 0 || kf + kn > p.total_keys;
      r->kf = bad ? 0 : kf, n = bad ? 0 : clamp64(kn, 0, p.max_keys);
    } else {
      n = clamp64(p.seq_lens[b], 0, p.max_keys);
    }
    pos = n - q_len + (row - first);
    r->b = b, r->i = row;
  }
  r->lo = 0, r->hi = n;
  if (causal || p.window_left >= 0) r->hi = clamp64(pos + 1, 0, n);
  if (p.window_left >= 0) r->lo = clamp64(pos - p.window_left, 0, n);
  return true;
}

template <typename T, int EPL, bool VEC>
__device__ __forceinline__ void load_lane(const T *p, int d0, int D, float *out) {
  if (VEC) {
    load_floats<EPL>(p + d0, out);
  } else {
#pragma unroll
    for (int e = 0; e < EPL; e++) out[e] = d0 + e < D ? to_float(p[d0 + e]) : 0.0f;
  }
}

/* Grid: x = (row, kv head, head chunk), y = split. See the file comment. */
template <typename T, int TPK, int EPL, int GMAX, bool VEC, bool PAGED>
__global__ void __launch_bounds__(kThreads) attend_kernel(AttnParams p) {
  constexpr int NG = kThreads / TPK, DP = TPK * EPL, U = VEC ? 4 : 2;
  __shared__ float sm_m[NG][GMAX], sm_l[NG][GMAX];
  __shared__ float sm_acc[NG][GMAX][DP];

  const int grp = threadIdx.x / TPK, lig = threadIdx.x % TPK, d0 = lig * EPL;
  const int D = (int)p.head_dim;
  const int64_t chunks = (p.group + GMAX - 1) / GMAX;
  const int64_t unit = blockIdx.x;
  const int64_t chunk = unit % chunks, g = unit / chunks % p.hkv, row = unit / chunks / p.hkv;
  const int split = blockIdx.y, splits = gridDim.y;

  int64_t head[GMAX];
  bool has[GMAX];
#pragma unroll
  for (int gi = 0; gi < GMAX; gi++) {
    const int64_t qi = chunk * GMAX + gi; /* the gi-th q head of kv head g */
    has[gi] = qi < p.group;
    head[gi] = p.gqa_interleaved ? g + qi * p.hkv : g * p.group + qi;
  }

  Row r = {0, row, 0, 0, 0}; /* token rows address q/o/lse by token alone */
  const bool row_ok = locate_row(p, row, &r);
  int64_t lo = 0, hi = 0;
  if (row_ok) { /* this split's share of the visible keys */
    const int64_t per = (r.hi - r.lo + splits - 1) / splits;
    lo = r.lo + split * per, hi = lo + per < r.hi ? lo + per : r.hi;
  }

  const T *qbase = (const T *)p.q;
  float q[GMAX][EPL], acc[GMAX][EPL], m[GMAX], l[GMAX];
#pragma unroll
  for (int gi = 0; gi < GMAX; gi++) {
    m[gi] = -INFINITY, l[gi] = 0.0f;
#pragma unroll
    for (int e = 0; e < EPL; e++) acc[gi][e] = 0.0f, q[gi][e] = 0.0f;
    if (has[gi] && row_ok) {
      load_lane<T, EPL, VEC>(qbase + r.b * p.q_stride[0] + head[gi] * p.q_stride[1] +
                                 r.i * p.q_stride[2],
                             d0, D, q[gi]);
#pragma unroll
      for (int e = 0; e < EPL; e++) q[gi][e] *= p.scale;
    }
  }

  const T *kc = (const T *)p.k, *vc = (const T *)p.v;
  const int32_t *blocks = PAGED && row_ok ? p.block_table + r.b * p.block_table_stride : nullptr;
  const int64_t kv_head_off =
      PAGED ? 0 : r.b * p.k_stride[0] + g * p.k_stride[1] + r.kf * p.k_stride[2];
  const int64_t v_head_off =
      PAGED ? 0 : r.b * p.v_stride[0] + g * p.v_stride[1] + r.kf * p.v_stride[2];

  /* The loop bounds are the same for every thread, so the shuffles below never diverge. */
  for (int64_t base = lo; base < hi; base += (int64_t)NG * U) {
    float kf[U][EPL], vf[U][EPL], s[U][GMAX];
    bool seen[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int64_t j = base + (int64_t)u * NG + grp;
      int64_t koff = 0, voff = 0;
      seen[u] = j < hi;
      if (seen[u] && PAGED) {
        const int64_t blk = blocks[j / p.block_size];
        seen[u] = blk >= 0 && blk < p.num_blocks;
        koff = voff = ((blk * p.hkv + g) * p.block_size + j % p.block_size) * D;
      } else if (seen[u]) {
        koff = kv_head_off + j * p.k_stride[2], voff = v_head_off + j * p.v_stride[2];
      }
      if (seen[u]) {
        load_lane<T, EPL, VEC>(kc + koff, d0, D, kf[u]);
        load_lane<T, EPL, VEC>(vc + voff, d0, D, vf[u]);
      } else {
#pragma unroll
        for (int e = 0; e < EPL; e++) kf[u][e] = vf[u][e] = 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      const int64_t j = base + (int64_t)u * NG + grp;
#pragma unroll
      for (int gi = 0; gi < GMAX; gi++) {
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < EPL; e++) dot = fmaf(q[gi][e], kf[u][e], dot);
#pragma unroll
        for (int off = TPK / 2; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
        float sc = dot;
        if (p.softcap > 0.0f) sc = p.softcap * tanhf(sc / p.softcap);
        bool vis = seen[u] && has[gi];
        if (p.mask && vis) {
          const int64_t mo = r.b * p.mask_stride[0] + head[gi] * p.mask_stride[1] +
                             r.i * p.mask_stride[2] + j * p.mask_stride[3];
          if (p.mask_kind == MASK_BOOL)
            vis = ((const uint8_t *)p.mask)[mo] != 0;
          else if (p.mask_kind == MASK_F32)
            sc += ((const float *)p.mask)[mo];
          else
            sc += to_float(((const T *)p.mask)[mo]);
        }
        s[u][gi] = vis ? sc * kLog2e : -INFINITY;
      }
    }
#pragma unroll
    for (int gi = 0; gi < GMAX; gi++) {
      float mx = m[gi];
#pragma unroll
      for (int u = 0; u < U; u++) mx = fmaxf(mx, s[u][gi]);
      if (mx == -INFINITY) continue;
      const float corr = exp2f(m[gi] - mx); /* 0 while m is -inf */
      l[gi] *= corr;
#pragma unroll
      for (int e = 0; e < EPL; e++) acc[gi][e] *= corr;
#pragma unroll
      for (int u = 0; u < U; u++) {
        const float pr = s[u][gi] == -INFINITY ? 0.0f : exp2f(s[u][gi] - mx);
        l[gi] += pr;
#pragma unroll
        for (int e = 0; e < EPL; e++) acc[gi][e] = fmaf(pr, vf[u][e], acc[gi][e]);
      }
      m[gi] = mx;
    }
  }

  /* Merge the lane groups: the CTA's max M, each group's sum rescaled to it. */
  if (lig == 0) {
#pragma unroll
    for (int gi = 0; gi < GMAX; gi++) sm_m[grp][gi] = m[gi], sm_l[grp][gi] = l[gi];
  }
  __syncthreads();
#pragma unroll
  for (int gi = 0; gi < GMAX; gi++) {
    float M = -INFINITY;
    for (int k = 0; k < NG; k++) M = fmaxf(M, sm_m[k][gi]);
    const float f = m[gi] == -INFINITY ? 0.0f : exp2f(m[gi] - M);
#pragma unroll
    for (int e = 0; e < EPL; e++) sm_acc[grp][gi][d0 + e] = acc[gi][e] * f;
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < GMAX * DP; idx += kThreads) {
    const int gi = idx / DP, d = idx % DP;
    if (d >= D || !has[gi]) continue;
    float M = -INFINITY, L = 0.0f, o = 0.0f;
    for (int k = 0; k < NG; k++) M = fmaxf(M, sm_m[k][gi]);
    for (int k = 0; k < NG; k++) {
      if (sm_m[k][gi] != -INFINITY) L += sm_l[k][gi] * exp2f(sm_m[k][gi] - M);
      o += sm_acc[k][gi][d];
    }
    const int64_t h = head[gi];
    const float f = splits == 1 && row_ok ? join_sink(p, h, &M, &L) : 1.0f;
    const bool none = M == -INFINITY || !row_ok;
    o = none ? 0.0f : o * f / L;
    const float lse2 = none ? -INFINITY : M + log2f(L);
    if (splits == 1) {
      T *out = (T *)p.o + r.b * p.o_stride[0] + h * p.o_stride[1] + r.i * p.o_stride[2];
      out[d] = from_float<T>(o);
      if (p.lse && d == 0)
        p.lse[r.b * p.lse_stride[0] + h * p.lse_stride[1] + r.i * p.lse_stride[2]] =
            none ? -INFINITY : lse2 * kLn2;
    } else {
      const int64_t pidx = ((int64_t)split * p.rows + row) * p.hq + h;
      p.part_o[pidx * D + d] = o;
      if (d == 0) p.part_lse[pidx] = lse2;
    }
  }
}

/* One warp per (row, head): the splits' partial results weighted by 2^(lse_s - max). */
template <typename T> __global__ void merge_splits_kernel(AttnParams p, int splits) {
  const int64_t w = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32;
  if (w >= p.rows * p.hq) return;
  const int lane = threadIdx.x & 31;
  const int64_t row = w / p.hq, h = w % p.hq;
  const int64_t stride = p.rows * p.hq;
  float M = -INFINITY;
  for (int s = 0; s < splits; s++) M = fmaxf(M, p.part_lse[s * stride + w]);
  float L = 0.0f;
  for (int s = 0; s < splits; s++) {
    const float ls = p.part_lse[s * stride + w];
    if (ls != -INFINITY) L += exp2f(ls - M);
  }
  int64_t b = 0, i = row;
  if (p.kind == ATTN_SDPA) b = row / p.sq, i = row % p.sq;
  T *out = (T *)p.o + b * p.o_stride[0] + h * p.o_stride[1] + i * p.o_stride[2];
  const float M0 = M, f = join_sink(p, h, &M, &L); /* the partials are scaled to M0 */
  for (int64_t d = lane; d < p.head_dim; d += 32) {
    float o = 0.0f;
    for (int s = 0; s < splits; s++) {
      const float ls = p.part_lse[s * stride + w];
      if (ls != -INFINITY) o += exp2f(ls - M0) * p.part_o[(s * stride + w) * p.head_dim + d];
    }
    out[d] = from_float<T>(M == -INFINITY ? 0.0f : o * f / L);
  }
  if (p.lse && lane == 0)
    p.lse[b * p.lse_stride[0] + h * p.lse_stride[1] + i * p.lse_stride[2]] =
        M == -INFINITY ? -INFINITY : (M + log2f(L)) * kLn2;
}

} // namespace

/* ---- host side ----------------------------------------------------------------------------- */
void kite_cuda::attn_merge_splits(const AttnParams &p, int splits, cudaStream_t s) {
  const int64_t warps = p.rows * p.hq;
  const unsigned blocks = (unsigned)((warps + 7) / 8);
  if (p.dtype == KITE_DTYPE_BF16)
    merge_splits_kernel<__nv_bfloat16><<<blocks, 256, 0, s>>>(p, splits);
  else if (p.dtype == KITE_DTYPE_F16)
    merge_splits_kernel<__half><<<blocks, 256, 0, s>>>(p, splits);
  else
    merge_splits_kernel<float><<<blocks, 256, 0, s>>>(p, splits);
}

namespace {

template <typename T, int TPK, int EPL, int GMAX, bool VEC>
void launch_attend(const AttnParams &p, dim3 grid, cudaStream_t s) {
  if (p.kind == ATTN_SDPA || p.kind == ATTN_VARLEN)
    attend_kernel<T, TPK, EPL, GMAX, VEC, false><<<grid, kThreads, 0, s>>>(p);
  else
    attend_kernel<T, TPK, EPL, GMAX, VEC, true><<<grid, kThreads, 0, s>>>(p);
}

template <typename T, int TPK, int EPL, bool VEC>
void launch_gmax(const AttnParams &p, int gmax, dim3 grid, cudaStream_t s) {
  switch (gmax) {
  case 1:
    launch_attend<T, TPK, EPL, 1, VEC>(p, grid, s);
    break;
  case 2:
    launch_attend<T, TPK, EPL, 2, VEC>(p, grid, s);
    break;
  case 4:
    launch_attend<T, TPK, EPL, 4, VEC>(p, grid, s);
    break;
  default:
    launch_attend<T, TPK, EPL, 8, VEC>(p, grid, s);
  }
}

/* Lanes per key for the vectorized kernel: D / (elements per 16 bytes), one of 8, 16, 32. */
int vec_tpk(kite_dtype t, int64_t d) {
  const int epl = vec_elems_of(t);
  if (epl == 0 || d % epl) return 0;
  const int64_t tpk = d / epl;
  return tpk == 8 || tpk == 16 || tpk == 32 ? (int)tpk : 0;
}

kite_status run_attend(kite_ctx *ctx, AttnParams p, bool vec, const char *op, const char *variant) {
  if (p.rows <= 0 || p.hq <= 0) return KITE_OK;
  cudaStream_t s;
  kite_status st = begin(ctx, op, &s);
  if (st != KITE_OK) return st;
  const int gmax = p.group <= 1 ? 1 : p.group <= 2 ? 2 : p.group <= 4 ? 4 : 8;
  const int64_t units = p.rows * p.hkv * ((p.group + gmax - 1) / gmax);
  if (units > 0x7fffffff)
    return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: cuda.%s: %lld query rows x heads is too many",
                          op, variant, (long long)units);
  int64_t splits;
  if ((st = attn_split_keys(ctx, p, units, 8, &splits)) != KITE_OK) return st;
  const dim3 grid((unsigned)units, (unsigned)splits);
  st = with_float_type(p.dtype, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int E = vec_elems<T>();
    switch (vec ? vec_tpk(p.dtype, p.head_dim) : 0) {
    case 0:
      launch_gmax<T, 32, 8, false>(p, gmax, grid, s);
      break;
    case 8:
      launch_gmax<T, 8, E, true>(p, gmax, grid, s);
      break;
    case 16:
      launch_gmax<T, 16, E, true>(p, gmax, grid, s);
      break;
    case 32:
      launch_gmax<T, 32, E, true>(p, gmax, grid, s);
      break;
    default:
      return kite_set_error(KITE_ERR_INTERNAL, "%s: cuda.%s: no kernel for head_dim %lld", op,
                            variant, (long long)p.head_dim);
    }
    if (splits > 1) attn_merge_splits(p, (int)splits, s);
    return KITE_OK;
  });
  return st != KITE_OK ? st : cuda_check_launch(op, variant);
}

} // namespace

kite_status kite_cuda::attn_split_keys(kite_ctx *ctx, AttnParams &p, int64_t units, int per_sm,
                                       int64_t *splits) {
  const int64_t target = (int64_t)per_sm * sm_count();
  int64_t n = units >= target ? 1 : (target + units - 1) / units;
  const int64_t by_keys = p.max_keys / 256;
  if (n > by_keys) n = by_keys;
  if (n > 64) n = 64;
  if (n < 1) n = 1;
  *splits = n;
  if (n == 1) return KITE_OK;
  void *ws;
  const size_t parts = (size_t)n * p.rows * p.hq;
  const kite_status st = kite_ctx_workspace(ctx, parts * (p.head_dim + 1) * sizeof(float), &ws);
  if (st != KITE_OK) return st;
  p.part_o = (float *)ws;
  p.part_lse = p.part_o + parts * p.head_dim;
  return KITE_OK;
}

AttnParams kite_cuda::attn_paged_params(const kite_paged_attn_args *a) {
  AttnParams p = {};
  p.kind = a->op == KITE_OP_PAGED_PREFILL ? ATTN_PREFILL : ATTN_DECODE;
  p.dtype = a->dtype;
  p.batch = a->batch, p.rows = a->tokens, p.hq = a->hq, p.hkv = a->hkv;
  p.group = a->hkv > 0 ? a->hq / a->hkv : 0;
  p.head_dim = a->head_dim;
  p.q = a->q, p.q_stride[0] = 0, p.q_stride[1] = a->q_stride_h, p.q_stride[2] = a->q_stride_t;
  p.o = a->o, p.o_stride[0] = 0, p.o_stride[1] = a->o_stride_h, p.o_stride[2] = a->o_stride_t;
  p.lse = a->lse, p.lse_stride[0] = 0, p.lse_stride[1] = 1, p.lse_stride[2] = a->hq;
  p.k = a->key_cache, p.v = a->value_cache;
  p.num_blocks = a->num_blocks, p.block_size = a->block_size;
  p.block_table = a->block_table, p.block_table_stride = a->block_table_stride;
  p.max_keys = a->max_blocks * a->block_size;
  p.seq_lens = a->seq_lens, p.cu_q_lens = a->cu_q_lens;
  p.scale = a->opts.scale, p.softcap = a->opts.softcap, p.window_left = a->opts.window_left;
  p.gqa_interleaved = a->opts.gqa == KITE_GQA_INTERLEAVED;
  p.causal = a->opts.causal != 0;
  p.sinks = a->sinks;
  return p;
}

AttnParams kite_cuda::attn_sdpa_params(const kite_sdpa_args *a) {
  AttnParams p = {};
  p.kind = ATTN_SDPA;
  p.dtype = a->dtype;
  p.batch = a->batch, p.rows = a->batch * a->sq, p.hq = a->hq, p.hkv = a->hkv;
  p.group = a->hkv > 0 ? a->hq / a->hkv : 0;
  p.head_dim = a->head_dim, p.sq = a->sq, p.sk = a->sk, p.max_keys = a->sk;
  for (int i = 0; i < 3; i++) {
    p.q_stride[i] = a->q_stride[i], p.o_stride[i] = a->o_stride[i];
    p.k_stride[i] = a->k_stride[i], p.v_stride[i] = a->v_stride[i];
  }
  p.q = a->q, p.k = a->k, p.v = a->v, p.o = a->o;
  p.lse = a->lse, p.lse_stride[0] = a->hq * a->sq, p.lse_stride[1] = a->sq, p.lse_stride[2] = 1;
  p.mask = a->mask;
  for (int i = 0; i < 4; i++) p.mask_stride[i] = a->mask_stride[i];
  p.mask_kind = !a->mask                          ? MASK_NONE
                : a->mask_dtype == KITE_DTYPE_U8  ? MASK_BOOL
                : a->mask_dtype == KITE_DTYPE_F32 ? MASK_F32
                                                  : MASK_SAME;
  p.scale = a->opts.scale, p.softcap = a->opts.softcap, p.window_left = a->opts.window_left;
  p.gqa_interleaved = a->opts.gqa == KITE_GQA_INTERLEAVED;
  p.causal = a->opts.causal != 0;
  p.sinks = a->sinks;
  return p;
}

AttnParams kite_cuda::attn_varlen_params(const kite_sdpa_varlen_args *a) {
  AttnParams p = {};
  p.kind = ATTN_VARLEN;
  p.dtype = a->dtype;
  p.batch = a->batch, p.rows = a->tq, p.hq = a->hq, p.hkv = a->hkv;
  p.group = a->hkv > 0 ? a->hq / a->hkv : 0;
  p.head_dim = a->head_dim, p.max_keys = a->max_seqlen_k, p.total_keys = a->tk;
  /* [b, head, token] with b = 0: the rows are tokens */
  p.q_stride[1] = a->q_stride[1], p.q_stride[2] = a->q_stride[0];
  p.o_stride[1] = a->o_stride[1], p.o_stride[2] = a->o_stride[0];
  p.k_stride[1] = a->k_stride[1], p.k_stride[2] = a->k_stride[0];
  p.v_stride[1] = a->v_stride[1], p.v_stride[2] = a->v_stride[0];
  p.q = a->q, p.k = a->k, p.v = a->v, p.o = a->o;
  p.lse = a->lse, p.lse_stride[1] = 1, p.lse_stride[2] = a->hq;
  p.cu_q_lens = a->cu_seqlens_q, p.cu_k_lens = a->cu_seqlens_k;
  p.scale = a->opts.scale, p.softcap = a->opts.softcap, p.window_left = a->opts.window_left;
  p.gqa_interleaved = a->opts.gqa == KITE_GQA_INTERLEAVED;
  p.causal = a->opts.causal != 0;
  p.sinks = a->sinks;
  return p;
}

namespace {

/* store_kv: thread per element of (token, kv head, d); k and v in one launch. */
template <typename T> __global__ void store_kv_kernel(kite_store_kv_args a) {
  const int64_t per_token = a.hkv * a.head_dim, capacity = a.num_blocks * a.block_size;
  for (int64_t t = blockIdx.y; t < a.tokens; t += gridDim.y) {
    const int64_t slot = a.slots[t];
    if (slot < 0 || slot >= capacity) continue; /* padding, or a slot a device cannot report */
    const int64_t blk = slot / a.block_size, off = slot % a.block_size;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < per_token;
         e += (int64_t)gridDim.x * blockDim.x) {
      const int64_t h = e / a.head_dim, d = e % a.head_dim;
      const int64_t dst = ((blk * a.hkv + h) * a.block_size + off) * a.head_dim + d;
      ((T *)a.key_cache)[dst] = ((const T *)a.k)[t * a.k_stride_t + h * a.k_stride_h + d];
      ((T *)a.value_cache)[dst] = ((const T *)a.v)[t * a.v_stride_t + h * a.v_stride_h + d];
    }
  }
}

} // namespace

/* ---- entry points -------------------------------------------------------------------------- */
extern "C" CUDA_RUN(cuda_store_kv_run) {
  const kite_store_kv_args *a = (const kite_store_kv_args *)args;
  if (a->tokens <= 0 || a->hkv <= 0 || a->head_dim <= 0) return KITE_OK;
  return launch_typed(ctx, "store_kv", "generic", a->dtype, [&](auto tag, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    const int64_t per_token = a->hkv * a->head_dim;
    const dim3 grid((unsigned)((per_token + 255) / 256 < 1024 ? (per_token + 255) / 256 : 1024),
                    (unsigned)(a->tokens < 65535 ? a->tokens : 65535));
    store_kv_kernel<T><<<grid, 256, 0, s>>>(*a);
    return KITE_OK;
  });
}

extern "C" CUDA_SUPPORTS(cuda_paged_generic_supports) {
  const kite_paged_attn_args *a = (const kite_paged_attn_args *)args;
  if (!float_dtype(a->dtype, why)) return false;
  return ok_unless(a->head_dim > 256, "head_dim must be at most 256", why);
}

/* 16-byte loads: head_dim of 8, 16 or 32 packs, aligned q rows and caches. */
extern "C" CUDA_SUPPORTS(cuda_paged_vec_supports) {
  const kite_paged_attn_args *a = (const kite_paged_attn_args *)args;
  if (!cuda_paged_generic_supports(k, args, why)) return false;
  const size_t es = kite_dtype_size(a->dtype);
  const int64_t qs[2] = {a->q_stride_t, a->q_stride_h};
  return ok_unless(
      !vec_tpk(a->dtype, a->head_dim) || !aligned16(a->q) || !strides_aligned(qs, 2, es) ||
          !aligned16(a->key_cache) || !aligned16(a->value_cache),
      "needs head_dim 64/128/256 (16-bit) or 32/64/128 (f32) and 16-byte aligned rows", why);
}

extern "C" CUDA_RUN(cuda_paged_generic_run) {
  const kite_paged_attn_args *a = (const kite_paged_attn_args *)args;
  const char *op = cuda_op_str(a->op);
  return run_attend(ctx, attn_paged_params(a), false, op, "generic");
}

extern "C" CUDA_RUN(cuda_paged_vec_run) {
  const kite_paged_attn_args *a = (const kite_paged_attn_args *)args;
  const char *op = cuda_op_str(a->op);
  return run_attend(ctx, attn_paged_params(a), true, op, "vec");
}

extern "C" CUDA_SUPPORTS(cuda_sdpa_generic_supports) {
  const kite_sdpa_args *a = (const kite_sdpa_args *)args;
  if (!float_dtype(a->dtype, why)) return false;
  if (a->head_dim > 256) {
    *why = "head_dim must be at most 256";
    return false;
  }
  return ok_unless(a->mask && a->mask_dtype != KITE_DTYPE_U8 && a->mask_dtype != KITE_DTYPE_F32 &&
                       a->mask_dtype != a->dtype,
                   "mask must be u8, f32 or the dtype", why);
}

extern "C" CUDA_SUPPORTS(cuda_sdpa_vec_supports) {
  const kite_sdpa_args *a = (const kite_sdpa_args *)args;
  if (!cuda_sdpa_generic_supports(k, args, why)) return false;
  const size_t es = kite_dtype_size(a->dtype);
  return ok_unless(!vec_tpk(a->dtype, a->head_dim) || !aligned16(a->q) || !aligned16(a->k) ||
                       !aligned16(a->v) || !strides_aligned(a->q_stride, 3, es) ||
                       !strides_aligned(a->k_stride, 3, es) || !strides_aligned(a->v_stride, 3, es),
                   "needs head_dim 64/128/256 (16-bit) or 32/64/128 (f32) and 16-byte aligned rows",
                   why);
}

extern "C" CUDA_RUN(cuda_sdpa_generic_run) {
  return run_attend(ctx, attn_sdpa_params((const kite_sdpa_args *)args), false, "sdpa", "generic");
}

extern "C" CUDA_RUN(cuda_sdpa_vec_run) {
  return run_attend(ctx, attn_sdpa_params((const kite_sdpa_args *)args), true, "sdpa", "vec");
}

extern "C" CUDA_SUPPORTS(cuda_sdpa_varlen_generic_supports) {
  const kite_sdpa_varlen_args *a = (const kite_sdpa_varlen_args *)args;
  if (!float_dtype(a->dtype, why)) return false;
  return ok_unless(a->head_dim > 256, "head_dim must be at most 256", why);
}

extern "C" CUDA_SUPPORTS(cuda_sdpa_varlen_vec_supports) {
  const kite_sdpa_varlen_args *a = (const kite_sdpa_varlen_args *)args;
  if (!cuda_sdpa_varlen_generic_supports(k, args, why)) return false;
  const size_t es = kite_dtype_size(a->dtype);
  return ok_unless(!vec_tpk(a->dtype, a->head_dim) || !aligned16(a->q) || !aligned16(a->k) ||
                       !aligned16(a->v) || !strides_aligned(a->q_stride, 2, es) ||
                       !strides_aligned(a->k_stride, 2, es) || !strides_aligned(a->v_stride, 2, es),
                   "needs head_dim 64/128/256 (16-bit) or 32/64/128 (f32) and 16-byte aligned rows",
                   why);
}

extern "C" CUDA_RUN(cuda_sdpa_varlen_generic_run) {
  return run_attend(ctx, attn_varlen_params((const kite_sdpa_varlen_args *)args), false,
                    "sdpa_varlen", "generic");
}

extern "C" CUDA_RUN(cuda_sdpa_varlen_vec_run) {
  return run_attend(ctx, attn_varlen_params((const kite_sdpa_varlen_args *)args), true,
                    "sdpa_varlen", "vec");
}
