/*
 * Plugin loading: kite_backend_load(path) and, at init, every libkite-<name>.so beside libkite.so
 * and in each directory of KITE_BACKEND_PATH. A plugin that fails is recorded, never fatal.
 *
 * Layering (registry.c's comment): above registry.c, which records what a plugin's init registers
 * and rolls it back; below init.c, which runs the autoload at init and holds the public entry
 * points. It calls nothing above itself.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "core/registry.h"

#define MAX_PLUGINS 64

typedef struct failure {
  char path[PATH_MAX];
  char reason[1024];
} failure;

static pthread_mutex_t g_plugin_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_loaded[MAX_PLUGINS][PATH_MAX];
static size_t g_num_loaded;
static failure g_failures[MAX_PLUGINS];
static size_t g_num_failures;

void kite_plugin_record_failure(const char *path, const char *reason) {
  pthread_mutex_lock(&g_plugin_lock);
  if (g_num_failures < MAX_PLUGINS) {
    snprintf(g_failures[g_num_failures].path, sizeof g_failures[0].path, "%s", path);
    snprintf(g_failures[g_num_failures].reason, sizeof g_failures[0].reason, "%s", reason);
    g_num_failures++;
  }
  pthread_mutex_unlock(&g_plugin_lock);
}

size_t kite_plugin_failures(void) {
  return g_num_failures;
}

bool kite_plugin_failure(size_t i, const char **path, const char **reason) {
  if (i >= g_num_failures) return false;
  *path = g_failures[i].path;
  *reason = g_failures[i].reason;
  return true;
}

/* Loads one plugin; the caller holds g_plugin_lock. Loading the same file twice is a no-op. */
static kite_status load_locked(const char *path) {
  char real[PATH_MAX];
  if (!realpath(path, real))
    return kite_set_error(KITE_ERR_PLUGIN, "plugin %s: no such file", path);
  for (size_t i = 0; i < g_num_loaded; i++)
    if (strcmp(g_loaded[i], real) == 0) return KITE_OK;
  if (g_num_loaded == MAX_PLUGINS)
    return kite_set_error(KITE_ERR_PLUGIN, "plugin %s: more than %d plugins", path, MAX_PLUGINS);

  void *h = dlopen(real, RTLD_NOW | RTLD_LOCAL);
  if (!h) return kite_set_error(KITE_ERR_PLUGIN, "plugin %s: cannot load: %s", path, dlerror());
  const uint32_t *abi = (const uint32_t *)dlsym(h, KITE_PLUGIN_ABI_SYMBOL);
  void *init_sym = dlsym(h, KITE_PLUGIN_INIT_SYMBOL);
  if (!abi || !init_sym) {
    dlclose(h);
    return kite_set_error(KITE_ERR_PLUGIN,
                          "plugin %s: does not export %s and %s: not a kite plugin", path,
                          KITE_PLUGIN_ABI_SYMBOL, KITE_PLUGIN_INIT_SYMBOL);
  }
  if (*abi != KITE_BACKEND_ABI_VERSION) {
    uint32_t got = *abi;
    dlclose(h);
    return kite_set_error(KITE_ERR_PLUGIN,
                          "plugin %s: built for backend ABI version %u, this kite has version %u; "
                          "rebuild the plugin against this kite",
                          path, got, KITE_BACKEND_ABI_VERSION);
  }
  kite_plugin_init_fn init;
  memcpy(&init, &init_sym, sizeof init); /* object pointer to function pointer, as dlsym needs */
  kite_registry_begin_load(real);
  kite_clear_error();
  kite_status s = init(KITE_BACKEND_ABI_VERSION);
  if (s != KITE_OK) {
    char why[600];
    snprintf(why, sizeof why, "%s", kite_last_error()[0] ? kite_last_error() : kite_status_name(s));
    /* a backend it registered goes again; the library stays mapped, as a thread may already run
     * one of its kernels */
    size_t removed = kite_registry_rollback_load();
    kite_registry_end_load();
    if (!removed) dlclose(h);
    return kite_set_error(KITE_ERR_PLUGIN, "plugin %s: init failed: %s%s", path, why,
                          removed ? " (its registration was withdrawn)" : "");
  }
  kite_registry_end_load();
  snprintf(g_loaded[g_num_loaded++], PATH_MAX, "%s", real);
  return KITE_OK;
}

kite_status kite_plugin_load(const char *path) {
  /* the plugin lock is held by the load in progress on this thread */
  const char *loading = kite_registry_loading_path();
  if (loading)
    return kite_set_error(KITE_ERR_PLUGIN,
                          "kite_backend_load(%s): called from the init of plugin %s; a plugin's "
                          "init may not load plugins",
                          path, loading);
  pthread_mutex_lock(&g_plugin_lock);
  kite_status s = load_locked(path);
  pthread_mutex_unlock(&g_plugin_lock);
  return s;
}

static int name_cmp(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Loads every libkite-*.so in dir, in name order. */
static void autoload_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  char *names[MAX_PLUGINS];
  size_t n = 0;
  struct dirent *ent;
  while ((ent = readdir(d)) && n < MAX_PLUGINS) {
    size_t len = strlen(ent->d_name);
    if (len > 11 && strncmp(ent->d_name, "libkite-", 8) == 0 &&
        strcmp(ent->d_name + len - 3, ".so") == 0) {
      names[n] = strdup(ent->d_name);
      if (names[n]) n++;
    }
  }
  closedir(d);
  qsort(names, n, sizeof names[0], name_cmp);
  for (size_t i = 0; i < n; i++) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    pthread_mutex_lock(&g_plugin_lock);
    kite_status s = load_locked(path);
    pthread_mutex_unlock(&g_plugin_lock);
    if (s != KITE_OK) kite_plugin_record_failure(path, kite_last_error());
    free(names[i]);
  }
}

void kite_plugins_autoload(void) {
  Dl_info info;
  if (dladdr((void *)&kite_plugins_autoload, &info) && info.dli_fname) {
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", info.dli_fname);
    char *slash = strrchr(dir, '/');
    if (slash) {
      *slash = '\0';
      autoload_dir(dir);
    }
  }
  const char *env = getenv("KITE_BACKEND_PATH");
  if (!env) return;
  char *copy = strdup(env);
  if (!copy) return;
  char *save = NULL;
  for (char *dir = strtok_r(copy, ":", &save); dir; dir = strtok_r(NULL, ":", &save))
    if (*dir) autoload_dir(dir);
  free(copy);
}
