/*
 * The decoder every family runs: pre-norm blocks of RMSNorm, attention with RoPE and grouped kv
 * heads over the paged cache, and a gated FFN or a mixture of gated experts, with the variations
 * kr_config names (per-head q/k norms, post-norms, GELU-tanh, fused projections, scaled embedding,
 * softcaps, local layers with their own RoPE base, scaled RoPE). A family's file reads its metadata
 * into kr_config (kr_decoder_read_common, then its own keys) and points its kr_arch at the
 * functions below.
 */
#ifndef KITE_ENGINE_DECODER_H
#define KITE_ENGINE_DECODER_H

#include "arch.h"

/* The geometry every family has: layers, widths, heads, context, RoPE dims and base, RMS eps,
 * the vocabulary (token_embd.weight rows), tied output, q/k/v biases. Required keys missing or
 * of another type are errors naming the key. */
int kr_decoder_read_common(const kr_gguf *g, kr_config *c, char *err, size_t err_len);

/* The mixture of experts of arch.expert_count (absent or 0: a dense FFN), expert_used_count
 * (required with experts) and expert_feed_forward_length (feed_forward_length when absent, as
 * Mixtral's files have it). */
int kr_decoder_read_experts(const kr_gguf *g, kr_config *c, char *err, size_t err_len);

/* arch.rope.scaling.type: absent or "none" leaves c alone, "linear" sets c->rope_linear from
 * rope.scaling.factor; any other type is refused, naming it. */
int kr_decoder_read_rope_scaling(const kr_gguf *g, kr_config *c, char *err, size_t err_len);

/* Whether layer l attends over a sliding window. */
int kr_decoder_layer_is_local(const kr_config *c, int l);

void *kr_decoder_load(kite_ctx *ctx, const kr_gguf *g, const kr_config *c, const kr_net_params *p,
                      kr_net_info *info, char *err, size_t err_len);
int kr_decoder_forward(void *net, const kr_step *step, const kr_kv_cache *kv, void *logits,
                       char *err, size_t err_len);
void kr_decoder_free(void *net);

#endif /* KITE_ENGINE_DECODER_H */
