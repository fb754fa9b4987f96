/*
 * What kite bench's two files share: bench.c (the timed cases, the table and the entry points)
 * and bench_dispatch.c (`kite bench --dispatch`).
 */
#ifndef KITE_TOOLS_BENCH_H
#define KITE_TOOLS_BENCH_H

#include "util.h"

/* One run of kite bench: the kernels, the devices and their copy ceilings, the table's state. */
typedef struct kt_bench {
  const kt_opts *o;
  kt_registry reg;
  kt_devices dev;
  double ceiling[KT_MAX_DEVICES]; /* GB/s per device of dev, measured at the start */
  kt_host_copy *copy;             /* the CPU ceiling, timed again beside every CPU row */
  int threads;
  int header_done;
  int rows_asked;   /* rows timed of the backend or kernel --backend asked for */
  int over_ceiling; /* rows above 120 % of their copy ceiling: the ceiling was unstable */
} kt_bench;

/* Fills b from o: the registry and a ctx per device; 0, or 1 with a message on stderr. */
int kt_bench_open(kt_bench *b, const kt_opts *o);
void kt_bench_close(kt_bench *b);
/* kite bench --dispatch: ns per call through the public API and by a direct kernel run, for
 * relu and rms_norm on the CPU; the exit code. */
int kt_bench_dispatch(const kt_opts *o);

#endif
