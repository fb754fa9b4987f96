/*
 * fused_moe_ex as matrix-vector products over the (token, pick) pairs: the kernel of decode
 * sizes (few pairs: each touched expert's weights are read about once, at memory speed), of f32
 * and of CUDA graph capture (no host synchronization, no allocation: the workspace only).
 *
 * Pair p = (token t, pick j) of a chunk of tokens, e = ids[t, j]; P pairs per chunk:
 *   1. gemv: h[s][p][n] = sum over c in input chunk s of x_t[c] W13_e(n, c), n < 2I (f32);
 *   2. act:  a[p][i] = the activation of (gate + b13, up + b13), the gate and up rows summed
 *            over the partials s in order, rounded to the dtype once (kept as f32);
 *   3. gemv: o[s][p][c] = sum over i in chunk s of a[p][i] W2_e(c, i), c < H;
 *   4. combine: y[t][c] = sum over picks j in order of weights[t, j] (sum_s o[s][p][c] +
 *            b2[e][c]), f32, rounded once.
 * W_e(n, c) lies at w + e N K + n sn + c sc. Rows contiguous (sc 1: w13 [E, 2I, H], w2 [E, H, I]):
 * a warp per (p, n), lanes along c with 16-byte loads, a shuffle reduction. Columns contiguous
 * (sn 1, gpt-oss's transposed storage): a thread per 8 consecutive n (one 16-byte load per row),
 * the 8 warps of a CTA on interleaved rows c of the same n, summed through shared memory in warp
 * order. Both split K into chunks s when the (p, n) work alone gives too few CTAs to fill the GPU.
 * Every sum runs in a fixed order and every output has one writer: the same bits run after run.
 * Pairs with an id outside [0, E) are skipped by every kernel.
 */
#include "cuda_backend.h"
#include "moe.cuh"

using namespace kite_cuda;

namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kUnroll = 4;               /* rows / packs in flight per thread */
constexpr size_t kWorkBytes = 64u << 20; /* workspace per token chunk, at most (about) */

/* The pairs of a chunk: ids of its first token, row stride, picks per token, experts. */
struct Pairs {
  const int32_t *ids;
  int64_t stride, topk, experts;
};

/* Expert of pair p, or -1 when its id is out of range. */
__device__ __forceinline__ int64_t pair_expert(const Pairs &q, int64_t p) {
  const int64_t e = q.ids[(p / q.topk) * q.stride + p % q.topk];
  return e >= 0 && e < q.experts ? e : -1;
}

/* One product out[s][p][n] = sum over c in chunk s of in_p[c] W_e(n, c): in_p = in + (p / div)
 * stride (x rows shared by a token's picks: div = topk; a rows: div 1). */
template <typename In> struct Gemv {
  const In *in;
  int64_t stride, div;
  float *out;          /* [S][P][N] */
  int64_t P, N, K, kc; /* kc: the K chunk of one s */
  int64_t sn, sc;      /* element strides of W_e */
};

/* Rows contiguous: warp n P + p of the x grid (the pairs of one output side by side: pairs of the
 * same expert read its rows at about the same time, from L2 after the first), chunk s =
 * blockIdx.y. V: 8 elements per lane per load (K % 8 == 0, rows and input 16-byte aligned), else
 * one. */
template <typename T, typename In, bool V>
__global__ void __launch_bounds__(kThreads) gemv_rows_kernel(const T *w, Pairs q, Gemv<In> g) {
  constexpr int VW = V ? 8 : 1;
  const int64_t wid = blockIdx.x * (int64_t)kWarps + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (wid >= g.P * g.N) return;
  const int64_t p = wid % g.P, n = wid / g.P, e = pair_expert(q, p);
  if (e < 0) return;
  const T *wr = w + e * g.N * g.K + n * g.sn;
  const In *in = g.in + (p / g.div) * g.stride;
  const int64_t c0 = blockIdx.y * g.kc, c1 = c0 + g.kc < g.K ? c0 + g.kc : g.K;
  float acc = 0.0f;
  for (int64_t c = c0 + lane * VW; c < c1; c += kUnroll * 32 * VW) {
    float wv[kUnroll][VW], xv[kUnroll][VW];
#pragma unroll
    for (int u = 0; u < kUnroll; u++) {
      const int64_t cc = c + u * 32 * VW;
      if (cc < c1) {
        load_floats<VW>(wr + cc, wv[u]);
        load_floats<VW>(in + cc, xv[u]);
      } else {
#pragma unroll
        for (int v = 0; v < VW; v++) wv[u][v] = xv[u][v] = 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; u++)
#pragma unroll
      for (int v = 0; v < VW; v++) acc = fmaf(xv[u][v], wv[u][v], acc);
  }
  acc = warp_reduce(acc, Sum());
  if (lane == 0) g.out[(blockIdx.y * g.P + p) * g.N + n] = acc;
}

/* Columns contiguous: CTA (column block blockIdx.x / P of 32 VW n, pair blockIdx.x % P, as the
 * rows kernel; chunk blockIdx.y); thread lane owns n0 + lane VW .. + VW, warp w the rows c0 + w + 8
 * i. V: 8 consecutive n per load (N % 8 == 0, W 16-byte aligned). */
template <typename T, typename In, bool V>
__global__ void __launch_bounds__(kThreads) gemv_cols_kernel(const T *w, Pairs q, Gemv<In> g) {
  constexpr int VW = V ? 8 : 1, NB = 32 * VW;
  __shared__ float part[kWarps][NB];
  const int64_t p = blockIdx.x % g.P, e = pair_expert(q, p);
  if (e < 0) return; /* the whole CTA: no barrier is skipped by part of it */
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t n0 = (blockIdx.x / g.P) * NB, n = n0 + lane * VW;
  const bool live = n < g.N; /* V: N % 8 == 0, so a live pack is whole */
  const T *wc = w + e * g.N * g.K + n * g.sn;
  const In *in = g.in + (p / g.div) * g.stride;
  const int64_t c0 = blockIdx.y * g.kc, c1 = c0 + g.kc < g.K ? c0 + g.kc : g.K;
  float acc[VW];
#pragma unroll
  for (int v = 0; v < VW; v++) acc[v] = 0.0f;
  if (live)
    for (int64_t c = c0 + warp; c < c1; c += kUnroll * kWarps) {
      float wv[kUnroll][VW], xv[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; u++) {
        const int64_t cc = c + u * kWarps;
        if (cc < c1) {
          load_floats<VW>(wc + cc * g.sc, wv[u]);
          xv[u] = to_float(in[cc]);
        } else {
          xv[u] = 0.0f;
#pragma unroll
          for (int v = 0; v < VW; v++) wv[u][v] = 0.0f;
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; u++)
#pragma unroll
        for (int v = 0; v < VW; v++) acc[v] = fmaf(xv[u], wv[u][v], acc[v]);
    }
#pragma unroll
  for (int v = 0; v < VW; v++) part[warp][lane * VW + v] = acc[v];
  __syncthreads();
  for (int i = threadIdx.x; i < NB; i += kThreads) {
    if (n0 + i >= g.N) continue;
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < kWarps; k++) sum += part[k][i];
    g.out[(blockIdx.y * g.P + p) * g.N + n0 + i] = sum;
  }
}

/* a[p][i] of the valid pairs: gate / up rows (interleaved 2i, 2i + 1; split i, I + i) of h's S
 * partials summed in order, plus b13, activated, rounded to T. */
template <typename T>
__global__ void act_kernel(const float *h, int64_t S, Pairs q, int64_t P, int64_t I, const T *b13,
                           kite_moe_opts o, float *a) {
  const bool il = o.layout == KITE_MOE_INTERLEAVED;
  for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < P * I;
       k += (int64_t)gridDim.x * blockDim.x) {
    const int64_t p = k / I, i = k % I, e = pair_expert(q, p);
    if (e < 0) continue;
    const int64_t gr = il ? 2 * i : i, ur = il ? 2 * i + 1 : I + i;
    float gate = 0.0f, up = 0.0f;
    for (int64_t s = 0; s < S; s++) {
      gate += h[(s * P + p) * 2 * I + gr];
      up += h[(s * P + p) * 2 * I + ur];
    }
    if (b13) gate += to_float(b13[e * 2 * I + gr]), up += to_float(b13[e * 2 * I + ur]);
    a[k] = round_to<T>(moe_ex_activate(gate, up, o.act, o.alpha, o.limit));
  }
}

/* y[t][c] of the chunk's tokens: the valid picks in order, o's S partials summed in order. */
template <typename T>
__global__ void combine_kernel(const float *o, int64_t S, Pairs q, int64_t tokens, int64_t H,
                               const float *weights, int64_t w_stride, const T *b2, T *y,
                               int64_t y_stride) {
  const int64_t P = tokens * q.topk;
  for (int64_t t = blockIdx.y; t < tokens; t += gridDim.y)
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < H;
         c += (int64_t)gridDim.x * blockDim.x) {
      float acc = 0.0f;
      for (int64_t j = 0; j < q.topk; j++) {
        const int64_t p = t * q.topk + j, e = pair_expert(q, p);
        if (e < 0) continue;
        float v = 0.0f;
        for (int64_t s = 0; s < S; s++) v += o[(s * P + p) * H + c];
        if (b2) v += to_float(b2[e * H + c]);
        acc = fmaf(weights[t * w_stride + j], v, acc);
      }
      y[t * y_stride + c] = from_float<T>(acc);
    }
}

int64_t cdiv(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

size_t up256(size_t n) {
  return (n + 255) & ~(size_t)255;
}

/* How one product of P pairs (N outputs, K inputs each) is laid on the GPU. */
struct Shape {
  bool cols, vec; /* columns kernel; 16-byte loads */
  int64_t blocks; /* CTAs of one chunk s */
  int64_t kc, S;  /* K chunk, chunks */
};

/* rows: sc 1; cols: sn 1. vec_ok: the alignment that 16-byte loads need. Chunks of K are added
 * until about 8 CTAs per multiprocessor are in flight; each chunk keeps at least one unrolled
 * step of every thread (rows: 4 x 32 lanes x 8 elements; columns: 4 x 8 warps rows). */
Shape plan_product(bool cols, bool vec_ok, int64_t P, int64_t N, int64_t K, int sms) {
  Shape sh;
  sh.cols = cols, sh.vec = vec_ok;
  const int64_t vw = vec_ok ? 8 : 1;
  sh.blocks = cols ? cdiv(N, 32 * vw) * P : cdiv(P * N, kWarps);
  const int64_t step = cols ? kUnroll * kWarps : kUnroll * 32 * vw;
  const int64_t want = 8 * (int64_t)sms;
  const int64_t split = sh.blocks >= want || sh.blocks == 0 ? 1 : cdiv(want, sh.blocks);
  sh.kc = cdiv(cdiv(K > 0 ? K : 1, split), step) * step;
  sh.S = cdiv(K > 0 ? K : 1, sh.kc);
  return sh;
}

/* The product's arguments; W_e stored [N, K] (rows = outputs: sn K, sc 1) or, transposed,
 * [K, N] (sn 1, sc N). */
template <typename In>
Gemv<In> gemv_of(const In *in, int64_t stride, int64_t div, float *out, int64_t P, int64_t N,
                 int64_t K, const Shape &sh, bool tr) {
  return Gemv<In>{in, stride, div, out, P, N, K, sh.kc, tr ? 1 : K, tr ? N : 1};
}

template <typename T, typename In>
void gemv_launch(const Shape &sh, const T *w, const Pairs &q, const Gemv<In> &g, cudaStream_t s) {
  const dim3 grid((unsigned)sh.blocks, (unsigned)sh.S);
  if (sh.cols) {
    if (sh.vec)
      gemv_cols_kernel<T, In, true><<<grid, kThreads, 0, s>>>(w, q, g);
    else
      gemv_cols_kernel<T, In, false><<<grid, kThreads, 0, s>>>(w, q, g);
  } else {
    if (sh.vec)
      gemv_rows_kernel<T, In, true><<<grid, kThreads, 0, s>>>(w, q, g);
    else
      gemv_rows_kernel<T, In, false><<<grid, kThreads, 0, s>>>(w, q, g);
  }
}

/* The two products of a chunk of tc tokens, and the f32 workspace they take (h, a, o). */
struct Chunk {
  Shape up, down;
  size_t h_bytes, a_bytes, o_bytes;
};

Chunk plan_chunk(const kite_moe_ex_args &ax, int64_t tc, bool vec_up, bool vec_down, int sms) {
  const kite_moe_args &m = ax.moe;
  const bool tr = ax.opts.transposed != 0;
  const int64_t P = tc * m.topk, H = m.hidden, I = m.inter;
  Chunk c;
  c.up = plan_product(tr, vec_up, P, 2 * I, H, sms);
  c.down = plan_product(tr, vec_down, P, H, I, sms);
  c.h_bytes = up256((size_t)(c.up.S * P * 2 * I) * 4 + 4);
  c.a_bytes = up256((size_t)(P * I) * 4 + 4);
  c.o_bytes = up256((size_t)(c.down.S * P * H) * 4 + 4);
  return c;
}

size_t chunk_bytes(const Chunk &c) {
  return c.h_bytes + c.a_bytes + c.o_bytes;
}

} // namespace

extern "C" CUDA_RUN(cuda_fused_moe_ex_run) {
  const kite_moe_ex_args *ax = (const kite_moe_ex_args *)args;
  const kite_moe_args *m = &ax->moe;
  if (m->tokens <= 0 || m->hidden <= 0) return KITE_OK;
  const int64_t T_ = m->tokens, H = m->hidden, I = m->inter, K_ = m->topk;
  const bool tr = ax->opts.transposed != 0;
  const size_t es = kite_dtype_size(m->dtype);
  /* 16-byte loads: along the stored rows (K % 8, and x's rows for the first product's input),
   * or across 8 columns (N % 8); the workspace's a rows are aligned when I % 8 == 0 */
  const bool w_al = aligned16(m->w13) && aligned16(m->w2);
  const bool vec_up =
      w_al && (tr ? (2 * I) % 8 == 0 : H % 8 == 0 && rows_aligned16(m->x, T_, m->x_stride, es));
  const bool vec_down = w_al && (tr ? H % 8 == 0 : I % 8 == 0);
  const int sms = sm_count();
  /* tokens per chunk: halved until the workspace fits (a single token always runs) */
  int64_t tc = T_;
  while (tc > 1 && chunk_bytes(plan_chunk(*ax, tc, vec_up, vec_down, sms)) > kWorkBytes)
    tc = (tc + 1) / 2;
  size_t need = chunk_bytes(plan_chunk(*ax, tc, vec_up, vec_down, sms));
  if (T_ % tc) {
    const size_t last = chunk_bytes(plan_chunk(*ax, T_ % tc, vec_up, vec_down, sms));
    need = last > need ? last : need;
  }
  void *ws;
  kite_status st = kite_ctx_workspace(ctx, need, &ws);
  if (st != KITE_OK) return st;
  return launch_typed(ctx, "fused_moe_ex", "pairs", m->dtype, [&](auto tag, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    const T *x = (const T *)m->x, *w13 = (const T *)m->w13, *w2 = (const T *)m->w2;
    for (int64_t t0 = 0; t0 < T_; t0 += tc) {
      const int64_t n = T_ - t0 < tc ? T_ - t0 : tc, P = n * K_;
      const Chunk c = plan_chunk(*ax, n, vec_up, vec_down, sms);
      float *h = (float *)ws, *a = (float *)((char *)ws + c.h_bytes);
      float *o = (float *)((char *)ws + c.h_bytes + c.a_bytes);
      const Pairs q = {m->ids + t0 * m->ids_stride, m->ids_stride, K_, m->experts};
      int64_t S_down = 0; /* I 0: no products, y = the weighted b2; k 0: y = 0 */
      if (I > 0 && P > 0) {
        /* a token's K_ picks share its x row */
        const Gemv<T> g1 = gemv_of(x + t0 * m->x_stride, m->x_stride, K_, h, P, 2 * I, H, c.up, tr);
        gemv_launch(c.up, w13, q, g1, s);
        const int64_t total = P * I, blocks = cdiv(total, kThreads);
        act_kernel<T><<<(unsigned)(blocks < 65535 ? blocks : 65535), kThreads, 0, s>>>(
            h, c.up.S, q, P, I, (const T *)ax->b13, ax->opts, a);
        const Gemv<float> g2 = gemv_of(a, I, 1, o, P, H, I, c.down, tr);
        gemv_launch(c.down, w2, q, g2, s);
        S_down = c.down.S;
      }
      const dim3 grid((unsigned)cdiv(H, kThreads), (unsigned)(n < 65535 ? n : 65535));
      combine_kernel<T><<<grid, kThreads, 0, s>>>(
          o, S_down, q, n, H, m->weights + t0 * m->weights_stride, m->weights_stride,
          (const T *)ax->b2, (T *)m->y + t0 * m->y_stride, m->y_stride);
    }
    return KITE_OK;
  });
}
