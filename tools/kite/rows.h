/*
 * What the drivers of the row-wise families share (driver_act.c: activations and gated;
 * driver_norm.c: norms; driver_core.c: rope, softmax, embedding; driver_loss.c: the losses),
 * forward and backward: their row sizes, the case makers, layout and description helpers.
 * Tensors are row-major matrices [rows, cols] with optional row padding.
 */
#ifndef KITE_TOOLS_ROWS_H
#define KITE_TOOLS_ROWS_H

#include "driver.h"

/* Items of an array of the ops of kite/backend.h's lists: {KITE_ACTIVATION_OPS(KT_OP_ITEM)}. */
#define KT_OP_ITEM(ID, name) KITE_OP_##ID,
#define KT_GATED_ITEM(ID, name, AID, aname) KITE_OP_##ID,

typedef struct kt_shape2 {
  int64_t rows, cols;
} kt_shape2;

/* The NMSE bound of dtype t from bounds [f32, f16, bf16]. */
double kt_bound_of(kite_dtype t, const double bounds[3]);

/* ---- forward ops ------------------------------------------------------------------------- */

/* The options of one family's op at one shape (a family's gen_rows). */
typedef void (*kt_rows_options_fn)(kt_case_list *l, kite_op op, kite_dtype t, kt_shape2 s);

/* kite check's cases of a forward row op: kt_case_default at 0, 1 and many rows, odd and
 * power-of-two widths; then a [2, wide] case when wide > 0; then (not quick) one that moves
 * > 16 MB at every type, the CPU's streaming-store path (CPU_STREAM_BYTES); then options() at
 * the shapes where every option is tried. */
void kt_rows_check_cases(kite_op op, kite_dtype t, int quick, int64_t wide,
                         kt_rows_options_fn options, kt_case_list *l);
/* kite bench's LLM cases of a forward row op: T in {1, 16, 512, 8192} tokens, each of widths. */
void kt_rows_llm_cases(kite_op op, kite_dtype t, const int64_t *widths, int nwidths,
                       kt_case_list *l);

/* ---- backward ops and losses ------------------------------------------------------------- */

/* The row sizes of the backward ops and cross-entropy (quick: the reduced set); *n their
 * count. */
const kt_shape2 *kt_bwd_sizes(int quick, int *n);
/* A backward (or loss) case: the options at their defaults (act silu or silu_and_mul, dw, db
 * and the loss gradients wanted, kite_ce_opts_default). */
kt_case kt_bwd_case(kite_op op, kite_dtype t, int64_t rows, int64_t cols);
/* The batch of the backward bench cases: T = 8192 tokens (llm) or 512. */
int64_t kt_bwd_bench_rows(int llm);
/* "none", "sum" or "mean", for descriptions. */
const char *kt_reduction_name(kite_reduction r);

/* ---- layout and description -------------------------------------------------------------- */

/* A vector [n] in a buffer of its own. */
int kt_add_vector(kt_run *r, const char *name, kite_dtype t, kt_role role, int64_t n,
                  kt_fill_kind fill, float lo, float hi);
/* An output [rows, cols] that is `in` itself when the case is in place (in becomes INOUT). */
int kt_add_out_or_inplace(kt_run *r, const kt_case *c, int in, const char *name, int64_t rows,
                          int64_t cols);
/* The main shape "RxC" (rows x cols), a family's shape(). */
void kt_rows_shape(const kt_case *c, char *buf, size_t n);
/* The options every row family prints last: the input range, step, inf, paddings, in place. */
void kt_describe_tail(const kt_case *c, char *buf, size_t n, size_t *len);

#endif /* KITE_TOOLS_ROWS_H */
