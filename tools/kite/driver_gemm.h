/*
 * What the GEMM family's two files share: driver_gemm.c (plans, fills, descriptions, the calls,
 * bytes and FLOPs) takes its cases and bounds from driver_gemm_cases.c, under the names
 * KT_FAMILY_FIELDS(gemm, ...) takes.
 */
#ifndef KITE_TOOLS_DRIVER_GEMM_H
#define KITE_TOOLS_DRIVER_GEMM_H

#include "driver.h"

/* kite check's cases of op at dtype t (the float dtype: x, logits, y of linear_quant); quick:
 * the reduced set. */
void gemm_check_cases(kite_op op, kite_dtype t, int quick, kt_case_list *l);
/* kite bench's cases of op at dtype t; llm: an 8B-class model's shapes, else one mid shape. */
void gemm_bench_cases(kite_op op, kite_dtype t, int llm, kt_case_list *l);
/* The NMSE bound against the float64 ref of every output of op at dtype t. */
double gemm_bound(kite_op op, kite_dtype t);

#endif
