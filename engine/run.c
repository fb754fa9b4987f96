/*
 * kite run: text generation with a GGUF model on kite's ops (the options: run_options.c).
 * A run opens the file and its tokenizer, checks the options against the model, loads it, reads
 * the prompts, generates, and reports: the seed first and the timings last, on stderr; the text
 * (or ids) alone on stdout.
 */
#include "run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chat_template.h"
#include "common.h"
#include "gguf.h"
#include "model.h"
#include "run_options.h"
#include "tokenizer.h"

/* What one run holds; run_free releases all of it. */
typedef struct run {
  const kr_run_opts *o;
  kr_sampling sampling; /* o's, with the seed drawn when none was given */
  kr_gguf g;
  kr_tokenizer *tok;
  kr_chat_template *tpl;     /* --chat's */
  kr_chat_conv conv;         /* --chat's conversation so far */
  kite_ctx *ctxs[KR_MAX_TP]; /* [o->tp] a ctx per tensor-parallel rank */
  kr_model *m;
  char *owned;  /* the --prompts file's text or the --chat turn, which texts point into */
  char **texts; /* [n_prompts] */
  int n_prompts;
  int32_t **outs; /* [n_prompts][out_cap] the generated ids of each prompt */
  size_t *out_n;  /* [n_prompts] */
  size_t out_cap;
  int32_t *ids; /* tokenization scratch [cap_ids] */
  size_t cap_ids;
  double load_s, run_s; /* loading the model, and generating */
} run;

/* Called for each generated token; streams it when one prompt runs. */
typedef struct stream {
  const run *r;
  int streaming, ignore_eos;
} stream;

static void put_piece(const kr_tokenizer *tok, int32_t id) {
  char buf[256];
  const size_t len = kr_tok_piece(tok, id, 0, buf, sizeof buf);
  fwrite(buf, 1, len < sizeof buf ? len : sizeof buf, stdout);
}

static void on_token(void *user, int seq, int32_t token) {
  const stream *st = user;
  const run *r = st->r;
  if (r->outs && r->out_n[seq] < r->out_cap) r->outs[seq][r->out_n[seq]++] = token;
  if (!st->streaming) return;
  if (r->o->print_ids)
    printf(" %d", token);
  else
    put_piece(r->tok, token);
  fflush(stdout);
}

static int on_stop(void *user, int32_t token) {
  const stream *st = user;
  return !st->ignore_eos && kr_tok_is_eog(st->r->tok, token);
}

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 4096, n = 0, got;
  char *buf = malloc(cap);
  while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
    n += got;
    if (n + 1 == cap) {
      char *b = realloc(buf, cap * 2);
      if (!b) free(buf);
      buf = b;
      cap *= 2;
    }
  }
  fclose(f);
  if (buf) buf[n] = 0;
  return buf;
}

/* --chat's conversation (the --system message, then `user` when not NULL) as the model's chat
 * template writes it, ready for generation; NULL after printing why. */
static char *chat_prompt(run *r, const char *user) {
  char err[1024];
  char *s = NULL;
  if (!r->tpl) {
    if (!(r->tpl = kr_chat_template_load(&r->g, r->tok, err, sizeof err))) goto fail;
    if (kr_chat_template_note(r->tpl))
      fprintf(stderr, "kite run: %s\n", kr_chat_template_note(r->tpl));
    if (r->o->system && kr_chat_add(&r->conv, "system", r->o->system, strlen(r->o->system)))
      goto oom;
  }
  if (user && kr_chat_add(&r->conv, "user", user, strlen(user))) goto oom;
  if ((s = kr_chat_prompt(r->tpl, r->tok, &r->conv, r->o->no_think ? 0 : -1, err, sizeof err)))
    return s;
fail:
  fprintf(stderr, "kite run: %s\n", err);
  return NULL;
oom:
  fprintf(stderr, "kite run: out of memory\n");
  return NULL;
}

/* A seed from the system's entropy (the time and pid where that cannot be read). */
static uint64_t random_seed(void) {
  uint64_t s = 0;
  FILE *f = fopen("/dev/urandom", "rb");
  if (!f || fread(&s, sizeof s, 1, f) != 1)
    s = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)clock();
  if (f) fclose(f);
  return s;
}

/* The prompts' texts: the --prompts file's non-empty lines, or --chat's turn, or --prompt. */
static int read_prompts(run *r) {
  const kr_run_opts *o = r->o;
  if (o->prompts_file) {
    if (!(r->owned = read_file(o->prompts_file))) {
      fprintf(stderr, "kite run: cannot read %s\n", o->prompts_file);
      return 1;
    }
    if (!(r->texts = calloc(strlen(r->owned) + 1, sizeof *r->texts))) return 1;
    for (char *line = strtok(r->owned, "\n"); line; line = strtok(NULL, "\n"))
      if (line[0]) r->texts[r->n_prompts++] = line;
  } else {
    if (!(r->texts = calloc(1, sizeof *r->texts))) return 1;
    if (o->chat && strcmp(o->chat, "-") == 0)
      r->texts[0] = (char *)""; /* chat_loop reads the turns */
    else if (o->chat) {
      if (!(r->texts[0] = r->owned = chat_prompt(r, o->chat))) return 1; /* it said why */
    } else {
      r->texts[0] = (char *)(o->prompt ? o->prompt : "");
    }
    r->n_prompts = 1;
  }
  if (r->n_prompts == 0 || !r->texts[0]) {
    fprintf(stderr, "kite run: no prompt (--prompt, --chat or --prompts)\n");
    return 1;
  }
  return 0;
}

/* The model's geometry against the options and the tokenizer, then the load. Returns 0 or an
 * exit code. */
static int load_model(run *r) {
  const kr_run_opts *o = r->o;
  char err[1024];
  kr_config c;
  if (kr_model_probe(&r->g, &c, err, sizeof err)) {
    fprintf(stderr, "kite run: %s\n", err);
    return 1;
  }
  if (o->ctx > c.n_ctx) {
    fprintf(stderr, "kite run: --ctx %d is more than the model's context length %d\n", o->ctx,
            c.n_ctx);
    return 2;
  }
  /* ids past the tokenizer could be generated but not printed, ids past the embedding not run */
  if (kr_tok_vocab(r->tok) != c.n_vocab) {
    fprintf(stderr,
            "kite run: the tokenizer has %d tokens but token_embd.weight has %d rows: the "
            "file's vocabulary and embedding disagree\n",
            kr_tok_vocab(r->tok), c.n_vocab);
    return 1;
  }
  for (int i = 0; i < o->tp; i++) { /* rank i on CUDA device i, or a CPU ctx of its own */
    kite_ctx_params cp = kite_ctx_params_default();
    cp.device.device_type = o->device;
    cp.device.device_id = o->device == kDLCPU ? 0 : i;
    cp.num_threads = o->threads;
    cp.seed = r->sampling.seed;
    if (kite_ctx_create(&cp, &r->ctxs[i]) != KITE_OK) {
      fprintf(stderr, "kite run: %s\n", kite_last_error());
      return 1;
    }
  }
  const int batch = o->batch ? o->batch : (r->n_prompts < 64 ? r->n_prompts : 64);
  const kr_model_params mp = {.weights = o->weights,
                              .max_batch = batch,
                              .max_tokens = o->chunk < batch ? batch : o->chunk,
                              .block_size = 16,
                              .ctx_len = o->ctx,
                              .no_graphs = o->no_graphs};
  if (!(r->m = kr_model_load_tp(r->ctxs, o->tp, &r->g, &mp, err, sizeof err))) {
    fprintf(stderr, "kite run: %s\n", err);
    return 1;
  }
  if (o->bench)
    fprintf(stderr,
            "kite run: %s, %d layers, hidden %d, heads %d/%d, vocab %d; weights %s (%.1f MB) on "
            "%s\n",
            c.arch, c.n_layer, c.n_embd, c.n_head, c.n_head_kv, c.n_vocab,
            kr_weights_name(kr_model_weights(r->m)), (double)kr_model_weight_bytes(r->m) / 1e6,
            o->device_name);
  if (o->bench && o->tp > 1)
    for (int i = 0; i < o->tp; i++) {
      size_t w, kv;
      kr_model_rank_bytes(r->m, i, &w, &kv);
      fprintf(stderr, "kite run: tp rank %d: weights %.1f MB, KV cache %.1f MB\n", i,
              (double)w / 1e6, (double)kv / 1e6);
    }
  return 0;
}

/* Tokenizes each prompt (with the model's BOS where it wants one) and submits it for max_new
 * tokens. Returns 0, or 1 after printing why. */
static int submit_prompts(run *r, int max_new) {
  char err[1024];
  for (int i = 0; i < r->n_prompts; i++) {
    size_t n_ids = 0;
    if (kr_tok_add_bos(r->tok) && kr_tok_bos(r->tok) >= 0) {
      if (kr_tok_encode(r->tok, "", 0, 0, &r->ids, &n_ids, &r->cap_ids)) return 1;
      if (n_ids == r->cap_ids) {
        int32_t *p = realloc(r->ids, (r->cap_ids + 1) * sizeof *p);
        if (!p) return 1;
        r->ids = p;
        r->cap_ids++;
      }
      r->ids[n_ids++] = kr_tok_bos(r->tok);
    }
    if (kr_tok_encode(r->tok, r->texts[i], strlen(r->texts[i]), 1, &r->ids, &n_ids, &r->cap_ids))
      return 1;
    if (kr_submit(r->m, r->ids, n_ids, max_new, err, sizeof err) < 0) {
      fprintf(stderr, "kite run: prompt %d: %s\n", i + 1, err);
      return 1;
    }
  }
  return 0;
}

/* --bench's untimed pass (2 tokens per prompt, so that the rates leave out what only the first
 * use of each kernel and shape costs: module loading, GEMM plans, scratch growth), then the
 * run: one prompt streams its text, several print theirs at the end. */
static int generate(run *r) {
  const kr_run_opts *o = r->o;
  char err[1024];
  if (o->bench) {
    stream quiet = {r, 0, 1};
    if (submit_prompts(r, 2)) return 1;
    if (kr_generate(r->m, &r->sampling, on_token, on_stop, &quiet, err, sizeof err)) {
      fprintf(stderr, "kite run: %s\n", err);
      return 1;
    }
    kr_reset(r->m);
  }
  /* a sequence ends at the context's end: no more ids than that come back */
  const size_t ctx_len = (size_t)kr_model_ctx_len(r->m);
  r->out_cap = (size_t)o->n_predict < ctx_len ? (size_t)o->n_predict : ctx_len;
  if (!r->outs) {
    r->outs = calloc((size_t)r->n_prompts, sizeof *r->outs);
    r->out_n = calloc((size_t)r->n_prompts, sizeof *r->out_n);
    if (!r->outs || !r->out_n) return 1;
    for (int i = 0; i < r->n_prompts; i++)
      if (!(r->outs[i] = malloc((r->out_cap + 1) * sizeof **r->outs))) return 1;
  }
  for (int i = 0; i < r->n_prompts; i++) r->out_n[i] = 0;
  if (submit_prompts(r, o->n_predict)) return 1;
  stream st = {r, r->n_prompts == 1, o->ignore_eos};
  if (r->n_prompts == 1 && !o->print_ids && !o->chat) printf("%s", r->texts[0]);
  fflush(stdout);
  const double t0 = kr_now_s();
  const int rc = kr_generate(r->m, &r->sampling, on_token, on_stop, &st, err, sizeof err);
  r->run_s = kr_now_s() - t0;
  if (rc) {
    fprintf(stderr, "\nkite run: %s\n", err);
    return 1;
  }
  printf("\n");
  if (r->n_prompts > 1)
    for (int i = 0; i < r->n_prompts; i++) {
      printf("[%d] ", i + 1);
      if (o->print_ids) {
        for (size_t j = 0; j < r->out_n[i]; j++) printf(" %d", r->outs[i][j]);
      } else {
        printf("%s", r->texts[i]);
        for (size_t j = 0; j < r->out_n[i]; j++) put_piece(r->tok, r->outs[i][j]);
      }
      printf("\n");
    }
  fflush(stdout);
  return 0;
}

/* --chat -: each user line (stdin; prompted with "> " on a terminal) is answered in turn. The
 * conversation is rendered again with the template each turn and prefilled from the start: the
 * model keeps no KV prefix across kr_reset. Returns 0, or 1 after printing why. */
static int chat_loop(run *r) {
  const int tty = isatty(fileno(stdin));
  char *line = NULL, *reply = NULL;
  size_t cap = 0;
  ssize_t len;
  int rc = 0;
  while (!rc) {
    if (tty) fputs("> ", stderr), fflush(stderr);
    if ((len = getline(&line, &cap, stdin)) < 0) break;
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
    if (!len) continue;
    char *prompt = chat_prompt(r, line);
    if (!prompt) {
      rc = 1;
      break;
    }
    free(r->owned);
    r->texts[0] = r->owned = prompt;
    kr_reset(r->m);
    if (generate(r)) {
      rc = 1;
      break;
    }
    /* the reply joins the conversation as text, without the token that ended it */
    size_t n = 0, piece;
    free(reply);
    if (!(reply = malloc(r->out_n[0] * 256 + 1))) rc = 1;
    for (size_t i = 0; !rc && i < r->out_n[0]; i++)
      if (!kr_tok_is_eog(r->tok, r->outs[0][i]) &&
          (piece = kr_tok_piece(r->tok, r->outs[0][i], 0, reply + n, 256)) <= 256)
        n += piece;
    if (rc || kr_chat_add(&r->conv, "assistant", reply, n)) {
      fprintf(stderr, "kite run: out of memory\n");
      rc = 1;
    }
  }
  free(line);
  free(reply);
  return rc;
}

/* --chat-render: the conversation file through the chat template, printed. */
static int render_chat(run *r) {
  char err[1024], *s;
  if (kr_chat_read_json(r->o->chat_render, &r->conv, err, sizeof err) ||
      !(r->tpl = kr_chat_template_load(&r->g, r->tok, err, sizeof err)) ||
      kr_chat_format(r->tpl, r->conv.msgs, r->conv.n, 1, r->o->no_think ? 0 : -1, &s, err,
                     sizeof err)) {
    fprintf(stderr, "kite run: %s\n", err);
    return 1;
  }
  if (kr_chat_template_note(r->tpl))
    fprintf(stderr, "kite run: %s\n", kr_chat_template_note(r->tpl));
  fputs(s, stdout);
  free(s);
  return 0;
}

static void timing(const char *what, double s, int64_t n) {
  const double ms = 1e3 * s;
  fprintf(stderr,
          "kite run: %16s = %10.2f ms / %6lld tokens (%8.2f ms per token, %9.2f tokens per "
          "second)\n",
          what, ms, (long long)n, n ? ms / (double)n : 0.0, s > 0 ? (double)n / s : 0.0);
}

/* The timings as llama.cpp prints them: prompt eval covers the steps that held prompt tokens
 * (with the decode tokens batched beside them), eval the decode-only steps. --bench's line comes
 * last (scripts read it there). */
static void report(const run *r) {
  kr_stats s;
  kr_model_stats(r->m, &s);
  fprintf(stderr, "kite run: %16s = %10.2f ms\n", "load time", 1e3 * r->load_s);
  timing("prompt eval time", s.prefill_s, s.prefill_tokens);
  timing("eval time", s.decode_s, s.decode_tokens);
  fprintf(stderr, "kite run: %16s = %10.2f ms / %6lld tokens\n", "total time",
          1e3 * (r->load_s + r->run_s), (long long)(s.prefill_tokens + s.decode_tokens));
  if (r->o->bench)
    fprintf(stderr,
            "kite run: prompt %lld tokens in %.3f s = %.1f tok/s; decode %lld tokens in %.3f s "
            "= %.1f tok/s (%lld steps, %lld replayed as graphs)\n",
            (long long)s.prefill_tokens, s.prefill_s,
            s.prefill_s > 0 ? (double)s.prefill_tokens / s.prefill_s : 0.0,
            (long long)s.decode_tokens, s.decode_s,
            s.decode_s > 0 ? (double)s.decode_tokens / s.decode_s : 0.0, (long long)s.steps,
            (long long)s.graph_steps);
}

static void run_free(run *r) {
  if (r->outs)
    for (int i = 0; i < r->n_prompts; i++) free(r->outs[i]);
  free(r->outs);
  free(r->out_n);
  free(r->ids);
  kr_model_free(r->m);
  for (int i = 0; i < KR_MAX_TP; i++)
    if (r->ctxs[i]) kite_ctx_destroy(r->ctxs[i]);
  kr_tok_free(r->tok);
  free(r->texts);
  free(r->owned);
  kr_chat_template_free(r->tpl);
  kr_chat_conv_free(&r->conv);
  kr_gguf_close(&r->g);
}

int kr_cmd_run(int argc, char **argv) {
  kr_run_opts o;
  int rc = kr_run_parse(argc, argv, &o);
  if (rc || o.help) {
    if (o.help) kr_run_usage(stdout);
    return rc;
  }
  run r = {.o = &o, .sampling = o.sampling};
  char err[1024];
  const double t0 = kr_now_s();
  if (kr_gguf_open(o.model, &r.g, err, sizeof err)) {
    fprintf(stderr, "kite run: %s\n", err);
    return 1;
  }
  rc = 1;
  if (!(r.tok = kr_tok_load(&r.g, err, sizeof err))) {
    fprintf(stderr, "kite run: %s\n", err);
    goto done;
  }
  if (kr_tok_note(r.tok)) fprintf(stderr, "kite run: %s\n", kr_tok_note(r.tok));
  if (o.tokenize) {
    size_t n = 0;
    if (kr_tok_encode(r.tok, o.tokenize, strlen(o.tokenize), 1, &r.ids, &n, &r.cap_ids)) goto done;
    for (size_t i = 0; i < n; i++) printf("%s%d", i ? " " : "", r.ids[i]);
    printf("\n");
    rc = 0;
    goto done;
  }
  if (o.chat_render) {
    rc = render_chat(&r);
    goto done;
  }
  if (!o.has_seed) r.sampling.seed = random_seed();
  if (read_prompts(&r) || (rc = load_model(&r)) != 0) goto done;
  rc = 1;
  r.load_s = kr_now_s() - t0;
  fprintf(stderr, "kite run: seed %llu\n", (unsigned long long)r.sampling.seed);
  if (o.chat && strcmp(o.chat, "-") == 0 ? chat_loop(&r) : generate(&r)) goto done;
  report(&r);
  rc = 0;
done:
  run_free(&r);
  return rc;
}
