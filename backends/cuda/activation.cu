/*
 * Activations x[rows, cols] -> y[rows, cols] (silu, gelu, gelu_tanh, gelu_quick, relu) and gated
 * activations x[rows, 2*cols] -> y[rows, cols] (silu_and_mul, gelu_and_mul, gelu_tanh_and_mul):
 * y[r, i] = act(g) * u with the gate g = x[r, i] and the up projection u = x[r, cols + i]; limit
 * > 0 first clamps g <= limit and u to [-limit, limit]; NaN stays NaN. One kernel body serves
 * both (GATED) and one launch helper every op, as on the CPU.
 * A thread maps N consecutive outputs of a row: N = one 16-byte access in "vec" (rows aligned,
 * cols a multiple of N), N = 1 in "generic" (any layout). y may be x (plain activations): each
 * element is read by the thread that writes it, before it writes it.
 */
#include "common.cuh"

using namespace kite_cuda;

namespace {

/* What the kernel takes: the gated args, which hold the plain ones' fields (limit 0 for them). */
using ActParams = kite_gated_args;

template <typename T, int N, Act A, bool GATED> __global__ void act_kernel(ActParams a) {
  const int64_t packs = a.cols / N;
  const bool clamp = GATED && a.limit > 0.0f; /* false for NaN too */
  for (int64_t r = blockIdx.y * (int64_t)blockDim.y + threadIdx.y; r < a.rows;
       r += (int64_t)gridDim.y * blockDim.y) {
    const T *x = (const T *)a.x + r * a.x_stride;
    const T *up = GATED ? x + a.cols : x;
    T *y = (T *)a.y + r * a.y_stride;
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < packs;
         c += (int64_t)gridDim.x * blockDim.x) {
      float v[N];
      load_floats<N>(x + c * N, v);
      if (GATED) {
        float u[N];
        load_floats<N>(up + c * N, u);
#pragma unroll
        for (int i = 0; i < N; i++) {
          if (clamp) {
            v[i] = v[i] > a.limit ? a.limit : v[i];
            u[i] = u[i] > a.limit ? a.limit : u[i] < -a.limit ? -a.limit : u[i];
          }
          v[i] = activate<A>(v[i]) * u[i];
        }
      } else {
#pragma unroll
        for (int i = 0; i < N; i++) v[i] = activate<A>(v[i]);
      }
      store_floats<N>(y + c * N, v);
    }
  }
}

template <bool VEC>
kite_status launch(kite_ctx *ctx, kite_op op, kite_dtype dtype, const ActParams &p,
                   const char *variant) {
  const char *name = cuda_op_str(op);
  if (p.rows <= 0 || p.cols <= 0) return KITE_OK;
  return launch_typed(ctx, name, variant, dtype, [&](auto tag, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    constexpr int N = VEC ? vec_elems<T>() : 1;
    const RowGrid g = row_grid(p.rows, p.cols / N);
#define ACT_CASE(op_id, A, GATED)                                                                  \
  case op_id:                                                                                      \
    act_kernel<T, N, A, GATED><<<g.grid, g.block, 0, s>>>(p);                                      \
    break
    switch (op) {
#define ACT_ITEM(ID, name) ACT_CASE(KITE_OP_##ID, Act::name, false);
#define GATED_ITEM(ID, name, AID, aname) ACT_CASE(KITE_OP_##ID, Act::aname, true);
      KITE_ACTIVATION_OPS(ACT_ITEM)
      KITE_GATED_OPS(GATED_ITEM)
#undef ACT_ITEM
#undef GATED_ITEM
    default:
      return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: cuda: not an activation", name);
    }
#undef ACT_CASE
    return KITE_OK;
  });
}

ActParams params(const kite_act_args *a) {
  return ActParams{a->op, a->dtype, a->rows, a->cols, a->x, a->x_stride, a->y, a->y_stride, 0.0f};
}

ActParams params(const kite_gated_args *a) {
  return *a;
}

/* vec: rows 16-byte aligned and cols a multiple of a 16-byte pack (for gated, that keeps the up
 * half, cols elements into the row, aligned too). */
bool vec_fits(kite_dtype t, const ActParams &p, const char **why) {
  return vec_rows_fit(t, p.rows, p.cols, {{p.x, p.x_stride}, {p.y, p.y_stride}}, why);
}

} // namespace

/* The entry points of a family (act, gated) whose Args give ActParams (params()): vec's supports
 * and the two runs; generic's supports is cuda_float_supports. */
#define ACT_ENTRIES(family, Args)                                                                  \
  extern "C" CUDA_SUPPORTS(cuda_##family##_vec_supports) {                                         \
    const Args *a = (const Args *)args;                                                            \
    return vec_fits(a->dtype, params(a), why);                                                     \
  }                                                                                                \
  extern "C" CUDA_RUN(cuda_##family##_vec_run) {                                                   \
    const Args *a = (const Args *)args;                                                            \
    return launch<true>(ctx, a->op, a->dtype, params(a), "vec");                                   \
  }                                                                                                \
  extern "C" CUDA_RUN(cuda_##family##_generic_run) {                                               \
    const Args *a = (const Args *)args;                                                            \
    return launch<false>(ctx, a->op, a->dtype, params(a), "generic");                              \
  }
ACT_ENTRIES(act, kite_act_args)
ACT_ENTRIES(gated, kite_gated_args)

/* ---- backward (kite.h "Training") ------------------------------------------------------------
 * activation_backward: dx = dy * act'(x), [rows, cols] each; dx may be dy (each element is read
 * by the thread that writes it, before it writes it).
 * gated_backward: x[rows, 2 cols] = (gate | up), dy[rows, cols] -> dx[rows, 2 cols] = (d gate |
 * d up) with d gate = dy * up * act'(gate), d up = dy * act(gate); limit > 0 clamps as the
 * forward did and zeroes the gradient of each clamped value. Same thread mapping as the forward:
 * N consecutive columns per work item. */
namespace {

template <typename T, int N, Act A, bool GATED>
__global__ void act_bwd_kernel(kite_act_bwd_args a) {
  const int64_t packs = a.cols / N;
  const bool clamp = GATED && a.limit > 0.0f;
  for (int64_t r = blockIdx.y * (int64_t)blockDim.y + threadIdx.y; r < a.rows;
       r += (int64_t)gridDim.y * blockDim.y) {
    const T *x = (const T *)a.x + r * a.x_stride;
    const T *dy = (const T *)a.dy + r * a.dy_stride;
    T *dx = (T *)a.dx + r * a.dx_stride;
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < packs;
         c += (int64_t)gridDim.x * blockDim.x) {
      float g[N], d[N];
      load_floats<N>(x + c * N, g);
      load_floats<N>(dy + c * N, d);
      if (!GATED) {
#pragma unroll
        for (int i = 0; i < N; i++) g[i] = d[i] * activate_grad<A>(g[i]);
        store_floats<N>(dx + c * N, g);
        continue;
      }
      float u[N];
      load_floats<N>(x + a.cols + c * N, u);
#pragma unroll
      for (int i = 0; i < N; i++) {
        bool g_live = true, u_live = true;
        if (clamp) {
          if (g[i] > a.limit) g[i] = a.limit, g_live = false;
          if (u[i] > a.limit) u[i] = a.limit, u_live = false;
          if (u[i] < -a.limit) u[i] = -a.limit, u_live = false;
        }
        const float dg = g_live ? d[i] * u[i] * activate_grad<A>(g[i]) : 0.0f;
        u[i] = u_live ? d[i] * activate<A>(g[i]) : 0.0f;
        g[i] = dg;
      }
      store_floats<N>(dx + c * N, g);
      store_floats<N>(dx + a.cols + c * N, u);
    }
  }
}

template <bool VEC>
kite_status launch_bwd(kite_ctx *ctx, const kite_act_bwd_args *a, const char *variant) {
  const char *name = cuda_op_str(a->op);
  if (a->rows <= 0 || a->cols <= 0) return KITE_OK;
  const bool gated = a->op == KITE_OP_GATED_BACKWARD;
  if (!gated && a->op != KITE_OP_ACTIVATION_BACKWARD)
    return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: cuda.%s: not an activation backward", name,
                          variant);
  return launch_typed(ctx, name, variant, a->dtype, [&](auto tag, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    constexpr int N = VEC ? vec_elems<T>() : 1;
    const RowGrid g = row_grid(a->rows, a->cols / N);
#define ACT_BWD_CASE(op_id, A, GATED)                                                              \
  case op_id:                                                                                      \
    if (gated != GATED) break;                                                                     \
    act_bwd_kernel<T, N, A, GATED><<<g.grid, g.block, 0, s>>>(*a);                                 \
    return KITE_OK
    switch (a->act) {
#define ACT_ITEM(ID, name) ACT_BWD_CASE(KITE_OP_##ID, Act::name, false);
#define GATED_ITEM(ID, name, AID, aname) ACT_BWD_CASE(KITE_OP_##ID, Act::aname, true);
      KITE_ACTIVATION_OPS(ACT_ITEM)
      KITE_GATED_OPS(GATED_ITEM)
#undef ACT_ITEM
#undef GATED_ITEM
    default:
      break;
    }
#undef ACT_BWD_CASE
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: cuda.%s: act %d is not a%s activation", name,
                          variant, (int)a->act, gated ? " gated" : "n");
  });
}

} // namespace

/* vec: as the forward's, with dy's rows aligned too */
extern "C" CUDA_SUPPORTS(cuda_act_bwd_vec_supports) {
  const kite_act_bwd_args *a = (const kite_act_bwd_args *)args;
  return vec_rows_fit(a->dtype, a->rows, a->cols,
                      {{a->x, a->x_stride}, {a->dx, a->dx_stride}, {a->dy, a->dy_stride}}, why);
}

extern "C" CUDA_RUN(cuda_act_bwd_vec_run) {
  return launch_bwd<true>(ctx, (const kite_act_bwd_args *)args, "vec");
}

extern "C" CUDA_RUN(cuda_act_bwd_generic_run) {
  return launch_bwd<false>(ctx, (const kite_act_bwd_args *)args, "generic");
}
