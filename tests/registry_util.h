/* Registry look-ups and a minimal op call shared by the registry and plugin tests. */
#ifndef KITE_TESTS_REGISTRY_UTIL_H
#define KITE_TESTS_REGISTRY_UTIL_H

#include <string.h>

#include "kite/kite.h"

/* Whether a backend of that name is registered; its info into *out (may be NULL). */
static inline int find_backend(const char *name, kite_backend_info *out) {
  kite_backend_info b;
  for (size_t i = 0; i < kite_backend_count(); i++)
    if (kite_backend_get(i, &b) == KITE_OK && strcmp(b.name, name) == 0) {
      if (out) *out = b;
      return 1;
    }
  return 0;
}

/* Whether kernel backend.variant is registered; its info into *out. */
static inline int find_kernel(const char *backend, const char *variant, kite_kernel_info *out) {
  for (size_t i = 0; i < kite_kernel_count(); i++)
    if (kite_kernel_get(i, out) == KITE_OK && strcmp(out->backend, backend) == 0 &&
        strcmp(out->variant, variant) == 0)
      return 1;
  return 0;
}

/* silu over 4 f32 values: the status of a call that any selection of silu kernels can run. */
static inline kite_status call_silu(kite_ctx *ctx) {
  static float x[4] = {1, 2, 3, 4}, y[4];
  int64_t s[1] = {4};
  DLTensor tx = {x, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, s, NULL, 0};
  DLTensor ty = {y, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, s, NULL, 0};
  return kite_silu(ctx, &tx, &ty);
}

#endif
