/* The Jinja subset's filters, tests, string and dict methods, and global functions (jinja.h),
 * each with the Python semantics jinja2 gives it. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jinja_eval.h"
#include "utf8.h"

#define NAMEIS(s, n, lit) ((n) == sizeof(lit) - 1 && memcmp((s), (lit), (n)) == 0)

static jv undef(void) {
  return (jv){.t = JV_UNDEF};
}
static jv str_of(jbuf *b) {
  return (jv){.t = JV_STR, .u.s = {b->p ? b->p : "", b->n}};
}

/* Arguments of a call or filter: positional ones (after `skip` of the node's kids) and one
 * keyword looked up by name. */
static const jnode *pos_arg(const jnode *call, size_t k) {
  for (size_t i = 0; i < call->nkids; i++)
    if (call->kids[i]->t != JN_KWARG && k-- == 0) return call->kids[i];
  return NULL;
}
static jv arg(jctx *c, const jnode *call, size_t k, const char *kw) {
  const jnode *n = pos_arg(call, k);
  if (n) return jeval(c, n);
  for (size_t i = 0; kw && i < call->nkids; i++)
    if (call->kids[i]->t == JN_KWARG && call->kids[i]->n == strlen(kw) &&
        memcmp(call->kids[i]->s, kw, call->kids[i]->n) == 0)
      return jeval(c, call->kids[i]->a);
  return undef();
}

static jv need_str(jctx *c, jv v, const char *what) {
  if (v.t != JV_STR)
    jfail(c->a, "chat template: %s needs a string, not a %s", what, jv_type_name(v));
  return v;
}

/* Python's str.isspace for one code point. */
static int py_space(uint32_t cp) {
  return kr_is_space(cp) || (cp >= 0x1c && cp <= 0x1f);
}

/* str.strip / lstrip / rstrip (which: 1 left, 2 right, 3 both), chars NULL for whitespace. */
static jv strip(jctx *c, jv s, jv chars, int which) {
  const char *p = s.u.s.p;
  size_t b = 0, e = s.u.s.n;
  int ws = chars.t == JV_UNDEF || chars.t == JV_NONE;
  if (!ws) need_str(c, chars, "strip's argument");
#define STRIPPABLE(cp, bytes, len)                                                                 \
  (ws ? py_space(cp) : (memmem(chars.u.s.p, chars.u.s.n, (bytes), (len)) != NULL))
  while ((which & 1) && b < e) {
    uint32_t cp;
    size_t l = kr_utf8_next(p + b, e - b, &cp);
    if (!STRIPPABLE(cp, p + b, l)) break;
    b += l;
  }
  while ((which & 2) && e > b) {
    size_t k = e - 1;
    while (k > b && ((unsigned char)p[k] & 0xc0) == 0x80) k--;
    uint32_t cp;
    size_t l = kr_utf8_next(p + k, e - k, &cp);
    if (!STRIPPABLE(cp, p + k, l)) break;
    e = k;
  }
#undef STRIPPABLE
  return (jv){.t = JV_STR, .u.s = {p + b, e - b}};
}

static jv change_case(jctx *c, jv s, int mode /* 0 lower 1 upper 2 title 3 capitalize */) {
  char *o = jalloc(c->a, s.u.s.n + 1);
  int start = 1;
  for (size_t i = 0; i < s.u.s.n; i++) {
    unsigned char ch = (unsigned char)s.u.s.p[i];
    int up = mode == 1 || ((mode == 2 || mode == 3) && start);
    o[i] = (char)(ch < 128 ? (up ? toupper(ch) : tolower(ch)) : ch);
    if (mode == 3)
      start = 0;
    else if (mode == 2)
      start = !isalpha(ch);
  }
  return (jv){.t = JV_STR, .u.s = {o, s.u.s.n}};
}

static int starts_ends(jctx *c, jv s, jv fix, int end) {
  if (fix.t == JV_LIST) {
    for (size_t i = 0; i < fix.u.l->n; i++)
      if (starts_ends(c, s, fix.u.l->v[i], end)) return 1;
    return 0;
  }
  need_str(c, fix, end ? "endswith" : "startswith");
  if (fix.u.s.n > s.u.s.n) return 0;
  return memcmp(s.u.s.p + (end ? s.u.s.n - fix.u.s.n : 0), fix.u.s.p, fix.u.s.n) == 0;
}

static jv split(jctx *c, jv s, jv sep, jv maxsplit) {
  jv out = jv_list(c->a);
  long long max = maxsplit.t == JV_INT ? maxsplit.u.i : -1;
  const char *p = s.u.s.p;
  size_t n = s.u.s.n, i = 0;
  if (sep.t == JV_UNDEF || sep.t == JV_NONE) {
    for (;;) {
      while (i < n && isspace((unsigned char)p[i])) i++;
      if (i >= n) break;
      size_t b = i;
      if (max >= 0 && (long long)out.u.l->n == max) {
        size_t e = n;
        while (e > b && isspace((unsigned char)p[e - 1])) e--;
        jlist_push(c->a, out.u.l, (jv){.t = JV_STR, .u.s = {p + b, e - b}});
        break;
      }
      while (i < n && !isspace((unsigned char)p[i])) i++;
      jlist_push(c->a, out.u.l, (jv){.t = JV_STR, .u.s = {p + b, i - b}});
    }
    return out;
  }
  need_str(c, sep, "split's separator");
  if (sep.u.s.n == 0) jfail(c->a, "chat template: split with an empty separator");
  size_t b = 0;
  while (i + sep.u.s.n <= n && (max < 0 || (long long)out.u.l->n < max)) {
    if (memcmp(p + i, sep.u.s.p, sep.u.s.n) == 0) {
      jlist_push(c->a, out.u.l, (jv){.t = JV_STR, .u.s = {p + b, i - b}});
      i += sep.u.s.n;
      b = i;
    } else {
      i++;
    }
  }
  jlist_push(c->a, out.u.l, (jv){.t = JV_STR, .u.s = {p + b, n - b}});
  return out;
}

static jv replace(jctx *c, jv s, jv old, jv new_, jv count) {
  need_str(c, old, "replace");
  need_str(c, new_, "replace");
  long long max = count.t == JV_INT ? count.u.i : -1;
  jbuf b = {0};
  jbuf_put(c->a, &b, "", 0);
  size_t i = 0;
  long long done = 0;
  while (i <= s.u.s.n) {
    if ((max < 0 || done < max) && i + old.u.s.n <= s.u.s.n &&
        memcmp(s.u.s.p + i, old.u.s.p, old.u.s.n) == 0) {
      jbuf_put(c->a, &b, new_.u.s.p, new_.u.s.n);
      done++;
      if (old.u.s.n == 0) {
        if (i < s.u.s.n) jbuf_put(c->a, &b, s.u.s.p + i, 1);
        i++;
      } else {
        i += old.u.s.n;
      }
    } else {
      if (i < s.u.s.n) jbuf_put(c->a, &b, s.u.s.p + i, 1);
      i++;
    }
  }
  return str_of(&b);
}

static jv dict_items(jctx *c, jv d, int what /* 0 items 1 keys 2 values */) {
  jv out = jv_list(c->a);
  for (size_t i = 0; i < d.u.d->n; i++) {
    if (what == 1)
      jlist_push(c->a, out.u.l, d.u.d->k[i]);
    else if (what == 2)
      jlist_push(c->a, out.u.l, d.u.d->v[i]);
    else {
      jv pair = jv_list(c->a);
      pair.u.l->tuple = 1;
      jlist_push(c->a, pair.u.l, d.u.d->k[i]);
      jlist_push(c->a, pair.u.l, d.u.d->v[i]);
      jlist_push(c->a, out.u.l, pair);
    }
  }
  return out;
}

jv jmethod(jctx *c, jv obj, const jnode *attr, const jnode *call) {
  const char *m = attr->s;
  const size_t n = attr->n;
  if (obj.t == JV_STR) {
    if (NAMEIS(m, n, "strip")) return strip(c, obj, arg(c, call, 0, NULL), 3);
    if (NAMEIS(m, n, "lstrip")) return strip(c, obj, arg(c, call, 0, NULL), 1);
    if (NAMEIS(m, n, "rstrip")) return strip(c, obj, arg(c, call, 0, NULL), 2);
    if (NAMEIS(m, n, "startswith")) return jv_bool(starts_ends(c, obj, arg(c, call, 0, NULL), 0));
    if (NAMEIS(m, n, "endswith")) return jv_bool(starts_ends(c, obj, arg(c, call, 0, NULL), 1));
    if (NAMEIS(m, n, "split"))
      return split(c, obj, arg(c, call, 0, "sep"), arg(c, call, 1, "maxsplit"));
    if (NAMEIS(m, n, "lower")) return change_case(c, obj, 0);
    if (NAMEIS(m, n, "upper")) return change_case(c, obj, 1);
    if (NAMEIS(m, n, "title")) return change_case(c, obj, 2);
    if (NAMEIS(m, n, "capitalize")) return change_case(c, change_case(c, obj, 0), 3);
    if (NAMEIS(m, n, "replace"))
      return replace(c, obj, arg(c, call, 0, NULL), arg(c, call, 1, NULL), arg(c, call, 2, NULL));
    if (NAMEIS(m, n, "find") || NAMEIS(m, n, "count")) {
      jv sub = need_str(c, arg(c, call, 0, NULL), "find");
      long long found = -1, cnt = 0;
      for (size_t i = 0; i + sub.u.s.n <= obj.u.s.n; i++)
        if (memcmp(obj.u.s.p + i, sub.u.s.p, sub.u.s.n) == 0) {
          if (found < 0) found = (long long)i;
          cnt++;
          if (sub.u.s.n) i += sub.u.s.n - 1;
        }
      return jv_int(m[0] == 'f' ? found : cnt);
    }
  } else if (obj.t == JV_DICT) {
    if (NAMEIS(m, n, "items")) return dict_items(c, obj, 0);
    if (NAMEIS(m, n, "keys")) return dict_items(c, obj, 1);
    if (NAMEIS(m, n, "values")) return dict_items(c, obj, 2);
    if (NAMEIS(m, n, "get")) {
      jv k = arg(c, call, 0, NULL),
         *v = k.t == JV_STR ? jdict_get(obj.u.d, k.u.s.p, k.u.s.n) : NULL;
      if (v) return *v;
      jv d = arg(c, call, 1, NULL);
      return d.t == JV_UNDEF ? (jv){.t = JV_NONE} : d;
    }
  }
  jfail(c->a, "chat template: line %d: a %s has no method '%.*s' here", call->line,
        jv_type_name(obj), (int)n, m);
}

/* ---- filters ------------------------------------------------------------------------------- */
static long long length(jctx *c, jv v) {
  if (v.t == JV_STR) {
    long long k = 0;
    for (size_t i = 0; i < v.u.s.n; i++) k += ((unsigned char)v.u.s.p[i] & 0xc0) != 0x80;
    return k;
  }
  if (v.t == JV_LIST) return (long long)v.u.l->n;
  if (v.t == JV_DICT) return (long long)v.u.d->n;
  if (v.t == JV_UNDEF) return 0;
  jfail(c->a, "chat template: length of a %s", jv_type_name(v));
}

static jv to_list(jctx *c, jv v) {
  if (v.t == JV_LIST) return v;
  if (v.t == JV_DICT) return dict_items(c, v, 1);
  jv out = jv_list(c->a);
  if (v.t == JV_STR)
    for (size_t i = 0; i < v.u.s.n;) {
      uint32_t cp;
      size_t l = kr_utf8_next(v.u.s.p + i, v.u.s.n - i, &cp);
      jlist_push(c->a, out.u.l, (jv){.t = JV_STR, .u.s = {v.u.s.p + i, l}});
      i += l;
    }
  else if (v.t != JV_UNDEF)
    jfail(c->a, "chat template: a %s is not iterable", jv_type_name(v));
  return out;
}

static jv attribute(jctx *c, jv v, jv name) {
  if (v.t != JV_DICT || name.t != JV_STR) return undef();
  jv *r = jdict_get(v.u.d, name.u.s.p, name.u.s.n);
  (void)c;
  return r ? *r : undef();
}

jv jfilter(jctx *c, const jnode *n) {
  const char *f = n->s;
  const size_t k = n->n;
  jv v = jeval(c, n->a);
  if (NAMEIS(f, k, "default") || NAMEIS(f, k, "d")) {
    jv boolean = arg(c, n, 1, "boolean");
    if (v.t == JV_UNDEF || (jv_truthy(boolean) && !jv_truthy(v))) {
      jv d = arg(c, n, 0, "default_value");
      return d.t == JV_UNDEF ? jv_cstr("") : d;
    }
    return v;
  }
  if (NAMEIS(f, k, "trim")) return strip(c, need_str(c, v, "trim"), arg(c, n, 0, "chars"), 3);
  if (NAMEIS(f, k, "length") || NAMEIS(f, k, "count")) return jv_int(length(c, v));
  if (NAMEIS(f, k, "tojson")) {
    jv indent = arg(c, n, 0, "indent");
    jbuf b = {0};
    jbuf_put(c->a, &b, "", 0);
    jv_json(c->a, &b, v, indent.t == JV_INT ? (int)indent.u.i : -1, 0);
    return str_of(&b);
  }
  if (NAMEIS(f, k, "string")) {
    if (v.t == JV_STR) return v;
    jbuf b = {0};
    jbuf_put(c->a, &b, "", 0);
    jv_print(c->a, &b, v);
    return str_of(&b);
  }
  if (NAMEIS(f, k, "safe")) return v;
  if (NAMEIS(f, k, "upper")) return change_case(c, need_str(c, v, "upper"), 1);
  if (NAMEIS(f, k, "lower")) return change_case(c, need_str(c, v, "lower"), 0);
  if (NAMEIS(f, k, "title")) return change_case(c, need_str(c, v, "title"), 2);
  if (NAMEIS(f, k, "capitalize"))
    return change_case(c, change_case(c, need_str(c, v, "capitalize"), 0), 3);
  if (NAMEIS(f, k, "replace"))
    return replace(c, need_str(c, v, "replace"), arg(c, n, 0, NULL), arg(c, n, 1, NULL),
                   arg(c, n, 2, "count"));
  if (NAMEIS(f, k, "list")) return to_list(c, v);
  if (NAMEIS(f, k, "items")) {
    if (v.t != JV_DICT) jfail(c->a, "chat template: items of a %s", jv_type_name(v));
    return dict_items(c, v, 0);
  }
  if (NAMEIS(f, k, "first") || NAMEIS(f, k, "last")) {
    jv l = to_list(c, v);
    if (!l.u.l->n) return undef();
    return l.u.l->v[f[0] == 'f' ? 0 : l.u.l->n - 1];
  }
  if (NAMEIS(f, k, "reverse")) {
    jv l = to_list(c, v), out = jv_list(c->a);
    for (size_t i = l.u.l->n; i-- > 0;) jlist_push(c->a, out.u.l, l.u.l->v[i]);
    if (v.t != JV_STR) return out;
    jbuf b = {0};
    jbuf_put(c->a, &b, "", 0);
    for (size_t i = 0; i < out.u.l->n; i++) jv_print(c->a, &b, out.u.l->v[i]);
    return str_of(&b);
  }
  if (NAMEIS(f, k, "join")) {
    jv l = to_list(c, v), sep = arg(c, n, 0, "d"), at = arg(c, n, 1, "attribute");
    jbuf b = {0};
    jbuf_put(c->a, &b, "", 0);
    for (size_t i = 0; i < l.u.l->n; i++) {
      if (i && sep.t == JV_STR) jbuf_put(c->a, &b, sep.u.s.p, sep.u.s.n);
      jv_print(c->a, &b, at.t == JV_UNDEF ? l.u.l->v[i] : attribute(c, l.u.l->v[i], at));
    }
    return str_of(&b);
  }
  if (NAMEIS(f, k, "map")) {
    jv l = to_list(c, v), at = arg(c, n, 0, "attribute"), out = jv_list(c->a);
    if (at.t != JV_STR) jfail(c->a, "chat template: map needs attribute=");
    for (size_t i = 0; i < l.u.l->n; i++) jlist_push(c->a, out.u.l, attribute(c, l.u.l->v[i], at));
    return out;
  }
  if (NAMEIS(f, k, "selectattr") || NAMEIS(f, k, "rejectattr")) {
    jv l = to_list(c, v), at = arg(c, n, 0, NULL), test = arg(c, n, 1, NULL),
       want = arg(c, n, 2, NULL), out = jv_list(c->a);
    for (size_t i = 0; i < l.u.l->n; i++) {
      jv x = attribute(c, l.u.l->v[i], at);
      int keep;
      if (test.t == JV_UNDEF)
        keep = jv_truthy(x);
      else if (test.t == JV_STR &&
               (NAMEIS(test.u.s.p, test.u.s.n, "equalto") || NAMEIS(test.u.s.p, test.u.s.n, "eq") ||
                NAMEIS(test.u.s.p, test.u.s.n, "==")))
        keep = jv_equal(x, want);
      else if (test.t == JV_STR && NAMEIS(test.u.s.p, test.u.s.n, "defined"))
        keep = x.t != JV_UNDEF;
      else if (test.t == JV_STR && NAMEIS(test.u.s.p, test.u.s.n, "none"))
        keep = x.t == JV_NONE;
      else
        jfail(c->a, "chat template: line %d: selectattr test not supported here", n->line);
      if (keep == (f[0] == 's')) jlist_push(c->a, out.u.l, l.u.l->v[i]);
    }
    return out;
  }
  if (NAMEIS(f, k, "int")) {
    if (v.t == JV_FLOAT) return jv_int((long long)v.u.f);
    if (v.t == JV_STR) return jv_int(strtoll(v.u.s.p, NULL, 10));
    if (v.t == JV_INT || v.t == JV_BOOL) return jv_int(v.t == JV_INT ? v.u.i : v.u.b);
    return jv_int(0);
  }
  if (NAMEIS(f, k, "float")) {
    double x = v.t == JV_FLOAT ? v.u.f
               : v.t == JV_INT ? (double)v.u.i
               : v.t == JV_STR ? strtod(v.u.s.p, NULL)
                               : 0.0;
    return (jv){.t = JV_FLOAT, .u.f = x};
  }
  if (NAMEIS(f, k, "abs")) {
    if (v.t == JV_FLOAT) return (jv){.t = JV_FLOAT, .u.f = v.u.f < 0 ? -v.u.f : v.u.f};
    if (v.t == JV_INT) return jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
  }
  jfail(c->a, "chat template: line %d: filter '%.*s' not supported", n->line, (int)k, f);
}

/* ---- tests --------------------------------------------------------------------------------- */
int jtest(jctx *c, const jnode *n) {
  const char *t = n->s;
  const size_t k = n->n;
  jv v = jeval(c, n->a);
  if (NAMEIS(t, k, "defined")) return v.t != JV_UNDEF;
  if (NAMEIS(t, k, "undefined")) return v.t == JV_UNDEF;
  if (NAMEIS(t, k, "none")) return v.t == JV_NONE;
  if (NAMEIS(t, k, "string")) return v.t == JV_STR;
  if (NAMEIS(t, k, "number")) return v.t == JV_INT || v.t == JV_FLOAT;
  if (NAMEIS(t, k, "integer")) return v.t == JV_INT;
  if (NAMEIS(t, k, "float")) return v.t == JV_FLOAT;
  if (NAMEIS(t, k, "boolean")) return v.t == JV_BOOL;
  if (NAMEIS(t, k, "true")) return v.t == JV_BOOL && v.u.b;
  if (NAMEIS(t, k, "false")) return v.t == JV_BOOL && !v.u.b;
  if (NAMEIS(t, k, "mapping")) return v.t == JV_DICT;
  if (NAMEIS(t, k, "sequence") || NAMEIS(t, k, "iterable"))
    return v.t == JV_LIST || v.t == JV_STR || v.t == JV_DICT;
  if (NAMEIS(t, k, "callable")) return v.t == JV_MACRO || v.t == JV_GLOBAL;
  if (NAMEIS(t, k, "odd") || NAMEIS(t, k, "even")) {
    if (v.t != JV_INT) jfail(c->a, "chat template: '%.*s' of a %s", (int)k, t, jv_type_name(v));
    return (int)((v.u.i % 2 != 0) == (t[0] == 'o'));
  }
  if (NAMEIS(t, k, "divisibleby")) {
    jv d = arg(c, n, 0, NULL);
    if (v.t != JV_INT || d.t != JV_INT || d.u.i == 0)
      jfail(c->a, "chat template: line %d: divisibleby needs nonzero integers", n->line);
    return v.u.i % d.u.i == 0;
  }
  if (NAMEIS(t, k, "eq") || NAMEIS(t, k, "equalto") || NAMEIS(t, k, "sameas"))
    return jv_equal(v, arg(c, n, 0, NULL));
  if (NAMEIS(t, k, "in")) return jv_contains(c, arg(c, n, 0, NULL), v);
  jfail(c->a, "chat template: line %d: test '%.*s' not supported", n->line, (int)k, t);
}

/* ---- globals ------------------------------------------------------------------------------- */
jv jglobal(const char *s, size_t n) {
  static const struct {
    const char *name;
    int id;
  } g[] = {{"range", JG_RANGE},
           {"namespace", JG_NAMESPACE},
           {"dict", JG_DICT},
           {"raise_exception", JG_RAISE},
           {"strftime_now", JG_STRFTIME}};
  for (size_t i = 0; i < sizeof g / sizeof *g; i++)
    if (strlen(g[i].name) == n && memcmp(g[i].name, s, n) == 0)
      return (jv){.t = JV_GLOBAL, .u.global = g[i].id};
  return undef();
}

jv jcall_global(jctx *c, int global, const jnode *call) {
  switch (global) {
  case JG_RANGE: {
    jv x = arg(c, call, 0, NULL), y = arg(c, call, 1, NULL), z = arg(c, call, 2, NULL);
    long long lo = 0, hi, st = 1;
    if (y.t == JV_UNDEF) {
      hi = x.t == JV_INT ? x.u.i : 0;
    } else {
      lo = x.t == JV_INT ? x.u.i : 0;
      hi = y.t == JV_INT ? y.u.i : 0;
      if (z.t == JV_INT) st = z.u.i;
    }
    if (st == 0) jfail(c->a, "chat template: range step cannot be zero");
    jv out = jv_list(c->a);
    for (long long i = lo; st > 0 ? i < hi : i > hi; i += st) {
      if (out.u.l->n >= 1000000) jfail(c->a, "chat template: range too long");
      jlist_push(c->a, out.u.l, jv_int(i));
    }
    return out;
  }
  case JG_NAMESPACE:
  case JG_DICT: {
    jv d = jv_dict(c->a);
    d.u.d->ns = global == JG_NAMESPACE;
    jv first = arg(c, call, 0, NULL);
    if (first.t == JV_DICT)
      for (size_t i = 0; i < first.u.d->n; i++)
        jdict_set(c->a, d.u.d, first.u.d->k[i], first.u.d->v[i]);
    for (size_t i = 0; i < call->nkids; i++)
      if (call->kids[i]->t == JN_KWARG)
        jdict_set(c->a, d.u.d, jv_str(c->a, call->kids[i]->s, call->kids[i]->n),
                  jeval(c, call->kids[i]->a));
    return d;
  }
  case JG_RAISE: {
    jv msg = arg(c, call, 0, NULL);
    jbuf b = {0};
    jbuf_put(c->a, &b, "", 0);
    jv_print(c->a, &b, msg);
    jfail(c->a, "chat template: %s", b.p);
  }
  default: {
    jv fmt = need_str(c, arg(c, call, 0, NULL), "strftime_now");
    char f[256], out[256];
    snprintf(f, sizeof f, "%.*s", (int)fmt.u.s.n, fmt.u.s.p);
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    size_t m = strftime(out, sizeof out, f, &tm);
    return jv_str(c->a, out, m);
  }
  }
}
