/*
 * Softmax over rows: y[r, i] = exp(scale x[r, i] - m) / sum_j exp(scale x[r, j] - m), m the row's
 * max. Computed in base 2: v = x * scale * log2(e), y = 2^(v - max v) / sum, the same function
 * with one multiply per element fewer.
 *
 * "vec": one block per row, 16-byte accesses, the row read from memory once. Rows of up to 1024
 *   packs wait in registers as floats; longer ones (a vocabulary) in shared memory as loaded, so
 *   that several rows share a multiprocessor and one row's reductions overlap another's loads,
 *   with a running max and sum kept on the way in (online softmax).
 * "split": few long rows (decode over a vocabulary), where one block per row would leave most
 *   multiprocessors idle: each row is cut into chunks on separate blocks; a first kernel writes
 *   each chunk's max and sum to the workspace, a second combines its row's partials and writes
 *   its chunk, read again from L2. On Hopper, "cluster" (softmax_cluster.cu) does the same in one
 *   launch.
 * "generic": any layout and length, one block per row: the online first pass of "vec" from
 *   memory, one element at a time, then a second pass that reads again and writes.
 * A NaN anywhere in a row makes the whole row NaN, as in the reference.
 */
#include "common.cuh"

using namespace kite_cuda;

namespace {

/* Rows of up to kRegPacks packs: VPT packs a thread, 256 threads. */
constexpr int kRegThreads = 256, kRegPacks = 4 * kRegThreads;

template <typename T, int N, int VPT>
__global__ __launch_bounds__(kRegThreads) void softmax_vec_kernel(kite_softmax_args a,
                                                                  float scale_log2) {
  const int cols = (int)a.cols; /* <= kRegPacks * N */
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const T *x = (const T *)a.x + r * a.x_stride;
    T *y = (T *)a.y + r * a.y_stride;
    float v[VPT][N];
    float m = -INFINITY;
#pragma unroll
    for (int p = 0; p < VPT; p++) {
      const int i = (threadIdx.x + p * blockDim.x) * N;
      if (i >= cols) continue;
      load_floats<N>(x + i, v[p]);
#pragma unroll
      for (int j = 0; j < N; j++) {
        v[p][j] *= scale_log2;
        m = fmaxf(m, v[p][j]);
      }
    }
    const float row_max = block_max(m);
    float sum = 0.0f;
#pragma unroll
    for (int p = 0; p < VPT; p++) {
      const int i = (threadIdx.x + p * blockDim.x) * N;
      if (i >= cols) continue;
#pragma unroll
      for (int j = 0; j < N; j++) {
        v[p][j] = exp2f(v[p][j] - row_max);
        sum += v[p][j];
      }
    }
    const float inv_sum = 1.0f / block_sum(sum);
#pragma unroll
    for (int p = 0; p < VPT; p++) {
      const int i = (threadIdx.x + p * blockDim.x) * N;
      if (i >= cols) continue;
#pragma unroll
      for (int j = 0; j < N; j++) v[p][j] *= inv_sum;
      store_floats<N>(y + i, v[p]);
    }
  }
}

/* Longer rows, up to kSmemBytes: each thread parks the packs it loads in shared memory and takes
 * the same ones back to write, so no barrier guards them. */
constexpr int kSmemThreads = 512;
constexpr size_t kSmemBytes = 96 * 1024; /* fits every GPU since sm_80; 2 rows per Hopper SM */

template <typename T, int N>
__global__ __launch_bounds__(kSmemThreads) void softmax_smem_kernel(kite_softmax_args a,
                                                                    float scale_log2) {
  extern __shared__ __align__(16) unsigned char smem[];
  Pack<T, N> *row = reinterpret_cast<Pack<T, N> *>(smem);
  const int packs = (int)(a.cols / N);
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const Pack<T, N> *x = reinterpret_cast<const Pack<T, N> *>((const T *)a.x + r * a.x_stride);
    Pack<T, N> *y = reinterpret_cast<Pack<T, N> *>((T *)a.y + r * a.y_stride);
    OnlineSoftmax st;
#pragma unroll 4
    for (int p = threadIdx.x; p < packs; p += blockDim.x) {
      const Pack<T, N> pk = x[p];
      row[p] = pk;
      float v[N];
#pragma unroll
      for (int j = 0; j < N; j++) v[j] = to_float(pk.v[j]) * scale_log2;
      st.add<N>(v);
    }
    st.reduce_block();
    const float inv_sum = 1.0f / st.sum;
#pragma unroll 4
    for (int p = threadIdx.x; p < packs; p += blockDim.x) {
      const Pack<T, N> pk = row[p];
      Pack<T, N> out;
#pragma unroll
      for (int j = 0; j < N; j++)
        out.v[j] = from_float<T>(exp2f(to_float(pk.v[j]) * scale_log2 - st.m) * inv_sum);
      y[p] = out;
    }
  }
}

/* split: block (c, r) takes chunk c of row r, one pack a thread. */
constexpr int kSplitThreads = 256;

template <typename T, int N>
__global__ __launch_bounds__(kSplitThreads) void softmax_split_stats_kernel(kite_softmax_args a,
                                                                            float scale_log2,
                                                                            float2 *part) {
  const int64_t r = blockIdx.y, i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * N;
  OnlineSoftmax st;
  if (i < a.cols) {
    float v[N];
    load_floats<N>((const T *)a.x + r * a.x_stride + i, v);
#pragma unroll
    for (int j = 0; j < N; j++) v[j] *= scale_log2;
    st.add<N>(v);
  }
  st.reduce_block();
  if (threadIdx.x == 0) part[r * gridDim.x + blockIdx.x] = make_float2(st.m, st.sum);
}

template <typename T, int N>
__global__ __launch_bounds__(kSplitThreads) void softmax_split_write_kernel(kite_softmax_args a,
                                                                            float scale_log2,
                                                                            const float2 *part) {
  const int64_t r = blockIdx.y, i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * N;
  const float2 *rp = part + r * gridDim.x;
  float row_max = -INFINITY, sum = 0.0f;
  for (unsigned c = 0; c < gridDim.x; c++) row_max = fmaxf(row_max, rp[c].x);
  for (unsigned c = 0; c < gridDim.x; c++)
    if (rp[c].x != -INFINITY) sum += rp[c].y * exp2f(rp[c].x - row_max);
  if (i >= a.cols) return;
  float v[N];
  load_floats<N>((const T *)a.x + r * a.x_stride + i, v);
  const float inv_sum = 1.0f / sum;
#pragma unroll
  for (int j = 0; j < N; j++) v[j] = exp2f(v[j] * scale_log2 - row_max) * inv_sum;
  store_floats<N>((T *)a.y + r * a.y_stride + i, v);
}

template <typename T>
__global__ void softmax_generic_kernel(kite_softmax_args a, float scale_log2) {
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const T *x = (const T *)a.x + r * a.x_stride;
    T *y = (T *)a.y + r * a.y_stride;
    OnlineSoftmax st;
    for (int64_t i = threadIdx.x; i < a.cols; i += blockDim.x) {
      const float v = to_float(x[i]) * scale_log2;
      st.add<1>(&v);
    }
    st.reduce_block();
    const float inv_sum = 1.0f / st.sum;
    for (int64_t i = threadIdx.x; i < a.cols; i += blockDim.x)
      y[i] = from_float<T>(exp2f(to_float(x[i]) * scale_log2 - st.m) * inv_sum);
  }
}

template <typename T, int N, int VPT> void launch_vec(const kite_softmax_args *a, cudaStream_t s) {
  const unsigned threads = (unsigned)((a->cols / N + VPT - 1) / VPT + 31) / 32 * 32;
  softmax_vec_kernel<T, N, VPT><<<grid_for_rows(a->rows), threads, 0, s>>>(*a, a->scale * kLog2e);
}

} // namespace

extern "C" CUDA_SUPPORTS(cuda_softmax_vec_supports) {
  const kite_softmax_args *a = (const kite_softmax_args *)args;
  if (!vec_rows_fit(a->dtype, a->rows, a->cols, {{a->x, a->x_stride}, {a->y, a->y_stride}}, why))
    return false;
  return ok_unless((uint64_t)a->cols * kite_dtype_size(a->dtype) > kSmemBytes,
                   "row longer than 96 KiB does not fit in shared memory", why);
}

extern "C" CUDA_RUN(cuda_softmax_vec_run) {
  const kite_softmax_args *a = (const kite_softmax_args *)args;
  if (a->rows <= 0 || a->cols <= 0) return KITE_OK;
  return launch_typed(ctx, "softmax", "vec", a->dtype, [&](auto tag, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    constexpr int N = vec_elems<T>();
    const int64_t packs = a->cols / N;
    const float scale_log2 = a->scale * kLog2e;
    if (packs <= kRegThreads) {
      launch_vec<T, N, 1>(a, s);
    } else if (packs <= 2 * kRegThreads) {
      launch_vec<T, N, 2>(a, s);
    } else if (packs <= kRegPacks) {
      launch_vec<T, N, 4>(a, s);
    } else {
      const size_t bytes = (size_t)a->cols * sizeof(T);
      if (bytes > 48 * 1024) { /* above the default, a kernel must ask for its shared memory */
        cudaError_t e = cudaFuncSetAttribute(
            softmax_smem_kernel<T, N>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
        if (e != cudaSuccess) {
          (void)cudaGetLastError();
          return kite_set_error(KITE_ERR_DEVICE,
                                "softmax: cuda.vec: %zu bytes of shared memory: %s", bytes,
                                cudaGetErrorString(e));
        }
      }
      softmax_smem_kernel<T, N><<<grid_for_rows(a->rows), kSmemThreads, bytes, s>>>(*a, scale_log2);
    }
    return KITE_OK;
  });
}

/* Rows at most this many and at least this long go to split: below it, one block per row leaves
 * most of the GPU idle; above, a row on one multiprocessor is slower than the split's second
 * launch. */
constexpr int64_t kSplitMaxRows = 32, kSplitMinCols = 8192;

extern "C" CUDA_SUPPORTS(cuda_softmax_split_supports) {
  const kite_softmax_args *a = (const kite_softmax_args *)args;
  if (!vec_rows_fit(a->dtype, a->rows, a->cols, {{a->x, a->x_stride}, {a->y, a->y_stride}}, why))
    return false;
  return ok_unless(a->rows > kSplitMaxRows || a->cols < kSplitMinCols,
                   "only for at most 32 rows of at least 8192 elements", why);
}

extern "C" CUDA_RUN(cuda_softmax_split_run) {
  const kite_softmax_args *a = (const kite_softmax_args *)args;
  if (a->rows <= 0 || a->cols <= 0) return KITE_OK;
  return launch_typed(ctx, "softmax", "split", a->dtype, [&](auto tag, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    constexpr int N = vec_elems<T>();
    const int64_t chunks = (a->cols / N + kSplitThreads - 1) / kSplitThreads;
    void *part;
    kite_status ws = kite_ctx_workspace(ctx, (size_t)(a->rows * chunks) * sizeof(float2), &part);
    if (ws != KITE_OK) return ws;
    const dim3 grid((unsigned)chunks, (unsigned)a->rows);
    const float scale_log2 = a->scale * kLog2e;
    softmax_split_stats_kernel<T, N><<<grid, kSplitThreads, 0, s>>>(*a, scale_log2, (float2 *)part);
    softmax_split_write_kernel<T, N><<<grid, kSplitThreads, 0, s>>>(*a, scale_log2, (float2 *)part);
    return KITE_OK;
  });
}

extern "C" CUDA_RUN(cuda_softmax_generic_run) {
  const kite_softmax_args *a = (const kite_softmax_args *)args;
  if (a->rows <= 0 || a->cols <= 0) return KITE_OK;
  const unsigned threads = a->cols >= 1024 ? 1024 : (unsigned)(a->cols + 31) / 32 * 32;
  return launch_typed(ctx, "softmax", "generic", a->dtype, [&](auto tag, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    softmax_generic_kernel<T><<<grid_for_rows(a->rows), threads, 0, s>>>(*a, a->scale * kLog2e);
    return KITE_OK;
  });
}

/* ---- softmax_backward (kite.h "Training") ----------------------------------------------------
 * dx = scale * y * (dy - sum_j dy_j y_j) per row of y, dy, dx [rows, cols]. One block per row:
 * a pass for the dot product, a block reduction, a pass that reads y and dy again (from L2) and
 * writes dx. dx may be dy: each element of dx is written by the thread that read it, after every
 * read of the first pass (the reduction's barriers lie between). "vec" moves N = one 16-byte
 * pack per access (aligned rows, cols a multiple of N); "generic" one element (any layout). */
namespace {

constexpr int kBwdThreads = 256;

template <typename T, int N> __global__ void softmax_bwd_kernel(kite_softmax_bwd_args a) {
  const int64_t packs = a.cols / N;
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const T *y = (const T *)a.y + r * a.y_stride;
    const T *dy = (const T *)a.dy + r * a.dy_stride;
    T *dx = (T *)a.dx + r * a.dx_stride;
    float dot = 0.0f;
    for (int64_t c = threadIdx.x; c < packs; c += blockDim.x) {
      float yv[N], dv[N];
      load_floats<N>(y + c * N, yv);
      load_floats<N>(dy + c * N, dv);
#pragma unroll
      for (int j = 0; j < N; j++) dot += yv[j] * dv[j];
    }
    dot = block_sum(dot);
    for (int64_t c = threadIdx.x; c < packs; c += blockDim.x) {
      float yv[N], dv[N];
      load_floats<N>(y + c * N, yv);
      load_floats<N>(dy + c * N, dv);
#pragma unroll
      for (int j = 0; j < N; j++) dv[j] = a.scale * yv[j] * (dv[j] - dot);
      store_floats<N>(dx + c * N, dv);
    }
  }
}

template <bool VEC>
kite_status softmax_bwd_launch(kite_ctx *ctx, const kite_softmax_bwd_args *a, const char *variant) {
  const char *name = cuda_op_str(a->op);
  if (a->rows <= 0 || a->cols <= 0) return KITE_OK;
  return launch_typed(ctx, name, variant, a->dtype, [&](auto tag, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    constexpr int N = VEC ? vec_elems<T>() : 1;
    const int64_t packs = a->cols / N;
    const unsigned threads =
        packs >= kBwdThreads ? kBwdThreads : (unsigned)((packs + 31) / 32 * 32);
    softmax_bwd_kernel<T, N><<<grid_for_rows(a->rows), threads, 0, s>>>(*a);
    return KITE_OK;
  });
}

} // namespace

extern "C" CUDA_SUPPORTS(cuda_softmax_bwd_vec_supports) {
  const kite_softmax_bwd_args *a = (const kite_softmax_bwd_args *)args;
  return vec_rows_fit(a->dtype, a->rows, a->cols,
                      {{a->y, a->y_stride}, {a->dy, a->dy_stride}, {a->dx, a->dx_stride}}, why);
  return true;
}

extern "C" CUDA_RUN(cuda_softmax_bwd_vec_run) {
  return softmax_bwd_launch<true>(ctx, (const kite_softmax_bwd_args *)args, "vec");
}

extern "C" CUDA_RUN(cuda_softmax_bwd_generic_run) {
  return softmax_bwd_launch<false>(ctx, (const kite_softmax_bwd_args *)args, "generic");
}
