/*
 * Continuous batching over the paged KV cache. Sequences wait, run and finish; each step takes
 * every running sequence's next token (decode) and then prompt chunks of running and waiting
 * sequences (prefill) while the step's token budget and the free KV blocks last, runs one
 * forward pass and one sampling call over them, and appends each sequence's new token. A
 * sequence that cannot get a block for its next token ends there (the cache is full).
 */
#ifndef KITE_ENGINE_SCHEDULER_H
#define KITE_ENGINE_SCHEDULER_H

#include <stddef.h>
#include <stdint.h>

#include "arch.h"
#include "kv_cache.h"
#include "model.h"
#include "sampler.h"
#include "step_graph.h"

/* FREE: a released slot, which the next submit reuses. */
typedef enum kr_seq_state { KR_SEQ_WAITING, KR_SEQ_RUNNING, KR_SEQ_DONE, KR_SEQ_FREE } kr_seq_state;

typedef struct kr_seq {
  int32_t *tok; /* [cap] the prompt, then the generated tokens */
  size_t n_tok, cap;
  size_t n_prompt;
  size_t n_cached; /* tokens whose keys and values are in the cache */
  int max_new, n_new;
  kr_block_table table;
  kr_seq_state state;
  uint64_t order; /* submission number: waiting sequences start in this order */
  int has_sp;     /* sp holds the sequence's own settings and seed (else the run's, seed + index) */
  kr_sampling sp;
} kr_seq;

/* What the scheduler runs steps on (owned by the model, not by the scheduler). */
typedef struct kr_sched_parts {
  kite_ctx *ctx;
  kr_kv_cache *kv;
  const kr_arch *arch;
  void *net;
  void *logits; /* [max_seqs, n_vocab] device: the step's rows that predict tokens */
  kr_sampler *sampler;
  int graphs; /* replay decode steps as device graphs where the device records them */
} kr_sched_parts;

typedef struct kr_scheduler {
  kr_sched_parts parts;
  int max_tokens, max_seqs, ctx_len, n_vocab;
  kr_seq *seqs;
  int n_seqs, cap_seqs;
  uint64_t n_submitted;
  int32_t *h_index_buf;    /* the step's index arrays on the host (kr_step_index's layout) */
  void *d_index_buf;       /* and on the device */
  kr_step_index host, dev; /* views of the two buffers */
  int *step_seq;           /* [max_seqs] the sequence of each of the step's sequences */
  kr_sample_row *rows;     /* [max_seqs] what the sampler needs of each */
  int32_t *next;           /* [max_seqs] host: the sampled tokens */
  kr_stats stats;
  kr_step_graphs graphs;
} kr_scheduler;

int kr_sched_init(kr_scheduler *s, const kr_sched_parts *parts, int max_tokens, int max_seqs,
                  int ctx_len, int n_vocab, char *err, size_t err_len);
void kr_sched_free(kr_scheduler *s);
int kr_sched_submit(kr_scheduler *s, const int32_t *prompt, size_t n, int max_new, char *err,
                    size_t err_len);
/* As kr_sched_submit, with the sequence's own sampling settings and seed (sp, copied; NULL:
 * the run's), into a released slot where there is one. */
int kr_sched_submit_with(kr_scheduler *s, const int32_t *prompt, size_t n, int max_new,
                         const kr_sampling *sp, char *err, size_t err_len);
int kr_sched_run(kr_scheduler *s, const kr_sampling *sp, kr_token_fn on_token, kr_stop_fn stop,
                 void *user, char *err, size_t err_len);
/* One step of kr_sched_run (kr_sampler_begin done by the caller), for a loop that submits and
 * cancels between steps. Returns the step's sequences (0: nothing left to run), or -1 with a
 * message. */
int kr_sched_step(kr_scheduler *s, kr_token_fn on_token, kr_stop_fn stop, void *user, char *err,
                  size_t err_len);
/* Ends sequence i where it is (its blocks go back to the cache); done ones are left as they are. */
void kr_sched_cancel(kr_scheduler *s, int i);
/* Ends sequence i and frees its slot for a later submit (its index then names another). */
void kr_sched_release(kr_scheduler *s, int i);
/* Sequences submitted and not yet done (waiting or running). */
int kr_sched_active(const kr_scheduler *s);
/* Forgets every sequence (their blocks go back to the cache) and the stats. */
void kr_sched_reset(kr_scheduler *s);

#endif /* KITE_ENGINE_SCHEDULER_H */
