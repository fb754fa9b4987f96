/*
 * cpu.onednn: linear (f32, bf16) and int8 linear_quant on oneDNN's matmul primitive (C API, built
 * when CMake finds oneDNN's headers: KITE_HAVE_ONEDNN; the library is loaded at run time). It is
 * there for the Xeons where oneDNN has native bf16 (AVX-512-BF16, AMX) and int8 (VNNI, AMX) paths
 * that our AVX2 kernels lack.
 *
 * The caller's strided rows are described to oneDNN as they are, no copies:
 *   x [m, k] -> src     dims {m, k}, strides {x_stride, 1}
 *   w [n, k] -> weights dims {k, n}, strides {1, w_stride}   (w^T as a view)
 *   y [m, n] -> dst     dims {m, n}, strides {y_stride, 1}
 *   bias [n] -> bias    dims {1, n}
 * One CPU engine serves the process. Creating a matmul primitive costs far more than running a
 * small one, so created primitives are kept in a small LRU table keyed by everything that shapes
 * them; a warm call creates a stream and memory handles and executes. The primitives use a user
 * scratchpad, taken from the ctx workspace, so the library holds no per-primitive buffers.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "cpu_gemm.h"
#include "cpu_kernels.h"
#include "kite/dtype.h"

#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
/* Declared here rather than through <omp.h> so that no OpenMP compiler flag is needed; the
 * symbols come from the OpenMP runtime that oneDNN itself links. */
int omp_get_max_threads(void);
void omp_set_num_threads(int num_threads);
#define DNNL_OMP_FNS(X) X(omp_get_max_threads) X(omp_set_num_threads)
#else
#define DNNL_OMP_FNS(X)
#endif

/* ---- oneDNN, loaded at run time -------------------------------------------------------------
 * libkite does not link oneDNN: a build made where it exists must load where it does not. The
 * library (the soname of the headers' major version, then the file found at configure time) is
 * opened once by cpu_onednn_load() and every function below is called through g_dnnl, with the
 * types of the headers' declarations. Without it the entries lack their feature bit and
 * `kite list` says why. */
#define DNNL_FNS(X)                                                                                \
  X(dnnl_memory_create)                                                                            \
  X(dnnl_memory_desc_init_by_strides)                                                              \
  X(dnnl_stream_wait)                                                                              \
  X(dnnl_stream_destroy)                                                                           \
  X(dnnl_stream_create)                                                                            \
  X(dnnl_set_max_cpu_isa)                                                                          \
  X(dnnl_primitive_execute)                                                                        \
  X(dnnl_primitive_destroy)                                                                        \
  X(dnnl_primitive_desc_query_md)                                                                  \
  X(dnnl_primitive_desc_destroy)                                                                   \
  X(dnnl_primitive_desc_create)                                                                    \
  X(dnnl_primitive_create)                                                                         \
  X(dnnl_primitive_attr_set_scratchpad_mode)                                                       \
  X(dnnl_primitive_attr_destroy)                                                                   \
  X(dnnl_primitive_attr_create)                                                                    \
  X(dnnl_memory_destroy)                                                                           \
  X(dnnl_memory_desc_get_size)                                                                     \
  X(dnnl_matmul_desc_init)                                                                         \
  X(dnnl_get_effective_cpu_isa)                                                                    \
  X(dnnl_engine_create)                                                                            \
  DNNL_OMP_FNS(X)

static struct {
#define DNNL_FIELD(f) __typeof__(&f) f;
  DNNL_FNS(DNNL_FIELD)
#undef DNNL_FIELD
} g_dnnl;
static bool g_dnnl_loaded;

#define DNNL_STR2(x) #x
#define DNNL_STR(x) DNNL_STR2(x)

bool cpu_onednn_load(void) {
  void *h = dlopen("libdnnl.so." DNNL_STR(DNNL_VERSION_MAJOR), RTLD_NOW | RTLD_LOCAL);
#if defined(KITE_ONEDNN_PATH)
  if (!h) h = dlopen(KITE_ONEDNN_PATH, RTLD_NOW | RTLD_LOCAL);
#endif
  if (!h) return false;
#define DNNL_SYM(f)                                                                                \
  if (!(*(void **)&g_dnnl.f = dlsym(h, #f))) {                                                     \
    dlclose(h);                                                                                    \
    return false;                                                                                  \
  }
  DNNL_FNS(DNNL_SYM)
#undef DNNL_SYM
  return g_dnnl_loaded = true;
}

#define dnnl_memory_create g_dnnl.dnnl_memory_create
#define dnnl_memory_desc_init_by_strides g_dnnl.dnnl_memory_desc_init_by_strides
#define dnnl_stream_wait g_dnnl.dnnl_stream_wait
#define dnnl_stream_destroy g_dnnl.dnnl_stream_destroy
#define dnnl_stream_create g_dnnl.dnnl_stream_create
#define dnnl_set_max_cpu_isa g_dnnl.dnnl_set_max_cpu_isa
#define dnnl_primitive_execute g_dnnl.dnnl_primitive_execute
#define dnnl_primitive_destroy g_dnnl.dnnl_primitive_destroy
#define dnnl_primitive_desc_query_md g_dnnl.dnnl_primitive_desc_query_md
#define dnnl_primitive_desc_destroy g_dnnl.dnnl_primitive_desc_destroy
#define dnnl_primitive_desc_create g_dnnl.dnnl_primitive_desc_create
#define dnnl_primitive_create g_dnnl.dnnl_primitive_create
#define dnnl_primitive_attr_set_scratchpad_mode g_dnnl.dnnl_primitive_attr_set_scratchpad_mode
#define dnnl_primitive_attr_destroy g_dnnl.dnnl_primitive_attr_destroy
#define dnnl_primitive_attr_create g_dnnl.dnnl_primitive_attr_create
#define dnnl_memory_destroy g_dnnl.dnnl_memory_destroy
#define dnnl_memory_desc_get_size g_dnnl.dnnl_memory_desc_get_size
#define dnnl_matmul_desc_init g_dnnl.dnnl_matmul_desc_init
#define dnnl_get_effective_cpu_isa g_dnnl.dnnl_get_effective_cpu_isa
#define dnnl_engine_create g_dnnl.dnnl_engine_create
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
#define omp_get_max_threads g_dnnl.omp_get_max_threads
#define omp_set_num_threads g_dnnl.omp_set_num_threads
#endif

#define ALIGN 64
#define DECODE_M_BF16 8 /* bf16 calls with at most this many rows are declined (supports) */

static char *align_up(void *p) {
  return (char *)(((uintptr_t)p + (ALIGN - 1)) & ~(uintptr_t)(ALIGN - 1));
}

/* ---- the engine, and oneDNN's ISA capped like ours ---------------------------------------- */

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t g_engine;
static dnnl_status_t g_engine_status = dnnl_runtime_error;
static dnnl_cpu_isa_t g_isa; /* what oneDNN dispatches to after the cap */

/* KITE_CPU_ISA mapped onto oneDNN's ISA levels; dnnl_cpu_isa_all = leave oneDNN's default (which
 * may be AMX). oneDNN has no scalar level: "scalar" caps it at AVX2 like "avx2". */
static dnnl_cpu_isa_t isa_cap(void) {
  const char *s = getenv("KITE_CPU_ISA");
  if (!s) return dnnl_cpu_isa_all;
  if (strcmp(s, "scalar") == 0 || strcmp(s, "avx2") == 0) return dnnl_cpu_isa_avx2;
  if (strcmp(s, "avx512") == 0) return dnnl_cpu_isa_avx512_core;
  if (strcmp(s, "avx512vnni") == 0) return dnnl_cpu_isa_avx512_core_vnni;
  if (strcmp(s, "avx512bf16") == 0) return dnnl_cpu_isa_avx512_core_bf16;
  return dnnl_cpu_isa_all;
}

static void engine_init(void) {
  /* The cap must come before oneDNN generates any code. It fails only when the application used
   * oneDNN first; the supports() predicates read the effective ISA below either way, so a bf16 or
   * int8 call is still offered only on a native path. */
  const dnnl_cpu_isa_t cap = isa_cap();
  if (cap != dnnl_cpu_isa_all) (void)dnnl_set_max_cpu_isa(cap);
  g_isa = dnnl_get_effective_cpu_isa();
  g_engine_status = dnnl_engine_create(&g_engine, dnnl_cpu, 0);
}

static bool isa_reaches(dnnl_cpu_isa_t level) {
  pthread_once(&g_once, engine_init);
  /* the ISA values are bit sets, each level holding the bits of those below it */
  return ((unsigned)g_isa & (unsigned)level) == (unsigned)level;
}

/* ---- the primitive cache ------------------------------------------------------------------ */

/* Everything that shapes a matmul primitive; all int64_t, so memcmp sees no padding. Strides are
 * normalized (a single row's stride does not matter) so that more calls share an entry. */
typedef struct prim_key {
  int64_t src_dt, wei_dt, bias_dt, dst_dt; /* dnnl_data_type_t; bias_dt undef = no bias */
  int64_t m, n, k, x_stride, w_stride, y_stride;
  int64_t threads;
} prim_key;

typedef struct prim_entry {
  prim_key key;
  dnnl_primitive_t prim;
  dnnl_memory_desc_t src_md, wei_md, bias_md, dst_md, scratch_md;
  size_t scratch_bytes;
  int users;          /* calls executing it now */
  bool evicted;       /* out of the table: its last user destroys it */
  uint64_t last_used; /* for LRU eviction */
} prim_entry;

#define CACHE_SIZE 32
static prim_entry *g_cache[CACHE_SIZE];
static pthread_mutex_t g_cache_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_clock;

static void entry_destroy(prim_entry *e) {
  if (e->prim) dnnl_primitive_destroy(e->prim);
  free(e);
}

/* The cached entry for key with one more user, or NULL. */
static prim_entry *cache_acquire(const prim_key *key) {
  prim_entry *e = NULL;
  pthread_mutex_lock(&g_cache_lock);
  for (int i = 0; i < CACHE_SIZE && !e; i++)
    if (g_cache[i] && memcmp(&g_cache[i]->key, key, sizeof *key) == 0) e = g_cache[i];
  if (e) e->users++, e->last_used = ++g_clock;
  pthread_mutex_unlock(&g_cache_lock);
  return e;
}

/* Puts a new entry in the table with one user, evicting the least recently used one if full.
 * Another thread may have created the same key meanwhile: then that entry is used and e dropped. */
static prim_entry *cache_insert(prim_entry *e) {
  prim_entry *drop = NULL, *found = NULL;
  int slot = -1, oldest = -1;
  pthread_mutex_lock(&g_cache_lock);
  for (int i = 0; i < CACHE_SIZE && !found; i++) {
    if (!g_cache[i]) {
      if (slot < 0) slot = i;
    } else if (memcmp(&g_cache[i]->key, &e->key, sizeof e->key) == 0) {
      found = g_cache[i];
    } else if (oldest < 0 || g_cache[i]->last_used < g_cache[oldest]->last_used) {
      oldest = i;
    }
  }
  if (found) {
    drop = e;
    e = found;
  } else {
    if (slot < 0) { /* full: no empty slot, so oldest is set */
      slot = oldest;
      g_cache[slot]->evicted = true;
      if (g_cache[slot]->users == 0) drop = g_cache[slot];
    }
    g_cache[slot] = e;
  }
  e->users++;
  e->last_used = ++g_clock;
  pthread_mutex_unlock(&g_cache_lock);
  if (drop) entry_destroy(drop);
  return e;
}

static void cache_release(prim_entry *e) {
  pthread_mutex_lock(&g_cache_lock);
  const bool drop = --e->users == 0 && e->evicted;
  pthread_mutex_unlock(&g_cache_lock);
  if (drop) entry_destroy(e);
}

/* ---- one matmul call -------------------------------------------------------------------- */

/* A call as oneDNN sees it: y[m, n] = x[m, k] w[n, k]^T (+ bias[n]). */
typedef struct mm_call {
  const char *op; /* for messages */
  dnnl_data_type_t src_dt, wei_dt, bias_dt, dst_dt;
  int64_t m, n, k, x_stride, w_stride, y_stride;
  const void *x, *w, *bias;
  void *y;
  int threads;
} mm_call;

/* unimplemented: oneDNN has no implementation for these types on this CPU (a supports() gap) */
static kite_status status_of(dnnl_status_t st) {
  return st == dnnl_out_of_memory   ? KITE_ERR_OUT_OF_MEMORY
         : st == dnnl_unimplemented ? KITE_ERR_UNSUPPORTED
                                    : KITE_ERR_INTERNAL;
}

/* Checks a dnnl call inside a function with `kite_status s`, `const mm_call *c` and `done:`. */
#define DNNL_TRY(call, what)                                                                       \
  do {                                                                                             \
    dnnl_status_t st_ = (call);                                                                    \
    if (st_ != dnnl_success) {                                                                     \
      s = kite_set_error(status_of(st_), "%s: cpu.onednn: %s failed (dnnl status %d)", c->op,      \
                         what, (int)st_);                                                          \
      goto done;                                                                                   \
    }                                                                                              \
  } while (0)

/* Sets the calling thread's OpenMP default thread count (its nthreads-var), which is what oneDNN's
 * OpenMP build reads when it creates and runs a primitive, and returns the previous value so that
 * the caller's own OpenMP setting is put back afterwards. Other threading runtimes (TBB, a
 * threadpool) are left at their own count. */
static int threads_set(int n) {
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
  const int old = omp_get_max_threads();
  if (n != old) omp_set_num_threads(n);
  return old;
#else
  return n;
#endif
}

static void threads_restore(int now, int old) {
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
  if (now != old) omp_set_num_threads(old);
#endif
}

/* Creates the entry (primitive, memory descs, scratchpad size) for c; NULL with an error set. */
static kite_status entry_create(const mm_call *c, const prim_key *key, prim_entry **out) {
  kite_status s = KITE_OK;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_primitive_desc_t pd = NULL;
  prim_entry *e = calloc(1, sizeof *e);
  if (!e) return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "%s: cpu.onednn: out of memory", c->op);
  e->key = *key;
  const dnnl_dims_t src_dims = {c->m, c->k}, src_strides = {c->x_stride, 1};
  const dnnl_dims_t wei_dims = {c->k, c->n}, wei_strides = {1, c->w_stride};
  const dnnl_dims_t dst_dims = {c->m, c->n}, dst_strides = {c->y_stride, 1};
  const dnnl_dims_t bias_dims = {1, c->n}, bias_strides = {c->n, 1};
  DNNL_TRY(dnnl_memory_desc_init_by_strides(&e->src_md, 2, src_dims, c->src_dt, src_strides),
           "src memory desc");
  DNNL_TRY(dnnl_memory_desc_init_by_strides(&e->wei_md, 2, wei_dims, c->wei_dt, wei_strides),
           "weights memory desc");
  DNNL_TRY(dnnl_memory_desc_init_by_strides(&e->dst_md, 2, dst_dims, c->dst_dt, dst_strides),
           "dst memory desc");
  if (c->bias)
    DNNL_TRY(dnnl_memory_desc_init_by_strides(&e->bias_md, 2, bias_dims, c->bias_dt, bias_strides),
             "bias memory desc");
  dnnl_matmul_desc_t desc;
  DNNL_TRY(dnnl_matmul_desc_init(&desc, &e->src_md, &e->wei_md, c->bias ? &e->bias_md : NULL,
                                 &e->dst_md),
           "matmul desc");
  DNNL_TRY(dnnl_primitive_attr_create(&attr), "attr create");
  DNNL_TRY(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user),
           "scratchpad mode");
  DNNL_TRY(dnnl_primitive_desc_create(&pd, &desc, attr, g_engine, NULL), "matmul primitive desc");
  const dnnl_memory_desc_t *scratch = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  if (scratch) {
    e->scratch_md = *scratch;
    e->scratch_bytes = dnnl_memory_desc_get_size(scratch);
  }
  DNNL_TRY(dnnl_primitive_create(&e->prim, pd), "matmul primitive");
done:
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (attr) dnnl_primitive_attr_destroy(attr);
  if (s != KITE_OK) {
    entry_destroy(e);
    e = NULL;
  }
  *out = e;
  return s;
}

/* The cached or new entry for c, with one user (cache_release it). */
static kite_status entry_get(const mm_call *c, prim_entry **out) {
  pthread_once(&g_once, engine_init);
  if (g_engine_status != dnnl_success)
    return kite_set_error(KITE_ERR_INTERNAL,
                          "%s: cpu.onednn: engine create failed (dnnl status %d)", c->op,
                          (int)g_engine_status);
  const prim_key key = {.src_dt = c->src_dt,
                        .wei_dt = c->wei_dt,
                        .bias_dt = c->bias ? c->bias_dt : dnnl_data_type_undef,
                        .dst_dt = c->dst_dt,
                        .m = c->m,
                        .n = c->n,
                        .k = c->k,
                        .x_stride = c->x_stride,
                        .w_stride = c->w_stride,
                        .y_stride = c->y_stride,
                        .threads = c->threads};
  if ((*out = cache_acquire(&key))) return KITE_OK;
  const int old = threads_set(c->threads); /* creation sizes the scratchpad for the threads */
  prim_entry *e;
  kite_status s = entry_create(c, &key, &e);
  threads_restore(c->threads, old);
  if (s != KITE_OK) return s;
  *out = cache_insert(e);
  return KITE_OK;
}

/* Runs e on c's buffers with scratch (e->scratch_bytes, ALIGN-aligned) as its scratchpad. */
static kite_status entry_execute(const mm_call *c, const prim_entry *e, void *scratch) {
  kite_status s = KITE_OK;
  dnnl_stream_t stream = NULL;
  dnnl_memory_t mem[5] = {NULL, NULL, NULL, NULL, NULL};
  dnnl_exec_arg_t args[5];
  int nargs = 0;
  int old = c->threads;
  DNNL_TRY(dnnl_stream_create(&stream, g_engine, dnnl_stream_default_flags), "stream create");
  DNNL_TRY(dnnl_memory_create(&mem[0], &e->src_md, g_engine, (void *)c->x), "src memory");
  DNNL_TRY(dnnl_memory_create(&mem[1], &e->wei_md, g_engine, (void *)c->w), "weights memory");
  DNNL_TRY(dnnl_memory_create(&mem[2], &e->dst_md, g_engine, c->y), "dst memory");
  args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, mem[0]};
  args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, mem[1]};
  args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_DST, mem[2]};
  if (c->bias) {
    DNNL_TRY(dnnl_memory_create(&mem[3], &e->bias_md, g_engine, (void *)c->bias), "bias memory");
    args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, mem[3]};
  }
  if (e->scratch_bytes) {
    DNNL_TRY(dnnl_memory_create(&mem[4], &e->scratch_md, g_engine, scratch), "scratchpad memory");
    args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, mem[4]};
  }
  old = threads_set(c->threads);
  DNNL_TRY(dnnl_primitive_execute(e->prim, stream, nargs, args), "matmul execute");
  DNNL_TRY(dnnl_stream_wait(stream), "stream wait");
done:
  threads_restore(c->threads, old);
  for (int i = 0; i < 5; i++)
    if (mem[i]) dnnl_memory_destroy(mem[i]);
  if (stream) dnnl_stream_destroy(stream);
  return s;
}

/* A single row's stride is irrelevant: set it to the dense one so that oneDNN sees a plain
 * layout and such calls share a cache entry whatever the caller's stride. */
static void normalize_strides(mm_call *c) {
  if (c->m == 1) c->x_stride = c->k, c->y_stride = c->n;
  if (c->n == 1) c->w_stride = c->k;
}

/* ---- supports() --------------------------------------------------------------------------- */

/* oneDNN's memory descs need every row apart: rows that overlap (a stride below the row length,
 * broadcast rows with stride 0) are declined, as cpu.openblas does. */
static bool rows_apart(int64_t m, int64_t n, int64_t k, int64_t x_stride, int64_t w_stride,
                       const char **why) {
  if ((m > 1 && x_stride < k) || (n > 1 && w_stride < k)) {
    *why = "overlapping rows (stride < K)";
    return false;
  }
  return true;
}

/* Every entry declines when the library could not be opened (the registry already keeps them
 * from running then; this covers kite_kernel_run). */
static bool loaded(const char **why) {
  if (g_dnnl_loaded) return true;
  *why = "not available here: libdnnl.so." DNNL_STR(DNNL_VERSION_MAJOR) " not found";
  return false;
}

bool cpu_onednn_supports_linear(const kite_kernel *k, const void *args, const char **why) {
  if (!loaded(why)) return false;
  const kite_linear_args *a = args;
  if (a->dtype != KITE_DTYPE_F32) {
    *why = "f32 only (cpu.onednn_bf16 takes bf16)";
    return false;
  }
  return rows_apart(a->m, a->n, a->k, a->x_stride, a->w_stride, why);
}

bool cpu_onednn_supports_linear_bf16(const kite_kernel *k, const void *args, const char **why) {
  if (!loaded(why)) return false;
  const kite_linear_args *a = args;
  if (a->dtype != KITE_DTYPE_BF16) {
    *why = "bf16 only";
    return false;
  }
  if (!isa_reaches(dnnl_cpu_isa_avx512_core_bf16)) {
    *why = "bf16 needs AVX-512-BF16 or AMX here (oneDNN would emulate it)";
    return false;
  }
  /* Decode rows stay with the weight-streaming GEMV: oneDNN repacks the plain weights on every
   * call, which costs more than the GEMV for a few rows and less from M = 16 (figures in
   * docs/performance.md). */
  if (a->m <= DECODE_M_BF16) {
    *why = "M <= 8: decode rows go to the GEMV (cpu.avx2)";
    return false;
  }
  return rows_apart(a->m, a->n, a->k, a->x_stride, a->w_stride, why);
}

bool cpu_onednn_supports_linear_quant(const kite_kernel *k, const void *args, const char **why) {
  if (!loaded(why)) return false;
  const kite_linear_quant_args *a = args;
  if (a->qdtype != KITE_DTYPE_I8 || !cpu_is_float(a->dtype)) {
    *why = "int8 only";
    return false;
  }
  /* Without VNNI oneDNN multiplies u8 x s8 pairs with VPMADDUBSW, whose int16 pair sums saturate
   * at extreme codes; kite's contract is the exact int32 dot product. */
  if (!isa_reaches(dnnl_cpu_isa_avx512_core_vnni) && !isa_reaches(dnnl_cpu_isa_avx2_vnni)) {
    *why = "int8 needs VNNI (AVX-512-VNNI, AVX-VNNI or AMX) for exact int32 sums";
    return false;
  }
  return rows_apart(a->m, a->n, a->k, a->x_stride, a->w_stride, why);
}

/* ---- the ops ------------------------------------------------------------------------------ */

static dnnl_data_type_t dnnl_type(kite_dtype t) {
  return t == KITE_DTYPE_BF16 ? dnnl_bf16 : t == KITE_DTYPE_F16 ? dnnl_f16 : dnnl_f32;
}

/* Runs c through its cached primitive, the scratchpad (and, with out_bytes > 0, c's dst as a
 * compact block in front of it) taken from the ctx workspace. */
static kite_status mm_run(kite_ctx *ctx, mm_call *c, size_t out_bytes) {
  normalize_strides(c);
  prim_entry *e = NULL;
  kite_status s = entry_get(c, &e);
  if (s != KITE_OK) return s;
  void *ws = NULL;
  if (out_bytes + e->scratch_bytes)
    s = kite_ctx_workspace(ctx, out_bytes + e->scratch_bytes + 2 * ALIGN, &ws);
  if (s == KITE_OK) {
    char *p = ws ? align_up(ws) : NULL;
    if (out_bytes) c->y = p, p = align_up(p + out_bytes);
    s = entry_execute(c, e, p);
  }
  cache_release(e);
  return s;
}

kite_status cpu_linear_onednn(const kite_kernel *kk, kite_ctx *ctx, const void *args) {
  const kite_linear_args *a = args;
  if (a->dtype != KITE_DTYPE_F32 && a->dtype != KITE_DTYPE_BF16)
    return kite_set_error(KITE_ERR_UNSUPPORTED, "linear: cpu.onednn: f32/bf16 only");
  if (a->m == 0 || a->n == 0) return KITE_OK;
  if (a->k == 0) {
    cpu_linear_bias_only(a->dtype, a->m, a->n, a->bias, a->y, a->y_stride);
    return KITE_OK;
  }
  const dnnl_data_type_t dt = dnnl_type(a->dtype);
  mm_call c = {.op = "linear",
               .src_dt = dt,
               .wei_dt = dt,
               .bias_dt = dt,
               .dst_dt = dt,
               .m = a->m,
               .n = a->n,
               .k = a->k,
               .x_stride = a->x_stride,
               .w_stride = a->w_stride,
               .y_stride = a->y_stride,
               .x = a->x,
               .w = a->w,
               .bias = a->bias,
               .y = a->y,
               .threads = kite_ctx_num_threads(ctx)};
  return mm_run(ctx, &c, 0);
}

/* y[r, j] = acc[r, j] * x_scales[r] * w_scales[j] + bias[j], rounded once to the dtype. */
static void scale_rows(const kite_linear_quant_args *a, const int32_t *acc) {
  const kite_dtype t = a->dtype;
  for (int64_t r = 0; r < a->m; r++) {
    const float xs = a->x_scales[r];
    for (int64_t j = 0; j < a->n; j++) {
      float v = (float)acc[r * a->n + j] * xs * a->w_scales[j];
      if (a->bias) v += kite_load_f32(t, a->bias, j);
      kite_store_f32(t, a->y, r * a->y_stride + j, v);
    }
  }
}

kite_status cpu_linear_quant_onednn(const kite_kernel *kk, kite_ctx *ctx, const void *args) {
  const kite_linear_quant_args *a = args;
  if (a->qdtype != KITE_DTYPE_I8 || !cpu_is_float(a->dtype))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "linear_quant: cpu.onednn: int8 only");
  if (a->m == 0 || a->n == 0) return KITE_OK;
  if (a->k == 0) {
    cpu_linear_bias_only(a->dtype, a->m, a->n, a->bias, a->y, a->y_stride);
    return KITE_OK;
  }
  size_t acc_bytes;
  if (__builtin_mul_overflow((size_t)a->m, (size_t)a->n, &acc_bytes) ||
      __builtin_mul_overflow(acc_bytes, sizeof(int32_t), &acc_bytes) || acc_bytes > SIZE_MAX / 2)
    return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "linear_quant: cpu.onednn: [M, N] too large");
  /* oneDNN writes exact int32 sums into a compact [m, n] block of the workspace (y stays
   * untouched until the epilogue); the scales and bias follow in plain C. */
  mm_call c = {.op = "linear_quant",
               .src_dt = dnnl_s8,
               .wei_dt = dnnl_s8,
               .dst_dt = dnnl_s32,
               .m = a->m,
               .n = a->n,
               .k = a->k,
               .x_stride = a->x_stride,
               .w_stride = a->w_stride,
               .y_stride = a->n,
               .x = a->xq,
               .w = a->wq,
               .threads = kite_ctx_num_threads(ctx)};
  const kite_status s = mm_run(ctx, &c, acc_bytes);
  if (s == KITE_OK) scale_rows(a, c.y);
  return s;
}
