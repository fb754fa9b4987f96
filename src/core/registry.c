/*
 * The registry: backends and their kernels, registration (with the rollback of a plugin whose init
 * fails), introspection and library init.
 *
 * Every array here is read and written under kite_registry_mutex; dispatch copies what it needs
 * into a ctx's cache (dispatch.c), so a warm call takes no lock. Entries may move when a failed
 * plugin's backends are rolled back: nothing outside this file keeps a pointer into the arrays,
 * only pointers to what they point to (the backends' own structs, interned path strings), which
 * live as long as the process.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "core/registry.h"

#define MAX_BACKENDS 64
#define MAX_KERNELS 4096
#define MAX_PATHS 64

typedef struct backend_rec {
  const kite_backend *b;
  const char *path; /* interned; "" when built in */
  unsigned load_id; /* the plugin load that registered it (0: none) */
} backend_rec;

pthread_mutex_t kite_registry_mutex = PTHREAD_MUTEX_INITIALIZER;
_Atomic uint64_t kite_registry_generation = 1;

static backend_rec g_backends[MAX_BACKENDS];
static size_t g_num_backends;
static kernel_rec g_kernels[MAX_KERNELS];
static _Atomic size_t g_num_kernels;
/* Plugin paths, append-only, so the pointers handed out stay valid. */
static char g_paths[MAX_PATHS][PATH_MAX];
static size_t g_num_paths;
static unsigned g_next_load_id = 1;

/* The plugin load the calling thread is inside of. */
static _Thread_local const char *g_loading_path;
static _Thread_local unsigned g_loading_id;

const kernel_rec *kite_registry_kernels_locked(size_t *n) {
  *n = atomic_load(&g_num_kernels);
  return g_kernels;
}

/* ---- registration ----------------------------------------------------------------------- */
static const char *intern_path_locked(const char *path) {
  if (!path || !*path) return "";
  for (size_t i = 0; i < g_num_paths; i++)
    if (strcmp(g_paths[i], path) == 0) return g_paths[i];
  if (g_num_paths == MAX_PATHS) return "(path not kept: too many plugins)";
  snprintf(g_paths[g_num_paths], PATH_MAX, "%s", path);
  return g_paths[g_num_paths++];
}

void kite_registry_begin_load(const char *path) {
  pthread_mutex_lock(&kite_registry_mutex);
  g_loading_id = g_next_load_id++;
  g_loading_path = intern_path_locked(path);
  pthread_mutex_unlock(&kite_registry_mutex);
}

void kite_registry_end_load(void) {
  g_loading_path = NULL;
  g_loading_id = 0;
}

const char *kite_registry_loading_path(void) {
  return g_loading_path;
}

size_t kite_registry_rollback_load(void) {
  if (!g_loading_id) return 0;
  pthread_mutex_lock(&kite_registry_mutex);
  const kite_backend *gone[MAX_BACKENDS];
  size_t ngone = 0, nb = 0, nk = 0, old_nk = atomic_load(&g_num_kernels);
  for (size_t i = 0; i < g_num_backends; i++) {
    if (g_backends[i].load_id == g_loading_id)
      gone[ngone++] = g_backends[i].b;
    else
      g_backends[nb++] = g_backends[i];
  }
  for (size_t i = 0; i < old_nk; i++) {
    bool keep = true;
    for (size_t j = 0; j < ngone; j++) keep = keep && g_kernels[i].b != gone[j];
    if (keep) g_kernels[nk++] = g_kernels[i];
  }
  g_num_backends = nb;
  atomic_store(&g_num_kernels, nk);
  if (ngone) atomic_fetch_add(&kite_registry_generation, 1);
  pthread_mutex_unlock(&kite_registry_mutex);
  return ngone;
}

static bool kernel_entry_ok(const kite_backend *b, const kite_kernel *k, size_t i) {
  if ((int)k->op < 0 || k->op >= KITE_OP_COUNT || !k->run || !k->variant) {
    kite_set_error(KITE_ERR_INVALID_ARG,
                   "backend '%s': kernel entry %zu has a bad op id, no run function or no variant",
                   b->name, i);
    return false;
  }
  if (!kite_name_ok(k->variant, strlen(k->variant))) {
    kite_set_error(KITE_ERR_INVALID_ARG, "backend '%s': variant name '%s' is not [a-z0-9_]{1,31}",
                   b->name, k->variant);
    return false;
  }
  return true;
}

kite_status kite_backend_register(const kite_backend *b) {
  if (!b || !b->name || !kite_name_ok(b->name, strlen(b->name)))
    return kite_set_error(KITE_ERR_INVALID_ARG,
                          "kite_backend_register: backend or its name is NULL or not [a-z0-9_]");
  if (b->num_kernels && !b->kernels)
    return kite_set_error(KITE_ERR_INVALID_ARG, "backend '%s': num_kernels %zu but kernels NULL",
                          b->name, b->num_kernels);
  for (size_t i = 0; i < b->num_kernels; i++) {
    if (!kernel_entry_ok(b, &b->kernels[i], i)) return KITE_ERR_INVALID_ARG;
    for (size_t j = 0; j < i; j++)
      if (b->kernels[j].op == b->kernels[i].op &&
          strcmp(b->kernels[j].variant, b->kernels[i].variant) == 0)
        return kite_set_error(KITE_ERR_INVALID_ARG,
                              "backend '%s': kernel entries %zu and %zu are both %s.%s for op %s",
                              b->name, j, i, b->name, b->kernels[i].variant,
                              kite_op_name(b->kernels[i].op));
  }

  pthread_mutex_lock(&kite_registry_mutex);
  kite_status s = KITE_OK;
  size_t nb = g_num_backends, nk = atomic_load(&g_num_kernels);
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
  const char *path = g_loading_path ? g_loading_path : "";
  g_backends[nb] = (backend_rec){b, path, g_loading_id};
  for (size_t i = 0; i < b->num_kernels; i++)
    g_kernels[nk + i] = (kernel_rec){&b->kernels[i], b, path};
  atomic_store(&g_num_kernels, nk + b->num_kernels);
  g_num_backends = nb + 1;
  atomic_fetch_add(&kite_registry_generation, 1);
out:
  pthread_mutex_unlock(&kite_registry_mutex);
  return s;
}

const kite_backend *kite_memory_backend(DLDeviceType t) {
  const kite_backend *found = NULL;
  pthread_mutex_lock(&kite_registry_mutex);
  for (size_t i = 0; i < g_num_backends && !found; i++)
    if (g_backends[i].b->device_type == t && g_backends[i].b->alloc) found = g_backends[i].b;
  pthread_mutex_unlock(&kite_registry_mutex);
  return found;
}

const kite_backend *kite_comm_backend(DLDeviceType t) {
  const kite_backend *found = NULL;
  pthread_mutex_lock(&kite_registry_mutex);
  for (size_t i = 0; i < g_num_backends && !found; i++)
    if (g_backends[i].b->device_type == t && g_backends[i].b->comm_create) found = g_backends[i].b;
  pthread_mutex_unlock(&kite_registry_mutex);
  return found;
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

/* ---- introspection ---------------------------------------------------------------------- */
size_t kite_kernel_count(void) {
  kite_init();
  return atomic_load(&g_num_kernels);
}

const kite_kernel *kite_kernel_entry(size_t i) {
  kite_init();
  pthread_mutex_lock(&kite_registry_mutex);
  const kite_kernel *k = i < atomic_load(&g_num_kernels) ? g_kernels[i].k : NULL;
  pthread_mutex_unlock(&kite_registry_mutex);
  return k;
}

kite_status kite_kernel_get(size_t i, kite_kernel_info *out) {
  kite_clear_error();
  kite_init();
  if (!out) return kite_set_error(KITE_ERR_INVALID_ARG, "kite_kernel_get: out is NULL");
  pthread_mutex_lock(&kite_registry_mutex);
  size_t n = atomic_load(&g_num_kernels);
  if (i >= n) {
    pthread_mutex_unlock(&kite_registry_mutex);
    return kite_set_error(KITE_ERR_INVALID_ARG, "kite_kernel_get: index %zu >= %zu kernels", i, n);
  }
  kernel_rec r = g_kernels[i];
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

const char *kite_kernel_backend_name(const kite_kernel *k) {
  const char *name = "?";
  pthread_mutex_lock(&kite_registry_mutex);
  size_t n = atomic_load(&g_num_kernels);
  for (size_t i = 0; i < n; i++)
    if (g_kernels[i].k == k) {
      name = g_kernels[i].b->name;
      break;
    }
  pthread_mutex_unlock(&kite_registry_mutex);
  return name;
}

size_t kite_backend_count(void) {
  kite_init();
  pthread_mutex_lock(&kite_registry_mutex);
  size_t n = g_num_backends;
  pthread_mutex_unlock(&kite_registry_mutex);
  return n;
}

kite_status kite_backend_get(size_t i, kite_backend_info *out) {
  kite_clear_error();
  kite_init();
  if (!out) return kite_set_error(KITE_ERR_INVALID_ARG, "kite_backend_get: out is NULL");
  pthread_mutex_lock(&kite_registry_mutex);
  size_t n = g_num_backends;
  backend_rec r = i < n ? g_backends[i] : (backend_rec){0};
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

/* ---- init ------------------------------------------------------------------------------- */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
/* Set on the thread running do_init: a call back into kite from a built-in backend's or an
 * auto-loaded plugin's init finds the library initializing and goes on with the registry as
 * registered so far, instead of waiting on pthread_once for itself. */
static _Thread_local bool g_initializing;
int kite_log_dispatch;

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
