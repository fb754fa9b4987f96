/*
 * Plugins and kernel selection: auto-loading and explicit loading, ABI mismatch, incremental
 * override, pinning, disabling, pin-to-impossible. Runs with KITE_BACKEND_PATH holding the
 * testvendor plugin and the bad-ABI one; KITE_TEST_PLUGIN_DIR is the folder above them.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kite/kite.h"
#include "check.h"
#include "registry_util.h"

static const char *g_dir;
static long *g_calls; /* testvendor_calls inside the auto-loaded plugin */

/* rms_norm over a [2, 8] tensor of dtype code/bits; returns the status. */
static kite_status call_rms_norm(kite_ctx *ctx, uint8_t code, uint8_t bits) {
  static float xf[16], wf[8], yf[16];
  static uint16_t xh[16], wh[8], yh[16];
  for (int i = 0; i < 16; i++) xf[i] = (float)(i % 5) - 2.0f, xh[i] = 0x3f80; /* 1.0 bf16 */
  for (int i = 0; i < 8; i++) wf[i] = 1.0f, wh[i] = 0x3f80;
  int f32 = bits == 32;
  int64_t xs[2] = {2, 8}, ws[1] = {8};
  DLDataType dt = {code, bits, 1};
  DLTensor x = {f32 ? (void *)xf : (void *)xh, {kDLCPU, 0}, 2, dt, xs, NULL, 0};
  DLTensor w = {f32 ? (void *)wf : (void *)wh, {kDLCPU, 0}, 1, dt, ws, NULL, 0};
  DLTensor y = {f32 ? (void *)yf : (void *)yh, {kDLCPU, 0}, 2, dt, xs, NULL, 0};
  return kite_rms_norm(ctx, &x, &w, 1e-6f, 0.0f, &y);
}

static void test_autoload(void) {
  kite_backend_info b;
  CHECK(find_backend("testvendor", &b), "testvendor was not auto-loaded from KITE_BACKEND_PATH\n");
  CHECK(strstr(b.path, "libkite-testvendor.so") != NULL, "backend path '%s'\n", b.path);
  kite_kernel_info k;
  CHECK(find_kernel("testvendor", "fast", &k) && k.runs_here, "testvendor.fast listed, runs\n");
  CHECK(find_kernel("testvendor", "impossible", &k) && !k.runs_here &&
            strstr(k.why_not, "testvendor_npu"),
        "testvendor.impossible must not run here and say why ('%s')\n", k.why_not);
  /* the bad-ABI plugin was on the path too: reported, not fatal */
  int seen = 0;
  for (size_t i = 0; i < kite_plugin_failure_count(); i++) {
    const char *path, *reason;
    if (kite_plugin_failure_get(i, &path, &reason) == KITE_OK && strstr(path, "badabi") &&
        strstr(reason, "ABI version 999"))
      seen = 1;
  }
  CHECK(seen, "the bad-ABI plugin's failure is reported with its ABI version\n");
  CHECK(!find_backend("badabi", &b), "the bad-ABI plugin must not register\n");
  void *h = dlopen(b.path[0] ? b.path : "libkite-testvendor.so", RTLD_NOW | RTLD_NOLOAD);
  if (!h) {
    find_backend("testvendor", &b);
    h = dlopen(b.path, RTLD_NOW | RTLD_NOLOAD);
  }
  g_calls = h ? (long *)dlsym(h, "testvendor_calls") : NULL;
  CHECK(g_calls != NULL, "testvendor_calls symbol\n");
}

static void test_selection(kite_ctx *ctx) {
  if (!g_calls) return;
  long before = *g_calls;
  CHECK(call_rms_norm(ctx, kDLFloat, 32) == KITE_OK, "rms_norm f32\n");
  CHECK(*g_calls == before + 1, "default dispatch picks the plugin's priority-1000 kernel\n");

  /* incremental override: other ops and other dtypes stay on other backends */
  CHECK(call_silu(ctx) == KITE_OK, "silu still runs\n");
  before = *g_calls;
  CHECK(call_rms_norm(ctx, kDLBfloat, 16) == KITE_OK, "rms_norm bf16 falls to another kernel\n");
  CHECK(*g_calls == before, "the f32-only plugin kernel did not run for bf16\n");

  /* pinning */
  CHECK(kite_config_set("rms_norm=ref") == KITE_OK, "pin to ref\n");
  before = *g_calls;
  CHECK(call_rms_norm(ctx, kDLFloat, 32) == KITE_OK && *g_calls == before, "pinned to ref\n");
  CHECK(kite_config_set("rms_norm=testvendor.fast") == KITE_OK, "pin to testvendor.fast\n");
  CHECK(call_rms_norm(ctx, kDLFloat, 32) == KITE_OK && *g_calls == before + 1,
        "pinned to testvendor.fast\n");
  kite_status s = call_rms_norm(ctx, kDLBfloat, 16);
  CHECK(s == KITE_ERR_UNSUPPORTED && strstr(kite_last_error(), "testvendor.fast") &&
            strstr(kite_last_error(), "only f32"),
        "a pin that cannot run these args is an error naming the kernel and why, not a "
        "substitute\n");

  /* pin to impossible */
  CHECK(kite_config_set("rms_norm=testvendor.impossible") == KITE_OK, "pin impossible\n");
  s = call_rms_norm(ctx, kDLFloat, 32);
  CHECK(s == KITE_ERR_UNSUPPORTED && strstr(kite_last_error(), "testvendor_npu") &&
            strstr(kite_last_error(), "rms_norm"),
        "pin to a kernel whose feature is missing fails naming op and feature\n");
  CHECK(kite_config_set("rms_norm=nosuch.variant") == KITE_OK, "pin to unknown accepted\n");
  s = call_rms_norm(ctx, kDLFloat, 32);
  CHECK(s == KITE_ERR_UNSUPPORTED && strstr(kite_last_error(), "nosuch.variant"),
        "pin to an unregistered kernel fails naming it\n");

  /* disabling */
  CHECK(kite_config_set("-testvendor") == KITE_OK, "disable backend\n");
  before = *g_calls;
  CHECK(call_rms_norm(ctx, kDLFloat, 32) == KITE_OK && *g_calls == before,
        "a disabled backend does not run\n");
  CHECK(kite_config_set("-rms_norm:testvendor.fast") == KITE_OK, "disable one kernel\n");
  CHECK(call_rms_norm(ctx, kDLFloat, 32) == KITE_OK && *g_calls == before,
        "a disabled kernel does not run\n");
  CHECK(kite_config_set("-testvendor,+testvendor.fast") == KITE_OK, "re-enable\n");
  CHECK(call_rms_norm(ctx, kDLFloat, 32) == KITE_OK && *g_calls == before + 1,
        "+backend.variant re-enables\n");
  CHECK(kite_config_set("-testvendor,reset") == KITE_OK && *kite_config_get() != '\0', "reset\n");
  before = *g_calls;
  CHECK(call_rms_norm(ctx, kDLFloat, 32) == KITE_OK && *g_calls == before + 1,
        "reset forgets the earlier items\n");

  /* bad config strings */
  CHECK(kite_config_set("nosuchop=ref") == KITE_ERR_CONFIG && strstr(kite_last_error(), "nosuchop"),
        "unknown op in config\n");
  CHECK(kite_config_set("rms_norm") == KITE_ERR_CONFIG, "item without '='\n");
  CHECK(kite_config_set("rms_norm=Bad.Name") == KITE_ERR_CONFIG, "bad name\n");
  CHECK(kite_config_set(NULL) == KITE_OK && strcmp(kite_config_get(), "") == 0, "clear config\n");
}

static void test_explicit_load(kite_ctx *ctx) {
  char path[4096];
  kite_backend_info b;
  CHECK(!find_backend("testvendor2", &b), "testvendor2 is not on the auto-load path\n");
  snprintf(path, sizeof path, "%s/plugins-explicit/libkite-testvendor2.so", g_dir);
  CHECK(kite_backend_load(path) == KITE_OK, "explicit load of %s\n", path);
  CHECK(find_backend("testvendor2", &b), "testvendor2 registered after explicit load\n");
  CHECK(kite_backend_load(path) == KITE_OK, "loading the same file again is a no-op\n");
  kite_kernel_info k;
  CHECK(find_kernel("testvendor2", "fast", &k), "its kernels are listed\n");

  snprintf(path, sizeof path, "%s/plugins-bad/libkite-badabi.so", g_dir);
  kite_status s = kite_backend_load(path);
  CHECK(s == KITE_ERR_PLUGIN && strstr(kite_last_error(), "ABI"),
        "explicit load of a bad-ABI plugin is refused with a clear message\n");
  s = kite_backend_load("/nonexistent/libkite-x.so");
  CHECK(s == KITE_ERR_PLUGIN && strstr(kite_last_error(), "no such file"), "missing file\n");
  s = kite_backend_load("libm.so.6");
  CHECK(s == KITE_ERR_PLUGIN, "a relative non-plugin name\n");
  CHECK(kite_backend_load(NULL) == KITE_ERR_INVALID_ARG, "NULL path\n");
  /* a shared library that is not a kite plugin */
  Dl_info info;
  if (dladdr((void *)&kite_last_error, &info) && info.dli_fname) {
    s = kite_backend_load(info.dli_fname);
    CHECK(s == KITE_ERR_PLUGIN && strstr(kite_last_error(), "not a kite plugin"),
          "libkite itself is not a plugin\n");
  }
  (void)ctx;
}

int main(void) {
  g_dir = getenv("KITE_TEST_PLUGIN_DIR");
  if (!g_dir) {
    printf("KITE_TEST_PLUGIN_DIR is not set (run through ctest)\n");
    return 1;
  }
  kite_ctx *ctx = NULL;
  if (kite_ctx_create(NULL, &ctx) != KITE_OK) {
    printf("kite_ctx_create: %s\n", kite_last_error());
    return 1;
  }
  test_autoload();
  test_selection(ctx);
  test_explicit_load(ctx);
  kite_ctx_destroy(ctx);
  return check_summary();
}
