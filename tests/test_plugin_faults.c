/*
 * Plugins that misbehave (tests/plugins/faulty.c): an init that calls back into kite, auto-loaded
 * and loaded explicitly (must work, never hang: the test also has a ctest timeout and an alarm);
 * an init that registers then fails (rolled back); duplicate (op, variant) entries (refused);
 * kernels returning a status outside kite_status or no message (normalized by dispatch); the
 * plugin file of each kernel in kite_kernel_get. Runs with KITE_BACKEND_PATH holding the
 * re-entrant plugin; KITE_TEST_PLUGIN_DIR is the folder of the others.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kite/backend.h"
#include "check.h"
#include "registry_util.h"

static const char *g_dir;

static void plugin_path(char *buf, size_t n, const char *name) {
  snprintf(buf, n, "%s/plugins-faulty/libkite-%s.so", g_dir, name);
}

/* What a re-entrant init recorded (dlsym on the already loaded library). */
static void check_reentered(const char *path, const char *what) {
  void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  CHECK(h != NULL, "%s: %s is loaded\n", what, path);
  if (!h) return;
  int *ran = dlsym(h, "faulty_init_ran");
  size_t *seen = dlsym(h, "faulty_kernels_seen");
  kite_status *cfg = dlsym(h, "faulty_config_status"), *ctx = dlsym(h, "faulty_ctx_status");
  kite_status *op = dlsym(h, "faulty_op_status"), *load = dlsym(h, "faulty_load_status");
  const char *msg = dlsym(h, "faulty_load_message");
  CHECK(ran && *ran, "%s: init ran\n", what);
  CHECK(seen && *seen > 0, "%s: kite_kernel_count from init sees the built-in kernels\n", what);
  CHECK(cfg && *cfg == KITE_OK, "%s: kite_config_set from init works\n", what);
  CHECK(ctx && *ctx == KITE_OK, "%s: kite_ctx_create from init works\n", what);
  CHECK(op && *op == KITE_OK, "%s: an op called from init runs\n", what);
  CHECK(load && *load == KITE_ERR_PLUGIN, "%s: kite_backend_load from init is refused\n", what);
  CHECK(msg && strstr(msg, "libkite-nested.so") && strstr(msg, "libkite-reenter") &&
            strstr(msg, "may not load plugins"),
        "%s: the refusal names both files: '%s'\n", what, msg ? msg : "");
  dlclose(h);
}

int main(void) {
  g_dir = getenv("KITE_TEST_PLUGIN_DIR");
  if (!g_dir) {
    printf("KITE_TEST_PLUGIN_DIR is not set (run through ctest)\n");
    return 1;
  }
  alarm(60); /* a hang fails here even outside ctest */
  char path[4096];

  /* auto-loaded: the first call into kite runs the re-entrant init */
  CHECK(kite_kernel_count() > 0, "first call returns\n");
  kite_backend_info b;
  CHECK(find_backend("reenter", &b), "the re-entrant auto-loaded plugin registered\n");
  check_reentered(b.path, "auto-loaded");

  /* explicit: init calls kite_backend_load while the loader holds its lock */
  plugin_path(path, sizeof path, "reenter2");
  CHECK(kite_backend_load(path) == KITE_OK, "explicit load of the re-entrant plugin\n");
  CHECK(find_backend("reenter2", NULL), "reenter2 registered\n");
  check_reentered(path, "explicit");

  /* init registers, then fails: nothing of it stays */
  size_t before = kite_kernel_count();
  plugin_path(path, sizeof path, "failreg");
  CHECK(kite_backend_load(path) == KITE_ERR_PLUGIN && strstr(kite_last_error(), "device lost") &&
            strstr(kite_last_error(), "withdrawn"),
        "a failing init is reported with its message\n");
  CHECK(!find_backend("failreg", NULL), "its backend is rolled back\n");
  kite_kernel_info k;
  CHECK(!find_kernel("failreg", "copy", &k) && kite_kernel_count() == before,
        "its kernels are rolled back\n");
  kite_ctx *ctx = NULL;
  CHECK(kite_ctx_create(NULL, &ctx) == KITE_OK, "ctx\n");
  CHECK(kite_config_set("silu=failreg.copy") == KITE_OK && call_silu(ctx) == KITE_ERR_UNSUPPORTED &&
            strstr(kite_last_error(), "no such kernel is registered"),
        "a rolled-back kernel cannot be selected\n");
  /* the same file again: it fails again, it is not taken as loaded */
  CHECK(kite_backend_load(path) == KITE_ERR_PLUGIN && !find_backend("failreg", NULL),
        "reload fails\n");

  /* two entries with the same (op, variant) */
  plugin_path(path, sizeof path, "duplicate");
  CHECK(kite_backend_load(path) == KITE_ERR_PLUGIN && strstr(kite_last_error(), "both") &&
            strstr(kite_last_error(), "duplicate.same"),
        "duplicate (op, variant) refused\n");
  CHECK(!find_backend("duplicate", NULL), "nothing of it registered\n");

  /* kernel statuses */
  plugin_path(path, sizeof path, "badstatus");
  CHECK(kite_backend_load(path) == KITE_OK, "badstatus loads\n");
  CHECK(kite_config_set("silu=badstatus.status42") == KITE_OK, "pin status42\n");
  CHECK(call_silu(ctx) == KITE_ERR_INTERNAL && strstr(kite_last_error(), "returned 42") &&
            strstr(kite_last_error(), "badstatus.status42"),
        "a status outside kite_status becomes INTERNAL, named\n");
  CHECK(kite_config_set("silu=badstatus.nomessage") == KITE_OK, "pin nomessage\n");
  CHECK(call_silu(ctx) == KITE_ERR_DEVICE && strstr(kite_last_error(), "silu") &&
            strstr(kite_last_error(), "badstatus.nomessage") &&
            strstr(kite_last_error(), "KITE_ERR_DEVICE"),
        "an error without a message gets one naming op and kernel\n");
  /* around dispatch too */
  size_t i42 = 0;
  for (size_t i = 0; i < kite_kernel_count(); i++)
    if (kite_kernel_get(i, &k) == KITE_OK && strcmp(k.variant, "status42") == 0) i42 = i;
  float x[4] = {1, 2, 3, 4}, y[4];
  kite_act_args a = {KITE_OP_SILU, KITE_DTYPE_F32, 1, 4, x, 4, y, 4};
  CHECK(kite_kernel_run(kite_kernel_entry(i42), ctx, &a) == KITE_ERR_INTERNAL &&
            strstr(kite_last_error(), "badstatus.status42"),
        "kite_kernel_run normalizes the status too\n");
  /* run-time failures are counted per kernel (kite list shows them); a call is never rerun on
   * another kernel. The status42 kernel failed twice above (dispatch and kite_kernel_run). */
  char last[192];
  size_t inom = 0;
  for (size_t i = 0; i < kite_kernel_count(); i++)
    if (kite_kernel_get(i, &k) == KITE_OK && strcmp(k.variant, "nomessage") == 0) inom = i;
  CHECK(kite_kernel_failures(i42, last, sizeof last) == 2 && strstr(last, "returned 42"),
        "status42 failed twice: %ld (%s)\n", kite_kernel_failures(i42, NULL, 0), last);
  CHECK(kite_kernel_failures(inom, last, sizeof last) == 1 && strstr(last, "KITE_ERR_DEVICE"),
        "nomessage failed once: %ld\n", kite_kernel_failures(inom, NULL, 0));
  /* the user's remedy: take the failing kernel out of the choice for this thread */
  CHECK(kite_config_set("silu=badstatus") == KITE_OK &&
            kite_config_set_thread("-badstatus.status42") == KITE_OK && call_silu(ctx) != KITE_OK &&
            strstr(kite_last_error(), "nomessage"),
        "the thread's config disables status42: the next badstatus kernel runs\n");
  CHECK(kite_config_set_thread(NULL) == KITE_OK && kite_config_get_thread()[0] == '\0',
        "thread config cleared\n");
  CHECK(kite_config_set(NULL) == KITE_OK && call_silu(ctx) == KITE_OK, "default silu runs\n");

  /* where each kernel came from */
  CHECK(find_kernel("badstatus", "status42", &k) && strstr(k.plugin, "libkite-badstatus.so"),
        "a plugin kernel names its file: '%s'\n", k.plugin);
  CHECK(find_kernel("ref", "generic", &k) && k.plugin[0] == '\0', "a built-in kernel: ''\n");

  kite_ctx_destroy(ctx);
  return check_summary();
}
