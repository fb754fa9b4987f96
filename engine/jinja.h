/*
 * A Jinja subset for chat templates (tokenizer.chat_template), rendered as transformers'
 * apply_chat_template renders them (jinja2 with trim_blocks and lstrip_blocks, tojson as Python's
 * json.dumps with ensure_ascii off, raise_exception and strftime_now as globals):
 *   statements  for (with else, an `if` filter, loop.index/index0/first/last/length/revindex,
 *               tuple unpacking, break/continue), if/elif/else, set (names, namespace
 *               attributes, {% set x %}...{% endset %}), macro (with defaults), comments,
 *               whitespace control ({%- -%} {{- -}}), trailing-newline removal, and
 *               transformers' {% generation %} markers (no output of their own);
 *   expressions literals (strings, numbers, true/false/none, lists, dicts), attribute, item and
 *               slice access (messages[1:], s[::-1]), calls, filters, tests (is / is not),
 *               not/and/or, comparisons, in / not in, + - * / // % ~, a if c else b;
 *   filters     trim length count tojson(indent) upper lower title capitalize default/d first
 *               last join list items reverse replace string int float abs safe map(attribute)
 *               selectattr/rejectattr (no test, equalto, defined, none);
 *   tests       defined undefined none string number integer float boolean true false mapping
 *               sequence iterable callable odd even divisibleby eq equalto sameas in;
 *   methods     of strings: strip lstrip rstrip startswith endswith split upper lower replace
 *               title capitalize find count; of dicts: items keys values get;
 *   globals     range namespace dict raise_exception strftime_now.
 * Anything else is an error naming it, never a silent empty string (an undefined variable is
 * empty, as jinja2's default Undefined is).
 */
#ifndef KITE_ENGINE_JINJA_H
#define KITE_ENGINE_JINJA_H

#include <stddef.h>

typedef struct kr_jinja kr_jinja; /* a parsed template */
typedef struct kr_jvars kr_jvars; /* the variables of one rendering */

/* Parses src[0, len). Returns NULL with a message (and the line) in err. */
kr_jinja *kr_jinja_parse(const char *src, size_t len, char *err, size_t err_len);
void kr_jinja_free(kr_jinja *t);

/* Variables: a conversation (messages, each a role and a content) and named scalars. */
kr_jvars *kr_jvars_new(void);
void kr_jvars_free(kr_jvars *v);
/* Each returns 0, or -1 when out of memory. */
int kr_jvars_message(kr_jvars *v, const char *role, const char *content);
int kr_jvars_str(kr_jvars *v, const char *name, const char *value);
int kr_jvars_bool(kr_jvars *v, const char *name, int value);
int kr_jvars_none(kr_jvars *v, const char *name);

/* Renders t with v into *out (malloc'ed, NUL-terminated; *out_len bytes). Returns 0, or -1 with
 * the message in err (raise_exception's text, an unknown filter, a type error, ...). */
int kr_jinja_render(const kr_jinja *t, const kr_jvars *v, char **out, size_t *out_len, char *err,
                    size_t err_len);

#endif /* KITE_ENGINE_JINJA_H */
