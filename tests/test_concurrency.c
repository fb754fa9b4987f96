/*
 * Threads at once: workers call ops on their own ctxs and compare every result with outputs
 * computed before the threads started; one thread keeps changing the config, one keeps loading
 * plugins (one of which registers and then fails, so its registration is rolled back each time),
 * two keep reading the registry through kite_kernel_get / kite_backend_get. Run plainly in the
 * suite and under ThreadSanitizer by scripts/tsan.sh. KITE_TEST_PLUGIN_DIR is the folder of the
 * test plugins.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kite/kite.h"
#include "check.h"

#define WORKERS 4
#define ROWS 4
#define COLS 64
#define N (ROWS * COLS)

static float g_x[N], g_w[COLS];
static float g_want[3][N]; /* silu, rms_norm, softmax */
static atomic_int g_done, g_failures;
static atomic_long g_rounds[3]; /* config sets, plugin loads, registry scans */
static int g_iters = 3000;
static const char *g_dir;

typedef struct work {
  kite_ctx *ctx;
  float y[N];
  char first_error[512];
} work;

static kite_status run_op(kite_ctx *ctx, int op, float *y) {
  int64_t shape[2] = {ROWS, COLS}, wshape[1] = {COLS};
  DLTensor x = {g_x, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, shape, NULL, 0};
  DLTensor w = {g_w, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, wshape, NULL, 0};
  DLTensor ty = {y, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, shape, NULL, 0};
  switch (op) {
  case 0:
    return kite_silu(ctx, &x, &ty);
  case 1:
    return kite_rms_norm(ctx, &x, &w, 1e-6f, 0.0f, &ty);
  default:
    return kite_softmax(ctx, &x, 1.0f, &ty);
  }
}

/* Every kernel the config may select agrees with the reference to f32 rounding. */
static int close_to(const float *got, const float *want) {
  for (int i = 0; i < N; i++)
    if (!(fabsf(got[i] - want[i]) <= 1e-5f + 1e-4f * fabsf(want[i]))) return 0;
  return 1;
}

static void *worker(void *arg) {
  work *w = arg;
  for (int it = 0; it < g_iters; it++) {
    int op = it % 3;
    memset(w->y, 0xff, sizeof w->y);
    kite_status s = run_op(w->ctx, op, w->y);
    if (s != KITE_OK || !close_to(w->y, g_want[op])) {
      if (atomic_fetch_add(&g_failures, 1) == 0)
        snprintf(w->first_error, sizeof w->first_error, "op %d iteration %d: %s %s", op, it,
                 kite_status_name(s), s ? kite_last_error() : "(wrong values)");
    }
  }
  return NULL;
}

static void *configurer(void *arg) {
  /* every config leaves a correct kernel for each op (ref is never disabled) */
  static const char *const cfgs[] = {"",
                                     "silu=ref",
                                     "-cpu",
                                     "rms_norm=ref,softmax=ref",
                                     "-testvendor2,-badstatus",
                                     "-rms_norm:testvendor2,reset",
                                     "silu=ref.generic,-failreg"};
  long i = 0, *bad = arg;
  while (!atomic_load(&g_done))
    if (kite_config_set(cfgs[i++ % (sizeof cfgs / sizeof cfgs[0])]) != KITE_OK) (*bad)++;
  atomic_store(&g_rounds[0], i);
  return NULL;
}

static void *loader(void *arg) {
  static const char *const names[] = {"plugins-explicit/libkite-testvendor2.so",
                                      "plugins-faulty/libkite-failreg.so",
                                      "plugins-faulty/libkite-badstatus.so"};
  long i = 0, *bad = arg;
  while (!atomic_load(&g_done)) {
    char path[4096];
    int which = (int)(i++ % 3);
    snprintf(path, sizeof path, "%s/%s", g_dir, names[which]);
    kite_status s = kite_backend_load(path);
    if ((which == 1) != (s != KITE_OK)) (*bad)++; /* only failreg fails */
  }
  atomic_store(&g_rounds[1], i);
  return NULL;
}

static void *inspector(void *arg) {
  long *bad = arg, rounds = 0;
  for (; !atomic_load(&g_done); rounds++) {
    size_t n = kite_kernel_count();
    for (size_t i = 0; i < n; i++) {
      kite_kernel_info k;
      if (kite_kernel_get(i, &k) != KITE_OK) continue; /* a rollback may shrink the list */
      int ok = k.runs_here
                   ? k.why_not[0] == '\0'
                   : strncmp(k.why_not, "no ", 3) == 0 || strncmp(k.why_not, "needs ", 6) == 0 ||
                         strncmp(k.why_not, "disabled by config", 18) == 0;
      if (!ok || !k.backend || !k.variant || !k.plugin) (*bad)++;
    }
    for (size_t i = 0; i < kite_backend_count(); i++) {
      kite_backend_info b;
      if (kite_backend_get(i, &b) == KITE_OK && (!b.name || !b.path)) (*bad)++;
    }
  }
  atomic_fetch_add(&g_rounds[2], rounds);
  return NULL;
}

int main(void) {
  g_dir = getenv("KITE_TEST_PLUGIN_DIR");
  if (!g_dir) {
    printf("KITE_TEST_PLUGIN_DIR is not set (run through ctest)\n");
    return 1;
  }
  if (getenv("KITE_TEST_ITERS")) g_iters = atoi(getenv("KITE_TEST_ITERS"));
  for (int i = 0; i < N; i++) g_x[i] = (float)((i * 37) % 29) / 7.0f - 2.0f;
  for (int i = 0; i < COLS; i++) g_w[i] = 0.5f + (float)(i % 5) / 4.0f;

  /* the reference outputs, before any other thread exists */
  kite_ctx *ref = NULL;
  CHECK(kite_ctx_create(NULL, &ref) == KITE_OK, "ctx\n");
  CHECK(kite_config_set("silu=ref,rms_norm=ref,softmax=ref") == KITE_OK, "pin ref\n");
  for (int op = 0; op < 3; op++) CHECK(run_op(ref, op, g_want[op]) == KITE_OK, "ref op %d\n", op);
  CHECK(kite_config_set(NULL) == KITE_OK, "reset\n");
  kite_ctx_destroy(ref);

  work w[WORKERS];
  pthread_t tw[WORKERS], tc, tl, ti[2];
  long bad_cfg = 0, bad_load = 0, bad_info[2] = {0, 0};
  for (int i = 0; i < WORKERS; i++) {
    memset(&w[i], 0, sizeof w[i]);
    kite_ctx_params p = kite_ctx_params_default();
    p.num_threads = 2;
    CHECK(kite_ctx_create(&p, &w[i].ctx) == KITE_OK, "worker ctx\n");
  }
  pthread_create(&tc, NULL, configurer, &bad_cfg);
  pthread_create(&tl, NULL, loader, &bad_load);
  for (int i = 0; i < 2; i++) pthread_create(&ti[i], NULL, inspector, &bad_info[i]);
  for (int i = 0; i < WORKERS; i++) pthread_create(&tw[i], NULL, worker, &w[i]);
  for (int i = 0; i < WORKERS; i++) pthread_join(tw[i], NULL);
  atomic_store(&g_done, 1);
  pthread_join(tc, NULL);
  pthread_join(tl, NULL);
  for (int i = 0; i < 2; i++) pthread_join(ti[i], NULL);

  printf("%d op calls on %d threads beside %ld config sets, %ld plugin loads, %ld registry scans\n",
         WORKERS * g_iters, WORKERS, atomic_load(&g_rounds[0]), atomic_load(&g_rounds[1]),
         atomic_load(&g_rounds[2]));
  CHECK(atomic_load(&g_failures) == 0, "%d op calls failed or gave wrong values\n",
        atomic_load(&g_failures));
  for (int i = 0; i < WORKERS; i++)
    if (w[i].first_error[0]) printf("worker %d: %s\n", i, w[i].first_error);
  CHECK(bad_cfg == 0, "%ld config sets failed\n", bad_cfg);
  CHECK(bad_load == 0, "%ld plugin loads gave an unexpected status\n", bad_load);
  CHECK(bad_info[0] + bad_info[1] == 0, "%ld introspection results were inconsistent\n",
        bad_info[0] + bad_info[1]);
  for (int i = 0; i < WORKERS; i++) kite_ctx_destroy(w[i].ctx);
  return check_summary();
}
