/*
 * The optimized CPU backend, private declarations shared by its files.
 *
 * Layout: the templated kernels are written once (kernels/<family>.inc) over a small vector layer
 * (vec_<isa>.h) and instantiated once per ISA by cpu_isa_<isa>.c, each compiled with its own -m
 * flags; the hand-written ones are one file per family and ISA (cpu_<family>_<isa>.c). Every run
 * function is named cpu_<op>_<isa> (cpu_kernels.h), and cpu_backend.c lists every entry in one
 * table; the registry keeps those whose feature bits cpu_features.c found, and the highest
 * priority runs.
 */
#ifndef KITE_CPU_H
#define KITE_CPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kite/backend.h"

/* ---- CPU features (cpu_features.c) --------------------------------------------------------- */
enum {
  CPU_F_AVX2 = 1u << 0,
  CPU_F_FMA = 1u << 1,
  CPU_F_F16C = 1u << 2,
  CPU_F_AVX512F = 1u << 3,
  CPU_F_AVX512BW = 1u << 4,
  CPU_F_AVX512VL = 1u << 5,
  CPU_F_AVX512DQ = 1u << 6,
  CPU_F_AVX512_BF16 = 1u << 7,
  CPU_F_AVX512_VNNI = 1u << 8,
  CPU_F_AMX = 1u << 9, /* AMX-TILE, AMX-BF16 and AMX-INT8, with the OS saving tile state */
  /* Optional libraries, loaded at run time: present when they could be opened here. */
  CPU_F_OPENBLAS = 1u << 16,
  CPU_F_ONEDNN = 1u << 17,
};

/* What each ISA build of the kernels needs, cumulative. */
#define CPU_ISA_AVX2 ((uint64_t)(CPU_F_AVX2 | CPU_F_FMA | CPU_F_F16C))
#define CPU_ISA_AVX512                                                                             \
  (CPU_ISA_AVX2 | CPU_F_AVX512F | CPU_F_AVX512BW | CPU_F_AVX512VL | CPU_F_AVX512DQ)
#define CPU_ISA_AVX512VNNI (CPU_ISA_AVX512 | CPU_F_AVX512_VNNI)
/* Every CPU with AVX-512-BF16 (Cooper Lake, Sapphire Rapids, Zen 4) has VNNI too. */
#define CPU_ISA_AVX512BF16 (CPU_ISA_AVX512VNNI | CPU_F_AVX512_BF16)
#define CPU_ISA_AMX (CPU_ISA_AVX512BF16 | CPU_F_AMX)

/* Detects the features (CPUID, and XGETBV for the OS saving the vector registers), capped by
 * KITE_CPU_ISA = scalar | avx2 | avx512 | avx512vnni | avx512bf16 | amx; an unknown value leaves
 * no cap. */
uint64_t cpu_features_detect(void);

/* The names of the features in `bits` ("avx2,fma,f16c"), into out[n]; "" for none. n =
 * CPU_FEATURE_NAMES_MAX holds every name. */
#define CPU_FEATURE_NAMES_MAX 128
void cpu_features_render(uint64_t bits, char *out, size_t n);

/* ---- threads (cpu_threadpool.c) ------------------------------------------------------------ *
 * A call runs fn over [0, items) on `parts` threads: the caller and parts - 1 pool workers claim
 * pieces of the range (a few per thread) until none is left. `slot` (< parts) is the thread
 * running a piece: pieces that run at the same time have different slots, so a task can index
 * per-thread scratch memory with it. */
typedef void (*cpu_task_fn)(const void *job, int64_t begin, int64_t end, int slot);

/* Calls below this many elements touched run inline: waking a thread costs more. */
#define CPU_INLINE_WORK ((int64_t)32768)

/* How many threads a call of `items` items touching `work` elements in all uses: 1 (inline)
 * for small work, at most kite_ctx_num_threads(ctx) and items. */
int cpu_parallel_parts(const kite_ctx *ctx, int64_t items, int64_t work);
/* Runs fn over [0, items) on `parts` threads and returns when all is done. Another call already
 * using the pool (a second ctx on another thread) makes this one run inline. */
void cpu_parallel_run(int parts, int64_t items, cpu_task_fn fn, const void *job);

/* Elementwise ops cut each row into `blocks` column ranges when there are too few rows to
 * share out (decode: one row of 14336), so items are (row, column block) pairs. */
typedef struct cpu_grid {
  int64_t rows, cols, blocks, block_cols, items;
} cpu_grid;
cpu_grid cpu_grid_make(const kite_ctx *ctx, int64_t rows, int64_t cols);

static inline void cpu_grid_item(const cpu_grid *g, int64_t item, int64_t *row, int64_t *c0,
                                 int64_t *c1) {
  *row = item / g->blocks;
  *c0 = item % g->blocks * g->block_cols;
  *c1 = *c0 + g->block_cols < g->cols ? *c0 + g->block_cols : g->cols;
}

/* A call that moves at least this many bytes writes its output with streaming (non-temporal)
 * stores: its own traffic would push the output out of cache anyway, and skipping the
 * read-for-ownership of every destination line saves a third of the memory traffic of a
 * read-one-write-one op. */
#define CPU_STREAM_BYTES ((int64_t)16 << 20)

/* Bytes per element of the float types the computing kernels take. */
static inline int64_t cpu_esize(kite_dtype t) {
  return t == KITE_DTYPE_F32 ? 4 : 2;
}

static inline bool cpu_is_float(kite_dtype t) {
  return t == KITE_DTYPE_F32 || t == KITE_DTYPE_F16 || t == KITE_DTYPE_BF16;
}

#endif /* KITE_CPU_H */
