/*
 * Phi-3 on the shared decoder: the llama block with the q, k and v projections fused in the
 * file (attn_qkv [QKV, H]) and the gate and up projections too (ffn_up [2F, H], gate rows
 * first), both loaded as the one matrix they are; NeoX RoPE over rope.dimension_count dims
 * (partial rotary where that is less than the head size), a sliding window over every layer
 * where the file has attention.sliding_window. Files of the 128k models (LongRoPE: the
 * rope_factors_long / rope_factors_short tensors) are refused: their scaling is not run here.
 */
#include "decoder.h"

static int phi3_read_config(const kr_gguf *g, kr_config *c, char *err, size_t err_len) {
  if (kr_decoder_read_common(g, c, err, err_len) ||
      kr_decoder_read_rope_scaling(g, c, err, err_len))
    return -1;
  if (kr_gguf_tensor_find(g, "rope_factors_long.weight") ||
      kr_gguf_tensor_find(g, "rope_factors_short.weight"))
    return kr_errf(err, err_len,
                   "model: phi3 with LongRoPE scaling (rope_factors_long/short.weight) is not "
                   "supported");
  c->rope_style = KITE_ROPE_NEOX;
  c->fused = 1;
  c->has_qkv_bias = 0;
  c->swa_pattern = 1;
  return kr_config_int(g, c->arch, "attention.sliding_window", 0, 1 << 24, 0, 0, &c->swa_window,
                       err, err_len);
}

static const char *const phi3_names[] = {"phi3", NULL};

const kr_arch kr_arch_phi3 = {
    .names = phi3_names,
    .read_config = phi3_read_config,
    .load = kr_decoder_load,
    .forward = kr_decoder_forward,
    .free = kr_decoder_free,
};
