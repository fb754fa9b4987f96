/*
 * linear_wq4: the 4-bit blocks decoded exactly (d, m from f16), float64 dot products, bias, one
 * rounding to y's dtype.
 */
#include "ref.h"

/* Weight k of a row of blocks, exactly. */
static double wq4_value(kite_wq4_format f, const uint8_t *row, int64_t k) {
  const int64_t bb = f == KITE_WQ4_SYM ? 18 : 20;
  const uint8_t *blk = row + k / 32 * bb;
  const int j = (int)(k % 32);
  const double d = kite_f16_to_f32((uint16_t)(blk[0] | blk[1] << 8));
  const uint8_t *qs = blk + (f == KITE_WQ4_SYM ? 2 : 4);
  const int q = j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;
  if (f == KITE_WQ4_SYM) return (q - 8) * d;
  return q * d + kite_f16_to_f32((uint16_t)(blk[2] | blk[3] << 8));
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
