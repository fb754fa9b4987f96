/* The Jinja subset's evaluator (jinja.h): statements, expressions, scopes and loops. Filters,
 * tests, methods and globals: jinja_builtins.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"
#include "jinja_eval.h"

/* The scope stack: the globals at the bottom, one frame per loop and macro call. */
static jv *lookup(jctx *c, const char *s, size_t n) {
  for (size_t i = c->nframes; i-- > 0;) {
    jv *v = jdict_get(c->frames[i], s, n);
    if (v) return v;
  }
  return NULL;
}

static void push_frame(jctx *c) {
  if (c->nframes == sizeof c->frames / sizeof *c->frames)
    jfail(c->a, "chat template: loops and macro calls nested too deep");
  c->frames[c->nframes++] = jv_dict(c->a).u.d;
}

static void assign(jctx *c, const char *s, size_t n, jv v) {
  jdict_set(c->a, c->frames[c->nframes - 1], jv_str(c->a, s, n), v);
}

static long long as_int(jctx *c, jv v, const char *what) {
  if (v.t == JV_INT) return v.u.i;
  if (v.t == JV_BOOL) return v.u.b;
  if (v.t == JV_NONE || v.t == JV_UNDEF) return 0;
  jfail(c->a, "chat template: %s must be an integer, not a %s", what, jv_type_name(v));
}

/* Python's slice of a length-n sequence: the indices start, start + step, ... */
static size_t slice_indices(jctx *c, size_t n, const jnode *node, long long *start,
                            long long *step) {
  jv v[3];
  for (int i = 0; i < 3; i++) v[i] = node->kids[i] ? jeval(c, node->kids[i]) : (jv){.t = JV_NONE};
  long long st = v[2].t == JV_NONE ? 1 : as_int(c, v[2], "a slice step");
  if (st == 0) jfail(c->a, "chat template: slice step cannot be zero");
  long long len = (long long)n, lo, hi;
  if (v[0].t == JV_NONE)
    lo = st > 0 ? 0 : len - 1;
  else {
    lo = as_int(c, v[0], "a slice start");
    if (lo < 0) lo += len;
    lo = st > 0 ? (lo < 0 ? 0 : lo > len ? len : lo) : (lo < 0 ? -1 : lo >= len ? len - 1 : lo);
  }
  if (v[1].t == JV_NONE)
    hi = st > 0 ? len : -1;
  else {
    hi = as_int(c, v[1], "a slice end");
    if (hi < 0) hi += len;
    hi = st > 0 ? (hi < 0 ? 0 : hi > len ? len : hi) : (hi < -1 ? -1 : hi >= len ? len - 1 : hi);
  }
  *start = lo;
  *step = st;
  if (st > 0) return hi > lo ? (size_t)((hi - lo + st - 1) / st) : 0;
  return lo > hi ? (size_t)((lo - hi - st - 1) / -st) : 0;
}

/* The code point starts of a string (so that indices count characters, as Python's do). */
static size_t utf8_chars(jctx *c, jv s, size_t **starts) {
  size_t n = 0;
  size_t *st = jalloc(c->a, (s.u.s.n + 1) * sizeof *st);
  for (size_t i = 0; i < s.u.s.n; i++)
    if (((unsigned char)s.u.s.p[i] & 0xc0) != 0x80) st[n++] = i;
  st[n] = s.u.s.n;
  *starts = st;
  return n;
}

static jv item(jctx *c, jv obj, jv key) {
  if (obj.t == JV_DICT) {
    if (key.t == JV_STR) {
      jv *v = jdict_get(obj.u.d, key.u.s.p, key.u.s.n);
      return v ? *v : (jv){.t = JV_UNDEF};
    }
    for (size_t i = 0; i < obj.u.d->n; i++)
      if (jv_equal(obj.u.d->k[i], key)) return obj.u.d->v[i];
    return (jv){.t = JV_UNDEF};
  }
  if (obj.t == JV_LIST || obj.t == JV_STR) {
    if (key.t != JV_INT) return (jv){.t = JV_UNDEF};
    size_t *st = NULL;
    long long n = obj.t == JV_LIST ? (long long)obj.u.l->n : (long long)utf8_chars(c, obj, &st);
    long long i = key.u.i < 0 ? key.u.i + n : key.u.i;
    if (i < 0 || i >= n) return (jv){.t = JV_UNDEF};
    if (obj.t == JV_LIST) return obj.u.l->v[i];
    return jv_str(c->a, obj.u.s.p + st[i], st[i + 1] - st[i]);
  }
  if (obj.t == JV_UNDEF) jfail(c->a, "chat template: an undefined value has no items");
  return (jv){.t = JV_UNDEF};
}

static jv slice(jctx *c, jv obj, const jnode *node) {
  long long start, step;
  if (obj.t == JV_LIST) {
    size_t m = slice_indices(c, obj.u.l->n, node, &start, &step);
    jv out = jv_list(c->a);
    for (size_t k = 0; k < m; k++)
      jlist_push(c->a, out.u.l, obj.u.l->v[start + (long long)k * step]);
    return out;
  }
  if (obj.t == JV_STR) {
    size_t *st;
    size_t n = utf8_chars(c, obj, &st);
    size_t m = slice_indices(c, n, node, &start, &step);
    jbuf b = {0};
    jbuf_put(c->a, &b, "", 0);
    for (size_t k = 0; k < m; k++) {
      long long i = start + (long long)k * step;
      jbuf_put(c->a, &b, obj.u.s.p + st[i], st[i + 1] - st[i]);
    }
    return (jv){.t = JV_STR, .u.s = {b.p, b.n}};
  }
  jfail(c->a, "chat template: line %d: cannot slice a %s", node->line, jv_type_name(obj));
}

static jv arith(jctx *c, int op, jv x, jv y, int line) {
  if (op == JOP_CONCAT) {
    jbuf b = {0};
    jbuf_put(c->a, &b, "", 0);
    jv_print(c->a, &b, x);
    jv_print(c->a, &b, y);
    return (jv){.t = JV_STR, .u.s = {b.p, b.n}};
  }
  if (op == JOP_ADD && x.t == JV_STR && y.t == JV_STR) {
    jbuf b = {0};
    jbuf_put(c->a, &b, x.u.s.p, x.u.s.n);
    jbuf_put(c->a, &b, y.u.s.p, y.u.s.n);
    return (jv){.t = JV_STR, .u.s = {b.p, b.n}};
  }
  if (op == JOP_ADD && x.t == JV_LIST && y.t == JV_LIST) {
    jv out = jv_list(c->a);
    for (size_t i = 0; i < x.u.l->n; i++) jlist_push(c->a, out.u.l, x.u.l->v[i]);
    for (size_t i = 0; i < y.u.l->n; i++) jlist_push(c->a, out.u.l, y.u.l->v[i]);
    return out;
  }
  if (op == JOP_MUL && ((x.t == JV_STR && y.t == JV_INT) || (x.t == JV_INT && y.t == JV_STR))) {
    jv s = x.t == JV_STR ? x : y;
    long long k = x.t == JV_INT ? x.u.i : y.u.i;
    jbuf b = {0};
    jbuf_put(c->a, &b, "", 0);
    for (long long i = 0; i < k; i++) jbuf_put(c->a, &b, s.u.s.p, s.u.s.n);
    return (jv){.t = JV_STR, .u.s = {b.p, b.n}};
  }
  int xi = x.t == JV_INT || x.t == JV_BOOL, yi = y.t == JV_INT || y.t == JV_BOOL;
  if ((!xi && x.t != JV_FLOAT) || (!yi && y.t != JV_FLOAT))
    jfail(c->a, "chat template: line %d: unsupported operand types %s and %s", line,
          jv_type_name(x), jv_type_name(y));
  double fx = x.t == JV_FLOAT ? x.u.f : (double)as_int(c, x, ""),
         fy = y.t == JV_FLOAT ? y.u.f : (double)as_int(c, y, "");
  if (xi && yi && op != JOP_DIV) {
    long long a = as_int(c, x, ""), b = as_int(c, y, "");
    if ((op == JOP_FLOORDIV || op == JOP_MOD) && b == 0)
      jfail(c->a, "chat template: line %d: division by zero", line);
    switch (op) {
    case JOP_ADD:
      return jv_int(a + b);
    case JOP_SUB:
      return jv_int(a - b);
    case JOP_MUL:
      return jv_int(a * b);
    case JOP_FLOORDIV:
      return jv_int(a / b - ((a % b != 0) && ((a < 0) != (b < 0))));
    default: {
      long long m = a % b;
      return jv_int(m != 0 && ((m < 0) != (b < 0)) ? m + b : m);
    }
    }
  }
  if ((op == JOP_DIV || op == JOP_FLOORDIV || op == JOP_MOD) && fy == 0)
    jfail(c->a, "chat template: line %d: division by zero", line);
  double r;
  switch (op) {
  case JOP_ADD:
    r = fx + fy;
    break;
  case JOP_SUB:
    r = fx - fy;
    break;
  case JOP_MUL:
    r = fx * fy;
    break;
  case JOP_DIV:
    r = fx / fy;
    break;
  case JOP_FLOORDIV:
    r = floor(fx / fy);
    break;
  default:
    r = fx - fy * floor(fx / fy);
  }
  return (jv){.t = JV_FLOAT, .u.f = r};
}

int jv_contains(jctx *c, jv hay, jv needle) {
  if (hay.t == JV_STR) {
    if (needle.t != JV_STR) jfail(c->a, "chat template: 'in <string>' needs a string");
    if (needle.u.s.n == 0) return 1;
    for (size_t i = 0; i + needle.u.s.n <= hay.u.s.n; i++)
      if (memcmp(hay.u.s.p + i, needle.u.s.p, needle.u.s.n) == 0) return 1;
    return 0;
  }
  if (hay.t == JV_LIST) {
    for (size_t i = 0; i < hay.u.l->n; i++)
      if (jv_equal(hay.u.l->v[i], needle)) return 1;
    return 0;
  }
  if (hay.t == JV_DICT) return item(c, hay, needle).t != JV_UNDEF;
  jfail(c->a, "chat template: 'in' of a %s", jv_type_name(hay));
}

static jv call_macro(jctx *c, const jnode *m, const jnode *call) {
  push_frame(c);
  size_t pos = 0;
  for (size_t i = 0; i < call->nkids; i++) {
    const jnode *arg = call->kids[i];
    if (arg->t == JN_KWARG) {
      assign(c, arg->s, arg->n, jeval(c, arg->a));
    } else {
      if (pos >= m->nkids)
        jfail(c->a, "chat template: macro %.*s takes %zu arguments", (int)m->n, m->s, m->nkids);
      assign(c, m->kids[pos]->s, m->kids[pos]->n, jeval(c, arg));
      pos++;
    }
  }
  for (size_t i = 0; i < m->nkids; i++)
    if (!jdict_get(c->frames[c->nframes - 1], m->kids[i]->s, m->kids[i]->n))
      assign(c, m->kids[i]->s, m->kids[i]->n,
             m->kids[i]->a ? jeval(c, m->kids[i]->a) : (jv){.t = JV_UNDEF});
  jbuf *saved = c->out, b = {0};
  jbuf_put(c->a, &b, "", 0);
  c->out = &b;
  jexec(c, m->b);
  c->out = saved;
  c->nframes--;
  c->flow = 0;
  return (jv){.t = JV_STR, .u.s = {b.p, b.n}};
}

jv jeval(jctx *c, const jnode *n) {
  switch (n->t) {
  case JN_STR:
    return (jv){.t = JV_STR, .u.s = {n->s, n->n}};
  case JN_INT:
    return jv_int(n->i);
  case JN_FLOAT:
    return (jv){.t = JV_FLOAT, .u.f = n->f};
  case JN_BOOL:
    return jv_bool((int)n->i);
  case JN_NONE:
    return (jv){.t = JV_NONE};
  case JN_LIST: {
    jv l = jv_list(c->a);
    l.u.l->tuple = (int)n->i;
    for (size_t i = 0; i < n->nkids; i++) jlist_push(c->a, l.u.l, jeval(c, n->kids[i]));
    return l;
  }
  case JN_DICT: {
    jv d = jv_dict(c->a);
    for (size_t i = 0; i < n->nkids; i++)
      jdict_set(c->a, d.u.d, jeval(c, n->kids[i]->a), jeval(c, n->kids[i]->b));
    return d;
  }
  case JN_NAME: {
    jv *v = lookup(c, n->s, n->n);
    if (v) return *v;
    return jglobal(n->s, n->n);
  }
  case JN_ATTR: {
    jv obj = jeval(c, n->a);
    if (obj.t == JV_DICT) return item(c, obj, (jv){.t = JV_STR, .u.s = {n->s, n->n}});
    if (obj.t == JV_UNDEF)
      jfail(c->a, "chat template: line %d: '%.*s' of an undefined value", n->line, (int)n->n, n->s);
    return (jv){.t = JV_UNDEF};
  }
  case JN_ITEM: {
    jv obj = jeval(c, n->a);
    return item(c, obj, jeval(c, n->b));
  }
  case JN_SLICE:
    return slice(c, jeval(c, n->a), n);
  case JN_CALL: {
    if (n->a->t == JN_ATTR) {
      jv obj = jeval(c, n->a->a);
      if (obj.t != JV_DICT || !jdict_get(obj.u.d, n->a->s, n->a->n))
        return jmethod(c, obj, n->a, n);
    }
    jv f = jeval(c, n->a);
    if (f.t == JV_MACRO) return call_macro(c, f.u.macro, n);
    if (f.t == JV_GLOBAL) return jcall_global(c, f.u.global, n);
    jfail(c->a, "chat template: line %d: a %s is not callable", n->line, jv_type_name(f));
  }
  case JN_FILTER:
    return jfilter(c, n);
  case JN_TEST: {
    int r = jtest(c, n);
    return jv_bool(n->i ? !r : r);
  }
  case JN_NOT:
    return jv_bool(!jv_truthy(jeval(c, n->a)));
  case JN_NEG: {
    jv v = jeval(c, n->a);
    if (v.t == JV_FLOAT) return (jv){.t = JV_FLOAT, .u.f = -v.u.f};
    return jv_int(-as_int(c, v, "the operand of -"));
  }
  case JN_AND: {
    jv x = jeval(c, n->a);
    return jv_truthy(x) ? jeval(c, n->b) : x;
  }
  case JN_OR: {
    jv x = jeval(c, n->a);
    return jv_truthy(x) ? x : jeval(c, n->b);
  }
  case JN_COND:
    if (jv_truthy(jeval(c, n->a))) return jeval(c, n->b);
    return n->c ? jeval(c, n->c) : (jv){.t = JV_UNDEF};
  case JN_BIN: {
    jv x = jeval(c, n->a), y = jeval(c, n->b);
    switch (n->i) {
    case JOP_EQ:
      return jv_bool(jv_equal(x, y));
    case JOP_NE:
      return jv_bool(!jv_equal(x, y));
    case JOP_LT:
      return jv_bool(jv_compare(c->a, x, y) < 0);
    case JOP_LE:
      return jv_bool(jv_compare(c->a, x, y) <= 0);
    case JOP_GT:
      return jv_bool(jv_compare(c->a, x, y) > 0);
    case JOP_GE:
      return jv_bool(jv_compare(c->a, x, y) >= 0);
    case JOP_IN:
      return jv_bool(jv_contains(c, y, x));
    case JOP_NOTIN:
      return jv_bool(!jv_contains(c, y, x));
    default:
      return arith(c, (int)n->i, x, y, n->line);
    }
  }
  default:
    jfail(c->a, "chat template: line %d: not an expression", n->line);
  }
}

/* The items a for loop walks: a list's values, a dict's keys, a string's characters. */
static jlist *iterable(jctx *c, jv v, int line) {
  if (v.t == JV_LIST) return v.u.l;
  jv l = jv_list(c->a);
  if (v.t == JV_DICT)
    for (size_t i = 0; i < v.u.d->n; i++) jlist_push(c->a, l.u.l, v.u.d->k[i]);
  else if (v.t == JV_STR) {
    size_t *st, n = utf8_chars(c, v, &st);
    for (size_t i = 0; i < n; i++)
      jlist_push(c->a, l.u.l, jv_str(c->a, v.u.s.p + st[i], st[i + 1] - st[i]));
  } else if (v.t != JV_UNDEF && v.t != JV_NONE)
    jfail(c->a, "chat template: line %d: cannot loop over a %s", line, jv_type_name(v));
  return l.u.l;
}

static void bind_targets(jctx *c, const jnode *n, jv v) {
  if (n->nkids == 1) {
    assign(c, n->kids[0]->s, n->kids[0]->n, v);
    return;
  }
  if (v.t != JV_LIST || v.u.l->n != n->nkids)
    jfail(c->a, "chat template: line %d: cannot unpack a %s into %zu names", n->line,
          jv_type_name(v), n->nkids);
  for (size_t i = 0; i < n->nkids; i++) assign(c, n->kids[i]->s, n->kids[i]->n, v.u.l->v[i]);
}

static void exec_for(jctx *c, const jnode *n) {
  jlist *all = iterable(c, jeval(c, n->a), n->line);
  push_frame(c);
  /* the filter runs first, so that loop.length and loop.last count only the kept items */
  jlist *items = all;
  if (n->d) {
    items = jv_list(c->a).u.l;
    for (size_t i = 0; i < all->n; i++) {
      bind_targets(c, n, all->v[i]);
      if (jv_truthy(jeval(c, n->d))) jlist_push(c->a, items, all->v[i]);
    }
  }
  jv loop = jv_dict(c->a);
  assign(c, "loop", 4, loop);
  for (size_t i = 0; i < items->n; i++) {
    jdict *l = loop.u.d;
    const long long len = (long long)items->n, k = (long long)i;
    jdict_set(c->a, l, jv_cstr("index0"), jv_int(k));
    jdict_set(c->a, l, jv_cstr("index"), jv_int(k + 1));
    jdict_set(c->a, l, jv_cstr("revindex0"), jv_int(len - k - 1));
    jdict_set(c->a, l, jv_cstr("revindex"), jv_int(len - k));
    jdict_set(c->a, l, jv_cstr("first"), jv_bool(i == 0));
    jdict_set(c->a, l, jv_cstr("last"), jv_bool(i + 1 == items->n));
    jdict_set(c->a, l, jv_cstr("length"), jv_int(len));
    jdict_set(c->a, l, jv_cstr("previtem"), i ? items->v[i - 1] : (jv){.t = JV_UNDEF});
    jdict_set(c->a, l, jv_cstr("nextitem"),
              i + 1 < items->n ? items->v[i + 1] : (jv){.t = JV_UNDEF});
    bind_targets(c, n, items->v[i]);
    jexec(c, n->b);
    if (c->flow == JFLOW_BREAK) {
      c->flow = 0;
      break;
    }
    c->flow = 0;
  }
  c->nframes--;
  if (items->n == 0 && n->c) jexec(c, n->c);
}

static void exec_set(jctx *c, const jnode *n) {
  jv v;
  if (n->c) {
    jbuf *saved = c->out, b = {0};
    jbuf_put(c->a, &b, "", 0);
    c->out = &b;
    jexec(c, n->c);
    c->out = saved;
    v = (jv){.t = JV_STR, .u.s = {b.p, b.n}};
  } else {
    v = jeval(c, n->b);
  }
  const jnode *t = n->a;
  if (t->t == JN_NAME) {
    assign(c, t->s, t->n, v);
    return;
  }
  jv ns = jeval(c, t->a);
  if (ns.t != JV_DICT || !ns.u.d->ns)
    jfail(c->a, "chat template: line %d: cannot set an attribute of a %s (only of a namespace)",
          n->line, jv_type_name(ns));
  jdict_set(c->a, ns.u.d, jv_str(c->a, t->s, t->n), v);
}

void jexec(jctx *c, const jnode *n) {
  switch (n->t) {
  case JN_BLOCK:
    for (size_t i = 0; i < n->nkids && !c->flow; i++) jexec(c, n->kids[i]);
    return;
  case JN_TEXT:
    jbuf_put(c->a, c->out, n->s, n->n);
    return;
  case JN_OUT:
    jv_print(c->a, c->out, jeval(c, n->a));
    return;
  case JN_IF:
    if (jv_truthy(jeval(c, n->a)))
      jexec(c, n->b);
    else if (n->c)
      jexec(c, n->c);
    return;
  case JN_FOR:
    exec_for(c, n);
    return;
  case JN_SET:
    exec_set(c, n);
    return;
  case JN_MACRO:
    assign(c, n->s, n->n, (jv){.t = JV_MACRO, .u.macro = n});
    return;
  case JN_BREAK:
    c->flow = JFLOW_BREAK;
    return;
  case JN_CONTINUE:
    c->flow = JFLOW_CONTINUE;
    return;
  default:
    jfail(c->a, "chat template: line %d: not a statement", n->line);
  }
}
