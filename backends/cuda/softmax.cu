/*
 * Softmax over rows: y[r, i] = exp(scale x[r, i] - m) / sum_j exp(scale x[r, j] - m), m the row's
 * max, one block per row. Computed in base 2: v = x * scale * log2(e), y = 2^(v - max v) / sum,
 * which is the same function with one multiply per element fewer.
 *
 * "vec" keeps the row in registers (16-byte accesses): read once, max, exponentials, sum, write.
 * "generic" takes any layout and length: a first pass keeps a running max and a sum rescaled to it
 * per thread (online softmax), the block combines them, a second pass writes.
 * A NaN anywhere in a row makes the whole row NaN, as in the reference.
 */
#include "common.cuh"

using namespace kite_cuda;

namespace {

constexpr float kLog2e = 1.4426950408889634f;

template <typename T, int N, int VPT, int MAX_THREADS>
__global__ __launch_bounds__(MAX_THREADS) void softmax_vec_kernel(kite_softmax_args a,
                                                                  float scale_log2) {
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const T *x = (const T *)a.x + r * a.x_stride;
    T *y = (T *)a.y + r * a.y_stride;
    float v[VPT][N];
    float m = -INFINITY;
#pragma unroll
    for (int p = 0; p < VPT; p++) {
      const int64_t i = (threadIdx.x + (int64_t)p * blockDim.x) * N;
      if (i >= a.cols) continue;
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
      const int64_t i = (threadIdx.x + (int64_t)p * blockDim.x) * N;
      if (i >= a.cols) continue;
#pragma unroll
      for (int j = 0; j < N; j++) {
        v[p][j] = exp2f(v[p][j] - row_max);
        sum += v[p][j];
      }
    }
    const float inv_sum = 1.0f / block_sum(sum);
#pragma unroll
    for (int p = 0; p < VPT; p++) {
      const int64_t i = (threadIdx.x + (int64_t)p * blockDim.x) * N;
      if (i >= a.cols) continue;
#pragma unroll
      for (int j = 0; j < N; j++) v[p][j] *= inv_sum;
      store_floats<N>(y + i, v[p]);
    }
  }
}

template <typename T>
__global__ void softmax_generic_kernel(kite_softmax_args a, float scale_log2) {
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const T *x = (const T *)a.x + r * a.x_stride;
    T *y = (T *)a.y + r * a.y_stride;
    /* running max m and sum of 2^(v - m) over this thread's elements */
    float m = -INFINITY, sum = 0.0f;
    for (int64_t i = threadIdx.x; i < a.cols; i += blockDim.x) {
      const float v = to_float(x[i]) * scale_log2;
      if (v > m) {
        sum = sum * exp2f(m - v) + 1.0f;
        m = v;
      } else if (v != -INFINITY) {
        sum += exp2f(v - m); /* NaN v lands here and poisons the sum */
      }
    }
    const float row_max = block_max(m);
    const float total = block_sum(m == -INFINITY ? 0.0f : sum * exp2f(m - row_max));
    const float inv_sum = 1.0f / total;
    for (int64_t i = threadIdx.x; i < a.cols; i += blockDim.x)
      y[i] = from_float<T>(exp2f(to_float(x[i]) * scale_log2 - row_max) * inv_sum);
  }
}

template <typename T, int N, int VPT, int MAX_THREADS>
void launch_vec(const kite_softmax_args *a, unsigned threads, cudaStream_t s) {
  softmax_vec_kernel<T, N, VPT, MAX_THREADS>
      <<<grid_for_rows(a->rows), threads, 0, s>>>(*a, a->scale * kLog2e);
}

} // namespace

extern "C" CUDA_SUPPORTS(cuda_softmax_generic_supports) {
  const kite_softmax_args *a = (const kite_softmax_args *)args;
  if (!is_float_dtype(a->dtype)) {
    *why = "dtype must be f32, f16 or bf16";
    return false;
  }
  return true;
}

extern "C" CUDA_SUPPORTS(cuda_softmax_vec_supports) {
  const kite_softmax_args *a = (const kite_softmax_args *)args;
  if (!cuda_softmax_generic_supports(k, args, why)) return false;
  const int n = vec_elems_of(a->dtype);
  const size_t es = kite_dtype_size(a->dtype);
  if (a->cols % n != 0 || !rows_aligned16(a->x, a->rows, a->x_stride, es) ||
      !rows_aligned16(a->y, a->rows, a->y_stride, es)) {
    *why = "needs 16-byte aligned rows and cols a multiple of 16 bytes";
    return false;
  }
  if (pick_vpt(a->cols / n) == 0) {
    *why = "row longer than 4096 16-byte packs does not fit in registers";
    return false;
  }
  return true;
}

extern "C" CUDA_RUN(cuda_softmax_vec_run) {
  const kite_softmax_args *a = (const kite_softmax_args *)args;
  const char *why = "";
  if (!cuda_softmax_vec_supports(k, args, &why))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "softmax: cuda.vec: %s", why);
  if (a->rows <= 0 || a->cols <= 0) return KITE_OK;
  void *stream;
  kite_status st = cuda_begin(ctx, "softmax", &stream);
  if (st != KITE_OK) return st;
  cudaStream_t s = (cudaStream_t)stream;
  return with_float_type(a->dtype, "softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int N = vec_elems<T>();
    const int64_t packs = a->cols / N;
    const int vpt = pick_vpt(packs);
    const unsigned threads = row_threads(packs, vpt);
    switch (vpt) { /* a 256-thread cap leaves VPT 4 room; only the longest rows need 1024 */
    case 1:
      launch_vec<T, N, 1, 256>(a, threads, s);
      break;
    case 2:
      launch_vec<T, N, 2, 256>(a, threads, s);
      break;
    default:
      if (threads <= 256)
        launch_vec<T, N, kMaxVpt, 256>(a, threads, s);
      else
        launch_vec<T, N, kMaxVpt, kRowThreads>(a, threads, s);
      break;
    }
    return cuda_check_launch("softmax", "vec");
  });
}

extern "C" CUDA_RUN(cuda_softmax_generic_run) {
  const kite_softmax_args *a = (const kite_softmax_args *)args;
  if (a->rows <= 0 || a->cols <= 0) return KITE_OK;
  void *stream;
  kite_status st = cuda_begin(ctx, "softmax", &stream);
  if (st != KITE_OK) return st;
  cudaStream_t s = (cudaStream_t)stream;
  const unsigned threads = a->cols >= 1024 ? 1024 : (unsigned)(a->cols + 31) / 32 * 32;
  return with_float_type(a->dtype, "softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_generic_kernel<T><<<grid_for_rows(a->rows), threads, 0, s>>>(*a, a->scale * kLog2e);
    return cuda_check_launch("softmax", "generic");
  });
}
