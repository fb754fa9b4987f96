/*
 * Dynamic per-token quantization, dequantization and the quantized linear layer.
 *
 * quant, per row: amax = max |x| over the finite elements (NaN and +-inf ignored, so one inf
 * does not zero the row), scale = amax / qmax in f32 (qmax 127 for int8, 448 for e4m3); +-inf
 * then saturates to +-qmax. Each element's quotient x / scale is the f32 division, which every
 * backend computes the same way, so the integer or e4m3 code that follows is identical everywhere:
 *   int8: round to nearest even, clamp to [-127, 127]; NaN gives 0.
 *   e4m3: the nearest e4m3 value, ties to even, saturating at +-448; NaN stays NaN.
 * A row with amax 0 gets scale 0 and every code 0.
 * dequant: y = q * scale (exact in double, then rounded once). linear_quant: exact integer dot
 * products for int8 (int64 here), float64 for e4m3, then * x_scale * w_scale + bias.
 */
#include "ref.h"

static float quant_qmax(kite_dtype q) {
  return q == KITE_DTYPE_I8 ? 127.0f : 448.0f;
}

/* Code i of a quantized row as a float. */
static float code_value(kite_dtype q, const void *p, int64_t i) {
  if (q == KITE_DTYPE_I8) return (float)((const int8_t *)p)[i];
  return kite_fp8_e4m3_to_f32(((const uint8_t *)p)[i]);
}

static kite_status check_types(const char *op, kite_dtype dtype, kite_dtype qdtype) {
  if (!ref_is_float(dtype))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: ref: dtype %s is not supported", op,
                          ref_dtype_str(dtype));
  if (qdtype != KITE_DTYPE_I8 && qdtype != KITE_DTYPE_FP8_E4M3)
    return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: ref: quantized dtype %s is not supported", op,
                          ref_dtype_str(qdtype));
  return KITE_OK;
}

kite_status ref_quant_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_quant_args *a = args;
  if (!a || (a->op != KITE_OP_QUANT && a->op != KITE_OP_DEQUANT))
    return kite_set_error(KITE_ERR_INVALID_ARG, "quant: ref: bad args");
  const char *op = ref_op_str(a->op);
  kite_status s = check_types(op, a->dtype, a->qdtype);
  if (s != KITE_OK) return s;
  const kite_dtype t = a->dtype, qt = a->qdtype;

  if (a->op == KITE_OP_DEQUANT) {
    for (int64_t r = 0; r < a->rows; r++) {
      const double scale = a->scales[r];
      const char *q = (const char *)a->q + r * a->q_stride; /* 1-byte codes */
      for (int64_t i = 0; i < a->cols; i++)
        kite_store_f64(t, a->y, r * a->y_stride + i, code_value(qt, q, i) * scale);
    }
    return KITE_OK;
  }

  const float qmax = quant_qmax(qt);
  for (int64_t r = 0; r < a->rows; r++) {
    const int64_t x0 = r * a->x_stride;
    float amax = 0.0f;
    for (int64_t i = 0; i < a->cols; i++) {
      float v = fabsf(kite_load_f32(t, a->x, x0 + i));
      if (v > amax && !isinf(v)) amax = v; /* NaN compares false */
    }
    const float scale = amax / qmax;
    a->scales[r] = scale;
    char *q = (char *)a->q + r * a->q_stride;
    for (int64_t i = 0; i < a->cols; i++) {
      const float v = scale == 0.0f ? 0.0f : kite_load_f32(t, a->x, x0 + i) / scale;
      if (qt == KITE_DTYPE_FP8_E4M3) {
        ((uint8_t *)q)[i] = kite_f32_to_fp8_e4m3(v);
      } else {
        double c = isnan(v) ? 0.0 : nearbyint((double)v); /* default mode: ties to even */
        ((int8_t *)q)[i] = (int8_t)(c > 127.0 ? 127.0 : c < -127.0 ? -127.0 : c);
      }
    }
  }
  return KITE_OK;
}

kite_status ref_linear_quant_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_linear_quant_args *a = args;
  if (!a || a->op != KITE_OP_LINEAR_QUANT)
    return kite_set_error(KITE_ERR_INVALID_ARG, "linear_quant: ref: bad args");
  kite_status s = check_types("linear_quant", a->dtype, a->qdtype);
  if (s != KITE_OK) return s;
  const kite_dtype t = a->dtype, qt = a->qdtype;
  for (int64_t r = 0; r < a->m; r++) {
    const char *xq = (const char *)a->xq + r * a->x_stride;
    for (int64_t j = 0; j < a->n; j++) {
      const char *wq = (const char *)a->wq + j * a->w_stride;
      double dot = 0.0;
      if (qt == KITE_DTYPE_I8) {
        int64_t acc = 0;
        for (int64_t i = 0; i < a->k; i++)
          acc += (int64_t)((const int8_t *)xq)[i] * ((const int8_t *)wq)[i];
        dot = (double)acc;
      } else {
        for (int64_t i = 0; i < a->k; i++)
          dot += (double)code_value(qt, xq, i) * code_value(qt, wq, i);
      }
      double v = dot * a->x_scales[r] * a->w_scales[j];
      if (a->bias) v += kite_load_f32(t, a->bias, j);
      kite_store_f64(t, a->y, r * a->y_stride + j, v);
    }
  }
  return KITE_OK;
}

/* quant_fp8_blocks: kite.h's definition element by element, block by block. */
kite_status ref_quant_fp8_blocks_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_quant_fp8_blocks_args *a = args;
  if (!a || a->op != KITE_OP_QUANT_FP8_BLOCKS || !ref_is_float(a->dtype))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "quant_fp8_blocks: ref: unsupported arguments");
  const int64_t nb = (a->rows + KITE_FP8_ATTN_BLOCK - 1) / KITE_FP8_ATTN_BLOCK;
  for (int64_t b = 0; b < a->batch; b++)
    for (int64_t h = 0; h < a->heads; h++)
      for (int64_t blk = 0; blk < nb; blk++) {
        const int64_t i0 = blk * KITE_FP8_ATTN_BLOCK;
        const int64_t i1 = i0 + KITE_FP8_ATTN_BLOCK < a->rows ? i0 + KITE_FP8_ATTN_BLOCK : a->rows;
        const int64_t x0 = b * a->x_stride[0] + h * a->x_stride[1];
        const int64_t q0 = b * a->q_stride[0] + h * a->q_stride[1];
        double amax = 0.0;
        for (int64_t i = i0; i < i1; i++)
          for (int64_t d = 0; d < a->dim; d++) {
            const double v =
                fabs((double)kite_load_f32(a->dtype, a->x, x0 + i * a->x_stride[2] + d));
            if (isfinite(v) && v > amax) amax = v;
          }
        const float scale = (float)amax / 448.0f; /* amax is an f32 value: exact */
        const bool none = !(scale > 0.0f);
        a->scales[(b * a->heads + h) * nb + blk] = none ? 1.0f : scale;
        for (int64_t i = i0; i < i1; i++)
          for (int64_t d = 0; d < a->dim; d++) {
            const float v = kite_load_f32(a->dtype, a->x, x0 + i * a->x_stride[2] + d);
            a->q[q0 + i * a->q_stride[2] + d] = none ? 0 : kite_f32_to_fp8_e4m3(v / scale);
          }
      }
  return KITE_OK;
}
