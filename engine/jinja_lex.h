/* The Jinja subset's lexer (jinja_lex.c): template text into tokens, for the parser
 * (jinja_parse.c). */
#ifndef KITE_ENGINE_JINJA_LEX_H
#define KITE_ENGINE_JINJA_LEX_H

#include "jinja_internal.h"

typedef enum { T_TEXT, T_VAR, T_BLOCK, T_END, T_NAME, T_STR, T_INT, T_FLOAT, T_OP, T_EOF } ttype;
typedef struct tok {
  ttype t;
  int line;
  const char *s; /* text, name, operator, or the unescaped string */
  size_t n;
} tok;

typedef struct jlexer {
  jarena *a;
  tok *toks; /* [n], the last T_EOF */
  size_t n, cap;
  const char *src; /* the source, and the line of position lpos (lines are asked in order) */
  const char *lpos;
  int lline;
} jlexer;

/* The tokens of src[0, len) (newlines already "\n") into p->toks: text (after jinja2's
 * whitespace rules as transformers sets them: trim_blocks, lstrip_blocks, {%- -%}, one trailing
 * newline dropped), the starts of {{ and {% tags, their insides, and T_END for each tag's end.
 * Unwinds through p->a with a message on an unclosed tag, string or comment. */
void jinja_lex(jlexer *p, const char *src, size_t len);

#endif /* KITE_ENGINE_JINJA_LEX_H */
