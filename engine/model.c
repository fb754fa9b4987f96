#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kite/dtype.h>

#include "arch.h"
#include "common.h"
#include "kv_cache.h"
#include "sampler.h"
#include "scheduler.h"
#include "tp.h"

/* The families, matched by general.architecture. */
static const kr_arch *const archs[] = {&kr_arch_llama, &kr_arch_gemma, &kr_arch_phi3};

struct kr_model {
  kite_ctx *ctx; /* rank 0's under tensor parallelism: the sampler, the logits, the index */
  kr_config c;
  const kr_arch *arch;
  void *net;  /* the family's weights and step buffers (one rank) */
  kr_tp *tp;  /* or every rank's (--tp) */
  int nranks; /* 1 without tensor parallelism */
  kr_net_info info;
  int ctx_len;
  kr_kv_cache kv;
  kr_sampler sampler;
  void *logits; /* [max_batch, n_vocab] info.act on the device */
  kr_scheduler sched;
};

const char *kr_weights_name(kr_weights w) {
  switch (w) {
  case KR_WEIGHTS_F32:
    return "f32";
  case KR_WEIGHTS_BF16:
    return "bf16";
  case KR_WEIGHTS_INT8:
    return "int8";
  case KR_WEIGHTS_Q4:
    return "q4";
  default:
    return "auto";
  }
}

int kr_weights_parse(const char *s, kr_weights *out) {
  for (int w = KR_WEIGHTS_AUTO; w <= KR_WEIGHTS_Q4; w++)
    if (strcmp(s, kr_weights_name((kr_weights)w)) == 0) {
      *out = (kr_weights)w;
      return 0;
    }
  return -1;
}

int kr_config_int(const kr_gguf *g, const char *arch, const char *key, int64_t lo, int64_t hi,
                  int required, int def, int *out, char *err, size_t err_len) {
  char name[128], msg[256];
  snprintf(name, sizeof name, "%s.%s", arch, key);
  int64_t v;
  const int rc = kr_gguf_meta_int(g, name, &v, msg, sizeof msg);
  if (rc < 0) return kr_errf(err, err_len, "model: %s", msg);
  if (rc > 0) {
    if (required) return kr_errf(err, err_len, "model: metadata %s missing", name);
    *out = def;
    return 0;
  }
  if (v < lo || v > hi)
    return kr_errf(err, err_len, "model: %s = %lld outside [%lld, %lld]", name, (long long)v,
                   (long long)lo, (long long)hi);
  *out = (int)v;
  return 0;
}

int kr_config_float(const kr_gguf *g, const char *arch, const char *key, double def, double *out,
                    char *err, size_t err_len) {
  char name[128], msg[256];
  snprintf(name, sizeof name, "%s.%s", arch, key);
  const int rc = kr_gguf_meta_float(g, name, out, msg, sizeof msg);
  if (rc < 0) return kr_errf(err, err_len, "model: %s", msg);
  if (rc > 0) *out = def;
  return 0;
}

/* general.architecture into c->arch, and its family. */
static const kr_arch *find_arch(const kr_gguf *g, kr_config *c, char *err, size_t err_len) {
  const char *a;
  uint64_t len;
  char msg[256];
  const int rc = kr_gguf_meta_str(g, "general.architecture", &a, &len, msg, sizeof msg);
  if (rc) {
    kr_errf(err, err_len, "model: %s", rc > 0 ? "metadata general.architecture missing" : msg);
    return NULL;
  }
  if (len >= sizeof c->arch) {
    kr_errf(err, err_len, "model: general.architecture of %llu bytes", (unsigned long long)len);
    return NULL;
  }
  memcpy(c->arch, a, len);
  c->arch[len] = 0;
  char known[256] = "";
  for (size_t i = 0; i < sizeof archs / sizeof *archs; i++)
    for (const char *const *n = archs[i]->names; *n; n++) {
      if (strcmp(*n, c->arch) == 0) return archs[i];
      snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", known[0] ? ", " : "",
               *n);
    }
  kr_errf(err, err_len, "model: architecture '%s' not supported (%s)", c->arch, known);
  return NULL;
}

/* The serving sizes of p against the model's context; fills *out with the defaults applied. */
static int resolve_params(const kr_config *c, const kr_model_params *p, kr_model_params *out,
                          char *err, size_t err_len) {
  *out = *p;
  if (p->max_batch < 0 || p->max_batch > KR_MAX_BATCH)
    return kr_errf(err, err_len, "model: batch of %d sequences outside [1, %d]", p->max_batch,
                   KR_MAX_BATCH);
  if (out->max_batch == 0) out->max_batch = 1;
  if (p->max_tokens > KR_MAX_TOKENS)
    return kr_errf(err, err_len, "model: %d tokens per step, more than %d", p->max_tokens,
                   KR_MAX_TOKENS);
  if (p->max_tokens < out->max_batch) out->max_tokens = out->max_batch + 255;
  if (p->block_size < 0 || p->block_size > KR_MAX_BLOCK_SIZE)
    return kr_errf(err, err_len, "model: KV block size %d outside [1, %d]", p->block_size,
                   KR_MAX_BLOCK_SIZE);
  if (out->block_size == 0) out->block_size = 16;
  if (p->ctx_len < 0 || p->ctx_len > c->n_ctx)
    return kr_errf(err, err_len, "model: context of %d positions outside [1, %d] (the model's)",
                   p->ctx_len, c->n_ctx);
  if (out->ctx_len == 0)
    out->ctx_len = c->n_ctx < KR_DEFAULT_CTX_CAP ? c->n_ctx : KR_DEFAULT_CTX_CAP;
  const int64_t max_blocks = (out->ctx_len + out->block_size - 1) / out->block_size;
  const int64_t blocks = p->num_blocks ? p->num_blocks : max_blocks * out->max_batch;
  if (p->num_blocks < 0 || blocks > INT32_MAX)
    return kr_errf(err, err_len, "model: %lld KV cache blocks outside [1, %d]", (long long)blocks,
                   INT32_MAX);
  out->num_blocks = (int)blocks;
  return 0;
}

int kr_model_probe(const kr_gguf *g, kr_config *c, char *err, size_t err_len) {
  memset(c, 0, sizeof *c);
  const kr_arch *a = find_arch(g, c, err, err_len);
  return a ? a->read_config(g, c, err, err_len) : -1;
}

static int build(kr_model *m, kite_ctx *const *ctxs, const kr_gguf *g, const kr_model_params *asked,
                 char *err, size_t err_len) {
  kr_model_params p;
  if (!(m->arch = find_arch(g, &m->c, err, err_len)) ||
      m->arch->read_config(g, &m->c, err, err_len) ||
      resolve_params(&m->c, asked, &p, err, err_len))
    return -1;
  m->ctx_len = p.ctx_len;
  const kr_net_params np = {asked->weights, p.max_tokens, p.max_batch, p.ctx_len, 0, 1, NULL};
  const kr_tp_kv_params kvp = {p.block_size, p.num_blocks, p.ctx_len};
  if (m->nranks > 1) {
    if (!(m->tp =
              kr_tp_load(ctxs, m->nranks, m->arch, g, &m->c, &np, &kvp, &m->info, err, err_len)))
      return -1;
  } else if (!(m->net = m->arch->load(m->ctx, g, &m->c, &np, &m->info, err, err_len))) {
    return -1;
  }
  const kr_config *c = &m->c;
  /* max_batch <= 2^12 rows of n_vocab < 2^31 values of <= 4 bytes: fits a 64-bit size_t */
  const size_t logits_bytes =
      (size_t)p.max_batch * (size_t)c->n_vocab * kite_dtype_size(m->info.act);
  if (kr_kv_init(&m->kv, m->ctx, c->n_layer, c->n_head_kv / m->nranks, c->head_dim, m->info.act,
                 p.block_size, p.num_blocks, p.ctx_len, err, err_len) ||
      kr_dev_alloc(m->ctx, logits_bytes, &m->logits, err, err_len) ||
      kr_sampler_init(&m->sampler, m->ctx, p.max_batch, c->n_vocab, m->info.act, err, err_len))
    return -1;
  m->sampler.softcap = (float)c->logit_softcap;
  /* graphs record one ctx's calls: the ranks of a tensor-parallel model run on several */
  const kr_sched_parts parts = {
      m->ctx,    &m->kv,      m->tp ? &kr_arch_tp : m->arch, m->tp ? (void *)m->tp : m->net,
      m->logits, &m->sampler, !asked->no_graphs && !m->tp};
  return kr_sched_init(&m->sched, &parts, p.max_tokens, p.max_batch, p.ctx_len, c->n_vocab, err,
                       err_len);
}

kr_model *kr_model_load(kite_ctx *ctx, const kr_gguf *g, const kr_model_params *p, char *err,
                        size_t err_len) {
  return kr_model_load_tp(&ctx, 1, g, p, err, err_len);
}

kr_model *kr_model_load_tp(kite_ctx *const *ctxs, int nranks, const kr_gguf *g,
                           const kr_model_params *p, char *err, size_t err_len) {
  if (!ctxs || nranks < 1) {
    kr_errf(err, err_len, "model: %d ranks", nranks);
    return NULL;
  }
  kr_model *m = calloc(1, sizeof *m);
  if (!m) {
    kr_errf(err, err_len, "model: out of memory");
    return NULL;
  }
  m->ctx = ctxs[0];
  m->nranks = nranks;
  if (build(m, ctxs, g, p, err, err_len)) {
    kr_model_free(m);
    return NULL;
  }
  return m;
}

void kr_model_free(kr_model *m) {
  if (!m) return;
  kr_sched_free(&m->sched);
  kr_sampler_free(&m->sampler);
  kr_dev_free(m->ctx, &m->logits);
  kr_kv_free(&m->kv);
  if (m->net) m->arch->free(m->net);
  if (m->tp) kr_arch_tp.free(m->tp);
  free(m);
}

const kr_config *kr_model_config(const kr_model *m) {
  return &m->c;
}
kr_weights kr_model_weights(const kr_model *m) {
  return m->info.weights;
}
size_t kr_model_weight_bytes(const kr_model *m) {
  return m->info.weight_bytes;
}
int kr_model_ranks(const kr_model *m) {
  return m->nranks;
}
void kr_model_rank_bytes(const kr_model *m, int r, size_t *weights, size_t *kv) {
  if (m->tp)
    kr_tp_rank_bytes(m->tp, r, weights, kv);
  else
    *weights = m->info.weight_bytes;
  if (r == 0) *kv = kr_kv_bytes(&m->kv);
}
int kr_model_ctx_len(const kr_model *m) {
  return m->ctx_len;
}
int kr_model_num_blocks(const kr_model *m) {
  return m->kv.num_blocks;
}
int kr_model_free_blocks(const kr_model *m) {
  return m->kv.n_free;
}
void kr_model_stats(const kr_model *m, kr_stats *out) {
  *out = m->sched.stats;
}

int kr_submit(kr_model *m, const int32_t *prompt, size_t n, int max_new, char *err,
              size_t err_len) {
  return kr_sched_submit(&m->sched, prompt, n, max_new, err, err_len);
}

int kr_generate(kr_model *m, const kr_sampling *s, kr_token_fn on_token, kr_stop_fn stop,
                void *user, char *err, size_t err_len) {
  return kr_sched_run(&m->sched, s, on_token, stop, user, err, err_len);
}

int kr_begin(kr_model *m, const kr_sampling *s, char *err, size_t err_len) {
  return kr_sampler_begin(&m->sampler, s, err, err_len);
}
int kr_submit_with(kr_model *m, const int32_t *prompt, size_t n, int max_new, const kr_sampling *s,
                   char *err, size_t err_len) {
  return kr_sched_submit_with(&m->sched, prompt, n, max_new, s, err, err_len);
}
int kr_generate_step(kr_model *m, kr_token_fn on_token, kr_stop_fn stop, void *user, char *err,
                     size_t err_len) {
  return kr_sched_step(&m->sched, on_token, stop, user, err, err_len);
}
void kr_cancel(kr_model *m, int seq) {
  kr_sched_cancel(&m->sched, seq);
}
int kr_done(const kr_model *m, int seq) {
  return seq >= 0 && seq < m->sched.n_seqs && m->sched.seqs[seq].state == KR_SEQ_DONE;
}
void kr_release(kr_model *m, int seq) {
  kr_sched_release(&m->sched, seq);
}
int kr_active(const kr_model *m) {
  return kr_sched_active(&m->sched);
}

void kr_reset(kr_model *m) {
  kr_sched_reset(&m->sched);
}
