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
 * Ops come in families (driver_core.c: activations, gated, norms, rope, softmax, embedding;
 * driver_attn.c: attention; driver_gemm.c: GEMM, MoE, quantization). A family says how to lay
 * out and call a case, which cases `kite check` and `kite bench` run, the bytes and FLOPs one
 * call must move and compute, and the NMSE bound against ref (kt_family_ops).
 */
#ifndef KITE_TOOLS_DRIVER_H
#define KITE_TOOLS_DRIVER_H

#include <stddef.h>

#include "kite/backend.h"

#define KT_GUARD 256   /* canary bytes before and after each body; keeps bodies aligned */
#define KT_CANARY 0xa5 /* canary byte */
#define KT_POISON 0xff /* output bytes before the call */
#define KT_MAX_BUFS 12
#define KT_MAX_VIEWS 12
#define KT_MAX_DIMS 4
#define KT_MAX_SEQS 64 /* sequences of an attention case, groups of a group_gemm case */

/* How q and k of rope are laid out. */
typedef enum kt_qk_layout {
  KT_QK_SPLIT = 0, /* q[T, Hq, D] and k[T, Hkv, D] compact, separate buffers */
  KT_QK_FUSED,     /* slices of one qkv[T, (Hq + 2 Hkv) * D] buffer: token stride (Hq+2Hkv)*D */
  KT_QK_HEAD_PAD,  /* separate buffers, head stride D + pad */
} kt_qk_layout;

/* Attention cases (driver_attn.c). */
typedef struct kt_attn_case {
  int64_t batch, hq, hkv, head_dim;
  int64_t block_size, num_blocks; /* paged cache [num_blocks, Hkv, block_size, D] */
  int64_t max_blocks;             /* block_table[batch, max_blocks] */
  int32_t seq_lens[KT_MAX_SEQS];  /* keys per sequence */
  int32_t q_lens[KT_MAX_SEQS];    /* prefill: queries per sequence (the last positions) */
  int64_t tokens;                 /* store_kv: T; prefill: the sum of q_lens */
  int64_t sq, sk;                 /* sdpa */
  kite_attn_opts opts;
  int with_lse;
  int mask;       /* sdpa: 0 none, else a driver_attn.c mask kind */
  int bshd;       /* sdpa: q, k, v, o are [B, S, H, D] memory viewed as [B, H, S, D] */
  int fused_kv;   /* store_kv: k and v are slices of one [T, 2 Hkv D + pad] buffer */
  int skip_slots; /* store_kv: about a fifth of the slots are negative (padding tokens) */
  int64_t pad;    /* extra elements in token / head strides and block-table rows */
} kt_attn_case;

/* GEMM, MoE and quantization cases (driver_gemm.c). Sizes per op:
 *   linear, linear_quant: y[m, n] = x[m, k] w[n, k]^T;  group_gemm: x[m, k], w[groups, n, k];
 *   topk_gating: logits[m = T, n = E], topk;  fused_moe: x[m = T, n = H], I = k, E = groups;
 *   quant, dequant: x[m, k]. */
typedef struct kt_gemm_case {
  int64_t m, n, k;
  int64_t pad_x, pad_w, pad_y; /* row padding of x (logits, xq, q), w (wq; MoE: ids), y */
  int with_bias;
  int64_t groups; /* group_gemm: G; MoE: experts E */
  int32_t group_sizes[KT_MAX_SEQS];
  int64_t topk; /* topk_gating / fused_moe */
  int renormalize, ties;
  kite_moe_act act;
  int oob_ids;         /* fused_moe: some ids outside [0, E) */
  int distinct_ids;    /* fused_moe: each token's ids distinct and in range, as top-k gives */
  int alt_scratch;     /* fused_moe (bench): buffers for the per-expert composition */
  kite_dtype qtype;    /* quant, dequant, linear_quant: KITE_DTYPE_I8 or KITE_DTYPE_FP8_E4M3 */
  int specials;        /* quant: NaN, inf, zero rows, ties, saturation; dequant: NaN codes */
  kite_wq4_format wq4; /* linear_wq4: block format */
} kt_gemm_case;

/* Sampling-family cases (driver_sampling.c): logits[rows, cols = V]. */
typedef struct kt_sample_case {
  unsigned params; /* KT_SP_* bits: the per-row tensors passed (sample, apply_penalties) */
  int logits;      /* KT_LOGITS_*: how the logits are drawn */
  int64_t n;       /* logprobs: top n; apply_penalties: ids per row of the prompt and output */
  int fixed;       /* every row gets the values below (bench); else a per-row mix */
  float temperature, top_p, min_p;
  int32_t top_k;
} kt_sample_case;

typedef struct kt_case {
  kite_op op;
  kite_dtype dtype;
  /* activations, norms, softmax: x[rows, cols]; gated: x[rows, 2 cols] -> y[rows, cols];
   * rope: rows = tokens; embedding: rows = tokens, cols = hidden. */
  int64_t rows, cols;
  int64_t pad_x, pad_y; /* extra elements after each row of x (and residual, table) and of y */
  int inplace;          /* y is x */
  float amp, shift;     /* float inputs are uniform in [shift - amp, shift + amp] */
  int step;             /* norms: x's first 32 elements of a row sit at shift + 16 amp */
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
  kt_attn_case attn;
  kt_gemm_case gemm;
  kt_sample_case sample;
} kt_case;

/* A growing list of cases. */
typedef struct kt_case_list {
  kt_case *c;
  int n, cap;
} kt_case_list;
void kt_case_push(kt_case_list *l, kt_case c);
void kt_case_list_free(kt_case_list *l);

/* A case with everyday options: w present, eps 1e-6, scale 1, inputs in [-1, 1]. */
kt_case kt_case_default(kite_op op, kite_dtype dtype, int64_t rows, int64_t cols);
/* For people: "3x17 x+5 w off=1 pre inplace". */
const char *kt_case_str(const kt_case *c, char *buf, size_t n);
/* The main shape, e.g. "8192x4096" (rope: "TxHqxHkvxD"; gated: rows x I). */
const char *kt_case_shape(const kt_case *c, char *buf, size_t n);

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
  DLTensor t;         /* points into the device buffer once allocated */
} kt_view;

typedef struct kt_buf {
  const char *name;
  size_t elem;   /* bytes per element */
  int64_t count; /* body length in elements */
  void *dev;     /* device allocation of kt_buf_bytes(); NULL until kt_alloc */
} kt_buf;

/* Argument slots: the op's tensors as view indices, -1 when absent (NULL). A family names its
 * own slots (e.g. KT_A_Q = 0 ...); slot numbers are private to the family. */
#define KT_MAX_ARGS 12

typedef struct kt_run {
  kt_case c;
  kite_ctx *ctx;
  int nbufs, nviews;
  kt_buf buf[KT_MAX_BUFS];
  kt_view view[KT_MAX_VIEWS];
  int arg[KT_MAX_ARGS];
  int bad; /* the plan did not fit (a bug in a case list) */
} kt_run;

/* ---- families ---------------------------------------------------------------------------- */

typedef struct kt_family_ops {
  const char *name;
  /* Lays out c's buffers and views with kt_add_buf / kt_add_view and sets r->arg. */
  void (*plan)(kt_run *r, const kt_case *c);
  /* One call of the op's public function. */
  kite_status (*call)(kt_run *r);
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

/* The family of op, or NULL when this CLI has no driver for it (listed, not checked or
 * timed). */
const kt_family_ops *kt_family(kite_op op);
extern const kt_family_ops kt_family_core, kt_family_attn, kt_family_gemm, kt_family_sampling;
/* Ops of driver_core.c that share a layout. */
typedef enum kt_core_kind {
  KT_NONE,
  KT_ACT,
  KT_GATED,
  KT_NORM,
  KT_ROPE,
  KT_SOFTMAX,
  KT_EMBEDDING
} kt_core_kind;
kt_core_kind kt_core_kind_of(kite_op op);
/* The family drivers of driver_attn.c and driver_gemm.c: 1 when op is theirs. */
int kt_attn_has(kite_op op);
int kt_gemm_has(kite_op op);
int kt_sampling_has(kite_op op);

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
/* Appends printf output to buf (length n) at *len, never overflowing (for describe()). */
__attribute__((format(printf, 4, 5))) void kt_cat(char *buf, size_t n, size_t *len, const char *fmt,
                                                  ...);
/* The view's DLTensor for slot `slot` of r->arg (NULL when absent). */
DLTensor *kt_arg(kt_run *r, int slot);

/* Element i of a buffer of type t as a double (every kite dtype), and the other way (rounded
 * once to t; integers saturate). */
double kt_load(kite_dtype t, const void *p, int64_t i);
void kt_store(kite_dtype t, void *p, int64_t i, double v);

/* ---- running a plan ---------------------------------------------------------------------- */

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
/* The bytes, FLOPs and NMSE bound of c (its family's). */
double kt_case_bytes(const kt_case *c);
double kt_case_flops(const kt_case *c);
double kt_case_bound(const kt_case *c);

/* Element n (logical, row-major over the view's shape) of view v starts at this element of
 * its buffer body; rows are runs of the last dim. */
int64_t kt_view_at(const kt_view *v, int64_t n);
int64_t kt_view_row(const kt_view *v, int64_t i);
int64_t kt_view_numel(const kt_view *v);
static inline int64_t kt_view_cols(const kt_view *v) {
  return v->shape[v->ndim - 1];
}

#endif /* KITE_TOOLS_DRIVER_H */
