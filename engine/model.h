/*
 * A GGUF model loaded onto a kite ctx's device and the serving core over it: a paged KV cache
 * with block allocation and continuous batching. Every tensor operation is a kite public-API
 * call; the host only builds index arrays (positions, slots, block tables) and moves them with
 * kite_memcpy.
 *
 * The pieces (each a file of engine/):
 *   weights.c    GGUF tensors into kite weights (dense, int8, 4-bit) and the linear layer
 *   kv_cache.c   the paged KV cache: blocks, free list, block tables, slots
 *   decoder.c    the decoder forward pass every family shares: weights, step buffers, layers
 *   llama.c      the llama family (llama, SmolLM, Mistral, Qwen2, Qwen3, and the mixtures of
 *                experts Mixtral and Qwen3-MoE): its config
 *   gemma.c      Gemma 2 and Gemma 3: their config
 *   phi3.c       Phi-3: its config
 *   sampler.c    penalties and sampling of a step's rows
 *   scheduler.c  sequences, continuous batching: admitting, prefill / decode steps, finishing
 *   model.c      this interface: picks the family, sizes and owns the pieces
 */
#ifndef KITE_ENGINE_MODEL_H
#define KITE_ENGINE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include <kite/kite.h>

#include "gguf.h"

/* How weights are held on the device. */
typedef enum kr_weights {
  KR_WEIGHTS_AUTO = 0, /* q4 when the file's matrices are 4/5-bit or K-quants, else bf16 on CUDA,
                          f32 on CPU */
  KR_WEIGHTS_F32,
  KR_WEIGHTS_BF16, /* bf16 weights and activations (dequantized at load) */
  KR_WEIGHTS_INT8, /* int8 per-row weights, activations quantized per token (linear_quant) */
  KR_WEIGHTS_Q4,   /* GGUF blocks as stored (linear_wq4 for Q4_0 / Q4_1, linear_gguf for any
                      other block type, linear_gguf_q8 on the CPU); other matrices as int8 */
} kr_weights;

/* A model's geometry, from the file's metadata and tensor shapes. */
typedef struct kr_config {
  char arch[32]; /* general.architecture */
  int n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx, rot_dim;
  double rope_theta, rms_eps;
  kite_rope_style rope_style;
  int has_qkv_bias, tied_embeddings;
  /* What sets a family apart from the plain pre-norm decoder (0 / off unless the family sets
   * it; engine/decoder.h runs them all) */
  int qk_norm;         /* RMSNorm over each head's q and k before RoPE (attn_q_norm, attn_k_norm) */
  int post_norms;      /* RMSNorm of each block's attention and FFN outputs (Gemma) */
  int gelu;            /* GELU-tanh gated FFN (else SiLU) */
  int fused;           /* attn_qkv and ffn_up hold the fused q|k|v and gate|up rows (Phi-3) */
  double embd_scale;   /* embedding rows times this (0: 1) */
  double attn_scale;   /* scores q.k times this (0: 1 / sqrt(head_dim)) */
  double attn_softcap; /* scores softcap * tanh(s / softcap) (0: off) */
  double logit_softcap;  /* the same on the output logits (0: off) */
  int swa_window;        /* keys a local layer sees, the query's included (0: no local layers) */
  int swa_pattern;       /* with a window: layer l is local when l % swa_pattern < swa_pattern - 1
                            (1: every layer) */
  double rope_theta_swa; /* local layers' RoPE base */
  double rope_linear;    /* global layers' positions divided by this (1: none) */
  int rope_freqs;        /* rope_freqs.weight divides the frequencies (Llama 3.1 scaling) */
  /* Mixture of experts (0 experts: the dense FFN): each token's FFN is the weighted sum of
   * n_expert_used of n_expert gated FFNs of width n_ff_exp, chosen by softmax over the router's
   * logits (ffn_gate_inp), the chosen weights renormalized to sum 1 when expert_norm */
  int n_expert, n_expert_used, n_ff_exp, expert_norm;
} kr_config;

typedef struct kr_model kr_model;

/* Bounds of kr_model_params (larger values are refused, not truncated). */
#define KR_MAX_BATCH 4096
#define KR_MAX_TOKENS 65536
#define KR_MAX_BLOCK_SIZE 1024
#define KR_DEFAULT_CTX_CAP 4096
#define KR_MAX_TP 64 /* tensor-parallel ranks (kite run / serve --tp) */

typedef struct kr_model_params {
  kr_weights weights;
  int max_batch;  /* sequences decoded together, [1, KR_MAX_BATCH] (0: 1) */
  int max_tokens; /* tokens per step, the prefill chunk: [max_batch, KR_MAX_TOKENS]
                     (0 or less than max_batch: max_batch + 255) */
  int block_size; /* KV cache block size, [1, KR_MAX_BLOCK_SIZE] (0: 16) */
  int num_blocks; /* KV cache blocks (0: enough for max_batch full contexts) */
  int ctx_len;    /* positions per sequence, at most the model's context length (0: the model's,
                     capped at KR_DEFAULT_CTX_CAP) */
  int no_graphs;  /* 1: never replay decode steps as device graphs (engine/step_graph.h) */
} kr_model_params;

/* Reads the model's geometry from g (metadata and tensor shapes) without loading anything.
 * Returns 0, or -1 with a message in err. */
int kr_model_probe(const kr_gguf *g, kr_config *c, char *err, size_t err_len);
/* Loads the model from g onto ctx's device (g must stay open while the model lives: nothing is
 * kept from it after load). Returns NULL with a message in err. */
kr_model *kr_model_load(kite_ctx *ctx, const kr_gguf *g, const kr_model_params *p, char *err,
                        size_t err_len);
/* As kr_model_load, split over nranks tensor-parallel ranks (engine/tp.h), rank r on ctxs[r]
 * (one device type; each ctx its own device on a GPU); rank 0's ctx runs the sampler. One rank is
 * kr_model_load. Every ctx must outlive the model. */
kr_model *kr_model_load_tp(kite_ctx *const *ctxs, int nranks, const kr_gguf *g,
                           const kr_model_params *p, char *err, size_t err_len);
void kr_model_free(kr_model *m);
const kr_config *kr_model_config(const kr_model *m);
const char *kr_weights_name(kr_weights w);
/* The mode named s ("auto", "f32", "bf16", "int8", "q4") into *out: 0, or -1 when unknown. */
int kr_weights_parse(const char *s, kr_weights *out);
kr_weights kr_model_weights(const kr_model *m);
size_t kr_model_weight_bytes(const kr_model *m); /* rank 0's under tensor parallelism */
/* Tensor-parallel ranks (1 without), and rank r's (r in [0, ranks)) device bytes of weights and
 * KV cache. */
int kr_model_ranks(const kr_model *m);
void kr_model_rank_bytes(const kr_model *m, int r, size_t *weights, size_t *kv);
/* Positions per sequence (the prompt and its generated tokens). */
int kr_model_ctx_len(const kr_model *m);

/* ---- serving ------------------------------------------------------------------------------ */
/* Sampling settings of a run; all zero is greedy with nothing else on. */
typedef struct kr_sampling {
  float temperature; /* 0: greedy (kite_argmax); else kite_sample with the filters below */
  int top_k;         /* <= 0: off */
  float top_p;       /* >= 1: off (0 keeps only the largest) */
  float min_p;       /* <= 0: off */
  /* kite_apply_penalties (vLLM's): repetition over the prompt and the generated tokens (0 or 1:
   * off), presence and frequency over the generated tokens (0: off); greedy runs take them too */
  float repeat_penalty, presence_penalty, frequency_penalty;
  uint64_t seed; /* sequence i draws from seed + i */
} kr_sampling;

/* Called for each generated token of sequence `seq`. */
typedef void (*kr_token_fn)(void *user, int seq, int32_t token);
/* Whether a token ends a sequence. */
typedef int (*kr_stop_fn)(void *user, int32_t token);

/* Adds a sequence (its prompt tokens are copied) that generates up to max_new tokens (0: none,
 * it is done at once). Returns its index, or -1 with a message. */
int kr_submit(kr_model *m, const int32_t *prompt, size_t n, int max_new, char *err, size_t err_len);
/* Runs steps until every submitted sequence is done. Each step is one forward pass over the
 * running sequences' next tokens (one paged_decode call) and prefill chunks (one paged_prefill
 * call), then one sampling call. Returns 0, or -1 with a message. */
int kr_generate(kr_model *m, const kr_sampling *s, kr_token_fn on_token, kr_stop_fn stop,
                void *user, char *err, size_t err_len);

/* A server's loop: kr_begin once (the default settings, NULL: greedy), then kr_submit_with for
 * each request (its own settings and seed), kr_generate_step while anything runs, kr_cancel for a
 * request that is dropped, kr_release once its tokens are read (its index is then reused). */
int kr_begin(kr_model *m, const kr_sampling *s, char *err, size_t err_len);
int kr_submit_with(kr_model *m, const int32_t *prompt, size_t n, int max_new, const kr_sampling *s,
                   char *err, size_t err_len);
/* One step over every running sequence; returns how many sequences it ran (0: none to run), or
 * -1 with a message. */
int kr_generate_step(kr_model *m, kr_token_fn on_token, kr_stop_fn stop, void *user, char *err,
                     size_t err_len);
void kr_cancel(kr_model *m, int seq);
/* Whether sequence seq has finished (its last token generated, or cancelled). */
int kr_done(const kr_model *m, int seq);
void kr_release(kr_model *m, int seq);
/* Sequences waiting or running. */
int kr_active(const kr_model *m);

typedef struct kr_stats {
  double prefill_s, decode_s; /* steps with prompt tokens, steps of decode tokens only */
  int64_t prefill_tokens, decode_tokens, steps;
  int64_t graph_steps; /* decode steps replayed as a device graph (engine/step_graph.h) */
} kr_stats;
void kr_model_stats(const kr_model *m, kr_stats *out);
/* KV cache blocks, and how many are free now. */
int kr_model_num_blocks(const kr_model *m);
int kr_model_free_blocks(const kr_model *m);
/* Forgets all sequences (their blocks are free again) and the stats. */
void kr_reset(kr_model *m);

#endif /* KITE_ENGINE_MODEL_H */
