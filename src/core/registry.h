/* Shared between registry.c and plugin.c. */
#ifndef KITE_CORE_REGISTRY_H
#define KITE_CORE_REGISTRY_H

#include "kite/backend.h"

typedef struct backend_rec {
  const kite_backend *b;
  char path[4096]; /* plugin file, "" when built in */
} backend_rec;

/* While a plugin's init runs, backends it registers record this path (NULL after). */
void kite_registry_set_loading_path(const char *path);

/* Backends registered so far, without triggering init (for the plugin loader). */
size_t kite_backend_count_unlocked(void);

/* plugin.c */
void kite_plugins_autoload(void);
void kite_plugin_record_failure(const char *path, const char *reason);

#endif
