/*
 * The registry: backends and their kernels, registration (with the rollback of a plugin whose init
 * fails) and the lookups the layers above need.
 *
 * The bottom of the core's registry files, which call only downward:
 *   init.c (library init; the public entry points of the three below)
 *     -> plugin.c (loading plugins), config.c (the kernel-selection rules)
 *       -> registry.c (this file: the tables)
 * dispatch.c and the op front-ends stand on all of them. Nothing here calls up.
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

pthread_mutex_t kite_registry_mutex = PTHREAD_MUTEX_INITIALIZER;
_Atomic uint64_t kite_registry_generation = 1;
int kite_log_dispatch;

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

size_t kite_registry_kernel_count(void) {
  return atomic_load(&g_num_kernels);
}

const backend_rec *kite_registry_backends_locked(size_t *n) {
  *n = g_num_backends;
  return g_backends;
}

bool kite_name_ok(const char *s, size_t n) {
  if (n == 0 || n >= 32) return false;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
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
