/* Destroying a ctx twice is the caller's error (kite.h); the AddressSanitizer build must report
 * it, naming kite_ctx_destroy. Built and run only in that build; the test passes when the report
 * appears. */
#include "kite/kite.h"

int main(void) {
  kite_ctx *ctx = NULL;
  if (kite_ctx_create(NULL, &ctx) != KITE_OK) return 1;
  kite_ctx_destroy(ctx);
  kite_ctx_destroy(ctx);
  return 0;
}
