/* The Jinja subset's values (jinja_internal.h): an arena, strings, lists, dicts, and how they
 * print, compare and turn into JSON, each as Python does it. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_internal.h"

struct jblock {
  jblock *next;
  max_align_t data[];
};

_Noreturn void jfail(jarena *a, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (a->err && a->err_len) vsnprintf(a->err, a->err_len, fmt, ap);
  va_end(ap);
  longjmp(*a->fail, 1);
}

void *jalloc(jarena *a, size_t n) {
  jblock *b = calloc(1, sizeof *b + n);
  if (!b) jfail(a, "chat template: out of memory");
  b->next = a->head;
  a->head = b;
  return b->data;
}

void jarena_free(jarena *a) {
  while (a->head) {
    jblock *b = a->head;
    a->head = b->next;
    free(b);
  }
}

/* No text of a rendering grows past this: a template that loops or repeats without bound fails
 * instead of taking the memory. */
#define JBUF_MAX ((size_t)64 << 20)

void jbuf_put(jarena *a, jbuf *b, const char *s, size_t n) {
  if (n > JBUF_MAX || b->n + n > JBUF_MAX) jfail(a, "chat template: a text past 64 MiB");
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + n + 1) cap *= 2;
    char *p = jalloc(a, cap);
    if (b->n) memcpy(p, b->p, b->n);
    b->p = p;
    b->cap = cap;
  }
  if (n) memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
}

jv jv_str(jarena *a, const char *s, size_t n) {
  char *p = jalloc(a, n + 1);
  if (n) memcpy(p, s, n);
  return (jv){.t = JV_STR, .u.s = {p, n}};
}
jv jv_cstr(const char *s) {
  return (jv){.t = JV_STR, .u.s = {s, strlen(s)}};
}
jv jv_int(long long i) {
  return (jv){.t = JV_INT, .u.i = i};
}
jv jv_bool(int b) {
  return (jv){.t = JV_BOOL, .u.b = !!b};
}
jv jv_list(jarena *a) {
  return (jv){.t = JV_LIST, .u.l = jalloc(a, sizeof(jlist))};
}
jv jv_dict(jarena *a) {
  return (jv){.t = JV_DICT, .u.d = jalloc(a, sizeof(jdict))};
}

void jlist_push(jarena *a, jlist *l, jv v) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 8;
    jv *p = jalloc(a, cap * sizeof *p);
    if (l->n) memcpy(p, l->v, l->n * sizeof *p);
    l->v = p;
    l->cap = cap;
  }
  l->v[l->n++] = v;
}

jv *jdict_get(const jdict *d, const char *k, size_t n) {
  for (size_t i = 0; i < d->n; i++)
    if (d->k[i].t == JV_STR && d->k[i].u.s.n == n && memcmp(d->k[i].u.s.p, k, n) == 0)
      return &d->v[i];
  return NULL;
}

void jdict_set(jarena *a, jdict *d, jv k, jv v) {
  for (size_t i = 0; i < d->n; i++)
    if (jv_equal(d->k[i], k)) {
      d->v[i] = v;
      return;
    }
  if (d->n == d->cap) {
    size_t cap = d->cap ? 2 * d->cap : 8;
    jv *pk = jalloc(a, cap * sizeof *pk), *pv = jalloc(a, cap * sizeof *pv);
    if (d->n) {
      memcpy(pk, d->k, d->n * sizeof *pk);
      memcpy(pv, d->v, d->n * sizeof *pv);
    }
    d->k = pk;
    d->v = pv;
    d->cap = cap;
  }
  d->k[d->n] = k;
  d->v[d->n++] = v;
}

int jv_truthy(jv v) {
  switch (v.t) {
  case JV_BOOL:
    return v.u.b;
  case JV_INT:
    return v.u.i != 0;
  case JV_FLOAT:
    return v.u.f != 0;
  case JV_STR:
    return v.u.s.n != 0;
  case JV_LIST:
    return v.u.l->n != 0;
  case JV_DICT:
    return v.u.d->n != 0;
  case JV_MACRO:
  case JV_GLOBAL:
    return 1;
  default:
    return 0;
  }
}

static int is_num(jv v) {
  return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL;
}
static double num(jv v) {
  return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : v.u.b;
}

int jv_equal(jv x, jv y) {
  if (is_num(x) && is_num(y)) return num(x) == num(y);
  if (x.t != y.t) return (x.t == JV_NONE || x.t == JV_UNDEF) && (y.t == JV_NONE || y.t == JV_UNDEF);
  switch (x.t) {
  case JV_STR:
    return x.u.s.n == y.u.s.n && memcmp(x.u.s.p, y.u.s.p, x.u.s.n) == 0;
  case JV_LIST:
    if (x.u.l->n != y.u.l->n) return 0;
    for (size_t i = 0; i < x.u.l->n; i++)
      if (!jv_equal(x.u.l->v[i], y.u.l->v[i])) return 0;
    return 1;
  case JV_DICT:
    if (x.u.d->n != y.u.d->n) return 0;
    for (size_t i = 0; i < x.u.d->n; i++) {
      const jv *o =
          x.u.d->k[i].t == JV_STR ? jdict_get(y.u.d, x.u.d->k[i].u.s.p, x.u.d->k[i].u.s.n) : NULL;
      if (!o || !jv_equal(x.u.d->v[i], *o)) return 0;
    }
    return 1;
  case JV_MACRO:
    return x.u.macro == y.u.macro;
  case JV_GLOBAL:
    return x.u.global == y.u.global;
  default:
    return 1;
  }
}

const char *jv_type_name(jv v) {
  static const char *names[] = {"undefined", "none", "bool", "int",   "float",
                                "string",    "list", "dict", "macro", "function"};
  return names[v.t];
}

int jv_compare(jarena *a, jv x, jv y) {
  if (is_num(x) && is_num(y)) return num(x) < num(y) ? -1 : num(x) > num(y);
  if (x.t == JV_STR && y.t == JV_STR) {
    size_t n = x.u.s.n < y.u.s.n ? x.u.s.n : y.u.s.n;
    int c = memcmp(x.u.s.p, y.u.s.p, n);
    return c ? c : (x.u.s.n > y.u.s.n) - (x.u.s.n < y.u.s.n);
  }
  jfail(a, "chat template: cannot order %s and %s", jv_type_name(x), jv_type_name(y));
}

/* Python's repr of a float: the shortest of %.1g .. %.17g that reads back, with ".0" when it
 * looks like an integer. */
static void put_float(jarena *a, jbuf *b, double f) {
  char s[40];
  if (isnan(f)) {
    jbuf_put(a, b, "nan", 3);
    return;
  }
  if (isinf(f)) {
    jbuf_put(a, b, f < 0 ? "-inf" : "inf", f < 0 ? 4 : 3);
    return;
  }
  for (int p = 1; p <= 17; p++) {
    snprintf(s, sizeof s, "%.*g", p, f);
    if (strtod(s, NULL) == f) break;
  }
  if (!strpbrk(s, ".eninf")) strcat(s, ".0");
  jbuf_put(a, b, s, strlen(s));
}

/* Python's repr of a string (single quotes unless it holds one and no double quote). */
static void put_repr(jarena *a, jbuf *b, const char *s, size_t n) {
  char q = memchr(s, '\'', n) && !memchr(s, '"', n) ? '"' : '\'';
  jbuf_put(a, b, &q, 1);
  for (size_t i = 0; i < n; i++) {
    char e[8];
    unsigned char c = (unsigned char)s[i];
    if (c == (unsigned char)q || c == '\\')
      snprintf(e, sizeof e, "\\%c", c);
    else if (c == '\n')
      strcpy(e, "\\n");
    else if (c == '\r')
      strcpy(e, "\\r");
    else if (c == '\t')
      strcpy(e, "\\t");
    else if (c < 0x20 || c == 0x7f)
      snprintf(e, sizeof e, "\\x%02x", c);
    else {
      e[0] = (char)c;
      e[1] = 0;
    }
    jbuf_put(a, b, e, strlen(e));
  }
  jbuf_put(a, b, &q, 1);
}

static void put_repr_value(jarena *a, jbuf *b, jv v) {
  if (v.t == JV_STR)
    put_repr(a, b, v.u.s.p, v.u.s.n);
  else
    jv_print(a, b, v);
}

void jv_print(jarena *a, jbuf *b, jv v) {
  char s[32];
  switch (v.t) {
  case JV_UNDEF:
    return;
  case JV_NONE:
    jbuf_put(a, b, "None", 4);
    return;
  case JV_BOOL:
    jbuf_put(a, b, v.u.b ? "True" : "False", v.u.b ? 4 : 5);
    return;
  case JV_INT:
    snprintf(s, sizeof s, "%lld", v.u.i);
    jbuf_put(a, b, s, strlen(s));
    return;
  case JV_FLOAT:
    put_float(a, b, v.u.f);
    return;
  case JV_STR:
    jbuf_put(a, b, v.u.s.p, v.u.s.n);
    return;
  case JV_LIST:
    jbuf_put(a, b, v.u.l->tuple ? "(" : "[", 1);
    for (size_t i = 0; i < v.u.l->n; i++) {
      if (i) jbuf_put(a, b, ", ", 2);
      put_repr_value(a, b, v.u.l->v[i]);
    }
    if (v.u.l->tuple && v.u.l->n == 1) jbuf_put(a, b, ",", 1);
    jbuf_put(a, b, v.u.l->tuple ? ")" : "]", 1);
    return;
  case JV_DICT:
    jbuf_put(a, b, "{", 1);
    for (size_t i = 0; i < v.u.d->n; i++) {
      if (i) jbuf_put(a, b, ", ", 2);
      put_repr_value(a, b, v.u.d->k[i]);
      jbuf_put(a, b, ": ", 2);
      put_repr_value(a, b, v.u.d->v[i]);
    }
    jbuf_put(a, b, "}", 1);
    return;
  default:
    jfail(a, "chat template: cannot print a %s", jv_type_name(v));
  }
}

static void json_string(jarena *a, jbuf *b, const char *s, size_t n) {
  jbuf_put(a, b, "\"", 1);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    char e[8];
    switch (c) {
    case '"':
      strcpy(e, "\\\"");
      break;
    case '\\':
      strcpy(e, "\\\\");
      break;
    case '\n':
      strcpy(e, "\\n");
      break;
    case '\r':
      strcpy(e, "\\r");
      break;
    case '\t':
      strcpy(e, "\\t");
      break;
    case '\b':
      strcpy(e, "\\b");
      break;
    case '\f':
      strcpy(e, "\\f");
      break;
    default:
      if (c < 0x20 || c == 0x7f)
        snprintf(e, sizeof e, "\\u%04x", c);
      else {
        e[0] = (char)c;
        e[1] = 0;
      }
    }
    jbuf_put(a, b, e, strlen(e));
  }
  jbuf_put(a, b, "\"", 1);
}

static void json_newline(jarena *a, jbuf *b, int indent, int depth) {
  jbuf_put(a, b, "\n", 1);
  for (int i = 0; i < indent * depth; i++) jbuf_put(a, b, " ", 1);
}

void jv_json(jarena *a, jbuf *b, jv v, int indent, int depth) {
  const char *sep = indent >= 0 ? "," : ", ";
  switch (v.t) {
  case JV_UNDEF:
  case JV_NONE:
    jbuf_put(a, b, "null", 4);
    return;
  case JV_BOOL:
    jbuf_put(a, b, v.u.b ? "true" : "false", v.u.b ? 4 : 5);
    return;
  case JV_INT:
  case JV_FLOAT:
    if (v.t == JV_FLOAT && !isfinite(v.u.f))
      jbuf_put(a, b,
               isnan(v.u.f) ? "NaN"
               : v.u.f < 0  ? "-Infinity"
                            : "Infinity",
               isnan(v.u.f) ? 3
               : v.u.f < 0  ? 9
                            : 8);
    else
      jv_print(a, b, v);
    return;
  case JV_STR:
    json_string(a, b, v.u.s.p, v.u.s.n);
    return;
  case JV_LIST:
  case JV_DICT: {
    const int list = v.t == JV_LIST;
    const size_t n = list ? v.u.l->n : v.u.d->n;
    jbuf_put(a, b, list ? "[" : "{", 1);
    for (size_t i = 0; i < n; i++) {
      if (i) jbuf_put(a, b, sep, strlen(sep));
      if (indent >= 0) json_newline(a, b, indent, depth + 1);
      if (list) {
        jv_json(a, b, v.u.l->v[i], indent, depth + 1);
        continue;
      }
      jv k = v.u.d->k[i];
      if (k.t == JV_STR)
        json_string(a, b, k.u.s.p, k.u.s.n);
      else {
        jbuf kb = {0};
        jv_json(a, &kb, k, -1, 0);
        json_string(a, b, kb.p, kb.n);
      }
      jbuf_put(a, b, ": ", 2);
      jv_json(a, b, v.u.d->v[i], indent, depth + 1);
    }
    if (indent >= 0 && n) json_newline(a, b, indent, depth);
    jbuf_put(a, b, list ? "]" : "}", 1);
    return;
  }
  default:
    jfail(a, "chat template: tojson of a %s", jv_type_name(v));
  }
}
