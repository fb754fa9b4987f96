/*
 * kite serve's engine thread. It alone touches the model: it takes queued requests into the
 * scheduler (each with its own sampling settings and seed), runs one continuous-batching step at
 * a time over every running sequence, appends each new token's text to its request, and ends a
 * request at end-of-generation, max_tokens, a stop string, or its client going away (the sequence
 * and its KV blocks are freed before the next step). HTTP threads wait on their request's own
 * mutex and condition for more text.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve.h"

struct sv_engine {
  kr_model *m;
  const kr_tokenizer *tok;
  pthread_t thread;
  pthread_mutex_t mu; /* guards queue, stopping and the counts */
  pthread_cond_t cv;  /* a request queued or cancelled, or stopping */
  sv_request *queue;  /* submitted, not yet in the scheduler (oldest first) */
  int n_queued, stopping, n_active;
  long long served, dropped;
  sv_request **by_seq; /* [cap_seq] the request of each scheduler index */
  int cap_seq;
};

sv_request *sv_request_new(const int32_t *prompt, size_t n, int max_tokens, const sv_params *p) {
  sv_request *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->cv, NULL);
  r->refs = 1;
  r->seq = -1;
  r->max_tokens = max_tokens;
  r->sampling = p->sampling;
  r->prompt = malloc((n ? n : 1) * sizeof *r->prompt);
  int ok = r->prompt != NULL;
  if (ok) memcpy(r->prompt, prompt, n * sizeof *prompt);
  r->n_prompt = n;
  for (int i = 0; i < p->n_stop && ok; i++) {
    const size_t len = strlen(p->stop[i]);
    ok = (r->stop[r->n_stop++] = strdup(p->stop[i])) != NULL;
    if (len - 1 > r->stop_hold) r->stop_hold = len - 1;
  }
  if (!ok) {
    sv_request_put(r);
    return NULL;
  }
  return r;
}

void sv_request_put(sv_request *r) {
  if (!r) return;
  pthread_mutex_lock(&r->mu);
  const int last = --r->refs == 0;
  pthread_mutex_unlock(&r->mu);
  if (!last) return;
  for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
  free(r->prompt);
  free(r->text);
  pthread_mutex_destroy(&r->mu);
  pthread_cond_destroy(&r->cv);
  free(r);
}

/* Bytes of text[len] that end on a whole UTF-8 character (a truncated last one left out). */
static size_t utf8_whole(const char *text, size_t len) {
  for (size_t back = 1; back <= 3 && back <= len; back++) {
    const unsigned char c = (unsigned char)text[len - back];
    if ((c & 0xC0) == 0x80) continue; /* a continuation byte: look further back */
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? len - back : len;
  }
  return len;
}

size_t sv_wait_text(sv_request *r, size_t have, int timeout_ms) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_nsec += (long)timeout_ms * 1000000L;
  until.tv_sec += until.tv_nsec / 1000000000L;
  until.tv_nsec %= 1000000000L;
  for (;;) {
    if (r->done) return r->len;
    size_t n = r->len > r->stop_hold ? r->len - r->stop_hold : 0;
    n = utf8_whole(r->text, n);
    if (n > have) return n;
    if (pthread_cond_timedwait(&r->cv, &r->mu, &until) == ETIMEDOUT) return have;
  }
}

/* Ends r (under r->mu): wakes its waiter. */
static void end_request(sv_request *r, const char *finish_reason) {
  r->done = 1;
  if (!r->finish_reason) r->finish_reason = finish_reason;
  pthread_cond_broadcast(&r->cv);
}

static int append(sv_request *r, const char *s, size_t n) {
  if (r->len + n + 1 > r->cap) {
    size_t cap = r->cap ? 2 * r->cap : 256;
    while (cap < r->len + n + 1) cap *= 2;
    char *t = realloc(r->text, cap);
    if (!t) return -1;
    r->text = t;
    r->cap = cap;
  }
  memcpy(r->text + r->len, s, n);
  r->len += n;
  r->text[r->len] = 0;
  return 0;
}

/* The earliest stop string in r's text past what was searched; cuts the text there. */
static int find_stop(sv_request *r) {
  size_t best = (size_t)-1;
  for (int i = 0; i < r->n_stop; i++) {
    const size_t from = r->scan > r->stop_hold ? r->scan - r->stop_hold : 0;
    const char *hit = strstr(r->text + from, r->stop[i]);
    if (hit && (size_t)(hit - r->text) < best) best = (size_t)(hit - r->text);
  }
  r->scan = r->len;
  if (best == (size_t)-1) return 0;
  r->len = best;
  r->text[best] = 0;
  return 1;
}

static void on_token(void *user, int seq, int32_t token) {
  sv_engine *en = user;
  sv_request *r = seq < en->cap_seq ? en->by_seq[seq] : NULL;
  if (!r) return;
  char buf[256];
  size_t n = kr_tok_piece(en->tok, token, 0, buf, sizeof buf);
  if (n > sizeof buf) n = sizeof buf;
  pthread_mutex_lock(&r->mu);
  r->n_gen++;
  if (!r->ended) { /* reap ends it after the step, once its sequence is given back */
    if (append(r, buf, n))
      r->ended = 1, sv_fail(&r->error, 500, NULL, NULL, "out of memory");
    else if (r->n_stop && find_stop(r))
      r->ended = 1, r->finish_reason = "stop";
    else
      pthread_cond_broadcast(&r->cv);
  }
  pthread_mutex_unlock(&r->mu);
}

static int on_stop(void *user, int32_t token) {
  const sv_engine *en = user;
  return kr_tok_is_eog(en->tok, token);
}

/* Gives up seq's slot (and counts it: served, or dropped when its client left first), then ends
 * its request with finish_reason (NULL: as the request says) and drops the engine's reference:
 * a client that sees its reply also sees the counts without it. */
static void drop_seq(sv_engine *en, int seq, int dropped, const char *finish_reason) {
  sv_request *r = en->by_seq[seq];
  en->by_seq[seq] = NULL;
  kr_release(en->m, seq);
  pthread_mutex_lock(&en->mu);
  en->n_active--;
  if (dropped)
    en->dropped++;
  else
    en->served++;
  pthread_mutex_unlock(&en->mu);
  pthread_mutex_lock(&r->mu);
  end_request(r, finish_reason);
  pthread_mutex_unlock(&r->mu);
  sv_request_put(r);
}

/* Makes by_seq hold index seq; 0, or -1 when out of memory. */
static int grow_by_seq(sv_engine *en, int seq) {
  if (seq < en->cap_seq) return 0;
  const int cap = seq < 2 * en->cap_seq ? 2 * en->cap_seq : seq + 8;
  sv_request **t = realloc(en->by_seq, (size_t)cap * sizeof *t);
  if (!t) return -1;
  memset(t + en->cap_seq, 0, (size_t)(cap - en->cap_seq) * sizeof *t);
  en->by_seq = t;
  en->cap_seq = cap;
  return 0;
}

/* Takes the queued requests into the scheduler (under en->mu). */
static void admit(sv_engine *en) {
  while (en->queue) {
    sv_request *r = en->queue;
    en->queue = r->next;
    en->n_queued--;
    char err[512];
    pthread_mutex_lock(&r->mu);
    const int gone = r->cancelled;
    pthread_mutex_unlock(&r->mu);
    int seq = gone ? -1
                   : kr_submit_with(en->m, r->prompt, r->n_prompt, r->max_tokens, &r->sampling, err,
                                    sizeof err);
    if (seq >= 0 && grow_by_seq(en, seq)) {
      kr_release(en->m, seq);
      seq = -1;
      snprintf(err, sizeof err, "out of memory");
    }
    if (seq >= 0) {
      r->seq = seq;
      en->by_seq[seq] = r;
      en->n_active++;
      continue;
    }
    en->dropped += gone;
    pthread_mutex_lock(&r->mu);
    if (!gone) sv_fail(&r->error, 500, NULL, NULL, "%s", err);
    end_request(r, NULL);
    pthread_mutex_unlock(&r->mu);
    sv_request_put(r);
  }
}

/* After a step: ends the requests whose sequence is done and frees the sequences of those that
 * ended otherwise (a stop string, a dropped client). */
static void reap(sv_engine *en) {
  for (int seq = 0; seq < en->cap_seq; seq++) {
    sv_request *r = en->by_seq[seq];
    if (!r) continue;
    pthread_mutex_lock(&r->mu);
    const int done = kr_done(en->m, seq), gone = r->cancelled && !r->ended;
    const int end = r->ended || gone || done;
    const char *why = r->n_gen >= r->max_tokens ? "length" : "stop";
    pthread_mutex_unlock(&r->mu);
    if (end) drop_seq(en, seq, gone, r->ended || gone ? NULL : why);
  }
}

/* Ends every request with an error (shutting down or a failed step). */
static void fail_all(sv_engine *en, const char *why) {
  for (int seq = 0; seq < en->cap_seq; seq++) {
    sv_request *r = en->by_seq[seq];
    if (!r) continue;
    pthread_mutex_lock(&r->mu);
    if (!r->ended) r->ended = 1, sv_fail(&r->error, 503, NULL, NULL, "%s", why);
    pthread_mutex_unlock(&r->mu);
    drop_seq(en, seq, 0, NULL);
  }
}

static void *engine_main(void *arg) {
  sv_engine *en = arg;
  char err[1024];
  for (;;) {
    pthread_mutex_lock(&en->mu);
    while (!en->stopping && !en->queue && en->n_active == 0) pthread_cond_wait(&en->cv, &en->mu);
    if (en->stopping) {
      pthread_mutex_unlock(&en->mu);
      break;
    }
    admit(en);
    pthread_mutex_unlock(&en->mu);
    reap(en); /* cancelled before their first step, and max_tokens 0 */
    if (kr_generate_step(en->m, on_token, on_stop, en, err, sizeof err) < 0) fail_all(en, err);
    reap(en);
  }
  pthread_mutex_lock(&en->mu);
  admit(en);
  pthread_mutex_unlock(&en->mu);
  fail_all(en, "the server is shutting down");
  return NULL;
}

sv_engine *sv_engine_start(kr_model *m, const kr_tokenizer *tok, char *err, size_t err_len) {
  sv_engine *en = calloc(1, sizeof *en);
  if (!en) {
    snprintf(err, err_len, "out of memory");
    return NULL;
  }
  en->m = m;
  en->tok = tok;
  pthread_mutex_init(&en->mu, NULL);
  pthread_cond_init(&en->cv, NULL);
  /* the default settings: greedy; every request brings its own */
  if (kr_begin(m, NULL, err, err_len)) {
    free(en);
    return NULL;
  }
  if (pthread_create(&en->thread, NULL, engine_main, en)) {
    snprintf(err, err_len, "cannot start the engine thread");
    free(en);
    return NULL;
  }
  return en;
}

void sv_engine_stop(sv_engine *en) {
  if (!en) return;
  pthread_mutex_lock(&en->mu);
  en->stopping = 1;
  pthread_cond_broadcast(&en->cv);
  pthread_mutex_unlock(&en->mu);
  pthread_join(en->thread, NULL);
}

void sv_engine_free(sv_engine *en) {
  if (!en) return;
  kr_model_free(en->m);
  free(en->by_seq);
  pthread_mutex_destroy(&en->mu);
  pthread_cond_destroy(&en->cv);
  free(en);
}

int sv_submit(sv_engine *en, sv_request *r, sv_error *e) {
  pthread_mutex_lock(&en->mu);
  if (en->stopping) {
    pthread_mutex_unlock(&en->mu);
    return sv_fail(e, 503, NULL, NULL, "the server is shutting down");
  }
  pthread_mutex_lock(&r->mu);
  r->refs++;
  pthread_mutex_unlock(&r->mu);
  r->next = NULL;
  sv_request **tail = &en->queue;
  while (*tail) tail = &(*tail)->next;
  *tail = r;
  en->n_queued++;
  pthread_cond_broadcast(&en->cv);
  pthread_mutex_unlock(&en->mu);
  return 0;
}

void sv_cancel(sv_engine *en, sv_request *r) {
  pthread_mutex_lock(&r->mu);
  r->cancelled = 1;
  pthread_mutex_unlock(&r->mu);
  pthread_mutex_lock(&en->mu);
  pthread_cond_broadcast(&en->cv);
  pthread_mutex_unlock(&en->mu);
}

void sv_engine_counts(sv_engine *en, int *active, int *queued, long long *served,
                      long long *dropped) {
  pthread_mutex_lock(&en->mu);
  *active = en->n_active;
  *queued = en->n_queued;
  *served = en->served;
  *dropped = en->dropped;
  pthread_mutex_unlock(&en->mu);
}
