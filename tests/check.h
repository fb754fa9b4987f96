/* A counting assertion for the C tests: prints the failing condition's message and kite's last
 * error, and the test ends with the closing line "N passed, M failed". */
#ifndef KITE_TESTS_CHECK_H
#define KITE_TESTS_CHECK_H

#include <stdio.h>

#include "kite/kite.h"

static int g_pass, g_fail;
static char g_where[256]; /* optional: the case being run, printed with a failure */

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (cond) {                                                                                    \
      g_pass++;                                                                                    \
    } else {                                                                                       \
      g_fail++;                                                                                    \
      printf("FAIL %s:%d: %s%s%s", __FILE__, __LINE__, g_where[0] ? "[" : "", g_where,             \
             g_where[0] ? "] " : "");                                                              \
      printf(__VA_ARGS__);                                                                         \
      printf("  (last error: %s)\n", kite_last_error());                                           \
    }                                                                                              \
  } while (0)

/* The closing line and the exit status. */
static inline int check_summary(void) {
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}

#endif
