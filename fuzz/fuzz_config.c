/*
 * libFuzzer target: the config grammar (kite_config_set). Any string either parses, and is then
 * what kite_config_get returns and dispatch works under it, or is refused with KITE_ERR_CONFIG and
 * a message, leaving the previous config in force.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kite/kite.h"

static kite_ctx *g_ctx;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_ctx && kite_ctx_create(NULL, &g_ctx) != KITE_OK) abort();
  char cfg[2048];
  size_t n = size < sizeof cfg - 1 ? size : sizeof cfg - 1;
  memcpy(cfg, data, n);
  cfg[n] = '\0';
  if (kite_config_set("silu=ref") != KITE_OK) abort();
  kite_status s = kite_config_set(cfg);
  if (s == KITE_OK) {
    if (strcmp(kite_config_get(), cfg) != 0) abort();
  } else {
    if (s != KITE_ERR_CONFIG || strncmp(kite_last_error(), "config: ", 8) != 0) abort();
    if (strcmp(kite_config_get(), "silu=ref") != 0) abort(); /* the previous config stays */
  }
  float x[4] = {-1, 0, 1, 2}, y[4];
  int64_t shape[1] = {4};
  DLTensor tx = {x, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
  DLTensor ty = {y, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
  s = kite_silu(g_ctx, &tx, &ty);
  /* a pin or a disable may leave no kernel (UNSUPPORTED, explained); nothing else */
  if (s != KITE_OK && (s != KITE_ERR_UNSUPPORTED || !kite_last_error()[0])) abort();
  return 0;
}
