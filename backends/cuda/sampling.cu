/*
 * The sampling family on CUDA: argmax, sample, logprobs, apply_penalties, softcap. argmax, sample
 * and logprobs run one 1024-thread block per row; every pass streams the row from global memory
 * (L2 for the repeats of one row), and nothing sorts the vocabulary.
 *
 * sample, per row (kite.h's rules, decoded by kite/sampling.h exactly as on the host):
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

struct RowState {
  uint32_t bucket[3];
  int64_t above; /* count above the selected bucket */
  double mass_above;
  float lo;
  int gathered; /* candidates in shared memory */
};

template <typename T>
__global__ __launch_bounds__(kThreads) void sample_kernel(kite_sample_args a) {
  __shared__ uint32_t hc[kBuckets];
  __shared__ float hm[kBuckets];
  __shared__ float cv[kCap];
  __shared__ int32_t ci[kCap];
  __shared__ RowState st;
  __shared__ int s_n;
  const int tid = threadIdx.x, nt = blockDim.x;
  const int64_t V = a.vocab;
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const T *x = (const T *)a.logits + r * a.logits_stride;
    const kite_sample_row p = kite_sample_row_get(&a, r);
    const bool topk = !p.greedy && p.top_k > 0;
    __syncthreads(); /* the previous row is done with shared memory */
    for (int b = tid; b < kBuckets; b += nt) hc[b] = 0;
    __syncthreads();
    /* pass 1: max, its lowest index, top-11-bit counts */
    float m = -INFINITY;
    int64_t amax = INT64_MAX;
    for (int64_t i = tid; i < V; i += nt) {
      const float v = logit(x, i);
      if (v > m) m = v, amax = i;
      if (topk) atomicAdd(&hc[order_key(v) >> 21], 1u);
    }
    block_best(m, amax);
    if (m == -INFINITY) amax = 0;
    if (p.greedy || isinf(m)) {
      if (tid == 0) a.tokens[r] = (int32_t)amax;
      continue;
    }
    const float t = p.temperature;
    float lo = -INFINITY;
    bool gathered = false;
    int n = 0;
    if (topk) {
      /* radix select of the k-th largest: level l narrows the key to bucket[l] */
      uint32_t prefix = 0;
      int64_t above = 0;
      for (int level = 0; level < 3 && !gathered; level++) {
        const int shift = level_shift(level);
        const uint32_t mask = level_mask(level);
        if (level > 0) {
          __syncthreads();
          for (int b = tid; b < kBuckets; b += nt) hc[b] = 0;
          __syncthreads();
          for (int64_t i = tid; i < V; i += nt) {
            const uint32_t k = order_key(logit(x, i));
            if (k >> (shift + level_above(level)) == prefix)
              atomicAdd(&hc[(k >> shift) & mask], 1u);
          }
        }
        __syncthreads();
        if (tid == 0) {
          uint32_t b = mask;
          int64_t ab = above;
          while (b > 0 && ab + hc[b] < p.top_k) ab += hc[b--];
          st.bucket[level] = b;
          st.above = ab;
          st.gathered = ab + hc[b] <= kCap;
        }
        __syncthreads();
        prefix = level == 0 ? st.bucket[0] : (prefix << level_above(level)) | st.bucket[level];
        above = st.above;
        const uint32_t lo_key = prefix << shift; /* smallest key of the selected bucket */
        if (st.gathered || level == 2) {
          if (level == 2) lo = key_value(prefix);
          if (!st.gathered) break;
          /* gather every logit with a key at or above the bucket's smallest */
          if (tid == 0) s_n = 0;
          __syncthreads();
          for (int64_t i = tid; i < V; i += nt) {
            const float v = logit(x, i);
            if (order_key(v) >= lo_key) {
              const int at = atomicAdd(&s_n, 1);
              if (at < kCap) cv[at] = v, ci[at] = (int32_t)i;
            }
          }
          __syncthreads();
          n = s_n < kCap ? s_n : kCap;
          gathered = true;
        }
      }
    }
    if (gathered) {
      sort_candidates(cv, ci, n);
      if (tid == 0) {
        /* top-k keeps the k-th largest and its ties; top-p walks groups of equal logits */
        const float kth = cv[p.top_k - 1];
        int kept = (int)p.top_k;
        while (kept < n && cv[kept] >= kth) kept++;
        float lo_s = kth;
        if (p.top_p < 1.0f) {
          double z = 0.0;
          for (int j = 0; j < kept; j++) z += (double)expf((cv[j] - m) / t);
          const double target = (double)p.top_p * z;
          double above_m = 0.0;
          int j = 0;
          while (j < kept) {
            if (j > 0 && !(above_m < target)) break;
            const float g = cv[j];
            lo_s = g;
            while (j < kept && cv[j] == g) above_m += (double)expf((cv[j++] - m) / t);
          }
        }
        st.lo = lo_s;
        s_n = kept;
      }
      __syncthreads();
      lo = st.lo;
      const int kept = s_n;
      const int64_t tok = race_candidates(p, cv, ci, kept, lo, m, t, amax, tid, nt);
      if (tid == 0) a.tokens[r] = (int32_t)tok;
      continue;
    }
    /* top-p by mass over the tokens >= lo (top-k's threshold, or all) */
    if (p.top_p < 1.0f) {
      if (p.top_p <= 0.0f) {
        lo = m;
      } else {
        const float lo_k = lo;
        uint32_t prefix = 0;
        double above_m = 0.0, target = 0.0;
        for (int level = 0; level < 3; level++) {
          const int shift = level_shift(level);
          const uint32_t mask = level_mask(level);
          __syncthreads();
          for (int b = tid; b < kBuckets; b += nt) hm[b] = 0.0f;
          __syncthreads();
          float zsum = 0.0f;
          for (int64_t i = tid; i < V; i += nt) {
            const float v = logit(x, i);
            if (!(v >= lo_k)) continue;
            const uint32_t k = order_key(v);
            if (level > 0 && k >> (shift + level_above(level)) != prefix) continue;
            const float w = expf((v - m) / t);
            zsum += w;
            atomicAdd(&hm[(k >> shift) & mask], w);
          }
          if (level == 0) {
            zsum = block_sum(zsum);
            target = (double)p.top_p * (double)zsum;
          }
          __syncthreads();
          if (tid == 0) {
            uint32_t b = mask;
            double ab = above_m;
            while (b > 0 && !(ab + (double)hm[b] >= target)) ab += (double)hm[b--];
            st.bucket[level] = b;
            st.mass_above = ab;
          }
          __syncthreads();
          prefix = level == 0 ? st.bucket[0] : (prefix << level_above(level)) | st.bucket[level];
          above_m = st.mass_above;
        }
        lo = fmaxf(lo_k, key_value(prefix));
      }
    }
    /* the race over the row, from the max's own score */
    const float zcut = p.min_p > 0.0f ? logf(p.min_p) : -INFINITY;
    const float s0 = race_score(0.0f, kite_sample_words(&p, amax >> 2).v[amax & 3]);
    float bs = s0;
    int64_t bi = amax;
    for (int64_t q = tid; q < (V + 3) / 4; q += nt) {
      float v[4], z[4];
      bool any = false;
#pragma unroll
      for (int j = 0; j < 4; j++) {
        const int64_t i = 4 * q + j;
        v[j] = i < V ? logit(x, i) : -INFINITY;
        z[j] = (v[j] - m) / t;
        any |= v[j] >= lo && z[j] >= zcut && z[j] + kGumbelMax >= s0;
      }
      if (!any) continue;
      const kite_philox4 w = kite_sample_words(&p, q);
#pragma unroll
      for (int j = 0; j < 4; j++) {
        if (!(v[j] >= lo && z[j] >= zcut)) continue;
        const float sc = race_score(z[j], w.v[j]);
        if (beats(sc, 4 * q + j, bs, bi)) bs = sc, bi = 4 * q + j;
      }
    }
    block_best(bs, bi);
    if (tid == 0) a.tokens[r] = (int32_t)(bi >= 0 && bi < V ? bi : amax);
  }
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
