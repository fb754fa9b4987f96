/*
 * Tensor validation for the op front-ends: a DLTensor becomes a kite_tensor (address with the
 * byte offset applied, strides filled in, element count) only once every field has been checked,
 * so that the sizes kernels later multiply can never overflow and no kernel reads outside what
 * the caller described. Messages read "<op>: <arg>: <problem>".
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/internal.h"

static const char *dtype_str(kite_dtype t) {
  return kite_dtype_name(t);
}

/* kite dtype <-> DLPack type; a boolean or unsigned 8-bit tensor is U8 (masks: nonzero = true). */
static const struct {
  kite_dtype t;
  uint8_t code, bits;
} g_dl_types[] = {
    {KITE_DTYPE_F32, kDLFloat, 32},
    {KITE_DTYPE_F16, kDLFloat, 16},
    {KITE_DTYPE_BF16, kDLBfloat, 16},
    {KITE_DTYPE_I32, kDLInt, 32},
    {KITE_DTYPE_I8, kDLInt, 8},
    {KITE_DTYPE_F64, kDLFloat, 64},
    {KITE_DTYPE_U8, kDLUInt, 8},
    {KITE_DTYPE_U8, KITE_DL_BOOL, 8},
    {KITE_DTYPE_FP8_E4M3, KITE_DL_FLOAT8_E4M3FN, 8},
    {KITE_DTYPE_I64, kDLInt, 64},
};

static bool dtype_from_dlpack(DLDataType d, kite_dtype *out) {
  if (d.lanes != 1) return false;
  for (size_t i = 0; i < sizeof g_dl_types / sizeof g_dl_types[0]; i++)
    if (d.code == g_dl_types[i].code && d.bits == g_dl_types[i].bits) {
      *out = g_dl_types[i].t;
      return true;
    }
  return false;
}

DLDataType kite_dtype_dlpack(kite_dtype t) {
  for (size_t i = 0; i < sizeof g_dl_types / sizeof g_dl_types[0]; i++)
    if (g_dl_types[i].t == t) return (DLDataType){g_dl_types[i].code, g_dl_types[i].bits, 1};
  return (DLDataType){kDLFloat, 0, 0};
}

/* Bytes from the first element to one past the last one. Only for checked tensors, whose extent
 * kite_tensor_check proved to fit in int64. */
static int64_t tensor_bytes(const kite_tensor *t) {
  if (t->numel == 0) return 0;
  int64_t last = 0;
  for (int i = 0; i < t->ndim; i++) last += (t->shape[i] - 1) * t->strides[i];
  return (last + 1) * (int64_t)kite_dtype_size(t->dtype);
}

kite_status kite_check_ctx(const kite_ctx *ctx, const char *op) {
  if (!ctx) return kite_set_error(KITE_ERR_INVALID_ARG, "%s: ctx is NULL", op);
  return KITE_OK;
}

kite_status kite_tensor_check(const kite_ctx *ctx, const char *op, const char *arg,
                              const DLTensor *t, kite_tensor *out) {
  if (!ctx) return kite_set_error(KITE_ERR_INVALID_ARG, "%s: ctx is NULL", op);
  if (!t) return kite_set_error(KITE_ERR_INVALID_ARG, "%s: %s: tensor is NULL", op, arg);

  const DLDevice want = ctx->p.device;
  if (t->device.device_type != want.device_type || t->device.device_id != want.device_id)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "%s: %s: tensor is on %s:%d but the ctx is on %s:%d", op, arg,
                          kite_device_name(t->device.device_type), t->device.device_id,
                          kite_device_name(want.device_type), want.device_id);

  kite_dtype dt;
  if (!dtype_from_dlpack(t->dtype, &dt))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: %s: dtype %u/%ux%u is not supported", op, arg,
                          (unsigned)t->dtype.code, (unsigned)t->dtype.bits,
                          (unsigned)t->dtype.lanes);

  if (t->ndim < 1 || t->ndim > KITE_MAX_DIMS)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: %s: rank %d is outside [1, %d]", op, arg,
                          t->ndim, KITE_MAX_DIMS);
  if (!t->shape) return kite_set_error(KITE_ERR_INVALID_ARG, "%s: %s: shape is NULL", op, arg);

  /* The product of the dims (zero dims counted as 1) must fit, so that the row counts and
   * compact strides derived from any subset of the dims fit too. */
  int64_t numel = 1, bound = 1;
  for (int i = 0; i < t->ndim; i++) {
    const int64_t n = t->shape[i];
    if (n < 0)
      return kite_set_error(KITE_ERR_INVALID_ARG, "%s: %s: dim %d has negative size %lld", op, arg,
                            i, (long long)n);
    if (__builtin_mul_overflow(bound, n > 0 ? n : 1, &bound))
      return kite_set_error(KITE_ERR_INVALID_ARG, "%s: %s: element count overflows int64", op, arg);
    numel *= n; /* equals bound until a zero dim makes it 0 for good */
  }

  /* Filled in place (no temporary, no zeroing of unused dims): this runs on every call. */
  kite_tensor *r = out;
  r->dtype = dt;
  r->ndim = t->ndim;
  r->numel = numel;
  const int64_t esize = (int64_t)kite_dtype_size(dt);
  int64_t compact = 1, last = 0, term;
  bool extent_ok = true;
  for (int i = t->ndim - 1; i >= 0; i--) {
    const int64_t n = t->shape[i];
    int64_t st = compact;
    /* a dim of size 1, or any dim of an empty tensor, addresses nothing through its stride:
     * whatever the caller gave there (NumPy's 0 for some empty arrays, huge or negative values)
     * is accepted and kernels get the compact value, never a huge one that overflows their
     * offset arithmetic */
    if (t->strides && n > 1 && numel > 0) {
      st = t->strides[i];
      if (st < 0)
        return kite_set_error(KITE_ERR_INVALID_ARG, "%s: %s: dim %d has negative stride %lld", op,
                              arg, i, (long long)st);
    }
    r->shape[i] = n;
    r->strides[i] = st;
    compact *= n; /* bounded by the product checked above */
    /* offset of the last element, for the extent check below */
    if (numel > 0)
      extent_ok &=
          !__builtin_mul_overflow(n - 1, st, &term) && !__builtin_add_overflow(last, term, &last);
  }
  /* Last element offset, then bytes: both must fit, as must the end address. */
  int64_t bytes = 0;
  if (numel > 0 && (!extent_ok || __builtin_add_overflow(last, 1, &bytes) ||
                    __builtin_mul_overflow(bytes, esize, &bytes)))
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: %s: memory extent overflows int64", op, arg);

  if (numel > 0 && !t->data)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "%s: %s: data is NULL but the tensor has %lld elements", op, arg,
                          (long long)numel);
  if (t->data) {
    uintptr_t addr;
    kite_status s = kite_device_address(ctx, t->data, t->byte_offset, (uint64_t)bytes, &addr);
    if (s != KITE_OK) {
      char why[256];
      snprintf(why, sizeof why, "%s", kite_last_error());
      return kite_set_error(s, "%s: %s: %s", op, arg, why);
    }
    if (addr % (uintptr_t)esize != 0)
      return kite_set_error(KITE_ERR_INVALID_ARG,
                            "%s: %s: address %p is not aligned to %s (%lld bytes)", op, arg,
                            (void *)addr, dtype_str(dt), (long long)esize);
    r->data = (void *)addr;
  } else {
    /* an empty tensor may come without data; kernels still form (empty) ranges from it */
    static max_align_t nothing;
    r->data = &nothing;
  }
  return KITE_OK;
}

kite_status kite_tensor_require_float(const char *op, const char *arg, const kite_tensor *t) {
  if (t->dtype == KITE_DTYPE_F32 || t->dtype == KITE_DTYPE_F16 || t->dtype == KITE_DTYPE_BF16)
    return KITE_OK;
  return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: %s: dtype %s is not supported (f32, f16, bf16)",
                        op, arg, dtype_str(t->dtype));
}

kite_status kite_tensor_require_dtype(const char *op, const char *arg, const kite_tensor *t,
                                      kite_dtype want) {
  if (t->dtype == want) return KITE_OK;
  return kite_set_error(KITE_ERR_INVALID_ARG, "%s: %s: dtype %s, expected %s", op, arg,
                        dtype_str(t->dtype), dtype_str(want));
}

kite_status kite_tensor_require_ndim(const char *op, const char *arg, const kite_tensor *t,
                                     int ndim) {
  if (t->ndim == ndim) return KITE_OK;
  char buf[160];
  return kite_set_error(KITE_ERR_INVALID_ARG, "%s: %s: rank %d (shape %s), expected rank %d", op,
                        arg, t->ndim, kite_shape_str(t, buf, sizeof buf), ndim);
}

kite_status kite_tensor_rows(const char *op, const char *arg, const kite_tensor *t, int64_t *rows,
                             int64_t *cols, int64_t *row_stride) {
  const int last = t->ndim - 1;
  const int64_t n = t->shape[last];
  if (n > 1 && t->strides[last] != 1)
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "%s: %s: last dim must be unit-stride (stride %lld)", op, arg,
                          (long long)t->strides[last]);
  int64_t r = 1;
  for (int i = 0; i < last; i++) r *= t->shape[i];

  /* Walking outwards, each leading dim of size > 1 must step exactly over the ones inside it. */
  int64_t stride = n, want = -1;
  for (int i = last - 1; i >= 0 && r > 0; i--) {
    const int64_t d = t->shape[i];
    if (d == 1) continue;
    if (want < 0) {
      stride = t->strides[i];
    } else if (t->strides[i] != want) {
      char buf[160];
      return kite_set_error(KITE_ERR_INVALID_ARG,
                            "%s: %s: leading dims of shape %s do not collapse into one row stride "
                            "(dim %d has stride %lld, expected %lld)",
                            op, arg, kite_shape_str(t, buf, sizeof buf), i,
                            (long long)t->strides[i], (long long)want);
    }
    if (__builtin_mul_overflow(t->strides[i], d, &want)) want = -2; /* no stride can match */
  }
  *rows = r;
  *cols = n;
  *row_stride = stride;
  return KITE_OK;
}

bool kite_tensor_same_lead(const kite_tensor *a, const kite_tensor *b) {
  if (a->ndim != b->ndim) return false;
  for (int i = 0; i < a->ndim - 1; i++)
    if (a->shape[i] != b->shape[i]) return false;
  return true;
}

kite_status kite_tensor_require_same_shape(const char *op, const char *arg, const kite_tensor *t,
                                           const kite_tensor *ref_t, const char *ref_arg) {
  if (kite_tensor_same_lead(t, ref_t) && t->shape[t->ndim - 1] == ref_t->shape[ref_t->ndim - 1])
    return KITE_OK;
  char a[160], b[160];
  return kite_set_error(KITE_ERR_INVALID_ARG, "%s: %s: shape %s does not match %s %s", op, arg,
                        kite_shape_str(t, a, sizeof a), ref_arg,
                        kite_shape_str(ref_t, b, sizeof b));
}

const char *kite_shape_str(const kite_tensor *t, char *buf, size_t n) {
  if (n == 0) return buf;
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < t->ndim && used < n; i++) {
    int w = snprintf(buf + used, n - used, "%s%lld", i ? ", " : "[", (long long)t->shape[i]);
    if (w < 0) break;
    used += (size_t)w;
  }
  if (used < n) snprintf(buf + used, n - used, "%s]", t->ndim ? "" : "[");
  return buf;
}

kite_status kite_tensor_require_compact(const char *op, const char *arg, const kite_tensor *t) {
  int64_t want = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    if (t->shape[i] > 1 && t->strides[i] != want)
      return kite_set_error(
          KITE_ERR_INVALID_ARG,
          "%s: %s: must be compact row-major (dim %d has stride %lld, expected %lld)", op, arg, i,
          (long long)t->strides[i], (long long)want);
    want *= t->shape[i];
  }
  return KITE_OK;
}

kite_status kite_tensor_require_no_overlap(const char *op, const char *arg, const kite_tensor *t) {
  if (t->numel <= 1) return KITE_OK;
  /* Dims of size > 1 by increasing stride: no two elements share an address when each stride
   * steps past everything the smaller-stride dims span. */
  int dim[KITE_MAX_DIMS], m = 0;
  for (int i = 0; i < t->ndim; i++) {
    if (t->shape[i] <= 1) continue;
    int j = m++;
    for (; j > 0 && t->strides[dim[j - 1]] > t->strides[i]; j--) dim[j] = dim[j - 1];
    dim[j] = i;
  }
  int64_t span = 1; /* elements from the first to one past the last of the inner dims */
  for (int k = 0; k < m; k++) {
    const int i = dim[k];
    if (t->strides[i] < span)
      return kite_set_error(KITE_ERR_INVALID_ARG,
                            "%s: %s: elements overlap in memory (dim %d has stride %lld < %lld); "
                            "an output needs distinct addresses",
                            op, arg, i, (long long)t->strides[i], (long long)span);
    span += t->strides[i] * (t->shape[i] - 1); /* within the extent checked at kite_tensor_check */
  }
  return KITE_OK;
}

kite_status kite_tensor_require_disjoint(const char *op, const char *arg, const kite_tensor *t,
                                         const kite_tensor *other, const char *other_arg) {
  const int64_t a = tensor_bytes(t), b = tensor_bytes(other);
  if (a == 0 || b == 0) return KITE_OK;
  const uintptr_t a0 = (uintptr_t)t->data, b0 = (uintptr_t)other->data;
  if (a0 + (uintptr_t)a <= b0 || b0 + (uintptr_t)b <= a0) return KITE_OK;
  return kite_set_error(KITE_ERR_INVALID_ARG, "%s: %s: overlaps %s in memory", op, arg, other_arg);
}

kite_status kite_check_rowwise(const kite_ctx *ctx, const char *op, const DLTensor *x,
                               const DLTensor *y, int x_per_y, kite_rowwise *out) {
  kite_tensor *xt = &out->xt, *yt = &out->yt;
  kite_status s;
  int64_t yr;
  if ((s = kite_tensor_check(ctx, op, "x", x, xt)) != KITE_OK) return s;
  if ((s = kite_tensor_check(ctx, op, "y", y, yt)) != KITE_OK) return s;
  if ((s = kite_tensor_require_float(op, "x", xt)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, "y", yt, xt->dtype)) != KITE_OK) return s;
  if (x_per_y == 1) {
    if ((s = kite_tensor_require_same_shape(op, "y", yt, xt, "x")) != KITE_OK) return s;
  } else {
    char a[160], b[160];
    const int64_t xn = xt->shape[xt->ndim - 1], yn = yt->shape[yt->ndim - 1];
    if (xn % x_per_y != 0)
      return kite_set_error(KITE_ERR_INVALID_ARG, "%s: x: last dim %lld is not a multiple of %d",
                            op, (long long)xn, x_per_y);
    if (!kite_tensor_same_lead(yt, xt) || yn != xn / x_per_y)
      return kite_set_error(KITE_ERR_INVALID_ARG,
                            "%s: y: shape %s does not fit x %s (same leading dims, last dim %lld)",
                            op, kite_shape_str(yt, a, sizeof a), kite_shape_str(xt, b, sizeof b),
                            (long long)(xn / x_per_y));
  }
  if ((s = kite_tensor_rows(op, "x", xt, &out->rows, &out->x_cols, &out->x_stride)) != KITE_OK)
    return s;
  if ((s = kite_tensor_rows(op, "y", yt, &yr, &out->y_cols, &out->y_stride)) != KITE_OK) return s;
  if ((s = kite_tensor_require_no_overlap(op, "y", yt)) != KITE_OK) return s;
  out->dtype = xt->dtype;
  out->x = xt->data;
  out->y = yt->data;
  return KITE_OK;
}

kite_status kite_rowwise_begin(kite_ctx *ctx, const char *op, const DLTensor *x, const DLTensor *y,
                               int x_per_y, kite_rowwise *out) {
  kite_clear_error();
  kite_init();
  kite_status s;
  if ((s = kite_check_ctx(ctx, op)) != KITE_OK) return s;
  return kite_check_rowwise(ctx, op, x, y, x_per_y, out);
}

kite_status kite_tensor_check_float_rows(const kite_ctx *ctx, const char *op, const char *arg,
                                         const DLTensor *t, kite_tensor *out, int64_t *rows,
                                         int64_t *cols, int64_t *stride) {
  kite_status s;
  if ((s = kite_tensor_check(ctx, op, arg, t, out)) != KITE_OK) return s;
  if ((s = kite_tensor_require_float(op, arg, out)) != KITE_OK) return s;
  return kite_tensor_rows(op, arg, out, rows, cols, stride);
}

kite_status kite_tensor_check_like(const kite_ctx *ctx, const char *op, const char *arg,
                                   const DLTensor *t, const kite_tensor *ref_t, const char *ref_arg,
                                   kite_tensor *out, int64_t *stride) {
  kite_status s;
  int64_t rows, cols;
  if ((s = kite_tensor_check(ctx, op, arg, t, out)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, arg, out, ref_t->dtype)) != KITE_OK) return s;
  if ((s = kite_tensor_require_same_shape(op, arg, out, ref_t, ref_arg)) != KITE_OK) return s;
  return kite_tensor_rows(op, arg, out, &rows, &cols, stride);
}

bool kite_tensor_same_view(const kite_tensor *a, const kite_tensor *b) {
  if (a->data != b->data || a->ndim != b->ndim) return false;
  for (int i = 0; i < a->ndim; i++)
    if (a->shape[i] != b->shape[i] || (a->shape[i] > 1 && a->strides[i] != b->strides[i]))
      return false;
  return true;
}

kite_status kite_tensor_check_out(const char *op, const char *arg, const kite_tensor *out,
                                  const kite_tensor *alias, const char *alias_arg,
                                  const kite_tensor *other, const char *other_arg) {
  kite_status s;
  if ((s = kite_tensor_require_no_overlap(op, arg, out)) != KITE_OK) return s;
  if (alias && !kite_tensor_same_view(out, alias))
    if ((s = kite_tensor_require_disjoint(op, arg, out, alias, alias_arg)) != KITE_OK) return s;
  if (other && (s = kite_tensor_require_disjoint(op, arg, out, other, other_arg)) != KITE_OK)
    return s;
  return KITE_OK;
}

kite_status kite_tensor_check_vector(const kite_ctx *ctx, const char *op, const char *arg,
                                     const DLTensor *v, kite_dtype t, int64_t n, const char *n_is,
                                     kite_tensor *vt, const void **data) {
  kite_status s;
  *data = NULL;
  if (!v) return KITE_OK;
  if ((s = kite_tensor_check(ctx, op, arg, v, vt)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, arg, vt, 1)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, arg, vt, t)) != KITE_OK) return s;
  if (vt->shape[0] != n)
    return kite_set_error(KITE_ERR_INVALID_ARG, "%s: %s: length %lld, expected %lld%s%s%s", op, arg,
                          (long long)vt->shape[0], (long long)n, n_is ? " (" : "", n_is ? n_is : "",
                          n_is ? ")" : "");
  if ((s = kite_tensor_require_compact(op, arg, vt)) != KITE_OK) return s;
  *data = vt->data;
  return KITE_OK;
}

kite_status kite_tensor_check_ids(const kite_ctx *ctx, const char *op, const char *arg,
                                  const DLTensor *ids, kite_tensor *it) {
  kite_status s;
  if ((s = kite_tensor_check(ctx, op, arg, ids, it)) != KITE_OK) return s;
  if ((s = kite_tensor_require_ndim(op, arg, it, 1)) != KITE_OK) return s;
  if ((s = kite_tensor_require_dtype(op, arg, it, KITE_DTYPE_I32)) != KITE_OK) return s;
  return kite_tensor_require_compact(op, arg, it);
}
