/*
 * The model families the engine runs. A family is one file (llama.c, gemma.c, phi3.c) that fills
 * a kr_arch: it reads its geometry from the GGUF metadata, loads its weights with the step
 * buffers its forward pass needs, and runs that forward pass over one step of the scheduler.
 * The families so far differ only in what kr_config says and share the decoder of decoder.h
 * for load and forward; a family with a different block writes its own. A new family adds a
 * file and a line in model.c's table.
 */
#ifndef KITE_ENGINE_ARCH_H
#define KITE_ENGINE_ARCH_H

#include <stddef.h>
#include <stdint.h>

#include <kite/kite.h>

#include "gguf.h"
#include "kv_cache.h"
#include "model.h"

/* The int32 index arrays of one step, one buffer (host or device) laid out in this order with
 * the block table last, so that a step copies only the prefix its sequences use. T rows
 * (tokens), B sequences; rows [0, n_decode) are one decode token each of sequences
 * [0, n_decode), the other rows the prefill chunks of sequences [n_decode, n_seq). */
typedef struct kr_step_index {
  int32_t *ids;         /* [T] the token of each row */
  int32_t *pos;         /* [T] its position in its sequence */
  int32_t *slots;       /* [T] its KV cache slot */
  int32_t *seq_lens;    /* [B] positions of each sequence in the cache after the step */
  int32_t *gather;      /* [B] the row whose logits predict each sequence's next token */
  int32_t *cu_seqlens;  /* [B + 1] prefill rows of sequence n_decode + i: [cu[i], cu[i + 1]) */
  int32_t *block_table; /* [B, max_blocks] each sequence's blocks, 0-padded */
} kr_step_index;

/* One step as the forward pass sees it. */
typedef struct kr_step {
  int n_tok, n_decode, n_seq;
  const kr_step_index *dev;  /* the index arrays on the device */
  const kr_step_index *host; /* and on the host: index_bytes bytes from host->ids */
  size_t index_bytes;
} kr_step;

/* Sizes a family's load prepares for. */
typedef struct kr_net_params {
  kr_weights weights; /* as asked (AUTO resolved by the family) */
  int max_tokens;     /* rows of a step */
  int max_seqs;       /* sequences of a step */
  int ctx_len;        /* positions per sequence */
  /* tensor parallelism (engine/tp.h): this load's rank of nranks (0 or 1: the whole model) and
   * the rank's comm, NULL for one rank */
  int rank, nranks;
  kite_comm *comm;
} kr_net_params;

/* What a loaded family tells the rest of the engine. */
typedef struct kr_net_info {
  kr_weights weights;  /* the resolved mode */
  kite_dtype act;      /* activations, KV cache and logits */
  size_t weight_bytes; /* uploaded weights */
} kr_net_info;

typedef struct kr_arch {
  const char *const *names; /* general.architecture values it runs, NULL-terminated */
  /* Fills c (c->arch already set) from g's metadata and tensor shapes. */
  int (*read_config)(const kr_gguf *g, kr_config *c, char *err, size_t err_len);
  /* Loads the weights and allocates step buffers; NULL with a message on failure. */
  void *(*load)(kite_ctx *ctx, const kr_gguf *g, const kr_config *c, const kr_net_params *p,
                kr_net_info *info, char *err, size_t err_len);
  /* The forward pass of one step: logits[n_seq, n_vocab] (device, info.act) of the gather rows;
   * logits NULL on a tensor-parallel rank other than 0, which computes none. */
  int (*forward)(void *net, const kr_step *step, const kr_kv_cache *kv, void *logits, char *err,
                 size_t err_len);
  void (*free)(void *net);
} kr_arch;

extern const kr_arch kr_arch_llama, kr_arch_gemma, kr_arch_phi3;

/* Reads arch.key, an integer in [lo, hi] (def when absent and not required). A present key of
 * another type is an error naming both types; "missing" only when it is absent. */
int kr_config_int(const kr_gguf *g, const char *arch, const char *key, int64_t lo, int64_t hi,
                  int required, int def, int *out, char *err, size_t err_len);
/* arch.key as a number (def when absent). */
int kr_config_float(const kr_gguf *g, const char *arch, const char *key, double def, double *out,
                    char *err, size_t err_len);

#endif /* KITE_ENGINE_ARCH_H */
