/*
 * MLA on CUDA (kite.h): mla_store_kv and the generic absorbed mla_decode on CUDA cores.
 *
 * Decode, generic: a CTA takes one sequence and up to kWarps heads, a warp per head. A lane
 * holds the elements lane, lane + 32, ... of its head's latent query (q_nope) and rope query
 * (q_pe) and of the output accumulator, in f32. Keys are walked in order; for each one the warp
 * reduces its dot product by shuffles and updates its online-softmax state (base-2 exponentials);
 * the CTA's warps read the same latent row, so the cache is fetched from memory once per CTA.
 * Any kv_lora_rank <= 1024 and rope dim <= 256 (the front-end's bounds), any dtype, any strides.
 * A key whose block id is out of range is absent; seq_len is clamped to [0, max_blocks *
 * block_size]; a head that sees no key gets zeros and lse -inf.
 */
#include "common.cuh"

using namespace kite_cuda;

namespace {

constexpr int kWarps = 8, kThreads = kWarps * 32;
constexpr int kMaxRank = 1024 / 32, kMaxRope = 256 / 32; /* elements per lane */
constexpr float kLn2 = 0.69314718055994531f;

template <typename T>
__global__ void __launch_bounds__(kThreads) mla_decode_kernel(kite_mla_decode_args a) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t b = blockIdx.x, h = (int64_t)blockIdx.y * kWarps + warp;
  if (h >= a.heads) return;
  const int R = (int)a.kv_rank, P = (int)a.rope_dim;
  const T *qn = (const T *)a.q_nope + b * a.q_nope_stride_b + h * a.q_nope_stride_h;
  const T *qp = (const T *)a.q_pe + b * a.q_pe_stride_b + h * a.q_pe_stride_h;
  float q[kMaxRank], r[kMaxRope], acc[kMaxRank];
#pragma unroll
  for (int i = 0; i < kMaxRank; i++) {
    const int d = lane + 32 * i;
    q[i] = d < R ? to_float(qn[d]) * a.scale * kLog2e : 0.0f;
    acc[i] = 0.0f;
  }
#pragma unroll
  for (int i = 0; i < kMaxRope; i++) {
    const int d = lane + 32 * i;
    r[i] = d < P ? to_float(qp[d]) * a.scale * kLog2e : 0.0f;
  }
  const int64_t capacity = a.max_blocks * a.block_size;
  int64_t n = a.seq_lens[b];
  n = n < 0 ? 0 : n > capacity ? capacity : n;
  const int32_t *row = a.block_table + b * a.block_table_stride;
  const T *ckv = (const T *)a.ckv_cache, *kpe = (const T *)a.kpe_cache;
  float m = -INFINITY, l = 0.0f;
  for (int64_t j = 0; j < n; j++) {
    const int64_t blk = row[j / a.block_size];
    if (blk < 0 || blk >= a.num_blocks) continue; /* absent key */
    const int64_t slot = blk * a.block_size + j % a.block_size;
    const T *kc = ckv + slot * R, *kp = kpe + slot * P;
    float c[kMaxRank], s = 0.0f;
#pragma unroll
    for (int i = 0; i < kMaxRank; i++) {
      const int d = lane + 32 * i;
      c[i] = d < R ? to_float(kc[d]) : 0.0f;
      s = fmaf(q[i], c[i], s);
    }
#pragma unroll
    for (int i = 0; i < kMaxRope; i++) {
      const int d = lane + 32 * i;
      if (d < P) s = fmaf(r[i], to_float(kp[d]), s);
    }
    s = warp_reduce(s, Sum()); /* the score in base 2 */
    const float mx = fmaxf(m, s);
    const float corr = exp2f(m - mx), p = exp2f(s - mx);
    m = mx;
    l = l * corr + p;
#pragma unroll
    for (int i = 0; i < kMaxRank; i++) acc[i] = fmaf(p, c[i], acc[i] * corr);
  }
  T *o = (T *)a.o + b * a.o_stride_b + h * a.o_stride_h;
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
  for (int i = 0; i < kMaxRank; i++) {
    const int d = lane + 32 * i;
    if (d < R) o[d] = from_float<T>(acc[i] * inv);
  }
  if (a.lse && lane == 0) a.lse[b * a.heads + h] = l > 0.0f ? (m + log2f(l)) * kLn2 : -INFINITY;
}

/* mla_store_kv: blockIdx.y walks the tokens, threads the R + P elements of one. */
template <typename T> __global__ void mla_store_kernel(kite_mla_store_kv_args a) {
  const int64_t capacity = a.num_blocks * a.block_size, width = a.kv_rank + a.rope_dim;
  for (int64_t t = blockIdx.y; t < a.tokens; t += gridDim.y) {
    const int64_t slot = a.slots[t];
    if (slot < 0 || slot >= capacity) continue; /* padding, or a slot a device cannot report */
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < width;
         e += (int64_t)gridDim.x * blockDim.x) {
      if (e < a.kv_rank)
        ((T *)a.ckv_cache)[slot * a.kv_rank + e] = ((const T *)a.c_kv)[t * a.c_kv_stride + e];
      else
        ((T *)a.kpe_cache)[slot * a.rope_dim + e - a.kv_rank] =
            ((const T *)a.k_pe)[t * a.k_pe_stride + e - a.kv_rank];
    }
  }
}

} // namespace

extern "C" CUDA_RUN(cuda_mla_store_kv_run) {
  const kite_mla_store_kv_args *a = (const kite_mla_store_kv_args *)args;
  return launch_typed(ctx, "mla_store_kv", "generic", a->dtype, [&](auto tag, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    const int64_t width = a->kv_rank + a->rope_dim;
    const dim3 grid((unsigned)((width + 255) / 256),
                    (unsigned)(a->tokens < 65535 ? a->tokens : 65535));
    mla_store_kernel<T><<<grid, 256, 0, s>>>(*a);
    return KITE_OK;
  });
}

extern "C" CUDA_SUPPORTS(cuda_mla_decode_generic_supports) {
  const kite_mla_decode_args *a = (const kite_mla_decode_args *)args;
  if (!float_dtype(a->dtype, why)) return false;
  return ok_unless(a->batch > INT32_MAX || (a->heads + kWarps - 1) / kWarps > 65535,
                   "batch above 2^31 - 1 or heads above 524280", why);
}

extern "C" CUDA_RUN(cuda_mla_decode_generic_run) {
  const kite_mla_decode_args *a = (const kite_mla_decode_args *)args;
  return launch_typed(ctx, "mla_decode", "generic", a->dtype, [&](auto tag, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    const dim3 grid((unsigned)a->batch, (unsigned)((a->heads + kWarps - 1) / kWarps));
    mla_decode_kernel<T><<<grid, kThreads, 0, s>>>(*a);
    return KITE_OK;
  });
}
