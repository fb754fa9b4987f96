/*
 * What the three files of the bad-input suite share: test_bad_input.c (the checks that record
 * each outcome, the functions outside the op table, main), bad_input_ops.c (the op table's
 * calls: the sweep, the rows of g_cases applied, the views) and bad_input_rows.c (the rows).
 */
#ifndef KITE_TESTS_BAD_INPUT_H
#define KITE_TESTS_BAD_INPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kite/kite.h"
#include "op_spec.h"

#define INV KITE_ERR_INVALID_ARG
#define UNS KITE_ERR_UNSUPPORTED
#define OK KITE_OK

enum { MAX_SHAPE = 12 };

/* One op call being prepared: the table's valid call of a function, which a case then breaks. */
typedef struct call {
  kite_ctx *ctx;
  op_call oc;
} call;

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

/* Function lists of the rows of g_cases and of the setups (bad_input_ops.c). */
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

/* The rows (bad_input_rows.c): each breaks one thing in the valid call of a set of functions. */
extern const bad_case g_cases[];
extern const size_t g_case_count;

extern kite_comm *g_comm; /* one rank, for the collectives */

/* The checks (test_bad_input.c), each recording one outcome. */
void record(const char *what, const char *why, const char *detail);
void expect(const char *what, kite_status got, kite_status want, const char *who);
void expect_error(const char *what, kite_status got, kite_status want, const kite_fn_info *f,
                  const char *arg);

/* The op table's calls (bad_input_ops.c). */
bool setup(call *c, size_t fn, kite_ctx *ctx);
void test_sweep(kite_ctx *ctx);
void test_ops(kite_ctx *ctx);
void test_views(kite_ctx *ctx);

#endif
