/*
 * LD_PRELOAD interposer for the "machine without oneDNN or OpenBLAS" test: dlopen of any name that
 * contains an entry of KITE_TEST_HIDE_LIBS (comma-separated, e.g. "dnnl,openblas") fails as it
 * would where the library is not installed; every other dlopen goes to the real one.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

__attribute__((visibility("default"))) void *dlopen(const char *file, int mode) {
  static void *(*real)(const char *, int);
  if (!real) real = (void *(*)(const char *, int))dlsym(RTLD_NEXT, "dlopen");
  const char *hide = getenv("KITE_TEST_HIDE_LIBS");
  if (file && hide) {
    const char *p = hide;
    while (*p) {
      size_t n = strcspn(p, ",");
      char name[64];
      if (n > 0 && n < sizeof name) {
        memcpy(name, p, n);
        name[n] = '\0';
        if (strstr(file, name)) return NULL;
      }
      p += n + (p[n] == ',');
    }
  }
  return real ? real(file, mode) : NULL;
}
