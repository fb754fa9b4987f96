/*
 * Gated activations x[rows, 2*cols] -> y[rows, cols]: y[r, i] = act(g) * u with the gate
 * g = x[r, i] and the up projection u = x[r, cols + i] (silu_and_mul, gelu_and_mul,
 * gelu_tanh_and_mul). limit > 0 first clamps g <= limit and u to [-limit, limit]; NaN stays NaN.
 * A thread maps N consecutive outputs: N = one 16-byte access in "vec", 1 in "generic".
 */
#include "common.cuh"

using namespace kite_cuda;

namespace {

template <typename T, int N, Act A> __global__ void gated_kernel(kite_gated_args a) {
  const int64_t packs = a.cols / N;
  const bool clamp = a.limit > 0.0f; /* false for NaN too */
  for (int64_t r = blockIdx.y * (int64_t)blockDim.y + threadIdx.y; r < a.rows;
       r += (int64_t)gridDim.y * blockDim.y) {
    const T *gate = (const T *)a.x + r * a.x_stride;
    const T *up = gate + a.cols;
    T *y = (T *)a.y + r * a.y_stride;
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < packs;
         c += (int64_t)gridDim.x * blockDim.x) {
      float g[N], u[N];
      load_floats<N>(gate + c * N, g);
      load_floats<N>(up + c * N, u);
#pragma unroll
      for (int i = 0; i < N; i++) {
        if (clamp) {
          g[i] = g[i] > a.limit ? a.limit : g[i];
          u[i] = u[i] > a.limit ? a.limit : u[i] < -a.limit ? -a.limit : u[i];
        }
        g[i] = activate<A>(g[i]) * u[i];
      }
      store_floats<N>(y + c * N, g);
    }
  }
}

template <bool VEC> kite_status run(kite_ctx *ctx, const kite_gated_args *a, const char *variant) {
  const char *name = cuda_op_str(a->op);
  if (a->rows <= 0 || a->cols <= 0) return KITE_OK;
  void *stream;
  kite_status st = cuda_begin(ctx, name, &stream);
  if (st != KITE_OK) return st;
  cudaStream_t s = (cudaStream_t)stream;
  return with_float_type(a->dtype, name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int N = VEC ? vec_elems<T>() : 1;
    const RowGrid g = row_grid(a->rows, a->cols / N);
    switch (a->op) {
    case KITE_OP_SILU_AND_MUL:
      gated_kernel<T, N, Act::silu><<<g.grid, g.block, 0, s>>>(*a);
      break;
    case KITE_OP_GELU_AND_MUL:
      gated_kernel<T, N, Act::gelu><<<g.grid, g.block, 0, s>>>(*a);
      break;
    case KITE_OP_GELU_TANH_AND_MUL:
      gated_kernel<T, N, Act::gelu_tanh><<<g.grid, g.block, 0, s>>>(*a);
      break;
    default:
      return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: cuda: not a gated activation", name);
    }
    return cuda_check_launch(name, variant);
  });
}

} // namespace

extern "C" CUDA_SUPPORTS(cuda_gated_generic_supports) {
  const kite_gated_args *a = (const kite_gated_args *)args;
  if (!is_float_dtype(a->dtype)) {
    *why = "dtype must be f32, f16 or bf16";
    return false;
  }
  return true;
}

/* The up half starts cols elements into the row, so cols must keep it aligned too. */
extern "C" CUDA_SUPPORTS(cuda_gated_vec_supports) {
  const kite_gated_args *a = (const kite_gated_args *)args;
  if (!cuda_gated_generic_supports(k, args, why)) return false;
  const int n = vec_elems_of(a->dtype);
  const size_t es = kite_dtype_size(a->dtype);
  if (a->cols % n != 0 || !rows_aligned16(a->x, a->rows, a->x_stride, es) ||
      !rows_aligned16(a->y, a->rows, a->y_stride, es)) {
    *why = "needs 16-byte aligned rows and cols a multiple of 16 bytes";
    return false;
  }
  return true;
}

extern "C" CUDA_RUN(cuda_gated_vec_run) {
  const kite_gated_args *a = (const kite_gated_args *)args;
  const char *why = "";
  if (!cuda_gated_vec_supports(k, args, &why))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: cuda.vec: %s", cuda_op_str(a->op), why);
  return run<true>(ctx, a, "vec");
}

extern "C" CUDA_RUN(cuda_gated_generic_run) {
  return run<false>(ctx, (const kite_gated_args *)args, "generic");
}
