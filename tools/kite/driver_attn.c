/* Drivers of the attn ops (not written yet: these ops are listed, not checked or timed). */
#include "driver.h"

int kt_attn_has(kite_op op) {
  (void)op;
  return 0;
}

const kt_family_ops kt_family_attn = {.name = "attn"};
