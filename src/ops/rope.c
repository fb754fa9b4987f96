/* Front-end of rotary position embedding, and the host-side builder of its cos/sin cache. */
#include <math.h>
#include <stdlib.h>

#include "core/internal.h"

#define KITE_PI 3.141592653589793238462643383279502884

/* q or k: [T, heads, D] of a float dtype, the head dim unit-stride, elements distinct. */
static kite_status check_heads(const kite_ctx *ctx, const char *op, const char *arg,
                               const DLTensor *t, kite_tensor *out) {
  kite_status s;
  if ((s = kite_tensor_check(ctx, op, arg, t, out)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, arg, out, 3)) != KITE_OK) return s;
  if ((s = kite_tensor_require_float(op, arg, out)) != KITE_OK) return s;
  if (out->shape[2] > 1 && out->strides[2] != 1)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "%s: %s: head dim must be unit-stride (stride %lld)", op, arg,
                          (long long)out->strides[2]);
  return kite_tensor_require_no_overlap(op, arg, out);
}

/* rope and rope_backward share every check; the backward rotates by -theta (its kernels switch
 * on the op id). */
static kite_status rope(kite_ctx *ctx, kite_op opid, DLTensor *q, DLTensor *k,
                        const DLTensor *positions, const DLTensor *cos_sin, int64_t rot_dim,
                        kite_rope_style style) {
  const char *op = kite_op_name(opid);
  /* the tensors by the names of the op's function: rope(q, k), rope_backward(dq, dk) */
  const int bwd = opid == KITE_OP_ROPE_BACKWARD;
  const char *qn = bwd ? "dq" : "q", *kn = bwd ? "dk" : "k";
  kite_tensor qt, kt = {0}, pt, ct;
  kite_status s;
  if ((s = kite_op_begin(ctx, op)) != KITE_OK) return s;
  if ((s = check_heads(ctx, op, qn, q, &qt)) != KITE_OK) return s;
  const int64_t tokens = qt.shape[0], head_dim = qt.shape[2];
  if (k) {
    if ((s = check_heads(ctx, op, kn, k, &kt)) != KITE_OK) return s;
    if ((s = kite_tensor_require_dtype(op, kn, &kt, qt.dtype)) != KITE_OK) return s;
    if (kt.shape[0] != tokens || kt.shape[2] != head_dim)
      return kite_set_error(
          KITE_ERR_INVALID_ARG,
          "%s: %s: shape [%lld, %lld, %lld] does not fit %s's [T=%lld, _, D=%lld]", op, kn,
          (long long)kt.shape[0], (long long)kt.shape[1], (long long)kt.shape[2], qn,
          (long long)tokens, (long long)head_dim);
    if (kt.numel > 0 && qt.numel > 0 && kt.data == qt.data)
      return kite_set_error(KITE_ERR_INVALID_ARG, "%s: %s: is the same memory as %s", op, kn, qn);
  }

  if ((s = kite_tensor_check(ctx, op, "positions", positions, &pt)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, "positions", &pt, 1)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, "positions", &pt, KITE_DTYPE_I32)) != KITE_OK) return s;
  if (pt.shape[0] != tokens)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: positions: length %lld, expected T = %lld", op,
                          (long long)pt.shape[0], (long long)tokens);
  if ((s = kite_tensor_require_compact(op, "positions", &pt)) != KITE_OK) return s;

  if ((s = kite_tensor_check(ctx, op, "cos_sin", cos_sin, &ct)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, "cos_sin", &ct, 2)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, "cos_sin", &ct, KITE_DTYPE_F32)) != KITE_OK) return s;
  if ((s = kite_tensor_require_compact(op, "cos_sin", &ct)) != KITE_OK) return s;
  if (ct.shape[0] < 1)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: cos_sin: has no rows (max_pos must be >= 1)",
                          op);

  if (rot_dim < 2 || rot_dim % 2 != 0 || rot_dim > head_dim)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "%s: rot_dim: %lld must be even and in [2, head_dim %lld]", op,
                          (long long)rot_dim, (long long)head_dim);
  if (ct.shape[1] != rot_dim)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "%s: cos_sin: row length %lld, expected rot_dim %lld", op,
                          (long long)ct.shape[1], (long long)rot_dim);
  if (style != KITE_ROPE_NEOX && style != KITE_ROPE_GPTJ)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: style: %d is not a kite_rope_style", op,
                          (int)style);

  kite_rope_args a = {.op = opid,
                      .dtype = qt.dtype,
                      .tokens = tokens,
                      .hq = qt.shape[1],
                      .hkv = k ? kt.shape[1] : 0,
                      .head_dim = head_dim,
                      .rot_dim = rot_dim,
                      .max_pos = ct.shape[0],
                      .q = qt.data,
                      .q_stride_t = qt.strides[0],
                      .q_stride_h = qt.strides[1],
                      .k = kt.data,
                      .k_stride_t = kt.strides[0],
                      .k_stride_h = kt.strides[1],
                      .positions = pt.data,
                      .cos_sin = ct.data,
                      .style = style};
  if (a.hkv == 0) a.k = NULL;
  if (tokens == 0 || (a.hq == 0 && a.hkv == 0)) return KITE_OK;
  return kite_dispatch(ctx, opid, a.dtype, &a);
}

kite_status kite_rope(kite_ctx *ctx, DLTensor *q, DLTensor *k, const DLTensor *positions,
                      const DLTensor *cos_sin, int64_t rot_dim, kite_rope_style style) {
  return rope(ctx, KITE_OP_ROPE, q, k, positions, cos_sin, rot_dim, style);
}

kite_status kite_rope_backward(kite_ctx *ctx, DLTensor *dq, DLTensor *dk, const DLTensor *positions,
                               const DLTensor *cos_sin, int64_t rot_dim, kite_rope_style style) {
  return rope(ctx, KITE_OP_ROPE_BACKWARD, dq, dk, positions, cos_sin, rot_dim, style);
}

/* YaRN's magnitude scale (kite.h). */
double kite_rope_yarn_mscale(double factor, double mscale) {
  return factor <= 1.0 ? 1.0 : 0.1 * mscale * log(factor) + 1.0;
}

/* YaRN's correction dimension: the rotation pair index (as a real number, over rot_dim) whose
 * wavelength fits `rotations` turns into the original context. */
static double yarn_corr_dim(double rotations, int64_t rot_dim, double theta, int64_t orig) {
  return (double)rot_dim * log((double)orig / (rotations * 2.0 * KITE_PI)) / (2.0 * log(theta));
}

/* Pair i's inverse frequency under scaling sc (kite.h, kite_rope_inv_freq); yarn's ramp bounds
 * low/high are computed once by the caller. */
static double scaled_inv_freq(int64_t i, int64_t rot_dim, double theta, const kite_rope_scaling *sc,
                              double low, double high) {
  const double inv = pow(theta, -2.0 * (double)i / (double)rot_dim);
  if (!sc || sc->type == KITE_ROPE_SCALING_NONE) return inv;
  if (sc->type == KITE_ROPE_SCALING_LINEAR) return inv / sc->factor;
  if (sc->type == KITE_ROPE_SCALING_YARN) {
    /* ramp 0: extrapolation (the trained frequency), 1: interpolation (divided by factor) */
    double ramp = ((double)i - low) / (high - low);
    ramp = ramp < 0.0 ? 0.0 : ramp > 1.0 ? 1.0 : ramp;
    return inv / sc->factor * ramp + inv * (1.0 - ramp);
  }

  /* Llama 3.1: high frequencies kept, low ones divided by factor, a smooth blend between. */
  const double wavelen = 2.0 * KITE_PI / inv;
  const double low_wavelen = (double)sc->original_max_pos / sc->low_freq_factor;
  const double high_wavelen = (double)sc->original_max_pos / sc->high_freq_factor;
  if (wavelen < high_wavelen) return inv;
  if (wavelen > low_wavelen) return inv / sc->factor;
  const double smooth = ((double)sc->original_max_pos / wavelen - sc->low_freq_factor) /
                        (sc->high_freq_factor - sc->low_freq_factor);
  return (1.0 - smooth) * inv / sc->factor + smooth * inv;
}

static bool finite_nonneg(double v) {
  return isfinite(v) && v >= 0.0;
}

static kite_status check_scaling(const char *op, const kite_rope_scaling *sc) {
  if (!sc || sc->type == KITE_ROPE_SCALING_NONE) return KITE_OK;
  if (sc->type != KITE_ROPE_SCALING_LINEAR && sc->type != KITE_ROPE_SCALING_LLAMA3 &&
      sc->type != KITE_ROPE_SCALING_YARN)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "%s: scaling: type %d is not a kite_rope_scaling_type", op,
                          (int)sc->type);
  if (!isfinite(sc->factor) || sc->factor <= 0)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: scaling: factor %g must be finite and > 0", op,
                          sc->factor);
  if (sc->type == KITE_ROPE_SCALING_LINEAR) return KITE_OK;
  if (sc->original_max_pos < 1)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: scaling: original_max_pos %lld must be >= 1",
                          op, (long long)sc->original_max_pos);
  if (sc->type == KITE_ROPE_SCALING_YARN) {
    const double fast = sc->beta_fast != 0.0 ? sc->beta_fast : 32.0;
    const double slow = sc->beta_slow != 0.0 ? sc->beta_slow : 1.0;
    if (!isfinite(fast) || !isfinite(slow) || slow <= 0.0 || fast <= slow)
      return kite_set_error(KITE_ERR_INVALID_ARG,
                            "%s: scaling: need finite 0 < beta_slow (%g) < beta_fast (%g)", op,
                            slow, fast);
    if (!finite_nonneg(sc->mscale) || !finite_nonneg(sc->mscale_all_dim) ||
        !finite_nonneg(sc->attention_factor))
      return kite_set_error(KITE_ERR_INVALID_ARG,
                            "%s: scaling: mscale (%g), mscale_all_dim (%g) and attention_factor "
                            "(%g) must be finite and >= 0",
                            op, sc->mscale, sc->mscale_all_dim, sc->attention_factor);
    return KITE_OK;
  }
  if (!isfinite(sc->low_freq_factor) || sc->low_freq_factor <= 0 ||
      !isfinite(sc->high_freq_factor) || sc->high_freq_factor <= sc->low_freq_factor)
    return kite_set_error(
        KITE_ERR_INVALID_ARG,
        "%s: scaling: need finite 0 < low_freq_factor (%g) < high_freq_factor (%g)", op,
        sc->low_freq_factor, sc->high_freq_factor);
  return KITE_OK;
}

/* Checks rot_dim, theta and the scaling under op's name and fills inv_freq[rot_dim / 2] and
 * *attention (kite_rope_inv_freq's definition). */
static kite_status build_inv_freq(const char *op, double *inv_freq, int64_t rot_dim, double theta,
                                  const kite_rope_scaling *sc, double *attention) {
  kite_status s;
  if (rot_dim < 2 || rot_dim % 2 != 0)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: rot_dim: %lld must be even and >= 2", op,
                          (long long)rot_dim);
  if (!isfinite(theta) || theta <= 0)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: theta: %g must be finite and > 0", op, theta);
  if ((s = check_scaling(op, sc)) != KITE_OK) return s;
  if (!inv_freq) return kite_set_error(KITE_ERR_INVALID_ARG, "%s: inv_freq: is NULL", op);

  double low = 0.0, high = 1.0, att = 1.0;
  if (sc && sc->type == KITE_ROPE_SCALING_YARN) {
    const double fast = sc->beta_fast != 0.0 ? sc->beta_fast : 32.0;
    const double slow = sc->beta_slow != 0.0 ? sc->beta_slow : 1.0;
    low = yarn_corr_dim(fast, rot_dim, theta, sc->original_max_pos);
    high = yarn_corr_dim(slow, rot_dim, theta, sc->original_max_pos);
    if (!sc->no_truncate) low = floor(low), high = ceil(high);
    low = low > 0.0 ? low : 0.0;
    high = high < (double)(rot_dim - 1) ? high : (double)(rot_dim - 1);
    if (low == high) high += 0.001; /* no division by zero */
    if (sc->attention_factor != 0.0)
      att = sc->attention_factor;
    else if (sc->mscale != 0.0 && sc->mscale_all_dim != 0.0)
      att = kite_rope_yarn_mscale(sc->factor, sc->mscale) /
            kite_rope_yarn_mscale(sc->factor, sc->mscale_all_dim);
    else
      att = kite_rope_yarn_mscale(sc->factor, 1.0);
  }
  for (int64_t i = 0; i < rot_dim / 2; i++)
    inv_freq[i] = scaled_inv_freq(i, rot_dim, theta, sc, low, high);
  if (attention) *attention = att;
  return KITE_OK;
}

kite_status kite_rope_inv_freq(double *inv_freq, int64_t rot_dim, double theta,
                               const kite_rope_scaling *scaling, double *attention_factor) {
  kite_clear_error();
  kite_init();
  return build_inv_freq("rope_inv_freq", inv_freq, rot_dim, theta, scaling, attention_factor);
}

kite_status kite_rope_cache_build(float *cos_sin, int64_t max_pos, int64_t rot_dim, double theta,
                                  const kite_rope_scaling *scaling) {
  const char *op = "rope_cache_build";
  kite_clear_error();
  kite_init();
  int64_t n;
  if (!cos_sin) return kite_set_error(KITE_ERR_INVALID_ARG, "%s: cos_sin: is NULL", op);
  if (max_pos < 1)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: max_pos: %lld must be >= 1", op,
                          (long long)max_pos);
  if (rot_dim < 2 || rot_dim % 2 != 0)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: rot_dim: %lld must be even and >= 2", op,
                          (long long)rot_dim);
  if (__builtin_mul_overflow(max_pos, rot_dim, &n) || n > (int64_t)(SIZE_MAX / sizeof(float)))
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: max_pos: %lld x rot_dim %lld floats overflow",
                          op, (long long)max_pos, (long long)rot_dim);
  const int64_t half = rot_dim / 2;
  double *freq = malloc((size_t)half * sizeof *freq), att;
  if (!freq) return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "%s: inv_freq: out of memory", op);
  kite_status s = build_inv_freq(op, freq, rot_dim, theta, scaling, &att);
  if (s != KITE_OK) {
    free(freq);
    return s;
  }

  /* Row p: a cos(p * inv_freq[i]) for i < half, then the sines; angles in double. */
  for (int64_t i = 0; i < half; i++)
    for (int64_t p = 0; p < max_pos; p++) {
      const double angle = (double)p * freq[i];
      cos_sin[p * rot_dim + i] = (float)(att * cos(angle));
      cos_sin[p * rot_dim + half + i] = (float)(att * sin(angle));
    }
  free(freq);
  return KITE_OK;
}
