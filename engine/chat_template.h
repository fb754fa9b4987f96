/*
 * Conversations as the model's prompt: its tokenizer.chat_template (a Jinja template, rendered
 * by jinja.h as transformers' apply_chat_template does) with the model's bos_token and
 * eos_token, or ChatML when the file has no template (kr_chat_template_note says so).
 */
#ifndef KITE_ENGINE_CHAT_TEMPLATE_H
#define KITE_ENGINE_CHAT_TEMPLATE_H

#include <stddef.h>

#include "gguf.h"
#include "tokenizer.h"

typedef struct kr_chat_msg {
  const char *role; /* "system", "user", "assistant" (as the template knows them) */
  const char *content;
} kr_chat_msg;

typedef struct kr_chat_template kr_chat_template;

/* The template of g (which must outlive it), with tok's BOS / EOS texts. Returns NULL with a
 * message in err when the template does not parse (or memory runs out). */
kr_chat_template *kr_chat_template_load(const kr_gguf *g, const kr_tokenizer *tok, char *err,
                                        size_t err_len);
void kr_chat_template_free(kr_chat_template *t);
/* What the loader chose that a user should know (the ChatML fallback), or NULL. */
const char *kr_chat_template_note(const kr_chat_template *t);

/* The text of msgs[0, n) through the template, ending with the assistant's turn header when
 * add_generation_prompt; enable_thinking (0 or 1, -1: not set) is passed to templates that read
 * it (Qwen3). *out is malloc'ed (the caller frees it). Returns 0, or -1 with a message in err
 * (the template's raise_exception text, for one). */
int kr_chat_format(const kr_chat_template *t, const kr_chat_msg *msgs, size_t n,
                   int add_generation_prompt, int enable_thinking, char **out, char *err,
                   size_t err_len);

/* A conversation that owns its texts. */
typedef struct kr_chat_conv {
  kr_chat_msg *msgs;
  size_t n, cap;
} kr_chat_conv;
/* Appends a copy of (role, content[0, len)). Returns 0, or -1 when out of memory. */
int kr_chat_add(kr_chat_conv *c, const char *role, const char *content, size_t len);
void kr_chat_conv_free(kr_chat_conv *c);
/* Reads a conversation file: a JSON list of {"role": ..., "content": ...} objects. Returns 0, or
 * -1 with a message in err. */
int kr_chat_read_json(const char *path, kr_chat_conv *c, char *err, size_t err_len);

/* The prompt of conversation c for generation: rendered with the generation prompt, without the
 * template's leading BOS text when the tokenizer adds BOS itself (so that it is not there twice).
 * NULL with a message in err. */
char *kr_chat_prompt(const kr_chat_template *t, const kr_tokenizer *tok, const kr_chat_conv *c,
                     int enable_thinking, char *err, size_t err_len);

#endif /* KITE_ENGINE_CHAT_TEMPLATE_H */
