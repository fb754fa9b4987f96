/*
 * Backward of the norms (the math and the partials of dw / db: norm_backward.cuh), the
 * per-block kernels: "vec" keeps a row of x and dy in registers (16-byte accesses, VPT
 * packs per thread, at most 256 threads, one row per block at a time); "generic" takes any layout
 * and length and reads the row once per pass, accumulating its partials in the workspace row the
 * block owns. dx may be dy or dres: each element of dx is written by the thread that read those
 * inputs, after it read them. (The persistent rows kernels: norm_backward_rows.cu.)
 */
#include "norm_backward.cuh"

using namespace kite_cuda;

namespace {

constexpr int kMaxBlocks = 512;  /* row blocks when partials are wanted */
constexpr int kVecThreads = 256; /* vec's block size cap: room for 4 arrays of VPT packs */

Plan plan_for(int64_t rows, int64_t cols, bool partials) {
  Plan p{0, 1};
  if (rows <= 0 || cols <= 0) return p;
  int64_t g = partials ? kMaxBlocks : 0x7fffffff;
  if (partials) {
    const int64_t cap = kMaxPartials / cols;
    g = cap < 1 ? 1 : cap < g ? cap : g;
  }
  if (g > rows) g = rows;
  p.rows_per_block = (rows + g - 1) / g;
  p.blocks = (rows + p.rows_per_block - 1) / p.rows_per_block;
  return p;
}

/* Row statistics from the packs this thread holds (p < np): mean (0 for rms) and rstd, layer
 * norm's variance in a second pass around the mean. Every thread of the block must call it. */
template <bool RMS, int VPT, int N>
__device__ __forceinline__ void row_stats(const float (&xs)[VPT][N], int np, float inv_cols,
                                          float eps, float &mean, float &rstd) {
  float acc = 0.0f;
#pragma unroll
  for (int p = 0; p < VPT; p++)
#pragma unroll
    for (int j = 0; j < N; j++)
      if (p < np) acc += RMS ? xs[p][j] * xs[p][j] : xs[p][j];
  if (RMS) {
    mean = 0.0f;
    rstd = rsqrtf(block_sum(acc) * inv_cols + eps);
    return;
  }
  mean = block_sum(acc) * inv_cols;
  float dev = 0.0f;
#pragma unroll
  for (int p = 0; p < VPT; p++)
#pragma unroll
    for (int j = 0; j < N; j++)
      if (p < np) dev += (xs[p][j] - mean) * (xs[p][j] - mean);
  rstd = rsqrtf(block_sum(dev) * inv_cols + eps);
}

template <typename T, int N, int VPT, bool RMS>
__global__ __launch_bounds__(kVecThreads) void norm_bwd_vec_kernel(kite_norm_bwd_args a, Plan plan,
                                                                   float *part_w, float *part_b) {
  const int cols = (int)a.cols; /* <= 4 * 256 packs: vec's supports() */
  const float inv_cols = 1.0f / (float)cols;
  const int64_t r0 = blockIdx.x * plan.rows_per_block;
  const int64_t r1 = r0 + plan.rows_per_block < a.rows ? r0 + plan.rows_per_block : a.rows;
  /* packs this thread holds: p < np, at column (threadIdx.x + p * blockDim.x) * N */
  int np = 0;
#pragma unroll
  for (int p = 0; p < VPT; p++)
    if ((int)(threadIdx.x + p * blockDim.x) * N < cols) np = p + 1;
  float sw[VPT][N], sb[VPT][N];
#pragma unroll
  for (int p = 0; p < VPT; p++)
#pragma unroll
    for (int j = 0; j < N; j++) sw[p][j] = sb[p][j] = 0.0f;

  for (int64_t r = r0; r < r1; r++) {
    const T *x = (const T *)a.x + r * a.x_stride;
    const T *dy = (const T *)a.dy + r * a.dy_stride;
    float xs[VPT][N], d[VPT][N];
#pragma unroll
    for (int p = 0; p < VPT; p++) {
      if (p >= np) continue;
      const int i = (threadIdx.x + p * blockDim.x) * N;
      load_floats<N>(x + i, xs[p]);
      load_floats<N>(dy + i, d[p]);
    }
    if (!RMS) {
      const float x0 = to_float(x[0]);
#pragma unroll
      for (int p = 0; p < VPT; p++)
#pragma unroll
        for (int j = 0; j < N; j++)
          if (p < np) xs[p][j] -= x0;
    }
    float mean, rstd;
    row_stats<RMS>(xs, np, inv_cols, a.eps, mean, rstd);
    /* xs becomes xhat, d becomes g (dy kept in the partials first) */
    float sg = 0.0f, sgx = 0.0f;
#pragma unroll
    for (int p = 0; p < VPT; p++) {
      if (p >= np) continue;
      const int i = (threadIdx.x + p * blockDim.x) * N;
      float w[N];
      if (a.w) load_floats<N>((const T *)a.w + i, w);
#pragma unroll
      for (int j = 0; j < N; j++) {
        xs[p][j] = (xs[p][j] - mean) * rstd;
        sw[p][j] += d[p][j] * xs[p][j];
        sb[p][j] += d[p][j];
        d[p][j] *= a.w ? (RMS ? a.offset + w[j] : w[j]) : 1.0f;
        sg += d[p][j];
        sgx += d[p][j] * xs[p][j];
      }
    }
    block_sum2(sg, sgx);
    const float mg = RMS ? 0.0f : sg * inv_cols, mgx = sgx * inv_cols;
    T *dx = (T *)a.dx + r * a.dx_stride;
#pragma unroll
    for (int p = 0; p < VPT; p++) {
      if (p >= np) continue;
      const int i = (threadIdx.x + p * blockDim.x) * N;
      float res[N];
      if (a.dres) load_floats<N>((const T *)a.dres + r * a.dres_stride + i, res);
#pragma unroll
      for (int j = 0; j < N; j++)
        d[p][j] = rstd * (d[p][j] - mg - xs[p][j] * mgx) + (a.dres ? res[j] : 0.0f);
      store_floats<N>(dx + i, d[p]);
    }
  }
  const int64_t base = (int64_t)blockIdx.x * cols;
#pragma unroll
  for (int p = 0; p < VPT; p++) {
    if (p >= np) continue;
    const int i = (threadIdx.x + p * blockDim.x) * N;
#pragma unroll
    for (int j = 0; j < N; j++) {
      if (part_w) part_w[base + i + j] = sw[p][j];
      if (part_b) part_b[base + i + j] = sb[p][j];
    }
  }
}

/* Any layout and length: a thread takes columns threadIdx.x + k * blockDim.x of each row, so the
 * same thread owns the same columns of the block's partial row throughout. */
template <typename T, bool RMS>
__global__ void norm_bwd_generic_kernel(kite_norm_bwd_args a, Plan plan, float *part_w,
                                        float *part_b) {
  const int64_t n = a.cols;
  const float inv_cols = 1.0f / (float)n;
  const int64_t r0 = blockIdx.x * plan.rows_per_block;
  const int64_t r1 = r0 + plan.rows_per_block < a.rows ? r0 + plan.rows_per_block : a.rows;
  float *pw = part_w ? part_w + blockIdx.x * n : nullptr;
  float *pb = part_b ? part_b + blockIdx.x * n : nullptr;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    if (pw) pw[i] = 0.0f;
    if (pb) pb[i] = 0.0f;
  }
  const T *w = (const T *)a.w;
  for (int64_t r = r0; r < r1; r++) {
    const T *x = (const T *)a.x + r * a.x_stride;
    const T *dy = (const T *)a.dy + r * a.dy_stride;
    const float x0 = RMS ? 0.0f : to_float(x[0]); /* the shift of the header comment */
    float acc = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const float v = to_float(x[i]) - x0;
      acc += RMS ? v * v : v;
    }
    float mean = 0.0f, rstd;
    if (RMS) {
      rstd = rsqrtf(block_sum(acc) * inv_cols + a.eps);
    } else {
      mean = block_sum(acc) * inv_cols;
      float dev = 0.0f;
      for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = to_float(x[i]) - x0 - mean;
        dev += v * v;
      }
      rstd = rsqrtf(block_sum(dev) * inv_cols + a.eps);
    }
    float sg = 0.0f, sgx = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const float xhat = (to_float(x[i]) - x0 - mean) * rstd;
      const float wf = w ? (RMS ? a.offset : 0.0f) + to_float(w[i]) : 1.0f;
      const float g = to_float(dy[i]) * wf;
      sg += g;
      sgx += g * xhat;
    }
    block_sum2(sg, sgx);
    const float mg = RMS ? 0.0f : sg * inv_cols, mgx = sgx * inv_cols;
    T *dx = (T *)a.dx + r * a.dx_stride;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const float xhat = (to_float(x[i]) - x0 - mean) * rstd;
      const float wf = w ? (RMS ? a.offset : 0.0f) + to_float(w[i]) : 1.0f;
      const float d = to_float(dy[i]);
      float v = rstd * (d * wf - mg - xhat * mgx);
      if (a.dres) v += to_float(((const T *)a.dres)[r * a.dres_stride + i]);
      if (pw) pw[i] += d * xhat;
      if (pb) pb[i] += d;
      dx[i] = from_float<T>(v);
    }
  }
}

/* Packs per thread of vec, 0 when the row needs more than kVecThreads threads. */
int vec_vpt(int64_t packs) {
  const int vpt = pick_vpt(packs);
  return vpt && row_threads(packs, vpt) <= (unsigned)kVecThreads ? vpt : 0;
}

template <typename T, int N, int VPT>
void launch_vec(const kite_norm_bwd_args *a, Plan plan, unsigned threads, float *pw, float *pb,
                cudaStream_t s) {
  if (a->op == KITE_OP_RMS_NORM_BACKWARD)
    norm_bwd_vec_kernel<T, N, VPT, true>
        <<<(unsigned)plan.blocks, threads, 0, s>>>(*a, plan, pw, pb);
  else
    norm_bwd_vec_kernel<T, N, VPT, false>
        <<<(unsigned)plan.blocks, threads, 0, s>>>(*a, plan, pw, pb);
}

} // namespace

extern "C" CUDA_SUPPORTS(cuda_norm_bwd_vec_supports) {
  const kite_norm_bwd_args *a = (const kite_norm_bwd_args *)args;
  if (!packed_layout(k, args, why)) return false;
  const int n = vec_elems_of(a->dtype);
  return ok_unless(vec_vpt(a->cols / n) == 0,
                   "row longer than 1024 16-byte packs does not fit in registers", why);
}

extern "C" CUDA_RUN(cuda_norm_bwd_vec_run) {
  const kite_norm_bwd_args *a = (const kite_norm_bwd_args *)args;
  return run_norm_bwd(
      ctx, a, "vec", [&] { return plan_for(a->rows, a->cols, partials_wanted(a)); },
      [&](auto tag, Plan plan, float *pw, float *pb, cudaStream_t s) {
        using T = typename decltype(tag)::type;
        constexpr int N = vec_elems<T>();
        const int64_t packs = a->cols / N;
        const int vpt = vec_vpt(packs);
        if (vpt == 0)
          return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: cuda.vec: rows of %lld do not fit",
                                cuda_op_str(a->op), (long long)a->cols);
        const unsigned threads = row_threads(packs, vpt);
        if (vpt == 1)
          launch_vec<T, N, 1>(a, plan, threads, pw, pb, s);
        else if (vpt == 2)
          launch_vec<T, N, 2>(a, plan, threads, pw, pb, s);
        else
          launch_vec<T, N, kMaxVpt>(a, plan, threads, pw, pb, s);
        return KITE_OK;
      });
}

extern "C" CUDA_RUN(cuda_norm_bwd_generic_run) {
  const kite_norm_bwd_args *a = (const kite_norm_bwd_args *)args;
  const unsigned threads = a->cols >= 512 ? 512 : (unsigned)(a->cols + 31) / 32 * 32;
  return run_norm_bwd(
      ctx, a, "generic", [&] { return plan_for(a->rows, a->cols, partials_wanted(a)); },
      [&](auto tag, Plan plan, float *pw, float *pb, cudaStream_t s) {
        using T = typename decltype(tag)::type;
        if (a->op == KITE_OP_RMS_NORM_BACKWARD)
          norm_bwd_generic_kernel<T, true>
              <<<(unsigned)plan.blocks, threads, 0, s>>>(*a, plan, pw, pb);
        else
          norm_bwd_generic_kernel<T, false>
              <<<(unsigned)plan.blocks, threads, 0, s>>>(*a, plan, pw, pb);
        return KITE_OK;
      });
}
