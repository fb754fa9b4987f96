/* What the Jinja subset's evaluator (jinja_eval.c) and its builtins (jinja_builtins.c) share. */
#ifndef KITE_ENGINE_JINJA_EVAL_H
#define KITE_ENGINE_JINJA_EVAL_H

#include "jinja_internal.h"

enum { JFLOW_BREAK = 1, JFLOW_CONTINUE = 2 };

typedef struct jctx {
  jarena *a;
  jbuf *out;
  jdict *frames[64]; /* frames[0]: the variables and the template's top-level sets */
  size_t nframes;
  int flow; /* JFLOW_* while a break or continue unwinds a loop body */
} jctx;

jv jeval(jctx *c, const jnode *n);
void jexec(jctx *c, const jnode *n);
int jv_contains(jctx *c, jv hay, jv needle);

/* jinja_builtins.c */
jv jglobal(const char *s, size_t n);                     /* a global function or undefined */
jv jcall_global(jctx *c, int global, const jnode *call); /* range(...), namespace(...), ... */
jv jmethod(jctx *c, jv obj, const jnode *attr, const jnode *call); /* "s".strip(), d.items() */
jv jfilter(jctx *c, const jnode *n);
int jtest(jctx *c, const jnode *n);

#endif /* KITE_ENGINE_JINJA_EVAL_H */
