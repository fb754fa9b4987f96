/*
 * Plugins that misbehave on purpose, for the registry's tests. One source, one behaviour per
 * build (FAULTY_MODE):
 *   FAULTY_REENTER        init calls back into kite (count, config, ctx, an op, a nested load)
 *                         and records what each call gave, then registers
 *   FAULTY_FAIL_AFTER_REG init registers its backend, then returns an error
 *   FAULTY_DUPLICATE      two kernels with the same (op, variant)
 *   FAULTY_BAD_STATUS     silu kernels returning 42, and an error without a message
 */
#include <stdio.h>
#include <string.h>

#include "kite/backend.h"

#define FAULTY_REENTER 1
#define FAULTY_FAIL_AFTER_REG 2
#define FAULTY_DUPLICATE 3
#define FAULTY_BAD_STATUS 4

#ifndef FAULTY_NAME
#define FAULTY_NAME "faulty"
#endif

#define EXPORT __attribute__((visibility("default")))

#if FAULTY_MODE == FAULTY_BAD_STATUS
static kite_status run_42(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  return (kite_status)42;
}

static kite_status run_silent(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  return KITE_ERR_DEVICE;
}
#endif

__attribute__((unused)) static kite_status run_ok(const kite_kernel *k, kite_ctx *ctx,
                                                  const void *args) {
  const kite_act_args *a = args;
  for (int64_t r = 0; r < a->rows; r++)
    memcpy((char *)a->y + r * a->y_stride * 4, (const char *)a->x + r * a->x_stride * 4,
           (size_t)a->cols * 4);
  return KITE_OK;
}

static bool f32_only(const kite_kernel *k, const void *args, const char **why) {
  *why = "f32 only";
  return ((const kite_act_args *)args)->dtype == KITE_DTYPE_F32;
}

/* Priorities below every built-in kernel: the tests pin these. */
static const kite_kernel g_kernels[] = {
#if FAULTY_MODE == FAULTY_BAD_STATUS
    {KITE_OP_SILU, "status42", -1000, 0, "", f32_only, run_42, "returns 42", 0},
    {KITE_OP_SILU, "nomessage", -1000, 0, "", f32_only, run_silent, "fails silently", 0},
#elif FAULTY_MODE == FAULTY_DUPLICATE
    {KITE_OP_SILU, "same", -1000, 0, "", f32_only, run_ok, "first", 0},
    {KITE_OP_SILU, "same", -1000, 0, "", f32_only, run_ok, "second, same op and variant", 0},
#else
    {KITE_OP_SILU, "copy", -1000, 0, "", f32_only, run_ok, "copies x (not silu)", 0},
#endif
};

static const kite_backend g_backend = {
    .name = FAULTY_NAME,
    .device_type = kDLCPU,
    .description = "misbehaving test plugin",
    .kernels = g_kernels,
    .num_kernels = sizeof g_kernels / sizeof g_kernels[0],
};

EXPORT const uint32_t kite_plugin_abi_version = KITE_BACKEND_ABI_VERSION;

#if FAULTY_MODE == FAULTY_REENTER
/* What the calls made from init gave, read by the test through dlsym. */
EXPORT int faulty_init_ran;
EXPORT size_t faulty_kernels_seen;
EXPORT kite_status faulty_config_status, faulty_ctx_status, faulty_op_status, faulty_load_status;
EXPORT char faulty_load_message[512];

static kite_status reenter(void) {
  faulty_init_ran = 1;
  faulty_kernels_seen = kite_kernel_count();
  faulty_config_status = kite_config_set(kite_config_get());
  kite_ctx *ctx = NULL;
  faulty_ctx_status = kite_ctx_create(NULL, &ctx);
  if (faulty_ctx_status == KITE_OK) {
    float x[4] = {-1, 0, 1, 2}, y[4];
    int64_t shape[1] = {4};
    DLTensor tx = {x, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
    DLTensor ty = {y, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
    faulty_op_status = kite_silu(ctx, &tx, &ty);
    kite_ctx_destroy(ctx);
  }
  faulty_load_status = kite_backend_load("libkite-nested.so");
  snprintf(faulty_load_message, sizeof faulty_load_message, "%s", kite_last_error());
  return KITE_OK;
}
#endif

EXPORT kite_status kite_plugin_init(uint32_t host_abi_version) {
  if (host_abi_version != KITE_BACKEND_ABI_VERSION)
    return kite_set_error(KITE_ERR_PLUGIN, FAULTY_NAME ": host ABI %u", host_abi_version);
#if FAULTY_MODE == FAULTY_REENTER
  reenter();
#endif
  kite_status s = kite_backend_register(&g_backend);
#if FAULTY_MODE == FAULTY_FAIL_AFTER_REG
  if (s == KITE_OK)
    return kite_set_error(KITE_ERR_DEVICE, FAULTY_NAME ": device lost after registering");
#endif
  return s;
}
