/* The Jinja subset's parser (jinja.h): the lexer's tokens (jinja_lex.h) into a syntax tree. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"
#include "jinja_internal.h"
#include "jinja_lex.h"

typedef struct parser {
  jarena *a;
  tok *toks;
  size_t n, pos;
  int depth; /* nesting of expressions and blocks being parsed */
} parser;

/* Past this nesting a template is refused (the parser and the evaluator recurse). */
#define JPARSE_MAX_DEPTH 200

/* ---- parser -------------------------------------------------------------------------------- */
static tok *peek(parser *p) {
  return &p->toks[p->pos];
}
static int is_op(const tok *t, const char *op) {
  return t->t == T_OP && t->n == strlen(op) && memcmp(t->s, op, t->n) == 0;
}
static int is_name(const tok *t, const char *name) {
  return t->t == T_NAME && t->n == strlen(name) && memcmp(t->s, name, t->n) == 0;
}
static int accept_op(parser *p, const char *op) {
  if (!is_op(peek(p), op)) return 0;
  p->pos++;
  return 1;
}
static int accept_name(parser *p, const char *name) {
  if (!is_name(peek(p), name)) return 0;
  p->pos++;
  return 1;
}
_Noreturn static void unexpected(parser *p, const char *want) {
  const tok *t = peek(p);
  jfail(p->a, "chat template: line %d: expected %s, found '%.*s'", t->line, want,
        t->t == T_EOF   ? 3
        : t->t == T_END ? 2
                        : (int)(t->n > 30 ? 30 : t->n),
        t->t == T_EOF   ? "end"
        : t->t == T_END ? "%}"
                        : t->s);
}
static void expect_op(parser *p, const char *op) {
  if (!accept_op(p, op)) unexpected(p, op);
}
static tok *expect_name(parser *p) {
  if (peek(p)->t != T_NAME) unexpected(p, "a name");
  return &p->toks[p->pos++];
}
static void expect_end(parser *p) {
  if (peek(p)->t != T_END) unexpected(p, "the tag's end");
  p->pos++;
}

static jnode *node(parser *p, jntype t) {
  jnode *n = jalloc(p->a, sizeof *n);
  n->t = t;
  n->line = peek(p)->line;
  return n;
}
static void add_kid(parser *p, jnode *n, jnode *k) {
  jnode **kids = jalloc(p->a, (n->nkids + 1) * sizeof *kids);
  if (n->nkids) memcpy(kids, n->kids, n->nkids * sizeof *kids);
  kids[n->nkids++] = k;
  n->kids = kids;
}

static jnode *expr(parser *p);
static jnode *unary(parser *p, int with_filter);

static void enter(parser *p) {
  if (++p->depth > JPARSE_MAX_DEPTH)
    jfail(p->a, "chat template: line %d: nested deeper than %d", peek(p)->line, JPARSE_MAX_DEPTH);
}

/* Call arguments after "(": positional and name=value. */
static void call_args(parser *p, jnode *call) {
  while (!accept_op(p, ")")) {
    if (call->nkids) expect_op(p, ",");
    if (accept_op(p, ")")) break;
    if (peek(p)->t == T_NAME && is_op(&p->toks[p->pos + 1], "=")) {
      jnode *kw = node(p, JN_KWARG);
      tok *name = expect_name(p);
      kw->s = name->s;
      kw->n = name->n;
      p->pos++;
      kw->a = expr(p);
      add_kid(p, call, kw);
    } else {
      add_kid(p, call, expr(p));
    }
  }
}

static jnode *primary(parser *p) {
  tok *t = peek(p);
  jnode *n;
  if (t->t == T_STR) {
    n = node(p, JN_STR);
    n->s = t->s;
    n->n = t->n;
    p->pos++;
    /* adjacent literals concatenate */
    while (peek(p)->t == T_STR) {
      tok *u = &p->toks[p->pos++];
      char *c = jalloc(p->a, n->n + u->n + 1);
      memcpy(c, n->s, n->n);
      memcpy(c + n->n, u->s, u->n);
      n->s = c;
      n->n += u->n;
    }
    return n;
  }
  if (t->t == T_INT || t->t == T_FLOAT) {
    char buf[64];
    size_t m = 0;
    for (size_t i = 0; i < t->n && m + 1 < sizeof buf; i++)
      if (t->s[i] != '_') buf[m++] = t->s[i];
    buf[m] = 0;
    n = node(p, t->t == T_INT ? JN_INT : JN_FLOAT);
    if (t->t == T_INT)
      n->i = strtoll(buf, NULL, 10);
    else
      n->f = strtod(buf, NULL);
    p->pos++;
    return n;
  }
  if (t->t == T_NAME) {
    p->pos++;
    if (is_name(t, "true") || is_name(t, "True") || is_name(t, "false") || is_name(t, "False")) {
      n = node(p, JN_BOOL);
      n->i = t->s[0] == 't' || t->s[0] == 'T';
      return n;
    }
    if (is_name(t, "none") || is_name(t, "None")) return node(p, JN_NONE);
    n = node(p, JN_NAME);
    n->s = t->s;
    n->n = t->n;
    return n;
  }
  if (accept_op(p, "(")) {
    jnode *e = expr(p);
    if (!is_op(peek(p), ",")) {
      expect_op(p, ")");
      return e;
    }
    n = node(p, JN_LIST);
    n->i = 1; /* a tuple */
    add_kid(p, n, e);
    while (accept_op(p, ",") && !is_op(peek(p), ")")) add_kid(p, n, expr(p));
    expect_op(p, ")");
    return n;
  }
  if (accept_op(p, "[")) {
    n = node(p, JN_LIST);
    while (!accept_op(p, "]")) {
      if (n->nkids) expect_op(p, ",");
      if (accept_op(p, "]")) break;
      add_kid(p, n, expr(p));
    }
    return n;
  }
  if (accept_op(p, "{")) {
    n = node(p, JN_DICT);
    while (!accept_op(p, "}")) {
      if (n->nkids) expect_op(p, ",");
      if (accept_op(p, "}")) break;
      jnode *pair = node(p, JN_PAIR);
      pair->a = expr(p);
      expect_op(p, ":");
      pair->b = expr(p);
      add_kid(p, n, pair);
    }
    return n;
  }
  unexpected(p, "an expression");
}

static jnode *postfix(parser *p, jnode *n) {
  for (;;) {
    if (accept_op(p, ".")) {
      jnode *a = node(p, JN_ATTR);
      tok *name = peek(p);
      if (name->t != T_NAME && name->t != T_INT) unexpected(p, "an attribute");
      p->pos++;
      a->a = n;
      a->s = name->s;
      a->n = name->n;
      n = a;
    } else if (accept_op(p, "[")) {
      jnode *parts[3] = {NULL, NULL, NULL};
      int k = 0, slice = 0;
      for (;;) {
        if (is_op(peek(p), ":")) {
          p->pos++;
          slice = 1;
          if (++k > 2) unexpected(p, "]");
          continue;
        }
        if (accept_op(p, "]")) break;
        if (parts[k]) unexpected(p, "]");
        parts[k] = expr(p);
      }
      jnode *it = node(p, slice ? JN_SLICE : JN_ITEM);
      it->a = n;
      if (slice)
        for (int i = 0; i < 3; i++) add_kid(p, it, parts[i]);
      else if (!(it->b = parts[0]))
        unexpected(p, "an index");
      n = it;
    } else if (accept_op(p, "(")) {
      jnode *c = node(p, JN_CALL);
      c->a = n;
      call_args(p, c);
      n = c;
    } else {
      return n;
    }
  }
}

static jnode *filters(parser *p, jnode *n) {
  for (;;) {
    if (accept_op(p, "|")) {
      jnode *f = node(p, JN_FILTER);
      tok *name = expect_name(p);
      f->a = n;
      f->s = name->s;
      f->n = name->n;
      if (accept_op(p, "(")) call_args(p, f);
      n = f;
    } else if (accept_name(p, "is")) {
      jnode *t = node(p, JN_TEST);
      t->i = accept_name(p, "not");
      tok *name = expect_name(p);
      t->a = n;
      t->s = name->s;
      t->n = name->n;
      const tok *q = peek(p);
      if (accept_op(p, "("))
        call_args(p, t);
      else if (q->t == T_STR || q->t == T_INT || q->t == T_FLOAT ||
               (q->t == T_NAME && !is_name(q, "else") && !is_name(q, "or") && !is_name(q, "and") &&
                !is_name(q, "if") && !is_name(q, "in") && !is_name(q, "is") && !is_name(q, "not")))
        add_kid(p, t, postfix(p, primary(p)));
      n = t;
    } else {
      return n;
    }
  }
}

static jnode *unary(parser *p, int with_filter) {
  jnode *n;
  enter(p);
  if (accept_op(p, "-")) {
    n = node(p, JN_NEG);
    n->a = unary(p, 0);
  } else if (accept_op(p, "+")) {
    n = unary(p, 0);
  } else {
    n = postfix(p, primary(p));
  }
  p->depth--;
  return with_filter ? filters(p, n) : n;
}

static jnode *binary(parser *p, jnode *l, int op, jnode *r) {
  jnode *n = node(p, JN_BIN);
  n->i = op;
  n->a = l;
  n->b = r;
  return n;
}

static jnode *math2(parser *p) {
  jnode *n = unary(p, 1);
  for (;;) {
    if (accept_op(p, "*"))
      n = binary(p, n, JOP_MUL, unary(p, 1));
    else if (accept_op(p, "//"))
      n = binary(p, n, JOP_FLOORDIV, unary(p, 1));
    else if (accept_op(p, "/"))
      n = binary(p, n, JOP_DIV, unary(p, 1));
    else if (accept_op(p, "%"))
      n = binary(p, n, JOP_MOD, unary(p, 1));
    else
      return n;
  }
}
static jnode *concat(parser *p) {
  jnode *n = math2(p);
  while (accept_op(p, "~")) n = binary(p, n, JOP_CONCAT, math2(p));
  return n;
}
static jnode *math1(parser *p) {
  jnode *n = concat(p);
  for (;;) {
    if (accept_op(p, "+"))
      n = binary(p, n, JOP_ADD, concat(p));
    else if (accept_op(p, "-"))
      n = binary(p, n, JOP_SUB, concat(p));
    else
      return n;
  }
}
static jnode *compare(parser *p) {
  static const struct {
    const char *op;
    int code;
  } cmp[] = {{"==", JOP_EQ}, {"!=", JOP_NE}, {"<=", JOP_LE},
             {">=", JOP_GE}, {"<", JOP_LT},  {">", JOP_GT}};
  jnode *n = math1(p);
  for (;;) {
    size_t k = 0;
    while (k < sizeof cmp / sizeof *cmp && !is_op(peek(p), cmp[k].op)) k++;
    if (k < sizeof cmp / sizeof *cmp) {
      p->pos++;
      n = binary(p, n, cmp[k].code, math1(p));
    } else if (accept_name(p, "in")) {
      n = binary(p, n, JOP_IN, math1(p));
    } else if (is_name(peek(p), "not") && is_name(&p->toks[p->pos + 1], "in")) {
      p->pos += 2;
      n = binary(p, n, JOP_NOTIN, math1(p));
    } else {
      return n;
    }
  }
}
static jnode *not_expr(parser *p) {
  if (accept_name(p, "not")) {
    jnode *n = node(p, JN_NOT);
    enter(p);
    n->a = not_expr(p);
    p->depth--;
    return n;
  }
  return compare(p);
}
/* `a and b and ...` or (is_or) `a or b or ...`, left to right; `and` binds tighter. */
static jnode *logic(parser *p, int is_or) {
  jnode *n = is_or ? logic(p, 0) : not_expr(p);
  while (accept_name(p, is_or ? "or" : "and")) {
    jnode *op = node(p, is_or ? JN_OR : JN_AND);
    op->a = n;
    op->b = is_or ? logic(p, 0) : not_expr(p);
    n = op;
  }
  return n;
}
static jnode *expr(parser *p) {
  enter(p);
  jnode *n = logic(p, 1);
  while (accept_name(p, "if")) {
    jnode *c = node(p, JN_COND);
    c->b = n;
    c->a = logic(p, 1);
    if (accept_name(p, "else")) c->c = expr(p);
    n = c;
  }
  p->depth--;
  return n;
}

/* ---- statements ---------------------------------------------------------------------------- */
/* Parses statements up to a block tag whose name is one of `stops` (NULL-terminated), which is
 * left unread (after its {%); at the top level (stops NULL) up to the end. */
static jnode *body(parser *p, const char *const *stops);

static int at_stop(parser *p, const char *const *stops) {
  if (!stops || peek(p)->t != T_BLOCK) return 0;
  const tok *t = &p->toks[p->pos + 1];
  for (size_t i = 0; stops[i]; i++)
    if (is_name(t, stops[i])) return 1;
  return 0;
}

static jnode *if_stmt(parser *p) {
  static const char *const stops[] = {"elif", "else", "endif", NULL};
  jnode *n = node(p, JN_IF);
  n->a = expr(p);
  expect_end(p);
  n->b = body(p, stops);
  p->pos++; /* {% */
  if (accept_name(p, "elif")) {
    n->c = if_stmt(p);
    return n;
  }
  if (accept_name(p, "else")) {
    expect_end(p);
    static const char *const end[] = {"endif", NULL};
    n->c = body(p, end);
    p->pos++;
  }
  if (!accept_name(p, "endif")) unexpected(p, "endif");
  expect_end(p);
  return n;
}

static jnode *for_stmt(parser *p) {
  static const char *const stops[] = {"else", "endfor", NULL};
  jnode *n = node(p, JN_FOR);
  do {
    tok *name = expect_name(p);
    jnode *v = node(p, JN_NAME);
    v->s = name->s;
    v->n = name->n;
    add_kid(p, n, v);
  } while (accept_op(p, ","));
  if (!accept_name(p, "in")) unexpected(p, "in");
  n->a = logic(p, 1);
  if (accept_name(p, "if")) n->d = expr(p);
  expect_end(p);
  n->b = body(p, stops);
  p->pos++;
  if (accept_name(p, "else")) {
    expect_end(p);
    static const char *const end[] = {"endfor", NULL};
    n->c = body(p, end);
    p->pos++;
  }
  if (!accept_name(p, "endfor")) unexpected(p, "endfor");
  expect_end(p);
  return n;
}

static jnode *set_stmt(parser *p) {
  jnode *n = node(p, JN_SET);
  tok *name = expect_name(p);
  jnode *target = node(p, JN_NAME);
  target->s = name->s;
  target->n = name->n;
  if (accept_op(p, ".")) {
    jnode *attr = node(p, JN_ATTR);
    tok *an = expect_name(p);
    attr->a = target;
    attr->s = an->s;
    attr->n = an->n;
    target = attr;
  }
  n->a = target;
  if (accept_op(p, "=")) {
    n->b = expr(p);
    expect_end(p);
    return n;
  }
  expect_end(p);
  static const char *const end[] = {"endset", NULL};
  n->c = body(p, end);
  p->pos += 2;
  expect_end(p);
  return n;
}

static jnode *macro_stmt(parser *p) {
  jnode *n = node(p, JN_MACRO);
  tok *name = expect_name(p);
  n->s = name->s;
  n->n = name->n;
  expect_op(p, "(");
  while (!accept_op(p, ")")) {
    if (n->nkids) expect_op(p, ",");
    tok *pn = expect_name(p);
    jnode *param = node(p, JN_NAME);
    param->s = pn->s;
    param->n = pn->n;
    if (accept_op(p, "=")) param->a = expr(p);
    add_kid(p, n, param);
  }
  expect_end(p);
  static const char *const end[] = {"endmacro", NULL};
  n->b = body(p, end);
  p->pos += 2;
  expect_end(p);
  return n;
}

static jnode *body(parser *p, const char *const *stops) {
  jnode *blk = node(p, JN_BLOCK);
  enter(p);
  for (;;) {
    tok *t = peek(p);
    if (t->t == T_EOF) {
      if (stops) {
        size_t last = 0; /* the closing tag is the last of stops */
        while (stops[last + 1]) last++;
        jfail(p->a, "chat template: missing {%% %s %%} at the end", stops[last]);
      }
      p->depth--;
      return blk;
    }
    if (at_stop(p, stops)) {
      p->depth--;
      return blk;
    }
    jnode *s = NULL;
    if (t->t == T_TEXT) {
      s = node(p, JN_TEXT);
      s->s = t->s;
      s->n = t->n;
      p->pos++;
    } else if (t->t == T_VAR) {
      p->pos++;
      s = node(p, JN_OUT);
      s->a = expr(p);
      expect_end(p);
    } else if (t->t == T_BLOCK) {
      p->pos++;
      tok *kw = expect_name(p);
      if (is_name(kw, "if"))
        s = if_stmt(p);
      else if (is_name(kw, "for"))
        s = for_stmt(p);
      else if (is_name(kw, "set"))
        s = set_stmt(p);
      else if (is_name(kw, "macro"))
        s = macro_stmt(p);
      else if (is_name(kw, "break") || is_name(kw, "continue")) {
        s = node(p, kw->s[0] == 'b' ? JN_BREAK : JN_CONTINUE);
        expect_end(p);
      } else if (is_name(kw, "generation") || is_name(kw, "endgeneration")) {
        expect_end(p); /* transformers' assistant-mask markers: no output of their own */
        continue;
      } else {
        jfail(p->a, "chat template: line %d: unsupported or misplaced tag '%.*s'", kw->line,
              (int)(kw->n > 30 ? 30 : kw->n), kw->s);
      }
    } else {
      unexpected(p, "text or a tag");
    }
    add_kid(p, blk, s);
  }
}

kr_jinja *kr_jinja_parse(const char *src, size_t len, char *err, size_t err_len) {
  kr_jinja *volatile t = calloc(1, sizeof *t);
  if (!t) {
    snprintf(err, err_len, "chat template: out of memory");
    return NULL;
  }
  jmp_buf fail;
  t->arena.fail = &fail;
  t->arena.err = err;
  t->arena.err_len = err_len;
  if (setjmp(fail)) {
    jarena_free(&t->arena);
    free(t);
    return NULL;
  }
  jlexer lx = {.a = &t->arena};
  /* jinja2 reads every \r\n and \r of the source as \n */
  char *norm = jalloc(&t->arena, len + 1);
  size_t m = 0;
  for (size_t i = 0; i < len; i++) {
    norm[m++] = src[i] == '\r' ? '\n' : src[i];
    if (src[i] == '\r' && i + 1 < len && src[i + 1] == '\n') i++;
  }
  jinja_lex(&lx, norm, m);
  parser p = {.a = &t->arena, .toks = lx.toks, .n = lx.n};
  t->root = body(&p, NULL);
  t->arena.fail = NULL;
  return t;
}

void kr_jinja_free(kr_jinja *t) {
  if (!t) return;
  jarena_free(&t->arena);
  free(t);
}
