/*
 * kite serve MODEL.gguf [OPTIONS]: loads the model, starts the engine thread and the HTTP
 * server, prints the address it listens on, and runs until SIGINT or SIGTERM (then requests in
 * flight end with an error, the connections close and everything is freed).
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run.h"
#include "serve.h"

char *sv_chat_prompt(const kr_chat_template *tpl, const kr_tokenizer *tok, const sv_message *msgs,
                     size_t n, sv_error *e) {
  /* a conversation that borrows the request's strings: kr_chat_prompt only reads it */
  kr_chat_msg *m = malloc((n ? n : 1) * sizeof *m);
  if (!m) {
    sv_fail(e, 500, NULL, NULL, "out of memory");
    return NULL;
  }
  for (size_t i = 0; i < n; i++) m[i] = (kr_chat_msg){msgs[i].role, msgs[i].content};
  const kr_chat_conv conv = {.msgs = m, .n = n, .cap = n};
  char err[1024];
  char *s = kr_chat_prompt(tpl, tok, &conv, -1, err, sizeof err);
  free(m);
  if (!s) sv_fail(e, 400, "messages", "invalid_value", "%s", err);
  return s;
}

typedef struct serve_opts {
  const char *model, *host, *alias;
  int port, ctx, parallel, threads, chunk, tp, help;
  DLDeviceType device;
  kr_weights weights;
} serve_opts;

static void usage(FILE *f) {
  fprintf(f,
          "usage: kite serve MODEL.gguf [OPTIONS]\n"
          "\n"
          "An OpenAI-compatible HTTP server: POST /v1/completions, POST /v1/chat/completions\n"
          "(stream: true for server-sent events), GET /v1/models, GET /health.\n"
          "\n"
          "  --host H        address to listen on (default 127.0.0.1)\n"
          "  --port N        port, [0, 65535] (default 8080; 0: any free one, printed)\n"
          "  --ctx N         context per request in tokens (default: the model's, at most %d)\n"
          "  --parallel N    requests decoded together in one batch, [1, %d] (default 4;\n"
          "                  the KV cache holds a whole context for each)\n"
          "  --chunk T       prefill tokens per step, [1, %d] (default 512)\n"
          "  --threads N     CPU threads (default 0: all cores), per rank with --tp\n"
          "  --tp N          tensor parallelism over N ranks in this process, [1, %d] (as kite\n"
          "                  run: CUDA devices 0..N-1, or N CPU ctxs)\n"
          "  --device D      cpu (default) or cuda\n"
          "  --weights W     auto | f32 | bf16 | int8 | q4 (as kite run; default auto)\n"
          "  --alias NAME    the model's id in the API (default: the file's name)\n",
          KR_DEFAULT_CTX_CAP, KR_MAX_BATCH, KR_MAX_TOKENS, KR_MAX_TP);
}

static int int_opt(const char *opt, const char *v, long lo, long hi, int *out) {
  char *end;
  errno = 0;
  const long x = v[0] >= '0' && v[0] <= '9' ? strtol(v, &end, 10) : (end = (char *)v, 0);
  if (end == v || *end || errno || x < lo || x > hi) {
    fprintf(stderr, "kite serve: %s '%s' is not an integer in [%ld, %ld]\n", opt, v, lo, hi);
    return 0;
  }
  *out = (int)x;
  return 1;
}

/* Returns 0, or 2 (usage) after printing the problem. */
static int parse(int argc, char **argv, serve_opts *o) {
  *o = (serve_opts){
      .host = "127.0.0.1", .port = 8080, .parallel = 4, .chunk = 512, .tp = 1, .device = kDLCPU};
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      o->help = 1;
      continue;
    }
    if (a[0] != '-') {
      if (o->model) {
        fprintf(stderr, "kite serve: one model file (got '%s' and '%s')\n", o->model, a);
        return 2;
      }
      o->model = a;
      continue;
    }
    if (i + 1 == argc) {
      fprintf(stderr, "kite serve: %s needs a value (or is unknown: kite serve --help)\n", a);
      return 2;
    }
    const char *v = argv[++i];
    int ok = 1;
    if (strcmp(a, "--model") == 0)
      o->model = v;
    else if (strcmp(a, "--host") == 0)
      o->host = v;
    else if (strcmp(a, "--alias") == 0)
      o->alias = v;
    else if (strcmp(a, "--port") == 0)
      ok = int_opt(a, v, 0, 65535, &o->port);
    else if (strcmp(a, "--ctx") == 0)
      ok = int_opt(a, v, 2, INT_MAX, &o->ctx);
    else if (strcmp(a, "--parallel") == 0)
      ok = int_opt(a, v, 1, KR_MAX_BATCH, &o->parallel);
    else if (strcmp(a, "--chunk") == 0)
      ok = int_opt(a, v, 1, KR_MAX_TOKENS, &o->chunk);
    else if (strcmp(a, "--threads") == 0)
      ok = int_opt(a, v, 0, 4096, &o->threads);
    else if (strcmp(a, "--tp") == 0)
      ok = int_opt(a, v, 1, KR_MAX_TP, &o->tp);
    else if (strcmp(a, "--weights") == 0) {
      if (kr_weights_parse(v, &o->weights)) {
        fprintf(stderr, "kite serve: --weights %s unknown (auto, f32, bf16, int8, q4)\n", v);
        return 2;
      }
    } else if (strcmp(a, "--device") == 0 && (strcmp(v, "cpu") == 0 || strcmp(v, "cuda") == 0))
      o->device = v[1] == 'p' ? kDLCPU : kDLCUDA;
    else {
      fprintf(stderr, "kite serve: unknown option '%s %s' (kite serve --help lists them)\n", a, v);
      return 2;
    }
    if (!ok) return 2;
  }
  if (!o->help && !o->model) {
    fprintf(stderr, "kite serve: a model file is required (kite serve MODEL.gguf)\n");
    return 2;
  }
  return 0;
}

/* Loads the model onto new ctxs, one per tensor-parallel rank (ctxs[o->tp]; all returned).
 * Returns 0, or an exit code after a message. */
static int load(const serve_opts *o, const kr_gguf *g, const kr_tokenizer *tok, kite_ctx **ctxs,
                kr_model **m) {
  char err[1024];
  kr_config c;
  if (kr_model_probe(g, &c, err, sizeof err)) {
    fprintf(stderr, "kite serve: %s\n", err);
    return 1;
  }
  if (o->ctx > c.n_ctx) {
    fprintf(stderr, "kite serve: --ctx %d is more than the model's context length %d\n", o->ctx,
            c.n_ctx);
    return 2;
  }
  if (kr_tok_vocab(tok) != c.n_vocab) {
    fprintf(stderr, "kite serve: the tokenizer has %d tokens but the embedding %d rows\n",
            kr_tok_vocab(tok), c.n_vocab);
    return 1;
  }
  for (int i = 0; i < o->tp; i++) {
    kite_ctx_params cp = kite_ctx_params_default();
    cp.device.device_type = o->device;
    cp.device.device_id = o->device == kDLCPU ? 0 : i;
    cp.num_threads = o->threads;
    if (kite_ctx_create(&cp, &ctxs[i]) != KITE_OK) {
      fprintf(stderr, "kite serve: %s\n", kite_last_error());
      return 1;
    }
  }
  /* KV blocks for every request's whole context: a request that fits is never cut short */
  const kr_model_params mp = {.weights = o->weights,
                              .max_batch = o->parallel,
                              .max_tokens = o->chunk < o->parallel ? o->parallel : o->chunk,
                              .block_size = 16,
                              .ctx_len = o->ctx};
  if (!(*m = kr_model_load_tp(ctxs, o->tp, g, &mp, err, sizeof err))) {
    fprintf(stderr, "kite serve: %s\n", err);
    return 1;
  }
  return 0;
}

int kr_cmd_serve(int argc, char **argv) {
  serve_opts o;
  int rc = parse(argc, argv, &o);
  if (rc || o.help) {
    if (o.help) usage(stdout);
    return rc;
  }
  /* SIGINT and SIGTERM are taken by sigwait below: blocked here, before any thread starts, so
   * that every thread inherits the mask */
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, NULL);
  signal(SIGPIPE, SIG_IGN); /* a client that goes away is a failed write, not an exit */
  char err[1024];
  kr_gguf g;
  if (kr_gguf_open(o.model, &g, err, sizeof err)) {
    fprintf(stderr, "kite serve: %s\n", err);
    return 1;
  }
  kr_tokenizer *tok = kr_tok_load(&g, err, sizeof err);
  kite_ctx *ctxs[KR_MAX_TP] = {NULL};
  kr_model *m = NULL;
  sv_engine *en = NULL;
  sv_http *h = NULL;
  kr_chat_template *tpl = NULL;
  rc = 1;
  if (!tok || !(tpl = kr_chat_template_load(&g, tok, err, sizeof err))) {
    fprintf(stderr, "kite serve: %s\n", err);
    goto done;
  }
  if (kr_chat_template_note(tpl)) fprintf(stderr, "kite serve: %s\n", kr_chat_template_note(tpl));
  if ((rc = load(&o, &g, tok, ctxs, &m)) != 0) goto done;
  rc = 1;
  const char *base = strrchr(o.model, '/');
  const sv_server_opts so = {.host = o.host,
                             .port = o.port,
                             .model_id = o.alias ? o.alias
                                         : base  ? base + 1
                                                 : o.model,
                             .ctx_len = kr_model_ctx_len(m),
                             .g = &g,
                             .tok = tok,
                             .tpl = tpl};
  if (!(en = sv_engine_start(m, tok, err, sizeof err))) {
    fprintf(stderr, "kite serve: %s\n", err);
    goto done;
  }
  m = NULL; /* the engine's now */
  if (!(h = sv_http_start(&so, en, err, sizeof err))) {
    fprintf(stderr, "kite serve: %s\n", err);
    goto done;
  }
  fprintf(stderr, "kite serve: %s (context %d, %d in parallel) on http://%s:%d\n", so.model_id,
          so.ctx_len, o.parallel, o.host, sv_http_port(h));
  int sig = 0;
  sigwait(&sigs, &sig);
  fprintf(stderr, "kite serve: %s, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  rc = 0;
done:
  sv_engine_stop(en); /* requests in flight end (503), so their connections can close */
  sv_http_stop(h);
  sv_engine_free(en);
  kr_model_free(m);
  for (int i = 0; i < KR_MAX_TP; i++)
    if (ctxs[i]) kite_ctx_destroy(ctxs[i]);
  kr_chat_template_free(tpl);
  kr_tok_free(tok);
  kr_gguf_close(&g);
  return rc;
}
