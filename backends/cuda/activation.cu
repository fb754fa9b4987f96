/*
 * Elementwise activations x[rows, cols] -> y[rows, cols]: silu, gelu, gelu_tanh, gelu_quick, relu.
 * A thread maps N consecutive elements of a row: N = one 16-byte access in "vec" (rows aligned,
 * cols a multiple of N), N = 1 in "generic" (any layout). y may be x: each element is read by the
 * thread that writes it, before it writes it.
 */
#include "common.cuh"

using namespace kite_cuda;

namespace {

template <typename T, int N, Act A> __global__ void act_kernel(kite_act_args a) {
  const int64_t packs = a.cols / N;
  for (int64_t r = blockIdx.y * (int64_t)blockDim.y + threadIdx.y; r < a.rows;
       r += (int64_t)gridDim.y * blockDim.y) {
    const T *x = (const T *)a.x + r * a.x_stride;
    T *y = (T *)a.y + r * a.y_stride;
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < packs;
         c += (int64_t)gridDim.x * blockDim.x) {
      float v[N];
      load_floats<N>(x + c * N, v);
#pragma unroll
      for (int i = 0; i < N; i++) v[i] = activate<A>(v[i]);
      store_floats<N>(y + c * N, v);
    }
  }
}

template <bool VEC> kite_status run(kite_ctx *ctx, const kite_act_args *a, const char *variant) {
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
    case KITE_OP_SILU:
      act_kernel<T, N, Act::silu><<<g.grid, g.block, 0, s>>>(*a);
      break;
    case KITE_OP_GELU:
      act_kernel<T, N, Act::gelu><<<g.grid, g.block, 0, s>>>(*a);
      break;
    case KITE_OP_GELU_TANH:
      act_kernel<T, N, Act::gelu_tanh><<<g.grid, g.block, 0, s>>>(*a);
      break;
    case KITE_OP_GELU_QUICK:
      act_kernel<T, N, Act::gelu_quick><<<g.grid, g.block, 0, s>>>(*a);
      break;
    case KITE_OP_RELU:
      act_kernel<T, N, Act::relu><<<g.grid, g.block, 0, s>>>(*a);
      break;
    default:
      return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: cuda: not an activation", name);
    }
    return cuda_check_launch(name, variant);
  });
}

} // namespace

extern "C" CUDA_SUPPORTS(cuda_act_generic_supports) {
  const kite_act_args *a = (const kite_act_args *)args;
  if (!is_float_dtype(a->dtype)) {
    *why = "dtype must be f32, f16 or bf16";
    return false;
  }
  return true;
}

extern "C" CUDA_SUPPORTS(cuda_act_vec_supports) {
  const kite_act_args *a = (const kite_act_args *)args;
  if (!cuda_act_generic_supports(k, args, why)) return false;
  const int n = vec_elems_of(a->dtype);
  const size_t es = kite_dtype_size(a->dtype);
  if (a->cols % n != 0 || !rows_aligned16(a->x, a->rows, a->x_stride, es) ||
      !rows_aligned16(a->y, a->rows, a->y_stride, es)) {
    *why = "needs 16-byte aligned rows and cols a multiple of 16 bytes";
    return false;
  }
  return true;
}

extern "C" CUDA_RUN(cuda_act_vec_run) {
  const kite_act_args *a = (const kite_act_args *)args;
  return run<true>(ctx, a, "vec");
}

extern "C" CUDA_RUN(cuda_act_generic_run) {
  return run<false>(ctx, (const kite_act_args *)args, "generic");
}
