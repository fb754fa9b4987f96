/*
 * kite serve: an OpenAI-compatible HTTP server over the engine. Three parts, one file each:
 *   serve_http.c    libmicrohttpd: routes, request bodies, replies, server-sent events
 *   serve_json.c    cJSON: request fields into a sv_params, replies and errors out
 *   serve_engine.c  the engine thread: owns the model, steps the scheduler's continuous batch;
 *                   HTTP threads hand it requests and wait on each request's own text queue
 * and serve.c, the command (options, loading, signals).
 */
#ifndef KITE_ENGINE_SERVE_H
#define KITE_ENGINE_SERVE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "chat_template.h"
#include "gguf.h"
#include "model.h"
#include "tokenizer.h"

#define SV_MAX_STOP 16 /* stop strings per request */

/* An OpenAI-style error: the HTTP status and the fields of {"error": {...}}. */
typedef struct sv_error {
  int status;                      /* 400, 404, 500, 503 */
  const char *type, *param, *code; /* static strings; param and code may be NULL */
  char message[512];
} sv_error;

/* Fills e and returns -1. */
int sv_fail(sv_error *e, int status, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* One chat message (pointers into the parsed request). */
typedef struct sv_message {
  const char *role, *content;
} sv_message;

/* A request's fields after parsing (strings point into the cJSON tree the caller keeps). */
typedef struct sv_params {
  int chat; /* /v1/chat/completions (messages) or /v1/completions (prompt) */
  const char *prompt;
  const int32_t *prompt_ids; /* a prompt given as token ids (owned) */
  size_t n_prompt_ids;
  sv_message *messages; /* [n_messages] (owned) */
  size_t n_messages;
  int max_tokens; /* -1: not given */
  kr_sampling sampling;
  int has_seed;
  const char *stop[SV_MAX_STOP];
  int n_stop;
  int stream, include_usage;
} sv_params;

/* ---- serve_json.c --------------------------------------------------------------------------- */
/* Parses body[len] of a completion (chat = 0) or chat completion request into p (sampling
 * defaults: greedy, top_p 1, repetition 1) for the served model `model_id`. *root receives the
 * cJSON tree p points into (free it with sv_params_free). Returns 0, or -1 with e filled. */
int sv_parse_request(const char *body, size_t len, int chat, const char *model_id, sv_params *p,
                     void **root, sv_error *e);
void sv_params_free(sv_params *p, void *root);
/* The JSON texts of replies (malloc'ed; NULL when out of memory). */
char *sv_error_json(const sv_error *e);
typedef struct sv_result {
  const char *id, *model;
  long long created;
  int chat;
  const char *text; /* the text (a whole reply) or the delta (a chunk) */
  size_t text_len;
  const char *finish_reason; /* NULL: not finished (a chunk) */
  int prompt_tokens, completion_tokens;
  int usage, first; /* with usage; the first chunk of a chat stream (carries the role) */
} sv_result;
char *sv_reply_json(const sv_result *r);
char *sv_chunk_json(const sv_result *r);
/* The usage-only chunk a stream with stream_options.include_usage ends with. */
char *sv_usage_chunk_json(const sv_result *r);
char *sv_models_json(const char *model_id, long long created);
char *sv_health_json(int active, int queued, long long served, long long dropped);

/* ---- serve_engine.c ------------------------------------------------------------------------- */
typedef struct sv_engine sv_engine;

/* A request in flight: the HTTP thread makes it, the engine thread fills its text; both hold a
 * reference (sv_request_put drops one; the last frees it). */
typedef struct sv_request {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int refs;
  /* set by the HTTP thread before submitting */
  int32_t *prompt;
  size_t n_prompt;
  int max_tokens;
  kr_sampling sampling;
  char *stop[SV_MAX_STOP];
  int n_stop;
  size_t stop_hold; /* bytes a stream holds back: the longest stop string's length - 1 */
  /* written by the engine thread under mu */
  char *text; /* the generated text so far, [len] */
  size_t len, cap;
  int n_gen;     /* tokens generated */
  int done;      /* finished (finish_reason) or failed (error): the waiter may reply */
  int ended;     /* the engine's: ends after this step (a stop string, an error) */
  int cancelled; /* the client went away (set by the HTTP thread) */
  const char *finish_reason;
  sv_error error;
  /* the engine thread's own */
  int seq;     /* the scheduler's index, -1 before submit */
  size_t scan; /* text bytes already searched for stop strings */
  struct sv_request *next;
} sv_request;

/* Starts the engine thread over a loaded model (which it then owns until sv_engine_stop). */
sv_engine *sv_engine_start(kr_model *m, const kr_tokenizer *tok, char *err, size_t err_len);
/* Stops the thread: requests in flight and later submits end with an error (503). */
void sv_engine_stop(sv_engine *en);
/* Frees the engine and its model (after sv_engine_stop, once no HTTP thread can reach it). */
void sv_engine_free(sv_engine *en);
/* A new request for prompt[n] (copied) with p's settings; NULL when out of memory. */
sv_request *sv_request_new(const int32_t *prompt, size_t n, int max_tokens, const sv_params *p);
void sv_request_put(sv_request *r);
/* Queues r for the engine (which takes a reference). Returns 0, or -1 with e filled (shutting
 * down). */
int sv_submit(sv_engine *en, sv_request *r, sv_error *e);
/* Marks r as dropped by its client: the engine frees its sequence at its next step. */
void sv_cancel(sv_engine *en, sv_request *r);
/* Waits until r has more than `have` bytes that can be sent (a stream holds back a tail that may
 * still become a stop string, and incomplete UTF-8) or is done, for up to timeout_ms. Returns the
 * sendable length (`have` when the time ran out); r->mu must be held. */
size_t sv_wait_text(sv_request *r, size_t have, int timeout_ms);
void sv_engine_counts(sv_engine *en, int *active, int *queued, long long *served,
                      long long *dropped);

/* ---- serve_http.c --------------------------------------------------------------------------- */
typedef struct sv_server_opts {
  const char *host;
  int port;
  const char *model_id;
  int ctx_len;
  const kr_gguf *g;
  const kr_tokenizer *tok;
  const kr_chat_template *tpl; /* the model's chat template (read only: shared by the threads) */
} sv_server_opts;
typedef struct sv_http sv_http;
sv_http *sv_http_start(const sv_server_opts *o, sv_engine *en, char *err, size_t err_len);
/* The port it listens on (the one the system chose for port 0). */
int sv_http_port(const sv_http *h);
/* Closes the listening socket, waits for the connections' threads, frees h. */
void sv_http_stop(sv_http *h);

/* The prompt text of a conversation through the model's chat template (kite run --chat's), ending
 * with the assistant's turn header: the one place chat formatting is chosen. Returns a malloc'ed
 * string, or NULL with e filled (400 with the template's own message for a conversation the
 * template refuses). */
char *sv_chat_prompt(const kr_chat_template *tpl, const kr_tokenizer *tok, const sv_message *msgs,
                     size_t n, sv_error *e);

/* `kite serve` (argv: the options after "serve"); returns the exit code. */
int kr_cmd_serve(int argc, char **argv);

#endif /* KITE_ENGINE_SERVE_H */
