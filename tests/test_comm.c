/*
 * The collectives (all_reduce, all_gather, reduce_scatter, all_reduce_add_rms_norm) with ranks as
 * threads of this process, one ctx and comm each, against sums computed here in float64: every
 * op and dtype, in place and out of place, comms from kite_comm_create and kite_comm_create_all.
 * Then bad inputs: each must give an error with a message, and no rank may be left waiting
 * (ranks that disagree, a rank that fails its own checks, a rank that destroys its comm).
 *
 *   test_comm                           CPU (the ref backend's comms), 1, 2 and 4 ranks
 *   test_comm --device cuda [--ranks N] CUDA: 1 rank, and N (default: every visible GPU, when
 *                                       more than one), rank r on GPU r; each op with the
 *                                       backend's own choice (the peer-memory kernels at these
 *                                       sizes), then with cuda.twoshot and cuda.nccl pinned
 *   test_comm ... --quick               f16, small shapes, kite_comm_create_all (compute-sanitizer)
 * (bench_comm times them.)
 * Exit 77 (skipped) when the device or its communication library is not there.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kite/backend.h"
#include "kite/dtype.h"
#include "kite/kite.h"

/* a broken collective fails every element of every rank: the first lines tell enough */
#define CHECK_MAX_PRINTED 40
#include "check.h"

#define MAX_RANKS 16

static DLDeviceType g_dev = kDLCPU;
/* --quick: f16, the small shapes, comms from kite_comm_create_all, all_reduce and the fused
 * norm on the peer kernels only: NCCL's kernels fail under compute-sanitizer */
static bool g_quick;
static int g_ndev = 1;
static _Thread_local int t_dev_id; /* the device of this thread's rank */

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static kite_ctx *ctx_for(int rank) {
  kite_ctx_params p = kite_ctx_params_default();
  t_dev_id = g_dev == kDLCPU ? 0 : rank % g_ndev;
  p.device = (DLDevice){g_dev, g_dev == kDLCPU ? 0 : rank % g_ndev};
  p.num_threads = 1;
  kite_ctx *ctx = NULL;
  if (kite_ctx_create(&p, &ctx) != KITE_OK) {
    printf("cannot create a ctx for rank %d: %s\n", rank, kite_last_error());
    return NULL;
  }
  return ctx;
}

/* A compact tensor of up to 2 dims over data (on the ctx's device). */
typedef struct tensor {
  DLTensor t;
  int64_t shape[2];
} tensor;

static DLTensor *view(tensor *v, void *data, kite_dtype dt, int ndim, int64_t d0, int64_t d1) {
  v->shape[0] = d0;
  v->shape[1] = d1;
  v->t = (DLTensor){data, {g_dev, t_dev_id}, ndim, kite_dtype_dlpack(dt), v->shape, NULL, 0};
  return &v->t;
}

/* The inputs: rank r's x element i, its residual element i, w element i (before rounding). */
static double x_value(int r, int64_t i) {
  return (double)((r * 7919 + i * 104729) % 2001 - 1000) / 1000.0 * (1.0 + 0.25 * r);
}
static double res_value(int r, int64_t i) {
  return (double)((r * 31 + i * 7333) % 1001 - 500) / 400.0;
}
static double w_value(int64_t i) {
  return 0.5 + (double)(i % 13) / 16.0;
}

/* v rounded to dtype t (through t's storage). */
static double rnd(kite_dtype t, double v) {
  uint32_t buf = 0;
  kite_store_f64(t, &buf, 0, v);
  return kite_load_f32(t, &buf, 0);
}

static double unit(kite_dtype t) {
  return t == KITE_DTYPE_F32 ? ldexp(1, -24) : t == KITE_DTYPE_F16 ? ldexp(1, -11) : ldexp(1, -8);
}

/* ---- one rank's run of every op ---------------------------------------------------------------*/

typedef struct group {
  int nranks;
  kite_dtype dt;
  kite_comm_id id;
  kite_comm **comms; /* from kite_comm_create_all, or NULL: each rank creates its own */
  kite_ctx **ctxs;
} group;

typedef struct rank_arg {
  group *g;
  int rank;
} rank_arg;

typedef struct dev_buf {
  kite_ctx *ctx;
  void *p;
  size_t bytes;
} dev_buf;

static void *dalloc(kite_ctx *ctx, size_t bytes) {
  void *p = NULL;
  if (kite_malloc(ctx, bytes ? bytes : 1, &p) != KITE_OK) return NULL;
  return p;
}

static void put(kite_ctx *ctx, void *dst, const void *src, size_t bytes) {
  if (bytes)
    CHECK(kite_memcpy(ctx, dst, src, bytes, KITE_COPY_HOST_TO_DEVICE) == KITE_OK, "copy in");
}
static void get(kite_ctx *ctx, void *dst, const void *src, size_t bytes) {
  if (bytes)
    CHECK(kite_memcpy(ctx, dst, src, bytes, KITE_COPY_DEVICE_TO_HOST) == KITE_OK, "copy out");
}

/* Host buffer of n elements of t, element i = f(i). */
static void *host_fill(kite_dtype t, int64_t n, int r, double (*f)(int, int64_t)) {
  void *h = calloc((size_t)(n ? n : 1), kite_dtype_size(t));
  for (int64_t i = 0; i < n; i++) kite_store_f64(t, h, i, f(r, i));
  return h;
}

static double w_of(int r, int64_t i) {
  (void)r;
  return w_value(i);
}

/* ref sums exactly and rounds once; a device library may round after each rank's addition. */
static bool close_sum(kite_dtype t, int n, double got, double exact, double mag) {
  if (g_dev == kDLCPU) return got == rnd(t, exact);
  return fabs(got - exact) <= (double)n * unit(t) * (mag + fabs(exact)) + 1e-30;
}

static void run_collectives(kite_ctx *ctx, kite_comm *comm, group *g, int r, int64_t rows,
                            int64_t cols, bool in_place) {
  const kite_dtype t = g->dt;
  const int n = g->nranks;
  const size_t es = kite_dtype_size(t);
  const int64_t cnt = rows * cols;
  const char *ip = in_place ? "in place" : "out of place";
  tensor tx, ty;

  /* all_reduce */
  {
    void *hx = host_fill(t, cnt, r, x_value), *hy = calloc((size_t)(cnt ? cnt : 1), es);
    void *dx = dalloc(ctx, (size_t)cnt * es), *dy = in_place ? dx : dalloc(ctx, (size_t)cnt * es);
    put(ctx, dx, hx, (size_t)cnt * es);
    kite_status s = kite_all_reduce(ctx, comm, view(&tx, dx, t, 2, rows, cols),
                                    view(&ty, dy, t, 2, rows, cols));
    CHECK(s == KITE_OK, "all_reduce %s rank %d/%d %lldx%lld %s", kite_dtype_name(t), r, n,
          (long long)rows, (long long)cols, ip);
    get(ctx, hy, dy, (size_t)cnt * es);
    int bad = 0;
    for (int64_t i = 0; i < cnt; i++) {
      double e = 0, mag = 0;
      for (int q = 0; q < n; q++) e += rnd(t, x_value(q, i)), mag += fabs(rnd(t, x_value(q, i)));
      double v = kite_load_f32(t, hy, i);
      if (!close_sum(t, n, v, e, mag) && bad++ < 3)
        CHECK(0, "all_reduce %s rank %d/%d %s: y[%lld] = %.9g, expected %.9g", kite_dtype_name(t),
              r, n, ip, (long long)i, v, e);
    }
    CHECK(bad == 0, "all_reduce %s rank %d/%d %s: %d wrong", kite_dtype_name(t), r, n, ip, bad);
    kite_free(ctx, dx);
    if (!in_place) kite_free(ctx, dy);
    free(hx);
    free(hy);
  }
  /* all_gather: x[rows, cols] -> y[n rows, cols] (NCCL's alone: not under --quick) */
  if (!g_quick) {
    const int64_t big = cnt * n;
    void *hx = host_fill(t, cnt, r, x_value), *hy = calloc((size_t)(big ? big : 1), es);
    void *dy = dalloc(ctx, (size_t)big * es);
    void *dx = in_place ? (char *)dy + (size_t)(r * cnt) * es : dalloc(ctx, (size_t)cnt * es);
    put(ctx, dx, hx, (size_t)cnt * es);
    kite_status s = kite_all_gather(ctx, comm, view(&tx, dx, t, 2, rows, cols),
                                    view(&ty, dy, t, 2, rows * n, cols));
    CHECK(s == KITE_OK, "all_gather %s rank %d/%d %s", kite_dtype_name(t), r, n, ip);
    get(ctx, hy, dy, (size_t)big * es);
    int bad = 0;
    for (int q = 0; q < n; q++)
      for (int64_t i = 0; i < cnt; i++)
        bad += kite_load_f32(t, hy, q * cnt + i) != rnd(t, x_value(q, i));
    CHECK(bad == 0, "all_gather %s rank %d/%d %s: %d wrong", kite_dtype_name(t), r, n, ip, bad);
    kite_free(ctx, dy);
    if (!in_place) kite_free(ctx, dx);
    free(hx);
    free(hy);
  }
  /* reduce_scatter: x[n rows, cols] -> y[rows, cols] (likewise) */
  if (!g_quick) {
    const int64_t big = cnt * n;
    void *hx = host_fill(t, big, r, x_value), *hy = calloc((size_t)(cnt ? cnt : 1), es);
    void *dx = dalloc(ctx, (size_t)big * es);
    void *dy = in_place ? (char *)dx + (size_t)(r * cnt) * es : dalloc(ctx, (size_t)cnt * es);
    put(ctx, dx, hx, (size_t)big * es);
    kite_status s = kite_reduce_scatter(ctx, comm, view(&tx, dx, t, 2, rows * n, cols),
                                        view(&ty, dy, t, 2, rows, cols));
    CHECK(s == KITE_OK, "reduce_scatter %s rank %d/%d %s", kite_dtype_name(t), r, n, ip);
    get(ctx, hy, dy, (size_t)cnt * es);
    int bad = 0;
    for (int64_t i = 0; i < cnt; i++) {
      double e = 0, mag = 0;
      for (int q = 0; q < n; q++) {
        double v = rnd(t, x_value(q, r * cnt + i));
        e += v;
        mag += fabs(v);
      }
      double v = kite_load_f32(t, hy, i);
      if (!close_sum(t, n, v, e, mag) && bad++ < 3)
        CHECK(0, "reduce_scatter %s rank %d/%d %s: y[%lld] = %.9g, expected %.9g",
              kite_dtype_name(t), r, n, ip, (long long)i, v, e);
    }
    CHECK(bad == 0, "reduce_scatter %s rank %d/%d %s: %d wrong", kite_dtype_name(t), r, n, ip, bad);
    kite_free(ctx, dx);
    if (!in_place) kite_free(ctx, dy);
    free(hx);
    free(hy);
  }
  /* all_reduce_add_rms_norm, PRE and POST; in place: y is x */
  for (int pos = KITE_NORM_PRE; pos <= KITE_NORM_POST; pos++) {
    const float eps = 1e-5f, offset = pos == KITE_NORM_PRE ? 0.0f : 1.0f;
    void *hx = host_fill(t, cnt, r, x_value), *hres = host_fill(t, cnt, r, res_value);
    void *hw = host_fill(t, cols, r, w_of), *hy = calloc((size_t)(cnt ? cnt : 1), es);
    void *hr2 = calloc((size_t)(cnt ? cnt : 1), es);
    void *dx = dalloc(ctx, (size_t)cnt * es), *dres = dalloc(ctx, (size_t)cnt * es);
    void *dw = dalloc(ctx, (size_t)cols * es), *dy = in_place ? dx : dalloc(ctx, (size_t)cnt * es);
    put(ctx, dx, hx, (size_t)cnt * es);
    put(ctx, dres, hres, (size_t)cnt * es);
    put(ctx, dw, hw, (size_t)cols * es);
    tensor tres, tw;
    kite_status s = kite_all_reduce_add_rms_norm(
        ctx, comm, view(&tx, dx, t, 2, rows, cols), view(&tres, dres, t, 2, rows, cols),
        view(&tw, dw, t, 1, cols, 0), eps, offset, (kite_norm_pos)pos,
        view(&ty, dy, t, 2, rows, cols));
    CHECK(s == KITE_OK, "all_reduce_add_rms_norm %s rank %d/%d pos %d %s", kite_dtype_name(t), r, n,
          pos, ip);
    get(ctx, hy, dy, (size_t)cnt * es);
    get(ctx, hr2, dres, (size_t)cnt * es);
    const double tol = (g_dev == kDLCPU ? 2.0 : 2.0 * n + 4.0) * unit(t) + 2e-6;
    int bad = 0;
    double *sv = malloc((size_t)(cols ? cols : 1) * sizeof *sv);
    for (int64_t row = 0; row < rows; row++) {
      double ss = 0;
      for (int64_t c = 0; c < cols; c++) {
        const int64_t i = row * cols + c;
        double a = 0;
        for (int q = 0; q < n; q++) a += rnd(t, x_value(q, i));
        a = rnd(t, a); /* what all_reduce returns */
        double sum = a + rnd(t, res_value(r, i));
        sv[c] = pos == KITE_NORM_PRE ? rnd(t, sum) : sum;
        ss += sv[c] * sv[c];
      }
      const double rstd = 1.0 / sqrt(ss / (double)cols + (double)eps);
      for (int64_t c = 0; c < cols; c++) {
        const int64_t i = row * cols + c;
        const double ey = sv[c] * rstd * ((double)offset + rnd(t, w_value(c)));
        const double er = pos == KITE_NORM_PRE ? sv[c] : ey;
        const double gy = kite_load_f32(t, hy, i), gr = kite_load_f32(t, hr2, i);
        bool ok = fabs(gy - ey) <= tol * (fabs(ey) + 1.0) &&
                  fabs(gr - er) <= tol * (fabs(er) + 1.0) * (pos == KITE_NORM_PRE ? n : 1);
        if (!ok && bad++ < 3)
          CHECK(0,
                "all_reduce_add_rms_norm %s rank %d/%d pos %d %s [%lld]: y %.7g (want %.7g), "
                "residual %.7g (want %.7g)",
                kite_dtype_name(t), r, n, pos, ip, (long long)i, gy, ey, gr, er);
      }
    }
    CHECK(bad == 0, "all_reduce_add_rms_norm %s rank %d/%d pos %d %s: %d wrong", kite_dtype_name(t),
          r, n, pos, ip, bad);
    free(sv);
    kite_free(ctx, dx);
    kite_free(ctx, dres);
    kite_free(ctx, dw);
    if (!in_place) kite_free(ctx, dy);
    free(hx);
    free(hres);
    free(hw);
    free(hy);
    free(hr2);
  }
}

static void *rank_main(void *p) {
  rank_arg *ra = p;
  group *g = ra->g;
  const int r = ra->rank;
  t_dev_id = g_dev == kDLCPU ? 0 : r % g_ndev;
  kite_ctx *ctx = g->ctxs ? g->ctxs[r] : ctx_for(r);
  kite_comm *comm = NULL;
  if (!ctx) {
    CHECK(0, "rank %d has no ctx", r);
    return NULL;
  }
  if (g->comms) {
    comm = g->comms[r];
  } else {
    kite_status s = kite_comm_create(ctx, &g->id, g->nranks, r, &comm);
    CHECK(s == KITE_OK && comm, "comm_create rank %d of %d", r, g->nranks);
    if (!comm) {
      kite_ctx_destroy(ctx);
      return NULL;
    }
  }
  int nr = -1, rk = -1;
  CHECK(kite_comm_info(comm, &nr, &rk) == KITE_OK && nr == g->nranks && rk == r, "comm_info");
  /* the last shape (devices only): the two-shot's segments end inside a pack; over 1 MB in f32 */
  static const int64_t shapes[][2] = {{1, 1}, {3, 5}, {17, 64}, {4, 1000}, {0, 8}, {37, 8209}};
  /* on a device with several ranks, all_reduce's kernels in turn: kite's choice (the peer
   * kernels at these sizes), cuda.twoshot, cuda.nccl (not under --quick) */
  static const char *const configs[] = {"", "all_reduce=cuda.twoshot",
                                        "all_reduce=cuda.nccl,all_reduce_add_rms_norm=cuda.nccl"};
  const int nconfigs = g_dev == kDLCPU || g->nranks == 1 ? 1 : g_quick ? 2 : 3;
  for (int c = 0; c < nconfigs; c++) {
    CHECK(kite_config_set_thread(configs[c]) == KITE_OK, "config %s", configs[c]);
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0] - (g_dev == kDLCPU || g_quick); i++)
      for (int ip = 0; ip < 2; ip++)
        run_collectives(ctx, comm, g, r, shapes[i][0], shapes[i][1], ip);
  }
  kite_config_set_thread(NULL);
  CHECK(kite_ctx_synchronize(ctx) == KITE_OK, "synchronize rank %d", r);
  kite_comm_destroy(comm);
  if (!g->ctxs) kite_ctx_destroy(ctx);
  return NULL;
}

/* Every op on nranks threads, with comms made per rank (create) or all at once (create_all). */
static void run_group(int nranks, kite_dtype dt, bool all) {
  group g = {.nranks = nranks, .dt = dt};
  kite_ctx *ctxs[MAX_RANKS] = {0};
  kite_comm *comms[MAX_RANKS] = {0};
  if (all) {
    for (int r = 0; r < nranks; r++)
      if (!(ctxs[r] = ctx_for(r))) return;
    kite_status s = kite_comm_create_all(ctxs, nranks, comms);
    CHECK(s == KITE_OK, "comm_create_all %d ranks", nranks);
    if (s != KITE_OK) return;
    g.ctxs = ctxs;
    g.comms = comms;
  } else {
    kite_ctx *ctx = ctx_for(0);
    if (!ctx) return;
    CHECK(kite_comm_get_unique_id(ctx, &g.id) == KITE_OK, "get_unique_id");
    kite_ctx_destroy(ctx);
  }
  pthread_t th[MAX_RANKS];
  rank_arg ra[MAX_RANKS];
  for (int r = 0; r < nranks; r++) {
    ra[r] = (rank_arg){&g, r};
    pthread_create(&th[r], NULL, rank_main, &ra[r]);
  }
  for (int r = 0; r < nranks; r++) pthread_join(th[r], NULL);
  for (int r = 0; all && r < nranks; r++) kite_ctx_destroy(ctxs[r]);
  printf("%d rank%s, %s, %s: %d passed, %d failed so far\n", nranks, nranks == 1 ? "" : "s",
         kite_dtype_name(dt), all ? "comm_create_all" : "comm_create", atomic_load(&g_pass),
         atomic_load(&g_fail));
  fflush(stdout);
}

/* ---- bad inputs (CPU) ---------------------------------------------------------------------- */

static void expect_error(kite_status s, const char *op, const char *what) {
  const char *m = kite_last_error();
  CHECK(s != KITE_OK && m[0] && (!op || strstr(m, op)), "%s: %s returned %s, message '%s'",
        op ? op : "", what, kite_status_name(s), m);
}

static void bad_single(void) {
  kite_ctx *ctx = ctx_for(0);
  kite_comm_id id;
  kite_comm *c = NULL, *c2 = NULL;
  CHECK(kite_comm_get_unique_id(ctx, &id) == KITE_OK, "get_unique_id");
  expect_error(kite_comm_get_unique_id(NULL, &id), "kite_comm_get_unique_id", "NULL ctx");
  expect_error(kite_comm_get_unique_id(ctx, NULL), "kite_comm_get_unique_id", "NULL id");
  expect_error(kite_comm_create(ctx, &id, 1, 0, NULL), "kite_comm_create", "NULL out");
  expect_error(kite_comm_create(NULL, &id, 1, 0, &c), "kite_comm_create", "NULL ctx");
  expect_error(kite_comm_create(ctx, NULL, 1, 0, &c), "kite_comm_create", "NULL id");
  expect_error(kite_comm_create(ctx, &id, 0, 0, &c), "kite_comm_create", "nranks 0");
  expect_error(kite_comm_create(ctx, &id, 2, 2, &c), "kite_comm_create", "rank == nranks");
  expect_error(kite_comm_create(ctx, &id, 2, -1, &c), "kite_comm_create", "rank -1");
  CHECK(c == NULL, "out stays NULL on error");
  CHECK(kite_comm_create(ctx, &id, 2, 0, &c) == KITE_OK, "create rank 0 of 2");
  expect_error(kite_comm_create(ctx, &id, 2, 0, &c2), "kite_comm_create", "rank 0 twice");
  expect_error(kite_comm_create(ctx, &id, 3, 1, &c2), "kite_comm_create", "other nranks");
  kite_comm_destroy(c);
  expect_error(kite_comm_create_all(NULL, 1, &c), "kite_comm_create_all", "NULL ctxs");
  expect_error(kite_comm_create_all(&ctx, 0, &c), "kite_comm_create_all", "nranks 0");
  expect_error(kite_comm_info(NULL, &(int){0}, &(int){0}), "kite_comm_info", "NULL comm");
  kite_comm_destroy(NULL);

  /* one rank: every check is local */
  CHECK(kite_comm_create_all(&ctx, 1, &c) == KITE_OK, "create_all of 1");
  float a[32] = {0}, b[32] = {0};
  int32_t ia[8] = {0};
  uint16_t h[8] = {0};
  tensor tx, ty, tr, tw;
  DLTensor *x8 = view(&tx, a, KITE_DTYPE_F32, 1, 8, 0);
  DLTensor *y8 = view(&ty, b, KITE_DTYPE_F32, 1, 8, 0);
  CHECK(kite_all_reduce(ctx, c, x8, y8) == KITE_OK, "valid all_reduce of 1 rank");
  expect_error(kite_all_reduce(NULL, c, x8, y8), "all_reduce", "NULL ctx");
  expect_error(kite_all_reduce(ctx, NULL, x8, y8), "all_reduce", "NULL comm");
  expect_error(kite_all_reduce(ctx, c, NULL, y8), "all_reduce", "NULL x");
  expect_error(kite_all_reduce(ctx, c, x8, NULL), "all_reduce", "NULL y");
  tensor ti;
  expect_error(kite_all_reduce(ctx, c, view(&ti, ia, KITE_DTYPE_I32, 1, 8, 0), y8), "all_reduce",
               "int32 x");
  tensor th;
  expect_error(kite_all_reduce(ctx, c, x8, view(&th, h, KITE_DTYPE_F16, 1, 8, 0)), "all_reduce",
               "f16 y for f32 x");
  expect_error(kite_all_reduce(ctx, c, x8, view(&ty, b, KITE_DTYPE_F32, 1, 7, 0)), "all_reduce",
               "y shorter");
  expect_error(kite_all_reduce(ctx, c, x8, view(&ty, a + 1, KITE_DTYPE_F32, 1, 8, 0)), "all_reduce",
               "y overlapping x by 7");
  int64_t st[1] = {2};
  tensor ts;
  DLTensor *strided = view(&ts, a, KITE_DTYPE_F32, 1, 8, 0);
  strided->strides = st;
  expect_error(kite_all_reduce(ctx, c, strided, view(&ty, b, KITE_DTYPE_F32, 1, 8, 0)),
               "all_reduce", "strided x");
  expect_error(kite_all_gather(ctx, c, view(&tx, a, KITE_DTYPE_F32, 1, 8, 0),
                               view(&ty, b, KITE_DTYPE_F32, 1, 16, 0)),
               "all_gather", "y of 16 for 1 rank of 8");
  expect_error(kite_reduce_scatter(ctx, c, view(&tx, a, KITE_DTYPE_F32, 1, 8, 0),
                                   view(&ty, b, KITE_DTYPE_F32, 1, 4, 0)),
               "reduce_scatter", "y of 4 from x of 8 on 1 rank");
  expect_error(kite_all_gather(ctx, c, view(&tx, a, KITE_DTYPE_F32, 2, 2, 4),
                               view(&ty, b, KITE_DTYPE_F32, 2, 2, 3)),
               "all_gather", "y's second dim differs");
  /* fused */
  DLTensor *x24 = view(&tx, a, KITE_DTYPE_F32, 2, 2, 4);
  DLTensor *r24 = view(&tr, a + 8, KITE_DTYPE_F32, 2, 2, 4);
  DLTensor *y24 = view(&ty, b, KITE_DTYPE_F32, 2, 2, 4);
  DLTensor *w4 = view(&tw, a + 16, KITE_DTYPE_F32, 1, 4, 0);
  CHECK(kite_all_reduce_add_rms_norm(ctx, c, x24, r24, w4, 1e-6f, 0.0f, KITE_NORM_PRE, y24) ==
            KITE_OK,
        "valid all_reduce_add_rms_norm of 1 rank");
  expect_error(kite_all_reduce_add_rms_norm(ctx, c, x24, NULL, w4, 1e-6f, 0.0f, KITE_NORM_PRE, y24),
               "all_reduce_add_rms_norm", "NULL residual");
  expect_error(
      kite_all_reduce_add_rms_norm(ctx, NULL, x24, r24, w4, 1e-6f, 0.0f, KITE_NORM_PRE, y24),
      "all_reduce_add_rms_norm", "NULL comm");
  expect_error(kite_all_reduce_add_rms_norm(ctx, c, x24, r24, w4, -1.0f, 0.0f, KITE_NORM_PRE, y24),
               "all_reduce_add_rms_norm", "negative eps");
  expect_error(kite_all_reduce_add_rms_norm(ctx, c, x24, r24,
                                            view(&tw, a + 16, KITE_DTYPE_F32, 1, 3, 0), 1e-6f, 0.0f,
                                            KITE_NORM_PRE, y24),
               "all_reduce_add_rms_norm", "w of 3 for rows of 4");
  expect_error(
      kite_all_reduce_add_rms_norm(ctx, c, x24, r24, w4, 1e-6f, 0.0f, (kite_norm_pos)7, y24),
      "all_reduce_add_rms_norm", "bad pos");
  expect_error(kite_all_reduce_add_rms_norm(ctx, c, x24, view(&tr, a + 2, KITE_DTYPE_F32, 2, 2, 4),
                                            w4, 1e-6f, 0.0f, KITE_NORM_PRE, y24),
               "all_reduce_add_rms_norm", "residual overlapping x");
  int64_t st2[2] = {8, 1};
  DLTensor *xs = view(&ts, a, KITE_DTYPE_F32, 2, 2, 4);
  xs->strides = st2;
  expect_error(kite_all_reduce_add_rms_norm(ctx, c, xs, view(&tr, a + 20, KITE_DTYPE_F32, 2, 2, 4),
                                            NULL, 1e-6f, 0.0f, KITE_NORM_PRE, y24),
               "all_reduce_add_rms_norm", "row-strided x");
  kite_comm_destroy(c);
  kite_ctx_destroy(ctx);
}

/* Two ranks that misbehave in turn. */
typedef struct pair {
  kite_comm *comm[2];
  kite_ctx *ctx[2];
  int mode;
  kite_status got[2][3];
  char msg[2][3][256];
  double waited[2];
  atomic_int rank0_done; /* rank 0's first call returned */
} pair;

enum { DISAGREE_COUNT, DISAGREE_OP, LOCAL_FAILURE, DESTROYED };

static void *pair_rank(void *p) {
  pair *pr = ((void **)p)[0];
  const int r = (int)(intptr_t)((void **)p)[1];
  kite_ctx *ctx = pr->ctx[r];
  t_dev_id = 0;
  float x[16] = {1, 2, 3}, y[16];
  tensor tx, ty;
  const int n8 = 8, n16 = 16;
  for (int step = 0; step < 3; step++) {
    kite_status s = KITE_OK;
    double t0 = now();
    switch (pr->mode) {
    case DISAGREE_COUNT: /* then a valid call */
      s = kite_all_reduce(ctx, pr->comm[r],
                          view(&tx, x, KITE_DTYPE_F32, 1, step || !r ? n8 : n16, 0),
                          view(&ty, y, KITE_DTYPE_F32, 1, step || !r ? n8 : n16, 0));
      break;
    case DISAGREE_OP:
      if (step == 0 && r == 1)
        s = kite_all_gather(ctx, pr->comm[r], view(&tx, x, KITE_DTYPE_F32, 1, 4, 0),
                            view(&ty, y, KITE_DTYPE_F32, 1, 8, 0));
      else
        s = kite_all_reduce(ctx, pr->comm[r], view(&tx, x, KITE_DTYPE_F32, 1, 4, 0),
                            view(&ty, y, KITE_DTYPE_F32, 1, 4, 0));
      break;
    case LOCAL_FAILURE: /* rank 1's first call fails its own checks */
      s = kite_all_reduce(ctx, pr->comm[r],
                          step == 0 && r == 1 ? NULL : view(&tx, x, KITE_DTYPE_F32, 1, 8, 0),
                          view(&ty, y, KITE_DTYPE_F32, 1, 8, 0));
      break;
    case DESTROYED: /* rank 1 leaves */
      if (r == 1) {
        kite_comm_destroy(pr->comm[1]);
        pr->comm[1] = NULL;
        return NULL;
      }
      s = kite_all_reduce(ctx, pr->comm[r], view(&tx, x, KITE_DTYPE_F32, 1, 8, 0),
                          view(&ty, y, KITE_DTYPE_F32, 1, 8, 0));
      break;
    }
    if (step == 0) pr->waited[r] = now() - t0;
    pr->got[r][step] = s;
    snprintf(pr->msg[r][step], sizeof pr->msg[r][step], "%s", kite_last_error());
    if (step == 0 && r == 0) atomic_store(&pr->rank0_done, 1);
    /* a rank that failed its own checks and calls again would pair with the others' pending
     * collective (the caller's error, as with NCCL): here it stays away until they gave up */
    if (step == 0 && r == 1 && pr->mode == LOCAL_FAILURE)
      while (!atomic_load(&pr->rank0_done)) nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
  return NULL;
}

static void run_pair(int mode, pair *pr) {
  memset(pr, 0, sizeof *pr);
  pr->mode = mode;
  for (int r = 0; r < 2; r++) pr->ctx[r] = ctx_for(r);
  CHECK(kite_comm_create_all(pr->ctx, 2, pr->comm) == KITE_OK, "create_all of 2");
  pthread_t th[2];
  void *args[2][2] = {{pr, (void *)(intptr_t)0}, {pr, (void *)(intptr_t)1}};
  for (int r = 0; r < 2; r++) pthread_create(&th[r], NULL, pair_rank, args[r]);
  for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < 2; r++) {
    kite_comm_destroy(pr->comm[r]);
    kite_ctx_destroy(pr->ctx[r]);
  }
}

static void bad_pairs(void) {
  pair pr;
  run_pair(DISAGREE_COUNT, &pr);
  for (int r = 0; r < 2; r++) {
    CHECK(pr.got[r][0] == KITE_ERR_INVALID_ARG && strstr(pr.msg[r][0], "disagree"),
          "counts 8 and 16: rank %d got %s '%s'", r, kite_status_name(pr.got[r][0]), pr.msg[r][0]);
    CHECK(pr.got[r][1] == KITE_OK && pr.got[r][2] == KITE_OK,
          "the group stays usable after a disagreement (rank %d: %s)", r, pr.msg[r][1]);
  }
  run_pair(DISAGREE_OP, &pr);
  for (int r = 0; r < 2; r++)
    CHECK(pr.got[r][0] == KITE_ERR_INVALID_ARG && strstr(pr.msg[r][0], "all_gather"),
          "all_reduce against all_gather: rank %d got %s '%s'", r, kite_status_name(pr.got[r][0]),
          pr.msg[r][0]);

  /* the timeout is read when a group is created; no other thread runs now */
  setenv("KITE_COMM_TIMEOUT", "1", 1);
  run_pair(LOCAL_FAILURE, &pr);
  CHECK(pr.got[1][0] == KITE_ERR_INVALID_ARG && pr.waited[1] < 0.5,
        "rank 1's bad call fails at once (%s after %.2f s)", kite_status_name(pr.got[1][0]),
        pr.waited[1]);
  CHECK(pr.got[0][0] == KITE_ERR_DEVICE && strstr(pr.msg[0][0], "waited") && pr.waited[0] < 30,
        "rank 0 stops waiting for rank 1: %s '%s' after %.2f s", kite_status_name(pr.got[0][0]),
        pr.msg[0][0], pr.waited[0]);
  for (int r = 0; r < 2; r++)
    CHECK(pr.got[r][1] == KITE_ERR_DEVICE && strstr(pr.msg[r][1], "broken"),
          "later calls of rank %d fail: %s '%s'", r, kite_status_name(pr.got[r][1]), pr.msg[r][1]);
  unsetenv("KITE_COMM_TIMEOUT");
  run_pair(DESTROYED, &pr);
  CHECK(pr.got[0][0] == KITE_ERR_DEVICE && strstr(pr.msg[0][0], "destroyed") && pr.waited[0] < 30,
        "a rank waiting for a destroyed one fails: %s '%s'", kite_status_name(pr.got[0][0]),
        pr.msg[0][0]);
}

int main(int argc, char **argv) {
  int ranks = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--device") && i + 1 < argc) {
      const char *d = argv[++i];
      g_dev = !strcmp(d, "cuda") ? kDLCUDA : kDLCPU;
    } else if (!strcmp(argv[i], "--ranks") && i + 1 < argc) {
      ranks = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--quick")) {
      g_quick = true;
    } else {
      fprintf(stderr, "usage: test_comm [--device cpu|cuda] [--ranks N] [--quick]\n");
      return 2;
    }
  }
  if (ranks < 0 || ranks > MAX_RANKS) {
    fprintf(stderr, "test_comm: --ranks must be in [1, %d]\n", MAX_RANKS);
    return 2;
  }
  if (g_dev != kDLCPU) {
    g_ndev = 0;
    for (size_t i = 0; i < kite_backend_count(); i++) {
      kite_backend_info bi;
      if (kite_backend_get(i, &bi) == KITE_OK && bi.device_type == g_dev &&
          bi.device_count > g_ndev)
        g_ndev = bi.device_count;
    }
    if (g_ndev == 0) {
      printf("test_comm: no %s device: skipped\n", kite_device_name(g_dev));
      return 77;
    }
    kite_ctx *ctx = ctx_for(0);
    kite_comm_id id;
    kite_status s = ctx ? kite_comm_get_unique_id(ctx, &id) : KITE_ERR_DEVICE;
    kite_ctx_destroy(ctx);
    if (s != KITE_OK) {
      printf("test_comm: no communicators on %s: %s: skipped\n", kite_device_name(g_dev),
             kite_last_error());
      return 77;
    }
    if (ranks == 0) ranks = g_ndev;
    if (ranks > g_ndev) {
      printf("test_comm: %d ranks asked, %d devices: one rank per device\n", ranks, g_ndev);
      return 2;
    }
  }
  static const kite_dtype dts[] = {KITE_DTYPE_F32, KITE_DTYPE_F16, KITE_DTYPE_BF16};
  int sizes[3] = {1, 2, 4}, nsizes = 3;
  if (g_dev != kDLCPU) {
    sizes[1] = ranks;
    nsizes = ranks > 1 ? 2 : 1;
  } else if (ranks > 0) {
    sizes[0] = ranks;
    nsizes = 1;
  }
  for (int i = 0; i < nsizes; i++)
    for (size_t d = g_quick ? 1 : 0; d < (g_quick ? 2u : 3u); d++)
      run_group(sizes[i], dts[d], d == 1);
  if (g_dev == kDLCPU) {
    bad_single();
    bad_pairs();
  }
  return check_summary();
}
