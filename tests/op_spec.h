/*
 * Valid op calls built from the op table (kite/ops.def, read through kite_fn_get): a tensor's
 * spec "<dtype>:<dims>" with a palette gives a compact host DLTensor with its own buffer, filled
 * by its dtype letter's rule; a scalar's value string gives its kite_value; op_call_build makes
 * the whole argument list of a function. Public API only. Shared by the argument fuzzer
 * (fuzz/fuzz_args.c), the bad-input suite and the op-table test.
 */
#ifndef KITE_TESTS_OP_SPEC_H
#define KITE_TESTS_OP_SPEC_H

#include <stddef.h>
#include <stdint.h>

#include "kite/kite.h"

#define OP_SPEC_MAX_DIMS 9 /* a spec's rank, plus room for a test to add dims */
#define OP_SPEC_MAX_ARGS 24

/* What a spec is read with: the palette's sizes and the call's dtypes. */
typedef struct op_spec_cfg {
  int64_t palette[6];  /* the sizes of the letters a..f */
  DLDataType fdt, qdt; /* F: f32, f16 or bf16; q: int8 or fp8-e4m3 */
  size_t min_bytes;    /* op_call_build: each buffer holds at least this many bytes (all filled) */
  uint64_t seed;       /* of the float and byte fills */
} op_spec_cfg;

/* The palette of ops.def that makes every row valid (a 3, b 32, c 4, d 2, e 5, f 3), f32, int8,
 * exact buffers, seed 1. */
op_spec_cfg op_spec_default(void);

/* The size of dim letter l (a-f, A-F twice, g = a + 1, w = b / 32 * 18, 1); -1 for another
 * character. */
int64_t op_spec_dim(const op_spec_cfg *cfg, char l);
/* Parses a tensor spec into its dtype, rank and shape (shape[OP_SPEC_MAX_DIMS]). Returns 0, or
 * -1 for a spec it cannot read. */
int op_spec_parse(const char *spec, const op_spec_cfg *cfg, DLDataType *dtype, int *ndim,
                  int64_t *shape);
/* The first dim of fn's first tensor: the R of the p, n and s fills. */
int64_t op_spec_rows(const kite_fn_info *fn, const op_spec_cfg *cfg);

/* Fills bytes of buf, elements of dtype dt, by the spec's dtype letter: F, f floats uniform in
 * [0.25, 1) (valid temperatures, top_p, penalties, scales); i, l zeros; p [0, R, R, ...], n all
 * R, s [R, 0, 0, ...]; q small finite codes; u any bytes. A letter that does not fit dt (after a
 * test changed the dtype) gives bytes of the same rule's spirit, never a read past bytes. */
void op_spec_fill(void *buf, size_t bytes, DLDataType dt, char rule, int64_t rows, uint64_t seed);

/* A scalar argument's value from its spec (a number or a palette letter); comm for COMM.
 * Returns 0, or -1 for a value it cannot read. */
int op_spec_value(const kite_arg_info *arg, const op_spec_cfg *cfg, kite_comm *comm,
                  kite_value *out);

/* A tensor with its own compact buffer. */
typedef struct op_tensor {
  DLTensor t;
  int64_t shape[OP_SPEC_MAX_DIMS], strides[OP_SPEC_MAX_DIMS];
  void *buf;
  size_t bytes; /* of buf */
} op_tensor;

/* (Re)allocates t as a compact tensor of dtype dt and the given shape on the CPU, with a buffer
 * of max(its bytes, min_bytes) bytes (uninitialised; t->t.data = buf). Returns 0, or -1 for a
 * shape too large or out of memory (t is then empty). */
int op_tensor_alloc(op_tensor *t, DLDataType dt, int ndim, const int64_t *shape, size_t min_bytes);
void op_tensor_free(op_tensor *t);

/* A function's valid call: v[i] is argument i of the table's row (v[i].t = &t[i].t for a
 * tensor, optional ones included). */
typedef struct op_call {
  size_t fn;
  const kite_fn_info *info;
  int64_t rows; /* R */
  op_tensor t[OP_SPEC_MAX_ARGS];
  kite_value v[OP_SPEC_MAX_ARGS];
} op_call;

/* Builds function fn's valid call with cfg (comm for its COMM arguments). Returns 0, or -1
 * (a row this file cannot read, out of memory; nothing is left allocated). */
int op_call_build(op_call *c, size_t fn, const op_spec_cfg *cfg, kite_comm *comm);
/* kite_fn_call with the call's arguments. */
kite_status op_call_run(kite_ctx *ctx, const op_call *c);
void op_call_free(op_call *c);

/* The index of fn's argument `name`, or -1. */
int op_arg_index(const kite_fn_info *fn, const char *name);
/* Whether an argument kind is a tensor's. */
int op_arg_is_tensor(kite_arg_kind k);

#endif
