/*
 * The cpu kernels, written once over the vector layer (vf, VL and vf_* from vec_<isa>.h; the
 * interface is described in vec_scalar.h) and compiled once per ISA: cpu_<isa>.c includes its
 * vec header, defines CPU_KERNELS (the name of its kernel set) and includes this file.
 *
 * Every kernel reads elements as f32, computes in f32 and rounds once on the store. Rows are
 * walked in chunks of VL elements (CPU_ROW) with partial chunks where needed, so any length
 * works; strides are in elements. Work is split over threads by cpu_parallel_run (rows, or (row,
 * column block) items).
 */
#ifndef CPU_KERNELS
#error "define CPU_KERNELS (the kernel set's name) and include a vec_<isa>.h first"
#endif

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

/* Runs STMT once per chunk [i, i + m) of [0, n), m <= VL: a first chunk of `head` (1..VL)
 * elements when head < VL (so that streaming stores then start vector-aligned), the full chunks,
 * then the tail. In full chunks m is the constant VL, so loads and stores compile to single
 * instructions; the head and the tail share the one partial-chunk copy of STMT. With
 * CPU_VEC_UNROLL2 full chunks go by pairs: two independent dependency chains side by side let
 * the core overlap more of the long ones (exp, division). STMT is one statement, usually a call
 * to an always-inline chunk function. */
#define CPU_ROW(i, m, n, head, STMT)                                                               \
  CPU_ROW_WALK(i, m, n, head, STMT, {                                                              \
    {                                                                                              \
      const int64_t i = i_; /* no commas: this block is a macro argument */                        \
      const int64_t m = VL;                                                                        \
      STMT;                                                                                        \
  }                                                                                                \
  {                                                                                                \
    const int64_t i = i_ + VL;                                                                     \
    const int64_t m = VL;                                                                          \
    STMT;                                                                                          \
  }                                                                                                \
  })

/* CPU_ROW with PAIR_STMT run on the full pairs [i, i + 2 VL) instead of STMT twice: for bodies
 * that load and store a pair with vf_load2 / vf_store2. */
#define CPU_ROW_PAIRS(i, m, n, head, STMT, PAIR_STMT)                                              \
  CPU_ROW_WALK(i, m, n, head, STMT, {                                                              \
    const int64_t i = i_;                                                                          \
    PAIR_STMT;                                                                                     \
  })

/* The walk behind both; PAIR_BODY does the full pair at i_. */
#define CPU_ROW_WALK(i, m, n, head, STMT, PAIR_BODY)                                               \
  do {                                                                                             \
    const int64_t n_ = (n);                                                                        \
    int64_t i_ = 0, m_ = (head) < n_ ? (head) : n_; /* the next partial chunk, VL for none */      \
    while (i_ < n_) {                                                                              \
      if (m_ >= VL) {                                                                              \
        for (; CPU_VEC_UNROLL2 && i_ + 2 * VL <= n_; i_ += 2 * VL) PAIR_BODY;                      \
        for (; i_ + VL <= n_; i_ += VL) {                                                          \
          const int64_t i = i_, m = VL;                                                            \
          STMT;                                                                                    \
        }                                                                                          \
        if ((m_ = n_ - i_) == 0) break;                                                            \
      }                                                                                            \
      {                                                                                            \
        const int64_t i = i_, m = m_;                                                              \
        STMT;                                                                                      \
      }                                                                                            \
      i_ += m_;                                                                                    \
      m_ = VL;                                                                                     \
    }                                                                                              \
  } while (0)

/* 2 VL elements of type t from p[i...] into a and b, and back, in an order of lanes that only
 * the two agree on (an ISA header may provide a faster pair than two vectors: CPU_VEC_PAIRS).
 * For elementwise bodies, whose lanes need no order. */
#ifndef CPU_VEC_PAIRS
CPU_INLINE void vf_load2(kite_dtype t, const void *p, int64_t i, vf *a, vf *b) {
  *a = vf_load(t, p, i, VL);
  *b = vf_load(t, p, i + VL, VL);
}
CPU_INLINE void vf_store2(kite_dtype t, void *p, int64_t i, vf a, vf b, bool stream) {
  vf_store(t, p, i, a, VL, stream);
  vf_store(t, p, i + VL, b, VL, stream);
}
/* Whether vf_load2(t) puts a pair's lanes in another order than two vf_load: not here. */
#define VF_PAIR_LANES_SPLIT(t) 0
/* 2 VL floats from p[i...] in the lanes vf_load2(t) gives a pair of t elements, for f32
 * operands (cosines, weights) that meet such a pair lane by lane. */
CPU_INLINE void vf_load2_f32_as(kite_dtype t, const float *p, int64_t i, vf *a, vf *b) {
  (void)t;
  *a = vf_load(KITE_DTYPE_F32, p, i, VL);
  *b = vf_load(KITE_DTYPE_F32, p, i + VL, VL);
}
#endif

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

/* Whether a call that moves `bytes` bytes (read + written) writes its output with streaming
 * stores (CPU_STREAM_BYTES). Callers also keep regular stores for an output they read first (in
 * place): its lines are in cache. */
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
#include "kernels_train.h"

const cpu_isa_kernels CPU_KERNELS = {
    .act = act_run,
    .gated = gated_run,
    .norm = norm_run,
    .rope = rope_run,
    .softmax = softmax_run,
    .embedding = embedding_run,
    .act_bwd = act_bwd_run,
    .norm_bwd = norm_bwd_run,
    .softmax_bwd = softmax_bwd_run,
    .embedding_bwd = emb_bwd_run,
    .ce = ce_run,
};
