/*
 * libFuzzer target: argument validation of every op. The input picks an op, up to 10 DLTensors
 * (dtype, rank, shape, strides, byte offset, device, NULL or not) and the scalar arguments. Each
 * tensor's data is a heap buffer of exactly the bytes its own shape and strides address (this file
 * computes that extent independently of kite), so a kernel that reads or writes past what
 * validation admitted is an AddressSanitizer report, not a wild pointer. A layout this file cannot
 * size (negative stride or shape, overflow, bad rank) gets a 1-byte buffer: kite must refuse it.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kite/kite.h"

#define NT 10
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

/* Each op's arguments as the harness builds them before mutation: per tensor "<type>:<dims>",
 * type F (the case's float dtype), f (f32), i (i32), q (the case's 8-bit quantized type), u (u8)
 * or - (absent); dims are letters of the case's palette: a-f a size each, A-F twice that, g = a+1,
 * h = e+1, k = the op's integer argument. */
static const char *const k_templates[KITE_OP_COUNT][NT] = {
    [KITE_OP_SILU] = {"F:ab", "F:ab"},
    [KITE_OP_GELU] = {"F:ab", "F:ab"},
    [KITE_OP_GELU_TANH] = {"F:ab", "F:ab"},
    [KITE_OP_GELU_QUICK] = {"F:ab", "F:ab"},
    [KITE_OP_RELU] = {"F:ab", "F:ab"},
    [KITE_OP_SILU_AND_MUL] = {"F:aB", "F:ab"},
    [KITE_OP_GELU_AND_MUL] = {"F:aB", "F:ab"},
    [KITE_OP_GELU_TANH_AND_MUL] = {"F:aB", "F:ab"},
    [KITE_OP_RMS_NORM] = {"F:ab", "F:b", "F:ab"},
    [KITE_OP_LAYER_NORM] = {"F:ab", "F:b", "F:b", "F:ab"},
    [KITE_OP_ADD_RMS_NORM] = {"F:ab", "F:ab", "F:b", "F:ab"},
    [KITE_OP_ADD_LAYER_NORM] = {"F:ab", "F:ab", "F:b", "F:b", "F:ab"},
    [KITE_OP_ROPE] = {"F:abC", "F:adC", "i:a", "f:eC"},
    [KITE_OP_SOFTMAX] = {"F:ab", "F:ab"},
    [KITE_OP_EMBEDDING] = {"i:a", "F:cb", "F:ab"},
    [KITE_OP_STORE_KV] = {"F:abc", "F:abc", "F:dbec", "F:dbec", "i:a"},
    [KITE_OP_PAGED_DECODE] = {"F:aBc", "F:dbec", "F:dbec", "i:af", "i:a", "F:aBc", "f:aB"},
    [KITE_OP_PAGED_PREFILL] = {"F:aBc", "F:dbfc", "F:dbfc", "i:ec", "i:h", "i:e", "F:aBc", "f:aB"},
    [KITE_OP_SDPA] = {"F:aBcd", "F:abed", "F:abed", "-", "F:aBcd", "f:aBc"},
    [KITE_OP_LINEAR] = {"F:ab", "F:cb", "F:c", "F:ac"},
    [KITE_OP_GROUP_GEMM] = {"F:ab", "F:dcb", "i:d", "F:ac"},
    [KITE_OP_TOPK_GATING] = {"F:ab", "f:ak", "i:ak"},
    [KITE_OP_FUSED_MOE] = {"F:ab", "F:dCb", "F:dbc", "f:ak", "i:ak", "F:ab"},
    [KITE_OP_QUANT] = {"F:ab", "q:ab", "f:a"},
    [KITE_OP_DEQUANT] = {"q:ab", "f:a", "F:ab"},
    [KITE_OP_LINEAR_QUANT] = {"q:ab", "f:a", "q:cb", "f:c", "F:c", "F:ac"},
    [KITE_OP_ALL_REDUCE] = {"F:ab", "F:ab"},
    [KITE_OP_ALL_GATHER] = {"F:ab", "F:ab"},
    [KITE_OP_REDUCE_SCATTER] = {"F:ab", "F:ab"},
    [KITE_OP_ALL_REDUCE_ADD_RMS_NORM] = {"F:ab", "F:ab", "F:b", "F:ab"},
};

typedef struct fcase {
  int64_t palette[6];
  int64_t k; /* the op's integer argument (rot_dim, top-k) */
  DLDataType fdt, qdt;
} fcase;

static int64_t dim_of(const fcase *c, char l) {
  if (l >= 'a' && l <= 'f') return c->palette[l - 'a'];
  if (l >= 'A' && l <= 'F') return 2 * c->palette[l - 'A'];
  if (l == 'g') return c->palette[0] + 1;
  if (l == 'h') return c->palette[4] + 1;
  return c->k;
}

typedef struct slot {
  DLTensor t;
  int64_t shape[9], strides[9];
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

static void fill(slot *s, reader *r, int64_t bytes) {
  uint8_t *b = s->buf;
  int64_t esize = s->t.dtype.bits / 8;
  uint8_t seed = u8(r);
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

/* Tensor s from its template tpl, then mutated as the input says. Returns -1 to skip the case (a
 * layout too large to allocate). */
static int build(slot *s, reader *r, const fcase *c, const char *tpl) {
  memset(s, 0, sizeof *s);
  s->t.device = (DLDevice){kDLCPU, 0};
  uint8_t m = u8(r); /* mutation: < 160 none */
  s->present = tpl && tpl[0] != '-';
  if (m >= 250) s->present = !s->present; /* drop a tensor, or add an absent one */
  if (!s->present) return 0;
  if (tpl && tpl[0] != '-') {
    switch (tpl[0]) {
    case 'F':
      s->t.dtype = c->fdt;
      break;
    case 'f':
      s->t.dtype = (DLDataType){kDLFloat, 32, 1};
      break;
    case 'i':
      s->t.dtype = (DLDataType){kDLInt, 32, 1};
      break;
    case 'q':
      s->t.dtype = c->qdt;
      break;
    default:
      s->t.dtype = (DLDataType){kDLUInt, 8, 1};
      break;
    }
    s->t.ndim = (int)strlen(tpl + 2);
    for (int d = 0; d < s->t.ndim; d++) s->shape[d] = dim_of(c, tpl[2 + d]);
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
  if (bytes > 0) fill(s, r, bytes + (int64_t)s->t.byte_offset);
  return 0;
}

static kite_ctx *g_ctx;
static kite_comm *g_comm; /* one rank: its collectives never wait */
/* FUZZ_ARGS_STATS=1: calls and accepted calls per op at exit, to see that cases reach kernels. */
static long g_calls[KITE_OP_COUNT], g_ok[KITE_OP_COUNT];

static void print_stats(void) {
  for (int i = 0; i < KITE_OP_COUNT; i++)
    fprintf(stderr, "%-18s %8ld calls %8ld ran\n", kite_op_name((kite_op)i), g_calls[i], g_ok[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_ctx) {
    kite_ctx_params p = kite_ctx_params_default();
    p.num_threads = 1;
    if (kite_ctx_create(&p, &g_ctx) != KITE_OK) abort();
    if (kite_comm_create_all(&g_ctx, 1, &g_comm) != KITE_OK) abort();
    if (getenv("FUZZ_ARGS_STATS")) atexit(print_stats);
  }
  reader r = {data, size, 0};
  int op = u8(&r) % KITE_OP_COUNT;
  fcase c;
  for (int i = 0; i < 6; i++) {
    uint8_t v = u8(&r);
    c.palette[i] = v < 240 ? 1 + v % 9 : (v == 255 ? 0 : 16 + v % 24);
  }
  uint8_t b = u8(&r);
  c.k = b < 200 ? (op == KITE_OP_ROPE ? 2 * c.palette[2] : c.palette[b % 6]) : (int8_t)u8(&r);
  static const DLDataType fdts[3] = {{kDLFloat, 32, 1}, {kDLFloat, 16, 1}, {kDLBfloat, 16, 1}};
  c.fdt = fdts[b % 3];
  c.qdt = (b & 4) ? (DLDataType){KITE_DL_FLOAT8_E4M3FN, 8, 1} : (DLDataType){kDLInt, 8, 1};
  uint8_t raw = u8(&r); /* >= 240: tensors without the op's template */
  slot s[NT];
  int skip = 0;
  for (int i = 0; i < NT; i++)
    skip |= build(&s[i], &r, &c, raw >= 240 ? NULL : k_templates[op][i]) < 0;
  float f0 = (float)(int8_t)u8(&r) / 16.0f, f1 = (float)(int8_t)u8(&r) / 16.0f;
  int64_t k = c.k;
  int e0 = u8(&r) % 2;
  kite_attn_opts o = kite_attn_opts_default();
  o.scale = f0 < 0 ? 0 : f0;
  o.softcap = (u8(&r) & 1) ? 0 : f1;
  o.window_left = (int8_t)u8(&r);
  o.gqa = (kite_gqa_layout)(u8(&r) % 3);
  o.causal = u8(&r) % 3;
  const kite_attn_opts *po = (u8(&r) & 7) ? &o : NULL;
#define T(i) (s[i].present ? &s[i].t : NULL)
  kite_status st = KITE_OK;
  if (!skip) {
    kite_ctx *x = g_ctx;
    switch ((kite_op)op) {
    case KITE_OP_SILU:
      st = kite_silu(x, T(0), T(1));
      break;
    case KITE_OP_GELU:
      st = kite_gelu(x, T(0), T(1));
      break;
    case KITE_OP_GELU_TANH:
      st = kite_gelu_tanh(x, T(0), T(1));
      break;
    case KITE_OP_GELU_QUICK:
      st = kite_gelu_quick(x, T(0), T(1));
      break;
    case KITE_OP_RELU:
      st = kite_relu(x, T(0), T(1));
      break;
    case KITE_OP_SILU_AND_MUL:
      st = kite_silu_and_mul(x, T(0), f0, T(1));
      break;
    case KITE_OP_GELU_AND_MUL:
      st = kite_gelu_and_mul(x, T(0), f0, T(1));
      break;
    case KITE_OP_GELU_TANH_AND_MUL:
      st = kite_gelu_tanh_and_mul(x, T(0), f0, T(1));
      break;
    case KITE_OP_RMS_NORM:
      st = kite_rms_norm(x, T(0), T(1), f0, f1, T(2));
      break;
    case KITE_OP_LAYER_NORM:
      st = kite_layer_norm(x, T(0), T(1), T(2), f0, T(3));
      break;
    case KITE_OP_ADD_RMS_NORM:
      st = kite_add_rms_norm(x, T(0), T(1), T(2), f0, f1, (kite_norm_pos)e0, T(3));
      break;
    case KITE_OP_ADD_LAYER_NORM:
      st = kite_add_layer_norm(x, T(0), T(1), T(2), T(3), f0, (kite_norm_pos)e0, T(4));
      break;
    case KITE_OP_ROPE:
      st = kite_rope(x, T(0), T(1), T(2), T(3), k, (kite_rope_style)e0);
      break;
    case KITE_OP_SOFTMAX:
      st = kite_softmax(x, T(0), f0, T(1));
      break;
    case KITE_OP_EMBEDDING:
      st = kite_embedding(x, T(0), T(1), T(2));
      break;
    case KITE_OP_STORE_KV:
      st = kite_store_kv(x, T(0), T(1), T(2), T(3), T(4));
      break;
    case KITE_OP_PAGED_DECODE:
      st = kite_paged_decode(x, T(0), T(1), T(2), T(3), T(4), po, T(5), T(6));
      break;
    case KITE_OP_PAGED_PREFILL:
      st = kite_paged_prefill(x, T(0), T(1), T(2), T(3), T(4), T(5), po, T(6), T(7));
      break;
    case KITE_OP_SDPA:
      st = kite_sdpa(x, T(0), T(1), T(2), T(3), po, T(4), T(5));
      break;
    case KITE_OP_LINEAR:
      st = kite_linear(x, T(0), T(1), T(2), T(3));
      break;
    case KITE_OP_GROUP_GEMM:
      st = kite_group_gemm(x, T(0), T(1), T(2), T(3));
      break;
    case KITE_OP_TOPK_GATING:
      st = kite_topk_gating(x, T(0), k, e0 & 1, T(1), T(2));
      break;
    case KITE_OP_FUSED_MOE:
      st = kite_fused_moe(x, T(0), T(1), T(2), T(3), T(4), (kite_moe_act)e0, T(5));
      break;
    case KITE_OP_QUANT:
      st = kite_quant(x, T(0), T(1), T(2));
      break;
    case KITE_OP_DEQUANT:
      st = kite_dequant(x, T(0), T(1), T(2));
      break;
    case KITE_OP_LINEAR_QUANT:
      st = kite_linear_quant(x, T(0), T(1), T(2), T(3), T(4), T(5));
      break;
    case KITE_OP_ALL_REDUCE:
      st = kite_all_reduce(x, g_comm, T(0), T(1));
      break;
    case KITE_OP_ALL_GATHER:
      st = kite_all_gather(x, g_comm, T(0), T(1));
      break;
    case KITE_OP_REDUCE_SCATTER:
      st = kite_reduce_scatter(x, g_comm, T(0), T(1));
      break;
    case KITE_OP_ALL_REDUCE_ADD_RMS_NORM:
      st = kite_all_reduce_add_rms_norm(x, g_comm, T(0), T(1), T(2), f0, f1, (kite_norm_pos)e0,
                                        T(3));
      break;
    default:
      break; /* an op added to kite.h and not yet here */
    }
  }
#undef T
  if (!skip) g_calls[op]++, g_ok[op] += st == KITE_OK;
  if (getenv("FUZZ_ARGS_VERBOSE"))
    fprintf(stderr, "%s: %s %s\n", kite_op_name((kite_op)op),
            skip ? "skipped" : kite_status_name(st), kite_last_error());
  /* every failure names what went wrong */
  if (st != KITE_OK && (kite_last_error()[0] == '\0' || (int)st < 0 || st > KITE_ERR_INTERNAL))
    abort();
  for (int i = 0; i < NT; i++) free(s[i].buf);
  return 0;
}
