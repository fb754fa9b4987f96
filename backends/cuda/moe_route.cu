/*
 * The MoE router of today's models, fused_moe_ex and the load-balancing loss: plain kernels,
 * the definitions of kite.h written once per thread.
 *
 * moe_route, a thread per token: f32 scores and keys in the workspace ([T, E] each), group keys
 * by top-2 sums, then k arg-max passes (strict >: the lower id keeps a tie).
 * fused_moe_ex, a block per token: for each pick, the threads share the I intermediate values
 * (gate/up dots, clamp, activation, rounded to the dtype), then the H outputs (w2 dots, b2),
 * accumulated in registers of the thread that owns the output column. Transposed weights are
 * read in place through element strides.
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

/* A block per token; ws: the workspace, [T, I] f32 intermediates then [T, H] f32 sums (each
 * sum column owned by one thread from start to end). */
template <typename T> __global__ void moe_ex_kernel(kite_moe_ex_args ax, float *ws) {
  const kite_moe_args &a = ax.moe;
  const int64_t r = blockIdx.x, H = a.hidden, I = a.inter;
  const bool il = ax.opts.layout == KITE_MOE_INTERLEAVED;
  const float lim = ax.opts.limit, alpha = ax.opts.alpha;
  /* element strides of w13[e]'s (row n of 2I, column c of H) and w2[e]'s (row c of H, column i
   * of I): transposed, consecutive threads read consecutive columns of the stored rows */
  const bool tr = ax.opts.transposed != 0;
  const int64_t w13_sn = tr ? 1 : H, w13_sc = tr ? 2 * I : 1;
  const int64_t w2_sn = tr ? 1 : I, w2_sc = tr ? H : 1;
  const T *x = (const T *)a.x + r * a.x_stride, *b13 = (const T *)ax.b13, *b2 = (const T *)ax.b2;
  float *act = ws + r * I, *acc = ws + a.tokens * I + r * H;
  for (int64_t c = threadIdx.x; c < H; c += blockDim.x) acc[c] = 0.0f;
  for (int64_t j = 0; j < a.topk; j++) {
    const int64_t e = a.ids[r * a.ids_stride + j];
    const float p = a.weights[r * a.weights_stride + j];
    if (e < 0 || e >= a.experts) continue;
    const T *w13 = (const T *)a.w13 + e * 2 * I * H, *w2 = (const T *)a.w2 + e * H * I;
    __syncthreads(); /* act of the previous pick fully read */
    for (int64_t i = threadIdx.x; i < I; i += blockDim.x) {
      const int64_t gr = il ? 2 * i : i, ur = il ? 2 * i + 1 : I + i;
      float gs = 0.0f, us = 0.0f;
      for (int64_t c = 0; c < H; c++) {
        const float xv = to_float(x[c]);
        gs = fmaf(xv, to_float(w13[gr * w13_sn + c * w13_sc]), gs);
        us = fmaf(xv, to_float(w13[ur * w13_sn + c * w13_sc]), us);
      }
      const float gate = gs + (b13 ? to_float(b13[e * 2 * I + gr]) : 0.0f);
      const float up = us + (b13 ? to_float(b13[e * 2 * I + ur]) : 0.0f);
      const float v = moe_ex_activate(gate, up, a.act, alpha, lim);
      act[i] = to_float(from_float<T>(v)); /* the intermediate, rounded to the dtype */
    }
    __syncthreads();
    for (int64_t c = threadIdx.x; c < H; c += blockDim.x) {
      float v = b2 ? to_float(b2[e * H + c]) : 0.0f;
      for (int64_t i = 0; i < I; i++) v = fmaf(act[i], to_float(w2[c * w2_sn + i * w2_sc]), v);
      acc[c] = fmaf(p, v, acc[c]);
    }
  }
  for (int64_t c = threadIdx.x; c < H; c += blockDim.x)
    ((T *)a.y)[r * a.y_stride + c] = from_float<T>(acc[c]);
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

extern "C" CUDA_RUN(cuda_fused_moe_ex_run) {
  const kite_moe_ex_args *a = (const kite_moe_ex_args *)args;
  const kite_moe_args *m = &a->moe;
  if (m->tokens <= 0 || m->hidden <= 0) return KITE_OK;
  void *ws;
  kite_status st =
      kite_ctx_workspace(ctx, (size_t)(m->tokens * (m->inter + m->hidden)) * 4 + 4, &ws);
  if (st != KITE_OK) return st;
  return launch_typed(ctx, "fused_moe_ex", "block", m->dtype, [&](auto tag, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    moe_ex_kernel<T><<<(unsigned)m->tokens, 256, 0, s>>>(*a, (float *)ws);
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
