/*
 * A KITE_KERNELS that does not parse is loud: every op call fails with KITE_ERR_CONFIG naming the
 * variable and the bad item, kite_config_error says so, until kite_config_set replaces it.
 * The variable is set in main before the first call into kite.
 */
#include <stdlib.h>
#include <string.h>

#include "kite/kite.h"
#include "check.h"
#include "registry_util.h"

int main(void) {
  setenv("KITE_KERNELS", "rms_norm=ref,softmax=", 1);
  kite_ctx *ctx = NULL;
  CHECK(kite_ctx_create(NULL, &ctx) == KITE_OK, "ctx\n");
  const char *err = kite_config_error();
  CHECK(strstr(err, "KITE_KERNELS") && strstr(err, "'softmax='"),
        "kite_config_error names the variable and the item: '%s'\n", err);
  for (int i = 0; i < 2; i++) /* cold and warm cache */
    CHECK(call_silu(ctx) == KITE_ERR_CONFIG && strstr(kite_last_error(), "KITE_KERNELS") &&
              strstr(kite_last_error(), "softmax="),
          "an op fails with CONFIG naming the variable and item\n");
  CHECK(kite_kernel_count() > 0, "introspection still works\n");
  CHECK(kite_config_set("rms_norm=Bad") == KITE_ERR_CONFIG, "a bad set is refused\n");
  CHECK(call_silu(ctx) == KITE_ERR_CONFIG, "and does not clear the error\n");
  CHECK(kite_config_set("rms_norm=ref") == KITE_OK, "a good set\n");
  CHECK(kite_config_error()[0] == '\0' && call_silu(ctx) == KITE_OK, "clears it\n");
  CHECK(strstr(err, "KITE_KERNELS") != NULL, "an earlier kite_config_error string stays valid\n");
  kite_ctx_destroy(ctx);
  return check_summary();
}
