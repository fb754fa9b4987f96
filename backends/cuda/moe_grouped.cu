/*
 * fused_moe_ex on tensor cores (f16 / bf16, more pairs than decode's): the (token, pick) pairs
 * sorted by expert, the two products of each expert through cuBLASLt.
 *   1. route (moe.cuh): the pairs of each expert, each pair's row; the counts come to the host
 *      (a 4 E-byte copy and a stream synchronization);
 *   2. xs[rows, H] = x[token of row] (T);
 *   3. h[rows, 2I] = xs . w13[e]^T in f32 (w13[e] stored [2I, H], or [H, 2I] when transposed:
 *      read in place either way, as cuBLAS's transposed or plain operand);
 *   4. a[rows, I] = act(gate + b13[e], up + b13[e]) rounded to T (split or interleaved rows);
 *   5. o[rows, H] = a . w2[e]^T in f32 (w2[e] [H, I], or [I, H] transposed), over h's memory;
 *   6. y[t] = sum over picks j, in order, of weights[t, j] (o[row of (t, j)] + b2[e]) (moe.cuh's
 *      combine: f32, no atomics, the same bits run after run).
 * Products 3 and 5 are one strided-batched cuBLASLt call over all E experts when their row counts
 * are near equal (each expert's rows padded with zero rows to the largest count, when that adds
 * at most half as many rows again: a prefill batch under a balanced router; E calls of a few
 * hundred rows each would leave most SMs idle), else one call per expert that has rows (decode:
 * only the touched experts' weights are read).
 * The host synchronization cannot happen inside CUDA graph capture: a capturing stream, and a
 * call cuBLASLt offers no algorithm for, runs the pairs kernel (moe_pairs.cu) instead.
 */
#include <vector>

#include "cuda_backend.h"
#include "moe.cuh"

using namespace kite_cuda;

namespace {

/* Pairs this path leaves to the pairs kernel (moe_pairs.cu): tokens * topk <= max(2 experts, 8).
 * There, at decode, each touched expert's weights are read about once by matrix-vector products
 * near memory speed (the pairs of an expert side by side share its rows through L2), while this
 * path pays a host synchronization and a cuBLASLt call per expert of a few rows. Placed by
 * scripts/moe_peer.py on an H100 (bf16): at 2 pairs per expert the pairs kernel took 606 us
 * against 991 (gpt-oss-20b, T 16) and 10.2 ms against 9.0 (DeepSeek-V3, T 64); at 8 per expert
 * 1614 us against 1228 (gpt-oss-20b, T 64). */
bool few_pairs(const kite_moe_args *m) {
  const int64_t most = 2 * m->experts > 8 ? 2 * m->experts : 8;
  return m->tokens * m->topk <= most;
}

/* xs[r] = x[src_row[r]], a zero row where src_row[r] < 0 (an expert's padding). */
template <typename T>
__global__ void gather_kernel(const T *x, int64_t x_stride, const int32_t *src_row, int64_t rows,
                              int64_t H, T *xs) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const int64_t t = src_row[r];
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < H;
         c += (int64_t)gridDim.x * blockDim.x)
      xs[r * H + c] = t >= 0 ? x[t * x_stride + c] : from_float<T>(0.0f);
  }
}

/* a[r, i] = act(gate, up) of row r's expert, rounded to T; zero on padding rows. */
template <typename T>
__global__ void act_kernel(const float *h, const int32_t *row_expert, int64_t rows, int64_t I,
                           const T *b13, kite_moe_opts o, T *out) {
  const bool il = o.layout == KITE_MOE_INTERLEAVED;
  const int64_t total = rows * I;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t r = i / I, c = i % I, e = row_expert[r];
    if (e < 0) {
      out[i] = from_float<T>(0.0f);
      continue;
    }
    const int64_t gr = il ? 2 * c : c, ur = il ? 2 * c + 1 : I + c;
    const float gate = h[r * 2 * I + gr] + (b13 ? to_float(b13[e * 2 * I + gr]) : 0.0f);
    const float up = h[r * 2 * I + ur] + (b13 ? to_float(b13[e * 2 * I + ur]) : 0.0f);
    out[i] = from_float<T>(moe_ex_activate(gate, up, o.act, o.alpha, o.limit));
  }
}

size_t up256(size_t n) {
  return (n + 255) & ~(size_t)255;
}

/* The rows of each expert as the products see them: counts on the host, and either one padded
 * batch (pad > 0 rows per expert) or packed offsets. */
struct Plan {
  std::vector<int32_t> count;
  std::vector<int64_t> first;
  int64_t pad = 0, rows = 0;
};

/* c[rows, n] (f32) = a[rows, k] . b[e]^T per expert: b[e] stored [n, k] (rows = outputs) or, when
 * tr, [k, n]. 1 ran, 0 cuBLASLt took no such call, -1 error set. */
int expert_products(const Plan &p, kite_dtype dt, const void *a, const void *b, float *c, int64_t n,
                    int64_t k, bool tr, cudaStream_t s) {
  const size_t es = kite_dtype_size(dt);
  LtGemm g = {};
  g.dtype = dt, g.n = n, g.k = k, g.c_f32 = true;
  g.lda = k, g.ldc = n, g.b_trans = !tr, g.ldb = tr ? n : k;
  if (p.pad > 0) {
    g.m = p.pad, g.batch = (int64_t)p.count.size();
    g.a = a, g.b = b, g.c = c;
    g.stride_a = p.pad * k, g.stride_b = n * k, g.stride_c = p.pad * n;
    return lt_gemm(g, "fused_moe_ex", "grouped", s);
  }
  for (size_t e = 0; e < p.count.size(); e++) {
    if (p.count[e] <= 0) continue;
    g.m = p.count[e];
    g.a = (const char *)a + (size_t)(p.first[e] * k) * es;
    g.b = (const char *)b + (size_t)((int64_t)e * n * k) * es;
    g.c = c + p.first[e] * n;
    const int r = lt_gemm(g, "fused_moe_ex", "grouped", s);
    if (r <= 0) return r;
  }
  return 1;
}

} // namespace

extern "C" CUDA_SUPPORTS(cuda_fused_moe_ex_grouped_supports) {
  (void)k;
  const kite_moe_args *m = &((const kite_moe_ex_args *)args)->moe;
  if (m->dtype != KITE_DTYPE_F16 && m->dtype != KITE_DTYPE_BF16)
    return ok_unless(true, "f16 / bf16 only", why);
  if (m->inter <= 0) return ok_unless(true, "inter 0 (no products)", why);
  return ok_unless(few_pairs(m), "tokens * topk <= max(2 experts, 8): the pairs kernel's", why);
}

extern "C" CUDA_RUN(cuda_fused_moe_ex_grouped_run) {
  const kite_moe_ex_args *ax = (const kite_moe_ex_args *)args;
  const kite_moe_args *m = &ax->moe;
  if (m->tokens <= 0 || m->hidden <= 0) return KITE_OK;
  cudaStream_t s;
  kite_status st = begin(ctx, "fused_moe_ex", &s);
  if (st != KITE_OK) return st;
  if (stream_capturing(s) || m->inter <= 0 ||
      (m->dtype != KITE_DTYPE_F16 && m->dtype != KITE_DTYPE_BF16))
    return cuda_fused_moe_ex_run(k, ctx, args);

  const int64_t E = m->experts, P = m->tokens * m->topk, H = m->hidden, I = m->inter;
  const int64_t cap = P + P / 2; /* rows at most: packed P, padded E * pad <= P + P / 2 */
  const size_t es = kite_dtype_size(m->dtype);
  const size_t sizes[7] = {(size_t)E * 8,
                           (size_t)P * 4,
                           (size_t)cap * 8,
                           4,
                           (size_t)cap * H * es,
                           (size_t)cap * I * es,
                           (size_t)cap * (2 * I > H ? 2 * I : H) * 4};
  size_t off[7], total = 0;
  for (int i = 0; i < 7; i++) off[i] = total, total += up256(sizes[i] ? sizes[i] : 1);
  void *ws;
  if ((st = kite_ctx_workspace(ctx, total, &ws)) != KITE_OK) return st;
  char *base = (char *)ws;
  MoeWork w = {};
  w.count = (int32_t *)(base + off[0]), w.cursor = w.count + E;
  w.row_of = (int32_t *)(base + off[1]);
  w.src_row = (int32_t *)(base + off[2]), w.row_expert = w.src_row + cap;
  w.tile_count = (int32_t *)(base + off[3]);
  void *xs = base + off[4];
  w.act = base + off[5];
  w.h = w.o = (float *)(base + off[6]); /* h is spent when o is written */

  /* 1. packed routing; its counts decide the layout of the products */
  (void)cudaMemsetAsync(w.src_row, 0xff, (size_t)cap * 8, s); /* src_row, row_expert: -1 */
  moe_route_launch(*m, w, 0, 0, s);
  Plan p;
  p.count.resize((size_t)E);
  p.first.resize((size_t)E);
  if (cudaMemcpyAsync(p.count.data(), w.count, (size_t)E * 4, cudaMemcpyDeviceToHost, s) !=
          cudaSuccess ||
      cudaStreamSynchronize(s) != cudaSuccess)
    return cuda_check_launch("fused_moe_ex", "grouped");
  int64_t most = 0;
  for (int64_t e = 0; e < E; e++) {
    p.first[(size_t)e] = p.rows;
    p.rows += p.count[(size_t)e];
    most = p.count[(size_t)e] > most ? p.count[(size_t)e] : most;
  }
  if (p.rows == 0) { /* every id out of range: y = 0 */
    (void)cudaMemset2DAsync(m->y, (size_t)m->y_stride * es, 0, (size_t)H * es, (size_t)m->tokens,
                            s);
    return cuda_check_launch("fused_moe_ex", "grouped");
  }
  if (E > 1 && E * most <= cap) { /* near-equal counts: one batch, rows padded per expert */
    p.pad = most, p.rows = E * most;
    (void)cudaMemsetAsync(w.src_row, 0xff, (size_t)cap * 8, s);
    moe_route_launch(*m, w, 0, most, s);
  }

  return with_float_type(m->dtype, "fused_moe_ex", [&](auto tag) -> kite_status {
    using T = typename decltype(tag)::type;
    const bool tr = ax->opts.transposed != 0;
    const dim3 rows_grid((unsigned)((H + 255) / 256), (unsigned)(p.rows < 65535 ? p.rows : 65535));
    gather_kernel<T>
        <<<rows_grid, 256, 0, s>>>((const T *)m->x, m->x_stride, w.src_row, p.rows, H, (T *)xs);
    int r = expert_products(p, m->dtype, xs, m->w13, w.h, 2 * I, H, tr, s);
    if (r > 0) {
      const int64_t n = p.rows * I;
      const unsigned blocks = (unsigned)((n + 255) / 256 < 65535 ? (n + 255) / 256 : 65535);
      act_kernel<T><<<blocks, 256, 0, s>>>(w.h, w.row_expert, p.rows, I, (const T *)ax->b13,
                                           ax->opts, (T *)w.act);
      r = expert_products(p, m->dtype, w.act, m->w2, w.o, H, I, tr, s);
    }
    if (r < 0) return KITE_ERR_DEVICE;
    if (r == 0) return cuda_fused_moe_ex_run(k, ctx, args); /* no cuBLASLt algorithm */
    moe_combine_launch<T>(*m, w, ax->b2, s);
    return cuda_check_launch("fused_moe_ex", "grouped");
  });
}
