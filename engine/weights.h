/*
 * Weights of a GGUF model on a kite ctx's device: vectors (norm weights, biases) in the
 * activation dtype, matrices in one of three kinds, and the linear layer that runs each kind
 * through its kite op. Block sizes come from the GGUF reader's table (kr_ggml_block) and from
 * kite (kite_wq4_block_bytes), never from constants here.
 */
#ifndef KITE_ENGINE_WEIGHTS_H
#define KITE_ENGINE_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include <kite/kite.h>

#include "common.h"
#include "gguf.h"

typedef enum kr_wkind {
  KR_W_DENSE, /* the activation dtype, through kite_linear */
  KR_W_INT8,  /* int8 per row + f32 scales; activations quantized per row (kite_linear_quant) */
  KR_W_Q4,    /* Q4_0 / Q4_1 blocks as stored in the file (kite_linear_wq4) */
  KR_W_GGUF,  /* GGUF blocks as stored, a type per part of the rows (kite_linear_gguf) */
} kr_wkind;

#define KR_MAX_PARTS 4 /* tensors fused into one matrix (q, k, v) */

/* A matrix w[n, k] (n outputs, k inputs) on the device. */
typedef struct kr_weight {
  kr_wkind kind;
  kite_dtype dtype;       /* KR_W_DENSE: the element type */
  kite_wq4_format format; /* KR_W_Q4 */
  int64_t n, k;
  void *data;   /* DENSE [n, k] dtype; INT8 i8 [n, k]; Q4 u8 [n, k / 32 * block bytes] */
  void *scales; /* INT8: f32 [n]; else NULL */
  /* GGUF: rows [0, part_rows[0]) are blocks of types[0], the next part_rows[1] of types[1]...;
   * data holds each part's blocks as stored, one after another */
  int nparts;
  kite_gguf_type types[KR_MAX_PARTS];
  int64_t part_rows[KR_MAX_PARTS];
  int act_q8; /* GGUF: x quantized to 8 bits per block first (kite_linear_gguf_q8) */
} kr_weight;

/* Where loads go: the ctx, the dtype of vectors and dense matrices, and the running count of
 * bytes uploaded (the model's weight size). Vectors and dense matrices are stored times scale
 * (0 or 1: as in the file; Gemma's embedding table is scaled by sqrt(n_embd)). act_q8: GGUF
 * block matrices run with 8-bit activations (kr_weight.act_q8). */
typedef struct kr_loader {
  kite_ctx *ctx;
  kite_dtype act;
  size_t bytes;
  float scale;
  int act_q8;
} kr_loader;

/* Whether a ggml type is one of the 4-bit block types kite_linear_wq4 runs as stored. */
int kr_ggml_is_q4(uint32_t type);
/* Whether a ggml type is a block type kite runs as stored (kite_gguf_block_info knows it). */
int kr_ggml_is_block(uint32_t type);
/* Whether a model whose matrices are of this type runs them as stored by default (the 4- and
 * 5-bit types and the K-quants; Q8_0 files keep the dequantized default). */
int kr_ggml_default_as_stored(uint32_t type);

/* The 2-D tensor `name` of g with ne = [cols, rows] in a type the loader reads (f32, f16, bf16
 * and the block types of kr_ggml_is_block); NULL with a message naming it and its type
 * otherwise. */
const kr_gguf_tensor *kr_need_tensor(const kr_gguf *g, const char *name, int64_t cols, int64_t rows,
                                     char *err, size_t err_len);

/* kr_need_tensor for a stack of `groups` matrices (MoE experts): ne = [cols, rows, groups]. */
const kr_gguf_tensor *kr_need_tensor3(const kr_gguf *g, const char *name, int64_t cols,
                                      int64_t rows, int64_t groups, char *err, size_t err_len);

/* Row r of a GGUF tensor of a type kr_need_tensor accepts (ne[0] = cols values) as f32
 * out[cols]; a block type is decoded by kite_dequant_gguf on `host`, a ctx on the host (unused
 * for f32 / f16 / bf16). Returns 0, or -1 with a message. */
int kr_tensor_row_f32(const kr_gguf_tensor *t, int64_t r, float *out, kite_ctx *host, char *err,
                      size_t err_len);

/* The first rows of `parts` one after another ([sum of ne[0]], e.g. q, k, v biases) as a device
 * vector in ld->act. */
int kr_load_vector(kr_loader *ld, const kr_gguf_tensor *const *parts, int n_parts, void **out,
                   char *err, size_t err_len);
/* The rows of `parts` one after another ([sum of ne[1], ne[0]], e.g. the fused q, k, v
 * projection) as a matrix of the given kind. KR_W_Q4 means "as stored": KR_W_Q4 when every part
 * is of one 4-bit type, else KR_W_GGUF when every part is of a block type, else KR_W_INT8. */
int kr_load_matrix(kr_loader *ld, const kr_gguf_tensor *const *parts, int n_parts, kr_wkind kind,
                   kr_weight *w, char *err, size_t err_len);
void kr_weight_free(kite_ctx *ctx, kr_weight *w);
/* Stacks of G matrices (parts[i]: ne [k, n_i, G], all of one k and G; MoE experts) as one dense
 * device array [G, sum n_i, k] in ld->act: group g's rows of parts[0], then its rows of
 * parts[1], ... (gate and up experts packed into kite_fused_moe's w13 [E, 2I, H] once at load).
 * Block types are decoded (their values exactly, rounded to ld->act). */
int kr_load_stacked(kr_loader *ld, const kr_gguf_tensor *const *parts, int n_parts, void **out,
                    char *err, size_t err_len);

/* Device scratch of the int8 path, sized by the caller for its widest input. */
typedef struct kr_linear_scratch {
  void *xq; /* i8 [rows, k]: x quantized per row */
  void *xs; /* f32 [rows]: its scales */
} kr_linear_scratch;

/* y[rows, w.n] = x[rows, w.k] w^T (+ bias[w.n]), x, y and bias in dtype act on ctx's device. */
int kr_linear(kite_ctx *ctx, const kr_weight *w, kite_dtype act, const void *x, int64_t rows,
              const void *bias, void *y, const kr_linear_scratch *s, char *err, size_t err_len);

#endif /* KITE_ENGINE_WEIGHTS_H */
