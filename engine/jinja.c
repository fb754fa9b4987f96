/* The Jinja subset's entry points (jinja.h): variables and rendering. */
#include "jinja.h"

#include <stdlib.h>
#include <string.h>

#include "jinja_eval.h"

struct kr_jvars {
  jarena arena;
  jdict *vars;
  jlist *messages;
};

kr_jvars *kr_jvars_new(void) {
  kr_jvars *volatile v = calloc(1, sizeof *v);
  if (!v) return NULL;
  jmp_buf fail;
  v->arena.fail = &fail;
  if (setjmp(fail)) {
    jarena_free(&v->arena);
    free(v);
    return NULL;
  }
  v->vars = jv_dict(&v->arena).u.d;
  jv msgs = jv_list(&v->arena);
  v->messages = msgs.u.l;
  jdict_set(&v->arena, v->vars, jv_cstr("messages"), msgs);
  v->arena.fail = NULL;
  return v;
}

void kr_jvars_free(kr_jvars *v) {
  if (!v) return;
  jarena_free(&v->arena);
  free(v);
}

/* Runs one change of v, 0 or -1 when memory ran out. */
#define GUARDED(v, body)                                                                           \
  do {                                                                                             \
    jmp_buf fail;                                                                                  \
    (v)->arena.fail = &fail;                                                                       \
    if (setjmp(fail)) {                                                                            \
      (v)->arena.fail = NULL;                                                                      \
      return -1;                                                                                   \
    }                                                                                              \
    body;                                                                                          \
    (v)->arena.fail = NULL;                                                                        \
    return 0;                                                                                      \
  } while (0)

int kr_jvars_message(kr_jvars *v, const char *role, const char *content) {
  GUARDED(v, {
    jv m = jv_dict(&v->arena);
    jdict_set(&v->arena, m.u.d, jv_cstr("role"), jv_str(&v->arena, role, strlen(role)));
    jdict_set(&v->arena, m.u.d, jv_cstr("content"), jv_str(&v->arena, content, strlen(content)));
    jlist_push(&v->arena, v->messages, m);
  });
}

int kr_jvars_str(kr_jvars *v, const char *name, const char *value) {
  GUARDED(v, jdict_set(&v->arena, v->vars, jv_str(&v->arena, name, strlen(name)),
                       jv_str(&v->arena, value, strlen(value))));
}

int kr_jvars_bool(kr_jvars *v, const char *name, int value) {
  GUARDED(v, jdict_set(&v->arena, v->vars, jv_str(&v->arena, name, strlen(name)), jv_bool(value)));
}

int kr_jvars_none(kr_jvars *v, const char *name) {
  GUARDED(v,
          jdict_set(&v->arena, v->vars, jv_str(&v->arena, name, strlen(name)), (jv){.t = JV_NONE}));
}

int kr_jinja_render(const kr_jinja *t, const kr_jvars *v, char **out, size_t *out_len, char *err,
                    size_t err_len) {
  jarena a = {0};
  jmp_buf fail;
  a.fail = &fail;
  a.err = err;
  a.err_len = err_len;
  *out = NULL;
  if (setjmp(fail)) {
    jarena_free(&a);
    return -1;
  }
  jbuf b = {0};
  jbuf_put(&a, &b, "", 0);
  jctx c = {.a = &a, .out = &b, .nframes = 1};
  /* the caller's variables are copied into the first frame, which the template's sets change */
  c.frames[0] = jv_dict(&a).u.d;
  for (size_t i = 0; i < v->vars->n; i++) jdict_set(&a, c.frames[0], v->vars->k[i], v->vars->v[i]);
  jexec(&c, t->root);
  char *o = malloc(b.n + 1);
  if (!o) jfail(&a, "chat template: out of memory");
  memcpy(o, b.p, b.n + 1);
  *out = o;
  if (out_len) *out_len = b.n;
  jarena_free(&a);
  return 0;
}
