/*
 * Embedding lookup: y[t, :] = table[ids[t], :], a bit-exact copy of the row; an id outside
 * [0, vocab) gives a row of zeros. Nothing is computed, so any element type works: rows are moved
 * in units U of 16 bytes in "vec" (rows 16-byte aligned, row bytes a multiple of 16) and of one
 * element in "generic".
 */
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
  void *stream;
  kite_status st = cuda_begin(ctx, "embedding", &stream);
  if (st != KITE_OK) return st;
  constexpr int UPT = 4;
  const int64_t per_elem = (int64_t)kite_dtype_size(a->dtype), unit = (int64_t)sizeof(U);
  /* for U wider than an element, vec's supports() has checked that these divide exactly */
  const int64_t units = a->hidden * per_elem / unit;
  const RowGrid g = row_grid(a->tokens, (units + UPT - 1) / UPT);
  embedding_kernel<U, UPT><<<g.grid, g.block, 0, (cudaStream_t)stream>>>(
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
  if (es == 0 || ((uint64_t)a->hidden * es) % 16 != 0 ||
      !rows_aligned16(a->table, a->vocab, a->table_stride, es) ||
      !rows_aligned16(a->y, a->tokens, a->y_stride, es)) {
    *why = "needs 16-byte aligned rows of a multiple of 16 bytes";
    return false;
  }
  return true;
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
