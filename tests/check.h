/* A counting assertion for the C tests: prints the failing condition's message and kite's last
 * error, and the test ends with the closing line "N passed, M failed". The counters are atomic,
 * so CHECK may run on several threads at once; each failure is printed whole. (flockfile: the
 * tests build with _GNU_SOURCE.)
 *
 * A test that can fail thousands of checks at once (a broken collective) may cap the lines:
 * #define CHECK_MAX_PRINTED 40 before including this file. */
#ifndef KITE_TESTS_CHECK_H
#define KITE_TESTS_CHECK_H

#include <stdatomic.h>
#include <stdio.h>

#include "kite/kite.h"

#ifndef CHECK_MAX_PRINTED
#define CHECK_MAX_PRINTED 1000000000
#endif

static atomic_int g_pass, g_fail;
static char g_where[256]; /* optional: the case being run, printed with a failure */

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (cond) {                                                                                    \
      g_pass++;                                                                                    \
    } else if (g_fail++ < CHECK_MAX_PRINTED) {                                                     \
      flockfile(stdout); /* one failure's line is not cut by another thread's */                   \
      printf("FAIL %s:%d: %s%s%s", __FILE__, __LINE__, g_where[0] ? "[" : "", g_where,             \
             g_where[0] ? "] " : "");                                                              \
      printf(__VA_ARGS__);                                                                         \
      printf("  (last error: %s)\n", kite_last_error());                                           \
      funlockfile(stdout);                                                                         \
    }                                                                                              \
  } while (0)

/* The closing line and the exit status. */
static inline int check_summary(void) {
  printf("%d passed, %d failed\n", (int)g_pass, (int)g_fail);
  return g_fail ? 1 : 0;
}

#endif
