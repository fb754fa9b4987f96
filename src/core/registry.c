/*
 * Registry, kernel selection, config and the dispatch cache.
 *
 * Backends and kernels are appended to fixed arrays and never move or disappear, so a ctx's
 * cache may hold pointers to them and introspection may read them while a plugin registers.
 * Every change that can alter a choice (registration, config) bumps g_generation; a ctx's cache
 * entry rebuilds itself when its generation is stale. Dispatch on a warm cache takes no lock.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "core/registry.h"

#define MAX_BACKENDS 64
#define MAX_KERNELS 4096
#define MAX_CANDIDATES 32

typedef struct kernel_rec {
  const kite_kernel *k;
  const backend_rec *b;
  char why_not[160]; /* refreshed by kite_kernel_get under the lock */
} kernel_rec;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static backend_rec g_backends[MAX_BACKENDS];
static _Atomic size_t g_num_backends;
static kernel_rec g_kernels[MAX_KERNELS];
static _Atomic size_t g_num_kernels;
static _Atomic uint64_t g_generation = 1;
static int g_log_dispatch;

/* Set while a plugin's init runs so that its backend records where it came from. */
static _Thread_local const char *g_loading_path;

void kite_registry_set_loading_path(const char *path) {
  g_loading_path = path;
}

/* ---- config ----------------------------------------------------------------------------- */
typedef enum rule_kind { RULE_PIN, RULE_DISABLE, RULE_ENABLE } rule_kind;
typedef struct rule {
  rule_kind kind;
  int op; /* -1: every op */
  char backend[32];
  char variant[32]; /* "" = every variant of the backend */
} rule;

#define MAX_RULES 64
static rule g_rules[MAX_RULES];
static int g_num_rules;
static char g_config[1024];

static bool name_ok(const char *s, size_t n) {
  if (n == 0 || n >= 32) return false;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

/* "backend" or "backend.variant" into r. */
static bool parse_target(const char *s, size_t n, rule *r) {
  const char *dot = memchr(s, '.', n);
  size_t bn = dot ? (size_t)(dot - s) : n;
  if (!name_ok(s, bn)) return false;
  memcpy(r->backend, s, bn);
  r->backend[bn] = '\0';
  r->variant[0] = '\0';
  if (dot) {
    size_t vn = n - bn - 1;
    if (!name_ok(dot + 1, vn)) return false;
    memcpy(r->variant, dot + 1, vn);
    r->variant[vn] = '\0';
  }
  return true;
}

static int parse_op(const char *s, size_t n) {
  char name[64];
  if (n == 0 || n >= sizeof name) return -1;
  memcpy(name, s, n);
  name[n] = '\0';
  return kite_op_from_name(name);
}

/* Parses one item into r; 1 = rule, 0 = "reset", -1 = error (message set). */
static int parse_item(const char *s, size_t n, rule *r) {
  if (n == 5 && memcmp(s, "reset", 5) == 0) return 0;
  memset(r, 0, sizeof *r);
  r->op = -1;
  if (s[0] == '-' || s[0] == '+') {
    r->kind = s[0] == '-' ? RULE_DISABLE : RULE_ENABLE;
    s++, n--;
    const char *colon = memchr(s, ':', n);
    if (colon) {
      r->op = parse_op(s, (size_t)(colon - s));
      if (r->op < 0) {
        kite_set_error(KITE_ERR_CONFIG, "config: unknown op '%.*s'", (int)(colon - s), s);
        return -1;
      }
      n -= (size_t)(colon - s) + 1;
      s = colon + 1;
    }
  } else {
    const char *eq = memchr(s, '=', n);
    if (!eq) {
      kite_set_error(KITE_ERR_CONFIG,
                     "config: item '%.*s' is not op=backend[.variant], -[op:]backend[.variant], "
                     "+[op:]backend[.variant] or reset",
                     (int)n, s);
      return -1;
    }
    r->kind = RULE_PIN;
    r->op = parse_op(s, (size_t)(eq - s));
    if (r->op < 0) {
      kite_set_error(KITE_ERR_CONFIG, "config: unknown op '%.*s'", (int)(eq - s), s);
      return -1;
    }
    n -= (size_t)(eq - s) + 1;
    s = eq + 1;
  }
  if (!parse_target(s, n, r)) {
    kite_set_error(KITE_ERR_CONFIG,
                   "config: '%.*s' is not backend or backend.variant ([a-z0-9_], < 32 chars)",
                   (int)n, s);
    return -1;
  }
  return 1;
}

static kite_status config_parse(const char *cfg, rule *rules, int *num) {
  *num = 0;
  if (!cfg) return KITE_OK;
  size_t len = strlen(cfg);
  if (len >= sizeof g_config)
    return kite_set_error(KITE_ERR_CONFIG, "config: longer than %zu characters",
                          sizeof g_config - 1);
  const char *p = cfg;
  while (*p) {
    const char *end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    while (n && (*p == ' ' || *p == '\t')) p++, n--;
    while (n && (p[n - 1] == ' ' || p[n - 1] == '\t')) n--;
    if (n) {
      rule r;
      int got = parse_item(p, n, &r);
      if (got < 0) return KITE_ERR_CONFIG;
      if (got == 0) {
        *num = 0;
      } else {
        if (*num == MAX_RULES)
          return kite_set_error(KITE_ERR_CONFIG, "config: more than %d items", MAX_RULES);
        rules[(*num)++] = r;
      }
    }
    if (!end) break;
    p = end + 1;
  }
  return KITE_OK;
}

static bool rule_matches(const rule *r, kite_op op, const backend_rec *b, const kite_kernel *k) {
  if (r->op >= 0 && r->op != (int)op) return false;
  if (strcmp(r->backend, b->b->name) != 0) return false;
  return r->variant[0] == '\0' || strcmp(r->variant, k->variant) == 0;
}

/* The pin in force for op, or NULL. Caller holds g_lock. */
static const rule *pin_for(kite_op op) {
  const rule *pin = NULL;
  for (int i = 0; i < g_num_rules; i++)
    if (g_rules[i].kind == RULE_PIN && g_rules[i].op == (int)op) pin = &g_rules[i];
  return pin;
}

/* Whether config disables the kernel (the last matching enable/disable item wins). */
static bool disabled_by_config(const kernel_rec *r) {
  bool off = false;
  for (int i = 0; i < g_num_rules; i++)
    if (g_rules[i].kind != RULE_PIN && rule_matches(&g_rules[i], r->k->op, r->b, r->k))
      off = g_rules[i].kind == RULE_DISABLE;
  return off;
}

kite_status kite_config_set(const char *config) {
  kite_clear_error();
  kite_init();
  rule rules[MAX_RULES];
  int n;
  kite_status s = config_parse(config, rules, &n);
  if (s != KITE_OK) return s;
  pthread_mutex_lock(&g_lock);
  memcpy(g_rules, rules, sizeof(rule) * (size_t)n);
  g_num_rules = n;
  snprintf(g_config, sizeof g_config, "%s", config ? config : "");
  atomic_fetch_add(&g_generation, 1);
  pthread_mutex_unlock(&g_lock);
  return KITE_OK;
}

const char *kite_config_get(void) {
  kite_init();
  return g_config;
}

/* ---- registration ----------------------------------------------------------------------- */
static bool kernel_entry_ok(const kite_backend *b, const kite_kernel *k, size_t i) {
  if ((int)k->op < 0 || k->op >= KITE_OP_COUNT || !k->run || !k->variant) {
    kite_set_error(KITE_ERR_INVALID_ARG,
                   "backend '%s': kernel entry %zu has a bad op id, no run function or no variant",
                   b->name, i);
    return false;
  }
  if (!name_ok(k->variant, strlen(k->variant))) {
    kite_set_error(KITE_ERR_INVALID_ARG, "backend '%s': variant name '%s' is not [a-z0-9_]{1,31}",
                   b->name, k->variant);
    return false;
  }
  return true;
}

kite_status kite_backend_register(const kite_backend *b) {
  if (!b || !b->name || !name_ok(b->name, strlen(b->name)))
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "kite_backend_register: backend or its name is NULL or not [a-z0-9_]");
  if (b->num_kernels && !b->kernels)
    return kite_set_error(KITE_ERR_INVALID_ARG, "backend '%s': num_kernels %zu but kernels NULL",
                          b->name, b->num_kernels);
  for (size_t i = 0; i < b->num_kernels; i++)
    if (!kernel_entry_ok(b, &b->kernels[i], i)) return KITE_ERR_INVALID_ARG;

  pthread_mutex_lock(&g_lock);
  kite_status s = KITE_OK;
  size_t nb = atomic_load(&g_num_backends), nk = atomic_load(&g_num_kernels);
  for (size_t i = 0; i < nb; i++) {
    if (strcmp(g_backends[i].b->name, b->name) == 0) {
      s = kite_set_error(KITE_ERR_PLUGIN, "backend '%s' is already registered%s%s", b->name,
                         g_backends[i].path[0] ? " from " : "", g_backends[i].path);
      goto out;
    }
  }
  if (nb == MAX_BACKENDS || nk + b->num_kernels > MAX_KERNELS) {
    s = kite_set_error(KITE_ERR_PLUGIN, "backend '%s': registry full", b->name);
    goto out;
  }
  backend_rec *br = &g_backends[nb];
  br->b = b;
  snprintf(br->path, sizeof br->path, "%s", g_loading_path ? g_loading_path : "");
  for (size_t i = 0; i < b->num_kernels; i++) {
    g_kernels[nk + i].k = &b->kernels[i];
    g_kernels[nk + i].b = br;
  }
  atomic_store(&g_num_kernels, nk + b->num_kernels);
  atomic_store(&g_num_backends, nb + 1);
  atomic_fetch_add(&g_generation, 1);
out:
  pthread_mutex_unlock(&g_lock);
  return s;
}

const kite_backend *kite_memory_backend(DLDeviceType t) {
  size_t nb = atomic_load(&g_num_backends);
  for (size_t i = 0; i < nb; i++)
    if (g_backends[i].b->device_type == t && g_backends[i].b->alloc) return g_backends[i].b;
  return NULL;
}

/* Why kernel r cannot run on this machine at all (NULL when it can). */
static const char *why_not_here_ex(const kernel_rec *r, char *buf, size_t n, bool ignore_config) {
  const kite_backend *b = r->b->b;
  if (b->device_count && b->device_count(b) <= 0) {
    snprintf(buf, n, "no %s device present", kite_device_name(b->device_type));
    return buf;
  }
  uint64_t have = b->features_present ? b->features_present(b) : ~(uint64_t)0;
  if (r->k->features & ~have) {
    snprintf(buf, n, "needs CPU/device features %s not present here",
             r->k->features_str ? r->k->features_str : "(unnamed)");
    return buf;
  }
  if (!ignore_config && disabled_by_config(r)) {
    snprintf(buf, n, "disabled by config '%.100s'", g_config);
    return buf;
  }
  return NULL;
}

static const char *why_not_here(const kernel_rec *r, char *buf, size_t n) {
  return why_not_here_ex(r, buf, n, false);
}

/* ---- introspection ---------------------------------------------------------------------- */
size_t kite_kernel_count(void) {
  kite_init();
  return atomic_load(&g_num_kernels);
}

const kite_kernel *kite_kernel_entry(size_t i) {
  kite_init();
  return i < atomic_load(&g_num_kernels) ? g_kernels[i].k : NULL;
}

kite_status kite_kernel_get(size_t i, kite_kernel_info *out) {
  kite_clear_error();
  kite_init();
  if (!out) return kite_set_error(KITE_ERR_INVALID_ARG, "kite_kernel_get: out is NULL");
  size_t n = atomic_load(&g_num_kernels);
  if (i >= n)
    return kite_set_error(KITE_ERR_INVALID_ARG, "kite_kernel_get: index %zu >= %zu kernels", i, n);
  kernel_rec *r = &g_kernels[i];
  pthread_mutex_lock(&g_lock);
  const char *why = why_not_here(r, r->why_not, sizeof r->why_not);
  if (!why) r->why_not[0] = '\0';
  pthread_mutex_unlock(&g_lock);
  out->op = r->k->op;
  out->op_name = kite_op_name(r->k->op);
  out->backend = r->b->b->name;
  out->variant = r->k->variant;
  out->device_type = r->b->b->device_type;
  out->priority = r->k->priority;
  out->features = r->k->features_str ? r->k->features_str : "";
  out->description = r->k->description ? r->k->description : "";
  out->runs_here = why == NULL;
  out->why_not = r->why_not;
  return KITE_OK;
}

size_t kite_backend_count_unlocked(void) {
  return atomic_load(&g_num_backends);
}

size_t kite_backend_count(void) {
  kite_init();
  return atomic_load(&g_num_backends);
}

kite_status kite_backend_get(size_t i, kite_backend_info *out) {
  kite_clear_error();
  kite_init();
  if (!out) return kite_set_error(KITE_ERR_INVALID_ARG, "kite_backend_get: out is NULL");
  size_t n = atomic_load(&g_num_backends);
  if (i >= n)
    return kite_set_error(KITE_ERR_INVALID_ARG, "kite_backend_get: index %zu >= %zu backends", i,
                          n);
  const kite_backend *b = g_backends[i].b;
  out->name = b->name;
  out->device_type = b->device_type;
  out->device_count = b->device_count ? b->device_count(b) : 1;
  out->num_kernels = b->num_kernels;
  out->path = g_backends[i].path;
  return KITE_OK;
}

/* ---- selection and dispatch --------------------------------------------------------------- */
typedef struct cache_entry {
  uint64_t generation;
  int n;
  bool pinned;
  const kernel_rec *cand[MAX_CANDIDATES]; /* eligible on this machine, best first */
} cache_entry;

struct kite_dispatch_cache {
  cache_entry e[KITE_OP_COUNT][KITE_DTYPE_COUNT];
};

void kite_dispatch_cache_free(struct kite_dispatch_cache *c) {
  free(c);
}

/* The kernel of this thread's last dispatch; a plain store per call, formatted only when asked. */
static _Thread_local const kernel_rec *g_last_kernel;

const char *kite_last_dispatch(void) {
  static _Thread_local char buf[96];
  const kernel_rec *r = g_last_kernel;
  if (!r) return "";
  snprintf(buf, sizeof buf, "%s.%s", r->b->b->name, r->k->variant);
  return buf;
}

/* Candidates for (op, device type): on this machine, allowed by config, honouring a pin; best
 * priority first, registration order among equals. */
static void build_candidates(cache_entry *e, kite_op op, DLDeviceType dev) {
  char buf[160];
  pthread_mutex_lock(&g_lock);
  e->generation = atomic_load(&g_generation);
  const rule *pin = pin_for(op);
  e->pinned = pin != NULL;
  e->n = 0;
  size_t nk = atomic_load(&g_num_kernels);
  for (size_t i = 0; i < nk && e->n < MAX_CANDIDATES; i++) {
    const kernel_rec *r = &g_kernels[i];
    if (r->k->op != op || r->b->b->device_type != dev) continue;
    if (pin && !rule_matches(pin, op, r->b, r->k)) continue;
    /* an exact pin names the kernel, so config disables do not apply to it */
    bool exact_pin = pin && pin->variant[0];
    if (why_not_here_ex(r, buf, sizeof buf, exact_pin)) continue;
    int j = e->n++;
    while (j > 0 && e->cand[j - 1]->k->priority < r->k->priority) {
      e->cand[j] = e->cand[j - 1];
      j--;
    }
    e->cand[j] = r;
  }
  pthread_mutex_unlock(&g_lock);
}

/* Error path: explains why nothing ran. */
static kite_status explain_failure(const kite_ctx *ctx, kite_op op, kite_dtype dtype,
                                   const void *args, const cache_entry *e) {
  char msg[900];
  size_t len = 0;
  DLDeviceType dev = ctx->p.device.device_type;
  pthread_mutex_lock(&g_lock);
  const rule *pin = pin_for(op);
  if (pin)
    len += (size_t)snprintf(msg + len, sizeof msg - len,
                            "%s: pinned to %s%s%s by config, which cannot run %s on %s:",
                            kite_op_name(op), pin->backend, pin->variant[0] ? "." : "",
                            pin->variant, kite_dtype_name(dtype), kite_device_name(dev));
  else
    len += (size_t)snprintf(msg + len, sizeof msg - len,
                            "%s: no kernel runs %s on %s:", kite_op_name(op),
                            kite_dtype_name(dtype), kite_device_name(dev));
  int shown = 0;
  size_t nk = atomic_load(&g_num_kernels);
  for (size_t i = 0; i < nk && len < sizeof msg - 1; i++) {
    const kernel_rec *r = &g_kernels[i];
    if (r->k->op != op) continue;
    if (pin && !rule_matches(pin, op, r->b, r->k)) continue;
    char buf[160];
    const char *why = NULL;
    if (r->b->b->device_type != dev) {
      snprintf(buf, sizeof buf, "runs on %s, the ctx is on %s",
               kite_device_name(r->b->b->device_type), kite_device_name(dev));
      why = buf;
    } else {
      why = why_not_here(r, buf, sizeof buf);
      if (!why && r->k->supports) {
        const char *w = "rejected these arguments";
        if (!r->k->supports(r->k, args, &w)) why = w;
      }
    }
    len += (size_t)snprintf(msg + len, sizeof msg - len, "%s %s.%s: %s", shown ? ";" : "",
                            r->b->b->name, r->k->variant, why ? why : "not tried");
    shown++;
  }
  pthread_mutex_unlock(&g_lock);
  if (!shown) snprintf(msg + len, sizeof msg - len, " no such kernel is registered");
  (void)e;
  return kite_set_error(KITE_ERR_UNSUPPORTED, "%s", msg);
}

kite_status kite_dispatch(kite_ctx *ctx, kite_op op, kite_dtype dtype, const void *args) {
  if (!ctx->cache) {
    ctx->cache = calloc(1, sizeof *ctx->cache);
    if (!ctx->cache)
      return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "%s: dispatch cache", kite_op_name(op));
  }
  cache_entry *e = &ctx->cache->e[op][dtype];
  if (e->generation != atomic_load_explicit(&g_generation, memory_order_acquire))
    build_candidates(e, op, ctx->p.device.device_type);
  for (int i = 0; i < e->n; i++) {
    const kite_kernel *k = e->cand[i]->k;
    const char *why = NULL;
    if (k->supports && !k->supports(k, args, &why)) continue;
    if (g_log_dispatch)
      fprintf(stderr, "kite: %s %s on %s:%d -> %s.%s (%s, priority %d, %d candidate%s)\n",
              kite_op_name(op), kite_dtype_name(dtype), kite_device_name(ctx->p.device.device_type),
              ctx->p.device.device_id, e->cand[i]->b->b->name, k->variant,
              e->pinned ? "pinned" : "best eligible", k->priority, e->n, e->n == 1 ? "" : "s");
    g_last_kernel = e->cand[i];
    return k->run(k, ctx, args);
  }
  kite_status s = explain_failure(ctx, op, dtype, args, e);
  if (g_log_dispatch)
    fprintf(stderr, "kite: %s %s -> none: %s\n", kite_op_name(op), kite_dtype_name(dtype),
            kite_last_error());
  return s;
}

/* ---- init ------------------------------------------------------------------------------- */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void do_init(void) {
  for (const kite_builtin_backend *bb = kite_builtin_backends; bb->name; bb++) {
    kite_status s = bb->init();
    if (s != KITE_OK) kite_plugin_record_failure(bb->name, kite_last_error());
  }
  const char *log = getenv("KITE_LOG");
  g_log_dispatch = log && strstr(log, "dispatch") != NULL;
  const char *cfg = getenv("KITE_KERNELS");
  if (cfg && *cfg) {
    rule rules[MAX_RULES];
    int n;
    if (config_parse(cfg, rules, &n) == KITE_OK) {
      memcpy(g_rules, rules, sizeof(rule) * (size_t)n);
      g_num_rules = n;
      snprintf(g_config, sizeof g_config, "%s", cfg);
    } else {
      kite_plugin_record_failure("KITE_KERNELS", kite_last_error());
    }
  }
  kite_plugins_autoload();
  kite_clear_error();
}

void kite_init(void) {
  pthread_once(&g_once, do_init);
}
