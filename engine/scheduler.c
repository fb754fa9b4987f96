#include "scheduler.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"

/* int32 elements of the step's index arrays for T rows, B sequences. */
static size_t index_len(size_t T, size_t B, size_t max_blocks) {
  return 3 * T + 3 * B + 1 + B * max_blocks;
}

/* Points the arrays of x into buf[index_len] (int32 units): ids, pos, slots [T]; seq_lens,
 * gather [B]; cu_seqlens [B + 1]; the block table [B, max_blocks] last. */
static void index_layout(int32_t *buf, size_t T, size_t B, kr_step_index *x) {
  x->ids = buf;
  x->pos = buf + T;
  x->slots = buf + 2 * T;
  x->seq_lens = buf + 3 * T;
  x->gather = buf + 3 * T + B;
  x->cu_seqlens = buf + 3 * T + 2 * B;
  x->block_table = buf + 3 * T + 3 * B + 1;
}

int kr_sched_init(kr_scheduler *s, const kr_sched_parts *parts, int max_tokens, int max_seqs,
                  int ctx_len, int n_vocab, char *err, size_t err_len) {
  memset(s, 0, sizeof *s);
  s->parts = *parts;
  s->max_tokens = max_tokens;
  s->max_seqs = max_seqs;
  s->ctx_len = ctx_len;
  s->n_vocab = n_vocab;
  const size_t T = (size_t)max_tokens, B = (size_t)max_seqs;
  const size_t len = index_len(T, B, (size_t)parts->kv->max_blocks);
  s->h_index_buf = calloc(len, sizeof(int32_t));
  if (!s->h_index_buf) return kr_errf(err, err_len, "model: out of memory");
  if (kr_dev_alloc(parts->ctx, len * sizeof(int32_t), &s->d_index_buf, err, err_len)) return -1;
  index_layout(s->h_index_buf, T, B, &s->host);
  index_layout(s->d_index_buf, T, B, &s->dev);
  s->step_seq = calloc(B, sizeof *s->step_seq);
  s->rows = calloc(B, sizeof *s->rows);
  s->next = calloc(B, sizeof *s->next);
  if (!s->step_seq || !s->rows || !s->next) return kr_errf(err, err_len, "model: out of memory");
  return kr_step_graphs_init(&s->graphs, max_seqs, parts->graphs, err, err_len);
}

static void forget_seqs(kr_scheduler *s) {
  for (int i = 0; i < s->n_seqs; i++) {
    free(s->seqs[i].tok);
    kr_kv_table_free(&s->seqs[i].table);
  }
  s->n_seqs = 0;
}

void kr_sched_free(kr_scheduler *s) {
  forget_seqs(s);
  kr_step_graphs_free(&s->graphs);
  free(s->seqs);
  if (s->parts.ctx) kr_dev_free(s->parts.ctx, &s->d_index_buf);
  free(s->h_index_buf);
  free(s->step_seq);
  free(s->rows);
  free(s->next);
  memset(s, 0, sizeof *s);
}

void kr_sched_reset(kr_scheduler *s) {
  forget_seqs(s);
  kr_kv_reset(s->parts.kv);
  memset(&s->stats, 0, sizeof s->stats);
}

/* A released slot, or a new one at the end (-1 when out of memory). */
static int free_slot(kr_scheduler *s) {
  for (int i = 0; i < s->n_seqs; i++)
    if (s->seqs[i].state == KR_SEQ_FREE) return i;
  if (s->n_seqs == s->cap_seqs) {
    const int cap = s->cap_seqs ? 2 * s->cap_seqs : 8;
    kr_seq *seqs = realloc(s->seqs, (size_t)cap * sizeof *seqs);
    if (!seqs) return -1;
    s->seqs = seqs;
    s->cap_seqs = cap;
  }
  return s->n_seqs;
}

int kr_sched_submit(kr_scheduler *s, const int32_t *prompt, size_t n, int max_new, char *err,
                    size_t err_len) {
  return kr_sched_submit_with(s, prompt, n, max_new, NULL, err, err_len);
}

int kr_sched_submit_with(kr_scheduler *s, const int32_t *prompt, size_t n, int max_new,
                         const kr_sampling *sp, char *err, size_t err_len) {
  if (n == 0) return kr_errf(err, err_len, "submit: empty prompt");
  if (n + 1 > (size_t)s->ctx_len)
    return kr_errf(err, err_len, "submit: prompt of %zu tokens does not fit a context of %d", n,
                   s->ctx_len);
  for (size_t i = 0; i < n; i++)
    if (prompt[i] < 0 || prompt[i] >= s->n_vocab)
      return kr_errf(err, err_len, "submit: token %d outside the vocabulary", prompt[i]);
  if (kr_kv_blocks_for(s->parts.kv, n + 1) > s->parts.kv->num_blocks)
    return kr_errf(err, err_len, "submit: prompt needs more KV blocks than the cache has");
  const int slot = free_slot(s);
  if (slot < 0) return kr_errf(err, err_len, "submit: out of memory");
  kr_seq *q = &s->seqs[slot];
  memset(q, 0, sizeof *q);
  if (sp) {
    q->has_sp = 1;
    q->sp = *sp;
  }
  if (max_new < 0) max_new = 0;
  /* generation stops when the context is full: at most ctx_len tokens, one more as a guard */
  const size_t most = n + (size_t)max_new;
  q->cap = (most < (size_t)s->ctx_len ? most : (size_t)s->ctx_len) + 1;
  q->tok = malloc(q->cap * sizeof *q->tok);
  if (!q->tok || kr_kv_table_init(s->parts.kv, &q->table)) {
    free(q->tok);
    return kr_errf(err, err_len, "submit: out of memory");
  }
  memcpy(q->tok, prompt, n * sizeof *q->tok);
  q->n_tok = q->n_prompt = n;
  q->max_new = max_new;
  q->order = ++s->n_submitted;
  q->state = max_new > 0 ? KR_SEQ_WAITING : KR_SEQ_DONE; /* nothing to generate: done at once */
  if (slot == s->n_seqs) s->n_seqs++;
  return slot;
}

static void finish(kr_scheduler *s, kr_seq *q) {
  q->state = KR_SEQ_DONE;
  kr_kv_release(s->parts.kv, &q->table);
}

void kr_sched_cancel(kr_scheduler *s, int i) {
  if (i < 0 || i >= s->n_seqs) return;
  kr_seq *q = &s->seqs[i];
  if (q->state == KR_SEQ_WAITING || q->state == KR_SEQ_RUNNING) finish(s, q);
}

void kr_sched_release(kr_scheduler *s, int i) {
  if (i < 0 || i >= s->n_seqs || s->seqs[i].state == KR_SEQ_FREE) return;
  kr_seq *q = &s->seqs[i];
  kr_sched_cancel(s, i);
  free(q->tok);
  kr_kv_table_free(&q->table);
  memset(q, 0, sizeof *q);
  q->state = KR_SEQ_FREE;
}

int kr_sched_active(const kr_scheduler *s) {
  int n = 0;
  for (int i = 0; i < s->n_seqs; i++)
    n += s->seqs[i].state == KR_SEQ_WAITING || s->seqs[i].state == KR_SEQ_RUNNING;
  return n;
}

/* Prompt tokens of q that fit a step whose rows so far number `used`. */
static size_t chunk(const kr_scheduler *s, const kr_seq *q, int used) {
  const size_t left = q->n_tok - q->n_cached, budget = (size_t)(s->max_tokens - used);
  return left < budget ? left : budget;
}

/* Adds a prompt chunk of sequence i to the step when its blocks can be had (else it waits).
 * Returns -1 when the step's token budget is spent, else 0. */
static int take_prefill(kr_scheduler *s, int i, int nd, int *n_prefill_tok, int *n_seq) {
  if (s->max_tokens - nd - *n_prefill_tok <= 0) return -1;
  kr_seq *q = &s->seqs[i];
  const size_t take = chunk(s, q, nd + *n_prefill_tok);
  if (kr_kv_grow(s->parts.kv, &q->table, q->n_cached + take)) return 0; /* waits for blocks */
  q->state = KR_SEQ_RUNNING;
  s->step_seq[(*n_seq)++] = i;
  *n_prefill_tok += (int)take;
  return 0;
}

/* The waiting sequence submitted first after submission number `after`, or -1. */
static int next_waiting(const kr_scheduler *s, uint64_t after) {
  int best = -1;
  for (int i = 0; i < s->n_seqs; i++) {
    const kr_seq *q = &s->seqs[i];
    if (q->state == KR_SEQ_WAITING && q->order > after &&
        (best < 0 || q->order < s->seqs[best].order))
      best = i;
  }
  return best;
}

/* Chooses the step's sequences into step_seq: decode ones first (*n_decode of them), then
 * prefill ones. Returns how many. */
static int plan_step(kr_scheduler *s, int *n_decode) {
  int n_seq = 0, nd = 0, n_prefill_tok = 0;
  /* decode: running sequences whose prompt is in the cache */
  for (int i = 0; i < s->n_seqs && n_seq < s->max_seqs; i++) {
    kr_seq *q = &s->seqs[i];
    if (q->state != KR_SEQ_RUNNING || q->n_cached + 1 != q->n_tok) continue;
    if (kr_kv_grow(s->parts.kv, &q->table, q->n_tok)) {
      finish(s, q); /* the cache is full: the sequence ends here */
      continue;
    }
    s->step_seq[n_seq++] = i;
    nd++;
  }
  /* prefill: running sequences with prompt left, then waiting ones in the order they came (a
   * slot reused by a later request must not let it pass earlier ones) while blocks last */
  for (int i = 0; i < s->n_seqs && n_seq < s->max_seqs; i++) {
    const kr_seq *q = &s->seqs[i];
    if (q->state == KR_SEQ_RUNNING && q->n_cached + 1 < q->n_tok &&
        take_prefill(s, i, nd, &n_prefill_tok, &n_seq))
      break;
  }
  uint64_t after = 0;
  for (int i; n_seq < s->max_seqs && (i = next_waiting(s, after)) >= 0;) {
    after = s->seqs[i].order;
    if (take_prefill(s, i, nd, &n_prefill_tok, &n_seq)) break;
  }
  *n_decode = nd;
  return n_seq;
}

/* Fills the host index arrays of the planned step (advancing each sequence's n_cached) and the
 * sampler's rows. Returns the step's rows. */
static int fill_index(kr_scheduler *s, int n_seq, int nd, uint64_t seed) {
  const kr_kv_cache *kv = s->parts.kv;
  const kr_step_index *x = &s->host;
  const size_t mb = (size_t)kv->max_blocks;
  int row = 0;
  x->cu_seqlens[0] = 0;
  for (int j = 0; j < n_seq; j++) {
    kr_seq *q = &s->seqs[s->step_seq[j]];
    const size_t take = j < nd ? 1 : chunk(s, q, row);
    for (size_t i = 0; i < take; i++, row++) {
      const size_t p = q->n_cached + i;
      x->ids[row] = q->tok[p];
      x->pos[row] = (int32_t)p;
      x->slots[row] = kr_kv_slot(kv, &q->table, p);
    }
    memcpy(x->block_table + (size_t)j * mb, q->table.blocks, (size_t)q->table.n * sizeof(int32_t));
    for (size_t b = (size_t)q->table.n; b < mb; b++) x->block_table[(size_t)j * mb + b] = 0;
    x->seq_lens[j] = (int32_t)(q->n_cached + take);
    if (j >= nd) x->cu_seqlens[j - nd + 1] = row - nd;
    x->gather[j] = row - 1;
    q->n_cached += take;
    /* each sequence draws from its own seed (the run's + its index) at its own step, so a
     * request gets the same tokens whatever else runs beside it */
    s->rows[j] = (kr_sample_row){.sp = q->has_sp ? &q->sp : NULL,
                                 .seed = q->has_sp ? q->sp.seed : seed + (uint64_t)s->step_seq[j],
                                 .step = q->n_new,
                                 .prompt = q->tok,
                                 .n_prompt = q->n_prompt,
                                 .output = q->tok + q->n_prompt,
                                 .n_output = q->n_tok - q->n_prompt};
  }
  return row;
}

int kr_sched_step(kr_scheduler *s, kr_token_fn on_token, kr_stop_fn stop, void *user, char *err,
                  size_t err_len) {
  const kr_sched_parts *P = &s->parts;
  const uint64_t seed = P->sampler->p.seed;
  int nd;
  const int n_seq = plan_step(s, &nd);
  if (n_seq == 0) {
    for (int i = 0; i < s->n_seqs; i++)
      if (s->seqs[i].state == KR_SEQ_WAITING || s->seqs[i].state == KR_SEQ_RUNNING)
        return kr_errf(err, err_len, "generate: the KV cache cannot hold any waiting prompt");
    return 0;
  }
  const int n_tok = fill_index(s, n_seq, nd, seed);
  const double t0 = kr_now_s();
  /* one copy for every index array: the prefix up to this step's rows of the block table */
  const size_t idx_bytes =
      (size_t)((const char *)(s->host.block_table + (size_t)n_seq * (size_t)P->kv->max_blocks) -
               (const char *)s->h_index_buf);
  KR_CALL(kite_memcpy(P->ctx, s->d_index_buf, s->h_index_buf, idx_bytes, KITE_COPY_HOST_TO_DEVICE));
  const kr_step step = {n_tok, nd, n_seq, &s->dev, &s->host, idx_bytes};
  const int replays = s->graphs.replays;
  if (kr_step_graphs_forward(&s->graphs, P->ctx, P->arch, P->net, &step, P->kv, P->logits, err,
                             err_len) ||
      kr_sampler_run(P->sampler, P->logits, n_seq, s->rows, s->next, err, err_len))
    return -1;
  for (int j = 0; j < n_seq; j++) {
    kr_seq *q = &s->seqs[s->step_seq[j]];
    if (q->n_cached < q->n_tok) continue; /* a prompt chunk that is not the last */
    const int32_t tok = s->next[j];
    q->tok[q->n_tok++] = tok;
    q->n_new++;
    if (on_token) on_token(user, s->step_seq[j], tok);
    if ((stop && stop(user, tok)) || q->n_new >= q->max_new || q->n_tok + 1 > (size_t)s->ctx_len)
      finish(s, q);
  }
  const double dt = kr_now_s() - t0;
  s->stats.steps++;
  s->stats.graph_steps += s->graphs.replays - replays;
  if (nd == n_seq) {
    s->stats.decode_s += dt;
    s->stats.decode_tokens += n_tok;
  } else {
    s->stats.prefill_s += dt;
    s->stats.prefill_tokens += n_tok;
  }
  return n_seq;
}

int kr_sched_run(kr_scheduler *s, const kr_sampling *sp, kr_token_fn on_token, kr_stop_fn stop,
                 void *user, char *err, size_t err_len) {
  if (kr_sampler_begin(s->parts.sampler, sp, err, err_len)) return -1;
  int rc;
  while ((rc = kr_sched_step(s, on_token, stop, user, err, err_len)) > 0) {
  }
  return rc;
}
