/*
 * Device helpers shared by every kernel of the CUDA backend: element conversions, packed loads and
 * stores (16 bytes = 8 bf16/f16 or 4 f32 elements per access), warp and block reductions, online
 * softmax statistics, the scalar activations, and the host-side dtype dispatch and launch shapes.
 *
 * Kernels keep their arithmetic in float32 and round once when they store.
 */
#ifndef KITE_CUDA_COMMON_CUH
#define KITE_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <initializer_list>
#include <type_traits>

#include "cuda_backend.h"

namespace kite_cuda {

/* ---- element conversions ------------------------------------------------------------------- */
__device__ __forceinline__ float to_float(float v) {
  return v;
}
__device__ __forceinline__ float to_float(__half v) {
  return __half2float(v);
}
__device__ __forceinline__ float to_float(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

/* Round to nearest even; NaN stays NaN, f16 overflow gives inf. */
template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <> __device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

/* The value a store of v as T would leave behind, as float (a no-op for float). */
template <typename T> __device__ __forceinline__ float round_to(float v) {
  return to_float(from_float<T>(v));
}

/* ---- packed loads and stores --------------------------------------------------------------- */
/* Elements of T in one 16-byte access: 8 for bf16/f16, 4 for f32. */
template <typename T> __host__ __device__ constexpr int vec_elems() {
  return (int)(16 / sizeof(T));
}

/* W consecutive elements, aligned to their size so that the compiler emits one access for them. */
template <typename T, int W> struct alignas(sizeof(T) * W) Pack { T v[W]; };

/* Loads p[0..N) as float. Accesses are 16 bytes wide when N elements fill at least that (p must
 * then be 16-byte aligned), else N elements at once; N = 1 is the plain scalar path. */
template <int N, typename T> __device__ __forceinline__ void load_floats(const T *p, float *out) {
  constexpr int W = N * sizeof(T) >= 16 ? vec_elems<T>() : N;
  static_assert(N % W == 0, "N must be a multiple of the access width");
#pragma unroll
  for (int i = 0; i < N; i += W) {
    const Pack<T, W> pk = *reinterpret_cast<const Pack<T, W> *>(p + i);
#pragma unroll
    for (int j = 0; j < W; j++) out[i + j] = to_float(pk.v[j]);
  }
}

/* Stores in[0..N) to p as T, rounded once, with the access width of load_floats. */
template <int N, typename T> __device__ __forceinline__ void store_floats(T *p, const float *in) {
  constexpr int W = N * sizeof(T) >= 16 ? vec_elems<T>() : N;
  static_assert(N % W == 0, "N must be a multiple of the access width");
#pragma unroll
  for (int i = 0; i < N; i += W) {
    Pack<T, W> pk;
#pragma unroll
    for (int j = 0; j < W; j++) pk.v[j] = from_float<T>(in[i + j]);
    *reinterpret_cast<Pack<T, W> *>(p + i) = pk;
  }
}

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared; with ok false nothing is read and the 16 bytes become zeros. */
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, bool ok) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(ok ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* ---- reductions ---------------------------------------------------------------------------- */
struct Sum {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct Max {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

template <typename Op> __device__ __forceinline__ float warp_reduce(float v, Op op) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

/* Reduces v over the block; every thread gets the result. blockDim.x must be a multiple of 32
 * (at most 1024) and every thread must call it. Safe to call several times in a row: the first
 * barrier keeps a fast warp from overwriting partials that a slow one still reads. */
template <typename Op>
__device__ __forceinline__ float block_reduce(float v, Op op, float identity) {
  __shared__ float partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_reduce(v, op);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < (int)(blockDim.x >> 5) ? partial[lane] : identity;
  return warp_reduce(v, op);
}

__device__ __forceinline__ float block_sum(float v) {
  return block_reduce(v, Sum(), 0.0f);
}
__device__ __forceinline__ float block_max(float v) {
  return block_reduce(v, Max(), -INFINITY);
}

/* Two sums over the block in one round of barriers; as block_reduce, every thread must call it
 * and gets both results. */
__device__ __forceinline__ void block_sum2(float &a, float &b) {
  __shared__ float2 partial2[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  a = warp_reduce(a, Sum());
  b = warp_reduce(b, Sum());
  __syncthreads();
  if (lane == 0) partial2[warp] = make_float2(a, b);
  __syncthreads();
  const float2 p = lane < (int)(blockDim.x >> 5) ? partial2[lane] : make_float2(0.0f, 0.0f);
  a = warp_reduce(p.x, Sum());
  b = warp_reduce(p.y, Sum());
}

/* ---- softmax ------------------------------------------------------------------------------- */
constexpr float kLog2e = 1.4426950408889634f;

/* Online softmax statistics in base 2: the running max m of the values one thread has seen and
 * the sum of 2^(v - m) over them, rescaled whenever the max grows; add() takes N more values. */
struct OnlineSoftmax {
  float m = -INFINITY, sum = 0.0f;
  template <int N> __device__ __forceinline__ void add(const float *v) {
    float vm = -INFINITY;
#pragma unroll
    for (int j = 0; j < N; j++) vm = fmaxf(vm, v[j]);
    if (vm > m) {
      sum *= exp2f(m - vm); /* 0 while m is -inf */
      m = vm;
    }
    /* -inf adds 0 (also while m is -inf, where 2^(v - m) would be NaN); NaN poisons the sum */
#pragma unroll
    for (int j = 0; j < N; j++) sum += v[j] == -INFINITY ? 0.0f : exp2f(v[j] - m);
  }
  /* Combines the block's threads: every thread gets the row's max and sum. */
  __device__ __forceinline__ void reduce_block() {
    const float row_max = block_max(m);
    sum = block_sum(m == -INFINITY ? 0.0f : sum * exp2f(m - row_max));
    m = row_max;
  }
};

/* ---- activations (kite.h "Activations"), float in, float out ------------------------------ */
enum class Act { silu, gelu, gelu_tanh, gelu_quick, relu };

template <Act A> __device__ __forceinline__ float activate(float x) {
  /* below -128 every smooth activation is 0 to f32's precision: the clamp makes -inf give -0
   * (kite.h) where the formulas give -inf / inf or -inf * 0 = NaN; NaN fails the test, stays */
  if (A != Act::relu && x < -128.0f) x = -128.0f;
  if (A == Act::silu) return x / (1.0f + expf(-x));
  if (A == Act::gelu) return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
  if (A == Act::gelu_tanh) {
    const float sqrt_2_over_pi = 0.79788456080286536f;
    return 0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * (x + 0.044715f * x * x * x)));
  }
  if (A == Act::gelu_quick) return x / (1.0f + expf(-1.702f * x));
  return x > 0.0f || x != x ? x : 0.0f; /* relu; NaN stays NaN */
}

/* d activate<A> / dx (kite.h "Training"; relu' is 1 for x > 0, else 0). The clamp at -128 is
 * the forward's: there every smooth derivative is 0 to f32's precision, and -inf gives 0 where
 * the formulas give -inf * 0 = NaN. */
template <Act A> __device__ __forceinline__ float activate_grad(float x) {
  if (A == Act::relu) return x > 0.0f ? 1.0f : 0.0f;
  /* kite.h: past |x| = 128 and at +-inf, the limit (the formulas give inf * 0 = NaN there) */
  if (x < -128.0f) return 0.0f;
  if (x > 128.0f) return 1.0f;
  if (A == Act::silu || A == Act::gelu_quick) { /* d/dx of x sigmoid(a x) */
    const float k = A == Act::silu ? 1.0f : 1.702f;
    const float s = 1.0f / (1.0f + expf(-k * x));
    return s + k * x * s * (1.0f - s);
  }
  if (A == Act::gelu) {
    const float phi = expf(-0.5f * x * x) * 0.39894228040143268f; /* 1 / sqrt(2 pi) */
    return 0.5f * (1.0f + erff(x * 0.70710678118654752f)) + x * phi;
  }
  /* gelu_tanh: past |x| = 10, tanh is +-1 in f32 and 1 - t^2 is 0, but x^3 may overflow to
   * inf (inf * 0 = NaN): the derivative there is the step it tends to */
  if (fabsf(x) > 10.0f) return x > 0.0f ? 1.0f : 0.0f;
  const float k = 0.79788456080286536f, c = 0.044715f;
  const float t = tanhf(k * (x + c * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k * (1.0f + 3.0f * c * x * x);
}

/* ---- host side ----------------------------------------------------------------------------- */
template <typename T> struct TypeTag { using type = T; };

/* Calls fn(TypeTag<T>{}) with the CUDA type of a float dtype; UNSUPPORTED for any other.
 *   return with_float_type(a->dtype, name, [&](auto tag) { using T = typename decltype(tag)::type;
 *                                                          ...; }); */
template <typename Fn> kite_status with_float_type(kite_dtype t, const char *op, Fn fn) {
  switch (t) {
  case KITE_DTYPE_F32:
    return fn(TypeTag<float>{});
  case KITE_DTYPE_F16:
    return fn(TypeTag<__half>{});
  case KITE_DTYPE_BF16:
    return fn(TypeTag<__nv_bfloat16>{});
  default:
    return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: cuda: dtype %s is not supported", op,
                          cuda_dtype_str(t));
  }
}

/* ---- the prelude of a run function ----------------------------------------------------------- */
/* Whether s is being captured into a CUDA graph (where a host synchronization is not allowed);
 * true when the runtime cannot say, so that the caller takes the path that never syncs. */
inline bool stream_capturing(cudaStream_t s) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &capture) != cudaSuccess) {
    (void)cudaGetLastError();
    return true;
  }
  return capture != cudaStreamCaptureStatusNone;
}

/* Makes the ctx's device current; *s gets its stream. Errors: DEVICE naming op. */
inline kite_status begin(kite_ctx *ctx, const char *op, cudaStream_t *s) {
  void *stream = nullptr;
  const kite_status st = cuda_begin(ctx, op, &stream);
  *s = (cudaStream_t)stream;
  return st;
}

/* The frame of most run functions: begin, then fn(TypeTag<T>{}, stream) with the CUDA type of
 * dtype t (with_float_type), then, when fn returned KITE_OK, a failed launch made DEVICE
 * "<op>: cuda.<variant>: launch failed" (variant nullptr: fn checks its own launches).
 *   return launch_typed(ctx, op, "vec", a->dtype, [&](auto tag, cudaStream_t s) {
 *     using T = typename decltype(tag)::type;
 *     kernel<T><<<grid, block, 0, s>>>(*a);
 *     return KITE_OK;
 *   }); */
template <typename Fn>
kite_status launch_typed(kite_ctx *ctx, const char *op, const char *variant, kite_dtype t, Fn fn) {
  cudaStream_t s;
  kite_status st = begin(ctx, op, &s);
  if (st != KITE_OK) return st;
  st = with_float_type(t, op, [&](auto tag) { return fn(tag, s); });
  return st != KITE_OK || !variant ? st : cuda_check_launch(op, variant);
}

inline bool is_float_dtype(kite_dtype t) {
  return t == KITE_DTYPE_F32 || t == KITE_DTYPE_F16 || t == KITE_DTYPE_BF16;
}

/* The last test of a supports function: true unless bad, which sets *why = msg. */
inline bool ok_unless(bool bad, const char *msg, const char **why) {
  if (bad) *why = msg;
  return !bad;
}

/* For supports functions: an f32, f16 or bf16 dtype, else false with *why saying so (the one
 * check of the kernels that take any layout: cuda_float_supports, cuda_device.c). */
inline bool float_dtype(kite_dtype t, const char **why) {
  return cuda_float_dtype(t, why);
}

/* Elements of dtype t in one 16-byte access (0 for dtypes the kernels do not vectorize). */
inline int vec_elems_of(kite_dtype t) {
  return t == KITE_DTYPE_F32 ? 4 : t == KITE_DTYPE_F16 || t == KITE_DTYPE_BF16 ? 8 : 0;
}

inline bool aligned16(const void *p) {
  return ((uintptr_t)p & 15u) == 0;
}

/* True when every one of `rows` rows starting at p, `stride` elements apart, starts 16-byte
 * aligned: the pointer and (for several rows) the stride in bytes are multiples of 16. */
/* Every stride (elements of elem_size bytes) keeps 16-byte alignment. */
inline bool strides_aligned(const int64_t *st, int n, size_t elem_size) {
  for (int i = 0; i < n; i++)
    if ((uint64_t)st[i] * elem_size % 16) return false;
  return true;
}

inline bool rows_aligned16(const void *p, int64_t rows, int64_t stride, size_t elem_size) {
  return aligned16(p) && (rows <= 1 || ((uint64_t)stride * elem_size) % 16 == 0);
}

/* An operand of a vec kernel: its base and row stride in elements (0 for a vector, where only the
 * base must be aligned); a null base stands for an absent operand and passes. */
struct RowsAt {
  const void *p;
  int64_t stride;
};

/* The layout every vec kernel needs, for their supports functions: a float dtype, cols a multiple
 * of one 16-byte pack, and the `rows` rows of every operand 16-byte aligned; else false with *why
 * set. */
inline bool vec_rows_fit(kite_dtype t, int64_t rows, int64_t cols,
                         std::initializer_list<RowsAt> operands, const char **why) {
  if (!float_dtype(t, why)) return false;
  const size_t es = kite_dtype_size(t);
  bool ok = cols % vec_elems_of(t) == 0;
  for (const RowsAt &o : operands) ok = ok && (!o.p || rows_aligned16(o.p, rows, o.stride, es));
  if (!ok) *why = "needs 16-byte aligned rows (and vectors) and cols a multiple of 16 bytes";
  return ok;
}

/* Launch shape of a [rows, n] grid of work items: threads along a row first, rows filling the
 * rest of a 256-thread block, so that short rows still give full blocks. */
struct RowGrid {
  dim3 grid, block;
};
inline RowGrid row_grid(int64_t rows, int64_t n) {
  const int64_t tx = n >= 256 ? 256 : (n + 31) / 32 * 32;
  const int64_t ty = 256 / tx;
  const int64_t gx = (n + tx - 1) / tx, gy = (rows + ty - 1) / ty;
  RowGrid g;
  g.block = dim3((unsigned)tx, (unsigned)ty);
  g.grid = dim3((unsigned)(gx < 0x7fffffff ? gx : 0x7fffffff), (unsigned)(gy < 65535 ? gy : 65535));
  return g;
}

/* Row-in-registers kernels (the norms): one block per row, each thread holding up to kMaxVpt
 * packs of one 16-byte access each, as floats (32 registers for 16-bit types), so that the row
 * stays in registers under the 64-register cap of a 1024-thread block. Rows of up to
 * 1024 * kMaxVpt packs fit: 32768 bf16/f16 or 16384 f32 elements. */
constexpr int kMaxVpt = 4;
constexpr int kRowThreads = 1024;

/* Packs per thread for a row of `packs` packs: the fewest that keep the block within 256 threads
 * (several rows per multiprocessor hide each row's reductions); then up to 1024 threads. 0 when
 * the row does not fit. */
inline int pick_vpt(int64_t packs) {
  for (int vpt = 1; vpt <= kMaxVpt; vpt *= 2)
    if ((packs + vpt - 1) / vpt <= 256) return vpt;
  return (packs + kMaxVpt - 1) / kMaxVpt <= kRowThreads ? kMaxVpt : 0;
}

/* Threads of a block holding `packs` packs, VPT per thread: a multiple of 32. */
inline unsigned row_threads(int64_t packs, int vpt) {
  return (unsigned)(((packs + vpt - 1) / vpt + 31) / 32 * 32);
}

/* Launches kernel(args...) on s in clusters of `blocks` blocks along x (sm_90): grid (blocks,
 * rows), `threads` threads and `smem` bytes of dynamic shared memory per block. */
template <typename... KArgs, typename... Args>
cudaError_t launch_clusters(void (*kernel)(KArgs...), unsigned blocks, unsigned rows,
                            unsigned threads, size_t smem, cudaStream_t s, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(blocks, rows);
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = blocks;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, args...);
}

/* An attribute of the current device; fallback when the runtime cannot say or it is not > 0. */
inline int device_attr(cudaDeviceAttr what, int fallback) {
  int dev = 0, n = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&n, what, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return fallback;
  }
  return n > 0 ? n : fallback;
}

/* Multiprocessors of the current device (132, an H100's, when the runtime cannot say). */
inline int sm_count() {
  return device_attr(cudaDevAttrMultiProcessorCount, 132);
}

/* The shared memory a block of the current device may opt in to (227 KB on Hopper; 0 when the
 * runtime cannot say). */
inline size_t smem_optin() {
  return (size_t)device_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin, 0);
}

/* One block per row, the kernels looping when rows exceed the grid limit. */
inline unsigned grid_for_rows(int64_t rows) {
  return (unsigned)(rows < 0x7fffffff ? rows : 0x7fffffff);
}

} // namespace kite_cuda

#endif /* KITE_CUDA_COMMON_CUH */
