/*
 * The families of the case drivers, and running a case through the family that owns its op.
 * families.c sits above driver.c (the mechanism) and the driver_<family>.c files: nothing below
 * calls back up into it.
 */
#ifndef KITE_TOOLS_FAMILIES_H
#define KITE_TOOLS_FAMILIES_H

#include "driver.h"

/* The family of op, or NULL when this CLI has no driver for it (listed, not checked or
 * timed). */
const kt_family_ops *kt_family(kite_op op);

/* For people: "3x17 x+5 w off=1 pre inplace". */
const char *kt_case_str(const kt_case *c, char *buf, size_t n);
/* The main shape, e.g. "8192x4096" (rope: "TxHqxHkvxD"; gated: rows x I). */
const char *kt_case_shape(const kt_case *c, char *buf, size_t n);
/* The op table's function case c calls (kite_fn_get): its op's own, or the one its family
 * names (the norm backward with dres: add_rms_norm_backward, add_layer_norm_backward). */
int kt_fn_of(const kt_case *c);
/* Lays out the buffers and views of case c (no memory yet). Returns 0, or 1 for a case the
 * driver cannot build (a bug in the case list). */
int kt_plan(kt_run *r, const kt_case *c);
/* One call of the case's function through the op table (kite_fn_call) with its arguments. */
kite_status kt_call(kt_run *r);
/* The bytes, FLOPs and NMSE bound of c (its family's). */
double kt_case_bytes(const kt_case *c);
double kt_case_flops(const kt_case *c);
double kt_case_bound(const kt_case *c);

/* The finite-difference check of ref's backward ops against ref's forward ops (fd_check.c):
 * prints a line per failure (per check with verbose) and adds to *passed / *failed. only_op < 0:
 * every op. kt_fd_covers: whether `kite check --op op` runs it (the backward ops, the losses). */
int kt_fd_covers(kite_op op);
void kt_fd_check(kite_ctx *ctx, int verbose, int only_op, int *passed, int *failed);

#endif /* KITE_TOOLS_FAMILIES_H */
