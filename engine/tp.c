/*
 * Tensor parallelism (engine/tp.h): the split of the weights at load, and the ranks' threads
 * that run each step's forward pass together.
 */
#include "tp.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "kv_cache.h"
#include "weights.h"

int kr_tp_check(const kr_config *c, int nranks, char *err, size_t err_len) {
  if (nranks < 1) return kr_errf(err, err_len, "tp: %d ranks", nranks);
  /* heads follow: Hkv divides Hq (kr_decoder_read_common) */
  if (c->n_head_kv % nranks)
    return kr_errf(err, err_len, "tp: %d ranks do not divide the model's %d kv heads", nranks,
                   c->n_head_kv);
  if (c->n_expert && nranks > 1)
    return kr_errf(err, err_len, "tp: %s with %d experts runs on one rank only", c->arch,
                   c->n_expert);
  if (c->n_ff % nranks)
    return kr_errf(err, err_len, "tp: %d ranks do not divide the model's FFN width %d", nranks,
                   c->n_ff);
  return 0;
}

/* ---- the split ------------------------------------------------------------------------------ */

/* Bytes of a row of cols values of t's type. */
static uint64_t row_bytes(const kr_gguf_tensor *t, int64_t cols) {
  uint64_t bv, bb;
  kr_ggml_block(t->type, &bv, &bb);
  return (uint64_t)cols / bv * bb;
}

int kr_tp_rows(const kr_tp_shard *s, const kr_gguf_tensor *t, int n_sec, const int64_t *first,
               const int64_t *count, kr_gguf_tensor *out) {
  if (s->nranks == 1) { /* sections one after another over every row: t itself, one part */
    int64_t at = 0;
    for (int i = 0; i < n_sec && first[i] == at; i++) at += count[i];
    if (at == t->ne[1]) {
      out[0] = *t;
      return 1;
    }
  }
  const uint64_t rb = row_bytes(t, t->ne[0]);
  for (int i = 0; i < n_sec; i++) {
    const int64_t share = count[i] / s->nranks, r0 = first[i] + (int64_t)s->rank * share;
    out[i] = *t;
    out[i].ne[1] = share;
    out[i].data = (const uint8_t *)t->data + (uint64_t)r0 * rb;
    out[i].nbytes = (uint64_t)share * rb;
  }
  return n_sec;
}

int kr_tp_cols(const kr_tp_shard *s, const kr_gguf_tensor *t, kr_gguf_tensor *out, void **owned,
               char *err, size_t err_len) {
  *owned = NULL;
  *out = *t;
  if (s->nranks == 1) return 0;
  const int64_t K = t->ne[0], rows = t->ne[1], share = K / s->nranks;
  const int64_t c0 = (int64_t)s->rank * share;
  uint64_t bv, bb;
  kr_ggml_block(t->type, &bv, &bb);
  const int whole = (uint64_t)c0 % bv == 0 && (uint64_t)share % bv == 0;
  const uint64_t src_rb = row_bytes(t, K);
  const uint64_t dst_rb = whole ? row_bytes(t, share) : (uint64_t)share * sizeof(float);
  uint8_t *data = malloc((size_t)(dst_rb * (uint64_t)rows) + 1); /* [rows, share] */
  if (!data) return kr_errf(err, err_len, "model: out of memory");
  kite_ctx *host = NULL;
  float *row = NULL; /* [K] a dequantized row */
  int rc = 0;
  if (whole) {
    for (int64_t r = 0; r < rows; r++)
      memcpy(data + (uint64_t)r * dst_rb,
             (const uint8_t *)t->data + (uint64_t)r * src_rb + (uint64_t)c0 / bv * bb,
             (size_t)dst_rb);
  } else if (!(row = malloc((size_t)K * sizeof *row)) || kite_ctx_create(NULL, &host) != KITE_OK) {
    rc = kr_errf(err, err_len, "model: %s", row ? kite_last_error() : "out of memory");
  } else {
    for (int64_t r = 0; r < rows && !rc; r++) {
      rc = kr_tensor_row_f32(t, r, row, host, err, err_len);
      memcpy(data + (uint64_t)r * dst_rb, row + c0, (size_t)dst_rb);
    }
    out->type = KR_GGML_F32;
  }
  kite_ctx_destroy(host);
  free(row);
  if (rc) {
    free(data);
    return -1;
  }
  out->ne[0] = share;
  out->data = data;
  out->nbytes = dst_rb * (uint64_t)rows;
  *owned = data;
  return 0;
}

/* ---- the ranks ------------------------------------------------------------------------------ */

struct kr_tp {
  int nranks;
  const kr_arch *arch;
  kite_ctx **ctxs;    /* [nranks] the caller's */
  kite_comm **comms;  /* [nranks]; a failed rank's is destroyed (NULL) */
  void **nets;        /* [nranks] each rank's shard and step buffers */
  size_t *wbytes;     /* [nranks] weight bytes of each shard */
  kr_kv_cache *kvs;   /* [nranks] the KV caches of ranks > 0 ([0] unused) */
  void **index;       /* [nranks] the step's index arrays on ranks > 0 ([0] unused) */
  size_t *index_cap;  /* [nranks] bytes of each */
  pthread_t *threads; /* [nranks] of ranks > 0 */
  int n_started;      /* threads started: ranks 1..n_started */
  pthread_mutex_t mu;
  pthread_cond_t go, done;
  uint64_t gen; /* steps posted */
  int pending;  /* ranks > 0 still running the posted step */
  int quit;
  const kr_step *step;
  int *rc;          /* [nranks] of the posted step */
  char (*msg)[512]; /* [nranks] */
  int broken;       /* a rank failed: the group is gone */
};

/* kr_step_index's arrays of `host` moved onto `base`, keeping their offsets from ids. */
static void rebase(const kr_step_index *host, int32_t *base, kr_step_index *out) {
  const int32_t *h = host->ids;
  out->ids = base;
  out->pos = base + (host->pos - h);
  out->slots = base + (host->slots - h);
  out->seq_lens = base + (host->seq_lens - h);
  out->gather = base + (host->gather - h);
  out->cu_seqlens = base + (host->cu_seqlens - h);
  out->block_table = base + (host->block_table - h);
}

/* Rank r's forward pass of the posted step; a rank > 0 first copies the index arrays to its
 * device. A failing rank destroys its comm, so that no other rank waits for it. */
static int rank_forward(kr_tp *tp, int r, const kr_step *st, const kr_kv_cache *kv, void *logits,
                        char *err, size_t err_len) {
  kr_step step = *st;
  kr_step_index ix;
  int rc = 0;
  if (r > 0) {
    kite_ctx *ctx = tp->ctxs[r];
    kv = &tp->kvs[r];
    logits = NULL;
    if (st->index_bytes > tp->index_cap[r]) {
      kr_dev_free(ctx, &tp->index[r]);
      tp->index_cap[r] = 0;
      rc = kr_dev_alloc(ctx, st->index_bytes, &tp->index[r], err, err_len);
      if (!rc) tp->index_cap[r] = st->index_bytes;
    }
    if (!rc && kite_memcpy(ctx, tp->index[r], st->host->ids, st->index_bytes,
                           KITE_COPY_HOST_TO_DEVICE) != KITE_OK)
      rc = kr_errf(err, err_len, "%s", kite_last_error());
    rebase(st->host, tp->index[r], &ix);
    step.dev = &ix;
  }
  if (!rc) rc = tp->arch->forward(tp->nets[r], &step, kv, logits, err, err_len);
  if (rc) {
    kite_comm_destroy(tp->comms[r]);
    tp->comms[r] = NULL;
  }
  return rc;
}

typedef struct rank_arg {
  kr_tp *tp;
  int rank;
} rank_arg;

static void *rank_main(void *p) {
  rank_arg *a = p;
  kr_tp *tp = a->tp;
  const int r = a->rank;
  free(a);
  uint64_t seen = 0;
  pthread_mutex_lock(&tp->mu);
  for (;;) {
    while (!tp->quit && tp->gen == seen) pthread_cond_wait(&tp->go, &tp->mu);
    if (tp->quit) break;
    seen = tp->gen;
    const kr_step *st = tp->step;
    pthread_mutex_unlock(&tp->mu);
    const int rc = rank_forward(tp, r, st, NULL, NULL, tp->msg[r], sizeof tp->msg[r]);
    pthread_mutex_lock(&tp->mu);
    tp->rc[r] = rc;
    if (--tp->pending == 0) pthread_cond_signal(&tp->done);
  }
  pthread_mutex_unlock(&tp->mu);
  return NULL;
}

static int tp_forward(void *p, const kr_step *st, const kr_kv_cache *kv, void *logits, char *err,
                      size_t err_len) {
  kr_tp *tp = p;
  if (tp->broken) return kr_errf(err, err_len, "tp: a rank failed in an earlier step");
  pthread_mutex_lock(&tp->mu);
  tp->step = st;
  tp->pending = tp->nranks - 1;
  tp->gen++;
  pthread_cond_broadcast(&tp->go);
  pthread_mutex_unlock(&tp->mu);
  tp->rc[0] = rank_forward(tp, 0, st, kv, logits, tp->msg[0], sizeof tp->msg[0]);
  pthread_mutex_lock(&tp->mu);
  while (tp->pending > 0) pthread_cond_wait(&tp->done, &tp->mu);
  pthread_mutex_unlock(&tp->mu);
  for (int r = 0; r < tp->nranks; r++)
    if (tp->rc[r]) {
      tp->broken = 1;
      return kr_errf(err, err_len, "tp rank %d: %s", r, tp->msg[r]);
    }
  return 0;
}

static void tp_free(void *p) {
  kr_tp *tp = p;
  if (!tp) return;
  pthread_mutex_lock(&tp->mu);
  tp->quit = 1;
  pthread_cond_broadcast(&tp->go);
  pthread_mutex_unlock(&tp->mu);
  for (int r = 1; r <= tp->n_started; r++) pthread_join(tp->threads[r], NULL);
  for (int r = 0; tp->nets && r < tp->nranks; r++) {
    if (tp->nets[r]) tp->arch->free(tp->nets[r]);
    if (r > 0 && tp->kvs) kr_kv_free(&tp->kvs[r]);
    if (r > 0 && tp->index) kr_dev_free(tp->ctxs[r], &tp->index[r]);
    if (tp->comms) kite_comm_destroy(tp->comms[r]);
  }
  pthread_cond_destroy(&tp->go);
  pthread_cond_destroy(&tp->done);
  pthread_mutex_destroy(&tp->mu);
  free(tp->ctxs);
  free(tp->comms);
  free(tp->nets);
  free(tp->wbytes);
  free(tp->kvs);
  free(tp->index);
  free(tp->index_cap);
  free(tp->threads);
  free(tp->rc);
  free(tp->msg);
  free(tp);
}

/* Each rank's shard and the KV caches of ranks > 0. */
static int load_ranks(kr_tp *tp, const kr_gguf *g, const kr_config *c, const kr_net_params *p,
                      const kr_tp_kv_params *kvp, kr_net_info *info, char *err, size_t err_len) {
  const int N = tp->nranks;
  for (int r = 0; r < N; r++) {
    kr_net_params np = *p;
    np.rank = r;
    np.nranks = N;
    np.comm = tp->comms[r];
    kr_net_info ri;
    if (!(tp->nets[r] = tp->arch->load(tp->ctxs[r], g, c, &np, &ri, err, err_len))) return -1;
    tp->wbytes[r] = ri.weight_bytes;
    if (r == 0)
      *info = ri;
    else if (kr_kv_init(&tp->kvs[r], tp->ctxs[r], c->n_layer, c->n_head_kv / N, c->head_dim, ri.act,
                        kvp->block_size, kvp->num_blocks, kvp->ctx_len, err, err_len))
      return -1;
  }
  return 0;
}

kr_tp *kr_tp_load(kite_ctx *const *ctxs, int nranks, const kr_arch *arch, const kr_gguf *g,
                  const kr_config *c, const kr_net_params *p, const kr_tp_kv_params *kvp,
                  kr_net_info *info, char *err, size_t err_len) {
  if (kr_tp_check(c, nranks, err, err_len)) return NULL;
  kr_tp *tp = calloc(1, sizeof *tp);
  if (!tp) {
    kr_errf(err, err_len, "model: out of memory");
    return NULL;
  }
  const size_t N = (size_t)nranks;
  tp->nranks = nranks;
  tp->arch = arch;
  pthread_mutex_init(&tp->mu, NULL);
  pthread_cond_init(&tp->go, NULL);
  pthread_cond_init(&tp->done, NULL);
  tp->ctxs = calloc(N, sizeof *tp->ctxs);
  tp->comms = calloc(N, sizeof *tp->comms);
  tp->nets = calloc(N, sizeof *tp->nets);
  tp->wbytes = calloc(N, sizeof *tp->wbytes);
  tp->kvs = calloc(N, sizeof *tp->kvs);
  tp->index = calloc(N, sizeof *tp->index);
  tp->index_cap = calloc(N, sizeof *tp->index_cap);
  tp->threads = calloc(N, sizeof *tp->threads);
  tp->rc = calloc(N, sizeof *tp->rc);
  tp->msg = calloc(N, sizeof *tp->msg);
  if (!tp->ctxs || !tp->comms || !tp->nets || !tp->wbytes || !tp->kvs || !tp->index ||
      !tp->index_cap || !tp->threads || !tp->rc || !tp->msg) {
    kr_errf(err, err_len, "model: out of memory");
    goto fail;
  }
  memcpy(tp->ctxs, ctxs, N * sizeof *ctxs);
  if (kite_comm_create_all(ctxs, nranks, tp->comms) != KITE_OK) {
    kr_errf(err, err_len, "tp: %s", kite_last_error());
    goto fail;
  }
  if (load_ranks(tp, g, c, p, kvp, info, err, err_len)) goto fail;
  for (int r = 1; r < nranks; r++) {
    rank_arg *a = malloc(sizeof *a);
    if (!a) {
      kr_errf(err, err_len, "model: out of memory");
      goto fail;
    }
    *a = (rank_arg){tp, r};
    if (pthread_create(&tp->threads[r], NULL, rank_main, a)) {
      free(a);
      kr_errf(err, err_len, "tp: cannot start the thread of rank %d", r);
      goto fail;
    }
    tp->n_started = r;
  }
  return tp;
fail:
  tp_free(tp);
  return NULL;
}

void kr_tp_rank_bytes(const kr_tp *tp, int r, size_t *weights, size_t *kv) {
  *weights = tp->wbytes[r];
  *kv = r == 0 ? 0 : kr_kv_bytes(&tp->kvs[r]);
}

const kr_arch kr_arch_tp = {
    .names = NULL,
    .read_config = NULL,
    .load = NULL,
    .forward = tp_forward,
    .free = tp_free,
};
