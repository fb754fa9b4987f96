/*
 * cross_entropy forward and backward (kite.h "Cross-entropy"): one block per row of
 * logits[N, V]; a row of a vocabulary (V = 128256 bf16 is 256 KB) is streamed, never held.
 *   forward:  one pass: each thread keeps an online max and sum of exp (base 2) and the sum of z
 *             over its elements; the block combines them into lse, and the row's loss goes to
 *             loss[i] (reduction none) or to a scratch row that one block then sums in a fixed
 *             order (sum / mean): no float atomics, the same bits run after run.
 *   backward: one pass reading the logits and writing dlogits (the same elements by the same
 *             thread, so dlogits may be the logits themselves).
 * "vec" takes 16-byte accesses (rows 16-byte aligned; a tail of V % 8 elements goes one at a
 * time), "generic" one element at a time for any layout. Two packs are in flight per thread and
 * step so that a block keeps enough bytes moving to stream at memory speed.
 * A target outside [0, V) that is not ignore_index cannot be reported from the device: its row
 * gets a NaN loss and a zero gradient, and the target is never used as an index.
 * cross_entropy_with_grad's one-pass kernel, a row per cluster, is in cross_entropy_cluster.cu.
 */
#include "cross_entropy.cuh"

using namespace kite_cuda;

namespace {

constexpr int kCeThreads = 512, kCeUnroll = 2, kReduceThreads = 256;

/* Adds N logits to a thread's statistics: online max / sum of 2^(z log2 e), and the sum of z. */
template <int N>
__device__ __forceinline__ void ce_add(float *v, float c, OnlineSoftmax &st, float &sz) {
#pragma unroll
  for (int e = 0; e < N; e++) {
    const float z = ce_cap(v[e], c);
    sz += z;
    v[e] = __fmul_rn(z, kLog2e); /* rounded, never fused into a later subtraction */
  }
  st.add<N>(v);
}

template <typename T, int W, CeMode M>
__global__ __launch_bounds__(kCeThreads) void ce_rows_kernel(CeRows p) {
  const float c = p.o.softcap;
  const int64_t V = p.vocab, vmain = V / W * W, step = (int64_t)blockDim.x * W;
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    const T *x = (const T *)p.logits + r * p.logits_stride;
    const int32_t tg = p.targets[r];
    const bool ignored = tg == p.o.ignore_index;
    const bool bad = !ignored && (tg < 0 || (int64_t)tg >= V);
    float lse, lse2; /* lse2: in log2 units */
    if (M != CeMode::bwd) {
      /* the target's z is read before the reductions' barriers: the fused mode overwrites the
       * row after them */
      float zt = 0.0f;
      if (threadIdx.x == 0 && !ignored && !bad) zt = ce_cap(to_float(x[tg]), c);
      OnlineSoftmax st;
      float sz = 0.0f;
      for (int64_t j0 = (int64_t)threadIdx.x * W; j0 < vmain; j0 += step * kCeUnroll) {
        float v[kCeUnroll][W];
#pragma unroll
        for (int u = 0; u < kCeUnroll; u++)
          if (j0 + u * step < vmain) load_floats<W>(x + j0 + u * step, v[u]);
#pragma unroll
        for (int u = 0; u < kCeUnroll; u++)
          if (j0 + u * step < vmain) ce_add<W>(v[u], c, st, sz);
      }
      for (int64_t j = vmain + threadIdx.x; j < V; j += blockDim.x) {
        float v = to_float(x[j]);
        ce_add<1>(&v, c, st, sz);
      }
      st.reduce_block();
      sz = block_sum(sz);
      lse2 = st.m + log2f(st.sum);
      lse = lse2 * kLn2;
      if (threadIdx.x == 0) ce_row_out(p, r, st.m, st.sum, sz, zt, ignored, bad);
    }
    if (M == CeMode::fwd) continue;
    if (M == CeMode::bwd) lse = p.lse[r], lse2 = lse * kLog2e;
    const bool zero = ignored || bad;
    const CeGrad grad = ce_row_grad(p, r, lse, lse2, tg, zero);
    T *d = (T *)p.dlogits + r * p.dlogits_stride;
    for (int64_t j0 = (int64_t)threadIdx.x * W; j0 < vmain; j0 += step * kCeUnroll) {
      float v[kCeUnroll][W];
#pragma unroll
      for (int u = 0; u < kCeUnroll; u++) {
        const int64_t j = j0 + u * step;
        if (j >= vmain) continue;
        if (zero) {
#pragma unroll
          for (int e = 0; e < W; e++) v[u][e] = 0.0f;
        } else {
          load_floats<W>(x + j, v[u]);
        }
      }
#pragma unroll
      for (int u = 0; u < kCeUnroll; u++) {
        const int64_t j = j0 + u * step;
        if (j >= vmain) continue;
        if (!zero)
#pragma unroll
          for (int e = 0; e < W; e++) v[u][e] = grad(v[u][e], j + e);
        store_floats<W>(d + j, v[u]);
      }
    }
    for (int64_t j = vmain + threadIdx.x; j < V; j += blockDim.x)
      d[j] = from_float<T>(zero ? 0.0f : grad(to_float(x[j]), j));
  }
}

__global__ void ce_count_kernel(const int32_t *targets, int64_t rows, int32_t ignore,
                                int64_t *valid) {
  __shared__ unsigned long long total;
  if (threadIdx.x == 0) total = 0;
  __syncthreads();
  unsigned long long n = 0;
  for (int64_t i = threadIdx.x; i < rows; i += blockDim.x) n += targets[i] != ignore;
  atomicAdd(&total, n); /* an integer sum: the same whatever the order */
  __syncthreads();
  if (threadIdx.x == 0) *valid = (int64_t)total;
}

__global__ __launch_bounds__(kReduceThreads) void ce_reduce_kernel(const float *row_loss,
                                                                   int64_t rows, int mean,
                                                                   const int64_t *valid,
                                                                   float *loss) {
  __shared__ double part[kReduceThreads];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < rows; i += kReduceThreads) s += (double)row_loss[i];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int h = kReduceThreads / 2; h > 0; h >>= 1) {
    if ((int)threadIdx.x < h) part[threadIdx.x] += part[threadIdx.x + h];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    double t = part[0];
    if (mean) t = *valid > 0 ? t / (double)*valid : 0.0;
    loss[0] = (float)t;
  }
}

template <typename T, int W> void ce_rows_launch_t(CeMode mode, const CeRows &p, cudaStream_t s) {
  const int64_t units = (p.vocab + W - 1) / W;
  const unsigned threads = (unsigned)(units >= kCeThreads ? kCeThreads
                                      : units <= 32       ? 32
                                                          : (units + 31) / 32 * 32);
  const unsigned grid = grid_for_rows(p.rows);
  switch (mode) {
  case CeMode::fwd:
    ce_rows_kernel<T, W, CeMode::fwd><<<grid, threads, 0, s>>>(p);
    break;
  case CeMode::bwd:
    ce_rows_kernel<T, W, CeMode::bwd><<<grid, threads, 0, s>>>(p);
    break;
  case CeMode::fused:
    ce_rows_kernel<T, W, CeMode::fused><<<grid, threads, 0, s>>>(p);
    break;
  }
}

} // namespace

namespace kite_cuda {

kite_status ce_rows_launch(kite_dtype t, CeMode mode, bool vec, const CeRows &p, cudaStream_t s) {
  if (p.rows <= 0) return KITE_OK;
  return with_float_type(t, "cross_entropy", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (vec)
      ce_rows_launch_t<T, vec_elems<T>()>(mode, p, s);
    else
      ce_rows_launch_t<T, 1>(mode, p, s);
    return KITE_OK;
  });
}

void ce_count_launch(const int32_t *targets, int64_t rows, int32_t ignore_index, int64_t *valid,
                     cudaStream_t s) {
  ce_count_kernel<<<1, 1024, 0, s>>>(targets, rows, ignore_index, valid);
}

void ce_reduce_launch(const float *row_loss, int64_t rows, kite_reduction reduction,
                      const int64_t *valid, float *loss, cudaStream_t s) {
  ce_reduce_kernel<<<1, kReduceThreads, 0, s>>>(
      row_loss, rows, reduction == KITE_REDUCTION_MEAN ? 1 : 0, valid, loss);
}

} // namespace kite_cuda

namespace {

/* Scratch: the count of rows not ignored, then (sum / mean forward) the row losses. */
constexpr size_t kLossOffset = 256;

/* cluster: ce_cluster_launch's one-pass kernel, else the row kernels (vec or generic) */
kite_status ce_run(kite_ctx *ctx, const kite_ce_args *a, bool vec, bool cluster = false) {
  const char *op = cuda_op_str(a->op);
  const char *variant = cluster ? "cluster" : vec ? "vec" : "generic";
  cudaStream_t s;
  kite_status st = begin(ctx, op, &s);
  if (st != KITE_OK) return st;
  const bool bwd = a->op == KITE_OP_CROSS_ENTROPY_BACKWARD;
  const bool with_grad = a->op == KITE_OP_CROSS_ENTROPY_WITH_GRAD;
  const kite_reduction red = a->opts.reduction;
  const bool mean = red == KITE_REDUCTION_MEAN, reduce = !bwd && red != KITE_REDUCTION_NONE;
  int64_t *valid = nullptr;
  float *row_loss = a->loss;
  if (mean || reduce) {
    void *ws;
    const size_t bytes = kLossOffset + (reduce ? (size_t)a->rows * sizeof(float) : 0);
    if ((st = kite_ctx_workspace(ctx, bytes, &ws)) != KITE_OK) return st;
    valid = (int64_t *)ws;
    if (reduce) row_loss = (float *)((char *)ws + kLossOffset);
  }
  if (mean) ce_count_launch(a->targets, a->rows, a->opts.ignore_index, valid, s);
  CeRows p = {};
  p.rows = a->rows, p.vocab = a->vocab;
  p.logits = a->logits, p.logits_stride = a->logits_stride;
  p.targets = a->targets;
  p.o = a->opts;
  p.valid = valid;
  if (bwd) {
    p.lse = a->lse, p.dloss = a->dloss;
  } else {
    p.row_loss = row_loss, p.lse = a->lse;
  }
  p.dlogits = a->dlogits, p.dlogits_stride = a->dlogits_stride;
  const CeMode mode = bwd ? CeMode::bwd : with_grad ? CeMode::fused : CeMode::fwd;
  if (cluster)
    st = ce_cluster_launch(a->dtype, p, s);
  else
    st = ce_rows_launch(a->dtype, mode, vec, p, s);
  if (st != KITE_OK) return st;
  if (reduce) ce_reduce_launch(row_loss, a->rows, red, valid, a->loss, s);
  return cuda_check_launch(op, variant);
}

} // namespace

extern "C" CUDA_SUPPORTS(cuda_ce_vec_supports) {
  const kite_ce_args *a = (const kite_ce_args *)args;
  if (!float_dtype(a->dtype, why)) return false;
  const size_t es = kite_dtype_size(a->dtype);
  return ok_unless(!rows_aligned16(a->logits, a->rows, a->logits_stride, es) ||
                       (a->op != KITE_OP_CROSS_ENTROPY &&
                        !rows_aligned16(a->dlogits, a->rows, a->dlogits_stride, es)),
                   "rows of logits (and dlogits) must start 16-byte aligned", why);
}

extern "C" CUDA_RUN(cuda_ce_vec_run) {
  return ce_run(ctx, (const kite_ce_args *)args, true);
}

extern "C" CUDA_RUN(cuda_ce_generic_run) {
  return ce_run(ctx, (const kite_ce_args *)args, false);
}

extern "C" CUDA_SUPPORTS(cuda_ce_cluster_supports) {
  const kite_ce_args *a = (const kite_ce_args *)args;
  if (!cuda_ce_vec_supports(k, args, why)) return false;
  const int n = vec_elems_of(a->dtype);
  CeClusterShape sh;
  return ok_unless(a->vocab % n != 0 || !ce_cluster_shape(a->vocab / n, &sh),
                   "V must be a multiple of 16 bytes and at most 8 * 256 * 8 packs of them", why);
}

extern "C" CUDA_RUN(cuda_ce_cluster_run) {
  return ce_run(ctx, (const kite_ce_args *)args, true, true);
}
