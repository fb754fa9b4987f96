/*
 * An op cannot be half-added: every op id has each piece an op needs, and the suite fails
 * naming the op and the piece that is missing.
 * - compile time: the kite_op enum and the table's rows come from the same KITE_OP lines of
 *   kite/ops.def (one row per id, in id order), and every row names a declared kite_<name>;
 * - its name (kite_op_name, kite_op_from_name) is the row's and its own function is function
 *   <op id> of the table, with arguments the spec builder (tests/op_spec.h) can read;
 * - a ref kernel is registered for it (the ground truth the harness checks every kernel against);
 * - every function's valid call (the table's palette, f32 / f16 / bf16, int8 / fp8) succeeds with
 *   the default kernels and pinned to ref (kite_config_set("<op>=ref"));
 * - the argument fuzzer and the bad-input suite reach every function: both walk
 *   kite_fn_count() functions of the table, so this checks that the table covers every op id.
 * That `kite check` has a case driver for every op is not checked here: the CLI cannot list
 * its drivers yet.
 */
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "kite/kite.h"
#include "op_spec.h"

/* Every KITE_OP row names a declared public function: a row without one does not compile. */
#define KITE_OP(ID, name, ...) (void)&kite_##name;
#define KITE_FN(name, ...) (void)&kite_##name;
static void rows_name_functions(void) {
#include "kite/ops.def"
}
#undef KITE_OP
#undef KITE_FN

/* The rows in table order: the ops' own (op id order), then the further functions. */
typedef struct row {
  const char *id, *name;
  kite_op op;
} row;

static const row g_rows[] = {
#define KITE_OP(ID, name, ...) {#ID, #name, KITE_OP_##ID},
#define KITE_FN(...)
#include "kite/ops.def"
#undef KITE_OP
#undef KITE_FN
#define KITE_OP(...)
#define KITE_FN(name, ID, ...) {#ID, #name, KITE_OP_##ID},
#include "kite/ops.def"
#undef KITE_OP
#undef KITE_FN
};
#define NUM_ROWS (sizeof g_rows / sizeof g_rows[0])

enum {
#define KITE_OP(ID, ...) OWN_ROW_##ID,
#define KITE_FN(...)
#include "kite/ops.def"
#undef KITE_OP
#undef KITE_FN
  NUM_OWN_ROWS
};
/* kite.h's enum is generated from the same rows: this fails if it is ever written apart */
_Static_assert((int)NUM_OWN_ROWS == (int)KITE_OP_COUNT, "one KITE_OP row per op id");

/* Names and the table's own description of each function. */
static void test_names(void) {
  CHECK(kite_fn_count() == NUM_ROWS, "kite_fn_count() %zu, ops.def has %zu rows", kite_fn_count(),
        NUM_ROWS);
  CHECK(kite_fn_count() >= KITE_OP_COUNT, "the fuzzer and the sweep reach every op id");
  CHECK(kite_fn_get(kite_fn_count()) == NULL, "kite_fn_get past the end is NULL");
  for (size_t i = 0; i < NUM_ROWS && i < kite_fn_count(); i++) {
    const row *r = &g_rows[i];
    const kite_fn_info *f = kite_fn_get(i);
    snprintf(g_where, sizeof g_where, "%s", r->name);
    char upper[64];
    size_t n = 0;
    for (; r->name[n] && n + 1 < sizeof upper; n++) upper[n] = (char)toupper(r->name[n]);
    upper[n] = '\0';
    if (i < KITE_OP_COUNT) {
      /* an op's own row: KITE_OP(SILU, silu, ...), the op of id i */
      CHECK((size_t)r->op == i, "row %zu is op %d", i, (int)r->op);
      CHECK(!strcmp(r->id, upper), "the id %s is the name %s in capitals", r->id, r->name);
      CHECK(kite_op_name(r->op) && !strcmp(kite_op_name(r->op), r->name), "kite_op_name %s",
            kite_op_name(r->op) ? kite_op_name(r->op) : "NULL");
      CHECK(kite_op_from_name(r->name) == (int)r->op, "kite_op_from_name");
    }
    CHECK(f && !strcmp(f->name, r->name) && f->op == r->op, "function %zu is the row's", i);
    CHECK(kite_fn_find(r->name) == (int)i, "kite_fn_find finds it");
    if (!f) continue;
    CHECK(f->family && f->family[0], "a family");
    bool writes = false;
    for (size_t a = 0; a < f->nargs; a++) {
      const kite_arg_info *x = &f->args[a];
      writes |= x->kind == KITE_ARG_OUT || x->kind == KITE_ARG_OUT_OPT;
      CHECK(x->kind <= KITE_ARG_COMM && x->name && x->name[0] && x->spec, "argument %zu", a);
      CHECK(op_arg_index(f, x->name) == (int)a, "%s: one argument of that name", x->name);
      /* every spec reads with the palette (its dtype letter, its dims), every value parses */
      const op_spec_cfg cfg = op_spec_default();
      DLDataType dt;
      int ndim;
      int64_t shape[OP_SPEC_MAX_DIMS];
      kite_value v;
      if (op_arg_is_tensor(x->kind))
        CHECK(op_spec_parse(x->spec, &cfg, &dt, &ndim, shape) == 0, "%s: spec \"%s\"", x->name,
              x->spec);
      else
        CHECK(op_spec_value(x, &cfg, NULL, &v) == 0, "%s: value \"%s\"", x->name, x->spec);
    }
    CHECK(writes, "writes a tensor");
  }
  g_where[0] = '\0';
}

/* A ref kernel for every op id. */
static void test_ref_kernels(void) {
  bool ref[KITE_OP_COUNT] = {false};
  for (size_t i = 0; i < kite_kernel_count(); i++) {
    kite_kernel_info k;
    if (kite_kernel_get(i, &k) == KITE_OK && (int)k.op >= 0 && k.op < KITE_OP_COUNT &&
        !strcmp(k.backend, "ref"))
      ref[k.op] = true;
  }
  for (int op = 0; op < KITE_OP_COUNT; op++)
    CHECK(ref[op], "%s: no ref kernel is registered", kite_op_name((kite_op)op));
}

/* The table's valid call of every function, in each dtype, with the default kernels and pinned
 * to ref. */
static void test_valid_calls(kite_ctx *ctx, kite_comm *comm) {
  static const DLDataType floats[] = {{kDLFloat, 32, 1}, {kDLFloat, 16, 1}, {kDLBfloat, 16, 1}};
  static const DLDataType quants[] = {{kDLInt, 8, 1}, {KITE_DL_FLOAT8_E4M3FN, 8, 1}};
  static const char *const fnames[] = {"f32", "f16", "bf16"}, *const qnames[] = {"int8", "fp8"};
  for (size_t fn = 0; fn < kite_fn_count(); fn++) {
    const kite_fn_info *f = kite_fn_get(fn);
    char pin[96];
    snprintf(pin, sizeof pin, "%s=ref", kite_op_name(f->op));
    for (int pinned = 0; pinned < 2; pinned++)
      for (int fi = 0; fi < 3; fi++)
        for (int qi = 0; qi < 2; qi++) {
          snprintf(g_where, sizeof g_where, "%s %s %s%s", f->name, fnames[fi], qnames[qi],
                   pinned ? " pinned to ref" : "");
          CHECK(kite_config_set(pinned ? pin : NULL) == KITE_OK, "config");
          op_spec_cfg cfg = op_spec_default();
          cfg.fdt = floats[fi];
          cfg.qdt = quants[qi];
          op_call c;
          if (op_call_build(&c, fn, &cfg, comm)) {
            CHECK(0, "the table's row cannot be built");
            continue;
          }
          CHECK(op_call_run(ctx, &c) == KITE_OK, "the table's valid call");
          if (pinned)
            CHECK(!strncmp(kite_last_dispatch(), "ref.", 4), "ran %s", kite_last_dispatch());
          op_call_free(&c);
        }
  }
  kite_config_set(NULL);
  g_where[0] = '\0';
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  rows_name_functions();
  kite_ctx *ctx = NULL;
  kite_comm *comm = NULL;
  if (kite_ctx_create(NULL, &ctx) != KITE_OK || kite_comm_create_all(&ctx, 1, &comm) != KITE_OK) {
    printf("cannot create a CPU ctx and its comm: %s\n", kite_last_error());
    return 1;
  }
  test_names();
  test_ref_kernels();
  test_valid_calls(ctx, comm);
  kite_comm_destroy(comm);
  kite_ctx_destroy(ctx);
  return check_summary();
}
