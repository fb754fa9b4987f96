/*
 * sdpa_backward and sdpa_varlen_backward: the host side, the delta kernel, and the `generic`
 * kernels on CUDA cores that take every call (f32/f16/bf16, head_dim up to 256, masks, any
 * strides with unit-stride head_dim).
 *
 * delta_i = sum_d dout_i o_i (f32, in the ctx workspace) comes first. The generic variant then
 * runs two warp-per-row kernels: one per query row (its dq over the keys it sees), one per key
 * row (its dk and dv over the query heads of its kv head, in head order, then the queries in
 * order). Both recompute p_ij = exp(u_ij - lse_i) from the forward's lse, so every output is a
 * fixed-order sum: the same bits run after run. The tensor-core variants
 * (attention_backward_mma.cu, attention_backward_sm90ws.cu) accumulate dq in f32 in the workspace,
 * the key blocks adding into each query tile in a fixed order (per-tile counters, zeroed here); a
 * last kernel scales it into dq. The sinks' gradient (kite.h) needs only delta and lse: one CTA per
 * q head sums its rows in double in a fixed order (bwd_dsinks_kernel), for either variant.
 */
#include "attention_backward.cuh"
#include "sm90.cuh"

using namespace kite_cuda;

namespace {

constexpr int kWarpsPerBlock = 8, kE = 8; /* elements per lane: head_dim <= 256 */

/* dsinks[h] = -sum over the rows of q head h of exp(sink_h - lse) delta: one CTA of 256 threads
 * per head, each thread a fixed stride of rows, then a fixed tree: the same bits run after run. */
__global__ void __launch_bounds__(256) bwd_dsinks_kernel(BwdParams p) {
  __shared__ double part[256];
  const int64_t h = blockIdx.x;
  const double sink = p.sinks[h];
  double acc = 0.0;
  for (int64_t r = threadIdx.x; r < p.rows; r += 256) {
    const int64_t b = p.varlen ? 0 : r / p.sq, i = p.varlen ? r : r % p.sq;
    const float lse = p.lse[b * p.lse_st[0] + h * p.lse_st[1] + i * p.lse_st[2]];
    if (lse == -INFINITY) continue; /* a row that saw nothing adds nothing */
    acc -= exp(sink - (double)lse) *
           (double)p.delta[b * p.delta_st[0] + h * p.delta_st[1] + i * p.delta_st[2]];
  }
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int n = 128; n > 0; n /= 2) {
    if (threadIdx.x < n) part[threadIdx.x] += part[threadIdx.x + n];
    __syncthreads();
  }
  if (threadIdx.x == 0) p.dsinks[h] = (float)part[0];
}

/* A row index t of a packed (varlen) tensor -> the sequence holding it, or -1. */
__device__ int64_t bwd_find(const BwdParams &p, const int32_t *cu, int64_t t, bool keys) {
  int64_t lo = 0, hi = p.batch - 1;
  while (lo < hi) { /* the last b whose first row is at or before t */
    const int64_t mid = (lo + hi + 1) / 2;
    if (cu[mid] <= t)
      lo = mid;
    else
      hi = mid - 1;
  }
  const BwdSeq s = bwd_seq(p, lo);
  const int64_t f = keys ? s.kf : s.qf, n = keys ? s.kl : s.ql;
  return p.batch > 0 && t >= f && t < f + n ? lo : -1;
}

template <typename T>
__device__ __forceinline__ void lane_load(const T *row, int lane, int D, float (&x)[kE]) {
#pragma unroll
  for (int e = 0; e < kE; e++) {
    const int d = lane + 32 * e;
    x[e] = d < D ? to_float(row[d]) : 0.0f;
  }
}

__device__ __forceinline__ float lane_dot(const float (&a)[kE], const float (&b)[kE]) {
  float s = 0.0f;
#pragma unroll
  for (int e = 0; e < kE; e++) s = fmaf(a[e], b[e], s);
  return warp_reduce(s, Sum());
}

/* A row-head of the per-query tensors: dense (b, h, i); varlen (0, h, token). */
__device__ __forceinline__ void row_head(const BwdParams &p, int64_t w, int64_t *b, int64_t *h,
                                         int64_t *i) {
  if (p.varlen) {
    *b = 0, *i = w / p.hq, *h = w % p.hq;
  } else {
    *b = w / (p.hq * p.sq), *h = w / p.sq % p.hq, *i = w % p.sq;
  }
}

/* delta = sum_d dout o, one warp per row-head. */
template <typename T> __global__ void bwd_delta_kernel(BwdParams p) {
  const int64_t w = blockIdx.x * (int64_t)kWarpsPerBlock + threadIdx.x / 32;
  if (w >= p.rows * p.hq) return;
  const int lane = threadIdx.x & 31, D = (int)p.head_dim;
  int64_t b, h, i;
  row_head(p, w, &b, &h, &i);
  float o[kE], g[kE];
  lane_load((const T *)p.o + b * p.o_st[0] + h * p.o_st[1] + i * p.o_st[2], lane, D, o);
  lane_load((const T *)p.dout + b * p.do_st[0] + h * p.do_st[1] + i * p.do_st[2], lane, D, g);
  const float d = lane_dot(o, g);
  if (lane == 0) p.delta[b * p.delta_st[0] + h * p.delta_st[1] + i * p.delta_st[2]] = d;
}

/* p and ds of one score: raw = q.k unscaled; false when the key is hidden. */
template <typename T>
__device__ __forceinline__ bool bwd_score(const BwdParams &p, float raw, int64_t b, int64_t head,
                                          int64_t i, int64_t j, float lse, float *pr, float *fac) {
  float add;
  if (!bwd_mask<T>(p, b, head, i, j, &add)) return false;
  const float s = raw * p.scale;
  float t = s;
  *fac = 1.0f;
  if (p.softcap > 0.0f) {
    const float th = tanhf(s / p.softcap);
    t = p.softcap * th, *fac = 1.0f - th * th;
  }
  *pr = lse == -INFINITY ? 0.0f : expf(t + add - lse);
  return true;
}

/* dq of one query row-head: a warp over the keys the row sees. */
template <typename T> __global__ void bwd_dq_kernel(BwdParams p) {
  const int64_t w = blockIdx.x * (int64_t)kWarpsPerBlock + threadIdx.x / 32;
  if (w >= p.rows * p.hq) return;
  const int lane = threadIdx.x & 31, D = (int)p.head_dim;
  int64_t b, h, i;
  row_head(p, w, &b, &h, &i);
  float acc[kE] = {};
  const int64_t sb = p.varlen ? bwd_find(p, p.cu_q, i, false) : b;
  if (sb >= 0) {
    const BwdSeq s = bwd_seq(p, sb);
    const int64_t ir = i - s.qf, g = p.interleaved ? h % p.hkv : h / p.group;
    float q[kE], gr[kE];
    lane_load((const T *)p.q + b * p.q_st[0] + h * p.q_st[1] + i * p.q_st[2], lane, D, q);
    lane_load((const T *)p.dout + b * p.do_st[0] + h * p.do_st[1] + i * p.do_st[2], lane, D, gr);
    const float lse = p.lse[b * p.lse_st[0] + h * p.lse_st[1] + i * p.lse_st[2]];
    const float delta = p.delta[b * p.delta_st[0] + h * p.delta_st[1] + i * p.delta_st[2]];
    int64_t lo, hi;
    bwd_key_range(p, s, ir, &lo, &hi);
    const T *kb = (const T *)p.k + b * p.k_st[0] + g * p.k_st[1];
    const T *vb = (const T *)p.v + b * p.v_st[0] + g * p.v_st[1];
    for (int64_t j = lo; j < hi; j++) {
      float kf[kE], vf[kE], pr, fac;
      lane_load(kb + (s.kf + j) * p.k_st[2], lane, D, kf);
      lane_load(vb + (s.kf + j) * p.v_st[2], lane, D, vf);
      const float raw = lane_dot(q, kf), dp = lane_dot(gr, vf);
      if (!bwd_score<T>(p, raw, sb, h, ir, j, lse, &pr, &fac)) continue;
      const float ds = pr * (dp - delta) * fac;
#pragma unroll
      for (int e = 0; e < kE; e++) acc[e] = fmaf(ds, kf[e], acc[e]);
    }
  }
  T *out = (T *)p.dq + b * p.dq_st[0] + h * p.dq_st[1] + i * p.dq_st[2];
#pragma unroll
  for (int e = 0; e < kE; e++)
    if (lane + 32 * e < D) out[lane + 32 * e] = from_float<T>(acc[e] * p.scale);
}

/* dk and dv of one key row: a warp over the query heads of its kv head, then their queries. */
template <typename T> __global__ void bwd_dkdv_kernel(BwdParams p) {
  const int64_t w = blockIdx.x * (int64_t)kWarpsPerBlock + threadIdx.x / 32;
  if (w >= p.keys * p.hkv) return;
  const int lane = threadIdx.x & 31, D = (int)p.head_dim;
  int64_t b, g, j; /* j: the key's row (dense: within batch b; varlen: the token) */
  if (p.varlen)
    b = 0, j = w / p.hkv, g = w % p.hkv;
  else
    b = w / (p.hkv * p.sk), g = w / p.sk % p.hkv, j = w % p.sk;
  float dk[kE] = {}, dv[kE] = {};
  const int64_t sb = p.varlen ? bwd_find(p, p.cu_k, j, true) : b;
  if (sb >= 0) {
    const BwdSeq s = bwd_seq(p, sb);
    const int64_t jr = j - s.kf;
    float kf[kE], vf[kE];
    lane_load((const T *)p.k + b * p.k_st[0] + g * p.k_st[1] + j * p.k_st[2], lane, D, kf);
    lane_load((const T *)p.v + b * p.v_st[0] + g * p.v_st[1] + j * p.v_st[2], lane, D, vf);
    int64_t ilo, ihi;
    bwd_query_range(p, s, jr, jr + 1, &ilo, &ihi);
    for (int64_t r = 0; r < p.group; r++) {
      const int64_t h = bwd_head(p, g, r);
      for (int64_t ir = ilo; ir < ihi; ir++) {
        int64_t lo, hi;
        bwd_key_range(p, s, ir, &lo, &hi);
        if (jr < lo || jr >= hi) continue;
        const int64_t i = s.qf + ir;
        float q[kE], gr[kE], pr, fac;
        lane_load((const T *)p.q + b * p.q_st[0] + h * p.q_st[1] + i * p.q_st[2], lane, D, q);
        lane_load((const T *)p.dout + b * p.do_st[0] + h * p.do_st[1] + i * p.do_st[2], lane, D,
                  gr);
        const float lse = p.lse[b * p.lse_st[0] + h * p.lse_st[1] + i * p.lse_st[2]];
        const float delta = p.delta[b * p.delta_st[0] + h * p.delta_st[1] + i * p.delta_st[2]];
        const float raw = lane_dot(q, kf), dp = lane_dot(gr, vf);
        if (!bwd_score<T>(p, raw, sb, h, ir, jr, lse, &pr, &fac)) continue;
        const float ds = pr * (dp - delta) * fac;
#pragma unroll
        for (int e = 0; e < kE; e++) dv[e] = fmaf(pr, gr[e], dv[e]), dk[e] = fmaf(ds, q[e], dk[e]);
      }
    }
  }
  T *ok = (T *)p.dk + b * p.dk_st[0] + g * p.dk_st[1] + j * p.dk_st[2];
  T *ov = (T *)p.dv + b * p.dv_st[0] + g * p.dv_st[1] + j * p.dv_st[2];
#pragma unroll
  for (int e = 0; e < kE; e++)
    if (lane + 32 * e < D) {
      ok[lane + 32 * e] = from_float<T>(dk[e] * p.scale);
      ov[lane + 32 * e] = from_float<T>(dv[e]);
    }
}

/* dq = scale * dq_acc, a thread per element (acc_swizzled: head_dim a multiple of 32). */
template <typename T> __global__ void bwd_dq_convert_kernel(BwdParams p) {
  const int64_t n = p.rows * p.hq * p.head_dim;
  for (int64_t x = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; x < n;
       x += (int64_t)gridDim.x * blockDim.x) {
    int64_t b, h, i;
    row_head(p, x / p.head_dim, &b, &h, &i);
    const int64_t d = x % p.head_dim;
    const int64_t da = p.acc_swizzled ? d ^ ((i & 3) << 3) : d;
    const float a = p.dq_acc[b * p.acc_st[0] + h * p.acc_st[1] + i * p.acc_st[2] + da];
    ((T *)p.dq)[b * p.dq_st[0] + h * p.dq_st[1] + i * p.dq_st[2] + d] = from_float<T>(a * p.scale);
  }
}

/* Varlen: zeros in every dk / dv row (the tensor-core kernel then writes the rows that
 * sequences cover). */
template <typename T> __global__ void bwd_zero_dkdv_kernel(BwdParams p) {
  const int64_t n = p.keys * p.hkv * p.head_dim;
  for (int64_t x = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; x < n;
       x += (int64_t)gridDim.x * blockDim.x) {
    const int64_t d = x % p.head_dim, g = x / p.head_dim % p.hkv, j = x / p.head_dim / p.hkv;
    ((T *)p.dk)[g * p.dk_st[1] + j * p.dk_st[2] + d] = from_float<T>(0.0f);
    ((T *)p.dv)[g * p.dv_st[1] + j * p.dv_st[2] + d] = from_float<T>(0.0f);
  }
}

void copy3(int64_t *dst, const int64_t *src, int n) {
  dst[0] = 0;
  for (int i = 0; i < n; i++) dst[3 - n + i] = src[i];
}

BwdParams dense_params(const kite_sdpa_backward_args *a) {
  const kite_sdpa_args *f = &a->fwd;
  BwdParams p = {};
  p.dtype = a->dtype;
  p.batch = f->batch, p.hq = f->hq, p.hkv = f->hkv, p.head_dim = f->head_dim;
  p.group = f->hkv > 0 ? f->hq / f->hkv : 0;
  p.sq = f->sq, p.sk = f->sk, p.rows = f->batch * f->sq, p.keys = f->batch * f->sk;
  p.q = f->q, p.k = f->k, p.v = f->v, p.o = f->o, p.dout = a->dout;
  p.dq = a->dq, p.dk = a->dk, p.dv = a->dv;
  copy3(p.q_st, f->q_stride, 3), copy3(p.k_st, f->k_stride, 3), copy3(p.v_st, f->v_stride, 3);
  copy3(p.o_st, f->o_stride, 3), copy3(p.do_st, a->dout_stride, 3);
  copy3(p.dq_st, a->dq_stride, 3), copy3(p.dk_st, a->dk_stride, 3);
  copy3(p.dv_st, a->dv_stride, 3);
  p.lse = f->lse;
  p.lse_st[0] = p.delta_st[0] = f->hq * f->sq, p.lse_st[1] = p.delta_st[1] = f->sq;
  p.lse_st[2] = p.delta_st[2] = 1;
  p.acc_st[0] = f->hq * f->sq * f->head_dim, p.acc_st[1] = f->sq * f->head_dim;
  p.acc_st[2] = f->head_dim;
  p.mask = f->mask;
  for (int i = 0; i < 4; i++) p.mask_st[i] = f->mask_stride[i];
  p.mask_kind = !f->mask                          ? MASK_NONE
                : f->mask_dtype == KITE_DTYPE_U8  ? MASK_BOOL
                : f->mask_dtype == KITE_DTYPE_F32 ? MASK_F32
                                                  : MASK_SAME;
  p.scale = f->opts.scale, p.softcap = f->opts.softcap, p.window_left = f->opts.window_left;
  p.interleaved = f->opts.gqa == KITE_GQA_INTERLEAVED, p.causal = f->opts.causal != 0;
  p.sinks = f->sinks, p.dsinks = a->dsinks;
  return p;
}

BwdParams varlen_params(const kite_sdpa_varlen_backward_args *a) {
  const kite_sdpa_varlen_args *f = &a->fwd;
  BwdParams p = {};
  p.dtype = a->dtype, p.varlen = true;
  p.batch = f->batch, p.hq = f->hq, p.hkv = f->hkv, p.head_dim = f->head_dim;
  p.group = f->hkv > 0 ? f->hq / f->hkv : 0;
  p.sq = f->max_seqlen_q, p.sk = f->max_seqlen_k;
  p.rows = p.tq = f->tq, p.keys = p.tk = f->tk;
  p.cu_q = f->cu_seqlens_q, p.cu_k = f->cu_seqlens_k;
  p.q = f->q, p.k = f->k, p.v = f->v, p.o = f->o, p.dout = a->dout;
  p.dq = a->dq, p.dk = a->dk, p.dv = a->dv;
  copy3(p.q_st, f->q_stride, 2), copy3(p.k_st, f->k_stride, 2), copy3(p.v_st, f->v_stride, 2);
  copy3(p.o_st, f->o_stride, 2), copy3(p.do_st, a->dout_stride, 2);
  copy3(p.dq_st, a->dq_stride, 2), copy3(p.dk_st, a->dk_stride, 2);
  copy3(p.dv_st, a->dv_stride, 2);
  /* copy3 gave [0, token, head]; the kernels index [b, head, row] */
  int64_t *st[] = {p.q_st, p.k_st, p.v_st, p.o_st, p.do_st, p.dq_st, p.dk_st, p.dv_st};
  for (int64_t *s : st) {
    const int64_t t = s[1];
    s[1] = s[2], s[2] = t;
  }
  p.lse = f->lse;
  p.lse_st[0] = p.delta_st[0] = 0, p.lse_st[1] = p.delta_st[1] = 1;
  p.lse_st[2] = p.delta_st[2] = f->hq;
  p.acc_st[0] = 0, p.acc_st[1] = f->head_dim, p.acc_st[2] = f->hq * f->head_dim;
  p.mask_kind = MASK_NONE;
  p.scale = f->opts.scale, p.softcap = f->opts.softcap, p.window_left = f->opts.window_left;
  p.interleaved = f->opts.gqa == KITE_GQA_INTERLEAVED, p.causal = f->opts.causal != 0;
  p.sinks = f->sinks, p.dsinks = a->dsinks;
  return p;
}

unsigned warp_blocks(int64_t warps) {
  return (unsigned)((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

enum BwdVariant { BWD_GENERIC, BWD_MMA, BWD_SM90WS };

/* The whole backward: delta, then the generic kernels or a tensor-core one. */
kite_status run_bwd(kite_ctx *ctx, BwdParams p, BwdVariant var, const char *op) {
  const bool mma = var != BWD_GENERIC;
  const char *variant = var == BWD_SM90WS ? "sm90ws" : mma ? "mma" : "generic";
  if (p.dsinks && p.hq > 0 &&
      (p.rows <= 0 || p.head_dim <= 0 || p.hkv <= 0 || p.batch <= 0)) { /* no row: zeros */
    cudaStream_t s;
    const kite_status st = begin(ctx, op, &s);
    if (st != KITE_OK) return st;
    const cudaError_t e = cudaMemsetAsync(p.dsinks, 0, (size_t)p.hq * sizeof(float), s);
    if (e != cudaSuccess) return cuda_device_error(op, "cudaMemsetAsync", e);
  }
  if (p.rows * p.hq <= 0 && p.keys * p.hkv <= 0) return KITE_OK;
  if (p.head_dim <= 0 || p.hkv <= 0 || p.hq <= 0 || p.batch <= 0) return KITE_OK;
  if (p.rows * p.hq > 0x7fffffffLL * kWarpsPerBlock || p.keys * p.hkv > 0x7fffffffLL)
    return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: cuda.%s: too many rows", op, variant);
  cudaStream_t s;
  kite_status st = begin(ctx, op, &s);
  if (st != KITE_OK) return st;
  const size_t n_delta = (size_t)(p.rows * p.hq);
  const size_t n_acc = mma ? n_delta * (size_t)p.head_dim : 0;
  const int bq =
      var == BWD_SM90WS ? attn_bwd_sm90ws_tile_rows() : attn_bwd_mma_tile_rows(p.head_dim);
  p.mtiles = (p.sq + bq - 1) / bq;
  const size_t n_turn = mma && n_delta > 0 ? (size_t)(p.batch * p.hq * p.mtiles) : 0;
  void *ws = nullptr;
  if (n_delta > 0 &&
      (st = kite_ctx_workspace(ctx, (n_delta + n_acc + n_turn) * sizeof(float), &ws)) != KITE_OK)
    return st;
  p.delta = (float *)ws;
  p.dq_acc = p.delta + n_delta;
  p.dq_turn = (int *)(p.dq_acc + n_acc);
  if (n_acc) { /* the accumulator and the counters after it */
    const cudaError_t e = cudaMemsetAsync(p.dq_acc, 0, (n_acc + n_turn) * sizeof(float), s);
    if (e != cudaSuccess) return cuda_device_error(op, "cudaMemsetAsync", e);
  }
  st = with_float_type(p.dtype, op, [&](auto tag) -> kite_status {
    using T = typename decltype(tag)::type;
    const unsigned threads = 32 * kWarpsPerBlock;
    if (n_delta > 0) bwd_delta_kernel<T><<<warp_blocks(p.rows * p.hq), threads, 0, s>>>(p);
    if (n_delta > 0 && p.dsinks) bwd_dsinks_kernel<<<(unsigned)p.hq, 256, 0, s>>>(p);
    if (!mma) {
      if (n_delta > 0) bwd_dq_kernel<T><<<warp_blocks(p.rows * p.hq), threads, 0, s>>>(p);
      if (p.keys > 0) bwd_dkdv_kernel<T><<<warp_blocks(p.keys * p.hkv), threads, 0, s>>>(p);
      return KITE_OK;
    }
    if constexpr (std::is_same<T, float>::value) {
      return kite_set_error(KITE_ERR_INTERNAL, "%s: cuda.mma: f32 has no tensor-core kernel", op);
    } else {
      if (p.varlen && p.keys > 0)
        bwd_zero_dkdv_kernel<T>
            <<<grid_for_rows(p.keys * p.hkv * p.head_dim / 256 + 1), 256, 0, s>>>(p);
      const kite_status r =
          var == BWD_SM90WS ? attn_bwd_sm90ws_launch(p, s) : attn_bwd_mma_launch(p, s);
      if (r != KITE_OK) return r;
      if (n_delta > 0) bwd_dq_convert_kernel<T><<<grid_for_rows(n_acc / 256 + 1), 256, 0, s>>>(p);
      return KITE_OK;
    }
  });
  return st != KITE_OK ? st : cuda_check_launch(op, variant);
}

bool bwd_generic_ok(kite_dtype t, int64_t d, const char **why) {
  if (!float_dtype(t, why)) return false;
  return ok_unless(d > 256, "head_dim must be at most 256", why);
}

/* The tensor-core kernel's layout: bf16/f16, head_dim 64 / 128, 16-byte aligned tensors and
 * strides (every pointer given with its strides). */
bool bwd_mma_ok(kite_dtype t, int64_t d, const void *const *ptrs, const int64_t *const *strides,
                int n, int nst, const char **why) {
  if (t != KITE_DTYPE_BF16 && t != KITE_DTYPE_F16) {
    *why = "dtype must be bf16 or f16";
    return false;
  }
  if (!attn_bwd_mma_head_dim(d)) {
    *why = "head_dim must be 64 or 128";
    return false;
  }
  for (int i = 0; i < n; i++)
    if (!aligned16(ptrs[i]) || !strides_aligned(strides[i], nst, 2)) {
      *why = "needs 16-byte aligned tensors and strides";
      return false;
    }
  return true;
}

/* cuda.sm90ws's extra conditions over cuda.mma's: no mask, head_dim 64 / 128, a Hopper
 * device. */
bool bwd_sm90ws_ok(bool mask, int64_t d, const char **why) {
  if (mask) {
    *why = "no mask (cuda.mma takes masks)";
    return false;
  }
  if (!attn_bwd_sm90ws_head_dim(d)) {
    *why = "head_dim must be 64 or 128";
    return false;
  }
  return ok_unless(!all_devices_sm90(), "needs compute capability 9.0", why);
}

} // namespace

/* ---- entry points -------------------------------------------------------------------------- */
extern "C" CUDA_SUPPORTS(cuda_sdpa_bwd_generic_supports) {
  const kite_sdpa_backward_args *a = (const kite_sdpa_backward_args *)args;
  if (!bwd_generic_ok(a->dtype, a->fwd.head_dim, why)) return false;
  return ok_unless(a->fwd.mask && a->fwd.mask_dtype != KITE_DTYPE_U8 &&
                       a->fwd.mask_dtype != KITE_DTYPE_F32 && a->fwd.mask_dtype != a->dtype,
                   "mask must be u8, f32 or the dtype", why);
}

extern "C" CUDA_SUPPORTS(cuda_sdpa_bwd_mma_supports) {
  const kite_sdpa_backward_args *a = (const kite_sdpa_backward_args *)args;
  const kite_sdpa_args *f = &a->fwd;
  if (!cuda_sdpa_bwd_generic_supports(k, args, why)) return false;
  const void *ptrs[] = {f->q, f->k, f->v, f->o, a->dout, a->dq, a->dk, a->dv};
  const int64_t *st[] = {f->q_stride,    f->k_stride,  f->v_stride,  f->o_stride,
                         a->dout_stride, a->dq_stride, a->dk_stride, a->dv_stride};
  if (!bwd_mma_ok(a->dtype, f->head_dim, ptrs, st, 8, 3, why)) return false;
  return ok_unless(f->sq > 0x3fffffff || f->sk > 0x3fffffff || f->hkv > 65535 || f->batch > 65535 ||
                       f->batch * f->hq * (f->sq / 32 + 1) > (1LL << 24),
                   "sequences, heads or batch too large", why);
}

extern "C" CUDA_SUPPORTS(cuda_sdpa_bwd_sm90ws_supports) {
  const kite_sdpa_backward_args *a = (const kite_sdpa_backward_args *)args;
  if (!cuda_sdpa_bwd_mma_supports(k, args, why)) return false;
  return bwd_sm90ws_ok(a->fwd.mask != NULL, a->fwd.head_dim, why);
}

extern "C" CUDA_RUN(cuda_sdpa_bwd_generic_run) {
  return run_bwd(ctx, dense_params((const kite_sdpa_backward_args *)args), BWD_GENERIC,
                 "sdpa_backward");
}

extern "C" CUDA_RUN(cuda_sdpa_bwd_mma_run) {
  return run_bwd(ctx, dense_params((const kite_sdpa_backward_args *)args), BWD_MMA,
                 "sdpa_backward");
}

extern "C" CUDA_RUN(cuda_sdpa_bwd_sm90ws_run) {
  return run_bwd(ctx, dense_params((const kite_sdpa_backward_args *)args), BWD_SM90WS,
                 "sdpa_backward");
}

extern "C" CUDA_SUPPORTS(cuda_sdpa_varlen_bwd_generic_supports) {
  const kite_sdpa_varlen_backward_args *a = (const kite_sdpa_varlen_backward_args *)args;
  return bwd_generic_ok(a->dtype, a->fwd.head_dim, why);
}

extern "C" CUDA_SUPPORTS(cuda_sdpa_varlen_bwd_mma_supports) {
  const kite_sdpa_varlen_backward_args *a = (const kite_sdpa_varlen_backward_args *)args;
  const kite_sdpa_varlen_args *f = &a->fwd;
  const void *ptrs[] = {f->q, f->k, f->v, f->o, a->dout, a->dq, a->dk, a->dv};
  const int64_t *st[] = {f->q_stride,    f->k_stride,  f->v_stride,  f->o_stride,
                         a->dout_stride, a->dq_stride, a->dk_stride, a->dv_stride};
  if (!bwd_mma_ok(a->dtype, f->head_dim, ptrs, st, 8, 2, why)) return false;
  return ok_unless(f->max_seqlen_q > 0x3fffffff || f->max_seqlen_k > 0x3fffffff || f->hkv > 65535 ||
                       f->batch > 65535 ||
                       f->batch * f->hq * (f->max_seqlen_q / 32 + 1) > (1LL << 24),
                   "sequences, heads or batch too large", why);
}

extern "C" CUDA_SUPPORTS(cuda_sdpa_varlen_bwd_sm90ws_supports) {
  const kite_sdpa_varlen_backward_args *a = (const kite_sdpa_varlen_backward_args *)args;
  if (!cuda_sdpa_varlen_bwd_mma_supports(k, args, why)) return false;
  return bwd_sm90ws_ok(false, a->fwd.head_dim, why);
}

extern "C" CUDA_RUN(cuda_sdpa_varlen_bwd_generic_run) {
  return run_bwd(ctx, varlen_params((const kite_sdpa_varlen_backward_args *)args), BWD_GENERIC,
                 "sdpa_varlen_backward");
}

extern "C" CUDA_RUN(cuda_sdpa_varlen_bwd_mma_run) {
  return run_bwd(ctx, varlen_params((const kite_sdpa_varlen_backward_args *)args), BWD_MMA,
                 "sdpa_varlen_backward");
}

extern "C" CUDA_RUN(cuda_sdpa_varlen_bwd_sm90ws_run) {
  return run_bwd(ctx, varlen_params((const kite_sdpa_varlen_backward_args *)args), BWD_SM90WS,
                 "sdpa_varlen_backward");
}
