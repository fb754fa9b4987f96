/*
 * The cpu kernels, written once over the vector layer (vf, VL and vf_* from vec_<isa>.h; the
 * interface is described in vec_scalar.h) and compiled once per ISA: cpu_<isa>.c includes its
 * vec header, defines CPU_KERNELS (the name of its kernel set) and includes this file.
 *
 * Every kernel reads elements as f32, computes in f32 and rounds once on the store. Rows are
 * walked in chunks of VL elements with a partial last chunk, so any length works; strides are in
 * elements. Work is split over threads by cpu_parallel_run (rows, or (row, column block) items).
 */
#ifndef CPU_KERNELS
#error "define CPU_KERNELS (the kernel set's name) and include a vec_<isa>.h first"
#endif

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cpu.h"

/* Walks [0, n) in chunks [i, i + m) of at most VL elements. The first chunk has `head` (1..VL)
 * elements, so that with streaming stores every later full chunk starts vector-aligned. */
#define CPU_CHUNKS(i, m, n, head)                                                                  \
  for (int64_t i = 0, m = (head) < (n) ? (head) : (n); i < (n); i += m, m = (n)-i < VL ? (n)-i : VL)

/* Elements before p is aligned for a full-vector streaming store of type t. Clears *stream when
 * streaming is off, unavailable, or p is not even element-aligned. */
static inline int64_t cpu_stream_head(kite_dtype t, const void *p, bool *stream) {
  const int64_t es = cpu_esize(t), vbytes = VL * es;
  if (!CPU_VEC_STREAMS) *stream = false;
  if (!*stream) return VL;
  const int64_t mis = (int64_t)((uintptr_t)p % (uintptr_t)vbytes);
  if (mis % es != 0) {
    *stream = false;
    return VL;
  }
  return mis == 0 ? VL : (vbytes - mis) / es;
}

/* Whether an output of `bytes` bytes is written with streaming stores (CPU_STREAM_BYTES). Callers
 * also keep regular stores for an output they read first (in place): its lines are in cache. */
static inline bool cpu_streams(int64_t bytes) {
  return CPU_VEC_STREAMS && bytes >= CPU_STREAM_BYTES;
}

/* Calls F(<dtype constant>, args...): every always-inline body gets one copy per dtype in which
 * the dtype switches of vf_load / vf_store fold away. */
#define CPU_WITH_DTYPE(t, F, ...)                                                                  \
  do {                                                                                             \
    switch (t) {                                                                                   \
    case KITE_DTYPE_F16:                                                                           \
      F(KITE_DTYPE_F16, __VA_ARGS__);                                                              \
      break;                                                                                       \
    case KITE_DTYPE_BF16:                                                                          \
      F(KITE_DTYPE_BF16, __VA_ARGS__);                                                             \
      break;                                                                                       \
    default:                                                                                       \
      F(KITE_DTYPE_F32, __VA_ARGS__);                                                              \
      break;                                                                                       \
    }                                                                                              \
  } while (0)

/* Row r of a [rows, stride] array of es-byte elements. */
static inline char *cpu_row(const void *base, int64_t stride, int64_t r, int64_t es) {
  return (char *)base + r * stride * es;
}

#include "kernels_act.h"
#include "kernels_norm.h"
#include "kernels_rope.h"
#include "kernels_softmax.h"
#include "kernels_embedding.h"

const cpu_isa_kernels CPU_KERNELS = {
    .act = act_run,
    .gated = gated_run,
    .norm = norm_run,
    .rope = rope_run,
    .softmax = softmax_run,
    .embedding = embedding_run,
};
