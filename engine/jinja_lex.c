/* The Jinja subset's lexer (jinja_lex.h). */
#include "jinja_lex.h"

#include <ctype.h>
#include <string.h>

static void push_tok(jlexer *p, tok t) {
  if (p->n == p->cap) {
    size_t cap = p->cap ? 2 * p->cap : 256;
    tok *q = jalloc(p->a, cap * sizeof *q);
    if (p->n) memcpy(q, p->toks, p->n * sizeof *q);
    p->toks = q;
    p->cap = cap;
  }
  p->toks[p->n++] = t;
}

/* The line of position e of the source. */
static int line_at(jlexer *p, const char *e) {
  if (e < p->lpos) p->lpos = p->src, p->lline = 1;
  for (; p->lpos < e; p->lpos++) p->lline += *p->lpos == '\n';
  return p->lline;
}

/* A string literal's body src[0, n) with Python's escapes undone. */
static tok unescape(jlexer *p, const char *src, size_t n, int line) {
  char *o = jalloc(p->a, n + 1);
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    if (src[i] != '\\' || i + 1 == n) {
      o[m++] = src[i];
      continue;
    }
    char c = src[++i];
    switch (c) {
    case 'n':
      o[m++] = '\n';
      break;
    case 't':
      o[m++] = '\t';
      break;
    case 'r':
      o[m++] = '\r';
      break;
    case '0':
      o[m++] = 0;
      break;
    case '\\':
    case '\'':
    case '"':
      o[m++] = c;
      break;
    case '\n':
      break;
    default:
      o[m++] = '\\';
      o[m++] = c;
    }
  }
  return (tok){T_STR, line, o, m};
}

/* The tokens of one tag's inside, up to its closing delimiter (close, 2 chars); returns the
 * position after it and sets *strip_after when it was "-<close>". */
static const char *lex_tag(jlexer *p, const char *s, const char *end, const char *close,
                           int *strip_after) {
  static const char *ops[] = {"//", "==", "!=", "<=", ">=", "**", "+", "-", "*", "/", "%", "~", "<",
                              ">",  "(",  ")",  "[",  "]",  "{",  "}", ",", ":", ".", "|", "="};
  for (;;) {
    while (s < end && isspace((unsigned char)*s)) s++;
    if (s >= end) jfail(p->a, "chat template: line %d: unclosed tag", line_at(p, s));
    int line = line_at(p, s);
    if (*s == '-' && s + 2 < end + 1 && s[1] == close[0] && s[2] == close[1]) {
      *strip_after = 1;
      return s + 3;
    }
    if (s[0] == close[0] && s + 1 < end && s[1] == close[1]) return s + 2;
    if (isalpha((unsigned char)*s) || *s == '_') {
      const char *b = s;
      while (s < end && (isalnum((unsigned char)*s) || *s == '_')) s++;
      push_tok(p, (tok){T_NAME, line, b, (size_t)(s - b)});
    } else if (isdigit((unsigned char)*s)) {
      const char *b = s;
      int fl = 0;
      while (s < end && (isdigit((unsigned char)*s) || *s == '_' ||
                         (*s == '.' && !fl && s + 1 < end && isdigit((unsigned char)s[1]))))
        fl |= *s++ == '.';
      push_tok(p, (tok){fl ? T_FLOAT : T_INT, line, b, (size_t)(s - b)});
    } else if (*s == '"' || *s == '\'') {
      const char q = *s++, *b = s;
      while (s < end && *s != q) s += *s == '\\' ? 2 : 1;
      if (s >= end) jfail(p->a, "chat template: line %d: unclosed string", line);
      push_tok(p, unescape(p, b, (size_t)(s - b), line));
      s++;
    } else {
      size_t k = 0;
      for (; k < sizeof ops / sizeof *ops; k++)
        if (strncmp(s, ops[k], strlen(ops[k])) == 0) break;
      if (k == sizeof ops / sizeof *ops)
        jfail(p->a, "chat template: line %d: unexpected character '%c'", line, *s);
      push_tok(p, (tok){T_OP, line, ops[k], strlen(ops[k])});
      s += strlen(ops[k]);
    }
  }
}

void jinja_lex(jlexer *p, const char *src, size_t len) {
  const char *s = src, *end = src + len;
  p->src = p->lpos = src;
  p->lline = 1;
  /* jinja2 drops one trailing newline (newlines are "\n" by now) */
  if (end > s && end[-1] == '\n') end--;
  int strip_next = 0, trim_nl = 0;
  while (s < end) {
    const char *t = s;
    while (t + 1 < end && !(t[0] == '{' && (t[1] == '{' || t[1] == '%' || t[1] == '#'))) t++;
    if (t + 1 >= end) t = end;
    /* the text before the tag, after the previous tag's whitespace rules */
    const char *b = s, *e = t;
    if (strip_next)
      while (b < e && isspace((unsigned char)*b)) b++;
    else if (trim_nl && b < e && *b == '\n')
      b++;
    if (t < end) {
      const char kind = t[1], mod = t + 2 < end ? t[2] : 0;
      if (mod == '-')
        while (e > b && isspace((unsigned char)e[-1])) e--;
      else if (kind != '{' && mod != '+') {
        /* lstrip_blocks: spaces and tabs from the line's start to a block or comment tag */
        const char *q = e;
        while (q > b && (q[-1] == ' ' || q[-1] == '\t')) q--;
        if (q == src || q[-1] == '\n') e = q;
      }
    }
    if (e > b) push_tok(p, (tok){T_TEXT, line_at(p, b), b, (size_t)(e - b)});
    if (t >= end) break;
    const char kind = t[1];
    const char *in = t + 2;
    if (in < end && (*in == '-' || *in == '+')) in++;
    strip_next = 0;
    if (kind == '#') {
      const char *c = in;
      while (c + 1 < end && !(c[0] == '#' && c[1] == '}')) c++;
      if (c + 1 >= end) jfail(p->a, "chat template: line %d: unclosed comment", line_at(p, t));
      strip_next = c > in && c[-1] == '-';
      s = c + 2;
      trim_nl = 1;
      continue;
    }
    push_tok(p, (tok){kind == '{' ? T_VAR : T_BLOCK, line_at(p, t), NULL, 0});
    s = lex_tag(p, in, end, kind == '{' ? "}}" : "%}", &strip_next);
    push_tok(p, (tok){T_END, 0, NULL, 0});
    trim_nl = kind == '%';
  }
  push_tok(p, (tok){T_EOF, line_at(p, end), NULL, 0});
}
