/*
 * The op table's calls of the bad-input suite (bad_input.h): each function's valid call with the
 * shapes of g_setups, a row of g_cases applied to it, the sweep over every function of the table,
 * and the views the table cannot express. A failed call must write nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bad_input.h"

/* ---- op calls ----------------------------------------------------------------------------- */
enum { BUF_BYTES = 4096 };

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

static const char *const g_breakage_names[] = {
    "nothing", "NULL ctx",  "NULL tensor", "NULL data", "NULL shape", "rank",
    "dim",     "shape",     "stride",      "strides",   "dtype",      "device",
    "offset",  "int value", "same data",   "param"};

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
bool setup(call *c, size_t fn, kite_ctx *ctx) {
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

void test_ops(kite_ctx *ctx) {
  for (size_t ci = 0; ci < g_case_count; ci++) {
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

void test_sweep(kite_ctx *ctx) {
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
void test_views(kite_ctx *ctx) {
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
