/*
 * A vendor plugin for tests only. It provides one op (rms_norm, f32) to prove incremental
 * override, plus two variants the registry must handle: one that needs a feature this machine
 * never has (pin-to-impossible) and one that is deliberately wrong (the conformance harness must
 * catch it). Built three times: as "testvendor" (auto-loaded), as "testvendor2" (loaded
 * explicitly) and with a wrong ABI version (must be refused).
 */
#include <math.h>

#include "kite/backend.h"

#ifndef TESTVENDOR_NAME
#define TESTVENDOR_NAME "testvendor"
#endif
#ifndef TESTVENDOR_ABI
#define TESTVENDOR_ABI KITE_BACKEND_ABI_VERSION
#endif

#define EXPORT __attribute__((visibility("default")))

/* How many times the fast kernel ran: tests read it through dlsym. */
EXPORT long testvendor_calls;

static bool f32_only(const kite_kernel *k, const void *args, const char **why) {
  const kite_norm_args *a = args;
  if (a->dtype != KITE_DTYPE_F32) {
    *why = "only f32 is implemented";
    return false;
  }
  return true;
}

/* y = x / sqrt(mean(x^2) + eps) * (offset + w); w_scale 0 drops the weight (the wrong one). */
static kite_status rms_norm_f32(const kite_norm_args *a, double w_scale) {
  for (int64_t r = 0; r < a->rows; r++) {
    const float *x = (const float *)a->x + r * a->x_stride;
    float *y = (float *)a->y + r * a->y_stride;
    double ss = 0;
    for (int64_t i = 0; i < a->cols; i++) ss += (double)x[i] * x[i];
    double inv = 1.0 / sqrt(ss / (double)a->cols + a->eps);
    for (int64_t i = 0; i < a->cols; i++) {
      double w = a->w ? a->offset + w_scale * ((const float *)a->w)[i] : 1.0;
      y[i] = (float)(x[i] * inv * w);
    }
  }
  return KITE_OK;
}

static kite_status run_fast(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  __atomic_fetch_add(&testvendor_calls, 1, __ATOMIC_RELAXED); /* kernels run on many threads */
  return rms_norm_f32(args, 1.0);
}

static kite_status run_wrong(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  return rms_norm_f32(args, 0.0);
}

static const kite_kernel g_kernels[] = {
    {KITE_OP_RMS_NORM, "fast", 1000, 0, "", f32_only, run_fast, "test vendor rms_norm (f32)", 0},
    {KITE_OP_RMS_NORM, "wrong", -100, 0, "", f32_only, run_wrong,
     "deliberately wrong rms_norm (ignores the weight): the harness must catch it", 0},
    {KITE_OP_RMS_NORM, "impossible", 2000, 1, "testvendor_npu", NULL, run_fast,
     "needs a feature no machine has", 0},
};

static int device_count(const kite_backend *b) {
  return 1;
}
static uint64_t features_present(const kite_backend *b) {
  return 0;
}

static const kite_backend g_backend = {
    .name = TESTVENDOR_NAME,
    .device_type = kDLCPU,
    .description = "test vendor plugin",
    .device_count = device_count,
    .features_present = features_present,
    .kernels = g_kernels,
    .num_kernels = sizeof g_kernels / sizeof g_kernels[0],
};

EXPORT const uint32_t kite_plugin_abi_version = TESTVENDOR_ABI;

EXPORT kite_status kite_plugin_init(uint32_t host_abi_version) {
  if (host_abi_version != TESTVENDOR_ABI)
    return kite_set_error(KITE_ERR_PLUGIN, "testvendor: host ABI %u, plugin ABI %u",
                          host_abi_version, (unsigned)TESTVENDOR_ABI);
  return kite_backend_register(&g_backend);
}
