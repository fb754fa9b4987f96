/*
 * Helpers shared by the kite CLI subcommands: clock, counter-based RNG, command-line flags, a
 * snapshot of the kernel registry, one ctx per device type present, the memcpy ceiling.
 * Only the public API (kite.h, backend.h) is used.
 */
#ifndef KITE_TOOLS_UTIL_H
#define KITE_TOOLS_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "kite/backend.h"

/* ---- clock and RNG ----------------------------------------------------------------------- */
/* Monotonic wall clock, seconds. */
double kt_now(void);

/* Counter-based generator: value i of stream `key` depends only on (key, i) (splitmix64's
 * finalizer over key + i * golden ratio), so any buffer can be regenerated in any order. */
uint64_t kt_hash(uint64_t key, uint64_t i);
/* Uniform in [0, 1) with 24 random bits. */
static inline float kt_unit(uint64_t key, uint64_t i) {
  return (float)(kt_hash(key, i) >> 40) * 0x1p-24f;
}

/* ---- command line ------------------------------------------------------------------------ */
/* Flags common to the subcommands; each subcommand accepts the subset its help lists. */
typedef struct kt_opts {
  int op;              /* -1 = all ops */
  const char *backend; /* "cpu" or "cpu.avx2"; NULL = all */
  uint64_t seed;
  int has_seed;
  int quick, verbose, json, dispatch;
  int dtype;          /* kite_dtype, -1 = the subcommand's default set */
  int threads;        /* 0 = all cores */
  const char *shapes; /* "small" | "llm" | NULL (default) */
  int repeat;         /* timed batches, 0 = default */
  int max_mb;         /* bench: skip cases whose buffers exceed this */
  int help;
} kt_opts;

/* `allowed` lists the accepted flags, e.g. "--op --backend --seed --quick --verbose".
 * Returns 0, or prints the problem to stderr and returns 2 (the usage exit code). */
int kt_parse_opts(int argc, char **argv, const char *allowed, kt_opts *o);

/* ---- registry snapshot ------------------------------------------------------------------- */
/* kite_kernel_info strings live only until the next config change; check and bench pin kernels
 * through the config, so they work on this copy. */
typedef struct kt_kernel {
  size_t index; /* for kite_kernel_get / kite_kernel_entry */
  kite_op op;
  const char *op_name;
  char *backend, *variant, *name; /* name = "backend.variant" */
  char *features, *description, *why_not;
  char *plugin; /* the plugin file, "" when built in */
  DLDeviceType device;
  int priority, runs_here;
} kt_kernel;

typedef struct kt_registry {
  kt_kernel *k;
  size_t n;
} kt_registry;

int kt_registry_load(kt_registry *r);
void kt_registry_free(kt_registry *r);
/* --op / --backend filter: backend matches "cpu" or "cpu.avx2". */
int kt_kernel_selected(const kt_kernel *k, const kt_opts *o);
/* What default dispatch picks for op on device type t: the highest-priority kernel that runs
 * here (NULL when none). supports() may still reject a particular call. */
const kt_kernel *kt_default_kernel(const kt_registry *r, kite_op op, DLDeviceType t);
/* The reference kernel of op: the highest-priority `ref` kernel on the CPU that runs here. */
const kt_kernel *kt_ref_kernel(const kt_registry *r, kite_op op);
/* Does any backend with `name` exist? (to reject a mistyped --backend) */
int kt_backend_known(const kt_registry *r, const char *name);

/* ---- devices ----------------------------------------------------------------------------- */
#define KT_MAX_DEVICES 8
typedef struct kt_devices {
  int n;
  DLDeviceType type[KT_MAX_DEVICES];
  kite_ctx *ctx[KT_MAX_DEVICES]; /* device id 0 of each type present */
} kt_devices;

/* Opens one ctx per device type that some backend reaches (the CPU always first).
 * Returns 0 or prints why and returns 1. */
int kt_devices_open(kt_devices *d, int threads);
kite_ctx *kt_devices_ctx(const kt_devices *d, DLDeviceType t);
void kt_devices_close(kt_devices *d);

/* ---- pinning ------------------------------------------------------------------------------ */
/* kite_config_set("<op>=<backend>.<variant>"), or "" when k is NULL (default dispatch). */
kite_status kt_pin(kite_op op, const kt_kernel *k);

/* ---- machine ------------------------------------------------------------------------------ */
int kt_online_cpus(void);
/* "AMD EPYC 7B13" from /proc/cpuinfo, or "unknown". */
const char *kt_cpu_model(void);
/* Host memcpy bandwidth with `threads` threads over a `bytes` buffer, counting the bytes read
 * and written (2 * bytes per copy). The copy is kept ready (buffers touched, one warm-up copy) so
 * that it can be timed one copy at a time between other work: open returns NULL when the buffers
 * cannot be had (threads < 1: every online cpu); kt_host_copy_gbs times one copy,
 * kt_host_copy_median_gbs the median of reps (1..16) copies. */
typedef struct kt_host_copy kt_host_copy;
kt_host_copy *kt_host_copy_open(int threads, size_t bytes);
double kt_host_copy_gbs(kt_host_copy *c);
double kt_host_copy_median_gbs(kt_host_copy *c, int reps);
void kt_host_copy_close(kt_host_copy *c);
/* The median of v[0..n) (n >= 1), which it sorts. */
double kt_median(double *v, int n);
/* kite_memcpy DEVICE_TO_DEVICE bandwidth on ctx, read + written. 0 on failure. */
double kt_device_memcpy_gbs(kite_ctx *ctx, size_t bytes);

/* Prints s to stdout as a JSON string literal. */
void kt_json_str(const char *s);

#endif /* KITE_TOOLS_UTIL_H */
