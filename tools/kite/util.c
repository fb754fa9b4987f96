#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double kt_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

uint64_t kt_hash(uint64_t key, uint64_t i) {
  uint64_t z = key + (i + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* ---- command line ------------------------------------------------------------------------ */

/* Decimal digits, or 0x and hex digits; nothing else (strtoull alone would take leading blanks,
 * a sign, and read "010" as octal). */
static int parse_u64(const char *s, uint64_t *out) {
  if (!s) return 0;
  int hex = s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
  const char *digits = s + (hex ? 2 : 0);
  if (!*digits) return 0;
  for (const char *p = digits; *p; p++)
    if (!(hex ? isxdigit((unsigned char)*p) : isdigit((unsigned char)*p))) return 0;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(digits, &end, hex ? 16 : 10);
  if (errno || *end) return 0;
  *out = v;
  return 1;
}

static int parse_int(const char *s, int lo, int hi, int *out) {
  uint64_t v;
  if (!parse_u64(s, &v) || v < (uint64_t)lo || v > (uint64_t)hi) return 0;
  *out = (int)v;
  return 1;
}

static int parse_dtype(const char *s) {
  static const struct {
    const char *name;
    kite_dtype t;
  } names[] = {{"f32", KITE_DTYPE_F32},   {"float32", KITE_DTYPE_F32},
               {"f16", KITE_DTYPE_F16},   {"float16", KITE_DTYPE_F16},
               {"bf16", KITE_DTYPE_BF16}, {"bfloat16", KITE_DTYPE_BF16}};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcmp(s, names[i].name) == 0) return (int)names[i].t;
  return -1;
}

/* Is `flag` one of the space-separated words of `allowed`? */
static int flag_allowed(const char *allowed, const char *flag) {
  size_t n = strlen(flag);
  for (const char *p = strstr(allowed, flag); p; p = strstr(p + 1, flag))
    if ((p == allowed || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return 1;
  return 0;
}

int kt_parse_opts(int argc, char **argv, const char *allowed, kt_opts *o) {
  memset(o, 0, sizeof *o);
  o->op = -1;
  o->dtype = -1;
  for (int i = 0; i < argc; i++) {
    char flag[64];
    const char *arg = argv[i], *val = NULL;
    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
      o->help = 1;
      continue;
    }
    if (strncmp(arg, "--", 2) != 0) {
      fprintf(stderr, "kite: unexpected argument '%s' (see --help)\n", arg);
      return 2;
    }
    /* --flag=value or --flag value */
    const char *eq = strchr(arg, '=');
    size_t n = eq ? (size_t)(eq - arg) : strlen(arg);
    if (n >= sizeof flag) n = sizeof flag - 1;
    memcpy(flag, arg, n);
    flag[n] = '\0';
    if (!flag_allowed(allowed, flag)) {
      fprintf(stderr, "kite: unknown option '%s' (see --help)\n", flag);
      return 2;
    }
    int takes_value = strcmp(flag, "--quick") != 0 && strcmp(flag, "--verbose") != 0 &&
                      strcmp(flag, "--long") != 0 && strcmp(flag, "--json") != 0 &&
                      strcmp(flag, "--dispatch") != 0;
    if (takes_value) {
      if (eq) {
        val = eq + 1;
      } else if (i + 1 < argc) {
        val = argv[++i];
      } else {
        fprintf(stderr, "kite: option '%s' needs a value\n", flag);
        return 2;
      }
    } else if (eq) {
      fprintf(stderr, "kite: option '%s' takes no value\n", flag);
      return 2;
    }

    int ok = 1;
    if (strcmp(flag, "--op") == 0) {
      o->op = kite_op_from_name(val);
      ok = o->op >= 0;
    } else if (strcmp(flag, "--backend") == 0) {
      o->backend = val;
      ok = *val != '\0';
    } else if (strcmp(flag, "--seed") == 0) {
      ok = parse_u64(val, &o->seed);
      o->has_seed = 1;
    } else if (strcmp(flag, "--dtype") == 0) {
      o->dtype = parse_dtype(val);
      ok = o->dtype >= 0;
    } else if (strcmp(flag, "--threads") == 0) {
      ok = parse_int(val, 1, 4096, &o->threads);
    } else if (strcmp(flag, "--shapes") == 0) {
      o->shapes = val;
      ok = strcmp(val, "small") == 0 || strcmp(val, "llm") == 0;
    } else if (strcmp(flag, "--repeat") == 0) {
      ok = parse_int(val, 1, 1000, &o->repeat);
    } else if (strcmp(flag, "--max-mb") == 0) {
      ok = parse_int(val, 1, 1 << 24, &o->max_mb);
    } else if (strcmp(flag, "--quick") == 0) {
      o->quick = 1;
    } else if (strcmp(flag, "--verbose") == 0 || strcmp(flag, "--long") == 0) {
      o->verbose = 1;
    } else if (strcmp(flag, "--json") == 0) {
      o->json = 1;
    } else if (strcmp(flag, "--dispatch") == 0) {
      o->dispatch = 1;
    }
    if (!ok) {
      fprintf(stderr, "kite: bad value '%s' for %s", val, flag);
      if (strcmp(flag, "--op") == 0) {
        fprintf(stderr, " (ops:");
        for (int op = 0; op < KITE_OP_COUNT; op++) fprintf(stderr, " %s", kite_op_name(op));
        fprintf(stderr, ")");
      } else if (strcmp(flag, "--dtype") == 0) {
        fprintf(stderr, " (f32, f16 or bf16)");
      } else if (strcmp(flag, "--shapes") == 0) {
        fprintf(stderr, " (small or llm)");
      }
      fprintf(stderr, "\n");
      return 2;
    }
  }
  return 0;
}

/* ---- registry snapshot ------------------------------------------------------------------- */

static char *dup_str(const char *s) {
  s = s ? s : "";
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

int kt_registry_load(kt_registry *r) {
  r->n = kite_kernel_count();
  r->k = calloc(r->n ? r->n : 1, sizeof *r->k);
  if (!r->k) return 1;
  for (size_t i = 0; i < r->n; i++) {
    kite_kernel_info info;
    kt_kernel *k = &r->k[i];
    k->index = i;
    if (kite_kernel_get(i, &info) != KITE_OK) {
      fprintf(stderr, "kite: kernel %zu: %s\n", i, kite_last_error());
      return 1;
    }
    k->op = info.op;
    k->op_name = kite_op_name(info.op) ? kite_op_name(info.op) : "?";
    k->backend = dup_str(info.backend);
    k->variant = dup_str(info.variant);
    k->features = dup_str(info.features);
    k->description = dup_str(info.description);
    k->why_not = dup_str(info.why_not);
    k->plugin = dup_str(info.plugin);
    k->name =
        malloc(strlen(k->backend ? k->backend : "") + strlen(k->variant ? k->variant : "") + 2);
    if (!k->backend || !k->variant || !k->features || !k->description || !k->why_not ||
        !k->plugin || !k->name)
      return 1;
    sprintf(k->name, "%s.%s", k->backend, k->variant);
    k->device = info.device_type;
    k->priority = info.priority;
    k->runs_here = info.runs_here;
  }
  return 0;
}

void kt_registry_free(kt_registry *r) {
  for (size_t i = 0; r->k && i < r->n; i++) {
    kt_kernel *k = &r->k[i];
    free(k->backend), free(k->variant), free(k->name);
    free(k->features), free(k->description), free(k->why_not), free(k->plugin);
  }
  free(r->k);
  r->k = NULL;
  r->n = 0;
}

int kt_kernel_selected(const kt_kernel *k, const kt_opts *o) {
  if (o->op >= 0 && (int)k->op != o->op) return 0;
  if (!o->backend) return 1;
  return strchr(o->backend, '.') ? strcmp(o->backend, k->name) == 0
                                 : strcmp(o->backend, k->backend) == 0;
}

const kt_kernel *kt_default_kernel(const kt_registry *r, kite_op op, DLDeviceType t) {
  const kt_kernel *best = NULL;
  for (size_t i = 0; i < r->n; i++) {
    const kt_kernel *k = &r->k[i];
    if (k->op == op && k->device == t && k->runs_here && (!best || k->priority > best->priority))
      best = k;
  }
  return best;
}

const kt_kernel *kt_ref_kernel(const kt_registry *r, kite_op op) {
  const kt_kernel *best = NULL;
  for (size_t i = 0; i < r->n; i++) {
    const kt_kernel *k = &r->k[i];
    if (k->op == op && k->device == kDLCPU && k->runs_here && strcmp(k->backend, "ref") == 0 &&
        (!best || k->priority > best->priority))
      best = k;
  }
  return best;
}

int kt_backend_known(const kt_registry *r, const char *name) {
  for (size_t i = 0; i < r->n; i++)
    if (strcmp(r->k[i].backend, name) == 0 || strcmp(r->k[i].name, name) == 0) return 1;
  return 0;
}

/* ---- devices ----------------------------------------------------------------------------- */

int kt_devices_open(kt_devices *d, int threads) {
  memset(d, 0, sizeof *d);
  DLDeviceType types[KT_MAX_DEVICES];
  int nt = 0;
  types[nt++] = kDLCPU;
  for (size_t i = 0; i < kite_backend_count(); i++) {
    kite_backend_info b;
    if (kite_backend_get(i, &b) != KITE_OK || b.device_count < 1) continue;
    int seen = 0;
    for (int j = 0; j < nt; j++) seen |= types[j] == b.device_type;
    if (!seen && nt < KT_MAX_DEVICES) types[nt++] = b.device_type;
  }
  for (int j = 0; j < nt; j++) {
    kite_ctx_params p = kite_ctx_params_default();
    p.device.device_type = types[j];
    p.device.device_id = 0;
    p.num_threads = threads;
    kite_ctx *ctx = NULL;
    kite_status s = kite_ctx_create(&p, &ctx);
    if (s != KITE_OK) {
      fprintf(stderr, "kite: cannot open a ctx on %s:0: %s\n", kite_device_name(types[j]),
              kite_last_error());
      if (types[j] == kDLCPU) return 1;
      continue;
    }
    d->type[d->n] = types[j];
    d->ctx[d->n++] = ctx;
  }
  return 0;
}

kite_ctx *kt_devices_ctx(const kt_devices *d, DLDeviceType t) {
  for (int i = 0; i < d->n; i++)
    if (d->type[i] == t) return d->ctx[i];
  return NULL;
}

void kt_devices_close(kt_devices *d) {
  for (int i = 0; i < d->n; i++) kite_ctx_destroy(d->ctx[i]);
  d->n = 0;
}

kite_status kt_pin(kite_op op, const kt_kernel *k) {
  char cfg[512];
  if (!k) return kite_config_set("");
  snprintf(cfg, sizeof cfg, "%s=%s.%s", kite_op_name(op), k->backend, k->variant);
  return kite_config_set(cfg);
}

/* ---- machine ----------------------------------------------------------------------------- */

int kt_online_cpus(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

const char *kt_cpu_model(void) {
  static char model[128] = "unknown";
  static int done;
  if (done) return model;
  done = 1;
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return model;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    char *colon = strchr(line, ':');
    if (strncmp(line, "model name", 10) != 0 || !colon) continue;
    char *s = colon + 1;
    while (*s == ' ') s++;
    size_t n = strcspn(s, "\n");
    if (n >= sizeof model) n = sizeof model - 1;
    memcpy(model, s, n);
    model[n] = '\0';
    break;
  }
  fclose(f);
  return model;
}

typedef struct copy_part {
  char *dst;
  const char *src;
  size_t bytes;
} copy_part;

static void *copy_part_run(void *arg) {
  copy_part *p = arg;
  memcpy(p->dst, p->src, p->bytes);
  return NULL;
}

/* One copy of src to dst split over `threads` threads (the caller's thread does part 0). */
static void parallel_memcpy(char *dst, const char *src, size_t bytes, int threads) {
  enum { MAX_THREADS = 256 };
  pthread_t tid[MAX_THREADS];
  copy_part part[MAX_THREADS];
  int started[MAX_THREADS] = {0};
  if (threads > MAX_THREADS) threads = MAX_THREADS;
  size_t chunk = (bytes / (size_t)threads + 4095) & ~(size_t)4095;
  for (int t = 0; t < threads; t++) {
    size_t lo = (size_t)t * chunk, hi = lo + chunk < bytes ? lo + chunk : bytes;
    part[t] = (copy_part){dst + lo, src + lo, lo < bytes ? hi - lo : 0};
  }
  for (int t = 1; t < threads; t++)
    started[t] = pthread_create(&tid[t], NULL, copy_part_run, &part[t]) == 0;
  copy_part_run(&part[0]);
  for (int t = 1; t < threads; t++) {
    if (started[t])
      pthread_join(tid[t], NULL);
    else
      copy_part_run(&part[t]);
  }
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

struct kt_host_copy {
  char *src, *dst;
  size_t bytes;
  int threads;
};

kt_host_copy *kt_host_copy_open(int threads, size_t bytes) {
  kt_host_copy *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->src = malloc(bytes), c->dst = malloc(bytes);
  if (!c->src || !c->dst) {
    kt_host_copy_close(c);
    return NULL;
  }
  c->bytes = bytes;
  c->threads = threads < 1 ? kt_online_cpus() : threads;
  /* touch every page first so the timed copies do not count page faults */
  memset(c->src, 1, bytes);
  memset(c->dst, 0, bytes);
  parallel_memcpy(c->dst, c->src, bytes, c->threads); /* warm-up */
  return c;
}

double kt_host_copy_gbs(kt_host_copy *c) {
  double t0 = kt_now();
  parallel_memcpy(c->dst, c->src, c->bytes, c->threads);
  return 2.0 * (double)c->bytes / (kt_now() - t0) * 1e-9;
}

void kt_host_copy_close(kt_host_copy *c) {
  if (!c) return;
  free(c->src), free(c->dst);
  free(c);
}

double kt_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof v[0], cmp_double);
  return v[n / 2];
}

double kt_host_copy_median_gbs(kt_host_copy *c, int reps) {
  double g[16];
  if (reps > 16) reps = 16;
  for (int r = 0; r < reps; r++) g[r] = kt_host_copy_gbs(c);
  return kt_median(g, reps);
}

double kt_device_memcpy_gbs(kite_ctx *ctx, size_t bytes) {
  enum { REPS = 5 };
  void *src = NULL, *dst = NULL;
  double gbs = 0;
  if (kite_malloc(ctx, bytes, &src) == KITE_OK && kite_malloc(ctx, bytes, &dst) == KITE_OK &&
      kite_memcpy(ctx, dst, src, bytes, KITE_COPY_DEVICE_TO_DEVICE) == KITE_OK) {
    double t[REPS];
    int ok = 1;
    for (int r = 0; r < REPS && ok; r++) {
      /* the device's own timer where it has one: the host clock adds launch and wake-up time */
      void *timer = NULL;
      const int dev_timed = kite_ctx_timer_start(ctx, &timer) == KITE_OK;
      double t0 = kt_now();
      ok = kite_memcpy(ctx, dst, src, bytes, KITE_COPY_DEVICE_TO_DEVICE) == KITE_OK;
      if (dev_timed)
        ok = kite_ctx_timer_stop(ctx, timer, &t[r]) == KITE_OK && ok;
      else
        ok = ok && kite_ctx_synchronize(ctx) == KITE_OK;
      if (!dev_timed) t[r] = kt_now() - t0;
    }
    if (ok) {
      gbs = 2.0 * (double)bytes / kt_median(t, REPS) * 1e-9;
    }
  }
  if (src) kite_free(ctx, src);
  if (dst) kite_free(ctx, dst);
  return gbs;
}

void kt_json_str(const char *s) {
  putchar('"');
  for (; s && *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      printf("\\%c", c);
    else if (c < 0x20)
      printf("\\u%04x", c);
    else
      putchar(c);
  }
  putchar('"');
}
