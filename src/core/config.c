/*
 * Kernel-selection config: the grammar of kite_config_set / KITE_KERNELS (kite.h) parsed into
 * rules, the one function that applies a config from either source, and why a kernel cannot run
 * here (its device, features, or the config).
 *
 * Layering (registry.c's comment): above registry.c, whose lock and generation it uses; below
 * init.c, which holds the public kite_config_* entry points. It calls nothing above itself.
 */
#include <stdio.h>
#include <string.h>

#include "core/internal.h"
#include "core/registry.h"

/* Every op pinned at once (kite check's finite differences pin them all to ref) fits whatever the
 * op count, with as many exclusions: rules of "op=backend.kernel" stay under 48 characters. */
#define MAX_RULES (2 * KITE_OP_COUNT)
#define MAX_CONFIG (48 * MAX_RULES)

/* Under kite_registry_mutex. */
static kite_rule g_rules[MAX_RULES];
static int g_num_rules;
static char g_config[MAX_CONFIG];

/* The calling thread's config (kite_config_set_thread), applied after the global rules for this
 * thread's calls; t_id tells the dispatch caches which thread config they were built for. */
static _Thread_local kite_rule t_rules[MAX_RULES];
static _Thread_local int t_num_rules;
static _Thread_local bool t_reset; /* it holds "reset": the global rules do not apply */
static _Thread_local char t_config[MAX_CONFIG];
static _Thread_local uint64_t t_id; /* 0: none */
static _Atomic uint64_t g_thread_config_ids;
/* The latched KITE_KERNELS error: written once at init, then only the pointer changes (to ""
 * when a later config replaces it), so a caller may keep what kite_config_error returned. */
static char g_env_error[1400];
static const char *_Atomic g_config_error = "";

/* "backend" or "backend.variant" into r. */
static bool parse_target(const char *s, size_t n, kite_rule *r) {
  const char *dot = memchr(s, '.', n);
  size_t bn = dot ? (size_t)(dot - s) : n;
  if (!kite_name_ok(s, bn)) return false;
  memcpy(r->backend, s, bn);
  r->backend[bn] = '\0';
  r->variant[0] = '\0';
  if (dot) {
    size_t vn = n - bn - 1;
    if (!kite_name_ok(dot + 1, vn)) return false;
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
static int parse_item(const char *s, size_t n, kite_rule *r) {
  if (n == 5 && memcmp(s, "reset", 5) == 0) return 0;
  memset(r, 0, sizeof *r);
  r->op = -1;
  if (s[0] == '-' || s[0] == '+') {
    r->kind = s[0] == '-' ? KITE_RULE_DISABLE : KITE_RULE_ENABLE;
    s++, n--;
    const char *colon = memchr(s, ':', n);
    if (colon) {
      r->op = parse_op(s, (size_t)(colon - s));
      if (r->op < 0) {
        kite_set_error(KITE_ERR_CONFIG, "unknown op '%.*s'", (int)(colon - s), s);
        return -1;
      }
      n -= (size_t)(colon - s) + 1;
      s = colon + 1;
    }
  } else {
    const char *eq = memchr(s, '=', n);
    if (!eq) {
      kite_set_error(KITE_ERR_CONFIG, "not op=backend[.variant], -[op:]backend[.variant], "
                                      "+[op:]backend[.variant] or reset");
      return -1;
    }
    r->kind = KITE_RULE_PIN;
    r->op = parse_op(s, (size_t)(eq - s));
    if (r->op < 0) {
      kite_set_error(KITE_ERR_CONFIG, "unknown op '%.*s'", (int)(eq - s), s);
      return -1;
    }
    n -= (size_t)(eq - s) + 1;
    s = eq + 1;
  }
  if (!parse_target(s, n, r)) {
    kite_set_error(KITE_ERR_CONFIG,
                   "'%.*s' is not backend or backend.variant ([a-z0-9_], < 32 chars)", (int)n, s);
    return -1;
  }
  return 1;
}

/* Parses cfg into rules; on error the message (without a prefix) is set and CONFIG returned.
 * *reset (when not NULL) tells whether a "reset" item was met. */
static kite_status config_parse(const char *cfg, kite_rule *rules, int *num, bool *reset) {
  *num = 0;
  if (reset) *reset = false;
  if (!cfg) return KITE_OK;
  size_t len = strlen(cfg);
  if (len >= MAX_CONFIG)
    return kite_set_error(KITE_ERR_CONFIG, "longer than %d characters", MAX_CONFIG - 1);
  const char *p = cfg;
  while (*p) {
    const char *end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    while (n && (*p == ' ' || *p == '\t')) p++, n--;
    while (n && (p[n - 1] == ' ' || p[n - 1] == '\t')) n--;
    if (n) {
      kite_rule r;
      int got = parse_item(p, n, &r);
      if (got < 0) {
        char why[512];
        snprintf(why, sizeof why, "%s", kite_last_error());
        return kite_set_error(KITE_ERR_CONFIG, "item '%.*s': %s", (int)(n < 200 ? n : 200), p, why);
      }
      if (got == 0) {
        *num = 0;
        if (reset) *reset = true;
      } else {
        if (*num == MAX_RULES)
          return kite_set_error(KITE_ERR_CONFIG, "more than %d items", MAX_RULES);
        rules[(*num)++] = r;
      }
    }
    if (!end) break;
    p = end + 1;
  }
  return KITE_OK;
}

kite_status kite_config_apply(const char *cfg, const char *origin) {
  kite_rule rules[MAX_RULES];
  int n;
  kite_status s = config_parse(cfg, rules, &n, NULL);
  if (s != KITE_OK) {
    char why[1024];
    snprintf(why, sizeof why, "%s", kite_last_error());
    if (!origin) return kite_set_error(s, "config: %s", why);
    pthread_mutex_lock(&kite_registry_mutex);
    g_num_rules = 0;
    snprintf(g_config, sizeof g_config, "%s", cfg);
    snprintf(g_env_error, sizeof g_env_error,
             "%s='%.200s' does not parse (%.900s); no op runs until it is fixed or kite_config_set "
             "replaces it",
             origin, cfg, why);
    atomic_store(&g_config_error, g_env_error);
    atomic_fetch_add(&kite_registry_generation, 1);
    pthread_mutex_unlock(&kite_registry_mutex);
    return kite_set_error(s, "%s", g_env_error);
  }
  pthread_mutex_lock(&kite_registry_mutex);
  memcpy(g_rules, rules, sizeof(kite_rule) * (size_t)n);
  g_num_rules = n;
  snprintf(g_config, sizeof g_config, "%s", cfg ? cfg : "");
  atomic_store(&g_config_error, "");
  atomic_fetch_add(&kite_registry_generation, 1);
  pthread_mutex_unlock(&kite_registry_mutex);
  return KITE_OK;
}

bool kite_rule_matches(const kite_rule *r, kite_op op, const kernel_rec *rec) {
  if (r->op >= 0 && r->op != (int)op) return false;
  if (strcmp(r->backend, rec->b->name) != 0) return false;
  return r->variant[0] == '\0' || strcmp(r->variant, rec->k->variant) == 0;
}

/* The rules in force on this thread, in order: the global ones (unless the thread's config
 * reset them), then the thread's. */
#define FOR_EACH_RULE(r, body)                                                                     \
  do {                                                                                             \
    for (int i_ = t_reset ? g_num_rules : 0; i_ < g_num_rules + t_num_rules; i_++) {               \
      const kite_rule *r = i_ < g_num_rules ? &g_rules[i_] : &t_rules[i_ - g_num_rules];           \
      body;                                                                                        \
    }                                                                                              \
  } while (0)

bool kite_config_pin_locked(kite_op op, kite_rule *out) {
  const kite_rule *pin = NULL;
  FOR_EACH_RULE(r, if (r->kind == KITE_RULE_PIN && r->op == (int)op) pin = r);
  if (pin) *out = *pin;
  return pin != NULL;
}

bool kite_config_disables_locked(const kernel_rec *rec) {
  bool off = false;
  FOR_EACH_RULE(r, if (r->kind != KITE_RULE_PIN && kite_rule_matches(r, rec->k->op, rec)) off =
                       r->kind == KITE_RULE_DISABLE);
  return off;
}

uint64_t kite_config_thread_id(void) {
  return t_id;
}

kite_status kite_config_set_thread(const char *config) {
  kite_clear_error();
  kite_init();
  kite_rule rules[MAX_RULES];
  int n;
  bool reset;
  kite_status s = config_parse(config, rules, &n, &reset);
  if (s != KITE_OK) {
    char why[1024];
    snprintf(why, sizeof why, "%s", kite_last_error());
    return kite_set_error(s, "config (thread): %s", why);
  }
  memcpy(t_rules, rules, sizeof(kite_rule) * (size_t)n);
  t_num_rules = n;
  t_reset = reset;
  snprintf(t_config, sizeof t_config, "%s", config ? config : "");
  t_id = t_config[0] ? atomic_fetch_add(&g_thread_config_ids, 1) + 1 : 0;
  return KITE_OK;
}

const char *kite_config_get_thread(void) {
  return t_config;
}

const char *kite_config_text_locked(void) {
  return g_config;
}

const char *kite_config_error_locked(void) {
  return atomic_load(&g_config_error);
}

const char *kite_why_not_here_locked(const kernel_rec *r, char *buf, size_t n, bool ignore_config) {
  const kite_backend *b = r->b;
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
  const char *missing = b->kernel_unavailable ? b->kernel_unavailable(b, r->k) : NULL;
  if (missing) {
    snprintf(buf, n, "%s", missing);
    return buf;
  }
  if (!ignore_config && kite_config_disables_locked(r)) {
    snprintf(buf, n, "disabled by config '%.100s'", kite_config_text_locked());
    return buf;
  }
  return NULL;
}
