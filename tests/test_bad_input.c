/*
 * Bad-input suite: every public function of kite.h, called with broken arguments, must return
 * the expected status and a message naming the op and the argument at fault ("rms_norm: w: ..."),
 * without crashing or touching memory it does not own (the suite also runs under ASan + UBSan).
 * A few valid calls prove that the checks do not simply reject everything.
 *
 * Op calls are table-driven: each op has a valid call (g_ops); each row of g_cases breaks one
 * thing in that call for a set of ops ("*" = every op, every tensor) and names the status wanted.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kite/kite.h"

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

static int g_pass, g_fail;
static bool g_verbose; /* argv[1] == "-v": print every message */

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
  if (!why) {
    g_pass++;
    return;
  }
  g_fail++;
  printf("FAIL %s: %s: got %s, want %s; wanted \"%s\" in \"%s\"\n", what, why,
         kite_status_name(got), kite_status_name(want), who ? who : "", msg);
}

static void check(bool ok, const char *what) {
  if (ok) {
    g_pass++;
  } else {
    g_fail++;
    printf("FAIL %s\n", what);
  }
}

/* ---- op calls ----------------------------------------------------------------------------- */
enum { MAX_ARGS = 8, MAX_SHAPE = 12, BUF_BYTES = 4096 };
/* targets of the cross-entropy calls: rows 0 and 2 ignored, rows 1 and 3 valid */
#define CE_TARGETS "= -100 1 -100 2"

/* A valid call: per tensor "name dtype dims... [= first int32 values]"; a name ending in '?' is
 * optional (NULL valid). */
typedef struct op_desc {
  const char *op;
  const char *tensors[MAX_ARGS];
} op_desc;

static const op_desc g_ops[] = {
    {"silu", {"x f32 4 8", "y f32 4 8"}},
    {"gelu", {"x f32 4 8", "y f32 4 8"}},
    {"gelu_tanh", {"x f32 4 8", "y f32 4 8"}},
    {"gelu_quick", {"x f32 4 8", "y f32 4 8"}},
    {"relu", {"x f32 4 8", "y f32 4 8"}},
    {"silu_and_mul", {"x f32 4 8", "y f32 4 4"}},
    {"gelu_and_mul", {"x f32 4 8", "y f32 4 4"}},
    {"gelu_tanh_and_mul", {"x f32 4 8", "y f32 4 4"}},
    {"rms_norm", {"x f32 4 8", "w? f32 8", "y f32 4 8"}},
    {"layer_norm", {"x f32 4 8", "w? f32 8", "b? f32 8", "y f32 4 8"}},
    {"add_rms_norm", {"x f32 4 8", "residual f32 4 8", "w? f32 8", "y f32 4 8"}},
    {"add_layer_norm", {"x f32 4 8", "residual f32 4 8", "w? f32 8", "b? f32 8", "y f32 4 8"}},
    {"rope", {"q f32 3 2 8", "k? f32 3 1 8", "positions i32 3", "cos_sin f32 16 8"}},
    {"softmax", {"x f32 4 8", "y f32 4 8"}},
    {"embedding", {"ids i32 3", "table f32 10 8", "y f32 3 8"}},
    /* caches [num_blocks 4, Hkv 2, block_size 4, D 8]; block ids 0, 1, 2 */
    {"store_kv",
     {"k f32 3 2 8", "v f32 3 2 8", "key_cache f32 4 2 4 8", "value_cache f32 4 2 4 8",
      "slots i32 3 = 5 0 11"}},
    {"paged_decode",
     {"q f32 2 4 8", "key_cache f32 4 2 4 8", "value_cache f32 4 2 4 8", "block_table i32 2 3",
      "seq_lens i32 2 = 5 12", "o f32 2 4 8", "lse? f32 2 4"}},
    {"paged_prefill",
     {"q f32 3 4 8", "key_cache f32 4 2 4 8", "value_cache f32 4 2 4 8", "block_table i32 2 3",
      "cu_q_lens i32 3 = 0 1 3", "seq_lens i32 2 = 4 9", "o f32 3 4 8", "lse? f32 3 4"}},
    {"sdpa",
     {"q f32 1 4 3 8", "k f32 1 2 5 8", "v f32 1 2 5 8", "mask? f32 3 5", "o f32 1 4 3 8",
      "lse? f32 1 4 3"}},
    {"linear", {"x f32 4 8", "w f32 6 8", "bias? f32 6", "y f32 4 6"}},
    {"group_gemm", {"x f32 5 8", "w f32 2 6 8", "group_sizes i32 2 = 2 3", "y f32 5 6"}},
    {"topk_gating", {"logits f32 3 6", "weights f32 3 2", "ids i32 3 2"}}, /* k = 2 of E = 6 */
    /* E = 4 experts, I = 3, H = 8, k = 2 */
    {"fused_moe",
     {"x f32 3 8", "w13 f32 4 6 8", "w2 f32 4 8 3", "weights f32 3 2", "ids i32 3 2", "y f32 3 8"}},
    {"quant", {"x f32 4 8", "q i8 4 8", "scales f32 4"}},
    {"dequant", {"q i8 4 8", "scales f32 4", "y f32 4 8"}},
    {"linear_quant",
     {"xq i8 4 8", "x_scales f32 4", "wq i8 6 8", "w_scales f32 6", "bias? f32 6", "y f32 4 6"}},
    /* training */
    {"activation_backward", {"x f32 4 8", "dy f32 4 8", "dx f32 4 8"}},
    {"gated_backward", {"x f32 4 8", "dy f32 4 4", "dx f32 4 8"}},
    {"rms_norm_backward", {"x f32 4 8", "w? f32 8", "dy f32 4 8", "dx f32 4 8", "dw? f32 8"}},
    {"layer_norm_backward",
     {"x f32 4 8", "w? f32 8", "dy f32 4 8", "dx f32 4 8", "dw? f32 8", "db? f32 8"}},
    {"add_rms_norm_backward",
     {"s f32 4 8", "w? f32 8", "dy f32 4 8", "dres? f32 4 8", "dx f32 4 8", "dw? f32 8"}},
    {"add_layer_norm_backward",
     {"s f32 4 8", "w? f32 8", "dy f32 4 8", "dres? f32 4 8", "dx f32 4 8", "dw? f32 8",
      "db? f32 8"}},
    {"rope_backward", {"q f32 3 2 8", "k? f32 3 1 8", "positions i32 3", "cos_sin f32 16 8"}},
    {"softmax_backward", {"y f32 4 8", "dy f32 4 8", "dx f32 4 8"}},
    {"embedding_backward", {"ids i32 3", "dy f32 3 8", "dtable f32 10 8"}},
    {"cross_entropy", {"logits f32 4 8", "targets i32 4 " CE_TARGETS, "loss f32 4", "lse? f32 4"}},
    {"cross_entropy_backward",
     {"logits f32 4 8", "targets i32 4 " CE_TARGETS, "lse f32 4", "dloss f32 4",
      "dlogits f32 4 8"}},
    {"fused_linear_cross_entropy",
     {"h f32 4 8", "w f32 6 8", "bias? f32 6", "targets i32 4 " CE_TARGETS, "loss f32 4",
      "dh? f32 4 8", "dw? f32 6 8", "db? f32 6"}},
    {"argmax", {"logits f32 3 6", "tokens i32 3"}},
    {"sample",
     {"logits f32 3 6", "temperature? f32 3", "top_k? i32 3", "top_p? f32 3", "min_p? f32 3",
      "seeds? i64 3", "steps? i64 3", "tokens i32 3"}},
    {"apply_penalties",
     {"logits f32 3 6", "prompt_ids? i32 3 4", "output_ids? i32 3 2", "repetition? f32 3",
      "presence? f32 3", "frequency? f32 3"}},
    /* n = 2 */
    {"logprobs",
     {"logits f32 3 6", "tokens i32 3", "token_logprobs f32 3", "top_ids i32 3 2",
      "top_logprobs f32 3 2"}},
};

/* One op call being prepared: its tensors and scalar parameters. */
typedef struct call {
  kite_ctx *ctx;
  int n;
  char name[MAX_ARGS][16];
  bool optional[MAX_ARGS];
  DLTensor t[MAX_ARGS];
  DLTensor *arg[MAX_ARGS]; /* what the op receives: &t[i], or NULL */
  int64_t shape[MAX_ARGS][MAX_SHAPE], strides[MAX_ARGS][MAX_SHAPE];
  float eps, offset, limit, scale;
  int64_t rot_dim;
  int style, pos;
  kite_attn_opts opts;
  bool has_opts; /* pass &opts rather than NULL (the defaults) */
  int64_t topk;
  int renormalize, act;
  kite_ce_opts ce;
  size_t chunk_bytes;
  int64_t top_n; /* logprobs */
} call;

/* Every tensor's memory: big enough for the strided views below, refilled before each call. */
static _Alignas(64) unsigned char g_buf[MAX_ARGS][BUF_BYTES];

static DLDataType dl_type(const char *s) {
  if (!strcmp(s, "i32")) return (DLDataType){kDLInt, 32, 1};
  if (!strcmp(s, "i8")) return (DLDataType){kDLInt, 8, 1};
  if (!strcmp(s, "i64")) return (DLDataType){kDLInt, 64, 1};
  if (!strcmp(s, "f16")) return (DLDataType){kDLFloat, 16, 1};
  if (!strcmp(s, "bf16")) return (DLDataType){kDLBfloat, 16, 1};
  return (DLDataType){kDLFloat, 32, 1};
}

static void setup(call *c, const op_desc *d, kite_ctx *ctx) {
  memset(c, 0, sizeof *c);
  c->ctx = ctx;
  c->eps = 1e-5f;
  c->scale = 1.0f;
  c->rot_dim = 8;
  c->style = KITE_ROPE_NEOX;
  c->pos = KITE_NORM_PRE;
  c->opts = kite_attn_opts_default();
  c->topk = 2;
  c->act = KITE_MOE_SILU;
  c->ce = kite_ce_opts_default();
  c->ce.reduction = KITE_REDUCTION_NONE; /* a loss per row: no one-element tensors */
  c->top_n = 2;
  for (int i = 0; i < MAX_ARGS && d->tensors[i]; i++, c->n++) {
    char spec[64], *save = NULL;
    snprintf(spec, sizeof spec, "%s", d->tensors[i]);
    snprintf(c->name[i], sizeof c->name[i], "%s", strtok_r(spec, " ", &save));
    size_t len = strlen(c->name[i]);
    if (c->name[i][len - 1] == '?') {
      c->optional[i] = true;
      c->name[i][len - 1] = '\0';
    }
    DLTensor *t = &c->t[i];
    t->dtype = dl_type(strtok_r(NULL, " ", &save));
    char *tok;
    while ((tok = strtok_r(NULL, " ", &save)) != NULL && strcmp(tok, "=") != 0)
      c->shape[i][t->ndim++] = atoll(tok);
    t->data = g_buf[i];
    t->device = (DLDevice){kDLCPU, 0};
    t->shape = c->shape[i];
    c->arg[i] = t;
    /* Small floats everywhere; int32 tensors (ids, positions) get valid indices 0, 1, 2. */
    for (int j = 0; j < BUF_BYTES / 4; j++) {
      if (t->dtype.code == kDLInt)
        ((int32_t *)g_buf[i])[j] = j % 3;
      else
        ((float *)g_buf[i])[j] = 0.25f + 0.01f * (float)(j % 7);
    }
    for (int j = 0; tok && (tok = strtok_r(NULL, " ", &save)) != NULL; j++)
      ((int32_t *)g_buf[i])[j] = atoi(tok);
  }
}

static const op_desc *op_desc_of(const char *op) {
  for (size_t i = 0; i < sizeof g_ops / sizeof g_ops[0]; i++)
    if (!strcmp(g_ops[i].op, op)) return &g_ops[i];
  return NULL;
}

static int find_arg(const call *c, const char *name) {
  for (int i = 0; i < c->n; i++)
    if (!strcmp(c->name[i], name)) return i;
  return -1;
}

static bool set_param(call *c, const char *name, double v) {
  if (!strcmp(name, "eps"))
    c->eps = (float)v;
  else if (!strcmp(name, "offset"))
    c->offset = (float)v;
  else if (!strcmp(name, "limit"))
    c->limit = (float)v;
  else if (!strcmp(name, "scale"))
    c->scale = (float)v;
  else if (!strcmp(name, "rot_dim"))
    c->rot_dim = (int64_t)v;
  else if (!strcmp(name, "style"))
    c->style = (int)v;
  else if (!strcmp(name, "pos"))
    c->pos = (int)v;
  else if (!strcmp(name, "opts.scale"))
    c->opts.scale = (float)v;
  else if (!strcmp(name, "opts.softcap"))
    c->opts.softcap = c->ce.softcap = (float)v; /* attention's and the losses' */
  else if (!strcmp(name, "opts.window_left"))
    c->opts.window_left = (int32_t)v;
  else if (!strcmp(name, "opts.gqa"))
    c->opts.gqa = (kite_gqa_layout)v;
  else if (!strcmp(name, "opts.causal"))
    c->opts.causal = (int32_t)v;
  else if (!strcmp(name, "k"))
    c->topk = (int64_t)v;
  else if (!strcmp(name, "renormalize"))
    c->renormalize = (int)v;
  else if (!strcmp(name, "act"))
    c->act = (int)v;
  else if (!strcmp(name, "opts.label_smoothing"))
    c->ce.label_smoothing = (float)v;
  else if (!strcmp(name, "opts.z_loss"))
    c->ce.z_loss = (float)v;
  else if (!strcmp(name, "opts.reduction"))
    c->ce.reduction = (kite_reduction)v;
  else if (!strcmp(name, "opts.ignore_index"))
    c->ce.ignore_index = (int32_t)v;
  else if (!strcmp(name, "chunk_bytes"))
    c->chunk_bytes = (size_t)v;
  else if (!strcmp(name, "n"))
    c->top_n = (int64_t)v;
  else
    return false;
  c->has_opts = !strncmp(name, "opts.", 5);
  return true;
}

static kite_status invoke(const char *op, const call *c) {
  kite_ctx *x = c->ctx;
  DLTensor *const *a = c->arg;
  if (!strcmp(op, "silu")) return kite_silu(x, a[0], a[1]);
  if (!strcmp(op, "gelu")) return kite_gelu(x, a[0], a[1]);
  if (!strcmp(op, "gelu_tanh")) return kite_gelu_tanh(x, a[0], a[1]);
  if (!strcmp(op, "gelu_quick")) return kite_gelu_quick(x, a[0], a[1]);
  if (!strcmp(op, "relu")) return kite_relu(x, a[0], a[1]);
  if (!strcmp(op, "silu_and_mul")) return kite_silu_and_mul(x, a[0], c->limit, a[1]);
  if (!strcmp(op, "gelu_and_mul")) return kite_gelu_and_mul(x, a[0], c->limit, a[1]);
  if (!strcmp(op, "gelu_tanh_and_mul")) return kite_gelu_tanh_and_mul(x, a[0], c->limit, a[1]);
  if (!strcmp(op, "rms_norm")) return kite_rms_norm(x, a[0], a[1], c->eps, c->offset, a[2]);
  if (!strcmp(op, "layer_norm")) return kite_layer_norm(x, a[0], a[1], a[2], c->eps, a[3]);
  if (!strcmp(op, "add_rms_norm"))
    return kite_add_rms_norm(x, a[0], a[1], a[2], c->eps, c->offset, (kite_norm_pos)c->pos, a[3]);
  if (!strcmp(op, "add_layer_norm"))
    return kite_add_layer_norm(x, a[0], a[1], a[2], a[3], c->eps, (kite_norm_pos)c->pos, a[4]);
  if (!strcmp(op, "rope"))
    return kite_rope(x, a[0], a[1], a[2], a[3], c->rot_dim, (kite_rope_style)c->style);
  if (!strcmp(op, "softmax")) return kite_softmax(x, a[0], c->scale, a[1]);
  if (!strcmp(op, "embedding")) return kite_embedding(x, a[0], a[1], a[2]);
  const kite_attn_opts *o = c->has_opts ? &c->opts : NULL;
  if (!strcmp(op, "store_kv")) return kite_store_kv(x, a[0], a[1], a[2], a[3], a[4]);
  if (!strcmp(op, "paged_decode"))
    return kite_paged_decode(x, a[0], a[1], a[2], a[3], a[4], o, a[5], a[6]);
  if (!strcmp(op, "paged_prefill"))
    return kite_paged_prefill(x, a[0], a[1], a[2], a[3], a[4], a[5], o, a[6], a[7]);
  if (!strcmp(op, "sdpa")) return kite_sdpa(x, a[0], a[1], a[2], a[3], o, a[4], a[5]);
  if (!strcmp(op, "linear")) return kite_linear(x, a[0], a[1], a[2], a[3]);
  if (!strcmp(op, "group_gemm")) return kite_group_gemm(x, a[0], a[1], a[2], a[3]);
  if (!strcmp(op, "topk_gating"))
    return kite_topk_gating(x, a[0], c->topk, c->renormalize, a[1], a[2]);
  if (!strcmp(op, "fused_moe"))
    return kite_fused_moe(x, a[0], a[1], a[2], a[3], a[4], (kite_moe_act)c->act, a[5]);
  if (!strcmp(op, "quant")) return kite_quant(x, a[0], a[1], a[2]);
  if (!strcmp(op, "dequant")) return kite_dequant(x, a[0], a[1], a[2]);
  if (!strcmp(op, "linear_quant")) return kite_linear_quant(x, a[0], a[1], a[2], a[3], a[4], a[5]);
  /* training; act 0 is KITE_OP_SILU, the gated default silu_and_mul */
  if (!strcmp(op, "activation_backward"))
    return kite_activation_backward(x, (kite_op)c->act, a[0], a[1], a[2]);
  if (!strcmp(op, "gated_backward"))
    return kite_gated_backward(x, c->act ? (kite_op)c->act : KITE_OP_SILU_AND_MUL, a[0], a[1],
                               c->limit, a[2]);
  if (!strcmp(op, "rms_norm_backward"))
    return kite_rms_norm_backward(x, a[0], a[1], a[2], c->eps, c->offset, a[3], a[4]);
  if (!strcmp(op, "layer_norm_backward"))
    return kite_layer_norm_backward(x, a[0], a[1], a[2], c->eps, a[3], a[4], a[5]);
  if (!strcmp(op, "add_rms_norm_backward"))
    return kite_add_rms_norm_backward(x, a[0], a[1], a[2], a[3], c->eps, c->offset, a[4], a[5]);
  if (!strcmp(op, "add_layer_norm_backward"))
    return kite_add_layer_norm_backward(x, a[0], a[1], a[2], a[3], c->eps, a[4], a[5], a[6]);
  if (!strcmp(op, "rope_backward"))
    return kite_rope_backward(x, a[0], a[1], a[2], a[3], c->rot_dim, (kite_rope_style)c->style);
  if (!strcmp(op, "softmax_backward")) return kite_softmax_backward(x, a[0], a[1], c->scale, a[2]);
  if (!strcmp(op, "embedding_backward")) return kite_embedding_backward(x, a[0], a[1], a[2]);
  if (!strcmp(op, "cross_entropy")) return kite_cross_entropy(x, a[0], a[1], &c->ce, a[2], a[3]);
  if (!strcmp(op, "cross_entropy_backward"))
    return kite_cross_entropy_backward(x, a[0], a[1], a[2], a[3], &c->ce, a[4]);
  if (!strcmp(op, "fused_linear_cross_entropy")) {
    const kite_flce_opts fo = {.ce = c->ce, .chunk_bytes = c->chunk_bytes};
    return kite_fused_linear_cross_entropy(x, a[0], a[1], a[2], a[3], &fo, a[4], a[5], a[6], a[7]);
  }
  if (!strcmp(op, "argmax")) return kite_argmax(x, a[0], a[1]);
  if (!strcmp(op, "sample")) {
    kite_sampling_params p = kite_sampling_params_default();
    p.temperature = a[1], p.top_k = a[2], p.top_p = a[3], p.min_p = a[4];
    p.seeds = a[5], p.steps = a[6];
    return kite_sample(x, a[0], &p, a[7]);
  }
  if (!strcmp(op, "apply_penalties"))
    return kite_apply_penalties(x, a[0], a[1], a[2], a[3], a[4], a[5]);
  if (!strcmp(op, "logprobs")) return kite_logprobs(x, a[0], a[1], c->top_n, a[2], a[3], a[4]);
  return KITE_ERR_INTERNAL;
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
  const char *ops; /* space-separated op names, or "*" */
  const char *arg; /* tensor(s) broken ("x,y" breaks both the same way; "*" each one in turn) or
                      the parameter; the message must contain "<op>: <first arg>" */
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
#define ATTN PAGED " sdpa"
#define BWD_ROWWISE "activation_backward softmax_backward rms_norm_backward layer_norm_backward"
#define NORM_BWD                                                                                   \
  "rms_norm_backward layer_norm_backward add_rms_norm_backward add_layer_norm_backward"
#define LOSSES "cross_entropy cross_entropy_backward fused_linear_cross_entropy"
#define LOSS_FWD "cross_entropy fused_linear_cross_entropy"
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
    T(PAGED, "seq_lens", SET_INT, INV, 1, 13),           /* past the table's 3 blocks of 4 */
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
    ALIAS("gated_backward", "dx", "x", INV), ALIAS("activation_backward", "dx", "x", INV),
    ALIAS("softmax_backward", "dx", "y", INV),
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
    T("rope_backward", "k", SET_DIM, INV, 2, 6), ALIAS("rope_backward", "k", "q", INV),
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

    /* Losses: logits[N, V] float, targets[N] i32, loss f32 [1] (mean) or [N] (none). */
    T(LOSSES, "targets", SET_INT, INV, 1, 8), /* outside [0, V): an error on the host */
    T(LOSSES, "targets", SET_INT, INV, 3, -1), T(LOSSES, "targets", SET_INT, OK, 1, 5),
    T(LOSSES, "targets", SET_INT, OK, 1, -100), /* every row ignored: loss 0 */
    T(LOSSES, "targets", SET_DTYPE, INV, F32), T(LOSSES, "targets", SET_DIM, INV, 0, 3),
    T(LOSS_FWD, "loss", SET_DIM, INV, 0, 1), T(LOSS_FWD, "loss", SET_DTYPE, INV, BF16),
    P(LOSSES, "opts.label_smoothing", -0.1, INV), P(LOSSES, "opts.label_smoothing", 1.5, INV),
    P(LOSSES, "opts.label_smoothing", NAN, INV), P(LOSSES, "opts.z_loss", -1.0, INV),
    P(LOSSES, "opts.softcap", INFINITY, INV), P(LOSSES, "opts.reduction", 3, INV),
    P(LOSSES, "opts.label_smoothing", 0.1, OK), P(LOSSES, "opts.softcap", 30.0, OK),
    P(LOSSES, "opts.z_loss", 1e-4, OK),
    T("cross_entropy cross_entropy_backward", "logits", SET_DIM, INV, 1, 0), /* V = 0 */
    T("cross_entropy cross_entropy_backward", "logits", SET_DTYPE, UNS, I32),
    T("cross_entropy cross_entropy_backward", "logits", SET_STRIDES, OK, 16, 1),
    T("cross_entropy", "lse", SET_DIM, INV, 0, 3), ALIAS("cross_entropy", "loss", "logits", INV),
    ALIAS("cross_entropy", "lse", "loss", INV),
    T("cross_entropy_backward", "lse", SET_DTYPE, INV, F16),
    T("cross_entropy_backward", "dloss", SET_DIM, INV, 0, 3),
    T("cross_entropy_backward", "dlogits", SET_DIM, INV, 1, 7),
    T("cross_entropy_backward", "dlogits", SET_DTYPE, INV, BF16),
    ALIAS("cross_entropy_backward", "dlogits", "logits", OK), /* in place */
    ALIAS("cross_entropy_backward", "dlogits", "lse", INV),
    T("cross_entropy", "logits,targets,lse,loss", SET_DIM, OK, 0, 0), /* N = 0: the loss is 0 */
    T("cross_entropy_backward", "logits,targets,lse,dloss,dlogits", SET_DIM, OK, 0, 0),
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
    T("fused_linear_cross_entropy", "h,targets,dh,loss", SET_DIM, OK, 0, 0),
    T("fused_linear_cross_entropy", "h,w,dh,dw", SET_DIM, OK, 1, 0), /* H = 0: logits = bias */
    /* Sampling: logits[B, V] float, V >= 1; tokens[B] int32; per-row parameters [B]. NaN logits
     * and bad parameter values are found by the host kernels (bit patterns set as int32). */
    T("argmax sample logprobs apply_penalties", "logits", SET_DTYPE, UNS, I32),
    T("argmax sample logprobs apply_penalties", "logits", SET_DIM, INV, 1, 0),
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
    ALIAS("logprobs", "top_logprobs", "top_ids", INV),
    T("logprobs", "tokens", SET_INT, OK, 0, 99), /* NaN logprob, not an error */
};

static bool has_word(const char *list, const char *word) {
  if (!strcmp(list, ALL)) return true;
  const size_t n = strlen(word);
  for (const char *p = list; (p = strstr(p, word)) != NULL; p += n)
    if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return true;
  return false;
}

/* Applies k to tensor i of c (i < 0: a parameter or the ctx); false for an unknown parameter. */
static bool apply(call *c, const bad_case *k, int i) {
  DLTensor *t = i >= 0 ? &c->t[i] : NULL;
  switch (k->how) {
  case NOTHING:
    break;
  case NULL_CTX:
    c->ctx = NULL;
    break;
  case NULL_TENSOR:
    c->arg[i] = NULL;
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
    int64_t s = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
      c->strides[i][d] = s;
      s *= t->shape[d];
    }
    c->strides[i][k->v[0] < 0 ? t->ndim + k->v[0] : k->v[0]] = k->v[1];
    t->strides = c->strides[i];
    break;
  }
  case SET_STRIDES:
    memcpy(c->strides[i], k->v, sizeof k->v);
    t->strides = c->strides[i];
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
  case SAME_DATA:
    t->data = c->t[find_arg(c, k->other)].data;
    break;
  case SET_PARAM:
    return set_param(c, k->arg, k->p);
  }
  return true;
}

/* Runs case k on op d with the comma-separated tensors `args` broken (or a parameter). */
static void run_case(kite_ctx *ctx, const op_desc *d, const bad_case *k, const char *args) {
  call c;
  setup(&c, d, ctx);
  char list[64], first[32] = "", label[160], *save = NULL;
  snprintf(list, sizeof list, "%s", args);
  kite_status want = k->want;
  for (char *a = strtok_r(list, ",", &save); a; a = strtok_r(NULL, ",", &save)) {
    if (!first[0]) snprintf(first, sizeof first, "%s", a);
    const int i = find_arg(&c, a);
    const bool is_param = k->how == SET_PARAM || k->how == NULL_CTX || k->how == NOTHING;
    if (k->how == NULL_TENSOR && i >= 0 && c.optional[i]) want = OK;
    if (k->how == SET_OFFSET && k->v[0] == 2 && i >= 0 && c.t[i].dtype.bits == 8)
      want = OK; /* two bytes in is aligned for a one-byte element */
    if ((i < 0 && !is_param) || !apply(&c, k, is_param ? -1 : i)) {
      printf("FAIL table: %s has no argument %s\n", d->op, a);
      g_fail++;
      return;
    }
  }
  char who[64];
  snprintf(who, sizeof who, "%s: %s", d->op, first);
  snprintf(label, sizeof label, "%s(%s) %s {%lld, %lld, %lld} p=%g", d->op, args,
           g_breakage_names[k->how], (long long)k->v[0], (long long)k->v[1], (long long)k->v[2],
           k->p);
  expect(label, invoke(d->op, &c), want, who);
}

static void test_ops(kite_ctx *ctx) {
  for (size_t ci = 0; ci < sizeof g_cases / sizeof g_cases[0]; ci++) {
    const bad_case *k = &g_cases[ci];
    for (size_t oi = 0; oi < sizeof g_ops / sizeof g_ops[0]; oi++) {
      const op_desc *d = &g_ops[oi];
      if (!has_word(k->ops, d->op)) continue;
      if (strcmp(k->arg, "*") != 0) {
        run_case(ctx, d, k, k->arg);
        continue;
      }
      call c;
      setup(&c, d, ctx);
      for (int i = 0; i < c.n; i++) run_case(ctx, d, k, c.name[i]);
    }
  }
}

/* Views the table cannot express: leading dims that do or do not collapse into one stride. */
static void test_views(kite_ctx *ctx) {
  call c;
  setup(&c, op_desc_of("silu"), ctx);
  for (int i = 0; i < 2; i++) {
    c.t[i].ndim = 3;
    c.shape[i][0] = 2;
    c.shape[i][1] = 2;
    c.shape[i][2] = 8;
  }
  int64_t strides[3] = {32, 16, 1}; /* [2, 2] rows of stride 16 */
  c.t[0].strides = strides;
  expect("silu: x [2,2,8] strides {32,16,1}", invoke("silu", &c), OK, NULL);
  strides[0] = 40; /* 40 != 2 * 16: not one row stride */
  expect("silu: x [2,2,8] strides {40,16,1}", invoke("silu", &c), INV, "silu: x");
  /* x [1,2,8]: the stride of a dim of size 1 does not matter */
  strides[0] = 16;
  strides[1] = 100;
  c.shape[0][0] = 1;
  c.shape[1][0] = 1;
  expect("silu: x [1,2,8] strides {16,100,1}", invoke("silu", &c), OK, NULL);
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
    check(!memcmp(q[0], q[1], sizeof q[0]) && scales[0] == scales[1],
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
      expect(what, kite_sdpa(ctx, &qt, &kt, &vt, NULL, NULL, &ot, &lt), OK, NULL);
    }
    check(!memcmp(o[0], o[1], sizeof o[0]) && !memcmp(lse[0], lse[1], sizeof lse[0]),
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
      expect(what, kite_paged_decode(ctx, &qt, &kc, &vc, &btt, &slt, NULL, &ot, &lt), OK, NULL);
    }
    check(!memcmp(od[0], od[1], sizeof od[0]) && !memcmp(ld[0], ld[1], sizeof ld[0]),
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
    check(msc_out[0] == 0.0f && msc_out[1] == 0.0f, "quant of empty rows: scales 0");
    /* sdpa with no keys: k/v[1, 1, 0, 8] NULL: o = 0 and lse = -inf */
    int64_t k0[4] = {1, 1, 0, 8}, k0s[4] = {0, 0, 0, 0};
    DLTensor qt = dlt(qa, f32, 4, qsh, NULL), kt = dlt(NULL, f32, 4, k0, k0s),
             vt = dlt(NULL, f32, 4, k0, k0s), ot = dlt(o[0], f32, 4, qsh, NULL),
             lt = dlt(lse[0], f32, 3, lsh, NULL);
    snprintf(what, sizeof what, "sdpa Sk = 0, k/v NULL data (\"%s\")", configs[cfg]);
    kite_attn_opts nc = kite_attn_opts_default();
    nc.causal = 0;
    expect(what, kite_sdpa(ctx, &qt, &kt, &vt, NULL, &nc, &ot, &lt), OK, NULL);
    check(o[0][0] == 0.0f && o[0][47] == 0.0f && isinf(lse[0][0]) && lse[0][0] < 0,
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
  const kite_rope_scaling linear = {KITE_ROPE_SCALING_LINEAR, 2.0, 0, 0, 0};
  const kite_rope_scaling llama3 = {KITE_ROPE_SCALING_LLAMA3, 8.0, 1.0, 4.0, 8192};
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
  check(buf[0] == 1.0f && buf[4] == 0.0f, "cache row 0 is cos 1, sin 0");
  check(fabsf(buf[8] - (float)cos(1.0)) < 1e-6f && fabsf(buf[12] - (float)sin(1.0)) < 1e-6f,
        "cache row 1 pair 0 is cos(1), sin(1)");
  check(fabsf(buf[5 * 8 + 1] - (float)cos(5.0 * pow(1e4, -0.25))) < 1e-6f, "cache row 5 pair 1");
  expect("cache linear", kite_rope_cache_build(buf, 16, 8, 1e4, &linear), OK, NULL);
  check(fabsf(buf[8] - (float)cos(0.5)) < 1e-6f, "linear factor 2 halves the angle");
  expect("cache llama3", kite_rope_cache_build(buf, 16, 8, 5e5, &llama3), OK, NULL);
  check(fabsf(buf[8] - (float)cos(1.0)) < 1e-6f, "llama3 keeps the highest frequency");
  /* pair 3 of rot_dim 8: inv = 5e5^-0.75 ~ 5.3e-5, wavelength ~ 1.2e5 > 8192: divided by 8 */
  check(fabsf(buf[15 * 8 + 3] - (float)cos(15.0 * pow(5e5, -0.75) / 8.0)) < 1e-6f,
        "llama3 divides low frequencies by factor");
}

static void test_ctx_and_memory(kite_ctx *ctx) {
  kite_ctx *c2 = NULL;
  kite_ctx_params p = kite_ctx_params_default();
  check(p.device.device_type == kDLCPU && p.device.device_id == 0, "default params: cpu:0");
  expect("ctx_create out NULL", kite_ctx_create(NULL, NULL), INV, "kite_ctx_create");
  p.num_threads = -1;
  expect("ctx_create threads -1", kite_ctx_create(&p, &c2), INV, "kite_ctx_create");
  check(c2 == NULL, "ctx_create leaves *out NULL on failure");
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
  check(mem == NULL, "failed malloc leaves *out NULL");
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
  check(kite_config_get() != NULL, "config_get is never NULL");

  /* A pin to a kernel that does not exist fails at call time, naming the op: no substitute. */
  expect("config_set pin", kite_config_set("softmax=nosuch.variant"), OK, NULL);
  call c;
  setup(&c, op_desc_of("softmax"), ctx);
  expect("softmax pinned to a missing kernel", invoke("softmax", &c), UNS, "softmax");
  expect("config reset", kite_config_set(NULL), OK, NULL);
  expect("softmax after reset", invoke("softmax", &c), OK, NULL);
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

  check(kite_op_from_name(NULL) == -1, "op_from_name(NULL) is -1");
  check(kite_op_from_name("") == -1, "op_from_name(\"\") is -1");
  check(kite_op_from_name("rms_norm ") == -1, "op_from_name(\"rms_norm \") is -1");
  check(kite_op_from_name("nosuch") == -1, "op_from_name(\"nosuch\") is -1");
  check(kite_op_from_name("rms_norm") == KITE_OP_RMS_NORM, "op_from_name(\"rms_norm\")");
  check(kite_op_name((kite_op)-1) == NULL, "op_name(-1) is NULL");
  check(kite_op_name(KITE_OP_COUNT) == NULL, "op_name(COUNT) is NULL");
  check(kite_status_name((kite_status)99) != NULL, "status_name(99) is not NULL");
  check(kite_device_name((DLDeviceType)999) != NULL, "device_name(999) is not NULL");
}

int main(int argc, char **argv) {
  kite_ctx *ctx = NULL;
  g_verbose = argc > 1 && !strcmp(argv[1], "-v");
  setvbuf(stdout, NULL, _IOLBF, 0); /* what ran before a crash stays visible */
  if (kite_ctx_create(NULL, &ctx) != KITE_OK) {
    printf("cannot create a CPU ctx: %s\n", kite_last_error());
    return 1;
  }
  test_ops(ctx);
  test_views(ctx);
  test_strides_that_address_nothing(ctx);
  test_memcpy_overlap(ctx);
  test_rope_cache();
  test_ctx_and_memory(ctx);
  test_config(ctx);
  test_registry();
  kite_ctx_destroy(ctx);
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
