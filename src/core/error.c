/* Thread-local error messages and status names. */
#include <stdarg.h>
#include <stdio.h>

#include "core/internal.h"

static _Thread_local char g_error[1024];

void kite_clear_error(void) {
  g_error[0] = '\0';
}

const char *kite_last_error(void) {
  return g_error;
}

kite_status kite_set_error(kite_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_error, sizeof g_error, fmt, ap);
  va_end(ap);
  return s;
}

const char *kite_status_name(kite_status s) {
  switch (s) {
  case KITE_OK:
    return "KITE_OK";
  case KITE_ERR_INVALID_ARG:
    return "KITE_ERR_INVALID_ARG";
  case KITE_ERR_UNSUPPORTED:
    return "KITE_ERR_UNSUPPORTED";
  case KITE_ERR_OUT_OF_MEMORY:
    return "KITE_ERR_OUT_OF_MEMORY";
  case KITE_ERR_DEVICE:
    return "KITE_ERR_DEVICE";
  case KITE_ERR_PLUGIN:
    return "KITE_ERR_PLUGIN";
  case KITE_ERR_CONFIG:
    return "KITE_ERR_CONFIG";
  case KITE_ERR_INTERNAL:
    return "KITE_ERR_INTERNAL";
  }
  return "KITE_ERR_UNKNOWN";
}
