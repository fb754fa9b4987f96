/*
 * The collectives' speed on a GPU machine, one rank per GPU as threads of this process (comms
 * from kite_comm_create_all), beside NCCL called directly on the same buffers and GPUs:
 *   all_reduce bf16, 1 KB - 256 MB: kite's choice, each kernel pinned (cuda.oneshot,
 *     cuda.twoshot, cuda.nccl), and ncclAllReduce; time per call and bus bandwidth
 *     (bytes / time * 2 (n - 1) / n)
 *   all_reduce_add_rms_norm bf16 PRE, tokens 1 - 64 x hidden 4096 / 8192: kite's choice, cuda.nccl
 *     pinned, and ncclAllReduce followed by kite_add_rms_norm
 * Times are the device time of back-to-back calls on each rank's stream (events), the slowest
 * rank's, per call.
 *
 *   bench_comm [--ranks N]   N: default every visible GPU (at least 2 for the peer kernels)
 * Exit 77 (skipped) without a CUDA device or NCCL.
 */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kite/backend.h"
#include "kite/dtype.h"
#include "kite/kite.h"

#define MAX_RANKS 16

typedef int (*nccl_init_all_fn)(void **comms, int n, const int *devs);
typedef int (*nccl_all_reduce_fn)(const void *x, void *y, size_t count, int dtype, int op,
                                  void *comm, void *stream);
typedef int (*nccl_destroy_fn)(void *comm);
enum { NCCL_BF16 = 9, NCCL_SUM = 0 };

/* What one timed loop runs. */
typedef enum which { KITE, NCCL_DIRECT, PAIR } which;

typedef struct bench {
  int nranks;
  kite_ctx *ctx[MAX_RANKS];
  kite_comm *comm[MAX_RANKS];
  void *nccl[MAX_RANKS];
  nccl_all_reduce_fn nccl_all_reduce;
  void *x[MAX_RANKS], *y[MAX_RANKS], *res[MAX_RANKS], *w[MAX_RANKS];
  /* the run: op, sizes, what runs, the calling threads' kernel config */
  kite_op op;
  int64_t rows, cols; /* all_reduce: 1 x count */
  which what;
  const char *config;
  double seconds[MAX_RANKS];
  bool failed[MAX_RANKS];
} bench;

typedef struct bench_arg {
  bench *b;
  int rank;
} bench_arg;

static DLTensor tensor(void *data, int dev, int ndim, int64_t *shape) {
  return (DLTensor){data, {kDLCUDA, dev}, ndim, kite_dtype_dlpack(KITE_DTYPE_BF16), shape, NULL, 0};
}

static kite_status one_call(bench *b, int r) {
  kite_ctx *ctx = b->ctx[r];
  int64_t shape[2] = {b->rows, b->cols}, wshape[1] = {b->cols};
  const size_t n = (size_t)(b->rows * b->cols);
  DLTensor x = tensor(b->x[r], r, 2, shape), y = tensor(b->y[r], r, 2, shape);
  DLTensor res = tensor(b->res[r], r, 2, shape), w = tensor(b->w[r], r, 1, wshape);
  if (b->what == NCCL_DIRECT || b->what == PAIR) {
    int rc = b->nccl_all_reduce(b->x[r], b->y[r], n, NCCL_BF16, NCCL_SUM, b->nccl[r],
                                kite_ctx_stream(ctx));
    if (rc != 0) return KITE_ERR_DEVICE;
    if (b->what == NCCL_DIRECT) return KITE_OK;
    return kite_add_rms_norm(ctx, &y, &res, &w, 1e-5f, 0.0f, KITE_NORM_PRE, &y);
  }
  if (b->op == KITE_OP_ALL_REDUCE) return kite_all_reduce(ctx, b->comm[r], &x, &y);
  return kite_all_reduce_add_rms_norm(ctx, b->comm[r], &x, &res, &w, 1e-5f, 0.0f, KITE_NORM_PRE,
                                      &y);
}

static void *bench_rank(void *p) {
  bench_arg *a = p;
  bench *b = a->b;
  const int r = a->rank;
  kite_ctx *ctx = b->ctx[r];
  kite_config_set_thread(b->config);
  const size_t bytes = (size_t)(b->rows * b->cols) * 2;
  const int iters = bytes <= (1 << 20) ? 200 : bytes <= (32 << 20) ? 20 : 5;
  void *timer = NULL;
  b->failed[r] = false;
  b->seconds[r] = 0;
  /* every rank makes the same calls: a failed one fails on every rank (a pinned kernel's
   * supports() sees the same sizes), so no rank is left waiting */
  for (int it = -5; it < iters; it++) {
    if (it == 0) {
      kite_ctx_synchronize(ctx);
      kite_ctx_timer_start(ctx, &timer);
    }
    if (one_call(b, r) != KITE_OK) {
      b->failed[r] = true;
      break;
    }
  }
  double s = 0;
  if (timer && kite_ctx_timer_stop(ctx, timer, &s) == KITE_OK) b->seconds[r] = s / iters;
  kite_config_set_thread(NULL);
  return NULL;
}

/* The slowest rank's time per call in microseconds, or NAN when the call failed. */
static double run(bench *b, which what, const char *config) {
  b->what = what;
  b->config = config;
  pthread_t th[MAX_RANKS];
  bench_arg ba[MAX_RANKS];
  for (int r = 0; r < b->nranks; r++) {
    ba[r] = (bench_arg){b, r};
    pthread_create(&th[r], NULL, bench_rank, &ba[r]);
  }
  for (int r = 0; r < b->nranks; r++) pthread_join(th[r], NULL);
  double t = 0;
  for (int r = 0; r < b->nranks; r++) {
    if (b->failed[r]) return NAN;
    t = b->seconds[r] > t ? b->seconds[r] : t;
  }
  return t * 1e6;
}

static void cell(double us) {
  if (isnan(us))
    printf(" %10s", "-");
  else
    printf(" %10.2f", us);
}

static void all_reduce_table(bench *b) {
  const double factor = 2.0 * (b->nranks - 1) / b->nranks;
  printf("all_reduce bf16 sum, %d ranks: us per call (\"-\": the kernel declines the size); bus "
         "bandwidth = bytes / time * 2(n-1)/n (GB/s)\n",
         b->nranks);
  printf("%10s %10s %10s %10s %10s %10s %9s %9s %7s\n", "bytes", "kite", "oneshot", "twoshot",
         "kite.nccl", "nccl", "kite GB/s", "nccl GB/s", "nccl/kite");
  b->op = KITE_OP_ALL_REDUCE;
  b->rows = 1;
  for (size_t bytes = 1024; bytes <= ((size_t)256 << 20); bytes *= 4) {
    b->cols = (int64_t)(bytes / 2);
    const double t_auto = run(b, KITE, "");
    const double t_one = run(b, KITE, "all_reduce=cuda.oneshot");
    const double t_two = run(b, KITE, "all_reduce=cuda.twoshot");
    const double t_kn = run(b, KITE, "all_reduce=cuda.nccl");
    const double t_nccl = run(b, NCCL_DIRECT, "");
    printf("%10zu", bytes);
    cell(t_auto);
    cell(t_one);
    cell(t_two);
    cell(t_kn);
    cell(t_nccl);
    printf(" %9.1f %9.1f %7.2f\n", (double)bytes / t_auto * factor / 1e3,
           (double)bytes / t_nccl * factor / 1e3, t_nccl / t_auto);
    fflush(stdout);
  }
}

static void norm_table(bench *b) {
  printf("\nall_reduce_add_rms_norm bf16 PRE, %d ranks: us per call; pair = ncclAllReduce then "
         "kite_add_rms_norm\n",
         b->nranks);
  printf("%7s %7s %10s %10s %10s %7s\n", "tokens", "hidden", "kite", "kite.nccl", "pair",
         "pair/kite");
  b->op = KITE_OP_ALL_REDUCE_ADD_RMS_NORM;
  static const int64_t hidden[] = {4096, 8192};
  for (int h = 0; h < 2; h++)
    for (int64_t t = 1; t <= 64; t *= 2) {
      b->rows = t;
      b->cols = hidden[h];
      const double t_auto = run(b, KITE, "");
      const double t_kn = run(b, KITE, "all_reduce_add_rms_norm=cuda.nccl");
      const double t_pair = run(b, PAIR, "");
      printf("%7lld %7lld", (long long)t, (long long)hidden[h]);
      cell(t_auto);
      cell(t_kn);
      cell(t_pair);
      printf(" %7.2f\n", t_pair / t_auto);
      fflush(stdout);
    }
}

int main(int argc, char **argv) {
  int nranks = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--ranks") && i + 1 < argc) {
      nranks = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: bench_comm [--ranks N]\n");
      return 2;
    }
  }
  int ndev = 0;
  for (size_t i = 0; i < kite_backend_count(); i++) {
    kite_backend_info bi;
    if (kite_backend_get(i, &bi) == KITE_OK && bi.device_type == kDLCUDA && bi.device_count > ndev)
      ndev = bi.device_count;
  }
  if (nranks == 0) nranks = ndev;
  if (ndev == 0 || nranks < 1 || nranks > ndev || nranks > MAX_RANKS) {
    printf("bench_comm: %d ranks asked, %d CUDA devices: skipped\n", nranks, ndev);
    return 77;
  }
  const char *path = getenv("KITE_NCCL_PATH");
  void *lib = dlopen(path && path[0] ? path : "libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    printf("bench_comm: NCCL not loadable (%s): skipped\n", dlerror());
    return 77;
  }
  bench b = {.nranks = nranks};
  nccl_init_all_fn init_all = (nccl_init_all_fn)dlsym(lib, "ncclCommInitAll");
  nccl_destroy_fn destroy = (nccl_destroy_fn)dlsym(lib, "ncclCommDestroy");
  b.nccl_all_reduce = (nccl_all_reduce_fn)dlsym(lib, "ncclAllReduce");
  int devs[MAX_RANKS];
  for (int r = 0; r < nranks; r++) {
    devs[r] = r;
    kite_ctx_params p = kite_ctx_params_default();
    p.device = (DLDevice){kDLCUDA, r};
    if (kite_ctx_create(&p, &b.ctx[r]) != KITE_OK) {
      printf("bench_comm: no ctx on GPU %d: %s\n", r, kite_last_error());
      return 1;
    }
  }
  if (!init_all || !destroy || !b.nccl_all_reduce || init_all(b.nccl, nranks, devs) != 0 ||
      kite_comm_create_all(b.ctx, nranks, b.comm) != KITE_OK) {
    printf("bench_comm: cannot create the communicators: %s\n", kite_last_error());
    return 1;
  }
  const size_t max_bytes = (size_t)256 << 20;
  for (int r = 0; r < nranks; r++) {
    void **bufs[] = {&b.x[r], &b.y[r], &b.res[r], &b.w[r]};
    for (int i = 0; i < 4; i++) {
      const size_t bytes = i < 2 ? max_bytes : (size_t)1 << 20;
      if (kite_malloc(b.ctx[r], bytes, bufs[i]) != KITE_OK) {
        printf("bench_comm: cannot allocate on rank %d: %s\n", r, kite_last_error());
        return 1;
      }
      /* zeros: sums and norms stay finite however often they run */
      void *zeros = calloc(1, bytes);
      kite_memcpy(b.ctx[r], *bufs[i], zeros, bytes, KITE_COPY_HOST_TO_DEVICE);
      free(zeros);
    }
  }
  all_reduce_table(&b);
  norm_table(&b);
  for (int r = 0; r < nranks; r++) {
    kite_free(b.ctx[r], b.x[r]);
    kite_free(b.ctx[r], b.y[r]);
    kite_free(b.ctx[r], b.res[r]);
    kite_free(b.ctx[r], b.w[r]);
    kite_comm_destroy(b.comm[r]);
    destroy(b.nccl[r]);
    kite_ctx_destroy(b.ctx[r]);
  }
  return 0;
}
