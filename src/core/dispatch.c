/*
 * Kernel selection and dispatch: a per-ctx cache of the candidates for (op, dtype), rebuilt when
 * the registry or the config changed (kite_registry_generation), the kernel's status made a
 * kite_status with a message, and the explanation when nothing runs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "core/registry.h"

#define MAX_CANDIDATES 32
#define MAX_EXPLAINED 64

typedef struct candidate {
  const kite_kernel *k;
  const kite_backend *b;
} candidate;

typedef struct cache_entry {
  uint64_t generation;
  uint64_t thread_config; /* the kite_config_thread_id it was built under */
  int n;
  bool pinned;
  bool config_broken; /* KITE_KERNELS did not parse: every call fails until it is replaced */
  candidate cand[MAX_CANDIDATES]; /* eligible on this machine, best first */
} cache_entry;

struct kite_dispatch_cache {
  cache_entry e[KITE_OP_COUNT][KITE_DTYPE_COUNT];
};

void kite_dispatch_cache_free(struct kite_dispatch_cache *c) {
  free(c);
}

/* The kernel of this thread's last dispatch: a plain store per call, formatted only when asked
 * (kite_last_dispatch). */
static _Thread_local candidate g_last;

const char *kite_last_dispatch(void) {
  static _Thread_local char buf[96];
  if (!g_last.k) return "";
  snprintf(buf, sizeof buf, "%s.%s", g_last.b->name, g_last.k->variant);
  return buf;
}

/* Candidates for (op, device type): on this machine, allowed by config, honouring a pin; best
 * priority first, registration order among equals. */
static void build_candidates(cache_entry *e, kite_op op, DLDeviceType dev) {
  char buf[192];
  pthread_mutex_lock(&kite_registry_mutex);
  e->generation = atomic_load(&kite_registry_generation);
  e->thread_config = kite_config_thread_id();
  e->config_broken = kite_config_error_locked()[0] != '\0';
  kite_rule pin;
  e->pinned = kite_config_pin_locked(op, &pin);
  /* an exact pin names the kernel, so config disables do not apply to it */
  bool exact_pin = e->pinned && pin.variant[0];
  e->n = 0;
  size_t nk;
  const kernel_rec *recs = kite_registry_kernels_locked(&nk);
  for (size_t i = 0; i < nk && e->n < MAX_CANDIDATES && !e->config_broken; i++) {
    const kernel_rec *r = &recs[i];
    if (r->k->op != op || r->b->device_type != dev) continue;
    if (e->pinned && !kite_rule_matches(&pin, op, r)) continue;
    if (kite_why_not_here_locked(r, buf, sizeof buf, exact_pin)) continue;
    int j = e->n++;
    while (j > 0 && e->cand[j - 1].k->priority < r->k->priority) {
      e->cand[j] = e->cand[j - 1];
      j--;
    }
    e->cand[j] = (candidate){r->k, r->b};
  }
  pthread_mutex_unlock(&kite_registry_mutex);
}

/* Error path: explains why nothing ran. supports() is asked outside the lock, as in dispatch. */
static kite_status explain_failure(const kite_ctx *ctx, kite_op op, kite_dtype dtype,
                                   const void *args) {
  typedef struct seen {
    candidate c;
    char why[192];
    bool ask; /* runs here: the reason is supports()'s */
  } seen;
  seen *s = calloc(MAX_EXPLAINED, sizeof *s);
  if (!s) return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "%s: no kernel ran", kite_op_name(op));
  char msg[900];
  size_t len = 0;
  int n = 0;
  DLDeviceType dev = ctx->p.device.device_type;
  pthread_mutex_lock(&kite_registry_mutex);
  kite_rule pin;
  bool pinned = kite_config_pin_locked(op, &pin);
  if (pinned)
    len += (size_t)snprintf(
        msg + len, sizeof msg - len,
        "%s: pinned to %s%s%s by config, which cannot run %s on %s:", kite_op_name(op), pin.backend,
        pin.variant[0] ? "." : "", pin.variant, kite_dtype_name(dtype), kite_device_name(dev));
  else
    len += (size_t)snprintf(msg + len, sizeof msg - len,
                            "%s: no kernel runs %s on %s:", kite_op_name(op),
                            kite_dtype_name(dtype), kite_device_name(dev));
  size_t nk;
  const kernel_rec *recs = kite_registry_kernels_locked(&nk);
  for (size_t i = 0; i < nk && n < MAX_EXPLAINED; i++) {
    const kernel_rec *r = &recs[i];
    if (r->k->op != op) continue;
    if (pinned && !kite_rule_matches(&pin, op, r)) continue;
    seen *e = &s[n++];
    e->c = (candidate){r->k, r->b};
    if (r->b->device_type != dev)
      snprintf(e->why, sizeof e->why, "runs on %s, the ctx is on %s",
               kite_device_name(r->b->device_type), kite_device_name(dev));
    else
      e->ask = !kite_why_not_here_locked(r, e->why, sizeof e->why, false);
  }
  pthread_mutex_unlock(&kite_registry_mutex);
  for (int i = 0; i < n && len < sizeof msg - 1; i++) {
    const char *why = s[i].why;
    if (s[i].ask) {
      why = "not tried";
      const char *w = "rejected these arguments";
      if (s[i].c.k->supports && !s[i].c.k->supports(s[i].c.k, args, &w)) why = w;
    }
    len += (size_t)snprintf(msg + len, sizeof msg - len, "%s %s.%s: %s", i ? ";" : "",
                            s[i].c.b->name, s[i].c.k->variant, why);
  }
  free(s);
  if (!n) snprintf(msg + len, sizeof msg - len, " no such kernel is registered");
  return kite_set_error(KITE_ERR_UNSUPPORTED, "%s", msg);
}

/* Run-time failures of kernels (a status other than INVALID_ARG after supports() accepted the
 * call: a device error, a plugin's internal error), kept so that `kite list` can show them. A
 * failure is returned to the caller as it is: kite never retries another kernel, because a
 * kernel that failed may have written part of an in-place output (rope's q, a KV cache). */
static kite_status kernel_status(const char *backend, const kite_kernel *k, kite_status s);

#define MAX_FAILING 64
static struct failing {
  const kite_kernel *k;
  long count;
  char last[192];
} g_failing[MAX_FAILING];
static pthread_mutex_t g_failing_mutex = PTHREAD_MUTEX_INITIALIZER;

static void record_failure(const kite_kernel *k, const char *msg) {
  pthread_mutex_lock(&g_failing_mutex);
  for (int i = 0; i < MAX_FAILING; i++)
    if (g_failing[i].k == k || !g_failing[i].k) {
      g_failing[i].k = k;
      g_failing[i].count++;
      snprintf(g_failing[i].last, sizeof g_failing[i].last, "%s", msg);
      break;
    }
  pthread_mutex_unlock(&g_failing_mutex);
}

long kite_kernel_failures(size_t i, char *last, size_t n) {
  if (last && n) last[0] = '\0';
  size_t nk;
  pthread_mutex_lock(&kite_registry_mutex);
  const kernel_rec *recs = kite_registry_kernels_locked(&nk);
  const kite_kernel *k = i < nk ? recs[i].k : NULL;
  pthread_mutex_unlock(&kite_registry_mutex);
  long count = 0;
  pthread_mutex_lock(&g_failing_mutex);
  for (int j = 0; k && j < MAX_FAILING && g_failing[j].k; j++)
    if (g_failing[j].k == k) {
      count = g_failing[j].count;
      if (last && n) snprintf(last, n, "%s", g_failing[j].last);
    }
  pthread_mutex_unlock(&g_failing_mutex);
  return count;
}

kite_status kite_kernel_failed(const char *backend, const kite_kernel *k, kite_status s) {
  s = kernel_status(backend, k, s);
  if (s != KITE_ERR_INVALID_ARG) record_failure(k, kite_last_error());
  return s;
}

/* The kernel's status as a kite_status with a message. */
static kite_status kernel_status(const char *backend, const kite_kernel *k, kite_status s) {
  const char *op = kite_op_name(k->op);
  if ((int)s < (int)KITE_OK || (int)s > (int)KITE_ERR_INTERNAL) {
    char why[600];
    snprintf(why, sizeof why, "%s", kite_last_error());
    return kite_set_error(KITE_ERR_INTERNAL, "%s: kernel %s.%s returned %d, not a kite_status%s%s",
                          op, backend, k->variant, (int)s, why[0] ? ": " : "", why);
  }
  if (!kite_last_error()[0])
    kite_set_error(s, "%s: kernel %s.%s failed with %s and gave no message", op, backend,
                   k->variant, kite_status_name(s));
  return s;
}

kite_status kite_dispatch(kite_ctx *ctx, kite_op op, kite_dtype dtype, const void *args) {
  if (!ctx->cache) {
    ctx->cache = calloc(1, sizeof *ctx->cache);
    if (!ctx->cache)
      return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "%s: dispatch cache", kite_op_name(op));
  }
  cache_entry *e = &ctx->cache->e[op][dtype];
  if (e->generation != atomic_load_explicit(&kite_registry_generation, memory_order_acquire) ||
      e->thread_config != kite_config_thread_id())
    build_candidates(e, op, ctx->p.device.device_type);
  for (int i = 0; i < e->n; i++) {
    const kite_kernel *k = e->cand[i].k;
    const char *why = NULL;
    if (k->supports && !k->supports(k, args, &why)) continue;
    if (kite_log_dispatch)
      fprintf(stderr, "kite: %s %s on %s:%d -> %s.%s (%s, priority %d, %d candidate%s)\n",
              kite_op_name(op), kite_dtype_name(dtype), kite_device_name(ctx->p.device.device_type),
              ctx->p.device.device_id, e->cand[i].b->name, k->variant,
              e->pinned ? "pinned" : "best eligible", k->priority, e->n, e->n == 1 ? "" : "s");
    /* no clear of the error message here: every front-end cleared it on entry, so a message after
     * the run is the kernel's (kite_kernel_failed relies on that) */
    g_last = e->cand[i];
    kite_status s = k->run(k, ctx, args);
    return s == KITE_OK ? s : kite_kernel_failed(e->cand[i].b->name, k, s);
  }
  kite_status s;
  if (e->config_broken)
    s = kite_set_error(KITE_ERR_CONFIG, "%s: %s", kite_op_name(op), kite_config_error());
  else
    s = explain_failure(ctx, op, dtype, args);
  if (kite_log_dispatch)
    fprintf(stderr, "kite: %s %s -> none: %s\n", kite_op_name(op), kite_dtype_name(dtype),
            kite_last_error());
  return s;
}
