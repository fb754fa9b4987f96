/* Shared by the registry (registry.c), the config (config.c), the plugin loader (plugin.c),
 * library init (init.c) and dispatch (dispatch.c); registry.c's comment gives their layering.
 * Not installed. */
#ifndef KITE_CORE_REGISTRY_H
#define KITE_CORE_REGISTRY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "kite/backend.h"

/* One registered kernel, by value: the entry, its backend and the plugin file it came from ("" when
 * built in). The strings and structs pointed to live as long as the process. */
typedef struct kernel_rec {
  const kite_kernel *k;
  const kite_backend *b;
  const char *path;
} kernel_rec;

/* Guards the registry arrays and the config. Never held while backend or plugin code runs
 * (supports, run, init), so that code may call back into kite. */
extern pthread_mutex_t kite_registry_mutex;
/* Bumped by every change that can alter a choice (registration, rollback, config). */
extern _Atomic uint64_t kite_registry_generation;

/* KITE_LOG=dispatch: print every choice to stderr. Set once at init. */
extern int kite_log_dispatch;

/* One registered backend: the plugin file it came from ("" when built in) and the plugin load
 * that registered it (0: none). */
typedef struct backend_rec {
  const kite_backend *b;
  const char *path; /* interned */
  unsigned load_id;
} backend_rec;

/* ---- the tables (registry.c) ----------------------------------------------------------------- */
/* The registered kernels (caller holds kite_registry_mutex); *n gets their count. */
const kernel_rec *kite_registry_kernels_locked(size_t *n);
/* Their count, without the lock (it only grows but for a rollback). */
size_t kite_registry_kernel_count(void);
/* The registered backends (caller holds kite_registry_mutex); *n gets their count. */
const backend_rec *kite_registry_backends_locked(size_t *n);

/* [a-z0-9_]{1,31}: backend, variant and rule names. */
bool kite_name_ok(const char *s, size_t n);

/* Load tracking, for plugin.c. */
/* Marks the calling thread as running the init of the plugin at path (NULL: done); backends it
 * registers meanwhile record the path and can be rolled back together. */
void kite_registry_begin_load(const char *path);
void kite_registry_end_load(void);
/* The plugin whose init the calling thread is running, or NULL. */
const char *kite_registry_loading_path(void);
/* Removes every backend (and its kernels) registered since kite_registry_begin_load on this thread;
 * returns how many. */
size_t kite_registry_rollback_load(void);

/* ---- plugin loading (plugin.c) --------------------------------------------------------------- */
/* kite_backend_load without the library init: loads the plugin at path (a no-op when loaded
 * already); PLUGIN when it cannot, or when called from a plugin's init. */
kite_status kite_plugin_load(const char *path);
void kite_plugins_autoload(void);
void kite_plugin_record_failure(const char *path, const char *reason);
/* The recorded failures: their count, and the i-th (false when i is out of range). */
size_t kite_plugin_failures(void);
bool kite_plugin_failure(size_t i, const char **path, const char **reason);

/* ---- config (config.c); every *_locked function with kite_registry_mutex held ---------------- */
typedef enum kite_rule_kind { KITE_RULE_PIN, KITE_RULE_DISABLE, KITE_RULE_ENABLE } kite_rule_kind;
typedef struct kite_rule {
  kite_rule_kind kind;
  int op; /* -1: every op */
  char backend[32];
  char variant[32]; /* "" = every variant of the backend */
} kite_rule;

/* Parses and applies a config, the one path for kite_config_set and KITE_KERNELS at init.
 * origin NULL (kite_config_set): a string that does not parse returns CONFIG and leaves the
 * config in force unchanged. origin "KITE_KERNELS": nobody receives the status, so a string that
 * does not parse is latched instead — no rule applies and every op call fails with CONFIG naming
 * the variable and the bad item until a kite_config_set succeeds. Takes the lock itself. */
kite_status kite_config_apply(const char *cfg, const char *origin);

/* The pin in force for op, copied into *out; false when op is not pinned. */
bool kite_config_pin_locked(kite_op op, kite_rule *out);
/* Whether rule r selects kernel rec for op. */
bool kite_rule_matches(const kite_rule *r, kite_op op, const kernel_rec *rec);
/* Whether the config disables rec (the last matching enable/disable item wins). */
bool kite_config_disables_locked(const kernel_rec *rec);
/* Which thread config the calling thread has (0: none; another id after each set), so that a
 * dispatch cache built under another one is rebuilt. */
uint64_t kite_config_thread_id(void);
/* The config text in force (for messages). */
const char *kite_config_text_locked(void);
/* The latched KITE_KERNELS error ("" when none). */
const char *kite_config_error_locked(void);

/* Why r cannot run on this machine at all, into buf (NULL when it can); ignore_config skips the
 * config's disables. Caller holds kite_registry_mutex. */
const char *kite_why_not_here_locked(const kernel_rec *r, char *buf, size_t n, bool ignore_config);

#endif
