/*
 * kite serve's HTTP layer (libmicrohttpd, a thread per connection, so a handler may wait on its
 * request): routes, request bodies, JSON replies, and streams as server-sent events in OpenAI's
 * chunk format ending with `data: [DONE]`. A stream whose client goes away is cancelled from the
 * response's free callback, which libmicrohttpd calls when the connection closes.
 */
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "serve.h"
#include "utf8.h"

#define SV_MAX_BODY (16u << 20) /* request bodies past this are refused (413) */

struct sv_http {
  struct MHD_Daemon *d;
  sv_server_opts o;
  sv_engine *en;
  long long created;
  atomic_llong next_id;
  atomic_int in_flight; /* requests submitted whose reply is not yet sent in full */
};

/* A POST body being received. */
typedef struct body {
  char *p;
  size_t n, cap;
  int too_big;
} body;

/* A stream: the request, the SSE bytes made and not yet sent, and how far the text went. */
typedef struct stream {
  sv_http *h;
  sv_request *r;
  int fd; /* the connection's socket, watched for the client going away while text is awaited */
  sv_result res; /* the chunks' fixed fields */
  char id[48];
  char *out;
  size_t out_n, out_sent, out_cap;
  size_t text_sent; /* bytes of r->text sent */
  int first, finished, include_usage;
} stream;

/* A valid UTF-8 copy of s[n] (each byte of an invalid sequence, and NUL, becomes U+FFFD) into
 * *out, *out_n: JSON text must be UTF-8, and a token may end inside a character. */
static int clean_utf8(const char *s, size_t n, char **out, size_t *out_n) {
  char *o = malloc(3 * n + 1); /* one byte becomes at most U+FFFD's three */
  if (!o) return -1;
  size_t k = 0;
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    const size_t len = kr_utf8_next(s + i, n - i, &cp);
    /* overlong forms, surrogates and code points past U+10FFFF are invalid too */
    const size_t shortest = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    if (len != shortest || (cp >= 0xD800 && cp < 0xE000) || cp > 0x10FFFF || cp == 0) {
      cp = 0xFFFD;
      i += 1;
    } else {
      i += len;
    }
    k += kr_utf8_put(cp, o + k);
  }
  o[k] = 0;
  *out = o;
  *out_n = k;
  return 0;
}

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, char *json) {
  if (!json) return MHD_NO;
  struct MHD_Response *resp =
      MHD_create_response_from_buffer(strlen(json), json, MHD_RESPMEM_MUST_FREE);
  if (!resp) {
    free(json);
    return MHD_NO;
  }
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
  const enum MHD_Result rc = MHD_queue_response(c, status, resp);
  MHD_destroy_response(resp);
  return rc;
}

static enum MHD_Result send_error(struct MHD_Connection *c, const sv_error *e) {
  return send_json(c, (unsigned)e->status, sv_error_json(e));
}

/* Appends the event "data: json\n\n" (json freed; NULL: out of memory) to s's output. */
static int emit(stream *s, char *json) {
  if (!json) return -1;
  const size_t n = strlen(json), need = s->out_n + n + 8;
  if (need > s->out_cap) {
    char *p = realloc(s->out, need * 2);
    if (!p) {
      free(json);
      return -1;
    }
    s->out = p;
    s->out_cap = need * 2;
  }
  s->out_n += (size_t)sprintf(s->out + s->out_n, "data: %s\n\n", json);
  free(json);
  return 0;
}

static int connection_fd(struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  return ci ? ci->connect_fd : -1;
}

/* Whether the client closed its end (or the connection failed). */
static int client_gone(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLRDHUP};
  return fd >= 0 && poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* Makes the next SSE events of s: waits for text past what was sent, or the end. Returns 0, 1
 * when the client went away meanwhile, or -1 when out of memory. */
static int next_events(stream *s) {
  sv_request *r = s->r;
  s->out_n = s->out_sent = 0;
  if (s->first) { /* a chat stream opens with the role, at once (OpenAI's first chunk) */
    s->res.text = "";
    s->res.text_len = 0;
    s->res.first = 1;
    s->first = 0;
    return emit(s, sv_chunk_json(&s->res));
  }
  s->res.first = 0;
  pthread_mutex_lock(&r->mu);
  size_t upto;
  /* a request waiting its turn, or between tokens, notices a client that left within 50 ms */
  while ((upto = sv_wait_text(r, s->text_sent, 50)) == s->text_sent && !r->done)
    if (client_gone(s->fd)) {
      pthread_mutex_unlock(&r->mu);
      return 1;
    }
  char *delta = NULL;
  size_t delta_n = 0;
  const int rc =
      clean_utf8(r->text ? r->text + s->text_sent : "", upto - s->text_sent, &delta, &delta_n);
  s->text_sent = upto;
  const int done = r->done && upto == r->len;
  sv_error err = r->error;
  s->res.finish_reason = done ? r->finish_reason : NULL;
  s->res.completion_tokens = r->n_gen;
  pthread_mutex_unlock(&r->mu);
  if (rc) return -1;
  int bad = 0;
  if (done && !s->res.finish_reason) {
    bad = emit(s, sv_error_json(&err)); /* failed mid-stream */
  } else if (delta_n || done) {
    s->res.text = delta;
    s->res.text_len = delta_n;
    bad = emit(s, sv_chunk_json(&s->res));
  }
  free(delta);
  if (done && !bad) {
    if (s->include_usage && s->res.finish_reason) bad = emit(s, sv_usage_chunk_json(&s->res));
    if (!bad) bad = emit(s, strdup("[DONE]"));
    s->finished = 1;
  }
  return bad ? -1 : 0;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
  stream *s = cls;
  (void)pos;
  while (s->out_sent == s->out_n) {
    if (s->finished) return MHD_CONTENT_READER_END_OF_STREAM;
    if (next_events(s)) return MHD_CONTENT_READER_END_WITH_ERROR; /* closes: stream_free */
  }
  size_t n = s->out_n - s->out_sent;
  if (n > max) n = max;
  memcpy(buf, s->out + s->out_sent, n);
  s->out_sent += n;
  return (ssize_t)n;
}

/* The connection closed (the stream ended or the client went away): a request still running
 * is cancelled, and its sequence freed by the engine. */
static void stream_free(void *cls) {
  stream *s = cls;
  pthread_mutex_lock(&s->r->mu);
  const int running = !s->r->done;
  pthread_mutex_unlock(&s->r->mu);
  if (running) sv_cancel(s->h->en, s->r);
  atomic_fetch_sub(&s->h->in_flight, 1);
  sv_request_put(s->r);
  free(s->out);
  free(s);
}

/* Queues the stream of r, which it takes (its reference and its count in flight). */
static enum MHD_Result start_stream(struct MHD_Connection *c, sv_http *h, sv_request *r,
                                    const sv_result *res) {
  stream *s = calloc(1, sizeof *s);
  if (!s) {
    sv_cancel(h->en, r);
    atomic_fetch_sub(&h->in_flight, 1);
    sv_request_put(r);
    return MHD_NO;
  }
  s->h = h;
  s->r = r;
  s->fd = connection_fd(c);
  s->res = *res;
  snprintf(s->id, sizeof s->id, "%s", res->id);
  s->res.id = s->id;
  s->res.usage = 0; /* chunks carry none; the usage chunk (include_usage) comes last */
  s->include_usage = res->usage;
  s->first = res->chat;
  struct MHD_Response *resp =
      MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, s, stream_free);
  if (!resp) {
    stream_free(s);
    return MHD_NO;
  }
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
  const enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, resp);
  MHD_destroy_response(resp);
  return rc;
}

/* The prompt's token ids: the model's BOS where it wants one, then the text (special tokens
 * parsed, as kite run does), or the ids given. */
static int prompt_ids(const sv_http *h, const sv_params *p, int32_t **ids, size_t *n, sv_error *e) {
  const kr_tokenizer *tok = h->o.tok;
  size_t cap = 0;
  *ids = NULL;
  *n = 0;
  if (p->prompt_ids) {
    const int32_t vocab = kr_tok_vocab(tok);
    for (size_t i = 0; i < p->n_prompt_ids; i++)
      if (p->prompt_ids[i] >= vocab)
        return sv_fail(e, 400, "prompt", "invalid_value",
                       "prompt token %d is outside the vocabulary of %d", p->prompt_ids[i], vocab);
    if (!(*ids = malloc(p->n_prompt_ids * sizeof **ids)))
      return sv_fail(e, 500, NULL, NULL, "out of memory");
    memcpy(*ids, p->prompt_ids, p->n_prompt_ids * sizeof **ids);
    *n = p->n_prompt_ids;
    return 0;
  }
  char *chat = NULL;
  const char *text = p->prompt;
  if (p->chat && !(text = chat = sv_chat_prompt(h->o.tpl, tok, p->messages, p->n_messages, e)))
    return -1;
  int rc = 0;
  if (kr_tok_add_bos(tok) && kr_tok_bos(tok) >= 0) {
    if (!(*ids = malloc(16 * sizeof **ids))) rc = -1;
    cap = 16;
    if (!rc) (*ids)[(*n)++] = kr_tok_bos(tok);
  }
  if (!rc) rc = kr_tok_encode(tok, text, strlen(text), 1, ids, n, &cap);
  free(chat);
  return rc ? sv_fail(e, 500, NULL, NULL, "out of memory") : 0;
}

/* Refuses what cannot run whole: the prompt and max_tokens must fit the context. */
static int check_fit(const sv_http *h, const sv_params *p, size_t n, int *max_tokens, sv_error *e) {
  const size_t ctx = (size_t)h->o.ctx_len;
  if (n == 0) return sv_fail(e, 400, p->chat ? "messages" : "prompt", NULL, "the prompt is empty");
  if (n >= ctx)
    return sv_fail(e, 400, p->chat ? "messages" : "prompt", "context_length_exceeded",
                   "the prompt has %zu tokens; this server's context is %zu tokens", n, ctx);
  /* completions default to 16 tokens (OpenAI's), chat to the rest of the context */
  *max_tokens = p->max_tokens >= 0 ? p->max_tokens : p->chat ? (int)(ctx - n) : 16;
  if (n + (size_t)*max_tokens > ctx)
    return sv_fail(e, 400, "max_tokens", "context_length_exceeded",
                   "the prompt (%zu tokens) and max_tokens (%d) need %zu tokens; this server's "
                   "context is %zu tokens",
                   n, *max_tokens, n + (size_t)*max_tokens, ctx);
  return 0;
}

static enum MHD_Result completion(struct MHD_Connection *c, sv_http *h, const body *b, int chat) {
  sv_params p;
  void *root = NULL;
  sv_error e = {0};
  int32_t *ids = NULL;
  size_t n = 0;
  int max_tokens = 0;
  sv_request *r = NULL;
  enum MHD_Result rc;
  if (sv_parse_request(b->p ? b->p : "", b->n, chat, h->o.model_id, &p, &root, &e) ||
      prompt_ids(h, &p, &ids, &n, &e) || check_fit(h, &p, n, &max_tokens, &e))
    goto refuse;
  const long long num = atomic_fetch_add(&h->next_id, 1);
  if (!p.has_seed) /* a seed of its own (it matters only when sampling) */
    p.sampling.seed = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull + (uint64_t)num;
  if (!(r = sv_request_new(ids, n, max_tokens, &p))) {
    sv_fail(&e, 500, NULL, NULL, "out of memory");
    goto refuse;
  }
  if (sv_submit(h->en, r, &e)) goto refuse;
  atomic_fetch_add(&h->in_flight, 1); /* until the reply is queued, or the stream freed */
  char id[48];
  snprintf(id, sizeof id, "%s-%lld", chat ? "chatcmpl" : "cmpl", num);
  sv_result res = {.id = id,
                   .model = h->o.model_id,
                   .created = (long long)time(NULL),
                   .chat = chat,
                   .prompt_tokens = (int)n,
                   .usage = p.include_usage};
  if (p.stream) {
    rc = start_stream(c, h, r, &res); /* the stream owns r now */
    r = NULL;
    goto done;
  }
  /* the whole reply: a client that leaves meanwhile is noticed within 50 ms and its request
   * cancelled (which ends it at the engine's next step) */
  const int fd = connection_fd(c);
  int gone = 0;
  pthread_mutex_lock(&r->mu);
  while (!r->done) {
    sv_wait_text(r, (size_t)-1, 50);
    if (!r->done && !gone && client_gone(fd)) {
      gone = 1;
      pthread_mutex_unlock(&r->mu);
      sv_cancel(h->en, r);
      pthread_mutex_lock(&r->mu);
    }
  }
  pthread_mutex_unlock(&r->mu);
  atomic_fetch_sub(&h->in_flight, 1);
  if (!r->finish_reason) {
    e = r->error;
    goto refuse;
  }
  char *text;
  if (clean_utf8(r->text ? r->text : "", r->len, &text, &res.text_len)) {
    sv_fail(&e, 500, NULL, NULL, "out of memory");
    goto refuse;
  }
  res.text = text;
  res.finish_reason = r->finish_reason;
  res.completion_tokens = r->n_gen;
  res.usage = 1;
  rc = send_json(c, MHD_HTTP_OK, sv_reply_json(&res));
  free(text);
  goto done;
refuse:
  rc = send_error(c, &e);
done:
  sv_request_put(r);
  free(ids);
  sv_params_free(&p, root);
  return rc;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls) {
  sv_http *h = cls;
  (void)version;
  const int post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;
  if (post) { /* gather the body over the calls; the last has no data */
    body *b = *con_cls;
    if (!b) {
      if (!(b = calloc(1, sizeof *b))) return MHD_NO;
      *con_cls = b;
      return MHD_YES;
    }
    if (*upload_size) {
      if (b->n + *upload_size > SV_MAX_BODY) b->too_big = 1;
      if (!b->too_big && b->n + *upload_size + 1 > b->cap) {
        const size_t cap = 2 * (b->n + *upload_size) + 1;
        char *p = realloc(b->p, cap);
        if (!p) return MHD_NO;
        b->p = p;
        b->cap = cap;
      }
      if (!b->too_big) memcpy(b->p + b->n, upload, *upload_size), b->n += *upload_size;
      *upload_size = 0;
      return MHD_YES;
    }
  }
  sv_error e = {0};
  const body *b = *con_cls;
  const int chat = strcmp(url, "/v1/chat/completions") == 0;
  if (chat || strcmp(url, "/v1/completions") == 0) {
    if (!post) return sv_fail(&e, 405, NULL, NULL, "%s takes POST", url), send_error(c, &e);
    if (b->too_big)
      return sv_fail(&e, 413, NULL, NULL, "the request body is over %u bytes", SV_MAX_BODY),
             send_error(c, &e);
    return completion(c, h, b, chat);
  }
  const int get = strcmp(method, MHD_HTTP_METHOD_GET) == 0;
  if (strcmp(url, "/v1/models") == 0 || strcmp(url, "/health") == 0) {
    if (!get) return sv_fail(&e, 405, NULL, NULL, "%s takes GET", url), send_error(c, &e);
    if (url[1] == 'v') return send_json(c, MHD_HTTP_OK, sv_models_json(h->o.model_id, h->created));
    int active, queued;
    long long served, dropped;
    sv_engine_counts(h->en, &active, &queued, &served, &dropped);
    return send_json(c, MHD_HTTP_OK, sv_health_json(active, queued, served, dropped));
  }
  sv_fail(&e, 404, NULL, "not_found", "no endpoint %s %s", method, url);
  return send_error(c, &e);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe) {
  (void)cls, (void)c, (void)toe;
  body *b = *con_cls;
  if (b) free(b->p);
  free(b);
  *con_cls = NULL;
}

sv_http *sv_http_start(const sv_server_opts *o, sv_engine *en, char *err, size_t err_len) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
  char port[16];
  snprintf(port, sizeof port, "%d", o->port);
  const int gai = getaddrinfo(o->host, port, &hints, &ai);
  if (gai) {
    snprintf(err, err_len, "--host %s: %s", o->host, gai_strerror(gai));
    return NULL;
  }
  sv_http *h = calloc(1, sizeof *h);
  if (!h) {
    freeaddrinfo(ai);
    snprintf(err, err_len, "out of memory");
    return NULL;
  }
  h->o = *o;
  h->en = en;
  h->created = (long long)time(NULL);
  unsigned flags =
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG;
  if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
  h->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, handle, h, MHD_OPTION_SOCK_ADDR,
                          ai->ai_addr, MHD_OPTION_NOTIFY_COMPLETED, completed, h, MHD_OPTION_END);
  freeaddrinfo(ai);
  if (!h->d) {
    snprintf(err, err_len, "cannot listen on %s port %d", o->host, o->port);
    free(h);
    return NULL;
  }
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
  if (info) h->o.port = info->port;
  return h;
}

int sv_http_port(const sv_http *h) {
  return h->o.port;
}

void sv_http_stop(sv_http *h) {
  if (!h) return;
  /* no new connections; the replies in flight (ended by the engine's stop) go out first, for
   * up to 10 s */
  const MHD_socket listen = MHD_quiesce_daemon(h->d);
  for (int i = 0; i < 1000 && atomic_load(&h->in_flight) > 0; i++)
    nanosleep(&(struct timespec){0, 10000000}, NULL);
  MHD_stop_daemon(h->d);
  if (listen != MHD_INVALID_SOCKET) close(listen);
  free(h);
}
