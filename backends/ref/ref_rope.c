/*
 * Rotary position embedding, in place on q[tokens, hq, head_dim] and k[tokens, hkv, head_dim].
 * Cache row p of cos_sin[max_pos, rot_dim] holds cos[0..half) then sin[0..half), half =
 * rot_dim/2. Pair i (neox: dims i and i + half; gptj: dims 2i and 2i + 1) turns by angle i:
 *   (x0, x1) -> (x0 cos - x1 sin, x1 cos + x0 sin).
 * Dims from rot_dim on pass through untouched. rope_backward turns by -angle (sin negated): the
 * transpose of the rotation, which carries gradients of the rotated pair back to the input.
 */
#include "ref.h"

/* Rotates the head whose first element is x[at] by the angles of cache row c. */
static void rotate_head(kite_dtype t, void *x, int64_t at, const float *c, int64_t rot_dim,
                        kite_rope_style style, double sign) {
  const int64_t half = rot_dim / 2;
  for (int64_t i = 0; i < half; i++) {
    const int64_t i0 = at + (style == KITE_ROPE_NEOX ? i : 2 * i);
    const int64_t i1 = at + (style == KITE_ROPE_NEOX ? i + half : 2 * i + 1);
    const double x0 = kite_load_f32(t, x, i0);
    const double x1 = kite_load_f32(t, x, i1);
    const double cos_i = c[i], sin_i = sign * c[half + i];
    kite_store_f64(t, x, i0, x0 * cos_i - x1 * sin_i);
    kite_store_f64(t, x, i1, x1 * cos_i + x0 * sin_i);
  }
}

kite_status ref_rope_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_rope_args *a = args;
  if (!a) return kite_set_error(KITE_ERR_INVALID_ARG, "rope: ref: NULL args");
  if (a->op != KITE_OP_ROPE && a->op != KITE_OP_ROPE_BACKWARD)
    return kite_set_error(KITE_ERR_UNSUPPORTED, "rope: ref: op %s is not rope", ref_op_str(a->op));
  if (!ref_is_float(a->dtype))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "rope: ref: dtype %s is not supported",
                          ref_dtype_str(a->dtype));
  if (a->style != KITE_ROPE_NEOX && a->style != KITE_ROPE_GPTJ)
    return kite_set_error(KITE_ERR_INVALID_ARG, "rope: ref: unknown style %d", (int)a->style);
  if (a->rot_dim < 0 || a->rot_dim % 2 != 0 || a->rot_dim > a->head_dim)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "rope: ref: rot_dim %lld must be even and in [0, head_dim %lld]",
                          (long long)a->rot_dim, (long long)a->head_dim);
  if (a->tokens <= 0) return KITE_OK;
  if (!a->positions || (a->hkv > 0 && !a->k))
    return kite_set_error(KITE_ERR_INVALID_ARG, "rope: ref: NULL %s",
                          a->positions ? "k with hkv > 0" : "positions");

  const double sign = a->op == KITE_OP_ROPE_BACKWARD ? -1.0 : 1.0;
  /* Check every position before touching q or k, so a bad call leaves them as they were. */
  for (int64_t t = 0; t < a->tokens; t++) {
    if (a->positions[t] < 0 || a->positions[t] >= a->max_pos)
      return kite_set_error(
          KITE_ERR_INVALID_ARG, "%s: positions[%lld] = %d is outside the cos/sin cache [0, %lld)",
          ref_op_str(a->op), (long long)t, (int)a->positions[t], (long long)a->max_pos);
  }

  for (int64_t t = 0; t < a->tokens; t++) {
    const float *c = a->cos_sin + (int64_t)a->positions[t] * a->rot_dim;
    for (int64_t h = 0; h < a->hq; h++)
      rotate_head(a->dtype, a->q, t * a->q_stride_t + h * a->q_stride_h, c, a->rot_dim, a->style,
                  sign);
    for (int64_t h = 0; h < a->hkv; h++)
      rotate_head(a->dtype, a->k, t * a->k_stride_t + h * a->k_stride_h, c, a->rot_dim, a->style,
                  sign);
  }
  return KITE_OK;
}
