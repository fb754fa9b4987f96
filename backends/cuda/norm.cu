/*
 * Norms over rows of length cols, one block per row: rms_norm, layer_norm and the fused
 * residual-add forms add_rms_norm, add_layer_norm (PRE/POST as kite_norm_args states).
 *   rms:   y = s * rsqrt(mean(s^2) + eps) * (offset + w)
 *   layer: y = (s - mean) * rsqrt(var + eps) * w + b      (var around the mean, 1/cols)
 * s is the row the norm sees: x, or x + residual (PRE: rounded to the dtype and stored back).
 * layer_norm works on s - s[0] (exact for the close values of a row far from 0: a mean of ~100
 * rounded to f32 is off by ~4e-6, which would shift every (s - mean) by that much).
 *
 * "vec" keeps the row in registers (16-byte accesses, VPT packs per thread): x and residual are
 * read once and y written once, the fewest bytes possible. "generic" takes any layout and length
 * and reads the row again for each pass (from L2 for all but huge rows).
 */
#include "common.cuh"

using namespace kite_cuda;

namespace {

/* s[0..N) = the norm's input at columns [i, i + N) of row r (the generic kernel's first pass).
 * PRE stores the rounded sum into the residual and hands back exactly what it stored. */
template <typename T, int N, bool ADD>
__device__ __forceinline__ void gather(const kite_norm_args &a, int64_t r, int64_t i, float *s) {
  load_floats<N>((const T *)a.x + r * a.x_stride + i, s);
  if (!ADD) return;
  T *res = (T *)a.residual + r * a.residual_stride + i;
  float rv[N];
  load_floats<N>(res, rv);
#pragma unroll
  for (int j = 0; j < N; j++) s[j] += rv[j];
  if (a.pos == KITE_NORM_PRE) {
    store_floats<N>(res, s);
#pragma unroll
    for (int j = 0; j < N; j++) s[j] = round_to<T>(s[j]);
  }
}

/* The norm's input again, after gather ran for this element: PRE's sum now is the residual. */
template <typename T, bool ADD>
__device__ __forceinline__ float reread(const kite_norm_args &a, int64_t r, int64_t i) {
  if (ADD && a.pos == KITE_NORM_PRE)
    return to_float(((const T *)a.residual)[r * a.residual_stride + i]);
  float s = to_float(((const T *)a.x)[r * a.x_stride + i]);
  if (ADD) s += to_float(((const T *)a.residual)[r * a.residual_stride + i]);
  return s;
}

/* Thread 0's v, to every thread of the block (thread 0 holds column 0 of the row). Callers reach
 * a block barrier (block_sum) between two calls, so the last row's readers are done with `first`
 * before thread 0 writes it again. */
__device__ __forceinline__ float row_first(float v) {
  __shared__ float first;
  if (threadIdx.x == 0) first = v;
  __syncthreads();
  return first;
}

/* Writes y[r, i..i+N) from the norm's input s; POST also leaves those values in the residual. */
template <typename T, int N, bool RMS, bool ADD>
__device__ __forceinline__ void emit(const kite_norm_args &a, int64_t r, int64_t i, float *s,
                                     float shift, float mean, float rstd) {
  float w[N], b[N];
  if (a.w) load_floats<N>((const T *)a.w + i, w);
  if (!RMS && a.b) load_floats<N>((const T *)a.b + i, b);
#pragma unroll
  for (int j = 0; j < N; j++) {
    if (RMS)
      s[j] = s[j] * rstd * (a.w ? a.offset + w[j] : 1.0f);
    else
      s[j] = ((s[j] - shift) - mean) * rstd * (a.w ? w[j] : 1.0f) + (a.b ? b[j] : 0.0f);
  }
  store_floats<N>((T *)a.y + r * a.y_stride + i, s);
  if (ADD && a.pos == KITE_NORM_POST)
    store_floats<N>((T *)a.residual + r * a.residual_stride + i, s);
}

/* Blocks per multiprocessor to ask the compiler for. The plain rms norm of up to 16 elements a
 * thread fits in 32 registers without spilling (ptxas -v): there a full multiprocessor of blocks
 * keeps more rows' loads in flight. The others need their registers. */
constexpr int min_blocks(bool rms, bool add, int floats, int max_threads) {
  return rms && !add && floats <= 16 ? 2048 / max_threads : 1;
}

/* Every load of the row is issued before the first store (PRE's residual): the compiler may not
 * move a load above a store it cannot prove disjoint, and one round trip to memory per row is
 * what keeps this kernel at copy speed. N is exactly one 16-byte pack here. */
template <typename T, int N, int VPT, bool RMS, bool ADD, int MAX_THREADS>
__global__ __launch_bounds__(MAX_THREADS,
                             min_blocks(RMS, ADD, VPT *N,
                                        MAX_THREADS)) void norm_vec_kernel(kite_norm_args a) {
  const int cols = (int)a.cols; /* <= 32768: vec's supports() */
  const float inv_cols = 1.0f / (float)cols;
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const T *x = (const T *)a.x + r * a.x_stride;
    T *res = ADD ? (T *)a.residual + r * a.residual_stride : nullptr;
    float s[VPT][N];
#pragma unroll
    for (int p = 0; p < VPT; p++) {
      const int i = (threadIdx.x + p * blockDim.x) * N;
      if (i < cols) load_floats<N>(x + i, s[p]);
    }
    if (ADD) {
      /* held packed until used: half the registers of floats for 16-bit types */
      Pack<T, N> rp[VPT];
#pragma unroll
      for (int p = 0; p < VPT; p++) {
        const int i = (threadIdx.x + p * blockDim.x) * N;
        if (i < cols) rp[p] = *reinterpret_cast<const Pack<T, N> *>(res + i);
      }
#pragma unroll
      for (int p = 0; p < VPT; p++) {
        const int i = (threadIdx.x + p * blockDim.x) * N;
        if (i >= cols) continue;
#pragma unroll
        for (int j = 0; j < N; j++) s[p][j] += to_float(rp[p].v[j]);
        if (a.pos == KITE_NORM_PRE) { /* the norm sees exactly the residual it leaves */
          store_floats<N>(res + i, s[p]);
#pragma unroll
          for (int j = 0; j < N; j++) s[p][j] = round_to<T>(s[p][j]);
        }
      }
    }
    float shift = 0.0f;
    if (!RMS) shift = row_first(s[0][0]);
    float acc = 0.0f;
#pragma unroll
    for (int p = 0; p < VPT; p++) {
      const int i = (threadIdx.x + p * blockDim.x) * N;
      if (i >= cols) continue;
#pragma unroll
      for (int j = 0; j < N; j++) acc += RMS ? s[p][j] * s[p][j] : s[p][j] - shift;
    }
    float mean = 0.0f, rstd; /* layer: the mean of s - shift */
    if (RMS) {
      rstd = rsqrtf(block_sum(acc) * inv_cols + a.eps);
    } else {
      mean = block_sum(acc) * inv_cols;
      float dev = 0.0f;
#pragma unroll
      for (int p = 0; p < VPT; p++) {
        const int i = (threadIdx.x + p * blockDim.x) * N;
        if (i >= cols) continue;
#pragma unroll
        for (int j = 0; j < N; j++) {
          const float d = (s[p][j] - shift) - mean;
          dev += d * d;
        }
      }
      rstd = rsqrtf(block_sum(dev) * inv_cols + a.eps);
    }
#pragma unroll
    for (int p = 0; p < VPT; p++) {
      const int i = (threadIdx.x + p * blockDim.x) * N;
      if (i < cols) emit<T, N, RMS, ADD>(a, r, i, s[p], shift, mean, rstd);
    }
  }
}

/* Any layout, any length: one element per thread per step, a pass over the row per statistic. */
template <typename T, bool RMS, bool ADD> __global__ void norm_generic_kernel(kite_norm_args a) {
  const float inv_cols = 1.0f / (float)a.cols;
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    float acc = 0.0f, shift = 0.0f;
    for (int64_t i = threadIdx.x; i < a.cols; i += blockDim.x) {
      float s;
      gather<T, 1, ADD>(a, r, i, &s);
      if (RMS)
        acc += s * s;
      else if (i == 0)
        shift = s;
    }
    float mean = 0.0f, rstd;
    if (RMS) {
      rstd = rsqrtf(block_sum(acc) * inv_cols + a.eps);
    } else {
      shift = row_first(shift);
      for (int64_t i = threadIdx.x; i < a.cols; i += blockDim.x)
        acc += reread<T, ADD>(a, r, i) - shift;
      mean = block_sum(acc) * inv_cols;
      float dev = 0.0f;
      for (int64_t i = threadIdx.x; i < a.cols; i += blockDim.x) {
        const float d = (reread<T, ADD>(a, r, i) - shift) - mean;
        dev += d * d;
      }
      rstd = rsqrtf(block_sum(dev) * inv_cols + a.eps);
    }
    for (int64_t i = threadIdx.x; i < a.cols; i += blockDim.x) {
      float s = reread<T, ADD>(a, r, i);
      emit<T, 1, RMS, ADD>(a, r, i, &s, shift, mean, rstd);
    }
  }
}

bool is_rms(kite_op op) {
  return op == KITE_OP_RMS_NORM || op == KITE_OP_ADD_RMS_NORM;
}
bool is_add(kite_op op) {
  return op == KITE_OP_ADD_RMS_NORM || op == KITE_OP_ADD_LAYER_NORM;
}
bool is_norm(kite_op op) {
  return is_rms(op) || op == KITE_OP_LAYER_NORM || op == KITE_OP_ADD_LAYER_NORM;
}

/* Calls fn(bool_constant<RMS>, bool_constant<ADD>) for the op. */
template <typename Fn> void with_norm_kind(kite_op op, Fn fn) {
  if (is_rms(op)) {
    if (is_add(op))
      fn(std::true_type{}, std::true_type{});
    else
      fn(std::true_type{}, std::false_type{});
  } else {
    if (is_add(op))
      fn(std::false_type{}, std::true_type{});
    else
      fn(std::false_type{}, std::false_type{});
  }
}

template <typename T, int N, int VPT, int MAX_THREADS>
void launch_vec(const kite_norm_args *a, unsigned threads, cudaStream_t s) {
  with_norm_kind(a->op, [&](auto rms, auto add) {
    norm_vec_kernel<T, N, VPT, rms.value, add.value, MAX_THREADS>
        <<<grid_for_rows(a->rows), threads, 0, s>>>(*a);
  });
}

kite_status check_args(const kite_norm_args *a, const char *variant) {
  const char *name = cuda_op_str(a->op);
  if (!is_norm(a->op))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: cuda.%s: not a norm", name, variant);
  if (is_add(a->op) && (!a->residual || (a->pos != KITE_NORM_PRE && a->pos != KITE_NORM_POST)))
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: cuda.%s: no residual or bad position", name,
                          variant);
  return KITE_OK;
}

} // namespace

extern "C" CUDA_SUPPORTS(cuda_norm_vec_supports) {
  const kite_norm_args *a = (const kite_norm_args *)args;
  if (!vec_rows_fit(a->dtype, a->rows, a->cols,
                    {{a->x, a->x_stride},
                     {a->y, a->y_stride},
                     {a->residual, a->residual_stride},
                     {a->w, 0},
                     {a->b, 0}},
                    why))
    return false;
  return ok_unless(pick_vpt(a->cols / vec_elems_of(a->dtype)) == 0,
                   "row longer than 4096 16-byte packs does not fit in registers", why);
}

extern "C" CUDA_RUN(cuda_norm_vec_run) {
  const kite_norm_args *a = (const kite_norm_args *)args;
  const char *name = cuda_op_str(a->op);
  kite_status st = check_args(a, "vec");
  if (st != KITE_OK || a->rows <= 0 || a->cols <= 0) return st;
  return launch_typed(ctx, name, "vec", a->dtype, [&](auto tag, cudaStream_t s) {
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
    return KITE_OK;
  });
}

extern "C" CUDA_RUN(cuda_norm_generic_run) {
  const kite_norm_args *a = (const kite_norm_args *)args;
  const char *name = cuda_op_str(a->op);
  kite_status st = check_args(a, "generic");
  if (st != KITE_OK || a->rows <= 0 || a->cols <= 0) return st;
  const unsigned threads = a->cols >= 512 ? 512 : (unsigned)(a->cols + 31) / 32 * 32;
  return launch_typed(ctx, name, "generic", a->dtype, [&](auto tag, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    with_norm_kind(a->op, [&](auto rms, auto add) {
      norm_generic_kernel<T, rms.value, add.value><<<grid_for_rows(a->rows), threads, 0, s>>>(*a);
    });
    return KITE_OK;
  });
}

extern "C" kite_status cuda_add_rms_norm(kite_ctx *ctx, const kite_norm_args *a) {
  const char *why = NULL;
  if (cuda_norm_vec_supports(NULL, a, &why)) return cuda_norm_vec_run(NULL, ctx, a);
  return cuda_norm_generic_run(NULL, ctx, a);
}
