/*
 * Gemma 2 and Gemma 3 on the shared decoder. What sets them apart from llama:
 *   - the embedding rows are scaled by sqrt(n_embd);
 *   - RMSNorm weights multiply as (1 + w): llama.cpp's converter stores 1 + w in the file, so
 *     the norms here run with offset 0 on the stored values;
 *   - each block norms its attention and FFN outputs too (post_attention_norm, post_ffw_norm)
 *     before they join the residual;
 *   - a GELU-tanh gated FFN;
 *   - sliding-window attention on local layers: Gemma 2 every other layer (0, 2, ...), Gemma 3
 *     five of six (l % 6 < 5); Gemma 3's local layers rotate with
 *     base rope.freq_base_swa (10000 when absent, as llama.cpp), its global ones with
 *     rope.freq_base and the file's linear scaling;
 *   - Gemma 2 softcaps the attention scores and the output logits (50 and 30 where the file
 *     does not say, as llama.cpp);
 *   - Gemma 3 RMS-norms each head's q and k before RoPE.
 * The attention scale is query_pre_attn_scalar^-1/2, which llama.cpp derives as
 * 1 / sqrt(key_length), or 1 / sqrt(n_embd / n_head) for the 27B models (46 layers in Gemma 2,
 * 62 in Gemma 3), the ones whose scalar is not the head size.
 */
#include <math.h>
#include <string.h>

#include "decoder.h"

/* A softcap key (def when absent): a number >= 0, 0 off. */
static int read_softcap(const kr_gguf *g, const char *arch, const char *key, double def,
                        double *out, char *err, size_t err_len) {
  if (kr_config_float(g, arch, key, def, out, err, err_len)) return -1;
  if (!(*out >= 0) || !isfinite(*out))
    return kr_errf(err, err_len, "model: %s.%s %g is not a finite value >= 0", arch, key, *out);
  return 0;
}

static int gemma_read_config(const kr_gguf *g, kr_config *c, char *err, size_t err_len) {
  if (kr_decoder_read_common(g, c, err, err_len) ||
      kr_decoder_read_rope_scaling(g, c, err, err_len))
    return -1;
  const char *a = c->arch;
  const int v3 = strcmp(a, "gemma3") == 0;
  c->rope_style = KITE_ROPE_NEOX;
  c->post_norms = 1;
  c->gelu = 1;
  c->qk_norm = v3;
  c->embd_scale = sqrt((double)c->n_embd);
  const int big = c->n_layer == (v3 ? 62 : 46);
  c->attn_scale = 1.0 / sqrt(big ? (double)c->n_embd / c->n_head : (double)c->head_dim);
  c->swa_pattern = v3 ? 6 : 2; /* as llama.cpp: the files do not say */
  if (kr_config_int(g, a, "attention.sliding_window", 1, 1 << 24, 1, 0, &c->swa_window, err,
                    err_len))
    return -1;
  if (v3) {
    if (kr_config_float(g, a, "rope.freq_base_swa", 10000.0, &c->rope_theta_swa, err, err_len))
      return -1;
    if (!(c->rope_theta_swa > 0))
      return kr_errf(err, err_len, "model: %s.rope.freq_base_swa %g is not > 0", a,
                     c->rope_theta_swa);
    return 0;
  }
  /* llama.cpp's defaults where the file has no caps (its converter always writes them) */
  return read_softcap(g, a, "attn_logit_softcapping", 50.0, &c->attn_softcap, err, err_len) ||
                 read_softcap(g, a, "final_logit_softcapping", 30.0, &c->logit_softcap, err,
                              err_len)
             ? -1
             : 0;
}

static const char *const gemma_names[] = {"gemma2", "gemma3", NULL};

const kr_arch kr_arch_gemma = {
    .names = gemma_names,
    .read_config = gemma_read_config,
    .load = kr_decoder_load,
    .forward = kr_decoder_forward,
    .free = kr_decoder_free,
};
