/*
 * The sampling family on CUDA: argmax, sample, logprobs, apply_penalties, softcap. argmax, sample
 * and logprobs run one 1024-thread block per row; every pass streams the row from global memory
 * (L2 for the repeats of one row), and nothing sorts the vocabulary.
 *
 * sample, per row (block_sample_row in sampling.cuh; kite.h's rules, decoded by kite/sampling.h
 * exactly as on the host):
 *   pass 1: the max and its lowest index, and with top-k a histogram of the top 11 bits of an
 *     order-preserving key of each logit (shared-memory atomics);
 *   top-k: radix select of the k-th largest, one more histogram pass per 11 / 10 key bits, until
 *     the elements at or above the selected bucket fit in shared memory (2048): they are gathered
 *     and sorted there (bitonic), and top-p, min-p and the exponential race run on that small set.
 *     Real logits leave a few dozen tokens in the top buckets, so that is two or three passes;
 *   otherwise (no top-k, or a set too large to gather): top-p by a radix select on the
 *     probability mass (three histogram passes of 11 / 11 / 10 key bits over the tokens top-k
 *     kept), then the race over the row, one Philox call per four tokens, skipping every token
 *     whose score cannot reach the max's own score (z + 17 < s0: the Gumbel draw of a 23-bit
 *     uniform is below 16.7).
 * A NaN logit counts as -inf (a device cannot report it); no token outside [0, V) is written.
 * The mass histograms add floats with shared-memory atomics in whatever order the threads come:
 * the top-p boundary may move by a rounding error from run to run, as between backends.
 */
#include "sampling.cuh"

using namespace kite_cuda;

namespace {

constexpr int kThreads = 1024;

template <typename T>
__global__ __launch_bounds__(kThreads) void sample_kernel(kite_sample_args a) {
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) block_sample_row<T>(a, r);
}

/* logprobs: max, log-sum-exp, then the top n by n rounds of "the best pair below the last". */
template <typename T>
__global__ __launch_bounds__(kThreads) void logprobs_kernel(kite_logprobs_args a) {
  const int tid = threadIdx.x, nt = blockDim.x;
  const int64_t V = a.vocab;
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const T *x = (const T *)a.logits + r * a.logits_stride;
    float m = -INFINITY;
    for (int64_t i = tid; i < V; i += nt) m = fmaxf(m, logit(x, i));
    m = block_max(m);
    float lse = m;
    if (isfinite(m)) {
      float s = 0.0f;
      for (int64_t i = tid; i < V; i += nt) s += expf(logit(x, i) - m);
      lse = m + logf(block_sum(s));
    }
    if (a.tokens && tid == 0) {
      const int32_t tok = a.tokens[r];
      a.token_logprobs[r] = tok >= 0 && tok < V ? logit(x, tok) - lse : NAN;
    }
    float pv = INFINITY;
    int64_t pi = -1;
    for (int64_t j = 0; j < a.n; j++) {
      float bv = -INFINITY;
      int64_t bi = INT64_MAX;
      for (int64_t i = tid; i < V; i += nt) {
        const float v = logit(x, i);
        const bool below = v < pv || (v == pv && i > pi);
        if (below && beats(v, i, bv, bi)) bv = v, bi = i;
      }
      block_best(bv, bi);
      if (bi == INT64_MAX) bi = 0; /* n <= V: never, but no id outside [0, V) */
      if (tid == 0) {
        a.top_ids[r * a.top_ids_stride + j] = (int32_t)bi;
        a.top_logprobs[r * a.top_logprobs_stride + j] = bv - lse;
      }
      pv = bv, pi = bi;
    }
  }
}

/* apply_penalties: positions q of the row's prompt then output ids; the first position holding an
 * id owns it and applies its update, so that each logit is written once, with no atomics. Quadratic
 * in the ids per row, which engines keep to a few thousand. */
template <typename T> __global__ __launch_bounds__(256) void penalties_kernel(kite_penalty_args a) {
  const int64_t L = a.prompt_len + a.output_len;
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const int32_t *pr = a.prompt_ids ? a.prompt_ids + r * a.prompt_stride : nullptr;
    const int32_t *out = a.output_ids ? a.output_ids + r * a.output_stride : nullptr;
    T *x = (T *)a.logits + r * a.logits_stride;
    for (int64_t q = threadIdx.x; q < L; q += blockDim.x) {
      const int32_t id = q < a.prompt_len ? pr[q] : out[q - a.prompt_len];
      if (id < 0 || id >= a.vocab) continue;
      bool owner = true;
      for (int64_t e = 0; e < q && owner; e++)
        owner = (e < a.prompt_len ? pr[e] : out[e - a.prompt_len]) != id;
      if (!owner) continue;
      int64_t count = 0;
      for (int64_t e = 0; e < a.output_len; e++) count += out[e] == id;
      const kite_penalty_row pen = kite_penalty_row_get(&a, r);
      const double rep = pen.repetition, pres = pen.presence, freq = pen.frequency;
      double l = to_float(x[id]);
      l = l > 0.0 ? l / rep : l * rep;
      l -= freq * (double)count + (count > 0 ? pres : 0.0);
      x[id] = from_float<T>((float)l);
    }
  }
}

/* softcap: a block per row (grid-strided), threads over its columns; cap * tanh(l / cap) in f32. */
template <typename T> __global__ __launch_bounds__(256) void softcap_kernel(kite_softcap_args a) {
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    T *x = (T *)a.logits + r * a.logits_stride;
    for (int64_t i = threadIdx.x; i < a.vocab; i += blockDim.x)
      x[i] = from_float<T>(a.cap * tanhf(to_float(x[i]) / a.cap));
  }
}

} // namespace

extern "C" CUDA_RUN(cuda_sample_run) {
  const kite_sample_args *a = (const kite_sample_args *)args;
  const char *op = a->op == KITE_OP_ARGMAX ? "argmax" : "sample";
  if (a->rows <= 0) return KITE_OK;
  return launch_typed(ctx, op, "block", a->dtype, [&](auto tag, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    sample_kernel<T><<<grid_for_rows(a->rows), kThreads, 0, s>>>(*a);
    return KITE_OK;
  });
}

extern "C" CUDA_RUN(cuda_logprobs_run) {
  const kite_logprobs_args *a = (const kite_logprobs_args *)args;
  if (a->rows <= 0) return KITE_OK;
  return launch_typed(ctx, "logprobs", "block", a->dtype, [&](auto tag, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    logprobs_kernel<T><<<grid_for_rows(a->rows), kThreads, 0, s>>>(*a);
    return KITE_OK;
  });
}

extern "C" CUDA_RUN(cuda_penalties_run) {
  const kite_penalty_args *a = (const kite_penalty_args *)args;
  if (a->rows <= 0) return KITE_OK;
  return launch_typed(ctx, "apply_penalties", "owner", a->dtype, [&](auto tag, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    penalties_kernel<T><<<grid_for_rows(a->rows), 256, 0, s>>>(*a);
    return KITE_OK;
  });
}

extern "C" CUDA_RUN(cuda_softcap_run) {
  const kite_softcap_args *a = (const kite_softcap_args *)args;
  if (a->rows <= 0) return KITE_OK;
  return launch_typed(ctx, "softcap", "rows", a->dtype, [&](auto tag, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    softcap_kernel<T><<<grid_for_rows(a->rows), 256, 0, s>>>(*a);
    return KITE_OK;
  });
}
