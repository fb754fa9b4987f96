/*
 * Dynamic per-row quantization (quant), dequant and linear_quant, int8 and fp8 e4m3.
 *
 * quant, a block per row: amax = max |x| over finite x, scale = amax / qmax, and each code
 * from the IEEE f32 quotient x / scale, so the codes match the reference bit for bit: int8 rounds
 * to nearest even and clamps to +-127 (NaN -> 0); e4m3 rounds to nearest even and saturates.
 * dequant computes q * scale in double, which is exact, and rounds once to the dtype.
 * linear_quant, a thread per output: exact int32 sums of int8 products (k < 2^17), or f32 sums of
 * e4m3 products (each product exact), then * x_scale * w_scale + bias in double.
 */
#include <cuda_fp8.h>

#include "common.cuh"
#include "gemm.cuh"

using namespace kite_cuda;

namespace {

__device__ __forceinline__ float e4m3_value(uint8_t c) {
  __nv_fp8_e4m3 v;
  v.__x = c;
  return (float)v;
}

template <typename T> __device__ __forceinline__ T from_double(double v);
template <> __device__ __forceinline__ float from_double<float>(double v) {
  return (float)v;
}
template <> __device__ __forceinline__ __half from_double<__half>(double v) {
  return __double2half(v);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_double<__nv_bfloat16>(double v) {
  return __double2bfloat16(v);
}

template <typename T, bool FP8> __global__ void quant_kernel(kite_quant_args a) {
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const T *x = (const T *)a.x + r * a.x_stride;
    float amax = 0.0f;
    for (int64_t i = threadIdx.x; i < a.cols; i += blockDim.x) {
      const float ax = fabsf(to_float(x[i]));
      amax = fmaxf(amax, ax < INFINITY ? ax : 0.0f); /* finite only (kite.h) */
    }
    amax = block_max(amax);
    const float scale = __fdiv_rn(amax, FP8 ? 448.0f : 127.0f);
    if (threadIdx.x == 0) a.scales[r] = scale;
    uint8_t *q = (uint8_t *)a.q + r * a.q_stride;
    for (int64_t i = threadIdx.x; i < a.cols; i += blockDim.x) {
      const float v = scale == 0.0f ? 0.0f : __fdiv_rn(to_float(x[i]), scale);
      if (FP8) {
        q[i] = (uint8_t)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
      } else {
        const float c = v != v ? 0.0f : fminf(fmaxf(rintf(v), -127.0f), 127.0f);
        q[i] = (uint8_t)(int8_t)c;
      }
    }
  }
}

template <typename T, bool FP8> __global__ void dequant_kernel(kite_quant_args a) {
  for (int64_t r = blockIdx.y; r < a.rows; r += gridDim.y) {
    const uint8_t *q = (const uint8_t *)a.q + r * a.q_stride;
    const double scale = a.scales[r];
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < a.cols;
         i += (int64_t)gridDim.x * blockDim.x) {
      const double c = FP8 ? (double)e4m3_value(q[i]) : (double)(int8_t)q[i];
      ((T *)a.y)[r * a.y_stride + i] = from_double<T>(c * scale);
    }
  }
}

template <typename T, bool FP8> __global__ void linear_quant_kernel(kite_linear_quant_args a) {
  const int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (j >= a.n) return;
  for (int64_t r = blockIdx.y; r < a.m; r += gridDim.y) {
    const uint8_t *x = (const uint8_t *)a.xq + r * a.x_stride;
    const uint8_t *w = (const uint8_t *)a.wq + j * a.w_stride;
    double dot;
    if (FP8) {
      float acc = 0.0f;
      for (int64_t i = 0; i < a.k; i++) acc = fmaf(e4m3_value(x[i]), e4m3_value(w[i]), acc);
      dot = acc;
    } else {
      int32_t acc = 0;
      for (int64_t i = 0; i < a.k; i++) acc += (int32_t)(int8_t)x[i] * (int32_t)(int8_t)w[i];
      dot = acc;
    }
    double v = dot * a.x_scales[r] * a.w_scales[j];
    if (a.bias) v += to_float(((const T *)a.bias)[j]);
    ((T *)a.y)[r * a.y_stride + j] = from_double<T>(v);
  }
}

/* y[r, j] = c[r, j] x_scale[r] w_scale[j] + bias[j] from the int32 sums c [m, n]: the same
 * double arithmetic as linear_quant_kernel, so both give the same bits. */
template <typename T>
__global__ void linear_quant_scale_kernel(kite_linear_quant_args a, const int32_t *c) {
  const int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (j >= a.n) return;
  for (int64_t r = blockIdx.y; r < a.m; r += gridDim.y) {
    double v = (double)c[r * a.n + j] * a.x_scales[r] * a.w_scales[j];
    if (a.bias) v += to_float(((const T *)a.bias)[j]);
    ((T *)a.y)[r * a.y_stride + j] = from_double<T>(v);
  }
}

bool types_ok(kite_dtype t, kite_dtype q, const char **why) {
  return ok_unless(!is_float_dtype(t) || (q != KITE_DTYPE_I8 && q != KITE_DTYPE_FP8_E4M3),
                   "dtype must be f32, f16 or bf16 and the code i8 or fp8_e4m3", why);
}

/* The thread-per-output kernel: e4m3, and int8 where cuBLASLt takes no call. */
kite_status linear_quant_generic(const kite_linear_quant_args *a, cudaStream_t s,
                                 const char *variant) {
  const bool fp8 = a->qdtype == KITE_DTYPE_FP8_E4M3;
  const kite_status st = with_float_type(a->dtype, "linear_quant", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const dim3 grid((unsigned)((a->n + 127) / 128), (unsigned)(a->m < 65535 ? a->m : 65535));
    if (fp8)
      linear_quant_kernel<T, true><<<grid, 128, 0, s>>>(*a);
    else
      linear_quant_kernel<T, false><<<grid, 128, 0, s>>>(*a);
    return KITE_OK;
  });
  return st != KITE_OK ? st : cuda_check_launch("linear_quant", variant);
}

} // namespace

extern "C" CUDA_SUPPORTS(cuda_quant_supports) {
  const kite_quant_args *a = (const kite_quant_args *)args;
  return types_ok(a->dtype, a->qdtype, why);
}

extern "C" CUDA_SUPPORTS(cuda_linear_quant_supports) {
  const kite_linear_quant_args *a = (const kite_linear_quant_args *)args;
  if (!types_ok(a->dtype, a->qdtype, why)) return false;
  return ok_unless(a->k >= (1 << 17), "k must be below 131072 (int32 sums)", why);
}

extern "C" CUDA_RUN(cuda_quant_run) {
  const kite_quant_args *a = (const kite_quant_args *)args;
  const char *op = cuda_op_str(a->op);
  const char *why = "";
  if (!types_ok(a->dtype, a->qdtype, &why))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: cuda: %s", op, why);
  if (a->rows <= 0) return KITE_OK;
  cudaStream_t s;
  kite_status st = begin(ctx, op, &s);
  if (st != KITE_OK) return st;
  const bool fp8 = a->qdtype == KITE_DTYPE_FP8_E4M3, deq = a->op == KITE_OP_DEQUANT;
  st = with_float_type(a->dtype, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (deq) {
      if (a->cols <= 0) return KITE_OK;
      const dim3 grid((unsigned)((a->cols + 255) / 256 < 1024 ? (a->cols + 255) / 256 : 1024),
                      (unsigned)(a->rows < 65535 ? a->rows : 65535));
      if (fp8)
        dequant_kernel<T, true><<<grid, 256, 0, s>>>(*a);
      else
        dequant_kernel<T, false><<<grid, 256, 0, s>>>(*a);
    } else {
      const unsigned grid = (unsigned)(a->rows < 65535 ? a->rows : 65535);
      if (fp8)
        quant_kernel<T, true><<<grid, 256, 0, s>>>(*a);
      else
        quant_kernel<T, false><<<grid, 256, 0, s>>>(*a);
    }
    return KITE_OK;
  });
  return st != KITE_OK ? st : cuda_check_launch(op, "generic");
}

extern "C" CUDA_SUPPORTS(cuda_linear_quant_lt_supports) {
  const kite_linear_quant_args *a = (const kite_linear_quant_args *)args;
  if (!types_ok(a->dtype, a->qdtype, why)) return false;
  return ok_unless(a->qdtype != KITE_DTYPE_I8, "int8 only (e4m3 stays with cuda.generic)", why);
}

/* int8 x int8 -> int32 on cuBLASLt (IMMA) into the workspace, then the scales and bias; where
 * cuBLASLt takes no such call (k = 0, strides not multiples of 4, no algorithm) the generic
 * kernel runs instead. */
extern "C" CUDA_RUN(cuda_linear_quant_lt_run) {
  const kite_linear_quant_args *a = (const kite_linear_quant_args *)args;
  if (a->m <= 0 || a->n <= 0) return KITE_OK;
  cudaStream_t s;
  kite_status st = begin(ctx, "linear_quant", &s);
  if (st != KITE_OK) return st;
  if (a->k > 0 && a->qdtype == KITE_DTYPE_I8 && a->m <= INT32_MAX && a->n <= INT32_MAX &&
      a->k <= INT32_MAX) {
    void *ws;
    st = kite_ctx_workspace(ctx, (size_t)(a->m * a->n) * sizeof(int32_t), &ws);
    if (st != KITE_OK) return st;
    LtGemm g = {};
    g.dtype = KITE_DTYPE_I8, g.m = a->m, g.n = a->n, g.k = a->k;
    g.a = a->xq, g.lda = a->x_stride;
    g.b = a->wq, g.ldb = a->w_stride, g.b_trans = true;
    g.c = ws, g.ldc = a->n;
    const int r = lt_gemm(g, "linear_quant", "cublaslt", s);
    if (r < 0) return KITE_ERR_DEVICE;
    if (r > 0) {
      st = with_float_type(a->dtype, "linear_quant", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const dim3 grid((unsigned)((a->n + 127) / 128), (unsigned)(a->m < 65535 ? a->m : 65535));
        linear_quant_scale_kernel<T><<<grid, 128, 0, s>>>(*a, (const int32_t *)ws);
        return KITE_OK;
      });
      return st != KITE_OK ? st : cuda_check_launch("linear_quant", "cublaslt");
    }
  }
  return linear_quant_generic(a, s, "cublaslt");
}

extern "C" CUDA_RUN(cuda_linear_quant_run) {
  const kite_linear_quant_args *a = (const kite_linear_quant_args *)args;
  if (a->m <= 0 || a->n <= 0) return KITE_OK;
  cudaStream_t s;
  kite_status st = begin(ctx, "linear_quant", &s);
  if (st != KITE_OK) return st;
  return linear_quant_generic(a, s, "generic");
}
