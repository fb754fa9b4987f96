/*
 * Bad-input suite: every public function of kite.h, called with broken arguments, must return
 * the expected status and a message naming the op and the argument at fault ("rms_norm: w: ..."),
 * without crashing or touching memory it does not own (the suite also runs under ASan + UBSan),
 * and a failed op call writes nothing: every tensor's bytes are as they were before it.
 * Valid calls prove that the checks do not simply reject everything.
 *
 * Op calls come from the op table (kite/ops.def, built by tests/op_spec.h) and go through
 * kite_fn_call, so a new op is covered without an edit here:
 * - the sweep runs every function of the table in f32 and bf16 with the table's palette: the
 *   valid call; each tensor NULL, of another dtype, with one more dim, on another device; each
 *   dim whose letter another tensor shares, grown by one; each INT scalar outside int32;
 * - each row of g_cases breaks one thing in the valid call of a set of functions ("*" = every
 *   function, every tensor) and names the status wanted; the rows are written for the shapes
 *   of g_setups (f32).
 */
#include <ctype.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kite/kite.h"
#include "op_spec.h"

/* Huge allocations must come back as NULL (then OUT_OF_MEMORY), not abort the sanitizer run.
 * Exported, so that the sanitizer runtime finds it despite -fvisibility=hidden. */
#if defined(__SANITIZE_ADDRESS__)
__attribute__((visibility("default"))) const char *__asan_default_options(void);
const char *__asan_default_options(void) {
  return "allocator_may_return_null=1";
}
#endif

#define INV KITE_ERR_INVALID_ARG
#define UNS KITE_ERR_UNSUPPORTED
#define OK KITE_OK

static bool g_verbose;    /* argv[1] == "-v": print every message */
static kite_comm *g_comm; /* one rank, for the collectives */

/* Records one outcome of `what`: why is NULL when it passed. */
static void record(const char *what, const char *why, const char *detail) {
  if (!why) {
    g_pass++;
    return;
  }
  g_fail++;
  printf("FAIL %s: %s: %s\n", what, why, detail);
}

/* Records one outcome. A failure wants a message containing `who` ("rms_norm: w", "config"); a
 * success wants no message. */
static void expect(const char *what, kite_status got, kite_status want, const char *who) {
  const char *msg = kite_last_error();
  const char *why = NULL;
  if (got != want)
    why = "wrong status";
  else if (want != OK && !msg[0])
    why = "empty message";
  else if (want != OK && who && !strstr(msg, who))
    why = "message does not name the culprit";
  else if (want == OK && msg[0])
    why = "message left after success";
  if (g_verbose) printf("%-60s %-22s %s\n", what, kite_status_name(got), msg);
  char detail[512];
  snprintf(detail, sizeof detail, "got %s, want %s; wanted \"%s\" in \"%s\"", kite_status_name(got),
           kite_status_name(want), who ? who : "", msg);
  record(what, why, detail);
}

static bool ident_char(char c) {
  return c == '_' || isalnum((unsigned char)c);
}

/* Whether word stands in msg as a whole name (not inside a longer identifier). */
static bool names(const char *msg, const char *word) {
  const size_t n = strlen(word);
  for (const char *p = msg; (p = strstr(p, word)) != NULL; p++)
    if ((p == msg || !ident_char(p[-1])) && !ident_char(p[n])) return true;
  return false;
}

/* A call that must fail: with status want (any error when want is OK) and a message naming the
 * function or its op and, when arg is not NULL, the argument. */
static void expect_error(const char *what, kite_status got, kite_status want, const kite_fn_info *f,
                         const char *arg) {
  char msg[512];
  snprintf(msg, sizeof msg, "%s", kite_last_error());
  const char *why = NULL;
  if (got == OK || (want != OK && got != want))
    why = "wrong status";
  else if (!msg[0])
    why = "empty message";
  else if (!names(msg, f->name) && !names(msg, kite_op_name(f->op)))
    why = "message does not name the op";
  else if (arg && !names(msg, arg))
    why = "message does not name the argument";
  if (g_verbose) printf("%-60s %-22s %s\n", what, kite_status_name(got), msg);
  char detail[640];
  snprintf(detail, sizeof detail, "got %s, want %s naming %s%s%s; message \"%s\"",
           kite_status_name(got), want == OK ? "an error" : kite_status_name(want), f->name,
           arg ? " and " : "", arg ? arg : "", msg);
  record(what, why, detail);
}

/* ---- op calls ----------------------------------------------------------------------------- */
enum { MAX_SHAPE = 12, BUF_BYTES = 4096 };

/* One op call being prepared: the table's valid call of a function, which a case then breaks. */
typedef struct call {
  kite_ctx *ctx;
  op_call oc;
} call;

/* The bytes of every tensor of a call, to see that a failed call wrote nothing. */
typedef struct snapshot {
  unsigned char *b[OP_SPEC_MAX_ARGS];
} snapshot;

static void snap_take(snapshot *s, const op_call *c) {
  for (int i = 0; i < OP_SPEC_MAX_ARGS; i++) {
    s->b[i] = c->t[i].buf ? malloc(c->t[i].bytes) : NULL;
    if (s->b[i]) memcpy(s->b[i], c->t[i].buf, c->t[i].bytes);
  }
}

/* The first argument whose bytes changed since the snapshot, or NULL; frees the snapshot. */
static const char *snap_changed(snapshot *s, const op_call *c) {
  const char *changed = NULL;
  for (int i = 0; i < OP_SPEC_MAX_ARGS; i++) {
    if (s->b[i] && !changed && memcmp(s->b[i], c->t[i].buf, c->t[i].bytes))
      changed = c->info->args[i].name;
    free(s->b[i]);
  }
  return changed;
}

/* Runs c on ctx; when the call fails, records that it wrote nothing (unless the op documents
 * that it writes on that failure: may_write). The status and message are the call's. */
static kite_status run_call(kite_ctx *ctx, const op_call *c, const char *what, bool may_write) {
  snapshot s;
  snap_take(&s, c);
  const kite_status st = op_call_run(ctx, c);
  const char *changed = snap_changed(&s, c);
  if (st != OK && !may_write) {
    char label[300], detail[96];
    snprintf(label, sizeof label, "%s: nothing written", what);
    snprintf(detail, sizeof detail, "%s changed", changed ? changed : "");
    record(label, changed ? "a failed call wrote a tensor" : NULL, detail);
  }
  return st;
}

/* What a case breaks, and how its operands v[] read. */
typedef enum breakage {
  NOTHING,     /* the valid call itself */
  NULL_CTX,    /* ctx = NULL */
  NULL_TENSOR, /* the tensor pointer is NULL (valid, wanting OK, for an optional tensor) */
  NULL_DATA,   /* data = NULL with elements present */
  NULL_SHAPE,  /* shape = NULL */
  SET_RANK,    /* ndim = v[0] */
  SET_DIM,     /* shape[v[0]] = v[1] */
  SET_SHAPE,   /* ndim = v[0], shape = v[1..] */
  SET_STRIDE,  /* compact strides but stride[v[0]] = v[1] (v[0] < 0 counts from the end) */
  SET_STRIDES, /* strides = v[0..ndim) */
  SET_DTYPE,   /* dtype = {code v[0], bits v[1], lanes v[2]} */
  SET_DEVICE,  /* device = {v[0], v[1]} */
  SET_OFFSET,  /* byte_offset = (uint64_t)v[0] */
  SET_INT,     /* int32 element v[0] = v[1] (an id, a position) */
  SAME_DATA,   /* data = the data of tensor `other` */
  SET_PARAM,   /* the scalar parameter named arg = p */
} breakage;

static const char *const g_breakage_names[] = {
    "nothing", "NULL ctx",  "NULL tensor", "NULL data", "NULL shape", "rank",
    "dim",     "shape",     "stride",      "strides",   "dtype",      "device",
    "offset",  "int value", "same data",   "param"};

typedef struct bad_case {
  const char *ops; /* space-separated function names of the table, or "*" */
  const char *arg; /* tensor(s) broken ("x,y" breaks both the same way; "*" each one in turn) or
                      the parameter, by the table's names ("opts.scale" is the argument scale);
                      the message must contain "<function>: <first arg>" */
  breakage how;
  kite_status want;
  const char *other; /* SAME_DATA */
  double p;          /* SET_PARAM */
  int64_t v[MAX_SHAPE];
} bad_case;

/* A tensor breakage with its operands; a parameter set to p; a tensor given other's memory. */
#define T(ops, arg, how, want, ...)                                                                \
  {                                                                                                \
    ops, arg, how, want, NULL, 0, {                                                                \
      __VA_ARGS__                                                                                  \
    }                                                                                              \
  }
#define P(ops, param, p, want)                                                                     \
  {                                                                                                \
    ops, param, SET_PARAM, want, NULL, p, {                                                        \
      0                                                                                            \
    }                                                                                              \
  }
#define ALIAS(ops, arg, other, want)                                                               \
  {                                                                                                \
    ops, arg, SAME_DATA, want, other, 0, {                                                         \
      0                                                                                            \
    }                                                                                              \
  }

#define ALL "*"
#define ACTS "silu gelu gelu_tanh gelu_quick relu"
#define GATED "silu_and_mul gelu_and_mul gelu_tanh_and_mul"
#define ROWWISE ACTS " softmax"
#define NORMS "rms_norm layer_norm add_rms_norm add_layer_norm"
#define FUSED "add_rms_norm add_layer_norm"
#define LAYER "layer_norm add_layer_norm"
#define PAGED "paged_decode paged_prefill"
#define VARLEN "sdpa_varlen sdpa_varlen_backward"
#define ATTN_BWD "sdpa_backward sdpa_varlen_backward"
#define ATTN PAGED " sdpa"
#define SINKS ATTN " " VARLEN " sdpa_backward"
#define BWD_ROWWISE "activation_backward softmax_backward rms_norm_backward layer_norm_backward"
#define NORM_BWD                                                                                   \
  "rms_norm_backward layer_norm_backward add_rms_norm_backward add_layer_norm_backward"
#define LOSSES                                                                                     \
  "cross_entropy cross_entropy_backward cross_entropy_with_grad fused_linear_cross_entropy"
#define CE_ROWS "cross_entropy cross_entropy_backward cross_entropy_with_grad"
#define LOSS_FWD "cross_entropy cross_entropy_with_grad fused_linear_cross_entropy"
#define F16 kDLFloat, 16, 1
#define BF16 kDLBfloat, 16, 1
#define F32 kDLFloat, 32, 1
#define F64 kDLFloat, 64, 1
#define I8 kDLInt, 8, 1
#define I32 kDLInt, 32, 1

static const bad_case g_cases[] = {
    /* Every op: the valid call, and a NULL ctx. */
    T(ALL, "", NOTHING, OK, 0), T(ALL, "ctx", NULL_CTX, INV, 0),
    /* Every tensor of every op, one at a time. */
    T(ALL, "*", NULL_TENSOR, INV, 0), T(ALL, "*", NULL_DATA, INV, 0),
    T(ALL, "*", NULL_SHAPE, INV, 0), T(ALL, "*", SET_RANK, INV, 0), T(ALL, "*", SET_RANK, INV, 9),
    T(ALL, "*", SET_DIM, INV, 0, -1),
    T(ALL, "*", SET_DIM, INV, 0, INT64_MAX / 2), /* element count or byte extent overflows */
    T(ALL, "*", SET_STRIDE, INV, -1, -1), T(ALL, "*", SET_STRIDE, INV, -1, INT64_MAX / 2),
    T(ALL, "*", SET_DTYPE, UNS, kDLFloat, 32, 2), T(ALL, "*", SET_DTYPE, UNS, kDLComplex, 64, 1),
    T(ALL, "*", SET_DTYPE, UNS, kDLInt, 16, 1), T(ALL, "*", SET_DEVICE, INV, kDLCUDA, 0),
    T(ALL, "*", SET_DEVICE, INV, kDLCPU, 1),
    T(ALL, "*", SET_OFFSET, INV, 2),   /* misaligned for a 4-byte element */
    T(ALL, "*", SET_OFFSET, INV, -64), /* address wraps around */

    /* Activations and softmax: x, y same shape and float dtype, y's rows distinct. */
    T(ROWWISE, "y", SET_DIM, INV, 1, 9), T(ROWWISE, "y", SET_SHAPE, INV, 3, 4, 8, 1),
    T(ROWWISE, "y", SET_DTYPE, INV, F16), T(ROWWISE, "x", SET_DTYPE, UNS, I8),
    T(ROWWISE, "x", SET_DTYPE, UNS, I32), T(ROWWISE, "x", SET_DTYPE, UNS, F64),
    T(ROWWISE, "x", SET_STRIDES, INV, 8, 2), T(ROWWISE, "y", SET_STRIDES, INV, 0, 1),
    T(ROWWISE, "y", SET_STRIDES, INV, 4, 1), T(ROWWISE, "x,y", SET_DTYPE, OK, BF16),
    T(ROWWISE, "x", SET_STRIDES, OK, 16, 1), /* a row-strided view */
    T(ROWWISE, "x", SET_STRIDES, OK, 0, 1),  /* one row broadcast: inputs may overlap */
    ALIAS(ROWWISE, "y", "x", OK),            /* in place */
    T(ROWWISE, "x,y", SET_DIM, OK, 0, 0), T(ROWWISE, "x,y", SET_DIM, OK, 1, 0),
    P("softmax", "scale", NAN, INV), P("softmax", "scale", INFINITY, INV),
    P("softmax", "scale", 0.125, OK),

    /* Gated: x[..., 2I] -> y[..., I]. */
    T(GATED, "y", SET_DIM, INV, 1, 8), T(GATED, "y", SET_DIM, INV, 0, 3),
    T(GATED, "x", SET_DIM, INV, 1, 7), T(GATED, "y", SET_SHAPE, INV, 1, 4),
    T(GATED, "y", SET_DTYPE, INV, BF16), T(GATED, "x", SET_DTYPE, UNS, I8),
    T(GATED, "y", SET_STRIDES, INV, 0, 1), P(GATED, "limit", NAN, INV), P(GATED, "limit", 0.5, OK),
    P(GATED, "limit", -1.0, OK), P(GATED, "limit", INFINITY, OK),
    T(GATED, "x", SET_STRIDES, OK, 16, 1), T(GATED, "x,y", SET_DIM, OK, 0, 0),

    /* Norms: w, b [H] of x's dtype; y like x; residual like x, apart from x and y. */
    T(NORMS, "y", SET_DIM, INV, 1, 9), T(NORMS, "y", SET_DTYPE, INV, F16),
    T(NORMS, "x", SET_DTYPE, UNS, I8), T(NORMS, "w", SET_DIM, INV, 0, 9),
    T(NORMS, "w", SET_SHAPE, INV, 2, 1, 8), T(NORMS, "w", SET_DTYPE, INV, BF16),
    T(NORMS, "w", SET_STRIDES, INV, 2), T(NORMS, "y", SET_STRIDES, INV, 0, 1),
    P(NORMS, "eps", NAN, INV), P(NORMS, "eps", -1e-6, INV), P(NORMS, "eps", INFINITY, INV),
    P("rms_norm add_rms_norm", "offset", NAN, INV), T(LAYER, "b", SET_DIM, INV, 0, 7),
    T(LAYER, "b", SET_DTYPE, INV, F16), T(FUSED, "residual", SET_DIM, INV, 1, 9),
    T(FUSED, "residual", SET_DTYPE, INV, BF16), T(FUSED, "residual", SET_STRIDES, INV, 0, 1),
    ALIAS(FUSED, "residual", "x", INV), ALIAS(FUSED, "residual", "y", INV), P(FUSED, "pos", 2, INV),
    P(FUSED, "pos", -1, INV), P(FUSED, "pos", KITE_NORM_POST, OK), ALIAS(NORMS, "y", "x", OK),
    P(NORMS, "eps", 0.0, OK), T(NORMS, "x", SET_STRIDES, OK, 16, 1),
    P("rms_norm add_rms_norm", "offset", 1.0, OK),
    T("rms_norm layer_norm", "x,y", SET_DIM, OK, 0, 0), T(FUSED, "x,residual,y", SET_DIM, OK, 0, 0),

    /* RoPE: q[T, Hq, D], k[T, Hkv, D], positions[T] i32, cos_sin[max_pos, rot_dim] f32. */
    T("rope", "q", SET_SHAPE, INV, 2, 3, 16), T("rope", "q", SET_DTYPE, UNS, I32),
    T("rope", "q", SET_STRIDES, INV, 32, 16, 2),
    T("rope", "q", SET_STRIDES, INV, 8, 0, 1), /* both heads on one address */
    T("rope", "k", SET_DIM, INV, 0, 4), T("rope", "k", SET_DIM, INV, 2, 6),
    T("rope", "k", SET_DTYPE, INV, F16), T("rope", "k", SET_SHAPE, INV, 4, 3, 1, 8, 1),
    ALIAS("rope", "k", "q", INV), T("rope", "positions", SET_DTYPE, INV, F32),
    T("rope", "positions", SET_DIM, INV, 0, 4), T("rope", "positions", SET_SHAPE, INV, 2, 3, 1),
    T("rope", "positions", SET_STRIDES, INV, 2),
    T("rope", "positions", SET_INT, INV, 1, 16), /* outside the cache: caught by the kernel */
    T("rope", "positions", SET_INT, INV, 2, -1), T("rope", "cos_sin", SET_DTYPE, INV, F16),
    T("rope", "cos_sin", SET_DIM, INV, 1, 6), T("rope", "cos_sin", SET_DIM, INV, 0, 0),
    T("rope", "cos_sin", SET_SHAPE, INV, 1, 128), T("rope", "cos_sin", SET_STRIDES, INV, 16, 1),
    P("rope", "rot_dim", 7, INV), P("rope", "rot_dim", 0, INV), P("rope", "rot_dim", -2, INV),
    P("rope", "rot_dim", 10, INV), P("rope", "style", 2, INV), P("rope", "style", -1, INV),
    P("rope", "style", KITE_ROPE_GPTJ, OK),
    T("rope", "q", SET_STRIDES, OK, 32, 8, 1), /* a slice of a fused qkv */
    T("rope", "q", SET_STRIDES, OK, 8, 24, 1), /* head-major */
    T("rope", "k", SET_DIM, OK, 1, 0), T("rope", "q,k,positions", SET_DIM, OK, 0, 0),

    /* Embedding: ids[T] i32, table[V, H] float, y[T, H] of table's dtype. */
    T("embedding", "ids", SET_DTYPE, INV, F32),
    T("embedding", "ids", SET_DTYPE, UNS, kDLUInt, 16, 1), /* a dtype kite does not know */
    T("embedding", "ids", SET_DTYPE, INV, kDLInt, 64, 1),
    T("embedding", "ids", SET_SHAPE, INV, 2, 3, 1), T("embedding", "ids", SET_STRIDES, INV, 2),
    T("embedding", "table", SET_SHAPE, INV, 1, 80), T("embedding", "table", SET_DTYPE, UNS, I32),
    T("embedding", "table", SET_STRIDES, INV, 8, 2), T("embedding", "y", SET_DIM, INV, 0, 4),
    T("embedding", "y", SET_DIM, INV, 1, 6), T("embedding", "y", SET_DTYPE, INV, F16),
    T("embedding", "y", SET_SHAPE, INV, 3, 3, 8, 1), T("embedding", "y", SET_STRIDES, INV, 0, 1),
    T("embedding", "ids", SET_INT, OK, 0, 10), /* out of range: a zero row, not an error */
    T("embedding", "ids", SET_INT, OK, 1, -5), ALIAS("embedding", "y", "table", INV),
    ALIAS("embedding", "y", "ids", INV), T("embedding", "table", SET_STRIDES, OK, 16, 1),
    T("embedding", "table", SET_DIM, OK, 0, 0), /* empty vocabulary: zeros */
    T("embedding", "ids,y", SET_DIM, OK, 0, 0),

    /* store_kv: k, v [T, Hkv, D] -> caches [blocks, Hkv, block_size, D] at slots[T]. */
    T("store_kv", "k", SET_DTYPE, UNS, I32), T("store_kv", "v", SET_DTYPE, INV, F16),
    T("store_kv", "v", SET_DIM, INV, 1, 3), T("store_kv", "k", SET_STRIDES, INV, 16, 8, 2),
    T("store_kv", "key_cache", SET_DTYPE, INV, F16),
    T("store_kv", "key_cache", SET_SHAPE, INV, 3, 8, 4, 8),
    T("store_kv", "value_cache", SET_DIM, INV, 0, 3),
    T("store_kv", "key_cache,value_cache", SET_DIM, INV, 1, 1),
    T("store_kv", "key_cache,value_cache", SET_DIM, INV, 2, 0),
    T("store_kv", "key_cache,value_cache", SET_DIM, INV, 3, 300),
    T("store_kv", "key_cache", SET_STRIDES, INV, 128, 64, 8, 2),
    ALIAS("store_kv", "value_cache", "key_cache", INV), ALIAS("store_kv", "key_cache", "k", INV),
    T("store_kv", "slots", SET_DTYPE, INV, F32), T("store_kv", "slots", SET_DIM, INV, 0, 4),
    T("store_kv", "slots", SET_STRIDES, INV, 2),
    T("store_kv", "slots", SET_INT, INV, 1, 16), /* past the cache: caught by the kernel */
    T("store_kv", "slots", SET_INT, OK, 1, -1),  /* padding: skipped */
    T("store_kv", "k", SET_STRIDES, OK, 32, 8, 1), T("store_kv", "k,v,slots", SET_DIM, OK, 0, 0),

    /* Paged attention: q[T, Hq, D] over the caches, block_table[B, max_blocks], seq_lens[B]. */
    T(ATTN, "q", SET_DTYPE, UNS, I32), T(PAGED, "q", SET_SHAPE, INV, 2, 2, 32),
    T(PAGED, "key_cache", SET_DTYPE, INV, F16),
    T(PAGED, "key_cache,value_cache", SET_DIM, INV, 3, 4),
    T(PAGED, "q,o", SET_DIM, INV, 1, 3), /* 3 q heads over 2 kv heads */
    T(PAGED, "block_table", SET_DTYPE, INV, F32), T(PAGED, "block_table", SET_SHAPE, INV, 1, 6),
    T(PAGED, "block_table", SET_STRIDES, INV, 6, 2),
    T("paged_decode", "block_table", SET_DIM, INV, 0, 3), T(PAGED, "seq_lens", SET_DIM, INV, 0, 3),
    T(PAGED, "seq_lens", SET_DTYPE, INV, F32), T(PAGED, "o", SET_DIM, INV, 2, 4),
    T(PAGED, "o", SET_DTYPE, INV, F16), T(PAGED, "o", SET_STRIDES, INV, 8, 0, 1),
    ALIAS(PAGED, "o", "q", INV), ALIAS(PAGED, "o", "key_cache", INV),
    T(PAGED, "lse", SET_DIM, INV, 1, 3), T(PAGED, "lse", SET_DTYPE, INV, F16),
    ALIAS(PAGED, "lse", "o", INV), T("paged_prefill", "cu_q_lens", SET_DIM, INV, 0, 2),
    T("paged_prefill", "cu_q_lens", SET_DTYPE, INV, F32),
    T("paged_prefill", "cu_q_lens", SET_INT, INV, 2, 2), /* does not end at T */
    T("paged_prefill", "cu_q_lens", SET_INT, INV, 0, 1), /* does not start at 0 */
    P(ATTN, "opts.scale", NAN, INV), P(ATTN, "opts.scale", -1.0, INV),
    P(ATTN, "opts.softcap", INFINITY, INV), P(ATTN, "opts.softcap", -1.0, INV),
    P(ATTN, "opts.window_left", -2, INV), P(ATTN, "opts.gqa", 2, INV),
    P(ATTN, "opts.scale", 0.5, OK), P(ATTN, "opts.softcap", 30.0, OK),
    P(ATTN, "opts.window_left", 1, OK), P(ATTN, "opts.gqa", KITE_GQA_INTERLEAVED, OK),
    P(ATTN, "opts.causal", 0, OK), T(PAGED, "q", SET_STRIDES, OK, 64, 8, 1),
    T("paged_decode", "seq_lens", SET_INT, OK, 0, 0),  /* zeros */
    T("paged_prefill", "seq_lens", SET_INT, OK, 0, 1), /* as long as its one query */
    /* index values in host memory (a CPU ctx) are checked before any kernel runs */
    T(PAGED, "seq_lens", SET_INT, INV, 0, -1),           /* negative */
    T("paged_decode", "seq_lens", SET_INT, INV, 1, 13),  /* past the table's 3 blocks of 4 */
    T("paged_prefill", "seq_lens", SET_INT, INV, 1, 33), /* past the table's 8 blocks of 4 */
    T("paged_prefill", "seq_lens", SET_INT, INV, 1, 1),  /* below its 2 queries */
    T(PAGED, "block_table", SET_INT, INV, 0, 4),         /* past the cache's 4 blocks */
    T(PAGED, "block_table", SET_INT, INV, 0, -1),        /* inside sequence 0 */
    T("paged_prefill", "cu_q_lens", SET_INT, INV, 1, 4), /* decreases */
    T("paged_decode", "q,block_table,seq_lens,o,lse", SET_DIM, OK, 0, 0),

    /* sdpa: q[B, Hq, Sq, D], k, v[B, Hkv, Sk, D], mask [Sq, Sk] or [B|1, Hq|1, Sq, Sk]. */
    T("sdpa", "k,v", SET_DIM, INV, 0, 2), T("sdpa", "k", SET_DTYPE, INV, F16),
    T("sdpa", "v", SET_DIM, INV, 2, 4), T("sdpa", "v", SET_DTYPE, INV, BF16),
    T("sdpa", "k", SET_SHAPE, INV, 3, 2, 5, 8),
    T("sdpa", "q,o", SET_DIM, INV, 1, 3), /* 3 q heads over 2 kv heads */
    T("sdpa", "q", SET_STRIDES, INV, 96, 24, 8, 2), T("sdpa", "mask", SET_DIM, INV, 1, 4),
    T("sdpa", "mask", SET_DTYPE, INV, I32), T("sdpa", "mask", SET_SHAPE, INV, 3, 4, 3, 5),
    T("sdpa", "mask", SET_SHAPE, INV, 4, 2, 1, 3, 5), T("sdpa", "o", SET_DIM, INV, 2, 4),
    T("sdpa", "o", SET_DTYPE, INV, F16), T("sdpa", "o", SET_STRIDES, INV, 96, 0, 8, 1),
    ALIAS("sdpa", "o", "q", INV), ALIAS("sdpa", "o", "mask", INV),
    T("sdpa", "lse", SET_DIM, INV, 2, 4), ALIAS("sdpa", "lse", "o", INV),
    T("sdpa", "mask", SET_SHAPE, OK, 4, 1, 1, 3, 5),
    T("sdpa", "mask", SET_DTYPE, OK, KITE_DL_BOOL, 8, 1),
    T("sdpa", "mask", SET_STRIDES, OK, 0, 1), /* one mask row for every query */
    T("sdpa", "q", SET_STRIDES, OK, 256, 8, 32, 1), T("sdpa", "q,k,v,o,lse", SET_DIM, OK, 0, 0),

    /* sdpa_fp8: q[3, 64, 4, 2], k, v[3, 32, 5, 2] e4m3, q_scale[3, 64, 1], k_scale and
     * v_scale[3, 32, 1] f32 (one block of 128 rows), o like q (f32, f16 or bf16). */
    T("sdpa_fp8", "q", SET_DTYPE, INV, BF16), T("sdpa_fp8", "k", SET_DTYPE, INV, I8),
    T("sdpa_fp8", "v", SET_DTYPE, INV, F16), T("sdpa_fp8", "o", SET_DTYPE, UNS, I8),
    T("sdpa_fp8", "q_scale", SET_DTYPE, INV, BF16), T("sdpa_fp8", "q_scale", SET_DIM, INV, 2, 2),
    T("sdpa_fp8", "k_scale", SET_DIM, INV, 1, 16), T("sdpa_fp8", "v_scale", SET_DIM, INV, 0, 2),
    T("sdpa_fp8", "v_scale", SET_SHAPE, INV, 2, 3, 32), T("sdpa_fp8", "k,v", SET_DIM, INV, 3, 4),
    T("sdpa_fp8", "q,o,q_scale", SET_DIM, INV, 1, 3), /* 3 q heads over 32 kv heads */
    T("sdpa_fp8", "o", SET_DIM, INV, 2, 5), T("sdpa_fp8", "lse", SET_DIM, INV, 2, 5),
    P("sdpa_fp8", "opts.softcap", 30.0, UNS), P("sdpa_fp8", "opts.window_left", 1, UNS),
    P("sdpa_fp8", "opts.scale", NAN, INV), P("sdpa_fp8", "opts.gqa", 2, INV),
    P("sdpa_fp8", "opts.scale", 0.5, OK), P("sdpa_fp8", "opts.causal", 0, OK),
    P("sdpa_fp8", "opts.gqa", KITE_GQA_INTERLEAVED, OK), T("sdpa_fp8", "o", SET_DTYPE, OK, BF16),
    T("sdpa_fp8", "o", SET_DTYPE, OK, F16), ALIAS("sdpa_fp8", "o", "q", INV),
    ALIAS("sdpa_fp8", "o", "k_scale", INV), ALIAS("sdpa_fp8", "lse", "o", INV),
    ALIAS("sdpa_fp8", "lse", "v_scale", INV),
    T("sdpa_fp8", "q,k,v,q_scale,k_scale,v_scale,o,lse", SET_DIM, OK, 0, 0),
    T("sdpa_fp8", "k,v,k_scale,v_scale", SET_DIM, OK, 2, 0), /* no keys: o = 0, lse = -inf */
    T("sdpa_fp8", "q", SET_STRIDES, OK, 256, 8, 32, 1),
    /* quant_fp8_blocks: x[3, 32, 4, 2] float, q like it e4m3, scales[3, 32, 1] f32. */
    T("quant_fp8_blocks", "x", SET_DTYPE, UNS, I32), T("quant_fp8_blocks", "q", SET_DTYPE, INV, I8),
    T("quant_fp8_blocks", "q", SET_DTYPE, INV, BF16),
    T("quant_fp8_blocks", "q", SET_DIM, INV, 2, 5),
    T("quant_fp8_blocks", "scales", SET_DIM, INV, 2, 2),
    T("quant_fp8_blocks", "scales", SET_DTYPE, INV, F16), ALIAS("quant_fp8_blocks", "q", "x", INV),
    ALIAS("quant_fp8_blocks", "scales", "x", INV), ALIAS("quant_fp8_blocks", "scales", "q", INV),
    T("quant_fp8_blocks", "x", SET_DTYPE, OK, BF16), T("quant_fp8_blocks", "x", SET_DTYPE, OK, F16),
    T("quant_fp8_blocks", "x,q,scales", SET_DIM, OK, 2, 0), /* no rows: no block */
    T("quant_fp8_blocks", "x,q", SET_DIM, OK, 3, 0),        /* D = 0: scales of 1 */

    /* sdpa_varlen and the backwards: q [5, 4, 8], k, v [5, 2, 8], cu_seqlens [0, 5, 5, 5, 5, 5]
     * (max_seqlen 5); sdpa_backward as sdpa, o, lse, dout, dq, dk, dv shaped as its tensors. */
    T(VARLEN, "cu_seqlens_q", SET_INT, INV, 0, 1), /* does not start at 0 */
    T(VARLEN, "cu_seqlens_k", SET_INT, INV, 5, 4), /* does not end at Tk */
    T(VARLEN, "cu_seqlens_k", SET_INT, INV, 2, 4), /* decreases */
    T(VARLEN, "cu_seqlens_k", SET_DIM, INV, 0, 5), /* not cu_seqlens_q's B + 1 */
    T(VARLEN, "cu_seqlens_q", SET_DTYPE, INV, I8), P(VARLEN, "max_seqlen_q", 0, INV),
    P(VARLEN, "max_seqlen_k", -1, INV), P(VARLEN, "max_seqlen_k", 4, INV),
    P(VARLEN, "max_seqlen_q", 100, OK), /* a loose bound */
    T(VARLEN, "k,v", SET_DIM, INV, 2, 4), T(VARLEN, "q", SET_DIM, INV, 1, 3),
    ALIAS(VARLEN, "o", "q", INV), ALIAS(VARLEN, "lse", "o", INV),
    T(ATTN_BWD, "dout", SET_DIM, INV, 1, 3), T(ATTN_BWD, "dk", SET_DTYPE, INV, F16),
    T(ATTN_BWD, "dv", SET_DIM, INV, 1, 4), T(ATTN_BWD, "lse", SET_DTYPE, INV, F16),
    ALIAS(ATTN_BWD, "dv", "dk", INV), ALIAS(ATTN_BWD, "dq", "dout", INV),
    ALIAS(ATTN_BWD, "dv", "k", INV), ALIAS(ATTN_BWD, "dq", "lse", INV),
    ALIAS(ATTN_BWD, "dq", "o", INV), T("sdpa_backward", "mask", SET_DTYPE, INV, I32),
    /* sinks [Hq = 4] f32 compact on every attention op; dsinks [Hq] only with sinks */
    T(SINKS, "sinks", SET_DIM, INV, 0, 3), T(SINKS, "sinks", SET_DTYPE, INV, BF16),
    T(SINKS, "sinks", SET_SHAPE, INV, 2, 1, 4), T(SINKS, "sinks", SET_STRIDES, INV, 2),
    ALIAS(PAGED " sdpa sdpa_varlen", "lse", "sinks", INV), ALIAS(ATTN_BWD, "dsinks", "sinks", INV),
    ALIAS(ATTN_BWD, "dsinks", "lse", INV), ALIAS(ATTN_BWD, "dsinks", "dq", INV),
    T(ATTN_BWD, "dsinks", SET_DIM, INV, 0, 5), T(ATTN_BWD, "dsinks", SET_DTYPE, INV, F16),
    T(ATTN_BWD, "sinks", NULL_TENSOR, INV), /* dsinks without sinks */
    T(ATTN_BWD, "sinks,dsinks", NULL_TENSOR, OK), T(ATTN_BWD, "dsinks", NULL_TENSOR, OK),
    T(PAGED " sdpa sdpa_varlen", "sinks", NULL_TENSOR, OK),

    /* GEMM: x[M, K], w[N, K] (group_gemm: w[G, N, K], group_sizes[G]), bias[N], y[M, N]. */
    T("linear group_gemm", "x", SET_DTYPE, UNS, I32), T("linear", "w", SET_DIM, INV, 1, 7),
    T("group_gemm", "w", SET_DIM, INV, 2, 7), T("linear group_gemm", "w", SET_DTYPE, INV, F16),
    T("group_gemm", "w", SET_SHAPE, INV, 2, 12, 8), T("linear", "bias", SET_DIM, INV, 0, 5),
    T("linear", "bias", SET_DTYPE, INV, BF16), T("linear group_gemm", "y", SET_DIM, INV, 1, 5),
    T("linear group_gemm", "y", SET_DTYPE, INV, F16),
    T("linear group_gemm", "y", SET_STRIDES, INV, 0, 1), ALIAS("linear group_gemm", "y", "x", INV),
    T("group_gemm", "group_sizes", SET_DTYPE, INV, F32),
    T("group_gemm", "group_sizes", SET_DIM, INV, 0, 3),
    T("group_gemm", "group_sizes", SET_INT, INV, 0, -1), /* negative (host-visible) */
    T("group_gemm", "group_sizes", SET_INT, INV, 0, 3),  /* sums to 6, M = 5 */
    T("linear group_gemm", "x", SET_STRIDES, OK, 16, 1),
    T("linear", "x,w", SET_DIM, OK, 1, 6), /* K = 6 */
    T("linear", "x,y", SET_DIM, OK, 0, 0),

    /* MoE: topk_gating(logits[T, E], k) -> weights, ids [T, k]; fused_moe over E experts. */
    T("topk_gating", "logits", SET_DTYPE, UNS, I32), P("topk_gating", "k", 0, INV),
    P("topk_gating", "k", 7, INV), T("topk_gating", "weights", SET_DIM, INV, 1, 3),
    T("topk_gating", "weights", SET_DTYPE, INV, F16), T("topk_gating", "ids", SET_DIM, INV, 0, 4),
    T("topk_gating", "ids", SET_DTYPE, INV, F32), ALIAS("topk_gating", "ids", "weights", INV),
    ALIAS("topk_gating", "weights", "logits", INV), P("topk_gating", "renormalize", 1, OK),
    T("fused_moe", "x", SET_DTYPE, UNS, I8), T("fused_moe", "w13", SET_DIM, INV, 1, 5),
    T("fused_moe", "w13", SET_DTYPE, INV, F16), T("fused_moe", "w2", SET_DIM, INV, 0, 3),
    T("fused_moe", "w2", SET_DIM, INV, 2, 4), T("fused_moe", "weights", SET_DIM, INV, 0, 4),
    T("fused_moe", "weights", SET_DTYPE, INV, BF16), T("fused_moe", "ids", SET_DIM, INV, 1, 3),
    T("fused_moe", "ids", SET_DTYPE, INV, F32), T("fused_moe", "y", SET_DIM, INV, 1, 6),
    ALIAS("fused_moe", "y", "x", INV), P("fused_moe", "act", 2, INV),
    P("fused_moe", "act", KITE_MOE_GELU, OK),
    T("fused_moe", "ids", SET_INT, OK, 0, 9), /* an expert outside [0, E) contributes nothing */

    /* MoE of today's models: moe_route(logits[3, 32], bias[32], k 4, groups), fused_moe_ex with
     * b13[E, 2I], b2[E, H] (w13 [2, 8, 32], w2 [2, 32, 4]: the transposed layout's shapes wrong),
     * the load-balancing loss over ids[3, 4] and mask[3]. */
    P("moe_route", "k", 0, INV), P("moe_route", "k", 33, INV), P("moe_route", "score", 3, INV),
    P("moe_route", "score", 1, OK), P("moe_route", "score", 2, OK),
    P("moe_route", "n_group", 0, INV), P("moe_route", "n_group", 5, INV),
    P("moe_route", "n_group", 8, OK), P("moe_route", "n_group", 16, INV), /* 2 experts < k */
    P("moe_route", "topk_group", 2, INV), P("moe_route", "topk_group", 0, INV),
    P("moe_route", "scaling", NAN, INV), P("moe_route", "renormalize", 1, OK),
    T("moe_route", "bias", SET_DIM, INV, 0, 31), T("moe_route", "bias", SET_DTYPE, INV, I32),
    ALIAS("moe_route", "weights", "logits", INV), ALIAS("moe_route", "ids", "weights", INV),
    ALIAS("moe_route", "ids", "bias", INV), T("fused_moe_ex", "b13", SET_DIM, INV, 1, 7),
    T("fused_moe_ex", "b2", SET_DIM, INV, 0, 3), T("fused_moe_ex", "b13", SET_DTYPE, INV, I32),
    T("fused_moe_ex", "w13", SET_DIM, INV, 1, 7), P("fused_moe_ex", "act", 3, INV),
    P("fused_moe_ex", "act", KITE_MOE_SWIGLU_OAI, OK), P("fused_moe_ex", "layout", 2, INV),
    P("fused_moe_ex", "layout", 1, OK), P("fused_moe_ex", "limit", -1, INV),
    P("fused_moe_ex", "limit", 7, OK), P("fused_moe_ex", "alpha", INFINITY, INV),
    ALIAS("fused_moe_ex", "y", "b2", INV), ALIAS("fused_moe_ex", "y", "x", INV),
    T("fused_moe_ex", "ids", SET_INT, OK, 0, 9), P("fused_moe_ex", "transposed", 2, INV),
    P("fused_moe_ex", "transposed", -1, INV),
    P("fused_moe_ex", "transposed", 1, INV), /* w13 [2, 8, 32] read as [E, H=8, 2I]: H != 32 */
    T("moe_aux_loss moe_aux_loss_backward", "mask", SET_DIM, INV, 0, 4),
    T("moe_aux_loss moe_aux_loss_backward", "ids", SET_DIM, INV, 0, 2),
    T("moe_aux_loss moe_aux_loss_backward", "ids", SET_INT, OK, 0, 99),
    T("moe_aux_loss moe_aux_loss_backward", "ids", SET_INT, OK, 0, -1),
    T("moe_aux_loss", "loss", SET_DIM, INV, 0, 2), ALIAS("moe_aux_loss", "loss", "mask", INV),
    T("moe_aux_loss_backward", "dloss", SET_DIM, INV, 0, 3),
    T("moe_aux_loss_backward", "dlogits", SET_DIM, INV, 1, 31),
    T("moe_aux_loss_backward", "dlogits", SET_DTYPE, INV, I32),
    ALIAS("moe_aux_loss_backward", "dlogits", "logits", INV),

    /* Quantization: x[M, K] float <-> q[M, K] i8/fp8 with scales[M]; linear on quantized x, w. */
    T("quant dequant", "q", SET_DTYPE, UNS, F32), T("quant", "x", SET_DTYPE, UNS, I8),
    T("quant", "q", SET_DIM, INV, 1, 4), T("dequant", "y", SET_DIM, INV, 1, 4),
    T("quant dequant", "scales", SET_DIM, INV, 0, 3),
    T("quant dequant", "scales", SET_DTYPE, INV, F16), ALIAS("quant", "q", "x", INV),
    ALIAS("dequant", "y", "q", INV), T("dequant", "y", SET_DTYPE, UNS, I32),
    T("quant dequant", "q", SET_DTYPE, OK, KITE_DL_FLOAT8_E4M3FN, 8, 1),
    T("linear_quant", "xq", SET_DTYPE, UNS, F32),
    T("linear_quant", "wq", SET_DTYPE, INV, KITE_DL_FLOAT8_E4M3FN, 8, 1),
    T("linear_quant", "wq", SET_DIM, INV, 1, 7), T("linear_quant", "x_scales", SET_DIM, INV, 0, 5),
    T("linear_quant", "w_scales", SET_DIM, INV, 0, 5),
    T("linear_quant", "w_scales", SET_DTYPE, INV, BF16),
    T("linear_quant", "bias", SET_DTYPE, INV, F16), T("linear_quant", "y", SET_DTYPE, UNS, I8),
    T("linear_quant", "y", SET_DIM, INV, 1, 5), ALIAS("linear_quant", "y", "wq", INV),
    T("linear_quant", "xq,wq", SET_DTYPE, OK, KITE_DL_FLOAT8_E4M3FN, 8, 1),
    T("linear_quant", "y,bias", SET_DTYPE, OK, BF16),
    /* GGUF blocks: a type kite does not run, K not whole blocks of the type (Q4_K: 256 values),
     * w not K / 32 blocks of 18 bytes, y's rows not w's, y over w. */
    P("linear_gguf linear_gguf_q8 dequant_gguf", "type", 1, INV),
    P("linear_gguf linear_gguf_q8 dequant_gguf", "type", 12, INV),
    P("linear_gguf linear_gguf_q8 dequant_gguf", "type", 99, INV),
    T("linear_gguf linear_gguf_q8 dequant_gguf", "w", SET_DIM, INV, 1, 17),
    T("linear_gguf", "w", SET_DTYPE, INV, I8), T("dequant_gguf", "y", SET_DIM, INV, 0, 5),
    ALIAS("dequant_gguf", "y", "w", INV), T("linear_gguf", "x,bias,y", SET_DTYPE, OK, BF16),
    T("dequant_gguf", "y", SET_DTYPE, OK, F16),
    /* grouped GGUF blocks: the type and row bytes as linear_gguf, w's rank, bias [G, N] of x's
     * dtype, group sizes as group_gemm's, y over w or bias. */
    P("group_gemm_gguf", "type", 1, INV), P("group_gemm_gguf", "type", 12, INV),
    T("group_gemm_gguf", "w", SET_DIM, INV, 2, 17), T("group_gemm_gguf", "w", SET_RANK, INV, 2),
    T("group_gemm_gguf", "w", SET_DTYPE, INV, I8),
    T("group_gemm_gguf", "w", SET_STRIDE, INV, -1, 2),
    T("group_gemm_gguf", "bias", SET_DIM, INV, 0, 3),
    T("group_gemm_gguf", "bias", SET_DIM, INV, 1, 7),
    T("group_gemm_gguf", "bias", SET_DTYPE, INV, BF16),
    T("group_gemm_gguf", "group_sizes", SET_DTYPE, INV, F32),
    T("group_gemm_gguf", "group_sizes", SET_DIM, INV, 0, 3),
    T("group_gemm_gguf", "group_sizes", SET_INT, INV, 0, -1), /* negative (host-visible) */
    T("group_gemm_gguf", "group_sizes", SET_INT, INV, 1, 2),  /* sums to 5, M = 3 */
    T("group_gemm_gguf", "y", SET_DIM, INV, 1, 7), ALIAS("group_gemm_gguf", "y", "w", INV),
    ALIAS("group_gemm_gguf", "y", "bias", INV),
    T("group_gemm_gguf", "x,bias,y", SET_DTYPE, OK, BF16),

    /* Training: backward ops take the forward's inputs and dy; gradients like their tensors. */
    T(BWD_ROWWISE, "dx", SET_DIM, INV, 1, 9), T(BWD_ROWWISE, "dy", SET_DIM, INV, 0, 3),
    T(BWD_ROWWISE, "dy", SET_DTYPE, INV, F16), T(BWD_ROWWISE, "dx", SET_DTYPE, INV, BF16),
    T(BWD_ROWWISE, "dx", SET_STRIDES, INV, 0, 1),
    ALIAS(BWD_ROWWISE, "dx", "dy", OK), /* in place over dy */
    T(BWD_ROWWISE, "dy,dx", SET_STRIDES, OK, 16, 1),
    P("activation_backward", "act", KITE_OP_SILU_AND_MUL, INV),
    P("activation_backward", "act", KITE_OP_RELU, OK), P("activation_backward", "act", -1, INV),
    P("gated_backward", "act", KITE_OP_RELU, INV),
    P("gated_backward", "act", KITE_OP_GELU_TANH_AND_MUL, OK),
    P("gated_backward", "limit", NAN, INV), P("gated_backward", "limit", 0.5, OK),
    T("gated_backward", "dy", SET_DIM, INV, 1, 8), T("gated_backward", "dx", SET_DIM, INV, 1, 4),
    T("gated_backward", "x", SET_DIM, INV, 1, 7), ALIAS("gated_backward", "dx", "dy", INV),
    ALIAS("gated_backward", "dx", "x", OK) /* in place */,
    ALIAS("activation_backward", "dx", "x", INV), ALIAS("softmax_backward", "dx", "y", INV),
    ALIAS("rms_norm_backward layer_norm_backward", "dx", "x", INV),
    ALIAS("add_rms_norm_backward add_layer_norm_backward", "dx", "s", INV),
    T(NORM_BWD, "w", SET_DIM, INV, 0, 9), T(NORM_BWD, "dw", SET_DIM, INV, 0, 7),
    T(NORM_BWD, "dw", SET_DTYPE, INV, BF16), T(NORM_BWD, "dw", SET_STRIDES, INV, 2),
    ALIAS(NORM_BWD, "dw", "dy", INV), P(NORM_BWD, "eps", NAN, INV), P(NORM_BWD, "eps", -1.0, INV),
    P("rms_norm_backward add_rms_norm_backward", "offset", INFINITY, INV),
    P("rms_norm_backward add_rms_norm_backward", "offset", 1.0, OK),
    T("layer_norm_backward add_layer_norm_backward", "db", SET_DIM, INV, 0, 3),
    ALIAS("layer_norm_backward add_layer_norm_backward", "db", "dw", INV),
    T("add_rms_norm_backward add_layer_norm_backward", "dres", SET_DIM, INV, 1, 4),
    ALIAS("add_rms_norm_backward add_layer_norm_backward", "dx", "dres", OK),
    T("rms_norm_backward layer_norm_backward", "x,dy,dx", SET_DIM, OK, 0, 0), /* dw = 0 */
    T("rope_backward", "positions", SET_INT, INV, 1, 16),
    T("rope_backward", "dk", SET_DIM, INV, 2, 6), ALIAS("rope_backward", "dk", "dq", INV),
    P("rope_backward", "rot_dim", 7, INV), P("rope_backward", "style", KITE_ROPE_GPTJ, OK),
    P("softmax_backward", "scale", NAN, INV), T("embedding_backward", "dtable", SET_DIM, INV, 1, 7),
    T("embedding_backward", "dtable", SET_DTYPE, INV, F16),
    T("embedding_backward", "dy", SET_DIM, INV, 0, 4),
    T("embedding_backward", "ids", SET_DTYPE, INV, F32),
    ALIAS("embedding_backward", "dtable", "dy", INV),
    T("embedding_backward", "dtable", SET_STRIDES, INV, 0, 1),
    T("embedding_backward", "ids", SET_INT, OK, 0, 10), /* outside [0, V): ignored */
    T("embedding_backward", "ids", SET_INT, OK, 1, -3),
    T("embedding_backward", "dtable", SET_DIM, OK, 0, 0),

    /* Losses: logits[N, V] float, targets[N] i32, loss f32 [1] (the table's reduction: mean). */
    T(LOSSES, "targets", SET_INT, INV, 1, 8), /* outside [0, V): an error on the host */
    T(LOSSES, "targets", SET_INT, INV, 3, -1), T(LOSSES, "targets", SET_INT, OK, 1, 5),
    T(LOSSES, "targets", SET_INT, OK, 1, -100), /* every row ignored: loss 0 */
    T(LOSSES, "targets", SET_DTYPE, INV, F32), T(LOSSES, "targets", SET_DIM, INV, 0, 3),
    T(LOSS_FWD, "loss", SET_DIM, INV, 0, 2), /* reduction mean: one loss */
    T(LOSS_FWD, "loss", SET_DTYPE, INV, BF16), P(LOSSES, "opts.label_smoothing", -0.1, INV),
    P(LOSSES, "opts.label_smoothing", 1.5, INV), P(LOSSES, "opts.label_smoothing", NAN, INV),
    P(LOSSES, "opts.z_loss", -1.0, INV), P(LOSSES, "opts.softcap", INFINITY, INV),
    P(LOSSES, "opts.reduction", 3, INV), P(LOSSES, "opts.label_smoothing", 0.1, OK),
    P(LOSSES, "opts.softcap", 30.0, OK), P(LOSSES, "opts.z_loss", 1e-4, OK),
    T(CE_ROWS, "logits", SET_DIM, INV, 1, 0), /* V = 0 */
    T(CE_ROWS, "logits", SET_DTYPE, UNS, I32), T(CE_ROWS, "logits", SET_STRIDES, OK, 16, 1),
    T("cross_entropy_with_grad", "lse", SET_DIM, INV, 0, 3),
    ALIAS("cross_entropy_with_grad", "loss", "logits", INV),
    ALIAS("cross_entropy_with_grad", "lse", "loss", INV),
    T("cross_entropy_with_grad", "dlogits", SET_DIM, INV, 1, 7),
    T("cross_entropy_with_grad", "dlogits", SET_DTYPE, INV, BF16),
    ALIAS("cross_entropy_with_grad", "dlogits", "logits", OK), /* in place */
    ALIAS("cross_entropy_with_grad", "dlogits", "lse", INV),
    ALIAS("cross_entropy_with_grad", "dlogits", "loss", INV),
    T("cross_entropy_with_grad", "logits,targets,lse,dlogits", SET_DIM, OK, 0, 0),
    T("cross_entropy", "lse", SET_DIM, INV, 0, 3), ALIAS("cross_entropy", "loss", "logits", INV),
    ALIAS("cross_entropy", "lse", "loss", INV),
    T("cross_entropy_backward", "lse", SET_DTYPE, INV, F16),
    T("cross_entropy_backward", "dloss", SET_DIM, INV, 0, 3),
    T("cross_entropy_backward", "dlogits", SET_DIM, INV, 1, 7),
    T("cross_entropy_backward", "dlogits", SET_DTYPE, INV, BF16),
    ALIAS("cross_entropy_backward", "dlogits", "logits", OK), /* in place */
    ALIAS("cross_entropy_backward", "dlogits", "lse", INV),
    T("cross_entropy", "logits,targets,lse", SET_DIM, OK, 0, 0), /* N = 0: the loss is 0 */
    T("cross_entropy_backward", "logits,targets,lse,dlogits", SET_DIM, OK, 0, 0),
    T("fused_linear_cross_entropy", "w", SET_DIM, INV, 1, 7),
    T("fused_linear_cross_entropy", "w", SET_DIM, INV, 0, 0), /* V = 0 */
    T("fused_linear_cross_entropy", "w", SET_DTYPE, INV, BF16),
    T("fused_linear_cross_entropy", "h", SET_DTYPE, UNS, I32),
    T("fused_linear_cross_entropy", "bias", SET_DIM, INV, 0, 5),
    T("fused_linear_cross_entropy", "dh", SET_DIM, INV, 1, 4),
    T("fused_linear_cross_entropy", "dw", SET_DIM, INV, 0, 5),
    T("fused_linear_cross_entropy", "db", SET_DTYPE, INV, F16),
    ALIAS("fused_linear_cross_entropy", "dh", "h", INV),
    ALIAS("fused_linear_cross_entropy", "dw", "w", INV),
    ALIAS("fused_linear_cross_entropy", "db", "loss", INV),
    P("fused_linear_cross_entropy", "chunk_bytes", 1, OK), /* one column at a time */
    T("fused_linear_cross_entropy", "h,targets,dh", SET_DIM, OK, 0, 0),
    T("fused_linear_cross_entropy", "h,w,dh,dw", SET_DIM, OK, 1, 0), /* H = 0: logits = bias */
    /* Sampling: logits[B, V] float, V >= 1; tokens[B] int32; per-row parameters [B]. NaN logits
     * and bad parameter values are found by the host kernels (bit patterns set as int32). */
    T("argmax sample logprobs apply_penalties softcap", "logits", SET_DTYPE, UNS, I32),
    T("argmax sample logprobs apply_penalties softcap", "logits", SET_DIM, INV, 1, 0),
    T("argmax sample", "tokens", SET_DTYPE, INV, F32),
    T("argmax sample", "tokens", SET_DIM, INV, 0, 4),
    T("argmax sample", "tokens", SET_STRIDES, INV, 2),
    ALIAS("argmax sample", "tokens", "logits", INV),
    T("argmax sample", "logits", SET_INT, INV, 4, 0x7fc00000), /* NaN */
    T("argmax sample", "logits", SET_STRIDES, OK, 8, 1),       /* row-strided */
    T("argmax", "logits,tokens", SET_DIM, OK, 0, 0),           /* B = 0 */
    T("sample", "temperature", SET_DTYPE, INV, F16), T("sample", "temperature", SET_DIM, INV, 0, 2),
    T("sample", "temperature", SET_INT, INV, 1, (int32_t)0xbf800000), /* -1 */
    T("sample", "temperature", SET_INT, INV, 1, 0x7f800000),          /* inf */
    T("sample", "temperature", SET_INT, OK, 1, 0),                    /* 0: greedy */
    T("sample", "top_p", SET_INT, INV, 0, 0x7fc00000),
    T("sample", "min_p", SET_INT, INV, 2, 0x7fc00000),
    T("sample", "top_k", SET_INT, OK, 0, -5), /* off */
    T("sample", "top_k", SET_DTYPE, INV, kDLInt, 64, 1), T("sample", "seeds", SET_DTYPE, INV, I32),
    T("sample", "steps", SET_STRIDES, INV, 2), T("sample", "top_p", SET_SHAPE, INV, 2, 3, 1),
    T("apply_penalties", "prompt_ids", SET_DIM, INV, 0, 2),
    T("apply_penalties", "output_ids", SET_DTYPE, INV, F32),
    T("apply_penalties", "output_ids", SET_RANK, INV, 1),
    T("apply_penalties", "output_ids", SET_INT, OK, 0, 99), /* outside [0, V): ignored */
    T("apply_penalties", "prompt_ids", SET_INT, OK, 1, -1),
    T("apply_penalties", "prompt_ids,output_ids", SET_DIM, OK, 1, 0), /* no ids */
    T("apply_penalties", "repetition", SET_DIM, INV, 0, 4),
    T("apply_penalties", "logits", SET_STRIDES, INV, 0, 1),
    ALIAS("apply_penalties", "logits", "repetition", INV), P("logprobs", "n", 21, INV),
    P("logprobs", "n", 7, INV), /* > V */
    P("logprobs", "n", -1, INV), T("logprobs", "top_ids", SET_DIM, INV, 1, 3),
    T("logprobs", "top_logprobs", SET_DTYPE, INV, F16),
    T("logprobs", "token_logprobs", SET_DIM, INV, 0, 2),
    ALIAS("logprobs", "top_logprobs", "logits", INV),
    /* softcap: cap > 0 and finite; logits row-strided, written in place */
    P("softcap", "cap", 0, INV), P("softcap", "cap", -2, INV), P("softcap", "cap", NAN, INV),
    P("softcap", "cap", INFINITY, INV), T("softcap", "logits", SET_STRIDES, OK, 8, 1),
    T("softcap", "logits", SET_STRIDES, INV, 0, 1), T("softcap", "logits", SET_DIM, OK, 0, 0),
    ALIAS("logprobs", "top_logprobs", "top_ids", INV),
    T("logprobs", "tokens,token_logprobs", NULL_TENSOR, OK), /* both absent */
    T("logprobs", "tokens", SET_INT, OK, 0, 99),             /* NaN logprob, not an error */
    /* MLA: c_kv[T, R], k_pe[T, P] into ckv_cache[blocks, bs, R], kpe_cache[blocks, bs, P];
     * decode q_nope[B, H, R], q_pe[B, H, P] over them with block_table[B, max_blocks]. */
    T("mla_store_kv", "slots", SET_INT, INV, 1, 16), /* past the 4 blocks of 4 */
    T("mla_store_kv", "slots", SET_INT, OK, 1, -1),  /* padding: skipped */
    T("mla_store_kv", "c_kv", SET_STRIDES, OK, 40, 1),
    T("mla_store_kv", "c_kv", SET_DTYPE, UNS, I32), T("mla_store_kv", "k_pe", SET_DTYPE, INV, F16),
    T("mla_store_kv", "k_pe", SET_DIM, INV, 0, 4),
    T("mla_store_kv", "ckv_cache", SET_STRIDES, INV, 256, 32, 2),
    T("mla_store_kv", "ckv_cache,kpe_cache", SET_DIM, INV, 1, 0), /* block_size 0 */
    T("mla_store_kv", "ckv_cache", SET_DIM, INV, 2, 2048),        /* R above 1024 */
    ALIAS("mla_store_kv", "kpe_cache", "ckv_cache", INV),
    ALIAS("mla_store_kv", "ckv_cache", "c_kv", INV),
    T("mla_store_kv", "c_kv,k_pe,slots", SET_DIM, OK, 0, 0), P("mla_decode", "scale", 0.0, INV),
    P("mla_decode", "scale", -1.0, INV), P("mla_decode", "scale", NAN, INV),
    P("mla_decode", "scale", INFINITY, INV), T("mla_decode", "q_pe", SET_DTYPE, INV, F16),
    T("mla_decode", "q_pe", SET_DIM, INV, 1, 3),
    T("mla_decode", "kpe_cache", SET_DIM, INV, 2, 300), /* P above 256 */
    T("mla_decode", "kpe_cache", SET_DIM, INV, 0, 5),   /* blocks unlike ckv_cache's */
    T("mla_decode", "block_table", SET_DIM, INV, 0, 3), T("mla_decode", "o", SET_DTYPE, INV, F16),
    T("mla_decode", "lse", SET_DTYPE, INV, F16), ALIAS("mla_decode", "o", "q_nope", INV),
    ALIAS("mla_decode", "o", "ckv_cache", INV), ALIAS("mla_decode", "lse", "o", INV),
    T("mla_decode", "seq_lens", SET_INT, INV, 0, -1),    /* negative */
    T("mla_decode", "seq_lens", SET_INT, INV, 1, 13),    /* past the table's 3 blocks of 4 */
    T("mla_decode", "block_table", SET_INT, INV, 0, 4),  /* past the cache's 4 blocks */
    T("mla_decode", "block_table", SET_INT, INV, 0, -1), /* inside sequence 0 */
    T("mla_decode", "q_nope", SET_STRIDES, OK, 256, 64, 1),
    T("mla_decode", "q_nope,q_pe,block_table,seq_lens,o,lse", SET_DIM, OK, 0, 0),
    T("mla_decode", "seq_lens", SET_INT, OK, 0, 0), /* zeros */
};

/* The shapes the rows of g_cases are written for: per function the sizes of the palette letters
 * a..f of its specs in ops.def (unused letters 1), and the int32 values that differ from the
 * table's fill. A function not listed (a new one) gets the table's own palette. */
typedef struct setup_row {
  const char *fns;
  int64_t palette[6];
} setup_row;

static const setup_row g_setups[] = {
    /* x [4, 8] */
    {ROWWISE " " NORMS " " BWD_ROWWISE " add_rms_norm_backward add_layer_norm_backward"
             " quant dequant " CE_ROWS,
     {4, 8, 1, 1, 1, 1}},
    {GATED " gated_backward", {4, 4, 1, 1, 1, 1}}, /* x [4, 8] -> y [4, 4] */
    /* q [3, 2, 8], k [3, 1, 8], cos_sin [16, 8], rot_dim 8 */
    {"rope rope_backward", {3, 2, 4, 1, 16, 1}},
    {"embedding embedding_backward", {3, 8, 10, 1, 1, 1}}, /* ids [3], table [10, 8] */
    /* k, v [3, 2, 8], caches [4 blocks, 2 heads, block_size 4, 8] */
    {"store_kv", {3, 2, 8, 4, 4, 1}},
    /* q [2, 4, 8], caches [4, 2, 4, 8], block_table [2, 3] */
    {"paged_decode", {2, 2, 8, 4, 4, 3}},
    /* q [3, 4, 8], caches [4, 2, 4, 8], block_table [2, 8] */
    {"paged_prefill", {2, 2, 8, 4, 3, 4}},
    /* q [1, 4, 3, 8], k, v [1, 2, 5, 8], mask [3, 5] */
    {"sdpa sdpa_backward", {1, 2, 3, 8, 5, 1}},
    {VARLEN, {5, 2, 4, 8, 5, 1}}, /* q [5, 4, 8], k, v [5, 2, 8], cu_seqlens [6] */
    {"linear linear_quant fused_linear_cross_entropy", {4, 8, 6, 1, 1, 1}}, /* x [4, 8], w [6, 8] */
    {"group_gemm", {5, 8, 6, 2, 1, 1}},  /* x [5, 8], w [2, 6, 8] */
    {"topk_gating", {3, 6, 2, 1, 1, 1}}, /* logits [3, 6], k = 2 */
    /* x [3, 8], w13 [2 experts, 6, 8], w2 [2, 8, 3], k = 2 */
    {"fused_moe", {3, 8, 3, 2, 1, 1}},
    {"argmax sample logprobs softcap", {3, 6, 2, 1, 1, 1}}, /* logits [3, 6], n = 2 */
    {"apply_penalties", {3, 6, 4, 2, 1, 1}}, /* prompt_ids [3, 4], output_ids [3, 2] */
    /* c_kv [3, 32], k_pe [3, 8], ckv_cache [4 blocks, block_size 4, 32], kpe_cache [4, 4, 8] */
    {"mla_store_kv", {3, 32, 8, 4, 4, 1}},
    /* q_nope [2, 4, 32], q_pe [2, 4, 8], caches [4 blocks, block_size 4 (A), 32 | 8],
     * block_table [2, 3] */
    {"mla_decode", {2, 32, 4, 8, 4, 3}},
};

typedef struct values_row {
  const char *fns, *arg;
  int n;
  int32_t v[4];
} values_row;

static const values_row g_values[] = {
    {LOSSES, "targets", 4, {-100, 1, -100, 2}}, /* rows 0 and 2 ignored, rows 1 and 3 valid */
    {"store_kv", "slots", 3, {5, 0, 11}},       /* block ids 0, 1, 2 */
    {"paged_decode", "seq_lens", 2, {5, 12}},   {"paged_prefill", "cu_q_lens", 3, {0, 1, 3}},
    {"paged_prefill", "seq_lens", 2, {4, 9}},   {"group_gemm", "group_sizes", 2, {2, 3}},
    {"mla_store_kv", "slots", 3, {5, 0, 11}},   {"mla_decode", "seq_lens", 2, {5, 12}},
};

static bool has_word(const char *list, const char *word) {
  if (!strcmp(list, ALL)) return true;
  const size_t n = strlen(word);
  for (const char *p = list; (p = strstr(p, word)) != NULL; p += n)
    if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return true;
  return false;
}

/* The valid call of function fn with the shapes of g_setups, every buffer BUF_BYTES or more
 * (room for the strided views of the cases). */
static bool setup(call *c, size_t fn, kite_ctx *ctx) {
  const char *name = kite_fn_get(fn)->name;
  op_spec_cfg cfg = op_spec_default();
  cfg.min_bytes = BUF_BYTES;
  for (size_t i = 0; i < sizeof g_setups / sizeof g_setups[0]; i++)
    if (has_word(g_setups[i].fns, name))
      memcpy(cfg.palette, g_setups[i].palette, sizeof cfg.palette);
  c->ctx = ctx;
  if (op_call_build(&c->oc, fn, &cfg, g_comm)) {
    record(name, "the table's row cannot be built", "");
    return false;
  }
  for (size_t i = 0; i < sizeof g_values / sizeof g_values[0]; i++) {
    const values_row *r = &g_values[i];
    const int a = op_arg_index(c->oc.info, r->arg);
    if (has_word(r->fns, name) && a >= 0) memcpy(c->oc.t[a].buf, r->v, (size_t)r->n * 4);
  }
  return true;
}

/* The table's argument a case names: "opts.scale" is the argument scale, a member of the
 * options struct the library builds from it (and names so in its messages). */
static int find_arg(const call *c, const char *name) {
  const int i = op_arg_index(c->oc.info, name);
  return i >= 0 || strncmp(name, "opts.", 5) ? i : op_arg_index(c->oc.info, name + 5);
}

static bool set_param(call *c, int i, double v) {
  kite_value *x = &c->oc.v[i];
  switch (c->oc.info->args[i].kind) {
  case KITE_ARG_FLOAT:
    x->f = v;
    return true;
  case KITE_ARG_INT:
  case KITE_ARG_INT64:
    x->i = (int64_t)v;
    return true;
  case KITE_ARG_UINT64:
    x->u = (uint64_t)v;
    return true;
  default:
    return false;
  }
}

/* Applies k to argument i of c (i < 0: the ctx, or nothing); false when it does not apply. */
static bool apply(call *c, const bad_case *k, int i) {
  const bool tensor = i >= 0 && op_arg_is_tensor(c->oc.info->args[i].kind);
  if (k->how == NOTHING) return true;
  if (k->how == NULL_CTX) {
    c->ctx = NULL;
    return true;
  }
  if (k->how == SET_PARAM) return i >= 0 && !tensor && set_param(c, i, k->p);
  if (!tensor) return false;
  DLTensor *t = &c->oc.t[i].t;
  switch (k->how) {
  case NULL_TENSOR:
    c->oc.v[i].t = NULL;
    break;
  case NULL_DATA:
    t->data = NULL;
    break;
  case NULL_SHAPE:
    t->shape = NULL;
    break;
  case SET_RANK:
    t->ndim = (int)k->v[0];
    break;
  case SET_DIM:
    t->shape[k->v[0]] = k->v[1];
    break;
  case SET_SHAPE:
    t->ndim = (int)k->v[0];
    for (int d = 0; d < t->ndim; d++) t->shape[d] = k->v[1 + d];
    break;
  case SET_STRIDE: {
    int64_t *st = c->oc.t[i].strides, s = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
      st[d] = s;
      s *= t->shape[d];
    }
    st[k->v[0] < 0 ? t->ndim + k->v[0] : k->v[0]] = k->v[1];
    t->strides = st;
    break;
  }
  case SET_STRIDES:
    memcpy(c->oc.t[i].strides, k->v, sizeof c->oc.t[i].strides);
    t->strides = c->oc.t[i].strides;
    break;
  case SET_DTYPE:
    t->dtype = (DLDataType){(uint8_t)k->v[0], (uint8_t)k->v[1], (uint16_t)k->v[2]};
    break;
  case SET_DEVICE:
    t->device = (DLDevice){(DLDeviceType)k->v[0], (int)k->v[1]};
    break;
  case SET_OFFSET:
    t->byte_offset = (uint64_t)k->v[0];
    break;
  case SET_INT:
    ((int32_t *)t->data)[k->v[0]] = (int32_t)k->v[1];
    break;
  case SAME_DATA: {
    const int o = find_arg(c, k->other);
    if (o < 0 || !op_arg_is_tensor(c->oc.info->args[o].kind)) return false;
    t->data = c->oc.t[o].t.data;
    break;
  }
  default:
    return false;
  }
  return true;
}

/* Optional tensors that the library takes as NULL only together with another (kite.h's logprobs:
 * tokens and token_logprobs both NULL or both given; top_ids and top_logprobs NULL only with
 * n = 0, and the calls here have n > 0): NULL without `with` NULL too is INVALID_ARG. */
static const struct {
  const char *fn, *arg, *with;
} g_null_with[] = {
    {"logprobs", "tokens", "token_logprobs"},
    {"logprobs", "token_logprobs", "tokens"},
    {"logprobs", "top_ids", NULL},
    {"logprobs", "top_logprobs", NULL},
    {"sdpa_backward", "sinks", "dsinks"}, /* the sinks' gradient needs the sinks */
    {"sdpa_varlen_backward", "sinks", "dsinks"},
};

/* Whether f's call stays valid with the tensors of nulls[] NULL. */
static bool nulls_valid(const kite_fn_info *f, const bool *nulls) {
  for (size_t i = 0; i < f->nargs; i++) {
    if (!nulls[i]) continue;
    if (f->args[i].kind != KITE_ARG_IN_OPT && f->args[i].kind != KITE_ARG_OUT_OPT) return false;
    for (size_t r = 0; r < sizeof g_null_with / sizeof g_null_with[0]; r++) {
      if (strcmp(g_null_with[r].fn, f->name) || strcmp(g_null_with[r].arg, f->args[i].name))
        continue;
      const int w = g_null_with[r].with ? op_arg_index(f, g_null_with[r].with) : -1;
      if (w < 0 || !nulls[w]) return false;
    }
  }
  return true;
}

/* Runs case k on function fn with the comma-separated arguments `args` broken. */
static void run_case(kite_ctx *ctx, size_t fn, const bad_case *k, const char *args) {
  call c;
  if (!setup(&c, fn, ctx)) return;
  const char *name = c.oc.info->name;
  char list[64], first[32] = "", label[200], *save = NULL;
  snprintf(list, sizeof list, "%s", args);
  kite_status want = k->want;
  bool nulls[OP_SPEC_MAX_ARGS] = {false};
  for (char *a = strtok_r(list, ",", &save); a; a = strtok_r(NULL, ",", &save)) {
    if (!first[0]) snprintf(first, sizeof first, "%s", a);
    const int i = find_arg(&c, a);
    if (k->how == NULL_TENSOR && i >= 0) nulls[i] = true;
    if (k->how == SET_OFFSET && k->v[0] == 2 && i >= 0 && c.oc.t[i].t.dtype.bits == 8)
      want = OK; /* two bytes in is aligned for a one-byte element */
    if (k->how == SET_STRIDE && i >= 0 && op_arg_is_tensor(c.oc.info->args[i].kind)) {
      const DLTensor *t = &c.oc.t[i].t;
      const int64_t d = k->v[0] < 0 ? t->ndim + k->v[0] : k->v[0];
      if (d >= 0 && d < t->ndim && t->shape[d] == 1)
        want = OK; /* the stride of a dim of size 1 addresses nothing (kite.h): ignored */
    }
    if (!apply(&c, k, i)) {
      record(name, "a case names an argument the table's row does not have", a);
      op_call_free(&c.oc);
      return;
    }
  }
  if (k->how == NULL_TENSOR) want = nulls_valid(c.oc.info, nulls) ? OK : k->want;
  char who[64];
  snprintf(who, sizeof who, "%s: %s", name, first);
  snprintf(label, sizeof label, "%s(%s) %s {%lld, %lld, %lld} p=%g", name, args,
           g_breakage_names[k->how], (long long)k->v[0], (long long)k->v[1], (long long)k->v[2],
           k->p);
  /* bad values the host kernels of the sampling ops find while they write every token, as
   * kite.h says they do (a device would write them too) */
  const bool may_write = k->how == SET_INT && has_word("argmax sample", name);
  expect(label, run_call(c.ctx, &c.oc, label, may_write), want, who);
  op_call_free(&c.oc);
}

static void test_ops(kite_ctx *ctx) {
  for (size_t ci = 0; ci < sizeof g_cases / sizeof g_cases[0]; ci++) {
    const bad_case *k = &g_cases[ci];
    for (size_t fn = 0; fn < kite_fn_count(); fn++) {
      const kite_fn_info *f = kite_fn_get(fn);
      if (!has_word(k->ops, f->name)) continue;
      if (strcmp(k->arg, "*") != 0) {
        run_case(ctx, fn, k, k->arg);
        continue;
      }
      for (size_t i = 0; i < f->nargs; i++)
        if (op_arg_is_tensor(f->args[i].kind)) run_case(ctx, fn, k, f->args[i].name);
    }
  }
}

/* ---- the sweep: every function of the table ------------------------------------------------ */

/* Argument i of c becomes a compact tensor of dtype dt and that shape, in a buffer of its own of
 * exactly its bytes (filled by the argument's rule), so that a call which wrongly accepts it
 * reads nothing past it unseen by AddressSanitizer. */
static bool reshape(op_call *c, int i, DLDataType dt, int ndim, const int64_t *shape) {
  int64_t sh[OP_SPEC_MAX_DIMS];
  memcpy(sh, shape, (size_t)ndim * sizeof *sh);
  if (op_tensor_alloc(&c->t[i], dt, ndim, sh, 0)) return false;
  op_spec_fill(c->t[i].buf, c->t[i].bytes, dt, c->info->args[i].spec[0], c->rows, 7);
  return true;
}

/* Function fn with the table's palette and dtypes fdt / qdt: the valid call succeeds, and each
 * argument broken on its own fails, with a message naming the op (and the argument where the
 * argument alone is at fault), writing nothing. */
static void sweep_fn(kite_ctx *ctx, size_t fn, DLDataType fdt, DLDataType qdt, const char *tag) {
  const kite_fn_info *f = kite_fn_get(fn);
  op_spec_cfg cfg = op_spec_default();
  cfg.fdt = fdt;
  cfg.qdt = qdt;
  op_call c;
  char what[200];
  if (op_call_build(&c, fn, &cfg, g_comm)) {
    snprintf(what, sizeof what, "sweep %s %s", tag, f->name);
    record(what, "the table's row cannot be built", "");
    return;
  }
  snprintf(what, sizeof what, "sweep %s %s: the table's call", tag, f->name);
  expect(what, run_call(ctx, &c, what, false), OK, NULL);
  op_call_free(&c);

  for (size_t i = 0; i < f->nargs; i++) {
    const kite_arg_info *a = &f->args[i];
    const int ai = (int)i;
    if (a->kind == KITE_ARG_INT) { /* kite_fn_call's own range check */
      op_call_build(&c, fn, &cfg, g_comm);
      c.v[i].i = ((int64_t)1 << 32) + 2;
      snprintf(what, sizeof what, "sweep %s %s: %s = 2^32 + 2", tag, f->name, a->name);
      expect_error(what, run_call(ctx, &c, what, false), INV, f, a->name);
      op_call_free(&c);
    }
    if (!op_arg_is_tensor(a->kind)) continue;

    /* (b) NULL: an error naming the argument, or a valid call without an optional one */
    op_call_build(&c, fn, &cfg, g_comm);
    c.v[i].t = NULL;
    snprintf(what, sizeof what, "sweep %s %s: %s NULL", tag, f->name, a->name);
    bool nulls[OP_SPEC_MAX_ARGS] = {false};
    nulls[i] = true;
    if (nulls_valid(f, nulls))
      expect(what, run_call(ctx, &c, what, false), OK, NULL);
    else
      expect_error(what, run_call(ctx, &c, what, false), INV, f, a->name);
    op_call_free(&c);

    /* (c) another dtype: f64 for a float tensor, f32 for an integer one */
    op_call_build(&c, fn, &cfg, g_comm);
    const DLTensor t0 = c.t[i].t;
    const int is_float = t0.dtype.code == kDLFloat || t0.dtype.code == kDLBfloat ||
                         t0.dtype.code == KITE_DL_FLOAT8_E4M3FN;
    const DLDataType other =
        is_float ? (DLDataType){kDLFloat, 64, 1} : (DLDataType){kDLFloat, 32, 1};
    snprintf(what, sizeof what, "sweep %s %s: %s dtype %s", tag, f->name, a->name,
             is_float ? "f64" : "f32");
    if (reshape(&c, ai, other, t0.ndim, t0.shape))
      expect_error(what, run_call(ctx, &c, what, false), OK, f, NULL);
    op_call_free(&c);

    /* (d) one more dim (of 2) */
    op_call_build(&c, fn, &cfg, g_comm);
    int64_t shape[OP_SPEC_MAX_DIMS];
    const int nd = c.t[i].t.ndim;
    memcpy(shape, c.t[i].shape, sizeof shape);
    shape[nd] = 2;
    snprintf(what, sizeof what, "sweep %s %s: %s rank %d", tag, f->name, a->name, nd + 1);
    if (reshape(&c, ai, c.t[i].t.dtype, nd + 1, shape))
      expect_error(what, run_call(ctx, &c, what, false), OK, f, NULL);
    op_call_free(&c);

    /* (e) on another device than the ctx's */
    op_call_build(&c, fn, &cfg, g_comm);
    c.t[i].t.device = (DLDevice){kDLCUDA, 0};
    snprintf(what, sizeof what, "sweep %s %s: %s on cuda:0", tag, f->name, a->name);
    expect_error(what, run_call(ctx, &c, what, false), OK, f, NULL);
    op_call_free(&c);

    /* (f) each dim whose letter another tensor of the call has too, one larger */
    for (int d = 0; a->spec[2 + d]; d++) {
      const char l = a->spec[2 + d];
      bool shared = false;
      for (size_t j = 0; j < f->nargs; j++)
        shared |= j != i && op_arg_is_tensor(f->args[j].kind) && strchr(f->args[j].spec + 2, l);
      if (!shared || l == '1') continue;
      op_call_build(&c, fn, &cfg, g_comm);
      memcpy(shape, c.t[i].shape, sizeof shape);
      shape[d]++;
      snprintf(what, sizeof what, "sweep %s %s: %s dim %d (%c) + 1", tag, f->name, a->name, d, l);
      if (reshape(&c, ai, c.t[i].t.dtype, c.t[i].t.ndim, shape))
        expect_error(what, run_call(ctx, &c, what, false), OK, f, NULL);
      op_call_free(&c);
    }
  }
}

static void test_sweep(kite_ctx *ctx) {
  static const struct {
    DLDataType f, q;
    const char *tag;
  } dts[] = {{{kDLFloat, 32, 1}, {kDLInt, 8, 1}, "f32"},
             {{kDLBfloat, 16, 1}, {KITE_DL_FLOAT8_E4M3FN, 8, 1}, "bf16"}};
  for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
    for (size_t fn = 0; fn < kite_fn_count(); fn++)
      sweep_fn(ctx, fn, dts[d].f, dts[d].q, dts[d].tag);
}

/* Views the table cannot express: leading dims that do or do not collapse into one stride. */
static void test_views(kite_ctx *ctx) {
  call c;
  if (!setup(&c, (size_t)kite_fn_find("silu"), ctx)) return;
  for (int i = 0; i < 2; i++) {
    c.oc.t[i].t.ndim = 3;
    c.oc.t[i].shape[0] = 2;
    c.oc.t[i].shape[1] = 2;
    c.oc.t[i].shape[2] = 8;
  }
  int64_t strides[3] = {32, 16, 1}; /* [2, 2] rows of stride 16 */
  c.oc.t[0].t.strides = strides;
  expect("silu: x [2,2,8] strides {32,16,1}", op_call_run(ctx, &c.oc), OK, NULL);
  strides[0] = 40; /* 40 != 2 * 16: not one row stride */
  expect("silu: x [2,2,8] strides {40,16,1}", op_call_run(ctx, &c.oc), INV, "silu: x");
  /* x [1,2,8]: the stride of a dim of size 1 does not matter */
  strides[0] = 16;
  strides[1] = 100;
  c.oc.t[0].shape[0] = 1;
  c.oc.t[1].shape[0] = 1;
  expect("silu: x [1,2,8] strides {16,100,1}", op_call_run(ctx, &c.oc), OK, NULL);
  op_call_free(&c.oc);
}
/* ---- strides that address nothing ---------------------------------------------------------
 * A dim of size 1 never steps, and an empty tensor has no element: whatever stride such a dim
 * carries (huge ones that overflow int64 once multiplied, NumPy's 0, negative ones) is ignored,
 * and NULL data with a zero-size dim is fine. Each call must succeed on every backend and give
 * what the compact call gives (under UBSan: without overflowing any offset arithmetic). */
static DLTensor dlt(void *data, DLDataType t, int ndim, int64_t *shape, int64_t *strides) {
  DLTensor d = {.data = data,
                .device = {kDLCPU, 0},
                .ndim = ndim,
                .dtype = t,
                .shape = shape,
                .strides = strides,
                .byte_offset = 0};
  return d;
}

static void test_strides_that_address_nothing(kite_ctx *ctx) {
  const DLDataType f32 = {kDLFloat, 32, 1}, i32 = {kDLInt, 32, 1}, i8 = {kDLInt, 8, 1};
  const int64_t huge = INT64_MAX / 2;
  static const char *const configs[] = {"", "-cpu"}; /* the best kernels, then ref */
  for (int cfg = 0; cfg < 2; cfg++) {
    char what[160];
    kite_config_set(configs[cfg]);
    /* quant of one row: x[1, 16], q[1, 16], scales[1], each leading stride huge */
    float x[16], scales[2];
    int8_t q[2][16];
    for (int i = 0; i < 16; i++) x[i] = (float)(i * 7 % 11) - 5.0f;
    int64_t xs[2] = {1, 16}, ss[1] = {1}, st_big[2] = {huge, 1}, st1_big[1] = {huge};
    for (int v = 0; v < 2; v++) {
      DLTensor xt = dlt(x, f32, 2, xs, v ? st_big : NULL),
               qt = dlt(q[v], i8, 2, xs, v ? st_big : NULL),
               sc = dlt(&scales[v], f32, 1, ss, v ? st1_big : NULL);
      snprintf(what, sizeof what, "quant [1,16], leading strides %s (config \"%s\")",
               v ? "huge" : "compact", configs[cfg]);
      expect(what, kite_quant(ctx, &xt, &qt, &sc), OK, NULL);
    }
    CHECK(!memcmp(q[0], q[1], sizeof q[0]) && scales[0] == scales[1],
          "quant: huge strides on size-1 dims give the compact call's codes and scale");

    /* sdpa, B = 1 and Hkv = 1 with huge strides: q[1, 2, 3, 8], k/v[1, 1, 5, 8] */
    float qa[48], ka[40], va[40], o[2][48], lse[2][6];
    for (int i = 0; i < 48; i++) qa[i] = (float)(i % 5) * 0.25f - 0.5f;
    for (int i = 0; i < 40; i++) ka[i] = (float)(i % 7) * 0.125f, va[i] = (float)(i % 3) - 1.0f;
    int64_t qsh[4] = {1, 2, 3, 8}, ksh[4] = {1, 1, 5, 8}, lsh[3] = {1, 2, 3};
    int64_t qst[4] = {huge, 24, 8, 1}, kst[4] = {huge, huge, 8, 1}, lst[3] = {huge, 3, 1};
    for (int v = 0; v < 2; v++) {
      DLTensor qt = dlt(qa, f32, 4, qsh, v ? qst : NULL), kt = dlt(ka, f32, 4, ksh, v ? kst : NULL),
               vt = dlt(va, f32, 4, ksh, v ? kst : NULL),
               ot = dlt(o[v], f32, 4, qsh, v ? qst : NULL),
               lt = dlt(lse[v], f32, 3, lsh, v ? lst : NULL);
      snprintf(what, sizeof what, "sdpa B=1 Hkv=1, strides %s (config \"%s\")",
               v ? "huge" : "compact", configs[cfg]);
      expect(what, kite_sdpa(ctx, &qt, &kt, &vt, NULL, NULL, NULL, &ot, &lt), OK, NULL);
    }
    CHECK(!memcmp(o[0], o[1], sizeof o[0]) && !memcmp(lse[0], lse[1], sizeof lse[0]),
          "sdpa: huge strides on size-1 dims give the compact call's o and lse");

    /* paged_decode of one sequence: q[1, 2, 8], caches [2, 1, 4, 8] (Hkv = 1), block_table[1, 2],
     * seq_lens[1], o[1, 2, 8], lse[1, 2] */
    float cache_k[64], cache_v[64], od[2][16], ld[2][2];
    for (int i = 0; i < 64; i++) cache_k[i] = (float)(i % 9) * 0.1f, cache_v[i] = (float)(i % 4);
    int32_t bt[2] = {1, 0}, sl[1] = {6};
    int64_t dq[3] = {1, 2, 8}, dc[4] = {2, 1, 4, 8}, db[2] = {1, 2}, dsl[1] = {1}, dl[2] = {1, 2};
    int64_t dqs[3] = {huge, 8, 1}, dcs[4] = {32, huge, 8, 1}, dbs[2] = {huge, 1},
            dls[2] = {huge, 1};
    for (int v = 0; v < 2; v++) {
      DLTensor qt = dlt(qa, f32, 3, dq, v ? dqs : NULL),
               kc = dlt(cache_k, f32, 4, dc, v ? dcs : NULL),
               vc = dlt(cache_v, f32, 4, dc, v ? dcs : NULL),
               btt = dlt(bt, i32, 2, db, v ? dbs : NULL),
               slt = dlt(sl, i32, 1, dsl, v ? st1_big : NULL),
               ot = dlt(od[v], f32, 3, dq, v ? dqs : NULL),
               lt = dlt(ld[v], f32, 2, dl, v ? dls : NULL);
      snprintf(what, sizeof what, "paged_decode B=1 Hkv=1, strides %s (config \"%s\")",
               v ? "huge" : "compact", configs[cfg]);
      expect(what, kite_paged_decode(ctx, &qt, &kc, &vc, &btt, &slt, NULL, NULL, &ot, &lt), OK,
             NULL);
    }
    CHECK(!memcmp(od[0], od[1], sizeof od[0]) && !memcmp(ld[0], ld[1], sizeof ld[0]),
          "paged_decode: huge strides on size-1 dims give the compact call's o and lse");

    /* empty tensors: NULL data, NumPy's stride 0, huge and negative strides on empty dims */
    int64_t esh[2] = {0, 8}, est0[2] = {0, 0}, estn[2] = {-5, huge};
    DLTensor ex = dlt(NULL, f32, 2, esh, est0), ey = dlt(NULL, f32, 2, esh, estn);
    snprintf(what, sizeof what, "rms_norm x[0, 8] NULL data, strides {0,0} / {-5,huge} (\"%s\")",
             configs[cfg]);
    expect(what, kite_rms_norm(ctx, &ex, NULL, 1e-6f, 0.0f, &ey), OK, NULL);
    int64_t msh[2] = {2, 0}, msc[1] = {2}, mst[2] = {huge, -1};
    float msc_out[2] = {-1.0f, -1.0f};
    DLTensor mx = dlt(NULL, f32, 2, msh, mst), mq = dlt(NULL, i8, 2, msh, mst),
             ms = dlt(msc_out, f32, 1, msc, NULL);
    snprintf(what, sizeof what, "quant x[2, 0] NULL data, strides {huge,-1} (\"%s\")",
             configs[cfg]);
    expect(what, kite_quant(ctx, &mx, &mq, &ms), OK, NULL);
    CHECK(msc_out[0] == 0.0f && msc_out[1] == 0.0f, "quant of empty rows: scales 0");
    /* sdpa with no keys: k/v[1, 1, 0, 8] NULL: o = 0 and lse = -inf */
    int64_t k0[4] = {1, 1, 0, 8}, k0s[4] = {0, 0, 0, 0};
    DLTensor qt = dlt(qa, f32, 4, qsh, NULL), kt = dlt(NULL, f32, 4, k0, k0s),
             vt = dlt(NULL, f32, 4, k0, k0s), ot = dlt(o[0], f32, 4, qsh, NULL),
             lt = dlt(lse[0], f32, 3, lsh, NULL);
    snprintf(what, sizeof what, "sdpa Sk = 0, k/v NULL data (\"%s\")", configs[cfg]);
    kite_attn_opts nc = kite_attn_opts_default();
    nc.causal = 0;
    expect(what, kite_sdpa(ctx, &qt, &kt, &vt, NULL, NULL, &nc, &ot, &lt), OK, NULL);
    CHECK(o[0][0] == 0.0f && o[0][47] == 0.0f && isinf(lse[0][0]) && lse[0][0] < 0,
          "sdpa with no keys: o = 0, lse = -inf");
  }
  kite_config_set(NULL);
}

/* Overlapping host ranges have no single meaning for a copy. */
static void test_memcpy_overlap(kite_ctx *ctx) {
  char buf[64] = {0};
  expect("memcpy overlapping ranges", kite_memcpy(ctx, buf + 8, buf, 16, KITE_COPY_HOST_TO_DEVICE),
         INV, "kite_memcpy");
  expect("memcpy the same range", kite_memcpy(ctx, buf, buf, 16, KITE_COPY_DEVICE_TO_DEVICE), INV,
         "kite_memcpy");
  expect("memcpy adjacent ranges", kite_memcpy(ctx, buf + 16, buf, 16, KITE_COPY_HOST_TO_DEVICE),
         OK, NULL);
}

/* ---- everything else in kite.h ----------------------------------------------------------- */
static void test_rope_cache(void) {
  static float buf[16 * 8];
  const char *who = "rope_cache_build";
  const kite_rope_scaling linear = {.type = KITE_ROPE_SCALING_LINEAR, .factor = 2.0};
  const kite_rope_scaling llama3 = {.type = KITE_ROPE_SCALING_LLAMA3,
                                    .factor = 8.0,
                                    .low_freq_factor = 1.0,
                                    .high_freq_factor = 4.0,
                                    .original_max_pos = 8192};
  kite_rope_scaling bad;
  expect("cache NULL", kite_rope_cache_build(NULL, 16, 8, 1e4, NULL), INV,
         "rope_cache_build: cos_sin");
  expect("cache max_pos 0", kite_rope_cache_build(buf, 0, 8, 1e4, NULL), INV,
         "rope_cache_build: max_pos");
  expect("cache max_pos -1", kite_rope_cache_build(buf, -1, 8, 1e4, NULL), INV, who);
  expect("cache rot_dim 7", kite_rope_cache_build(buf, 16, 7, 1e4, NULL), INV,
         "rope_cache_build: rot_dim");
  expect("cache rot_dim 0", kite_rope_cache_build(buf, 16, 0, 1e4, NULL), INV,
         "rope_cache_build: rot_dim");
  expect("cache rot_dim -2", kite_rope_cache_build(buf, 16, -2, 1e4, NULL), INV, who);
  expect("cache overflow", kite_rope_cache_build(buf, INT64_MAX / 2, 4, 1e4, NULL), INV, who);
  expect("cache theta 0", kite_rope_cache_build(buf, 16, 8, 0, NULL), INV,
         "rope_cache_build: theta");
  expect("cache theta -1", kite_rope_cache_build(buf, 16, 8, -1, NULL), INV,
         "rope_cache_build: theta");
  expect("cache theta NaN", kite_rope_cache_build(buf, 16, 8, NAN, NULL), INV,
         "rope_cache_build: theta");
  expect("cache theta inf", kite_rope_cache_build(buf, 16, 8, INFINITY, NULL), INV, who);
  bad = linear, bad.type = (kite_rope_scaling_type)9;
  expect("cache scaling type", kite_rope_cache_build(buf, 16, 8, 1e4, &bad), INV,
         "rope_cache_build: scaling");
  bad = linear, bad.factor = 0;
  expect("cache linear factor 0", kite_rope_cache_build(buf, 16, 8, 1e4, &bad), INV,
         "rope_cache_build: scaling");
  bad = linear, bad.factor = NAN;
  expect("cache linear factor NaN", kite_rope_cache_build(buf, 16, 8, 1e4, &bad), INV, who);
  bad = llama3, bad.high_freq_factor = 1.0;
  expect("cache llama3 low == high", kite_rope_cache_build(buf, 16, 8, 1e4, &bad), INV, who);
  bad = llama3, bad.low_freq_factor = 0;
  expect("cache llama3 low 0", kite_rope_cache_build(buf, 16, 8, 1e4, &bad), INV, who);
  bad = llama3, bad.original_max_pos = 0;
  expect("cache llama3 original_max_pos 0", kite_rope_cache_build(buf, 16, 8, 1e4, &bad), INV, who);
  bad = llama3, bad.factor = -8;
  expect("cache llama3 factor < 0", kite_rope_cache_build(buf, 16, 8, 1e4, &bad), INV, who);

  /* Valid builds, spot-checked: row p, pair i holds cos/sin(p * inv_freq[i]). */
  expect("cache plain", kite_rope_cache_build(buf, 16, 8, 1e4, NULL), OK, NULL);
  CHECK(buf[0] == 1.0f && buf[4] == 0.0f, "cache row 0 is cos 1, sin 0");
  CHECK(fabsf(buf[8] - (float)cos(1.0)) < 1e-6f && fabsf(buf[12] - (float)sin(1.0)) < 1e-6f,
        "cache row 1 pair 0 is cos(1), sin(1)");
  CHECK(fabsf(buf[5 * 8 + 1] - (float)cos(5.0 * pow(1e4, -0.25))) < 1e-6f, "cache row 5 pair 1");
  expect("cache linear", kite_rope_cache_build(buf, 16, 8, 1e4, &linear), OK, NULL);
  CHECK(fabsf(buf[8] - (float)cos(0.5)) < 1e-6f, "linear factor 2 halves the angle");
  expect("cache llama3", kite_rope_cache_build(buf, 16, 8, 5e5, &llama3), OK, NULL);
  CHECK(fabsf(buf[8] - (float)cos(1.0)) < 1e-6f, "llama3 keeps the highest frequency");
  /* pair 3 of rot_dim 8: inv = 5e5^-0.75 ~ 5.3e-5, wavelength ~ 1.2e5 > 8192: divided by 8 */
  CHECK(fabsf(buf[15 * 8 + 3] - (float)cos(15.0 * pow(5e5, -0.75) / 8.0)) < 1e-6f,
        "llama3 divides low frequencies by factor");

  /* yarn (DeepSeek-V3's values over rot_dim 64): every bad field, then the attention factor */
  const kite_rope_scaling yarn = {.type = KITE_ROPE_SCALING_YARN,
                                  .factor = 40.0,
                                  .original_max_pos = 4096,
                                  .beta_fast = 32.0,
                                  .beta_slow = 1.0,
                                  .mscale = 1.0,
                                  .mscale_all_dim = 1.0};
  double freq[32], att = 0.0;
  const char *inv_who = "rope_inv_freq";
  bad = yarn, bad.original_max_pos = 0;
  expect("yarn original_max_pos 0", kite_rope_inv_freq(freq, 64, 1e4, &bad, &att), INV, inv_who);
  bad = yarn, bad.beta_fast = 0.5;
  expect("yarn beta_fast < beta_slow", kite_rope_inv_freq(freq, 64, 1e4, &bad, &att), INV,
         "rope_inv_freq: scaling");
  bad = yarn, bad.beta_slow = -1.0;
  expect("yarn beta_slow < 0", kite_rope_inv_freq(freq, 64, 1e4, &bad, &att), INV, inv_who);
  bad = yarn, bad.mscale = NAN;
  expect("yarn mscale NaN", kite_rope_inv_freq(freq, 64, 1e4, &bad, &att), INV, inv_who);
  bad = yarn, bad.attention_factor = -1.0;
  expect("yarn attention_factor < 0", kite_rope_inv_freq(freq, 64, 1e4, &bad, &att), INV, inv_who);
  bad = yarn, bad.factor = 0.0;
  expect("yarn factor 0", kite_rope_cache_build(buf, 16, 8, 1e4, &bad), INV, who);
  expect("inv_freq NULL", kite_rope_inv_freq(NULL, 64, 1e4, &yarn, &att), INV,
         "rope_inv_freq: inv_freq");
  expect("inv_freq rot_dim 3", kite_rope_inv_freq(freq, 3, 1e4, &yarn, &att), INV,
         "rope_inv_freq: rot_dim");
  expect("yarn", kite_rope_inv_freq(freq, 64, 1e4, &yarn, &att), OK, NULL);
  CHECK(att == 1.0, "yarn with mscale == mscale_all_dim has attention factor 1");
  CHECK(freq[0] == 1.0, "yarn keeps the highest frequency");
  CHECK(fabs(freq[31] - pow(1e4, -62.0 / 64.0) / 40.0) < 1e-18,
        "yarn divides the lowest by factor");
  bad = yarn, bad.mscale = 0.0;
  expect("yarn no mscale", kite_rope_inv_freq(freq, 64, 1e4, &bad, &att), OK, NULL);
  CHECK(fabs(att - (0.1 * log(40.0) + 1.0)) < 1e-15, "yarn attention factor 0.1 ln(factor) + 1");
  CHECK(kite_rope_yarn_mscale(0.5, 1.0) == 1.0, "yarn mscale is 1 for factor <= 1");
}

static void test_ctx_and_memory(kite_ctx *ctx) {
  kite_ctx *c2 = NULL;
  kite_ctx_params p = kite_ctx_params_default();
  CHECK(p.device.device_type == kDLCPU && p.device.device_id == 0, "default params: cpu:0");
  expect("ctx_create out NULL", kite_ctx_create(NULL, NULL), INV, "kite_ctx_create");
  p.num_threads = -1;
  expect("ctx_create threads -1", kite_ctx_create(&p, &c2), INV, "kite_ctx_create");
  CHECK(c2 == NULL, "ctx_create leaves *out NULL on failure");
  p = kite_ctx_params_default(), p.device.device_id = -1;
  expect("ctx_create device_id -1", kite_ctx_create(&p, &c2), INV, "kite_ctx_create");
  p = kite_ctx_params_default(), p.device.device_id = 7;
  expect("ctx_create cpu:7", kite_ctx_create(&p, &c2), UNS, "kite_ctx_create");
  p = kite_ctx_params_default(), p.device.device_type = kDLMetal;
  expect("ctx_create metal", kite_ctx_create(&p, &c2), UNS, "kite_ctx_create");
  p = kite_ctx_params_default(), p.device.device_type = (DLDeviceType)999;
  expect("ctx_create device 999", kite_ctx_create(&p, &c2), UNS, "kite_ctx_create");
  kite_ctx_destroy(NULL);
  expect("ctx_synchronize NULL", kite_ctx_synchronize(NULL), INV, "kite_ctx_synchronize");
  expect("ctx_synchronize", kite_ctx_synchronize(ctx), OK, NULL);

  void *mem = NULL;
  char host[16] = {0};
  expect("malloc ctx NULL", kite_malloc(NULL, 16, &mem), INV, "kite_malloc");
  expect("malloc out NULL", kite_malloc(ctx, 16, NULL), INV, "kite_malloc");
  expect("malloc SIZE_MAX", kite_malloc(ctx, SIZE_MAX, &mem), INV, "kite_malloc");
  expect("malloc 2^50", kite_malloc(ctx, (size_t)1 << 50, &mem), KITE_ERR_OUT_OF_MEMORY, NULL);
  CHECK(mem == NULL, "failed malloc leaves *out NULL");
  expect("free ctx NULL", kite_free(NULL, host), INV, "kite_free");
  expect("malloc 16", kite_malloc(ctx, 16, &mem), OK, NULL);
  expect("memcpy ctx NULL", kite_memcpy(NULL, mem, host, 16, KITE_COPY_HOST_TO_DEVICE), INV,
         "kite_memcpy");
  expect("memcpy dst NULL", kite_memcpy(ctx, NULL, host, 16, KITE_COPY_HOST_TO_DEVICE), INV,
         "kite_memcpy");
  expect("memcpy src NULL", kite_memcpy(ctx, mem, NULL, 16, KITE_COPY_HOST_TO_DEVICE), INV,
         "kite_memcpy");
  expect("memcpy kind 42", kite_memcpy(ctx, mem, host, 16, (kite_copy_kind)42), INV, "kite_memcpy");
  expect("memcpy", kite_memcpy(ctx, mem, host, 16, KITE_COPY_HOST_TO_DEVICE), OK, NULL);
  expect("free", kite_free(ctx, mem), OK, NULL);
}

static void test_config(kite_ctx *ctx) {
  static const char *const bad[] = {"nosuchop=ref", "rms_norm=",     "=ref",         "-", "+",
                                    "rms_norm",     "-nosuchop:ref", "rms_norm==ref"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char what[64];
    snprintf(what, sizeof what, "config_set \"%s\"", bad[i]);
    expect(what, kite_config_set(bad[i]), KITE_ERR_CONFIG, "config");
  }
  CHECK(kite_config_get() != NULL, "config_get is never NULL");

  /* A pin to a kernel that does not exist fails at call time, naming the op: no substitute. */
  expect("config_set pin", kite_config_set("softmax=nosuch.variant"), OK, NULL);
  call c;
  if (!setup(&c, (size_t)kite_fn_find("softmax"), ctx)) return;
  expect("softmax pinned to a missing kernel", op_call_run(ctx, &c.oc), UNS, "softmax");
  expect("config reset", kite_config_set(NULL), OK, NULL);
  expect("softmax after reset", op_call_run(ctx, &c.oc), OK, NULL);
  op_call_free(&c.oc);
}

static void test_registry(void) {
  kite_kernel_info k;
  kite_backend_info b;
  const char *path = NULL, *reason = NULL;
  expect("kernel_get past the end", kite_kernel_get(kite_kernel_count(), &k), INV,
         "kite_kernel_get");
  expect("kernel_get out NULL", kite_kernel_get(0, NULL), INV, "kite_kernel_get");
  expect("kernel_get SIZE_MAX", kite_kernel_get(SIZE_MAX, &k), INV, "kite_kernel_get");
  expect("kernel_get 0", kite_kernel_get(0, &k), OK, NULL);
  expect("backend_get past the end", kite_backend_get(kite_backend_count(), &b), INV,
         "kite_backend_get");
  expect("backend_get out NULL", kite_backend_get(0, NULL), INV, "kite_backend_get");
  expect("backend_get 0", kite_backend_get(0, &b), OK, NULL);
  expect("plugin_failure_get past the end",
         kite_plugin_failure_get(kite_plugin_failure_count(), &path, &reason), INV,
         "kite_plugin_failure_get");
  expect("plugin_failure_get NULL outs", kite_plugin_failure_get(0, NULL, NULL), INV,
         "kite_plugin_failure_get");
  expect("backend_load NULL", kite_backend_load(NULL), INV, "kite_backend_load");
  expect("backend_load \"\"", kite_backend_load(""), INV, "kite_backend_load");
  expect("backend_load missing", kite_backend_load("/nonexistent/libkite-x.so"), KITE_ERR_PLUGIN,
         "/nonexistent/libkite-x.so");
  expect("backend_load /dev/null", kite_backend_load("/dev/null"), KITE_ERR_PLUGIN, "/dev/null");
  expect("backend_load a directory", kite_backend_load("/"), KITE_ERR_PLUGIN, "plugin");

  CHECK(kite_op_from_name(NULL) == -1, "op_from_name(NULL) is -1");
  CHECK(kite_op_from_name("") == -1, "op_from_name(\"\") is -1");
  CHECK(kite_op_from_name("rms_norm ") == -1, "op_from_name(\"rms_norm \") is -1");
  CHECK(kite_op_from_name("nosuch") == -1, "op_from_name(\"nosuch\") is -1");
  CHECK(kite_op_from_name("rms_norm") == KITE_OP_RMS_NORM, "op_from_name(\"rms_norm\")");
  CHECK(kite_op_name((kite_op)-1) == NULL, "op_name(-1) is NULL");
  CHECK(kite_op_name(KITE_OP_COUNT) == NULL, "op_name(COUNT) is NULL");
  CHECK(kite_status_name((kite_status)99) != NULL, "status_name(99) is not NULL");
  CHECK(kite_device_name((DLDeviceType)999) != NULL, "device_name(999) is not NULL");
}

int main(int argc, char **argv) {
  kite_ctx *ctx = NULL;
  g_verbose = argc > 1 && !strcmp(argv[1], "-v");
  setvbuf(stdout, NULL, _IOLBF, 0); /* what ran before a crash stays visible */
  if (kite_ctx_create(NULL, &ctx) != KITE_OK || kite_comm_create_all(&ctx, 1, &g_comm) != OK) {
    printf("cannot create a CPU ctx and its comm: %s\n", kite_last_error());
    return 1;
  }
  test_sweep(ctx);
  test_ops(ctx);
  test_views(ctx);
  test_strides_that_address_nothing(ctx);
  test_memcpy_overlap(ctx);
  test_rope_cache();
  test_ctx_and_memory(ctx);
  test_config(ctx);
  test_registry();
  kite_comm_destroy(g_comm);
  kite_ctx_destroy(ctx);
  return check_summary();
}
