#include "chat_template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "jinja.h"

/* ChatML, for a model without a template of its own. */
static const char chatml[] =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

struct kr_chat_template {
  kr_jinja *jinja;
  char bos[64], eos[64]; /* the tokens' texts ("" when none) */
  const char *note;
};

static void token_text(const kr_tokenizer *tok, int32_t id, char *buf, size_t cap) {
  size_t n = id >= 0 ? kr_tok_piece(tok, id, 1, buf, cap - 1) : 0;
  buf[n < cap - 1 ? n : cap - 1] = 0;
}

kr_chat_template *kr_chat_template_load(const kr_gguf *g, const kr_tokenizer *tok, char *err,
                                        size_t err_len) {
  kr_chat_template *t = calloc(1, sizeof *t);
  if (!t) {
    snprintf(err, err_len, "chat template: out of memory");
    return NULL;
  }
  const char *src;
  uint64_t len;
  if (kr_gguf_get_str(g, "tokenizer.chat_template", &src, &len)) {
    src = chatml;
    len = sizeof chatml - 1;
    t->note = "no tokenizer.chat_template in the file: the conversation is written as ChatML";
  }
  if (!(t->jinja = kr_jinja_parse(src, (size_t)len, err, err_len))) {
    free(t);
    return NULL;
  }
  token_text(tok, kr_tok_bos(tok), t->bos, sizeof t->bos);
  token_text(tok, kr_tok_eos(tok), t->eos, sizeof t->eos);
  return t;
}

void kr_chat_template_free(kr_chat_template *t) {
  if (!t) return;
  kr_jinja_free(t->jinja);
  free(t);
}

const char *kr_chat_template_note(const kr_chat_template *t) {
  return t->note;
}

int kr_chat_format(const kr_chat_template *t, const kr_chat_msg *msgs, size_t n,
                   int add_generation_prompt, int enable_thinking, char **out, char *err,
                   size_t err_len) {
  *out = NULL;
  kr_jvars *v = kr_jvars_new();
  int rc = v ? 0 : -1;
  for (size_t i = 0; i < n && !rc; i++) rc = kr_jvars_message(v, msgs[i].role, msgs[i].content);
  if (!rc)
    rc = kr_jvars_bool(v, "add_generation_prompt", add_generation_prompt) ||
         kr_jvars_str(v, "bos_token", t->bos) || kr_jvars_str(v, "eos_token", t->eos) ||
         kr_jvars_none(v, "tools") || kr_jvars_none(v, "documents") ||
         (enable_thinking >= 0 && kr_jvars_bool(v, "enable_thinking", enable_thinking));
  if (rc)
    snprintf(err, err_len, "chat template: out of memory");
  else
    rc = kr_jinja_render(t->jinja, v, out, NULL, err, err_len);
  kr_jvars_free(v);
  return rc;
}

int kr_chat_add(kr_chat_conv *c, const char *role, const char *content, size_t len) {
  if (c->n == c->cap) {
    size_t cap = c->cap ? 2 * c->cap : 8;
    kr_chat_msg *m = realloc(c->msgs, cap * sizeof *m);
    if (!m) return -1;
    c->msgs = m;
    c->cap = cap;
  }
  char *r = strdup(role), *t = malloc(len + 1);
  if (!r || !t) {
    free(r);
    free(t);
    return -1;
  }
  memcpy(t, content, len);
  t[len] = 0;
  c->msgs[c->n++] = (kr_chat_msg){r, t};
  return 0;
}

void kr_chat_conv_free(kr_chat_conv *c) {
  for (size_t i = 0; i < c->n; i++) {
    free((char *)c->msgs[i].role);
    free((char *)c->msgs[i].content);
  }
  free(c->msgs);
  *c = (kr_chat_conv){0};
}

int kr_chat_read_json(const char *path, kr_chat_conv *c, char *err, size_t err_len) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, err_len, "cannot read %s", path);
    return -1;
  }
  size_t cap = 4096, n = 0, got;
  char *buf = malloc(cap);
  while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
    n += got;
    char *b = n + 1 == cap ? realloc(buf, cap *= 2) : buf;
    if (!b) free(buf);
    buf = b;
  }
  fclose(f);
  if (!buf) {
    snprintf(err, err_len, "%s: out of memory", path);
    return -1;
  }
  buf[n] = 0;
  cJSON *root = cJSON_ParseWithLength(buf, n);
  free(buf);
  int rc = 0;
  if (!cJSON_IsArray(root)) {
    snprintf(err, err_len, "%s: not a JSON list of messages", path);
    rc = -1;
  }
  const cJSON *m, *list = rc ? NULL : root;
  int i = 0;
  cJSON_ArrayForEach(m, list) {
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    if (!cJSON_IsString(role) || !cJSON_IsString(content)) {
      snprintf(err, err_len, "%s: message %d has no string \"role\" and \"content\"", path, i);
      rc = -1;
      break;
    }
    if (kr_chat_add(c, role->valuestring, content->valuestring, strlen(content->valuestring))) {
      snprintf(err, err_len, "%s: out of memory", path);
      rc = -1;
      break;
    }
    i++;
  }
  cJSON_Delete(root);
  return rc;
}

char *kr_chat_prompt(const kr_chat_template *t, const kr_tokenizer *tok, const kr_chat_conv *c,
                     int enable_thinking, char *err, size_t err_len) {
  char *s;
  if (kr_chat_format(t, c->msgs, c->n, 1, enable_thinking, &s, err, err_len)) return NULL;
  const size_t nb = strlen(t->bos);
  if (kr_tok_add_bos(tok) && kr_tok_bos(tok) >= 0 && nb && strncmp(s, t->bos, nb) == 0)
    memmove(s, s + nb, strlen(s + nb) + 1);
  return s;
}
