/*
 * The llama family (llama, SmolLM, Mistral, Qwen2, Qwen3) on the shared decoder: pre-norm
 * blocks of RMSNorm, attention with RoPE and grouped kv heads, a SiLU-gated FFN; q/k/v biases
 * (Qwen2) and tied embeddings where the file has them, per-head q/k RMSNorm before RoPE (Qwen3),
 * and Llama 3.1's frequency scaling as llama.cpp writes it (rope_freqs.weight). Mixtral (llama
 * with llama.expert_count) and Qwen3-MoE (qwen3moe: Qwen3's attention) replace the FFN by a
 * mixture of experts (decoder.h's kr_decoder_read_experts), stacked per tensor as llama.cpp's
 * converter writes them (blk.N.ffn_gate_exps, ffn_up_exps, ffn_down_exps, ffn_gate_inp).
 */
#include <string.h>

#include "decoder.h"

static int llama_read_config(const kr_gguf *g, kr_config *c, char *err, size_t err_len) {
  if (kr_decoder_read_common(g, c, err, err_len) ||
      kr_decoder_read_rope_scaling(g, c, err, err_len) ||
      kr_decoder_read_experts(g, c, err, err_len))
    return -1;
  const char *a = c->arch;
  /* llama.cpp's converter permutes llama's q/k rows for adjacent-pair rotation; the Qwens keep
   * the halves */
  const int qwen3 = strcmp(a, "qwen3") == 0 || strcmp(a, "qwen3moe") == 0;
  const int qwen = qwen3 || strcmp(a, "qwen2") == 0;
  c->rope_style = qwen ? KITE_ROPE_NEOX : KITE_ROPE_GPTJ;
  c->qk_norm = qwen3;
  c->rope_freqs = kr_gguf_tensor_find(g, "rope_freqs.weight") != NULL;
  return 0;
}

static const char *const llama_names[] = {"llama", "mistral", "qwen2", "qwen3", "qwen3moe", NULL};

const kr_arch kr_arch_llama = {
    .names = llama_names,
    .read_config = llama_read_config,
    .load = kr_decoder_load,
    .forward = kr_decoder_forward,
    .free = kr_decoder_free,
};
