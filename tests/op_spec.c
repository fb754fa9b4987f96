/*
 * Valid op calls from the op table: specs, fills, scalar values (op_spec.h).
 */
#include "op_spec.h"

#include <stdlib.h>
#include <string.h>

#include "kite/dtype.h"

op_spec_cfg op_spec_default(void) {
  op_spec_cfg c;
  memset(&c, 0, sizeof c);
  static const int64_t palette[6] = {3, 32, 4, 2, 5, 3};
  memcpy(c.palette, palette, sizeof palette);
  c.fdt = (DLDataType){kDLFloat, 32, 1};
  c.qdt = (DLDataType){kDLInt, 8, 1};
  c.seed = 1;
  return c;
}

int64_t op_spec_dim(const op_spec_cfg *cfg, char l) {
  if (l >= 'a' && l <= 'f') return cfg->palette[l - 'a'];
  if (l >= 'A' && l <= 'F') return 2 * cfg->palette[l - 'A'];
  if (l == 'g') return cfg->palette[0] + 1;
  if (l == 'w') return cfg->palette[1] / 32 * 18; /* a row of b values in 18-byte blocks of 32 */
  if (l == '1') return 1;
  return -1;
}

static int spec_dtype(char c, const op_spec_cfg *cfg, DLDataType *dt) {
  switch (c) {
  case 'F':
    *dt = cfg->fdt;
    return 0;
  case 'f':
    *dt = (DLDataType){kDLFloat, 32, 1};
    return 0;
  case 'i':
  case 'p':
  case 'n':
  case 's':
    *dt = (DLDataType){kDLInt, 32, 1};
    return 0;
  case 'l':
    *dt = (DLDataType){kDLInt, 64, 1};
    return 0;
  case 'q':
    *dt = cfg->qdt;
    return 0;
  case '8':
    *dt = (DLDataType){KITE_DL_FLOAT8_E4M3FN, 8, 1};
    return 0;
  case 'u':
    *dt = (DLDataType){kDLUInt, 8, 1};
    return 0;
  default:
    return -1;
  }
}

int op_spec_parse(const char *spec, const op_spec_cfg *cfg, DLDataType *dtype, int *ndim,
                  int64_t *shape) {
  if (!spec || !spec[0] || spec[1] != ':' || spec_dtype(spec[0], cfg, dtype)) return -1;
  int n = 0;
  for (const char *p = spec + 2; *p; p++) {
    int64_t d = op_spec_dim(cfg, *p);
    if (n >= OP_SPEC_MAX_DIMS || d < 0) return -1;
    shape[n++] = d;
  }
  *ndim = n;
  return 0;
}

int op_arg_is_tensor(kite_arg_kind k) {
  return k == KITE_ARG_IN || k == KITE_ARG_IN_OPT || k == KITE_ARG_OUT || k == KITE_ARG_OUT_OPT;
}

int64_t op_spec_rows(const kite_fn_info *fn, const op_spec_cfg *cfg) {
  for (size_t i = 0; i < fn->nargs; i++) {
    if (!op_arg_is_tensor(fn->args[i].kind)) continue;
    DLDataType dt;
    int ndim;
    int64_t shape[OP_SPEC_MAX_DIMS];
    if (op_spec_parse(fn->args[i].spec, cfg, &dt, &ndim, shape)) return 0;
    return ndim ? shape[0] : 1;
  }
  return 0;
}

/* ---- fills --------------------------------------------------------------------------------- */
static uint64_t next(uint64_t *s) { /* splitmix64 */
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static int is_float(DLDataType dt) {
  return dt.code == kDLFloat || dt.code == kDLBfloat || dt.code == KITE_DL_FLOAT8_E4M3FN;
}

/* Element e of dtype dt (esize bytes) = v, as a float type stores it, or truncated to an int. */
static void store(DLDataType dt, unsigned char *e, size_t esize, double v) {
  if (dt.code == kDLFloat && esize == 4) {
    float f = (float)v;
    memcpy(e, &f, 4);
  } else if (dt.code == kDLFloat && esize == 8) {
    memcpy(e, &v, 8);
  } else if (dt.code == kDLFloat && esize == 2) {
    uint16_t h = kite_f32_to_f16((float)v);
    memcpy(e, &h, 2);
  } else if (dt.code == kDLBfloat && esize == 2) {
    uint16_t h = kite_f32_to_bf16((float)v);
    memcpy(e, &h, 2);
  } else if (dt.code == KITE_DL_FLOAT8_E4M3FN && esize == 1) {
    *e = kite_f32_to_fp8_e4m3((float)v);
  } else if (!is_float(dt)) {
    int64_t x = (int64_t)v; /* little-endian host: the low esize bytes are the value */
    memcpy(e, &x, esize < 8 ? esize : 8);
  }
}

void op_spec_fill(void *buf, size_t bytes, DLDataType dt, char rule, int64_t rows, uint64_t seed) {
  unsigned char *b = buf;
  size_t esize = dt.bits >= 8 ? (size_t)dt.bits / 8 : 1;
  uint64_t st = seed;
  memset(b, 0, bytes);
  for (size_t i = 0; i + esize <= bytes; i += esize) {
    unsigned char *e = b + i;
    const size_t k = i / esize;
    switch (rule) {
    case 'F':
    case 'f':
      store(dt, e, esize, 0.25 + 0.75 * (double)(next(&st) >> 11) * 0x1.0p-53);
      break;
    case 'p': /* cu_q_lens: every query in the first sequence */
      store(dt, e, esize, k == 0 ? 0.0 : (double)rows);
      break;
    case 'n': /* seq_lens */
      store(dt, e, esize, (double)rows);
      break;
    case 's': /* group sizes: every row in the first group */
      store(dt, e, esize, k == 0 ? (double)rows : 0.0);
      break;
    case 'q': /* int8 codes in [-3, 3]; fp8 values in [-1, 1] */
    case '8':
      store(dt, e, esize,
            is_float(dt) ? ((int)(next(&st) % 9) - 4) * 0.25 : (int)(next(&st) % 7) - 3);
      break;
    case 'u':
      for (size_t j = 0; j < esize; j++) e[j] = (unsigned char)next(&st);
      break;
    default: /* i, l: zeros */
      break;
    }
  }
}

int op_spec_value(const kite_arg_info *arg, const op_spec_cfg *cfg, kite_comm *comm,
                  kite_value *out) {
  memset(out, 0, sizeof *out);
  const char *s = arg->spec;
  char *end = NULL;
  const int letter =
      s[0] && !s[1] && ((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z'));
  switch (arg->kind) {
  case KITE_ARG_COMM:
    out->comm = comm;
    return 0;
  case KITE_ARG_FLOAT:
    out->f = strtod(s, &end);
    break;
  case KITE_ARG_INT:
  case KITE_ARG_INT64:
    if (letter) return (out->i = op_spec_dim(cfg, s[0])) < 0 ? -1 : 0;
    out->i = strtoll(s, &end, 10);
    break;
  case KITE_ARG_UINT64:
    if (letter) return (out->u = (uint64_t)op_spec_dim(cfg, s[0])) == (uint64_t)-1 ? -1 : 0;
    out->u = strtoull(s, &end, 10);
    break;
  default:
    return -1;
  }
  return s[0] && end && !*end ? 0 : -1;
}

/* ---- tensors and calls --------------------------------------------------------------------- */
int op_tensor_alloc(op_tensor *t, DLDataType dt, int ndim, const int64_t *shape, size_t min_bytes) {
  op_tensor_free(t);
  if (ndim < 0 || ndim > OP_SPEC_MAX_DIMS) return -1;
  size_t bytes = dt.bits >= 8 ? (size_t)dt.bits / 8 : 1;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] < 0 || (shape[d] && bytes > ((size_t)1 << 40) / (size_t)shape[d])) return -1;
    bytes *= (size_t)shape[d];
    t->shape[d] = shape[d];
  }
  if (bytes < min_bytes) bytes = min_bytes;
  t->buf = malloc(bytes ? bytes : 1);
  if (!t->buf) return -1;
  t->bytes = bytes;
  t->t.data = t->buf;
  t->t.device = (DLDevice){kDLCPU, 0};
  t->t.ndim = ndim;
  t->t.dtype = dt;
  t->t.shape = t->shape;
  return 0;
}

void op_tensor_free(op_tensor *t) {
  free(t->buf);
  memset(t, 0, sizeof *t);
}

int op_arg_index(const kite_fn_info *fn, const char *name) {
  for (size_t i = 0; i < fn->nargs; i++)
    if (!strcmp(fn->args[i].name, name)) return (int)i;
  return -1;
}

int op_call_build(op_call *c, size_t fn, const op_spec_cfg *cfg, kite_comm *comm) {
  memset(c, 0, sizeof *c);
  const kite_fn_info *f = kite_fn_get(fn);
  if (!f || f->nargs > OP_SPEC_MAX_ARGS) return -1;
  c->fn = fn;
  c->info = f;
  c->rows = op_spec_rows(f, cfg);
  for (size_t i = 0; i < f->nargs; i++) {
    const kite_arg_info *a = &f->args[i];
    if (!op_arg_is_tensor(a->kind)) {
      if (op_spec_value(a, cfg, comm, &c->v[i])) goto fail;
      continue;
    }
    DLDataType dt;
    int ndim;
    int64_t shape[OP_SPEC_MAX_DIMS];
    op_tensor *t = &c->t[i];
    if (op_spec_parse(a->spec, cfg, &dt, &ndim, shape) ||
        op_tensor_alloc(t, dt, ndim, shape, cfg->min_bytes))
      goto fail;
    op_spec_fill(t->buf, t->bytes, dt, a->spec[0], c->rows, cfg->seed * 1000003u + i);
    c->v[i].t = &t->t;
  }
  return 0;
fail:
  op_call_free(c);
  return -1;
}

kite_status op_call_run(kite_ctx *ctx, const op_call *c) {
  return kite_fn_call(ctx, c->fn, c->v, c->info ? c->info->nargs : 0);
}

void op_call_free(op_call *c) {
  for (int i = 0; i < OP_SPEC_MAX_ARGS; i++) op_tensor_free(&c->t[i]);
}
