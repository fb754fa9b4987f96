/*
 * Library init and the public entry points of the registry, the config and the plugin loader.
 * Every public entry point makes sure the library is initialized first, and init runs the
 * built-in backends' registration, KITE_KERNELS and the plugin autoload: so these functions sit
 * above all three files (registry.c's comment gives the layering) and nothing below calls here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "core/registry.h"

/* ---- init ------------------------------------------------------------------------------- */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
/* Set on the thread running do_init: a call back into kite from a built-in backend's or an
 * auto-loaded plugin's init finds the library initializing and goes on with the registry as
 * registered so far, instead of waiting on pthread_once for itself. */
static _Thread_local bool g_initializing;

static void do_init(void) {
  g_initializing = true;
  for (const kite_builtin_backend *bb = kite_builtin_backends; bb->name; bb++) {
    kite_status s = bb->init();
    if (s != KITE_OK) kite_plugin_record_failure(bb->name, kite_last_error());
  }
  const char *log = getenv("KITE_LOG");
  kite_log_dispatch = log && strstr(log, "dispatch") != NULL;
  const char *cfg = getenv("KITE_KERNELS");
  if (cfg && *cfg) kite_config_apply(cfg, "KITE_KERNELS");
  kite_plugins_autoload();
  kite_clear_error();
  g_initializing = false;
}

void kite_init(void) {
  if (g_initializing) return;
  pthread_once(&g_once, do_init);
}

/* ---- introspection ---------------------------------------------------------------------- */
size_t kite_kernel_count(void) {
  kite_init();
  return kite_registry_kernel_count();
}

const kite_kernel *kite_kernel_entry(size_t i) {
  kite_init();
  pthread_mutex_lock(&kite_registry_mutex);
  size_t n;
  const kernel_rec *recs = kite_registry_kernels_locked(&n);
  const kite_kernel *k = i < n ? recs[i].k : NULL;
  pthread_mutex_unlock(&kite_registry_mutex);
  return k;
}

kite_status kite_kernel_get(size_t i, kite_kernel_info *out) {
  kite_clear_error();
  kite_init();
  if (!out) return kite_set_error(KITE_ERR_INVALID_ARG, "kite_kernel_get: out is NULL");
  pthread_mutex_lock(&kite_registry_mutex);
  size_t n;
  const kernel_rec *recs = kite_registry_kernels_locked(&n);
  if (i >= n) {
    pthread_mutex_unlock(&kite_registry_mutex);
    return kite_set_error(KITE_ERR_INVALID_ARG, "kite_kernel_get: index %zu >= %zu kernels", i, n);
  }
  kernel_rec r = recs[i];
  const char *why = kite_why_not_here_locked(&r, out->why_not, sizeof out->why_not, false);
  if (!why) out->why_not[0] = '\0';
  pthread_mutex_unlock(&kite_registry_mutex);
  out->op = r.k->op;
  out->op_name = kite_op_name(r.k->op);
  out->backend = r.b->name;
  out->variant = r.k->variant;
  out->device_type = r.b->device_type;
  out->priority = r.k->priority;
  out->features = r.k->features_str ? r.k->features_str : "";
  out->description = r.k->description ? r.k->description : "";
  out->runs_here = why == NULL;
  out->plugin = r.path;
  return KITE_OK;
}

size_t kite_backend_count(void) {
  kite_init();
  pthread_mutex_lock(&kite_registry_mutex);
  size_t n;
  kite_registry_backends_locked(&n);
  pthread_mutex_unlock(&kite_registry_mutex);
  return n;
}

kite_status kite_backend_get(size_t i, kite_backend_info *out) {
  kite_clear_error();
  kite_init();
  if (!out) return kite_set_error(KITE_ERR_INVALID_ARG, "kite_backend_get: out is NULL");
  pthread_mutex_lock(&kite_registry_mutex);
  size_t n;
  const backend_rec *recs = kite_registry_backends_locked(&n);
  backend_rec r = i < n ? recs[i] : (backend_rec){0};
  pthread_mutex_unlock(&kite_registry_mutex);
  if (i >= n)
    return kite_set_error(KITE_ERR_INVALID_ARG, "kite_backend_get: index %zu >= %zu backends", i,
                          n);
  out->name = r.b->name;
  out->device_type = r.b->device_type;
  out->device_count = r.b->device_count ? r.b->device_count(r.b) : 1;
  out->num_kernels = r.b->num_kernels;
  out->path = r.path;
  return KITE_OK;
}

/* ---- config ----------------------------------------------------------------------------- */
kite_status kite_config_set(const char *config) {
  kite_clear_error();
  kite_init();
  return kite_config_apply(config, NULL);
}

const char *kite_config_get(void) {
  kite_init();
  pthread_mutex_lock(&kite_registry_mutex);
  const char *text = kite_config_text_locked();
  pthread_mutex_unlock(&kite_registry_mutex);
  return text;
}

const char *kite_config_error(void) {
  kite_init();
  return kite_config_error_locked(); /* an atomic pointer: no lock needed */
}

/* ---- plugins ---------------------------------------------------------------------------- */
kite_status kite_backend_load(const char *path) {
  kite_clear_error();
  kite_init();
  if (!path || !*path)
    return kite_set_error(KITE_ERR_INVALID_ARG, "kite_backend_load: path is NULL or empty");
  return kite_plugin_load(path);
}

size_t kite_plugin_failure_count(void) {
  kite_init();
  return kite_plugin_failures();
}

kite_status kite_plugin_failure_get(size_t i, const char **path, const char **reason) {
  kite_clear_error();
  kite_init();
  if (!path || !reason)
    return kite_set_error(KITE_ERR_INVALID_ARG, "kite_plugin_failure_get: path or reason is NULL");
  if (!kite_plugin_failure(i, path, reason))
    return kite_set_error(KITE_ERR_INVALID_ARG, "kite_plugin_failure_get: index %zu >= %zu", i,
                          kite_plugin_failures());
  return KITE_OK;
}
