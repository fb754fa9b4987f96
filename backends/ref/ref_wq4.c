/*
 * linear_wq4: the 4-bit blocks decoded exactly (d, m from f16), float64 dot products, bias, one
 * rounding to y's dtype.
 */
#include "ref.h"

/* Weight k of a row of blocks, exactly: the GGUF Q4_0 / Q4_1 block decoder's value. */
static double wq4_value(kite_wq4_format f, const uint8_t *row, int64_t k) {
  const kite_gguf_type t = f == KITE_WQ4_SYM ? KITE_GGUF_Q4_0 : KITE_GGUF_Q4_1;
  return ref_gguf_exact(t, row + k / 32 * (f == KITE_WQ4_SYM ? 18 : 20), (int)(k % 32));
}

kite_status ref_linear_wq4_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_linear_wq4_args *a = args;
  if (!a || a->op != KITE_OP_LINEAR_WQ4)
    return kite_set_error(KITE_ERR_INVALID_ARG, "linear_wq4: ref: bad args");
  if (!ref_is_float(a->dtype))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "linear_wq4: ref: dtype %s is not supported",
                          ref_dtype_str(a->dtype));
  for (int64_t n = 0; n < a->n; n++) {
    const uint8_t *row = a->w + n * a->w_stride;
    for (int64_t m = 0; m < a->m; m++) {
      double acc = a->bias ? kite_load_f32(a->dtype, a->bias, n) : 0.0;
      for (int64_t i = 0; i < a->k; i++)
        acc += (double)kite_load_f32(a->dtype, a->x, m * a->x_stride + i) *
               wq4_value(a->format, row, i);
      kite_store_f32(a->dtype, a->y, m * a->y_stride + n, (float)acc);
    }
  }
  return KITE_OK;
}
