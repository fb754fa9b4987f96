/*
 * Communicators and collectives through NCCL, loaded with dlopen at first use, never linked: the
 * plugin loads where NCCL is absent, and kite list then says why the collectives do not run.
 * Looked for, in order: $KITE_NCCL_PATH, libnccl.so.2 (the loader's search path, or the copy a
 * process such as PyTorch has loaded already), and the copy PyTorch's wheels carry in
 * site-packages/nvidia/nccl/lib of the usual Python prefixes.
 *
 * cuda.nccl runs ncclAllReduce / ncclAllGather / ncclReduceScatter on the ctx's stream; its
 * all_reduce_add_rms_norm all-reduces into the ctx's workspace and runs kite's add_rms_norm
 * kernel on that (norm.cu), so x is never written.
 *
 * A comm of 2 to 8 ranks also gets peer_comm.cu's buffers at creation: each rank's record is
 * all-gathered through the new NCCL communicator (kite_comm_create), or read directly
 * (kite_comm_create_all), and the group uses them only when every rank could map every peer's.
 *
 * Layering: stands on cuda_device.c (cuda_begin, names) and norm.cu (cuda_add_rms_norm);
 * cuda_plugin.c puts what this file exports into the backend and its table, and nothing here
 * calls back into it.
 */
#include <dlfcn.h>
#include <glob.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cuda_backend.h"

/* The NCCL types and constants used here, declared here so that the plugin builds without
 * nccl.h; the values are NCCL 2's ABI, checked against nccl.h where it is installed. */
typedef struct nccl_comm *nccl_comm_t;
typedef struct nccl_unique_id {
  char internal[128];
} nccl_unique_id;
enum {
  NCCL_SUCCESS = 0,
  NCCL_INT8 = 0,
  NCCL_SUM = 0,
  NCCL_FLOAT16 = 6,
  NCCL_FLOAT32 = 7,
  NCCL_BFLOAT16 = 9,
};
#if defined(__has_include) && !defined(KITE_CUDA_NO_NCCL_H) /* the latter: build as without it */
#if __has_include(<nccl.h>)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes" /* its f() declarations */
#include <nccl.h>
#pragma GCC diagnostic pop
_Static_assert((int)ncclSuccess == NCCL_SUCCESS && (int)ncclSum == NCCL_SUM &&
                   (int)ncclInt8 == NCCL_INT8 && (int)ncclFloat16 == NCCL_FLOAT16 &&
                   (int)ncclFloat32 == NCCL_FLOAT32 && (int)ncclBfloat16 == NCCL_BFLOAT16,
               "NCCL constants differ from nccl.h");
_Static_assert(sizeof(ncclUniqueId) == sizeof(nccl_unique_id) &&
                   sizeof(nccl_unique_id) == KITE_COMM_ID_BYTES,
               "ncclUniqueId is not 128 bytes");
#endif
#endif

typedef struct nccl_api {
  int (*get_version)(int *);
  int (*get_unique_id)(nccl_unique_id *);
  int (*comm_init_rank)(nccl_comm_t *, int, nccl_unique_id, int);
  int (*comm_init_all)(nccl_comm_t *, int, const int *);
  int (*comm_destroy)(nccl_comm_t);
  int (*all_reduce)(const void *, void *, size_t, int, int, nccl_comm_t, cudaStream_t);
  int (*all_gather)(const void *, void *, size_t, int, nccl_comm_t, cudaStream_t);
  int (*reduce_scatter)(const void *, void *, size_t, int, int, nccl_comm_t, cudaStream_t);
  const char *(*get_error_string)(int);
  const char *(*get_last_error)(nccl_comm_t); /* NCCL >= 2.13; NULL before */
} nccl_api;

static nccl_api g_nccl;
static bool g_loaded;
static char g_why[640]; /* why NCCL is not loaded */
static char g_where[256];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* Binds every symbol of lib, or none. */
static bool bind(void *lib) {
  nccl_api a;
#define SYM(field, name)                                                                           \
  *(void **)&a.field = dlsym(lib, name);                                                           \
  if (!a.field && strcmp(name, "ncclGetLastError")) return false
  SYM(get_version, "ncclGetVersion");
  SYM(get_unique_id, "ncclGetUniqueId");
  SYM(comm_init_rank, "ncclCommInitRank");
  SYM(comm_init_all, "ncclCommInitAll");
  SYM(comm_destroy, "ncclCommDestroy");
  SYM(all_reduce, "ncclAllReduce");
  SYM(all_gather, "ncclAllGather");
  SYM(reduce_scatter, "ncclReduceScatter");
  SYM(get_error_string, "ncclGetErrorString");
  SYM(get_last_error, "ncclGetLastError");
#undef SYM
  g_nccl = a;
  return true;
}

static bool try_path(const char *path) {
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  size_t len = strlen(g_why);
  if (!lib) {
    const char *e = dlerror();
    snprintf(g_why + len, sizeof g_why - len, "%s%s", len ? "; " : "", e ? e : path);
    return false;
  }
  if (!bind(lib)) {
    snprintf(g_why + len, sizeof g_why - len, "%s%s lacks NCCL 2 symbols", len ? "; " : "", path);
    dlclose(lib);
    return false;
  }
  snprintf(g_where, sizeof g_where, "%s", path);
  return true;
}

static void load(void) {
  const char *env = getenv("KITE_NCCL_PATH");
  if (env && env[0] && try_path(env)) goto found;
  if (try_path("libnccl.so.2")) goto found;
  {
    /* PyTorch's wheel dependency nvidia-nccl-cu*: <prefix>/lib/python3.X/site-packages/nvidia/...
     */
    static const char *const roots[] = {"VIRTUAL_ENV", "CONDA_PREFIX", NULL};
    char pat[512];
    const char *tail = "lib/python3*/*-packages/nvidia/nccl/lib/libnccl.so.2";
    for (int i = -2; i < 2; i++) {
      const char *prefix = i == -2 ? "/usr/local" : i == -1 ? "/usr" : getenv(roots[i]);
      if (!prefix || !prefix[0]) continue;
      snprintf(pat, sizeof pat, "%s/%s", prefix, tail);
      glob_t gl;
      if (glob(pat, 0, NULL, &gl) == 0) {
        for (size_t j = 0; j < gl.gl_pathc; j++)
          if (try_path(gl.gl_pathv[j])) {
            globfree(&gl);
            goto found;
          }
        globfree(&gl);
      }
    }
    const char *home = getenv("HOME");
    if (home && home[0]) {
      snprintf(pat, sizeof pat, "%s/.local/%s", home, tail);
      glob_t gl;
      if (glob(pat, 0, NULL, &gl) == 0) {
        bool ok = false;
        for (size_t j = 0; j < gl.gl_pathc && !ok; j++) ok = try_path(gl.gl_pathv[j]);
        globfree(&gl);
        if (ok) goto found;
      }
    }
  }
  return;
found:
  g_loaded = true;
  g_why[0] = '\0';
}

/* NULL when NCCL is loaded, else why not. */
static const char *nccl_missing(void) {
  pthread_once(&g_once, load);
  return g_loaded ? NULL : g_why;
}

const char *cuda_nccl_unavailable(const kite_backend *b, const kite_kernel *k) {
  (void)b;
  if (k->op != KITE_OP_ALL_REDUCE && k->op != KITE_OP_ALL_GATHER &&
      k->op != KITE_OP_REDUCE_SCATTER && k->op != KITE_OP_ALL_REDUCE_ADD_RMS_NORM)
    return NULL;
  static char msg[700];
  const char *why = nccl_missing();
  if (!why) return NULL;
  if (!msg[0]) snprintf(msg, sizeof msg, "NCCL not found: %.600s", why);
  return msg;
}

static kite_status require_nccl(const char *fn) {
  const char *why = nccl_missing();
  if (!why) return KITE_OK;
  return kite_set_error(KITE_ERR_UNSUPPORTED,
                        "%s: cuda: NCCL could not be loaded (set KITE_NCCL_PATH to "
                        "libnccl.so.2): %s",
                        fn, why);
}

/* NCCL's message for rc, and its last error detail where the library has one. */
static kite_status nccl_failed(const char *fn, const char *call, int rc, nccl_comm_t comm) {
  const char *detail = g_nccl.get_last_error ? g_nccl.get_last_error(comm) : NULL;
  return kite_set_error(KITE_ERR_DEVICE, "%s: cuda: %s failed: %s%s%s", fn, call,
                        g_nccl.get_error_string(rc), detail && detail[0] ? ": " : "",
                        detail ? detail : "");
}

/* Hands every rank's `bytes` bytes at mine to every rank, rank q's at all + q * bytes
 * (ncclAllGather through device memory on stream st, waited for). */
static kite_status exchange(const char *fn, nccl_comm_t comm, cudaStream_t st, const void *mine,
                            void *all, size_t bytes, int nranks, int rank) {
  void *d = NULL;
  const size_t total = bytes * (size_t)nranks;
  cudaError_t e = cudaMalloc(&d, total);
  if (e != cudaSuccess) return cuda_device_error(fn, "cudaMalloc", e);
  /* in place: this rank's part already at its place in the result */
  char *part = (char *)d + bytes * (size_t)rank;
  e = cudaMemcpy(part, mine, bytes, cudaMemcpyHostToDevice);
  int rc = NCCL_SUCCESS;
  if (e == cudaSuccess) {
    rc = g_nccl.all_gather(part, d, bytes, NCCL_INT8, comm, st);
    if (rc == NCCL_SUCCESS) e = cudaStreamSynchronize(st);
  }
  if (e == cudaSuccess && rc == NCCL_SUCCESS) e = cudaMemcpy(all, d, total, cudaMemcpyDeviceToHost);
  cudaFree(d);
  if (rc != NCCL_SUCCESS) return nccl_failed(fn, "ncclAllGather", rc, comm);
  return e == cudaSuccess ? KITE_OK : cuda_device_error(fn, "peer exchange", e);
}

/* The peer-memory buffers of rank `rank` (peer_comm.cu), mapped on every rank or on none: each
 * rank's records, then whether each mapped every peer, go through NCCL. A rank whose buffer
 * cannot be made sends an empty record, so that the group agrees to go without. */
static kite_status peer_setup(const char *fn, cuda_comm *c, cudaStream_t st, int nranks, int rank) {
  cuda_peer_record mine, *all = NULL;
  cuda_peer_group *g = NULL;
  if (nranks < 2 || nranks > CUDA_PEER_MAX_RANKS) return KITE_OK; /* no peer kernels */
  if (cuda_peer_alloc(c->device, nranks, rank, &g, &mine) != KITE_OK) memset(&mine, 0, sizeof mine);
  unsigned char ok = 0, *oks = NULL;
  all = calloc((size_t)nranks, sizeof *all);
  oks = calloc((size_t)nranks, 1);
  kite_status s =
      all && oks ? KITE_OK : kite_set_error(KITE_ERR_OUT_OF_MEMORY, "%s: cuda: out of memory", fn);
  if (s == KITE_OK) s = exchange(fn, c->nccl, st, &mine, all, sizeof mine, nranks, rank);
  if (s == KITE_OK) {
    ok = g && cuda_peer_attach(g, all);
    s = exchange(fn, c->nccl, st, &ok, oks, 1, nranks, rank);
  }
  for (int q = 0; s == KITE_OK && q < nranks; q++) ok = ok && oks[q];
  if (s == KITE_OK && ok) {
    c->peer = g;
  } else {
    cuda_peer_free(g);
  }
  free(all);
  free(oks);
  return s;
}

kite_status cuda_comm_unique_id(const kite_backend *b, kite_ctx *ctx, kite_comm_id *id) {
  (void)b;
  (void)ctx;
  const char *fn = "kite_comm_get_unique_id";
  kite_status s = require_nccl(fn);
  if (s != KITE_OK) return s;
  nccl_unique_id u;
  int rc = g_nccl.get_unique_id(&u);
  if (rc != NCCL_SUCCESS) return nccl_failed(fn, "ncclGetUniqueId", rc, NULL);
  memcpy(id->bytes, u.internal, sizeof u.internal);
  return KITE_OK;
}

kite_status cuda_comm_create(const kite_backend *b, kite_ctx *ctx, const kite_comm_id *id,
                             int nranks, int rank, void **out) {
  (void)b;
  const char *fn = "kite_comm_create";
  void *stream;
  kite_status s = require_nccl(fn);
  if (s == KITE_OK) s = cuda_begin(ctx, fn, &stream);
  if (s != KITE_OK) return s;
  cuda_comm *c = calloc(1, sizeof *c);
  if (!c) return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "%s: cuda: out of memory", fn);
  nccl_unique_id u;
  memcpy(u.internal, id->bytes, sizeof u.internal);
  int rc = g_nccl.comm_init_rank(&c->nccl, nranks, u, rank);
  if (rc != NCCL_SUCCESS) {
    free(c);
    return nccl_failed(fn, "ncclCommInitRank", rc, NULL);
  }
  c->device = kite_ctx_device(ctx).device_id;
  if ((s = peer_setup(fn, c, (cudaStream_t)stream, nranks, rank)) != KITE_OK) {
    g_nccl.comm_destroy(c->nccl);
    free(c);
    return s;
  }
  *out = c;
  return KITE_OK;
}

/* The peer buffers of a group made in one process: the records are at hand, no exchange. */
static void peer_setup_all(cuda_comm **cs, int nranks) {
  if (nranks < 2 || nranks > CUDA_PEER_MAX_RANKS) return;
  cuda_peer_record recs[CUDA_PEER_MAX_RANKS];
  cuda_peer_group *g[CUDA_PEER_MAX_RANKS] = {0};
  bool ok = true;
  for (int i = 0; i < nranks && ok; i++)
    ok = cuda_peer_alloc(cs[i]->device, nranks, i, &g[i], &recs[i]) == KITE_OK && g[i];
  for (int i = 0; i < nranks && ok; i++) ok = cuda_peer_attach(g[i], recs);
  for (int i = 0; i < nranks; i++) {
    if (ok)
      cs[i]->peer = g[i];
    else
      cuda_peer_free(g[i]);
  }
}

kite_status cuda_comm_create_all(const kite_backend *b, kite_ctx *const *ctxs, int nranks,
                                 void **out) {
  (void)b;
  const char *fn = "kite_comm_create_all";
  kite_status s = require_nccl(fn);
  if (s != KITE_OK) return s;
  int *devs = calloc((size_t)nranks, sizeof *devs);
  nccl_comm_t *comms = calloc((size_t)nranks, sizeof *comms);
  if (!devs || !comms) {
    free(devs);
    free(comms);
    return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "%s: cuda: out of memory", fn);
  }
  for (int i = 0; i < nranks; i++) devs[i] = kite_ctx_device(ctxs[i]).device_id;
  int rc = g_nccl.comm_init_all(comms, nranks, devs);
  if (rc != NCCL_SUCCESS) {
    s = nccl_failed(fn, "ncclCommInitAll", rc, NULL);
  } else {
    for (int i = 0; i < nranks; i++) {
      cuda_comm *one = malloc(sizeof *one);
      if (!one) {
        for (int j = 0; j < i; j++) free(out[j]);
        for (int j = 0; j < nranks; j++) g_nccl.comm_destroy(comms[j]);
        s = kite_set_error(KITE_ERR_OUT_OF_MEMORY, "%s: cuda: out of memory", fn);
        break;
      }
      *one = (cuda_comm){comms[i], devs[i], NULL};
      out[i] = one;
    }
    if (s == KITE_OK) peer_setup_all((cuda_comm **)out, nranks);
  }
  free(devs);
  free(comms);
  return s;
}

void cuda_comm_destroy(const kite_backend *b, void *comm) {
  (void)b;
  cuda_comm *c = comm;
  if (!c) return;
  cuda_peer_free(c->peer);
  if (g_loaded) g_nccl.comm_destroy(c->nccl);
  free(c);
}

/* ---- cuda.nccl ------------------------------------------------------------------------------ */

static const kite_comm_ref *comm_of(const void *args) {
  if (kite_args_head_of(args)->op == KITE_OP_ALL_REDUCE_ADD_RMS_NORM)
    return &((const kite_comm_norm_args *)args)->comm;
  return &((const kite_comm_args *)args)->comm;
}

static int nccl_type(kite_dtype t) {
  return t == KITE_DTYPE_F32 ? NCCL_FLOAT32 : t == KITE_DTYPE_F16 ? NCCL_FLOAT16 : NCCL_BFLOAT16;
}

CUDA_SUPPORTS(cuda_nccl_supports) {
  (void)k;
  kite_dtype t = kite_args_head_of(args)->dtype;
  /* the comm's backend is this one when it creates comms with this file's cuda_comm_create (the
   * backend struct itself is cuda_plugin.c's, which this file does not call) */
  const kite_backend *owner = comm_of(args)->backend;
  if (!owner || owner->comm_create != cuda_comm_create) {
    *why = "the comm belongs to another backend";
    return false;
  }
  if (t != KITE_DTYPE_F32 && t != KITE_DTYPE_F16 && t != KITE_DTYPE_BF16) {
    *why = "dtype must be f32, f16 or bf16";
    return false;
  }
  return true;
}

CUDA_RUN(cuda_nccl_run) {
  (void)k;
  const kite_args_head *h = kite_args_head_of(args);
  const char *name = cuda_op_str(h->op);
  const cuda_comm *c = comm_of(args)->handle;
  const int dt = nccl_type(h->dtype);
  void *stream;
  kite_status s = cuda_begin(ctx, name, &stream);
  if (s != KITE_OK) return s;
  cudaStream_t st = (cudaStream_t)stream;
  int rc = NCCL_SUCCESS;
  const char *call = "ncclAllReduce";
  if (h->op == KITE_OP_ALL_REDUCE_ADD_RMS_NORM) {
    const kite_norm_args *na = &((const kite_comm_norm_args *)args)->norm;
    const size_t n = (size_t)(na->rows * na->cols);
    if (n == 0) return KITE_OK; /* every rank has no work (the counts agree) */
    void *sum;
    if ((s = kite_ctx_workspace(ctx, n * kite_dtype_size(h->dtype), &sum)) != KITE_OK) return s;
    rc = g_nccl.all_reduce(na->x, sum, n, dt, NCCL_SUM, c->nccl, st);
    if (rc != NCCL_SUCCESS) return nccl_failed(name, call, rc, c->nccl);
    kite_norm_args a = *na;
    a.x = sum;
    a.x_stride = na->cols;
    return cuda_add_rms_norm(ctx, &a);
  }
  const kite_comm_args *a = args;
  const size_t n = (size_t)a->count;
  switch (h->op) {
  case KITE_OP_ALL_REDUCE:
    rc = g_nccl.all_reduce(a->x, a->y, n, dt, NCCL_SUM, c->nccl, st);
    break;
  case KITE_OP_ALL_GATHER:
    call = "ncclAllGather";
    rc = g_nccl.all_gather(a->x, a->y, n, dt, c->nccl, st);
    break;
  case KITE_OP_REDUCE_SCATTER:
    call = "ncclReduceScatter";
    rc = g_nccl.reduce_scatter(a->x, a->y, n, dt, NCCL_SUM, c->nccl, st);
    break;
  default:
    return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: cuda.nccl: not a collective", name);
  }
  return rc == NCCL_SUCCESS ? KITE_OK : nccl_failed(name, call, rc, c->nccl);
}
