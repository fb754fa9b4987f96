/*
 * The phase split of sampling_select.cu, for a build with KITE_SAMPLE_SELECT_TRACE defined (off by
 * default): row 0's clock64 stamps at the phase boundaries of block 0 and the cluster's last block,
 * the candidate counts and shrink rounds, printed by block 0 at the end of each launch. Without the
 * definition every call is empty.
 */
#ifndef KITE_CUDA_SAMPLING_SELECT_TRACE_CUH
#define KITE_CUDA_SAMPLING_SELECT_TRACE_CUH

#include <cooperative_groups.h>
#include <cstdio>

namespace kite_cuda {

#ifdef KITE_SAMPLE_SELECT_TRACE
/* [slot][phase]: clock64 at each phase of row 0, slot 0 for block 0, 1 for the last block;
 * [slot][kPhases + j]: the candidates after the stream (j 0), merged (1) and finished (2), shrink
 * rounds (3), %globaltimer at the start (4) and the end (5). Phases: 0 start, 1 first loads in,
 * 2 bound, 3 stream done, 4 shrunk + max, 5 cluster barrier, 6 merged, 7 finish shrunk, 8 top-k
 * counts, 9 race, 10 end. */
constexpr int kPhases = 11;
__device__ long long select_trace[2][kPhases + 6];

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
namespace cgt = cooperative_groups;
__device__ __forceinline__ long long global_ns() {
  long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ int trace_slot() {
  const cgt::cluster_group g = cgt::this_cluster();
  if (blockIdx.y != 0 || threadIdx.x != 0) return -1;
  return g.block_rank() == 0 ? 0 : g.block_rank() == g.num_blocks() - 1 ? 1 : -1;
}
__device__ __forceinline__ void trace(int phase) {
  const int s = trace_slot();
  if (s < 0) return;
  if (phase == 0) {
    for (int j = 1; j < kPhases + 4; j++) select_trace[s][j] = 0; /* 0: not reached */
    select_trace[s][kPhases + 4] = global_ns();
  }
  select_trace[s][phase] = clock64();
}
__device__ __forceinline__ void trace_count(int j, long long v, bool add = false) {
  const int s = trace_slot();
  if (s >= 0) select_trace[s][kPhases + j] = add ? select_trace[s][kPhases + j] + v : v;
}
/* Row 0's split, printed by block 0 once the cluster is done (the last block's stamps up to the
 * cluster barrier; phases a variant does not pass are left out). */
__device__ inline void trace_print(int blocks) {
  if (trace_slot() != 0) return;
  long long *a = select_trace[0], *b = select_trace[1];
  printf("select trace: blocks %d, %lld ns; candidates %lld (block 0) %lld (last) merged %lld "
         "final %lld, shrink rounds %lld + %lld\n",
         blocks, a[kPhases + 5] - a[kPhases + 4], a[kPhases], b[kPhases], a[kPhases + 1],
         a[kPhases + 2], a[kPhases + 3], b[kPhases + 3]);
  printf("select trace cycles from start, phase block 0 / last:");
  for (int j = 1; j < kPhases; j++)
    if (a[j] && b[j] && j <= 5)
      printf(" %d:%lld/%lld", j, a[j] - a[0], b[j] - b[0]);
    else if (a[j])
      printf(" %d:%lld", j, a[j] - a[0]);
  printf("\n");
}
#endif
#else
__device__ __forceinline__ void trace(int) {}
__device__ __forceinline__ void trace_count(int, long long, bool = false) {}
#endif

} // namespace kite_cuda

#endif /* KITE_CUDA_SAMPLING_SELECT_TRACE_CUH */
