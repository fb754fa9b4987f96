/*
 * libFuzzer target: argument validation of every public op function, through the op table
 * (kite/ops.def, called with kite_fn_call). The input picks a function, any of kite_fn_count():
 * every op's own and the further ones (add_*_norm_backward); a palette and the call's dtypes;
 * then each argument in the table's order: a tensor starts as the table's spec with that palette
 * (tests/op_spec.h) and is mutated as the input says (dtype, rank, shape, strides, byte offset,
 * device, NULL or not), a scalar is the table's valid value or one from the input. Each tensor's
 * data is a heap buffer of exactly the bytes its own shape and strides address (this file
 * computes that extent independently of kite), so a kernel that reads or writes past what
 * validation admitted is an AddressSanitizer report, not a wild pointer. A layout this file
 * cannot size (negative stride or shape, overflow, bad rank) gets a 1-byte buffer: kite must
 * refuse it.
 *
 * Input bytes, a byte past the end reading as 0 (the valid choice everywhere):
 *   function % kite_fn_count(), palette a..f, dtypes, template switch (>= 240: tensors of any
 *   dtype and rank), then per argument: a tensor's mutation, operands and fill; a scalar's
 *   choice and operands. So fuzz/corpus/args/fnN (N, then the palette a 3, b 32, c 4, d 2, e 5,
 *   f 3) is function N's valid call in f32, and fnN-bf16 the same in bf16 with fp8 codes.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kite/kite.h"
#include "op_spec.h"

#define MAX_EXTENT (4 << 20)

typedef struct reader {
  const uint8_t *p;
  size_t n, i;
} reader;

static uint8_t u8(reader *r) {
  return r->i < r->n ? r->p[r->i++] : 0;
}
static uint32_t u32(reader *r) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v = v << 8 | u8(r);
  return v;
}
static int64_t i64(reader *r) {
  return (int64_t)((uint64_t)u32(r) << 32 | u32(r));
}

/* A few well-formed types, most of the time, or anything. */
static DLDataType any_dtype(reader *r) {
  static const DLDataType ok[] = {
      {kDLFloat, 32, 1}, {kDLFloat, 16, 1},    {kDLBfloat, 16, 1},
      {kDLInt, 32, 1},   {kDLInt, 8, 1},       {kDLUInt, 8, 1},
      {kDLFloat, 64, 1}, {KITE_DL_BOOL, 8, 1}, {KITE_DL_FLOAT8_E4M3FN, 8, 1},
      {kDLInt, 64, 1}};
  uint8_t c = u8(r);
  if (c < 240) return ok[c % (sizeof ok / sizeof ok[0])];
  DLDataType t = {u8(r), u8(r), (uint16_t)(u8(r) % 3)};
  return t;
}

typedef struct slot {
  DLTensor t;
  int64_t shape[OP_SPEC_MAX_DIMS], strides[OP_SPEC_MAX_DIMS];
  void *buf;
  int present;
} slot;

/* Bytes addressed by t from data + byte_offset: -1 when this file cannot size it (bad rank,
 * negative shape, negative stride on a dimension of more than one element), -2 when too large to
 * allocate. */
static int64_t extent(const DLTensor *t) {
  if (t->ndim < 0 || t->ndim > 8 || t->dtype.lanes != 1 || t->dtype.bits % 8) return -1;
  __int128 last = 0, compact = 1;
  int empty = 0;
  for (int d = t->ndim - 1; d >= 0; d--) {
    int64_t n = t->shape[d];
    if (n < 0) return -1;
    if (n == 0) empty = 1;
    __int128 st = t->strides ? t->strides[d] : compact;
    /* a dimension of one element never moves by its stride, whatever its sign (DLPack) */
    if (t->strides && st < 0 && n > 1) return -1;
    if (n > 0) last += (__int128)(n - 1) * st;
    if (n > MAX_EXTENT) return -2;
    compact *= n ? n : 1;
    if (last > MAX_EXTENT || compact > MAX_EXTENT) return -2;
  }
  if (empty) return 0;
  __int128 bytes = (last + 1) * (t->dtype.bits / 8);
  return bytes > MAX_EXTENT ? -2 : (int64_t)bytes;
}

/* Values that break the rules now and then: ids and lengths a little out of range, negative
 * floats. */
static void fill(slot *s, uint8_t seed, int64_t bytes) {
  uint8_t *b = s->buf;
  int64_t esize = s->t.dtype.bits / 8;
  for (int64_t i = 0; i + esize <= bytes; i += esize) {
    uint8_t v = (uint8_t)(seed + 31 * (i / esize));
    if (s->t.dtype.code == kDLInt && esize == 4) {
      int32_t x = (int32_t)(v % 48) - 4; /* ids, positions, slots, lengths: mostly in range */
      memcpy(b + i, &x, 4);
    } else if (s->t.dtype.code == kDLFloat && esize == 4) {
      float x = ((float)(v % 64) - 32.0f) / 8.0f;
      memcpy(b + i, &x, 4);
    } else if (esize == 2) {
      uint16_t x = (uint16_t)(0x3c00 + (v % 32) * 8); /* finite in f16 and bf16 */
      if (v & 1) x |= 0x8000;
      memcpy(b + i, &x, 2);
    } else {
      memset(b + i, v % 64, (size_t)esize);
    }
  }
}

/* Argument a's tensor from its spec (or, raw, of any dtype and rank), then mutated as the input
 * says. Returns -1 to skip the case (a layout too large to allocate). */
static int build(slot *s, reader *r, const op_spec_cfg *c, const kite_arg_info *a, int64_t rows,
                 int raw) {
  memset(s, 0, sizeof *s);
  s->t.device = (DLDevice){kDLCPU, 0};
  uint8_t m = u8(r); /* mutation: < 160 none, >= 250 a NULL tensor (required or not) */
  s->present = m < 250;
  if (!s->present) return 0;
  char rule = 'u';
  if (!raw && op_spec_parse(a->spec, c, &s->t.dtype, &s->t.ndim, s->shape) == 0) {
    rule = a->spec[0];
  } else {
    s->t.dtype = any_dtype(r);
    s->t.ndim = 1 + u8(r) % 4;
    for (int d = 0; d < s->t.ndim; d++) s->shape[d] = c->palette[u8(r) % 6];
  }
  s->t.shape = s->shape;
  if (m >= 160 && m < 250) {
    uint8_t what = u8(r), d = (uint8_t)(u8(r) % 9);
    switch (what % 8) {
    case 0:
      s->t.dtype = any_dtype(r);
      break;
    case 1: /* a dimension more or less, or a rank kite does not take */
      s->t.ndim = (what & 8) ? s->t.ndim - 1 : (what & 16 ? 9 : s->t.ndim + 1);
      if (s->t.ndim > 0 && s->t.ndim < 9) s->shape[s->t.ndim - 1] = c->palette[d % 6];
      break;
    case 2:
      s->shape[d % 8] = (int8_t)u8(r);
      break;
    case 3:
      s->shape[d % 8] = i64(r);
      break;
    case 4:
      s->t.byte_offset = (uint64_t)(u8(r) % 8) * 2;
      break;
    case 5:
      s->t.device = (DLDevice){(DLDeviceType)(u8(r) % 16), u8(r) % 2};
      break;
    default: { /* explicit strides: padded, broadcast, overlapping, negative or huge */
      int64_t run = 1;
      for (int i = (s->t.ndim < 9 ? s->t.ndim : 9) - 1; i >= 0; i--) {
        uint8_t b = u8(r);
        s->strides[i] = b < 128   ? run
                        : b < 200 ? run * (1 + b % 3)
                        : b < 240 ? (b % 5) - 1
                                  : i64(r);
        run *= s->shape[i] > 0 && s->shape[i] < (1 << 20) ? s->shape[i] : 1;
      }
      s->t.strides = s->strides;
    }
    }
  }
  if (s->t.ndim < 0) s->t.ndim = 0;
  int64_t bytes = extent(&s->t);
  if (bytes == -2) return -1;
  if (bytes == 0 && (m & 1)) return 0; /* empty tensor with NULL data */
  size_t n = bytes < 0 ? 1 : (size_t)bytes + s->t.byte_offset;
  s->buf = malloc(n ? n : 1);
  if (!s->buf) return -1;
  s->t.data = s->buf;
  if (bytes > 0) {
    uint8_t f = u8(r); /* < 128: the table's fill (valid ids, lengths, temperatures) */
    const int64_t filled = bytes + (int64_t)s->t.byte_offset;
    if (f < 128)
      op_spec_fill(s->buf, (size_t)filled, s->t.dtype, rule, rows, f);
    else
      fill(s, f, filled);
  }
  return 0;
}

static kite_ctx *g_ctx;
static kite_comm *g_comm; /* one rank: its collectives never wait */
/* FUZZ_ARGS_STATS=1: calls and accepted calls per function at exit, to see that cases reach
 * kernels. */
static long *g_calls, *g_ok;

static void print_stats(void) {
  for (size_t i = 0; i < kite_fn_count(); i++)
    fprintf(stderr, "%-26s %8ld calls %8ld ran\n", kite_fn_get(i)->name, g_calls[i], g_ok[i]);
}

/* A palette size: mostly 1..9, sometimes 16..44 in steps of 4 (32: 4-bit rows), or 0. */
static int64_t size_of(uint8_t v) {
  return v < 224 ? 1 + v % 9 : v < 255 ? 16 + 4 * ((v - 224) % 8) : 0;
}

/* Scalar a: the table's valid value, or one from the input (INT ones outside int32 too). */
static void scalar(reader *r, const kite_arg_info *a, const op_spec_cfg *c, kite_value *v) {
  static const double special[8] = {0, 1, -1, NAN, INFINITY, -INFINITY, 1e-30, 1e30};
  uint8_t how = u8(r);
  if (how < 128 && op_spec_value(a, c, g_comm, v) == 0) return;
  memset(v, 0, sizeof *v);
  switch (a->kind) {
  case KITE_ARG_FLOAT:
    v->f = how < 192 ? (double)(int8_t)u8(r) / 16.0 : special[u8(r) % 8];
    break;
  case KITE_ARG_INT:
  case KITE_ARG_INT64:
    v->i = how < 240 ? (int8_t)u8(r) : i64(r);
    break;
  case KITE_ARG_UINT64:
    v->u = how < 240 ? u8(r) : (uint64_t)i64(r);
    break;
  default: /* COMM: sometimes none */
    v->comm = (how & 1) ? NULL : g_comm;
    break;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_ctx) {
    kite_ctx_params p = kite_ctx_params_default();
    p.num_threads = 1;
    if (kite_ctx_create(&p, &g_ctx) != KITE_OK) abort();
    if (kite_comm_create_all(&g_ctx, 1, &g_comm) != KITE_OK) abort();
    g_calls = calloc(kite_fn_count(), sizeof *g_calls);
    g_ok = calloc(kite_fn_count(), sizeof *g_ok);
    if (!g_calls || !g_ok) abort();
    if (getenv("FUZZ_ARGS_STATS")) atexit(print_stats);
  }
  reader r = {data, size, 0};
  const size_t fn = u8(&r) % kite_fn_count();
  const kite_fn_info *info = kite_fn_get(fn);
  if (info->nargs > OP_SPEC_MAX_ARGS) abort(); /* a row wider than this file's slots */
  op_spec_cfg c = op_spec_default();
  for (int i = 0; i < 6; i++) c.palette[i] = size_of(u8(&r));
  static const DLDataType fdts[3] = {{kDLFloat, 32, 1}, {kDLFloat, 16, 1}, {kDLBfloat, 16, 1}};
  uint8_t b = u8(&r);
  c.fdt = fdts[b % 3];
  c.qdt = (b & 4) ? (DLDataType){KITE_DL_FLOAT8_E4M3FN, 8, 1} : (DLDataType){kDLInt, 8, 1};
  const int raw = u8(&r) >= 240;
  const int64_t rows = op_spec_rows(info, &c);
  slot s[OP_SPEC_MAX_ARGS];
  kite_value v[OP_SPEC_MAX_ARGS];
  memset(s, 0, sizeof s);
  int skip = 0;
  for (size_t i = 0; i < info->nargs && !skip; i++) {
    const kite_arg_info *a = &info->args[i];
    if (op_arg_is_tensor(a->kind)) {
      skip |= build(&s[i], &r, &c, a, rows, raw) < 0;
      v[i].t = s[i].present ? &s[i].t : NULL;
    } else {
      scalar(&r, a, &c, &v[i]);
    }
  }
  kite_status st = KITE_OK;
  if (!skip) {
    st = kite_fn_call(g_ctx, fn, v, info->nargs);
    g_calls[fn]++, g_ok[fn] += st == KITE_OK;
  }
  if (getenv("FUZZ_ARGS_VERBOSE"))
    fprintf(stderr, "%s: %s %s\n", info->name, skip ? "skipped" : kite_status_name(st),
            kite_last_error());
  /* every failure names what went wrong */
  if (st != KITE_OK && (kite_last_error()[0] == '\0' || (int)st < 0 || st > KITE_ERR_INTERNAL))
    abort();
  for (int i = 0; i < OP_SPEC_MAX_ARGS; i++) free(s[i].buf);
  return 0;
}
