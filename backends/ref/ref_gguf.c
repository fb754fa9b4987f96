/*
 * linear_gguf and dequant_gguf: each weight computed from kite.h's formula for its block type in
 * float64 (exact: the products of f16 scales and small integers fit in 53 bits) and rounded once
 * to f32, the weight's defined value; linear_gguf's dot products in float64, bias, one rounding to
 * y's dtype; dequant_gguf stores the f32 value in y's dtype.
 */
#include <math.h>
#include <string.h>

#include "ref.h"

static double f16_at(const uint8_t *p) {
  return kite_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

/* The 6-bit scale (want_min 0) or min (1) of sub-block s of Q4_K / Q5_K. */
static int k4_scale(const uint8_t *sc, int s, int want_min) {
  if (s < 4) return want_min ? sc[s + 4] & 63 : sc[s] & 63;
  if (want_min) return (sc[s + 4] >> 4) | (sc[s] >> 6) << 4;
  return (sc[s + 4] & 15) | (sc[s - 4] >> 6) << 4;
}

double ref_gguf_exact(kite_gguf_type t, const uint8_t *b, int i) {
  static const int iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                1,    13,   25,  38,  53,  69,  89,  113};
  const int j32 = i % 16, hi32 = i >= 16; /* 32-value blocks: byte j32, high nibble or not */
  switch (t) {
  case KITE_GGUF_Q4_0:
  case KITE_GGUF_IQ4_NL: {
    const int q = hi32 ? b[2 + j32] >> 4 : b[2 + j32] & 15;
    return t == KITE_GGUF_Q4_0 ? (q - 8) * f16_at(b) : iq4nl[q] * f16_at(b);
  }
  case KITE_GGUF_Q4_1: {
    const int q = hi32 ? b[4 + j32] >> 4 : b[4 + j32] & 15;
    return q * f16_at(b) + f16_at(b + 2);
  }
  case KITE_GGUF_Q5_0:
  case KITE_GGUF_Q5_1: {
    const int off = t == KITE_GGUF_Q5_0 ? 2 : 4; /* qh's offset */
    const uint32_t h = (uint32_t)b[off] | (uint32_t)b[off + 1] << 8 | (uint32_t)b[off + 2] << 16 |
                       (uint32_t)b[off + 3] << 24;
    const uint8_t *qs = b + off + 4;
    const int q = (hi32 ? qs[j32] >> 4 : qs[j32] & 15) | (int)((h >> i) & 1) << 4;
    if (t == KITE_GGUF_Q5_0) return (q - 16) * f16_at(b);
    return q * f16_at(b) + f16_at(b + 2);
  }
  case KITE_GGUF_Q8_0:
    return (int8_t)b[2 + i] * f16_at(b);
  case KITE_GGUF_Q2_K: {
    const int h = i / 128, j = i % 128 / 32, l = i % 32, s = 8 * h + 2 * j + l / 16;
    const int q = (b[16 + 32 * h + l] >> (2 * j)) & 3;
    return f16_at(b + 80) * (b[s] & 15) * q - f16_at(b + 82) * (b[s] >> 4);
  }
  case KITE_GGUF_Q3_K: {
    const int h = i / 128, j = i % 128 / 32, l = i % 32, s = 8 * h + 2 * j + l / 16;
    const uint8_t *sc = b + 96;
    const int q = ((b[32 + 32 * h + l] >> (2 * j)) & 3) - ((b[l] >> (4 * h + j)) & 1 ? 0 : 4);
    const int low = s < 8 ? sc[s] & 15 : sc[s - 8] >> 4;
    const int scale = (low | ((sc[8 + s % 4] >> (2 * (s / 4))) & 3) << 4) - 32;
    return f16_at(b + 108) * scale * q;
  }
  case KITE_GGUF_Q4_K:
  case KITE_GGUF_Q5_K: {
    const int c = i / 64, l = i % 64, s = 2 * c + l / 32;
    const uint8_t *qs = b + (t == KITE_GGUF_Q4_K ? 16 : 48);
    int q = l < 32 ? qs[32 * c + l] & 15 : qs[32 * c + l - 32] >> 4;
    if (t == KITE_GGUF_Q5_K) q |= ((b[16 + l % 32] >> s) & 1) << 4;
    return f16_at(b) * k4_scale(b + 4, s, 0) * q - f16_at(b + 2) * k4_scale(b + 4, s, 1);
  }
  case KITE_GGUF_Q6_K: {
    const int h = i / 128, j = i % 128 / 32, l = i % 32;
    const uint8_t lo = b[64 * h + 32 * (j % 2) + l];
    const int q = ((j < 2 ? lo & 15 : lo >> 4) | ((b[128 + 32 * h + l] >> (2 * j)) & 3) << 4) - 32;
    return f16_at(b + 208) * (int8_t)b[192 + 8 * h + 2 * j + l / 16] * q;
  }
  case KITE_GGUF_Q8_K: {
    float d;
    memcpy(&d, b, 4);
    return (double)d * (int8_t)b[4 + i];
  }
  case KITE_GGUF_MXFP4: {
    static const int e2m1x2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    const int q = hi32 ? b[1 + j32] >> 4 : b[1 + j32] & 15;
    return ldexp(e2m1x2[q], b[0] - 128);
  }
  }
  return NAN;
}

/* Weight i of a row of blocks: its defined value, the exact one rounded once to f32. */
static double gguf_weight(const kite_gguf_args *a, const uint8_t *row, int64_t i) {
  return (float)ref_gguf_exact(a->type, row + i / a->bv * a->bb, (int)(i % a->bv));
}

/* y[m, n] of rows [0, a->m) against the weights of a->w (the bias row given), float64 dots. */
static void gguf_dots(const kite_gguf_args *a, int64_t bias_row) {
  for (int64_t n = 0; n < a->n; n++) {
    const uint8_t *row = a->w + n * a->w_stride;
    for (int64_t m = 0; m < a->m; m++) {
      double acc = a->bias ? kite_load_f32(a->dtype, a->bias, bias_row + n) : 0.0;
      for (int64_t i = 0; i < a->k; i++)
        acc += (double)kite_load_f32(a->dtype, a->x, m * a->x_stride + i) * gguf_weight(a, row, i);
      kite_store_f32(a->dtype, a->y, m * a->y_stride + n, (float)acc);
    }
  }
}

/* Values [i0, i0 + n) of x's row m quantized as kite.h's linear_gguf_q8 says: codes q[n] (as
 * doubles), the block's scale returned. */
static double quant_block(const kite_gguf_args *a, int64_t m, int64_t i0, int64_t n, double *q) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; i++) {
    const float v = fabsf(kite_load_f32(a->dtype, a->x, m * a->x_stride + i0 + i));
    if (v > amax && !isinf(v)) amax = v; /* NaN compares false */
  }
  const float scale = amax / 127.0f;
  for (int64_t i = 0; i < n; i++) {
    const float v =
        scale == 0.0f ? 0.0f : kite_load_f32(a->dtype, a->x, m * a->x_stride + i0 + i) / scale;
    const double c = isnan(v) ? 0.0 : nearbyint((double)v); /* default mode: ties to even */
    q[i] = c > 127.0 ? 127.0 : c < -127.0 ? -127.0 : c;
  }
  return scale;
}

/* linear_gguf_q8: y[m, n] with x's blocks quantized first, float64 dots of codes and weights. */
static void gguf_q8_dots(const kite_gguf_args *a) {
  double q[256]; /* one block's codes: V <= 256 (kite.h) */
  for (int64_t n = 0; n < a->n; n++) {
    const uint8_t *row = a->w + n * a->w_stride;
    for (int64_t m = 0; m < a->m; m++) {
      double acc = a->bias ? kite_load_f32(a->dtype, a->bias, n) : 0.0;
      for (int64_t i0 = 0; i0 < a->k; i0 += a->bv) {
        const double scale = quant_block(a, m, i0, a->bv, q);
        double dot = 0.0;
        for (int64_t i = 0; i < a->bv; i++) dot += q[i] * gguf_weight(a, row, i0 + i);
        acc += dot * scale;
      }
      kite_store_f32(a->dtype, a->y, m * a->y_stride + n, (float)acc);
    }
  }
}

kite_status ref_gguf_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_gguf_args *a = args;
  if (!a || (a->op != KITE_OP_LINEAR_GGUF && a->op != KITE_OP_DEQUANT_GGUF &&
             a->op != KITE_OP_LINEAR_GGUF_Q8))
    return kite_set_error(KITE_ERR_INVALID_ARG, "linear_gguf: ref: bad args");
  const char *op = ref_op_str(a->op);
  if (!ref_is_float(a->dtype))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: ref: dtype %s is not supported", op,
                          ref_dtype_str(a->dtype));
  if (a->op == KITE_OP_LINEAR_GGUF) {
    gguf_dots(a, 0);
    return KITE_OK;
  }
  if (a->op == KITE_OP_LINEAR_GGUF_Q8) {
    gguf_q8_dots(a);
    return KITE_OK;
  }
  for (int64_t n = 0; n < a->n; n++) {
    const uint8_t *row = a->w + n * a->w_stride;
    for (int64_t i = 0; i < a->k; i++)
      kite_store_f32(a->dtype, a->y, n * a->y_stride + i, (float)gguf_weight(a, row, i));
  }
  return KITE_OK;
}

/* group_gemm_gguf: each group's rows as linear_gguf against w[g] and bias[g] (the front-end
 * checked the sizes: each >= 0, summing to m). */
kite_status ref_group_gguf_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_group_gguf_args *a = args;
  if (!a || a->op != KITE_OP_GROUP_GEMM_GGUF)
    return kite_set_error(KITE_ERR_INVALID_ARG, "group_gemm_gguf: ref: bad args");
  if (!ref_is_float(a->dtype))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "group_gemm_gguf: ref: dtype %s is not supported",
                          ref_dtype_str(a->dtype));
  const size_t e = kite_dtype_size(a->dtype);
  int64_t row = 0;
  for (int64_t g = 0; g < a->groups && row < a->m; g++) {
    const int64_t rows = a->group_sizes[g] < a->m - row ? a->group_sizes[g] : a->m - row;
    const kite_gguf_args one = {.op = KITE_OP_LINEAR_GGUF,
                                .dtype = a->dtype,
                                .type = a->type,
                                .bv = a->bv,
                                .bb = a->bb,
                                .m = rows,
                                .n = a->n,
                                .k = a->k,
                                .x = (const char *)a->x + (size_t)(row * a->x_stride) * e,
                                .x_stride = a->x_stride,
                                .w = a->w + g * a->w_stride_g,
                                .w_stride = a->w_stride_n,
                                .bias = a->bias,
                                .y = (char *)a->y + (size_t)(row * a->y_stride) * e,
                                .y_stride = a->y_stride};
    gguf_dots(&one, g * a->n);
    row += rows;
  }
  return KITE_OK;
}
