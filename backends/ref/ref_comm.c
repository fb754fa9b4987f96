/*
 * Communicators of the ref backend: the ranks of a group are threads of this process that meet
 * in a rendezvous kept in memory, keyed by the group id. Each rank's collective posts its args
 * and waits; the last rank to arrive checks that every rank called the same op on the same dtype
 * and count, computes the result for every rank (sums in float64, rounded once) and wakes the
 * others with the round's status. A rank that waits longer than the group's timeout breaks the
 * group (kite.h states the rules).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ref.h"

typedef struct ref_group {
  kite_comm_id id;
  int nranks;
  int members;           /* ranks created and not destroyed */
  unsigned char *joined; /* [nranks]: rank created */
  const void **posted;   /* [nranks]: this round's args of each rank that arrived */
  int arrived;
  uint64_t completed; /* rounds completed */
  kite_status status; /* of the last completed round */
  char msg[512];
  bool broken;
  char why[256];
  double timeout_s;
  pthread_cond_t cv;
  struct ref_group *next;
} ref_group;

typedef struct ref_comm {
  ref_group *g;
  int rank;
  uint64_t round; /* collectives this rank has started */
} ref_comm;

/* One lock for every group: ranks of one group serialize on it anyway, and ref is not fast. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static ref_group *g_groups;

static double env_timeout(void) {
  const char *e = getenv("KITE_COMM_TIMEOUT");
  char *end;
  double t = e ? strtod(e, &end) : 0.0;
  return e && end != e && t > 0 ? t : 300.0;
}

kite_status ref_comm_unique_id(const kite_backend *b, kite_ctx *ctx, kite_comm_id *id) {
  (void)b;
  (void)ctx;
  /* unique within the process, which is all a group of threads needs */
  static atomic_uint_fast64_t counter;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t words[4] = {0x6b6974652d726566ull, (uint64_t)atomic_fetch_add(&counter, 1) + 1,
                       (uint64_t)getpid(), (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec};
  memcpy(id->bytes, words, sizeof words);
  return KITE_OK;
}

static ref_group *find_group(const kite_comm_id *id) {
  for (ref_group *g = g_groups; g; g = g->next)
    if (!memcmp(g->id.bytes, id->bytes, sizeof id->bytes)) return g;
  return NULL;
}

static void group_free(ref_group *g) {
  for (ref_group **p = &g_groups; *p; p = &(*p)->next)
    if (*p == g) {
      *p = g->next;
      break;
    }
  pthread_cond_destroy(&g->cv);
  free(g->joined);
  free(g->posted);
  free(g);
}

kite_status ref_comm_create(const kite_backend *b, kite_ctx *ctx, const kite_comm_id *id,
                            int nranks, int rank, void **out) {
  (void)b;
  (void)ctx;
  const char *fn = "kite_comm_create";
  ref_comm *c = calloc(1, sizeof *c);
  if (!c) return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "%s: ref: out of memory", fn);
  pthread_mutex_lock(&g_mu);
  kite_status s = KITE_OK;
  ref_group *g = find_group(id);
  if (!g) {
    g = calloc(1, sizeof *g);
    if (g) {
      g->joined = calloc((size_t)nranks, 1);
      g->posted = calloc((size_t)nranks, sizeof *g->posted);
    }
    if (!g || !g->joined || !g->posted || pthread_cond_init(&g->cv, NULL)) {
      if (g) {
        free(g->joined);
        free(g->posted);
      }
      free(g);
      s = kite_set_error(KITE_ERR_OUT_OF_MEMORY, "%s: ref: out of memory", fn);
      goto out;
    }
    g->id = *id;
    g->nranks = nranks;
    g->timeout_s = env_timeout();
    g->next = g_groups;
    g_groups = g;
  } else if (g->nranks != nranks) {
    s = kite_set_error(KITE_ERR_INVALID_ARG,
                       "%s: ref: this id's group has %d ranks, the call says nranks %d", fn,
                       g->nranks, nranks);
    goto out;
  } else if (g->joined[rank]) {
    s = kite_set_error(KITE_ERR_INVALID_ARG, "%s: ref: rank %d of this id exists already", fn,
                       rank);
    goto out;
  } else if (g->broken) {
    s = kite_set_error(KITE_ERR_INVALID_ARG, "%s: ref: this id's group is broken (%s)", fn, g->why);
    goto out;
  }
  g->joined[rank] = 1;
  g->members++;
  c->g = g;
  c->rank = rank;
  *out = c;
out:
  pthread_mutex_unlock(&g_mu);
  if (s != KITE_OK) free(c);
  return s;
}

static void break_group(ref_group *g, const char *why) {
  if (!g->broken) {
    g->broken = true;
    snprintf(g->why, sizeof g->why, "%s", why);
  }
  pthread_cond_broadcast(&g->cv);
}

void ref_comm_destroy(const kite_backend *b, void *comm) {
  (void)b;
  ref_comm *c = comm;
  if (!c) return;
  pthread_mutex_lock(&g_mu);
  ref_group *g = c->g;
  char why[96];
  snprintf(why, sizeof why, "rank %d destroyed its comm", c->rank);
  break_group(g, why); /* no rank may wait for this one any more */
  g->joined[c->rank] = 0;
  if (--g->members == 0) group_free(g);
  pthread_mutex_unlock(&g_mu);
  free(c);
}

/* ---- the computation of one round, by the last rank to arrive ----------------------------- */

static const char *op_str(kite_op op) {
  const char *s = kite_op_name(op);
  return s ? s : "?";
}

/* Every rank called the same op on the same dtype and sizes; else the round's message. */
static bool agree(ref_group *g) {
  const kite_args_head *h0 = kite_args_head_of(g->posted[0]);
  for (int r = 1; r < g->nranks; r++) {
    const kite_args_head *h = kite_args_head_of(g->posted[r]);
    bool same = h->op == h0->op && h->dtype == h0->dtype;
    int64_t n0 = 0, n = 0;
    if (same && h0->op == KITE_OP_ALL_REDUCE_ADD_RMS_NORM) {
      const kite_norm_args *a0 = &((const kite_comm_norm_args *)g->posted[0])->norm;
      const kite_norm_args *a = &((const kite_comm_norm_args *)g->posted[r])->norm;
      same = a->rows == a0->rows && a->cols == a0->cols;
      n0 = a0->rows * a0->cols;
      n = a->rows * a->cols;
    } else if (same) {
      n0 = ((const kite_comm_args *)g->posted[0])->count;
      n = ((const kite_comm_args *)g->posted[r])->count;
      same = n == n0;
    }
    if (!same) {
      g->status = KITE_ERR_INVALID_ARG;
      snprintf(g->msg, sizeof g->msg,
               "%s: ranks disagree: rank 0 called %s on %s x %lld, rank %d %s on %s x %lld",
               op_str(h0->op), op_str(h0->op), ref_dtype_str(h0->dtype), (long long)n0, r,
               op_str(h->op), ref_dtype_str(h->dtype), (long long)n);
      return false;
    }
  }
  return true;
}

static kite_status run_round(ref_group *g) {
  const int n = g->nranks;
  const kite_args_head *h0 = kite_args_head_of(g->posted[0]);
  const kite_dtype t = h0->dtype;
  const size_t es = kite_dtype_size(t);
  if (h0->op == KITE_OP_ALL_REDUCE_ADD_RMS_NORM) {
    const kite_norm_args *a0 = &((const kite_comm_norm_args *)g->posted[0])->norm;
    const int64_t rows = a0->rows, cols = a0->cols;
    if (rows == 0 || cols == 0) return KITE_OK;
    void *sum = malloc((size_t)(rows * cols) * es);
    if (!sum)
      return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "%s: ref: out of memory", op_str(h0->op));
    for (int64_t i = 0; i < rows * cols; i++) {
      double v = 0.0;
      for (int r = 0; r < n; r++)
        v += kite_load_f32(t, ((const kite_comm_norm_args *)g->posted[r])->norm.x, i);
      kite_store_f64(t, sum, i, v);
    }
    kite_status s = KITE_OK;
    for (int r = 0; r < n && s == KITE_OK; r++) {
      kite_norm_args na = ((const kite_comm_norm_args *)g->posted[r])->norm;
      na.op = KITE_OP_ADD_RMS_NORM;
      na.x = sum;
      na.x_stride = cols;
      s = ref_norm_run(NULL, NULL, &na);
    }
    free(sum);
    return s;
  }
  const kite_comm_args *const *A = (const kite_comm_args *const *)g->posted;
  const int64_t count = A[0]->count;
  switch (h0->op) {
  case KITE_OP_ALL_REDUCE:
  case KITE_OP_REDUCE_SCATTER:
    /* output (rank o, element i) sums element o * count + i of every x (reduce_scatter) or
     * element i (all_reduce); each x element is read before the one y element that may share
     * its address (in place) is written */
    for (int o = 0; o < n; o++) {
      if (h0->op == KITE_OP_ALL_REDUCE && o > 0) break;
      const int64_t base = h0->op == KITE_OP_REDUCE_SCATTER ? o * count : 0;
      for (int64_t i = 0; i < count; i++) {
        double v = 0.0;
        for (int r = 0; r < n; r++) v += kite_load_f32(t, A[r]->x, base + i);
        if (h0->op == KITE_OP_ALL_REDUCE)
          for (int r = 0; r < n; r++) kite_store_f64(t, A[r]->y, i, v);
        else
          kite_store_f64(t, A[o]->y, i, v);
      }
    }
    return KITE_OK;
  case KITE_OP_ALL_GATHER:
    /* in place, rank r's x is its own y's slice r: memmove onto itself */
    for (int o = 0; o < n; o++)
      for (int r = 0; r < n; r++)
        if (count > 0)
          memmove((char *)A[o]->y + (size_t)(r * count) * es, A[r]->x, (size_t)count * es);
    return KITE_OK;
  default:
    return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: ref: not a collective", op_str(h0->op));
  }
}

/* Posts args for this rank's next round and waits for the round's result. */
static kite_status rendezvous(ref_comm *c, const void *args) {
  const kite_args_head *h = kite_args_head_of(args);
  ref_group *g = c->g;
  kite_status s;
  char msg[512];
  pthread_mutex_lock(&g_mu);
  if (g->broken) {
    s = KITE_ERR_DEVICE;
    snprintf(msg, sizeof msg, "%s: ref: rank %d: the group is broken (%s); destroy and recreate it",
             op_str(h->op), c->rank, g->why);
    goto out;
  }
  const uint64_t round = c->round++;
  g->posted[c->rank] = args;
  if (++g->arrived == g->nranks) {
    g->status = KITE_OK;
    g->msg[0] = '\0';
    if (agree(g)) {
      g->status = run_round(g);
      if (g->status != KITE_OK) snprintf(g->msg, sizeof g->msg, "%s", kite_last_error());
    }
    g->arrived = 0;
    memset(g->posted, 0, (size_t)g->nranks * sizeof *g->posted);
    g->completed = round + 1;
    pthread_cond_broadcast(&g->cv);
  } else {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    const double whole = (double)(time_t)g->timeout_s;
    deadline.tv_sec += (time_t)g->timeout_s;
    deadline.tv_nsec += (long)((g->timeout_s - whole) * 1e9);
    if (deadline.tv_nsec >= 1000000000L) {
      deadline.tv_sec++;
      deadline.tv_nsec -= 1000000000L;
    }
    while (g->completed <= round && !g->broken)
      if (pthread_cond_timedwait(&g->cv, &g_mu, &deadline) == ETIMEDOUT && g->completed <= round) {
        char why[200];
        int len = snprintf(why, sizeof why, "rank %d waited %g s in collective %llu for rank",
                           c->rank, g->timeout_s, (unsigned long long)round);
        for (int r = 0; r < g->nranks && len < (int)sizeof why - 8; r++)
          if (!g->posted[r]) len += snprintf(why + len, sizeof why - (size_t)len, " %d", r);
        break_group(g, why);
      }
    if (g->completed <= round) { /* broken before the round completed */
      g->posted[c->rank] = NULL;
      g->arrived--;
      s = KITE_ERR_DEVICE;
      snprintf(msg, sizeof msg, "%s: ref: rank %d: %s", op_str(h->op), c->rank, g->why);
      goto out;
    }
  }
  s = g->status;
  snprintf(msg, sizeof msg, "%s", g->msg);
out:
  pthread_mutex_unlock(&g_mu);
  return s == KITE_OK ? s : kite_set_error(s, "%s", msg);
}

/* The comm of either args struct. */
static const kite_comm_ref *comm_of(const void *args) {
  if (kite_args_head_of(args)->op == KITE_OP_ALL_REDUCE_ADD_RMS_NORM)
    return &((const kite_comm_norm_args *)args)->comm;
  return &((const kite_comm_args *)args)->comm;
}

bool ref_comm_supports(const kite_kernel *k, const void *args, const char **why) {
  (void)k;
  if (comm_of(args)->backend != ref_backend()) {
    *why = "the comm belongs to another backend";
    return false;
  }
  if (!ref_is_float(kite_args_head_of(args)->dtype)) {
    *why = "dtype must be f32, f16 or bf16";
    return false;
  }
  return true;
}

kite_status ref_comm_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  (void)k;
  (void)ctx;
  return rendezvous(comm_of(args)->handle, args);
}
