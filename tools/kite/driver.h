/*
 * Per-op case drivers shared by `kite check` and `kite bench`: a case (op, dtype, shape,
 * options) -> device buffers holding the op's tensors -> one call of the public op function.
 *
 * Every tensor is a view into a buffer laid out as  [guard | body | guard]  on the ctx's device.
 * The guards, the gaps between strided rows and any part of the body no view covers are canary
 * bytes; output elements start poisoned (all bits set: NaN in f32, f16 and bf16). A buffer may
 * hold several views (q, k, v of one fused qkv projection) and a view may be both input and
 * output (in place: y is x; the residual of add_rms_norm; q and k of rope).
 */
#ifndef KITE_TOOLS_DRIVER_H
#define KITE_TOOLS_DRIVER_H

#include "kite/backend.h"

#define KT_GUARD 256   /* canary bytes before and after each body; keeps bodies aligned */
#define KT_CANARY 0xa5 /* canary byte */
#define KT_POISON 0xff /* output bytes before the call */
#define KT_MAX_BUFS 8
#define KT_MAX_VIEWS 8

/* How q and k of rope are laid out. */
typedef enum kt_qk_layout {
  KT_QK_SPLIT = 0, /* q[T, Hq, D] and k[T, Hkv, D] compact, separate buffers */
  KT_QK_FUSED,     /* slices of one qkv[T, (Hq + 2 Hkv) * D] buffer: token stride (Hq+2Hkv)*D */
  KT_QK_HEAD_PAD,  /* separate buffers, head stride D + pad */
} kt_qk_layout;

typedef struct kt_case {
  kite_op op;
  kite_dtype dtype;
  /* activations, norms, softmax: x[rows, cols]; gated: x[rows, 2 cols] -> y[rows, cols];
   * rope: rows = tokens; embedding: rows = tokens, cols = hidden. */
  int64_t rows, cols;
  int64_t pad_x, pad_y; /* extra elements after each row of x (and residual, table) and of y */
  int inplace;          /* y is x */
  float amp, shift;     /* float inputs are uniform in [shift - amp, shift + amp] */
  /* norms */
  int with_w, with_b;
  float eps, offset;
  kite_norm_pos pos;
  /* gated */
  float limit;
  /* softmax */
  float scale;
  /* rope */
  int64_t hq, hkv, head_dim, rot_dim, max_pos;
  kite_rope_style style;
  kt_qk_layout layout;
  int k_null;
  int seq_positions; /* positions 0..T-1 (bench) instead of random in [0, max_pos) */
  /* embedding */
  int64_t vocab;
  int oob_ids; /* some ids negative or >= vocab (check) */
} kt_case;

/* Ops that share a driver. */
/* KT_NONE: an op this CLI has no driver for yet (it is listed, not checked or timed). */
typedef enum kt_family {
  KT_NONE,
  KT_ACT,
  KT_GATED,
  KT_NORM,
  KT_ROPE,
  KT_SOFTMAX,
  KT_EMBEDDING
} kt_family;
kt_family kt_op_family(kite_op op);
/* Norms that take a residual / a bias. */
int kt_op_has_residual(kite_op op);
int kt_op_is_layer_norm(kite_op op);

/* A case with everyday options: w present, eps 1e-6, scale 1, inputs in [-1, 1]. */
kt_case kt_case_default(kite_op op, kite_dtype dtype, int64_t rows, int64_t cols);
/* For people: "3x17 x+5 w off=1 pre inplace". */
const char *kt_case_str(const kt_case *c, char *buf, size_t n);
/* The main shape, e.g. "8192x4096" (rope: "TxHqxHkvxD"; gated: rows x I). */
const char *kt_case_shape(const kt_case *c, char *buf, size_t n);

typedef enum kt_role { KT_IN, KT_OUT, KT_INOUT } kt_role;
typedef enum kt_fill {
  KT_FILL_UNIFORM,   /* floats uniform in [lo, hi) */
  KT_FILL_IDS,       /* int32 uniform in [lo, hi) */
  KT_FILL_SEQ,       /* int32 n mod hi */
  KT_FILL_ROPE_CACHE /* kite_rope_cache_build(theta 10000) */
} kt_fill_kind;

typedef struct kt_view {
  const char *name;
  int buf;
  kt_role role;
  kite_dtype dtype;
  int ndim;
  int64_t shape[3], strides[3]; /* elements; the last dim is always unit-stride */
  int64_t offset;               /* elements from the start of the body */
  kt_fill_kind fill;
  float lo, hi; /* value range (ids: integers in [lo, hi)) */
  DLTensor t;   /* points into the device buffer once allocated */
} kt_view;

typedef struct kt_buf {
  const char *name;
  size_t elem;   /* bytes per element */
  int64_t count; /* body length in elements */
  void *dev;     /* device allocation of kt_buf_bytes(); NULL until kt_alloc */
} kt_buf;

typedef struct kt_run {
  kt_case c;
  kite_ctx *ctx;
  int nbufs, nviews;
  kt_buf buf[KT_MAX_BUFS];
  kt_view view[KT_MAX_VIEWS];
  /* the op's arguments as view indices, -1 when absent (NULL) */
  int x, y, w, b, res, q, k, pos, cos_sin, ids, table;
  int bad; /* the plan did not fit (a bug in a case list) */
} kt_run;

/* Lays out the buffers and views of case c (no memory yet). Returns 0, or 1 for a case the
 * driver cannot build (a bug in the case list). */
int kt_plan(kt_run *r, const kt_case *c);
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

/* One call of the op's public function with the case's arguments. */
kite_status kt_call(kt_run *r);

/* Logical row i of view v starts at this element of its buffer body. */
int64_t kt_view_row(const kt_view *v, int64_t i);
int64_t kt_view_numel(const kt_view *v);
static inline int64_t kt_view_cols(const kt_view *v) {
  return v->shape[v->ndim - 1];
}

#endif /* KITE_TOOLS_DRIVER_H */
