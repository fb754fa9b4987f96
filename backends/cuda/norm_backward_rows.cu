/*
 * The norm backward's persistent rows kernels (the math and the partials of dw / db:
 * norm_backward.cuh).
 *
 * "rows_fused" is a persistent grid (as many blocks as fit on the device at once, read from the SM
 * count and the kernel's occupancy) whose blocks take bands of consecutive rows; within a block a
 * group of 32 * wpr threads (a warp or a few) takes every gpc-th row of the band, holding the
 * row's x and dy as raw 16-byte packs (up to 4 per thread each, so that many loads are in flight),
 * with the row's sums reduced by warp shuffles and, across the group's warps, one named barrier
 * (no block-wide barrier in the row loop). A thread owns the same columns in every row: its dw /
 * db terms stay in registers over the band, and the block's groups add them into the block's
 * partial row in group order once at the end. The grid depends on the device and the shape only,
 * so the bits of dw / db are the same run after run on one device.
 *
 * A row costs one group reduction: a single sweep over the row's packs sums d, d^2, g and g d
 * (d = x - x0, layer norm) or x^2 and g x (rms), then one more pass over its registers writes dx:
 *   mean = mean(d), var = mean(d^2) - mean^2, mean(g xhat) = rstd (mean(g d) - mean mean(g)).
 * For rms that is the same math; for layer norm the differences lose about (1 + z^2) times f32's
 * precision, z = (x0 - mean(x)) / std(x): small for any row whose first element is not a far
 * outlier (the shift by x0 keeps a large common offset out of them).
 * "rows_fused_wide" (layer norm with dres only, where it beats rows_fused) is rows_fused with at
 * most 2 packs per thread (twice the warps per row where rows_fused holds 3 or 4): half the
 * registers of dw / db terms, for other occupancy.
 */
#include "norm_backward.cuh"

using namespace kite_cuda;

namespace {

/* ---- rows_fused: a persistent grid, a group of 32 * wpr threads per row ---- */
constexpr int kRowsMaxPacks = 4;  /* packs of x and of dy per thread (8: 176-255 registers) */
constexpr int kRowsMaxWarps = 8;  /* warps per row: rows of up to 8 * 32 * 4 packs */
constexpr int kRowsThreads = 256; /* block size: 256 / (32 * wpr) groups */
constexpr int kRowsMaxSums = 4;   /* sums per group reduction (layer norm's) */

/* Sums v[0..K) over the thread's group; every thread of the group gets the sums, the same bits
 * in each (the xor butterfly adds the same pairs in every lane, then each thread adds the warps'
 * sums in warp order). slots: the group's [2][kRowsMaxWarps][kRowsMaxSums] floats; consecutive
 * calls use alternate halves, so that a warp writing the next sums cannot overwrite ones a slower
 * warp of the group has still to read (it passed the barrier in between, which that warp must
 * reach). */
template <int K>
__device__ __forceinline__ void group_sum(float (&v)[K], int wpr, float *slots, int &half,
                                          int bar) {
#pragma unroll
  for (int k = 0; k < K; k++) v[k] = warp_reduce(v[k], Sum());
  if (wpr == 1) return;
  static_assert(K <= kRowsMaxSums, "slots of kRowsMaxSums floats");
  float *s = slots + half * kRowsMaxWarps * kRowsMaxSums;
  const int warp = (threadIdx.x >> 5) % wpr;
  if ((threadIdx.x & 31) == 0)
#pragma unroll
    for (int k = 0; k < K; k++) s[warp * K + k] = v[k];
  asm volatile("bar.sync %0, %1;" ::"r"(bar), "r"(wpr * 32) : "memory");
#pragma unroll
  for (int k = 0; k < K; k++) {
    float t = 0.0f;
    for (int i = 0; i < wpr; i++) t += s[i * K + k];
    v[k] = t;
  }
  half ^= 1;
}

/* Hides the pack's value from the compiler, so that each pass over a row converts its packs again
 * instead of keeping all their floats live from the first pass (twice the registers for 16-bit
 * types, which then spill or cut the rows in flight). */
template <typename V> __device__ __forceinline__ void opaque(V &v) {
  static_assert(sizeof(V) == 16, "16-byte packs");
  uint32_t *u = reinterpret_cast<uint32_t *>(&v);
  asm volatile("" : "+r"(u[0]), "+r"(u[1]), "+r"(u[2]), "+r"(u[3]));
}

/* dst[0..4) = v[0..4) (+ dst[0..4) when add), 16-byte accesses where dst allows (a workspace
 * from cudaMalloc always does). */
__device__ __forceinline__ void add_partial4(float *dst, const float *v, bool add) {
  if (((uintptr_t)dst & 15) == 0) {
    float4 o = make_float4(v[0], v[1], v[2], v[3]);
    if (add) {
      const float4 d = *reinterpret_cast<const float4 *>(dst);
      o = make_float4(d.x + o.x, d.y + o.y, d.z + o.z, d.w + o.w);
    }
    *reinterpret_cast<float4 *>(dst) = o;
    return;
  }
  for (int j = 0; j < 4; j++) dst[j] = add ? dst[j] + v[j] : v[j];
}

/* The group's thread t holds packs t + p * 32 wpr (p < P) of its rows: a warp's 16-byte loads
 * of one p cover 512 contiguous bytes. DRES: dres is read (and added to dx). The row's sums in
 * one sweep and one group reduction (header comment). */
template <typename T, int P, bool RMS, bool DRES>
__global__ __launch_bounds__(kRowsThreads, DRES && !RMS ? 1 : 2) void norm_bwd_rows_kernel(
    kite_norm_bwd_args a, Plan plan, int wpr, float *part_w, float *part_b) {
  constexpr int N = vec_elems<T>();
  using V = Pack<T, N>;
  /* group_sum's slots; a group of one warp (up to kRowsThreads / 32 of them) uses none */
  __shared__ float slots[kRowsThreads / 64][2][kRowsMaxWarps][kRowsMaxSums];
  const int gsize = 32 * wpr, gpc = (int)blockDim.x / gsize;
  const int group = (int)threadIdx.x / gsize, t = (int)threadIdx.x % gsize;
  const int cols = (int)a.cols; /* <= kRowsMaxWarps * 32 * kRowsMaxPacks packs: supports() */
  const int packs = cols / N;
  const float inv_cols = 1.0f / (float)cols;
  int np = 0;
#pragma unroll
  for (int p = 0; p < P; p++)
    if (t + p * gsize < packs) np = p + 1;
  float sw[P][N], sb[P][N];
#pragma unroll
  for (int p = 0; p < P; p++)
#pragma unroll
    for (int j = 0; j < N; j++) sw[p][j] = sb[p][j] = 0.0f;
  float *my_slots = wpr > 1 ? &slots[group][0][0][0] : nullptr;
  int half = 0;
  const int bar = 1 + group; /* barrier 0 is __syncthreads' */
  const V *wv = (const V *)a.w;

  const int64_t r0 = blockIdx.x * plan.rows_per_block;
  const int64_t r1 = r0 + plan.rows_per_block < a.rows ? r0 + plan.rows_per_block : a.rows;
  for (int64_t r = r0 + group; r < r1; r += gpc) {
    const T *x = (const T *)a.x + r * a.x_stride;
    V xr[P], dr[P], rr[DRES ? P : 1];
    const V *xv = (const V *)x;
    const V *dyv = (const V *)((const T *)a.dy + r * a.dy_stride);
#pragma unroll
    for (int p = 0; p < P; p++) {
      if (p >= np) continue;
      xr[p] = xv[t + p * gsize];
      dr[p] = dyv[t + p * gsize];
      if (DRES) rr[p] = ((const V *)((const T *)a.dres + r * a.dres_stride))[t + p * gsize];
    }
    float x0 = 0.0f; /* the shift of the header comment */
    if constexpr (!RMS) x0 = to_float(x[0]);
    float mean = 0.0f, rstd, mg, mgx;
    /* g = dy * wf for pack p's element j */
    auto gof = [&](const V &w, float d, int j) {
      return wv ? d * ((RMS ? a.offset : 0.0f) + to_float(w.v[j])) : d;
    };
    /* f(p, j, x - x0, dy, g) for each of the thread's elements */
    auto each = [&](auto f) {
#pragma unroll
      for (int p = 0; p < P; p++) {
        if (p >= np) continue;
        V w;
        const V xv = xr[p], dv = dr[p];
        if (wv) w = wv[t + p * gsize];
#pragma unroll
        for (int j = 0; j < N; j++) {
          const float d = to_float(dv.v[j]);
          f(p, j, to_float(xv.v[j]) - x0, d, gof(w, d, j));
        }
      }
    };
    /* layer: sum d, sum d^2, sum g, sum g d; rms: sum x^2, sum g x */
    constexpr int K = RMS ? 2 : 4;
    float s[K];
#pragma unroll
    for (int i = 0; i < K; i++) s[i] = 0.0f;
    each([&](int p, int j, float v, float d, float g) {
      if (!RMS) sb[p][j] += d; /* db needs no statistics: here, off the dx pass */
      if (RMS) {
        s[0] += v * v;
        s[1] += g * v;
      } else {
        s[0] += v;
        s[1] += v * v;
        s[2] += g;
        s[3] += g * v;
      }
    });
    group_sum(s, wpr, my_slots, half, bar);
    if (RMS) {
      rstd = rsqrtf(s[0] * inv_cols + a.eps);
      mg = 0.0f;
      mgx = rstd * s[1] * inv_cols;
    } else {
      mean = s[0] * inv_cols;
      rstd = rsqrtf(fmaxf(s[1] * inv_cols - mean * mean, 0.0f) + a.eps);
      mg = s[2 % K] * inv_cols;
      mgx = rstd * (s[3 % K] * inv_cols - mean * mg);
    }
#pragma unroll
    for (int p = 0; p < P; p++) {
      opaque(xr[p]);
      opaque(dr[p]);
    }
    V *dxv = (V *)((T *)a.dx + r * a.dx_stride);
#pragma unroll
    for (int p = 0; p < P; p++) {
      if (p >= np) continue;
      V w, o, res;
      const V xv = xr[p], dv = dr[p];
      if (wv) w = wv[t + p * gsize];
      if constexpr (DRES) res = rr[p];
#pragma unroll
      for (int j = 0; j < N; j++) {
        const float xhat = (to_float(xv.v[j]) - x0 - mean) * rstd, d = to_float(dv.v[j]);
        const float g = gof(w, d, j);
        sw[p][j] += d * xhat;
        float v = rstd * (g - mg - xhat * mgx);
        if constexpr (DRES) v += to_float(res.v[j]);
        o.v[j] = from_float<T>(v);
      }
      dxv[t + p * gsize] = o;
    }
  }
  /* the block's partial row: group 0's terms, then each next group's added in order */
  const int64_t base = (int64_t)blockIdx.x * cols;
  float *acc_w = part_w ? part_w + base : nullptr, *acc_b = part_b ? part_b + base : nullptr;
  for (int k = 0; k < gpc; k++) {
    if (group == k) {
#pragma unroll
      for (int p = 0; p < P; p++) {
        if (p >= np) continue;
        const int i = (t + p * gsize) * N;
#pragma unroll
        for (int j = 0; j < N; j += 4) {
          if (acc_w) add_partial4(acc_w + i + j, &sw[p][j], k > 0);
          if (acc_b) add_partial4(acc_b + i + j, &sb[p][j], k > 0);
        }
      }
    }
    __syncthreads();
  }
}

/* The rows kernel's shape: warps per row and packs per thread (2 or 4; 0 when the row is longer
 * than kRowsMaxWarps warps of max_packs packs). */
struct RowsShape {
  int wpr, packs;
};

RowsShape rows_shape(int64_t packs, int max_packs = kRowsMaxPacks) {
  for (int wpr = 1; wpr <= kRowsMaxWarps; wpr *= 2) {
    const int64_t per = (packs + 32 * wpr - 1) / (32 * wpr);
    if (per <= max_packs) return {wpr, per <= 2 ? 2 : 4};
  }
  return {0, 0};
}

using RowsKernel = void (*)(kite_norm_bwd_args, Plan, int, float *, float *);

constexpr int kWidePacks = 2; /* rows_fused_wide's packs per thread */

template <typename T, int P> RowsKernel rows_kernel_p(bool rms, bool dres) {
  if (rms)
    return dres ? norm_bwd_rows_kernel<T, P, true, true> : norm_bwd_rows_kernel<T, P, true, false>;
  return dres ? norm_bwd_rows_kernel<T, P, false, true> : norm_bwd_rows_kernel<T, P, false, false>;
}

template <typename T> RowsKernel rows_kernel(int packs, bool rms, bool dres) {
  return packs == 2 ? rows_kernel_p<T, 2>(rms, dres) : rows_kernel_p<T, 4>(rms, dres);
}

/* As many blocks as are resident at once on the device (at least one per multiprocessor), fewer
 * when the rows give each group less than one row or the partials would pass kMaxPartials; each
 * block a band of consecutive rows. */
Plan rows_plan(const kite_norm_bwd_args *a, RowsKernel kernel, unsigned threads, int gpc) {
  Plan p{0, 1};
  if (a->rows <= 0 || a->cols <= 0) return p;
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, (int)threads, 0) !=
      cudaSuccess) {
    (void)cudaGetLastError();
    per_sm = 1;
  }
  int64_t g = (int64_t)sm_count() * (per_sm > 1 ? per_sm : 1);
  const int64_t need = (a->rows + gpc - 1) / gpc;
  if (g > need) g = need;
  if (partials_wanted(a)) {
    const int64_t cap = kMaxPartials / a->cols;
    g = cap < 1 ? 1 : cap < g ? cap : g;
  }
  p.rows_per_block = (a->rows + g - 1) / g;
  p.blocks = (a->rows + p.rows_per_block - 1) / p.rows_per_block;
  return p;
}

bool wide_form(const kite_norm_bwd_args *a) {
  return a->op == KITE_OP_LAYER_NORM_BACKWARD && a->dres != nullptr;
}

} // namespace

extern "C" CUDA_SUPPORTS(cuda_norm_bwd_rows_supports) {
  const kite_norm_bwd_args *a = (const kite_norm_bwd_args *)args;
  if (!packed_layout(k, args, why)) return false;
  return ok_unless(rows_shape(a->cols / vec_elems_of(a->dtype)).wpr == 0,
                   "row longer than 8 warps of 4 16-byte packs per thread", why);
}

/* rows_fused_wide: layer norm with dres (the one form where it beat rows_fused on an H100), rows
 * of up to kRowsMaxWarps warps of kWidePacks packs. */
extern "C" CUDA_SUPPORTS(cuda_norm_bwd_wide_supports) {
  const kite_norm_bwd_args *a = (const kite_norm_bwd_args *)args;
  if (!packed_layout(k, args, why)) return false;
  if (!ok_unless(!wide_form(a), "rows_fused_wide only for layer norm with dres", why)) return false;
  return ok_unless(rows_shape(a->cols / vec_elems_of(a->dtype), kWidePacks).wpr == 0,
                   "row longer than 8 warps of 2 16-byte packs per thread", why);
}

/* rows_fused and rows_fused_wide: one kernel, at most max_packs packs per thread. */
static kite_status run_rows(kite_ctx *ctx, const kite_norm_bwd_args *a, const char *variant,
                            int max_packs) {
  const char *name = cuda_op_str(a->op);
  if (!is_norm_bwd(a->op))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: cuda.%s: not a norm backward", name, variant);
  return with_float_type(a->dtype, name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const int64_t cols = a->cols > 0 ? a->cols : 0;
    const RowsShape sh = rows_shape(cols / vec_elems<T>(), max_packs);
    if (sh.wpr == 0)
      return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: cuda.%s: rows of %lld do not fit", name,
                            variant, (long long)a->cols);
    const int gpc = kRowsThreads / (32 * sh.wpr);
    const unsigned threads = (unsigned)(gpc * 32 * sh.wpr);
    const RowsKernel kernel =
        rows_kernel<T>(sh.packs, a->op == KITE_OP_RMS_NORM_BACKWARD, a->dres != nullptr);
    return run_norm_bwd(
        ctx, a, variant, [&] { return rows_plan(a, kernel, threads, gpc); },
        [&](auto, Plan plan, float *pw, float *pb, cudaStream_t s) {
          kernel<<<(unsigned)plan.blocks, threads, 0, s>>>(*a, plan, sh.wpr, pw, pb);
          return KITE_OK;
        });
  });
}

extern "C" CUDA_RUN(cuda_norm_bwd_rows_fused_run) {
  return run_rows(ctx, (const kite_norm_bwd_args *)args, "rows_fused", kRowsMaxPacks);
}

extern "C" CUDA_RUN(cuda_norm_bwd_rows_fused_wide_run) {
  const kite_norm_bwd_args *a = (const kite_norm_bwd_args *)args;
  if (!wide_form(a))
    return kite_set_error(KITE_ERR_UNSUPPORTED,
                          "%s: cuda.rows_fused_wide: only for layer norm with dres",
                          cuda_op_str(a->op));
  return run_rows(ctx, a, "rows_fused_wide", kWidePacks);
}
