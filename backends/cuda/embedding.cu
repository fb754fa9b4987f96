/*
 * Embedding lookup: y[t, :] = table[ids[t], :], a bit-exact copy of the row; an id outside
 * [0, vocab) gives a row of zeros. Nothing is computed, so any element type works: rows are moved
 * in units U of 16 bytes in "vec" (rows 16-byte aligned, row bytes a multiple of 16) and of one
 * element in "generic".
 */
#include <cub/device/device_radix_sort.cuh>

#include "common.cuh"

using namespace kite_cuda;

namespace {

/* Strides and row lengths in units of U. A thread moves UPT units spaced a row's threads apart
 * (coalesced), all loads issued before the first store. */
template <typename U, int UPT>
__global__ void embedding_kernel(const int32_t *ids, const U *table, int64_t table_stride,
                                 int64_t vocab, U *y, int64_t y_stride, int64_t tokens,
                                 int64_t units) {
  const int64_t row_threads = (units + UPT - 1) / UPT;
  for (int64_t t = blockIdx.y * (int64_t)blockDim.y + threadIdx.y; t < tokens;
       t += (int64_t)gridDim.y * blockDim.y) {
    const int64_t id = ids[t];
    const bool valid = id >= 0 && id < vocab;
    const U *src = table + (valid ? id : 0) * table_stride;
    U *dst = y + t * y_stride;
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < row_threads;
         c += (int64_t)gridDim.x * blockDim.x) {
      U v[UPT];
#pragma unroll
      for (int k = 0; k < UPT; k++) {
        const int64_t u = c + k * row_threads;
        v[k] = valid && u < units ? src[u] : U{};
      }
#pragma unroll
      for (int k = 0; k < UPT; k++)
        if (c + k * row_threads < units) dst[c + k * row_threads] = v[k];
    }
  }
}

template <typename U>
kite_status launch(kite_ctx *ctx, const kite_embedding_args *a, const char *variant) {
  if (a->tokens <= 0 || a->hidden <= 0) return KITE_OK;
  if (!a->ids || !a->table || !a->y)
    return kite_set_error(KITE_ERR_INVALID_ARG, "embedding: cuda.%s: NULL ids, table or y",
                          variant);
  cudaStream_t s;
  kite_status st = begin(ctx, "embedding", &s);
  if (st != KITE_OK) return st;
  constexpr int UPT = 4;
  const int64_t per_elem = (int64_t)kite_dtype_size(a->dtype), unit = (int64_t)sizeof(U);
  /* for U wider than an element, vec's supports() has checked that these divide exactly */
  const int64_t units = a->hidden * per_elem / unit;
  const RowGrid g = row_grid(a->tokens, (units + UPT - 1) / UPT);
  embedding_kernel<U, UPT><<<g.grid, g.block, 0, s>>>(
      a->ids, (const U *)a->table, a->table_stride * per_elem / unit, a->vocab, (U *)a->y,
      a->y_stride * per_elem / unit, a->tokens, units);
  return cuda_check_launch("embedding", variant);
}

size_t elem_size(kite_dtype t) {
  return (unsigned)t < KITE_DTYPE_COUNT ? kite_dtype_size(t) : 0;
}

} // namespace

extern "C" CUDA_SUPPORTS(cuda_embedding_vec_supports) {
  const kite_embedding_args *a = (const kite_embedding_args *)args;
  const size_t es = elem_size(a->dtype);
  return ok_unless(es == 0 || ((uint64_t)a->hidden * es) % 16 != 0 ||
                       !rows_aligned16(a->table, a->vocab, a->table_stride, es) ||
                       !rows_aligned16(a->y, a->tokens, a->y_stride, es),
                   "needs 16-byte aligned rows of a multiple of 16 bytes", why);
}

extern "C" CUDA_RUN(cuda_embedding_vec_run) {
  return launch<uint4>(ctx, (const kite_embedding_args *)args, "vec");
}

extern "C" CUDA_RUN(cuda_embedding_generic_run) {
  const kite_embedding_args *a = (const kite_embedding_args *)args;
  switch (elem_size(a->dtype)) {
  case 1:
    return launch<uint8_t>(ctx, a, "generic");
  case 2:
    return launch<uint16_t>(ctx, a, "generic");
  case 4:
    return launch<uint32_t>(ctx, a, "generic");
  case 8:
    return launch<uint64_t>(ctx, a, "generic");
  default:
    return kite_set_error(KITE_ERR_UNSUPPORTED, "embedding: cuda: dtype %s is not supported",
                          cuda_dtype_str(a->dtype));
  }
}

/* ---- embedding_backward (kite.h "Training") --------------------------------------------------
 * dtable[v] = sum of dy[t] over the tokens t with ids[t] == v, in ascending t; rows no id names
 * are zero and ids outside [0, V) are ignored. Deterministic without atomics: the keys (the id,
 * or a sentinel past every valid id for a bad one) are sorted with their token indices by CUB's
 * radix sort, which is stable, so each id's tokens come out in ascending order; then each table
 * row finds its run of the sorted keys by binary search and sums the run's dy rows in that order,
 * a thread per column. Sort buffers and CUB's scratch come from the ctx workspace. */
namespace {

constexpr int kPrepThreads = 256;

__global__ void embedding_bwd_keys(const int32_t *ids, int64_t tokens, uint32_t sentinel,
                                   uint32_t *keys, int32_t *order) {
  for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < tokens;
       t += (int64_t)gridDim.x * blockDim.x) {
    const int32_t id = ids[t];
    keys[t] = id >= 0 && (uint32_t)id < sentinel ? (uint32_t)id : sentinel;
    order[t] = (int32_t)t;
  }
}

/* The first index of sorted keys[0..n) whose key is >= v. */
__device__ __forceinline__ int64_t lower_bound(const uint32_t *keys, int64_t n, uint32_t v) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (keys[mid] < v)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

template <typename T>
__global__ void embedding_bwd_rows(kite_embedding_bwd_args a, const uint32_t *keys,
                                   const int32_t *order, uint32_t sentinel) {
  for (int64_t v = blockIdx.y * (int64_t)blockDim.y + threadIdx.y; v < a.vocab;
       v += (int64_t)gridDim.y * blockDim.y) {
    int64_t lo = 0, hi = 0; /* rows past the sentinel (V > 2^31) have no tokens */
    if (v < (int64_t)sentinel) {
      lo = lower_bound(keys, a.tokens, (uint32_t)v);
      hi = lower_bound(keys, a.tokens, (uint32_t)v + 1);
    }
    T *out = (T *)a.dtable + v * a.dtable_stride;
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < a.hidden;
         c += (int64_t)gridDim.x * blockDim.x) {
      float acc = 0.0f;
      for (int64_t e = lo; e < hi; e++)
        acc += to_float(((const T *)a.dy)[order[e] * a.dy_stride + c]);
      out[c] = from_float<T>(acc);
    }
  }
}

size_t round256(size_t n) {
  return (n + 255) / 256 * 256;
}

} // namespace

extern "C" CUDA_SUPPORTS(cuda_embedding_bwd_supports) {
  const kite_embedding_bwd_args *a = (const kite_embedding_bwd_args *)args;
  if (!float_dtype(a->dtype, why)) return false;
  return ok_unless(a->tokens > 0x7fffffff, "CUB sorts at most 2^31 - 1 tokens", why);
}

extern "C" CUDA_RUN(cuda_embedding_bwd_run) {
  const kite_embedding_bwd_args *a = (const kite_embedding_bwd_args *)args;
  const char *name = "embedding_backward", *variant = "sorted";
  if (a->vocab <= 0 || a->hidden <= 0 || a->tokens < 0) return KITE_OK;
  if (a->tokens > 0x7fffffff)
    return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: cuda.%s: %lld tokens (at most 2^31 - 1)", name,
                          variant, (long long)a->tokens);
  if ((a->tokens > 0 && !a->ids) || !a->dy || !a->dtable)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: cuda.%s: NULL ids, dy or dtable", name,
                          variant);
  cudaStream_t s;
  kite_status st = begin(ctx, name, &s);
  if (st != KITE_OK) return st;
  /* valid ids are < sentinel <= 2^31; the sort looks at the bits up to the sentinel's */
  const uint32_t sentinel = (uint32_t)(a->vocab < (1ll << 31) ? a->vocab : (1ll << 31));
  int end_bit = 1;
  while (end_bit < 32 && (sentinel >> end_bit) != 0) end_bit++;
  const int n = (int)a->tokens;
  uint32_t *keys = nullptr, *keys_sorted = nullptr;
  int32_t *order = nullptr, *order_sorted = nullptr;
  if (n > 0) {
    size_t temp_bytes = 0;
    cudaError_t e = cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys, keys_sorted, order,
                                                    order_sorted, n, 0, end_bit, s);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return kite_set_error(KITE_ERR_DEVICE, "%s: cuda.%s: radix sort: %s", name, variant,
                            cudaGetErrorString(e));
    }
    const size_t arr = round256((size_t)n * 4);
    void *ws = nullptr;
    if ((st = kite_ctx_workspace(ctx, 4 * arr + round256(temp_bytes), &ws)) != KITE_OK) return st;
    char *p = (char *)ws;
    keys = (uint32_t *)p, keys_sorted = (uint32_t *)(p + arr);
    order = (int32_t *)(p + 2 * arr), order_sorted = (int32_t *)(p + 3 * arr);
    const int64_t blocks = (a->tokens + kPrepThreads - 1) / kPrepThreads;
    embedding_bwd_keys<<<(unsigned)(blocks < 65535 ? blocks : 65535), kPrepThreads, 0, s>>>(
        a->ids, a->tokens, sentinel, keys, order);
    if ((st = cuda_check_launch(name, variant)) != KITE_OK) return st;
    e = cub::DeviceRadixSort::SortPairs(p + 4 * arr, temp_bytes, keys, keys_sorted, order,
                                        order_sorted, n, 0, end_bit, s);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return kite_set_error(KITE_ERR_DEVICE, "%s: cuda.%s: radix sort: %s", name, variant,
                            cudaGetErrorString(e));
    }
  }
  return with_float_type(a->dtype, name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const RowGrid g = row_grid(a->vocab, a->hidden);
    embedding_bwd_rows<T><<<g.grid, g.block, 0, s>>>(*a, keys_sorted, order_sorted, sentinel);
    return cuda_check_launch(name, variant);
  });
}
