/*
 * Softmax of few long rows (decode over a vocabulary) on Hopper: each row is spread over a thread
 * block cluster of 8 blocks on 8 multiprocessors, which exchange their chunk's max and sum through
 * distributed shared memory. One launch, one read of the row, no workspace: what "split" does in
 * two launches on other GPUs.
 *
 * Block k of a row's cluster holds packs [k * chunk, (k + 1) * chunk) in registers, VPT packs a
 * thread; it keeps online statistics (common.cuh), publishes its block's (max, sum) in shared
 * memory, and after a cluster barrier every thread combines the 8 pairs itself.
 */
#include <cooperative_groups.h>

#include "common.cuh"

using namespace kite_cuda;

namespace {

constexpr int kClusterBlocks = 8; /* the portable cluster size */
constexpr int kThreads = 256, kClusterMaxVpt = 4;
constexpr int64_t kMaxRows = 32, kMinCols = 8192;

template <typename T, int N, int VPT>
__global__ __launch_bounds__(kThreads) void softmax_cluster_kernel(kite_softmax_args a,
                                                                   float scale_log2, int chunk) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 /* the PTX for older GPUs is never launched */
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  __shared__ float2 block_stats; /* this block's (max, sum), read by the whole cluster */
  const int64_t r = blockIdx.y;
  const int packs = (int)(a.cols / N);
  const int first = (int)cluster.block_rank() * chunk;
  const int end = first + chunk < packs ? first + chunk : packs;
  const T *x = (const T *)a.x + r * a.x_stride;
  T *y = (T *)a.y + r * a.y_stride;

  float v[VPT][N];
  OnlineSoftmax st;
#pragma unroll
  for (int p = 0; p < VPT; p++) {
    const int q = first + threadIdx.x + p * kThreads;
    if (q >= end) continue;
    load_floats<N>(x + (int64_t)q * N, v[p]);
#pragma unroll
    for (int j = 0; j < N; j++) v[p][j] *= scale_log2;
    st.add<N>(v[p]);
  }
  st.reduce_block();
  if (threadIdx.x == 0) block_stats = make_float2(st.m, st.sum);
  cluster.sync();
  float2 peer[kClusterBlocks]; /* all eight reads in flight at once */
#pragma unroll
  for (int k = 0; k < kClusterBlocks; k++) peer[k] = *cluster.map_shared_rank(&block_stats, k);
  float row_max = -INFINITY, sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kClusterBlocks; k++) row_max = fmaxf(row_max, peer[k].x);
#pragma unroll
  for (int k = 0; k < kClusterBlocks; k++)
    if (peer[k].x != -INFINITY) sum += peer[k].y * exp2f(peer[k].x - row_max);
  const float inv_sum = 1.0f / sum;
#pragma unroll
  for (int p = 0; p < VPT; p++) {
    const int q = first + threadIdx.x + p * kThreads;
    if (q >= end) continue;
#pragma unroll
    for (int j = 0; j < N; j++) v[p][j] = exp2f(v[p][j] - row_max) * inv_sum;
    store_floats<N>(y + (int64_t)q * N, v[p]);
  }
  cluster.sync(); /* no block leaves, freeing its shared memory, while others may still read it */
#endif
}

template <typename T, int N, int VPT>
cudaError_t launch(const kite_softmax_args *a, int chunk, cudaStream_t s) {
  return launch_clusters(softmax_cluster_kernel<T, N, VPT>, kClusterBlocks, (unsigned)a->rows,
                         kThreads, 0, s, *a, a->scale * kLog2e, chunk);
}

} // namespace

extern "C" CUDA_SUPPORTS(cuda_softmax_cluster_supports) {
  const kite_softmax_args *a = (const kite_softmax_args *)args;
  if (!vec_rows_fit(a->dtype, a->rows, a->cols, {{a->x, a->x_stride}, {a->y, a->y_stride}}, why))
    return false;
  const int n = vec_elems_of(a->dtype);
  return ok_unless(a->rows > kMaxRows || a->cols < kMinCols ||
                       a->cols / n > (int64_t)kClusterBlocks * kThreads * kClusterMaxVpt,
                   "only for at most 32 rows of 8192 to 8 * 1024 packs", why);
}

extern "C" CUDA_RUN(cuda_softmax_cluster_run) {
  const kite_softmax_args *a = (const kite_softmax_args *)args;
  if (a->rows <= 0 || a->cols <= 0) return KITE_OK;
  return launch_typed(ctx, "softmax", "cluster", a->dtype, [&](auto tag, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    constexpr int N = vec_elems<T>();
    const int packs = (int)(a->cols / N);
    const int chunk = (packs + kClusterBlocks - 1) / kClusterBlocks;
    cudaError_t e;
    if (chunk <= kThreads)
      e = launch<T, N, 1>(a, chunk, s);
    else if (chunk <= 2 * kThreads)
      e = launch<T, N, 2>(a, chunk, s);
    else
      e = launch<T, N, 4>(a, chunk, s);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return kite_set_error(KITE_ERR_DEVICE, "softmax: cuda.cluster: launch failed: %s",
                            cudaGetErrorString(e));
    }
    return KITE_OK;
  });
}
