/*
 * The MoE router of today's models and the load-balancing loss: plain kernels, the definitions
 * of kite.h written once per thread (fused_moe_ex: moe_pairs.cu and moe_grouped.cu).
 *
 * moe_route, a thread per token: f32 scores and keys in the workspace ([T, E] each), group keys
 * by top-2 sums, then k arg-max passes (strict >: the lower id keeps a tie).
 * moe_aux_loss: the row max and sum of each softmax (a thread per row), the expert sums c_e,
 * P_e in row order (a thread per expert: deterministic), then the loss (one thread) or the
 * gradient rows (a thread per row).
 */
#include "moe.cuh"

using namespace kite_cuda;

namespace {

__device__ __forceinline__ float nan_low(float v) {
  return isnan(v) ? -INFINITY : v;
}

__device__ int64_t arg_best(const float *v, const unsigned char *off, int64_t n) {
  int64_t best = -1;
  for (int64_t i = 0; i < n; i++)
    if (!off[i] && (best < 0 || v[i] > v[best])) best = i;
  return best;
}

struct RouteWork {
  float *s, *key, *gkey;     /* [T, E], [T, E], [T, G] */
  unsigned char *off, *goff; /* [T, E], [T, G] */
};

template <typename T> __global__ void route_kernel(kite_route_args a, RouteWork w) {
  const int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (r >= a.tokens) return;
  const kite_route_opts o = a.opts;
  const int64_t E = a.experts, K = o.k, G = o.n_group, gs = E / G;
  const float *bias = a.bias;
  const T *l = (const T *)a.logits + r * a.logits_stride;
  float *s = w.s + r * E, *key = w.key + r * E, *gkey = w.gkey + r * G;
  unsigned char *off = w.off + r * E, *goff = w.goff + r * G;
  float m = -INFINITY;
  for (int64_t e = 0; e < E; e++) {
    s[e] = to_float(l[e]);
    if (s[e] > m || isnan(s[e])) m = s[e];
  }
  const bool on_logits = !bias && G == 1;
  if (on_logits || o.score == KITE_ROUTE_SOFTMAX_TOPK)
    for (int64_t e = 0; e < E; e++) key[e] = nan_low(s[e] + (bias ? bias[e] : 0.0f));
  if (o.score == KITE_ROUTE_SOFTMAX) {
    float sum = 0.0f;
    for (int64_t e = 0; e < E; e++) sum += s[e] = expf(s[e] - m);
    for (int64_t e = 0; e < E; e++) s[e] /= sum;
  } else if (o.score == KITE_ROUTE_SIGMOID) {
    for (int64_t e = 0; e < E; e++) s[e] = 1.0f / (1.0f + expf(-s[e]));
  } else {
    for (int64_t e = 0; e < E; e++) s[e] += bias ? bias[e] : 0.0f;
  }
  if (!on_logits && o.score != KITE_ROUTE_SOFTMAX_TOPK)
    for (int64_t e = 0; e < E; e++) key[e] = nan_low(s[e] + (bias ? bias[e] : 0.0f));
  for (int64_t e = 0; e < E; e++) off[e] = 0;
  if (G > 1) {
    for (int64_t g = 0; g < G; g++) {
      const int64_t b1 = arg_best(key + g * gs, off + g * gs, gs);
      off[g * gs + b1] = 1;
      const int64_t b2 = gs > 1 ? arg_best(key + g * gs, off + g * gs, gs) : -1;
      off[g * gs + b1] = 0;
      gkey[g] = nan_low(key[g * gs + b1] + (b2 >= 0 ? key[g * gs + b2] : 0.0f));
      goff[g] = 0;
    }
    for (int64_t j = 0; j < o.topk_group; j++) goff[arg_best(gkey, goff, G)] = 1;
    for (int64_t e = 0; e < E; e++) off[e] = !goff[e / gs];
  }
  float *wt = a.weights + r * a.weights_stride;
  int32_t *id = a.ids + r * a.ids_stride;
  float zmax = -INFINITY, wsum = 0.0f;
  for (int64_t j = 0; j < K; j++) {
    const int64_t b = arg_best(key, off, E);
    off[b] = 1;
    id[j] = (int32_t)b;
    wt[j] = s[b];
    zmax = fmaxf(zmax, wt[j]);
  }
  if (o.score == KITE_ROUTE_SOFTMAX_TOPK) {
    float zs = 0.0f;
    for (int64_t j = 0; j < K; j++) zs += wt[j] = expf(wt[j] - zmax);
    for (int64_t j = 0; j < K; j++) wt[j] /= zs;
  }
  for (int64_t j = 0; j < K; j++) wsum += wt[j];
  const float scale = o.renormalize ? o.scaling / (wsum + 1e-20f) : o.scaling;
  for (int64_t j = 0; j < K; j++) wt[j] *= scale;
}

/* Row statistics of the softmax: stat[2r] = max, stat[2r + 1] = sum of exp(x - max). */
template <typename T> __global__ void aux_stats_kernel(kite_aux_loss_args a, float *stat) {
  const int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (r >= a.tokens) return;
  const T *l = (const T *)a.logits + r * a.logits_stride;
  float m = -INFINITY, sum = 0.0f;
  for (int64_t e = 0; e < a.experts; e++) {
    const float v = to_float(l[e]);
    if (v > m || isnan(v)) m = v;
  }
  for (int64_t e = 0; e < a.experts; e++) sum += expf(to_float(l[e]) - m);
  stat[2 * r] = m, stat[2 * r + 1] = sum;
}

/* A thread per expert: c_e and P_e over the rows in order; thread 0 of block 0 also M. */
template <typename T>
__global__ void aux_sums_kernel(kite_aux_loss_args a, const float *stat, double *c, double *P,
                                double *M, bool want_p) {
  const int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (e == 0) {
    double m = 0.0;
    for (int64_t t = 0; t < a.tokens; t++) m += a.mask ? a.mask[t] : 1.0f;
    *M = m;
  }
  if (e >= a.experts) return;
  double ce = 0.0, pe = 0.0;
  for (int64_t t = 0; t < a.tokens; t++) {
    const float mt = a.mask ? a.mask[t] : 1.0f;
    for (int64_t j = 0; j < a.k; j++)
      if (a.ids[t * a.ids_stride + j] == e) ce += mt;
    if (want_p) {
      const T *l = (const T *)a.logits + t * a.logits_stride;
      pe += (double)mt * (expf(to_float(l[e]) - stat[2 * t]) / stat[2 * t + 1]);
    }
  }
  c[e] = ce, P[e] = pe;
}

__global__ void aux_loss_kernel(kite_aux_loss_args a, const double *c, const double *P,
                                const double *M) {
  double l = 0.0;
  for (int64_t e = 0; e < a.experts; e++) l += c[e] * P[e];
  a.loss[0] = *M != 0.0 ? (float)(l * (double)a.experts / (*M * *M)) : 0.0f;
}

template <typename T>
__global__ void aux_bwd_kernel(kite_aux_loss_args a, const float *stat, const double *c,
                               const double *M) {
  const int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (r >= a.tokens) return;
  const double g = *M != 0.0 ? a.dloss[0] * (double)a.experts / (*M * *M) : 0.0;
  const double gm = g * (a.mask ? a.mask[r] : 1.0f);
  const T *l = (const T *)a.logits + r * a.logits_stride;
  T *d = (T *)a.dlogits + r * a.dlogits_stride;
  const float m = stat[2 * r], sum = stat[2 * r + 1];
  double cp = 0.0;
  for (int64_t e = 0; e < a.experts; e++) cp += c[e] * (expf(to_float(l[e]) - m) / sum);
  for (int64_t e = 0; e < a.experts; e++) {
    const double p = expf(to_float(l[e]) - m) / sum;
    d[e] = from_float<T>((float)(gm * p * (c[e] - cp)));
  }
}

size_t up256(size_t n) {
  return (n + 255) & ~(size_t)255;
}

unsigned blocks_of(int64_t n, int per) {
  return (unsigned)((n + per - 1) / per);
}

} // namespace

extern "C" CUDA_RUN(cuda_moe_route_run) {
  const kite_route_args *a = (const kite_route_args *)args;
  const int64_t T_ = a->tokens, E = a->experts, G = a->opts.n_group;
  const size_t f = up256((size_t)(T_ * E) * 4), g = up256((size_t)(T_ * G) * 4);
  const size_t b = up256((size_t)(T_ * E)), gb = up256((size_t)(T_ * G));
  void *ws;
  kite_status st = kite_ctx_workspace(ctx, 2 * f + g + b + gb, &ws);
  if (st != KITE_OK) return st;
  char *p = (char *)ws;
  RouteWork w = {(float *)p, (float *)(p + f), (float *)(p + 2 * f),
                 (unsigned char *)(p + 2 * f + g), (unsigned char *)(p + 2 * f + g + b)};
  return launch_typed(ctx, "moe_route", "thread", a->dtype, [&](auto tag, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    route_kernel<T><<<blocks_of(T_, 128), 128, 0, s>>>(*a, w);
    return KITE_OK;
  });
}

extern "C" CUDA_RUN(cuda_moe_aux_loss_run) {
  const kite_aux_loss_args *a = (const kite_aux_loss_args *)args;
  const bool bwd = a->op == KITE_OP_MOE_AUX_LOSS_BACKWARD;
  const int64_t T_ = a->tokens, E = a->experts;
  const size_t st_b = up256((size_t)(2 * T_) * 4 + 4), e_b = up256((size_t)(E + 1) * 8);
  void *ws;
  kite_status st = kite_ctx_workspace(ctx, st_b + 2 * e_b + 256, &ws);
  if (st != KITE_OK) return st;
  char *p = (char *)ws;
  float *stat = (float *)p;
  double *c = (double *)(p + st_b), *P = (double *)(p + st_b + e_b);
  double *M = (double *)(p + st_b + 2 * e_b);
  const char *op = bwd ? "moe_aux_loss_backward" : "moe_aux_loss";
  return launch_typed(ctx, op, "rows", a->dtype, [&](auto tag, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    if (T_ > 0) aux_stats_kernel<T><<<blocks_of(T_, 128), 128, 0, s>>>(*a, stat);
    aux_sums_kernel<T><<<blocks_of(E > 0 ? E : 1, 128), 128, 0, s>>>(*a, stat, c, P, M, !bwd);
    if (!bwd)
      aux_loss_kernel<<<1, 1, 0, s>>>(*a, c, P, M);
    else if (T_ > 0)
      aux_bwd_kernel<T><<<blocks_of(T_, 128), 128, 0, s>>>(*a, stat, c, M);
    return KITE_OK;
  });
}
