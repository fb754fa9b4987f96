/*
 * Per-op case drivers shared by `kite check` and `kite bench`: a case (op, dtype, shape,
 * options) -> device buffers holding the op's tensors -> one call of the public op function.
 *
 * Every tensor is a view into a buffer laid out as  [guard | body | guard]  on the ctx's device.
 * The guards, the gaps between strided rows and any part of the body no view covers are canary
 * bytes; output elements start poisoned (all bits set: NaN in f32, f16 and bf16). A buffer may
 * hold several views (q, k, v of one fused qkv projection) and a view may be both input and
 * output (in place: y is x; the residual of add_rms_norm; q and k of rope; a KV cache).
 *
 * The harness calls every op through the op table (kite/ops.def): a case calls one function of
 * the table (kite_fn_get), its plan binds each view to an argument by the table's name
 * (kt_bind), the family gives the scalars by name, and kt_call (families.c) boxes them in the
 * table's order for kite_fn_call. No driver calls an op function by hand.
 *
 * This header is the mechanism only: buffers, views, fill, upload and download, and the
 * kt_family_ops interface a family implements. The families, each op's forward beside its
 * backward (driver_act.c: activations, gated; driver_norm.c: norms; driver_core.c: rope,
 * softmax, embedding; driver_loss.c: the losses; driver_attn.c: attention; driver_gemm.c: GEMM,
 * MoE, quantization; driver_sampling.c; driver_comm.c) are built on it, the row-wise ones
 * through rows.h; families.c, above both, finds an op's family and runs a case through it
 * (families.h). The cases themselves are in cases.h.
 */
#ifndef KITE_TOOLS_DRIVER_H
#define KITE_TOOLS_DRIVER_H

#include <stddef.h>

#include "kite/backend.h"

#include "cases.h"

#define KT_GUARD 256   /* canary bytes before and after each body; keeps bodies aligned */
#define KT_CANARY 0xa5 /* canary byte */
#define KT_POISON 0xff /* output bytes before the call */
#define KT_MAX_BUFS 16 /* sdpa_varlen_backward with sinks binds 13 tensors */
#define KT_MAX_VIEWS 16
#define KT_MAX_DIMS 4
/* Elements of an array (a table of case shapes), as int. */
#define KT_COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

typedef enum kt_role { KT_IN, KT_OUT, KT_INOUT } kt_role;
typedef enum kt_fill {
  KT_FILL_UNIFORM,    /* floats uniform in [lo, hi) */
  KT_FILL_IDS,        /* integers (i32, i8, u8) uniform in [lo, hi) */
  KT_FILL_SEQ,        /* int32 n mod hi */
  KT_FILL_ROPE_CACHE, /* kite_rope_cache_build(theta 10000) */
  KT_FILL_CUSTOM      /* the view's fill function */
} kt_fill_kind;

struct kt_run;
/* Writes every element of view v (r->view[v]) into the buffer body (element 0 of the buffer
 * at body, the view at its offset and strides). Same (case, seed) -> same bytes. */
typedef void (*kt_fill_fn)(const struct kt_run *r, int v, uint64_t seed, unsigned char *body);

typedef struct kt_view {
  const char *name;
  int buf;
  kt_role role;
  kite_dtype dtype;
  int ndim;
  int64_t shape[KT_MAX_DIMS], strides[KT_MAX_DIMS]; /* elements; the last dim unit-stride */
  int64_t offset;                                   /* elements from the start of the body */
  kt_fill_kind fill;
  float lo, hi;       /* value range (ids: integers in [lo, hi)) */
  kt_fill_fn fill_fn; /* KT_FILL_CUSTOM */
  int nan_ok;         /* an output that may hold NaN where ref does (quant of NaN) */
  int dl_bool;        /* uint8 bytes the DLTensor calls DLPack booleans (sdpa's bool mask) */
  DLTensor t;         /* points into the device buffer once allocated */
} kt_view;

typedef struct kt_buf {
  const char *name;
  size_t elem;   /* bytes per element */
  int64_t count; /* body length in elements */
  void *dev;     /* device allocation of kt_buf_bytes(); NULL until kt_alloc */
} kt_buf;

/* Argument slots: slot i is argument i of the case's function in the op table (kite/ops.def,
 * kite_fn_get(r->fn)->args[i]); a tensor's slot holds its view index, -1 when absent (NULL).
 * A family's plan() fills them by name with kt_bind. */
#define KT_MAX_ARGS 24

typedef struct kt_run {
  kt_case c;
  kite_ctx *ctx;
  int nbufs, nviews;
  kt_buf buf[KT_MAX_BUFS];
  kt_view view[KT_MAX_VIEWS];
  size_t fn; /* the op table's function the case calls (kt_fn_of) */
  int arg[KT_MAX_ARGS];
  int bad; /* the plan did not fit (a bug in a case list) */
} kt_run;

/* ---- families ---------------------------------------------------------------------------- */

typedef struct kt_family_ops {
  const char *name;
  /* 1 when op is this family's. */
  int (*has)(kite_op op);
  /* Lays out c's buffers and views with kt_add_buf / kt_add_view and sets r->arg. */
  void (*plan)(kt_run *r, const kt_case *c);
  /* Optional: the op table's function a case calls when it is not the op's own (NULL: always
   * the op's own, kite_fn_get(op)). */
  int (*fn)(const kt_case *c);
  /* The value of scalar argument a (FLOAT, INT, INT64 or UINT64: the op table's name, e.g.
   * "eps") of the case's function: 0, or nonzero for a name the family has no value for. */
  int (*scalar)(const kt_case *c, const kite_arg_info *a, kite_value *out);
  /* Optional: the comm of a COMM argument (NULL and kite_last_error when none can be made). */
  kite_comm *(*comm)(kt_run *r);
  /* For people: the options after the shape; and the main shape alone. */
  void (*describe)(const kt_case *c, char *buf, size_t n);
  void (*shape)(const kt_case *c, char *buf, size_t n);
  /* kite check's cases of op at dtype t (quick: the reduced set). */
  void (*check_cases)(kite_op op, kite_dtype t, int quick, kt_case_list *l);
  /* kite bench's cases (llm: the LLM shapes of the issue; else one mid shape). */
  void (*bench_cases)(kite_op op, kite_dtype t, int llm, kt_case_list *l);
  /* The least bytes one call must move (GB/s) and the FLOPs it must do (0: memory-bound). */
  double (*bytes)(const kt_case *c);
  double (*flops)(const kt_case *c);
  /* NMSE bound of every output against ref. */
  double (*bound)(kite_op op, kite_dtype t);
  /* Optional, for kite bench: the same work done another way through the public API with
   * default dispatch (fused_moe as per-expert linear calls), timed beside the kernels as
   * alt_name; NULL when the case has none. */
  kite_status (*alt_call)(kt_run *r);
  const char *(*alt_name)(const kt_case *c);
} kt_family_ops;

/* The fields of family f's kt_family_ops where its functions are named f_plan, f_call,
 * f_describe, f_shape, f_check_cases, f_bench_cases, f_bytes and f_bound; has and flops (NULL:
 * no compute-bound op) given. A family adds its alt_call / alt_name after them. */
#define KT_FAMILY_FIELDS(f, has_fn, flops_fn)                                                      \
  .name = #f, .has = has_fn, .plan = f##_plan, .scalar = f##_scalar, .describe = f##_describe,     \
  .shape = f##_shape, .check_cases = f##_check_cases, .bench_cases = f##_bench_cases,              \
  .bytes = f##_bytes, .flops = flops_fn, .bound = f##_bound

/* ---- building a plan (for the families) -------------------------------------------------- */

/* A buffer of count elements of t; returns its index (-1 and r->bad on a bad plan). */
int kt_add_buf(kt_run *r, const char *name, kite_dtype t, int64_t count);
/* A view of up to KT_MAX_DIMS dims whose last dim is unit-stride; returns its index. */
int kt_add_view(kt_run *r, const char *name, int buf, kite_dtype t, kt_role role, int ndim,
                const int64_t *shape, const int64_t *strides, int64_t offset, kt_fill_kind fill,
                float lo, float hi);
/* A [rows, cols] tensor with row stride cols + pad in a buffer of its own. */
int kt_add_matrix(kt_run *r, const char *name, kite_dtype t, kt_role role, int64_t rows,
                  int64_t cols, int64_t pad, float lo, float hi);
/* A compact tensor of ndim dims in a buffer of its own. */
int kt_add_tensor(kt_run *r, const char *name, kite_dtype t, kt_role role, int ndim,
                  const int64_t *shape, kt_fill_kind fill, float lo, float hi);
/* A custom fill (kt_fill_fn) of group_sizes[G] int32 from the case's gemm.group_sizes (the
 * grouped GEMMs of driver_gemm.c and driver_gguf.c). */
void kt_fill_group_sizes(const kt_run *r, int v, uint64_t seed, unsigned char *body);
/* Appends printf output to buf (length n) at *len, never overflowing (for describe()). */
__attribute__((format(printf, 4, 5))) void kt_cat(char *buf, size_t n, size_t *len, const char *fmt,
                                                  ...);
/* Binds view v to the argument of that name (the op table's) of the case's function: sets its
 * slot in r->arg. Returns v; an unknown name marks the plan bad (and says so on stderr). */
int kt_bind(kt_run *r, const char *name, int v);

/* A scalar argument of the op table read from a case field: its name in ops.def, the field's C
 * type ('f' float, 'i' a 32-bit int or enum, 'l' int64_t, 'z' size_t) and offset in kt_case. */
typedef struct kt_scalar_field {
  const char *name;
  char type;
  size_t offset;
} kt_scalar_field;
#define KT_FIELD(name, type, field)                                                                \
  { name, type, offsetof(kt_case, field) }
/* The value of scalar argument a from fields[n]; 1 when no field has its name. */
int kt_scalar_from(const kt_scalar_field *fields, size_t n, const kt_case *c,
                   const kite_arg_info *a, kite_value *out);
/* A family's scalar() over its table of fields. */
#define KT_SCALARS(fn, ...)                                                                        \
  static int fn(const kt_case *c, const kite_arg_info *a, kite_value *out) {                       \
    static const kt_scalar_field fields[] = {__VA_ARGS__};                                         \
    return kt_scalar_from(fields, sizeof fields / sizeof fields[0], c, a, out);                    \
  }
/* The slot of the argument of that name of the case's function, or -1. */
int kt_slot(const kt_run *r, const char *name);
/* The view bound to the argument of that name, or -1 when none is. */
int kt_arg_view(const kt_run *r, const char *name);
/* The DLTensor bound to the argument of that name (NULL when absent). */
DLTensor *kt_arg_named(kt_run *r, const char *name);

/* Element i of a buffer of type t as a double (every kite dtype), and the other way (rounded
 * once to t; integers saturate). */
double kt_load(kite_dtype t, const void *p, int64_t i);
void kt_store(kite_dtype t, void *p, int64_t i, double v);

/* ---- running a plan ---------------------------------------------------------------------- */

/* Allocation size of buffer b, guards included. */
size_t kt_buf_bytes(const kt_run *r, int b);
/* Total bytes of all allocations (to skip cases too large for the machine). */
size_t kt_run_bytes(const kt_run *r);

/* Writes what each buffer holds before the call into img[b] (kt_buf_bytes(r, b) bytes each):
 * canaries, seeded inputs, poisoned outputs. The same (case, seed) gives the same bytes. */
void kt_fill(const kt_run *r, uint64_t seed, unsigned char *const *img);
/* Per byte of buffer b: 0 canary, 1 input element, 2 element the op may write. */
void kt_byte_roles(const kt_run *r, int b, unsigned char *mask);

/* kite_malloc every buffer on ctx and point the views' DLTensors at them. */
kite_status kt_alloc(kt_run *r, kite_ctx *ctx);
kite_status kt_upload(kt_run *r, unsigned char *const *img);
kite_status kt_download(const kt_run *r, unsigned char *const *img);
void kt_release(kt_run *r);

/* Element n (logical, row-major over the view's shape) of view v starts at this element of
 * its buffer body; rows are runs of the last dim. */
int64_t kt_view_at(const kt_view *v, int64_t n);
int64_t kt_view_row(const kt_view *v, int64_t i);
int64_t kt_view_numel(const kt_view *v);
static inline int64_t kt_view_cols(const kt_view *v) {
  return v->shape[v->ndim - 1];
}

#endif /* KITE_TOOLS_DRIVER_H */
