/*
 * kite serve's JSON (cJSON): request bodies into sv_params, each field's type and range checked
 * with the field named in the error; the replies, stream chunks and errors in OpenAI's shapes.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

int sv_fail(sv_error *e, int status, const char *param, const char *code, const char *fmt, ...) {
  e->status = status;
  e->type = status == 404   ? "invalid_request_error"
            : status >= 500 ? "server_error"
                            : "invalid_request_error";
  e->param = param;
  e->code = code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->message, sizeof e->message, fmt, ap);
  va_end(ap);
  return -1;
}

/* A number field in [lo, hi] into *out; absent or null leaves *out. */
static int get_float(const cJSON *o, const char *name, double lo, double hi, float *out,
                     sv_error *e) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
  if (!v || cJSON_IsNull(v)) return 0;
  if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
    return sv_fail(e, 400, name, "invalid_type", "'%s' must be a number", name);
  if (v->valuedouble < lo || v->valuedouble > hi)
    return sv_fail(e, 400, name, "invalid_value", "'%s' is %g, outside [%g, %g]", name,
                   v->valuedouble, lo, hi);
  *out = (float)v->valuedouble;
  return 0;
}

/* An integer field in [lo, hi]; *given is set when present. */
static int get_int(const cJSON *o, const char *name, double lo, double hi, double *out, int *given,
                   sv_error *e) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
  if (!v || cJSON_IsNull(v)) return 0;
  if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
    return sv_fail(e, 400, name, "invalid_type", "'%s' must be an integer", name);
  if (v->valuedouble < lo || v->valuedouble > hi)
    return sv_fail(e, 400, name, "invalid_value", "'%s' is %.0f, outside [%.0f, %.0f]", name,
                   v->valuedouble, lo, hi);
  *out = v->valuedouble;
  if (given) *given = 1;
  return 0;
}

static int get_bool(const cJSON *o, const char *name, int *out, sv_error *e) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
  if (!v || cJSON_IsNull(v)) return 0;
  if (!cJSON_IsBool(v))
    return sv_fail(e, 400, name, "invalid_type", "'%s' must be a boolean", name);
  *out = cJSON_IsTrue(v);
  return 0;
}

/* prompt: a string, a list of one string, or a list of token ids. */
static int get_prompt(const cJSON *o, sv_params *p, sv_error *e) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "prompt");
  if (!v) return sv_fail(e, 400, "prompt", "missing_required_parameter", "'prompt' is required");
  if (cJSON_IsString(v)) {
    p->prompt = v->valuestring;
    return 0;
  }
  const int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
  if (n == 1 && cJSON_IsString(cJSON_GetArrayItem(v, 0))) {
    p->prompt = cJSON_GetArrayItem(v, 0)->valuestring;
    return 0;
  }
  if (n > 0 && cJSON_IsNumber(cJSON_GetArrayItem(v, 0))) {
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    if (!ids) return sv_fail(e, 500, NULL, NULL, "out of memory");
    p->prompt_ids = ids;
    p->n_prompt_ids = (size_t)n;
    const cJSON *t;
    int i = 0;
    cJSON_ArrayForEach(t, v) {
      if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 ||
          t->valuedouble > INT32_MAX)
        return sv_fail(e, 400, "prompt", "invalid_type",
                       "'prompt' as a list holds token ids (integers >= 0)");
      ids[i++] = (int32_t)t->valuedouble;
    }
    return 0;
  }
  return sv_fail(e, 400, "prompt", "invalid_type",
                 "'prompt' must be a string, a list of one string or a list of token ids "
                 "(one prompt per request)");
}

/* A message's content: a string, or a list of {"type": "text", "text": ...} parts (one). */
static const char *content_text(const cJSON *c) {
  if (cJSON_IsString(c)) return c->valuestring;
  if (cJSON_IsArray(c) && cJSON_GetArraySize(c) == 1) {
    const cJSON *part = cJSON_GetArrayItem(c, 0);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
    if (cJSON_IsString(type) && strcmp(type->valuestring, "text") == 0 && cJSON_IsString(text))
      return text->valuestring;
  }
  return NULL;
}

static int get_messages(const cJSON *o, sv_params *p, sv_error *e) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "messages");
  if (!v)
    return sv_fail(e, 400, "messages", "missing_required_parameter", "'messages' is required");
  const int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
  if (n <= 0)
    return sv_fail(e, 400, "messages", "invalid_type", "'messages' must be a non-empty list");
  if (!(p->messages = calloc((size_t)n, sizeof *p->messages)))
    return sv_fail(e, 500, NULL, NULL, "out of memory");
  const cJSON *m;
  cJSON_ArrayForEach(m, v) {
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
    const char *text = content_text(cJSON_GetObjectItemCaseSensitive(m, "content"));
    if (!cJSON_IsString(role) || !text)
      return sv_fail(e, 400, "messages", "invalid_type",
                     "messages[%zu] needs a string 'role' and a text 'content'", p->n_messages);
    p->messages[p->n_messages++] = (sv_message){role->valuestring, text};
  }
  return 0;
}

static int get_stop(const cJSON *o, sv_params *p, sv_error *e) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "stop");
  if (!v || cJSON_IsNull(v)) return 0;
  if (cJSON_IsString(v)) {
    if (v->valuestring[0]) p->stop[p->n_stop++] = v->valuestring;
    return 0;
  }
  if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > SV_MAX_STOP)
    return sv_fail(e, 400, "stop", "invalid_type",
                   "'stop' must be a string or a list of at most %d strings", SV_MAX_STOP);
  const cJSON *s;
  cJSON_ArrayForEach(s, v) {
    if (!cJSON_IsString(s))
      return sv_fail(e, 400, "stop", "invalid_type", "'stop' must hold strings only");
    if (s->valuestring[0]) p->stop[p->n_stop++] = s->valuestring;
  }
  return 0;
}

/* The sampling fields, in OpenAI's ranges (top_k, min_p, repeat_penalty as llama.cpp's server
 * takes them). */
static int get_sampling(const cJSON *o, sv_params *p, sv_error *e) {
  kr_sampling *s = &p->sampling;
  double top_k = 0, seed = 0;
  if (get_float(o, "temperature", 0, 2, &s->temperature, e) ||
      get_float(o, "top_p", 0, 1, &s->top_p, e) || get_float(o, "min_p", 0, 1, &s->min_p, e) ||
      get_float(o, "presence_penalty", -2, 2, &s->presence_penalty, e) ||
      get_float(o, "frequency_penalty", -2, 2, &s->frequency_penalty, e) ||
      get_float(o, "repeat_penalty", 1e-6, 1e6, &s->repeat_penalty, e) ||
      get_int(o, "top_k", -1, INT32_MAX, &top_k, NULL, e) ||
      get_int(o, "seed", -9007199254740991.0, 9007199254740991.0, &seed, &p->has_seed, e))
    return -1;
  s->top_k = (int)top_k;
  s->seed = (uint64_t)(int64_t)seed;
  return 0;
}

int sv_parse_request(const char *body, size_t len, int chat, const char *model_id, sv_params *p,
                     void **root, sv_error *e) {
  memset(p, 0, sizeof *p);
  p->chat = chat;
  p->max_tokens = -1;
  p->sampling = (kr_sampling){.top_p = 1.0f, .repeat_penalty = 1.0f};
  cJSON *o = cJSON_ParseWithLength(body, len);
  *root = o;
  if (!o) return sv_fail(e, 400, NULL, "invalid_json", "the request body is not valid JSON");
  if (!cJSON_IsObject(o))
    return sv_fail(e, 400, NULL, "invalid_json", "the request body must be a JSON object");
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(o, "model");
  if (model && !cJSON_IsNull(model)) {
    if (!cJSON_IsString(model))
      return sv_fail(e, 400, "model", "invalid_type", "'model' must be a string");
    if (strcmp(model->valuestring, model_id) != 0)
      return sv_fail(e, 404, "model", "model_not_found",
                     "the model '%s' does not exist (this server serves '%s')", model->valuestring,
                     model_id);
  }
  double max_tokens = -1, n = 1;
  if ((chat ? get_messages(o, p, e) : get_prompt(o, p, e)) ||
      get_int(o, "max_tokens", 0, INT32_MAX, &max_tokens, NULL, e) ||
      get_int(o, "max_completion_tokens", 0, INT32_MAX, &max_tokens, NULL, e) ||
      get_int(o, "n", 1, INT32_MAX, &n, NULL, e) || get_stop(o, p, e) || get_sampling(o, p, e) ||
      get_bool(o, "stream", &p->stream, e))
    return -1;
  if (n != 1) return sv_fail(e, 400, "n", "invalid_value", "only n = 1 is supported");
  p->max_tokens = (int)max_tokens;
  const cJSON *so = cJSON_GetObjectItemCaseSensitive(o, "stream_options");
  if (so && !cJSON_IsNull(so)) {
    if (!cJSON_IsObject(so))
      return sv_fail(e, 400, "stream_options", "invalid_type",
                     "'stream_options' must be an object");
    if (get_bool(so, "include_usage", &p->include_usage, e)) return -1;
  }
  return 0;
}

void sv_params_free(sv_params *p, void *root) {
  free((void *)p->prompt_ids);
  free(p->messages);
  cJSON_Delete(root);
}

/* cJSON_PrintUnformatted of o, then o freed. */
static char *print(cJSON *o) {
  char *s = o ? cJSON_PrintUnformatted(o) : NULL;
  cJSON_Delete(o);
  return s;
}

char *sv_error_json(const sv_error *e) {
  cJSON *o = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(o, "error");
  cJSON_AddStringToObject(err, "message", e->message);
  cJSON_AddStringToObject(err, "type", e->type ? e->type : "invalid_request_error");
  if (e->param)
    cJSON_AddStringToObject(err, "param", e->param);
  else
    cJSON_AddNullToObject(err, "param");
  if (e->code)
    cJSON_AddStringToObject(err, "code", e->code);
  else
    cJSON_AddNullToObject(err, "code");
  return print(o);
}

/* A string item of text[len] (which may hold NULs: cJSON takes a C string). */
static cJSON *text_item(const char *text, size_t len) {
  char *s = malloc(len + 1);
  if (!s) return NULL;
  memcpy(s, text, len);
  s[len] = 0;
  cJSON *v = cJSON_CreateString(s);
  free(s);
  return v;
}

/* The fields every reply and chunk starts with. */
static cJSON *head(const sv_result *r, const char *object) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "id", r->id);
  cJSON_AddStringToObject(o, "object", object);
  cJSON_AddNumberToObject(o, "created", (double)r->created);
  cJSON_AddStringToObject(o, "model", r->model);
  return o;
}

static void add_usage(cJSON *o, const sv_result *r) {
  cJSON *u = cJSON_AddObjectToObject(o, "usage");
  cJSON_AddNumberToObject(u, "prompt_tokens", r->prompt_tokens);
  cJSON_AddNumberToObject(u, "completion_tokens", r->completion_tokens);
  cJSON_AddNumberToObject(u, "total_tokens", r->prompt_tokens + r->completion_tokens);
}

static void add_finish(cJSON *c, const sv_result *r) {
  cJSON_AddNullToObject(c, "logprobs");
  if (r->finish_reason)
    cJSON_AddStringToObject(c, "finish_reason", r->finish_reason);
  else
    cJSON_AddNullToObject(c, "finish_reason");
}

static char *result_json(const sv_result *r, int chunk) {
  cJSON *o =
      head(r, r->chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion");
  cJSON *c = cJSON_CreateObject();
  cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "choices"), c);
  cJSON_AddNumberToObject(c, "index", 0);
  if (!r->chat) {
    cJSON_AddItemToObject(c, "text", text_item(r->text, r->text_len));
  } else {
    cJSON *m = cJSON_AddObjectToObject(c, chunk ? "delta" : "message");
    if (!chunk || r->first) cJSON_AddStringToObject(m, "role", "assistant");
    if (!chunk || r->text_len || r->first)
      cJSON_AddItemToObject(m, "content", text_item(r->text, r->text_len));
  }
  add_finish(c, r);
  if (r->usage) add_usage(o, r);
  return print(o);
}

char *sv_reply_json(const sv_result *r) {
  return result_json(r, 0);
}

char *sv_chunk_json(const sv_result *r) {
  return result_json(r, 1);
}

char *sv_usage_chunk_json(const sv_result *r) {
  cJSON *o = head(r, r->chat ? "chat.completion.chunk" : "text_completion");
  cJSON_AddArrayToObject(o, "choices");
  add_usage(o, r);
  return print(o);
}

char *sv_models_json(const char *model_id, long long created) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "object", "list");
  cJSON *m = cJSON_CreateObject();
  cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), m);
  cJSON_AddStringToObject(m, "id", model_id);
  cJSON_AddStringToObject(m, "object", "model");
  cJSON_AddNumberToObject(m, "created", (double)created);
  cJSON_AddStringToObject(m, "owned_by", "kite");
  return print(o);
}

char *sv_health_json(int active, int queued, long long served, long long dropped) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "status", "ok");
  cJSON_AddNumberToObject(o, "active_sequences", active);
  cJSON_AddNumberToObject(o, "queued_requests", queued);
  cJSON_AddNumberToObject(o, "requests_served", (double)served);
  cJSON_AddNumberToObject(o, "requests_dropped", (double)dropped);
  return print(o);
}
