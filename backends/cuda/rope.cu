/*
 * Rotary position embedding, in place on q[tokens, hq, head_dim] and k[tokens, hkv, head_dim].
 * Row p of cos_sin[max_pos, rot_dim] holds cos[0..half) then sin[0..half), half = rot_dim / 2;
 * pair i (neox: dims i and i + half; gptj: dims 2i and 2i + 1) turns by angle i:
 *   (x0, x1) -> (x0 cos - x1 sin, x1 cos + x0 sin).
 * rope_backward turns the gradients dq, dk back by the same angles (sin negated: the transpose
 * of the rotation). Dims from rot_dim on are not touched. A token whose position lies outside [0,
 * max_pos) is left as it is: the positions live on the device, so the kernel cannot report them,
 * and it never reads outside the cache.
 *
 * A work item rotates N pairs of one head of one token; q's and k's heads are items of one launch.
 * "vec": N = one 16-byte access (neox reads the two halves as packs, gptj two packs of adjacent
 * pairs); "generic": N = 1, any alignment and rot_dim.
 */
#include "common.cuh"

using namespace kite_cuda;

namespace {

/* Threads per block; each block takes tokens_per_block tokens, about 4 items per thread. */
constexpr int kThreads = 256;
constexpr int kItemsPerBlock = 4 * kThreads;

template <typename T, int N, bool NEOX>
__global__ void rope_kernel(kite_rope_args a, int chunks, int tokens_per_block) {
  const int64_t half = a.rot_dim / 2;
  const float sign = a.op == KITE_OP_ROPE_BACKWARD ? -1.0f : 1.0f;
  const int items_per_token = (int)(a.hq + a.hkv) * chunks;
  const int64_t t0 = blockIdx.x * (int64_t)tokens_per_block;
  const int64_t left = a.tokens - t0;
  const int items = (int)(left < tokens_per_block ? left : tokens_per_block) * items_per_token;
  for (int it = threadIdx.x; it < items; it += blockDim.x) {
    const int token_in_block = it / items_per_token, rest = it - token_in_block * items_per_token;
    const int h = rest / chunks, c = rest - h * chunks;
    const int64_t t = t0 + token_in_block;
    const int32_t pos = a.positions[t];
    if (pos < 0 || pos >= a.max_pos) continue;

    T *head = h < a.hq ? (T *)a.q + t * a.q_stride_t + h * a.q_stride_h
                       : (T *)a.k + t * a.k_stride_t + (h - a.hq) * a.k_stride_h;
    const float *cos = a.cos_sin + pos * a.rot_dim + (int64_t)c * N;
    float cs[N], sn[N], x0[N], x1[N];
    load_floats<N>(cos, cs);
    load_floats<N>(cos + half, sn);
#pragma unroll
    for (int j = 0; j < N; j++) sn[j] *= sign;
    if constexpr (NEOX) {
      T *p0 = head + (int64_t)c * N, *p1 = p0 + half;
      load_floats<N>(p0, x0);
      load_floats<N>(p1, x1);
#pragma unroll
      for (int j = 0; j < N; j++) {
        const float r0 = x0[j] * cs[j] - x1[j] * sn[j];
        x1[j] = x1[j] * cs[j] + x0[j] * sn[j];
        x0[j] = r0;
      }
      store_floats<N>(p0, x0);
      store_floats<N>(p1, x1);
    } else {
      /* 2N adjacent elements hold pairs c*N .. c*N + N - 1, as e[2j], e[2j + 1] */
      T *p = head + (int64_t)c * 2 * N;
      float e[2 * N];
      load_floats<N>(p, e);
      load_floats<N>(p + N, e + N);
#pragma unroll
      for (int j = 0; j < N; j++) {
        const float e0 = e[2 * j], e1 = e[2 * j + 1];
        e[2 * j] = e0 * cs[j] - e1 * sn[j];
        e[2 * j + 1] = e1 * cs[j] + e0 * sn[j];
      }
      store_floats<N>(p, e);
      store_floats<N>(p + N, e + N);
    }
  }
}

template <bool VEC> kite_status run(kite_ctx *ctx, const kite_rope_args *a, const char *variant) {
  const char *name = cuda_op_str(a->op);
  if (a->style != KITE_ROPE_NEOX && a->style != KITE_ROPE_GPTJ)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: cuda.%s: unknown style %d", name, variant,
                          (int)a->style);
  if (a->rot_dim < 0 || a->rot_dim % 2 != 0 || a->rot_dim > a->head_dim)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "%s: cuda.%s: rot_dim %lld must be even and in [0, head_dim %lld]", name,
                          variant, (long long)a->rot_dim, (long long)a->head_dim);
  if (a->tokens <= 0 || a->rot_dim == 0 || a->hq + a->hkv <= 0) return KITE_OK;
  if (!a->positions || !a->cos_sin || (a->hq > 0 && !a->q) || (a->hkv > 0 && !a->k))
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: cuda.%s: NULL q, k, positions or cos_sin",
                          name, variant);
  return launch_typed(ctx, name, variant, a->dtype, [&](auto tag, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    constexpr int N = VEC ? vec_elems<T>() : 1;
    const int64_t chunks = a->rot_dim / 2 / N;
    const int64_t items_per_token = (a->hq + a->hkv) * chunks;
    /* items of a block are counted in int */
    if (items_per_token > 0x7fffffff / kItemsPerBlock)
      return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: cuda.%s: %lld heads of %lld pairs", name,
                            variant, (long long)(a->hq + a->hkv), (long long)(a->rot_dim / 2));
    const int64_t per_block =
        items_per_token >= kItemsPerBlock ? 1 : kItemsPerBlock / items_per_token;
    const int64_t blocks = (a->tokens + per_block - 1) / per_block;
    if (blocks > 0x7fffffff)
      return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: cuda.%s: too many tokens", name, variant);
    if (a->style == KITE_ROPE_NEOX)
      rope_kernel<T, N, true>
          <<<(unsigned)blocks, kThreads, 0, s>>>(*a, (int)chunks, (int)per_block);
    else
      rope_kernel<T, N, false>
          <<<(unsigned)blocks, kThreads, 0, s>>>(*a, (int)chunks, (int)per_block);
    return KITE_OK;
  });
}

} // namespace

/* Every pack of q, k and the cache must start 16-byte aligned: base pointers, token and head
 * strides in bytes, and rot_dim / 2 a multiple of the pack. */
extern "C" CUDA_SUPPORTS(cuda_rope_vec_supports) {
  const kite_rope_args *a = (const kite_rope_args *)args;
  if (!float_dtype(a->dtype, why)) return false;
  const int n = vec_elems_of(a->dtype);
  const size_t es = kite_dtype_size(a->dtype);
  const bool q_ok = a->hq == 0 || (rows_aligned16(a->q, a->tokens, a->q_stride_t, es) &&
                                   rows_aligned16(a->q, a->hq, a->q_stride_h, es));
  const bool k_ok = a->hkv == 0 || (rows_aligned16(a->k, a->tokens, a->k_stride_t, es) &&
                                    rows_aligned16(a->k, a->hkv, a->k_stride_h, es));
  return ok_unless(a->rot_dim % (2 * n) != 0 || !aligned16(a->cos_sin) || !q_ok || !k_ok,
                   "needs 16-byte aligned heads and cache, rot_dim a multiple of 2 * 16 bytes",
                   why);
}

extern "C" CUDA_RUN(cuda_rope_vec_run) {
  return run<true>(ctx, (const kite_rope_args *)args, "vec");
}

extern "C" CUDA_RUN(cuda_rope_generic_run) {
  return run<false>(ctx, (const kite_rope_args *)args, "generic");
}
