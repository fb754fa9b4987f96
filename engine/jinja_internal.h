/* The Jinja subset's parts (jinja.h): values in an arena, the syntax tree, and what the parser,
 * the value helpers and the evaluator share. Errors unwind with longjmp to the entry point
 * (kr_jinja_parse, kr_jinja_render), which frees the arena. */
#ifndef KITE_ENGINE_JINJA_INTERNAL_H
#define KITE_ENGINE_JINJA_INTERNAL_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>

/* Blocks of memory freed together. */
typedef struct jblock jblock;
typedef struct jarena {
  jblock *head;
  jmp_buf *fail; /* where running out of memory unwinds to */
  char *err;
  size_t err_len;
} jarena;

/* Unwinds to the entry point with a message. */
_Noreturn void jfail(jarena *a, const char *fmt, ...);
void *jalloc(jarena *a, size_t n); /* zeroed; never NULL (unwinds) */
void jarena_free(jarena *a);

typedef enum {
  JV_UNDEF,
  JV_NONE,
  JV_BOOL,
  JV_INT,
  JV_FLOAT,
  JV_STR,
  JV_LIST,
  JV_DICT,
  JV_MACRO,
  JV_GLOBAL
} jvtype;

typedef struct jlist jlist;
typedef struct jdict jdict;
struct jnode;
typedef struct jv {
  jvtype t;
  union {
    int b;
    long long i;
    double f;
    struct {
      const char *p;
      size_t n;
    } s;
    jlist *l;
    jdict *d; /* also a namespace(), which `set ns.x = ...` changes in place */
    const struct jnode *macro;
    int global; /* JG_* */
  } u;
} jv;
struct jlist {
  size_t n, cap;
  jv *v;
  int tuple; /* prints as Python prints a tuple: (a, b) */
};
struct jdict {
  size_t n, cap;
  jv *k, *v;
  int ns; /* a namespace(): the only dict `set d.x = ...` may change, as in jinja2 */
};

enum { JG_RANGE, JG_NAMESPACE, JG_DICT, JG_RAISE, JG_STRFTIME };

/* Growable output text. */
typedef struct jbuf {
  char *p;
  size_t n, cap;
} jbuf;
void jbuf_put(jarena *a, jbuf *b, const char *s, size_t n);

jv jv_str(jarena *a, const char *s, size_t n); /* copies s */
jv jv_cstr(const char *s);                     /* refers to a static string */
jv jv_int(long long i);
jv jv_bool(int b);
jv jv_list(jarena *a);
jv jv_dict(jarena *a);
void jlist_push(jarena *a, jlist *l, jv v);
void jdict_set(jarena *a, jdict *d, jv k, jv v);
jv *jdict_get(const jdict *d, const char *k, size_t n); /* NULL when absent */
int jv_truthy(jv v);
int jv_equal(jv x, jv y);
int jv_compare(jarena *a, jv x, jv y); /* <0, 0, >0; numbers or strings */
const char *jv_type_name(jv v);
/* Appends v as Jinja prints it (Python's str()). */
void jv_print(jarena *a, jbuf *b, jv v);
/* Appends v as Python's json.dumps(v, ensure_ascii=False, indent=indent) writes it (indent < 0:
 * none). */
void jv_json(jarena *a, jbuf *b, jv v, int indent, int depth);

/* ---- syntax tree --------------------------------------------------------------------------- */
typedef enum {
  /* statements */
  JN_BLOCK, /* kids: statements */
  JN_TEXT,  /* s */
  JN_OUT,   /* a */
  JN_IF,    /* a: condition, b: then block, c: else (block or JN_IF) */
  JN_FOR,   /* kids: target names; a: iterable, b: body, c: else, d: filter condition */
  JN_SET,   /* a: target (JN_NAME or JN_ATTR), b: value, or c: body of a block set */
  JN_MACRO, /* s: name, kids: parameters (JN_NAME, a: default), b: body */
  JN_BREAK,
  JN_CONTINUE,
  /* expressions */
  JN_STR,
  JN_INT,
  JN_FLOAT,
  JN_BOOL,
  JN_NONE,
  JN_LIST, /* kids; i: a tuple */
  JN_DICT, /* kids: JN_PAIR (a: key, b: value) */
  JN_PAIR,
  JN_NAME,   /* s */
  JN_ATTR,   /* a.s */
  JN_ITEM,   /* a[b] */
  JN_SLICE,  /* a[kids[0]:kids[1]:kids[2]] (each may be NULL) */
  JN_CALL,   /* a(kids) */
  JN_KWARG,  /* s=a, in a call's or filter's kids */
  JN_FILTER, /* a|s(kids) */
  JN_TEST,   /* a is [not] s(kids); i: negated */
  JN_NOT,
  JN_NEG,
  JN_AND,
  JN_OR,
  JN_BIN,  /* a op b, op in i */
  JN_COND, /* b if a else c */
} jntype;

enum {
  JOP_ADD,
  JOP_SUB,
  JOP_MUL,
  JOP_DIV,
  JOP_FLOORDIV,
  JOP_MOD,
  JOP_CONCAT,
  JOP_EQ,
  JOP_NE,
  JOP_LT,
  JOP_LE,
  JOP_GT,
  JOP_GE,
  JOP_IN,
  JOP_NOTIN
};

typedef struct jnode {
  jntype t;
  int line;
  const char *s;
  size_t n;
  long long i;
  double f;
  struct jnode *a, *b, *c, *d;
  struct jnode **kids;
  size_t nkids;
} jnode;

struct kr_jinja {
  jarena arena;
  jnode *root;
};

/* Evaluation (jinja_eval.c) */
void jinja_exec(jarena *a, const jnode *root, jdict *globals, jbuf *out);

#endif /* KITE_ENGINE_JINJA_INTERNAL_H */
