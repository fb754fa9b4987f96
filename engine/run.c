/*
 * kite run: text generation with a GGUF model on kite's ops.
 *
 *   kite run --model FILE.gguf [--prompt TEXT | --chat TEXT | --prompts FILE] [-n N]
 *            [--temperature T --top-k K --top-p P --seed S] [--device cpu|cuda] [--threads N]
 *            [--weights auto|f32|bf16|int8|q4] [--bench] [--ignore-eos] [--tokens]
 *            [--tokenize TEXT]
 */
#include "run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "model.h"
#include "tokenizer.h"

static void usage(void) {
  printf(
      "usage: kite run --model FILE.gguf [--prompt TEXT | --chat TEXT | --prompts FILE] [OPTIONS]\n"
      "\n"
      "  --prompt TEXT     continue TEXT (streams the generated text)\n"
      "  --chat TEXT       TEXT as a user turn of the model's ChatML template\n"
      "  --prompts FILE    one prompt per line, generated together (continuous batching)\n"
      "  -n N              tokens to generate per prompt (default 64)\n"
      "  --temperature T   0 = greedy (default); --top-k K, --top-p P, --seed S\n"
      "  --device D        cpu (default) or cuda\n"
      "  --threads N       CPU threads (default: all cores)\n"
      "  --weights W       auto | f32 | bf16 | int8 | q4 (default auto: q4 for a 4-bit file)\n"
      "  --batch B         sequences decoded together (default: the number of prompts, <= 64)\n"
      "  --chunk T         prefill tokens per step (default 512)\n"
      "  --bench           print prompt and decode tokens per second (stderr), after an\n"
      "                    untimed pass over the same prompts (2 tokens each)\n"
      "  --ignore-eos      generate exactly N tokens per prompt, past end-of-text (for timing)\n"
      "  --tokens          print the generated token ids instead of text\n"
      "  --tokenize TEXT   print TEXT's token ids (special tokens parsed) and exit\n");
}

typedef struct run_state {
  kr_tokenizer *tok;
  int print_ids, streaming;
  int32_t **out;
  size_t *out_n;
  int ignore_eos;
} run_state;

static void on_token(void *user, int seq, int32_t token) {
  run_state *st = user;
  if (st->out) {
    size_t n = st->out_n[seq]++;
    st->out[seq][n] = token;
  }
  if (!st->streaming) return;
  if (st->print_ids) {
    printf(" %d", token);
  } else {
    char buf[256];
    size_t len = kr_tok_piece(st->tok, token, 0, buf, sizeof buf);
    fwrite(buf, 1, len < sizeof buf ? len : sizeof buf, stdout);
  }
  fflush(stdout);
}

static int on_stop(void *user, int32_t token) {
  const run_state *st = user;
  return !st->ignore_eos && kr_tok_is_eog(st->tok, token);
}

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  size_t r;
  while (buf && (r = fread(buf + n, 1, cap - n - 1, f)) > 0) {
    n += r;
    if (cap - n - 1 == 0) {
      char *b = realloc(buf, cap * 2);
      if (!b) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = b;
      cap *= 2;
    }
  }
  fclose(f);
  if (buf) buf[n] = 0;
  *len = n;
  return buf;
}

/* The ChatML turn llama.cpp's template applies for one user message with the generation
 * prompt (the model's own template adds its default system turn). */
static char *chatml(const kr_gguf *g, const char *user) {
  const char *tpl;
  uint64_t tl;
  const char *sys = NULL;
  static const char smol_sys[] = "You are a helpful AI assistant named SmolLM, trained by Hugging "
                                 "Face";
  if (!kr_gguf_get_str(g, "tokenizer.chat_template", &tpl, &tl)) {
    /* the default system turn SmolLM2's template inserts */
    for (uint64_t i = 0; i + sizeof smol_sys - 1 <= tl; i++)
      if (memcmp(tpl + i, smol_sys, sizeof smol_sys - 1) == 0) sys = smol_sys;
  }
  size_t n = strlen(user) + 256;
  char *s = malloc(n);
  if (!s) return NULL;
  if (sys)
    snprintf(s, n,
             "<|im_start|>system\n%s<|im_end|>\n<|im_start|>user\n%s<|im_end|>\n"
             "<|im_start|>assistant\n",
             sys, user);
  else
    snprintf(s, n, "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n", user);
  return s;
}

/* Tokenizes each prompt (with the model's BOS where it wants one) and submits it for max_new
 * tokens; *ids is scratch that grows. Returns 0, or 1 after printing why. */
static int submit_prompts(kr_model *m, const kr_tokenizer *tok, char **texts, int n_prompts,
                          int max_new, int32_t **ids, size_t *cap_ids) {
  char err[1024];
  for (int i = 0; i < n_prompts; i++) {
    size_t n_ids = 0;
    if (kr_tok_add_bos(tok) && kr_tok_bos(tok) >= 0) {
      if (kr_tok_encode(tok, "", 0, 0, ids, &n_ids, cap_ids)) return 1;
      if (n_ids == *cap_ids) {
        int32_t *p = realloc(*ids, (*cap_ids + 1) * 4);
        if (!p) return 1;
        *ids = p;
        (*cap_ids)++;
      }
      (*ids)[n_ids++] = kr_tok_bos(tok);
    }
    if (kr_tok_encode(tok, texts[i], strlen(texts[i]), 1, ids, &n_ids, cap_ids)) return 1;
    if (kr_submit(m, *ids, n_ids, max_new, err, sizeof err) < 0) {
      fprintf(stderr, "kite run: prompt %d: %s\n", i + 1, err);
      return 1;
    }
  }
  return 0;
}

int kr_cmd_run(int argc, char **argv) {
  const char *model_path = NULL, *prompt = NULL, *chat = NULL, *prompts_path = NULL;
  const char *tokenize = NULL, *device = "cpu", *weights = "auto";
  int n_gen = 64, threads = 0, bench = 0, print_ids = 0, batch = 0, chunk = 512, ignore_eos = 0;
  kr_sampling sp = {0.0f, 0, 1.0f, 0};
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (strcmp(a, name) == 0 && v && (i++, 1))
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage();
      return 0;
    } else if (ARG("--model")) {
      model_path = v;
    } else if (ARG("--prompt")) {
      prompt = v;
    } else if (ARG("--chat")) {
      chat = v;
    } else if (ARG("--prompts")) {
      prompts_path = v;
    } else if (ARG("--tokenize")) {
      tokenize = v;
    } else if (ARG("-n")) {
      n_gen = atoi(v);
    } else if (ARG("--temperature")) {
      sp.temperature = (float)atof(v);
    } else if (ARG("--top-k")) {
      sp.top_k = atoi(v);
    } else if (ARG("--top-p")) {
      sp.top_p = (float)atof(v);
    } else if (ARG("--seed")) {
      sp.seed = strtoull(v, NULL, 10);
    } else if (ARG("--device")) {
      device = v;
    } else if (ARG("--threads")) {
      threads = atoi(v);
    } else if (ARG("--weights")) {
      weights = v;
    } else if (ARG("--batch")) {
      batch = atoi(v);
    } else if (ARG("--chunk")) {
      chunk = atoi(v);
    } else if (strcmp(a, "--bench") == 0) {
      bench = 1;
    } else if (strcmp(a, "--ignore-eos") == 0) {
      ignore_eos = 1;
    } else if (strcmp(a, "--tokens") == 0) {
      print_ids = 1;
    } else {
      fprintf(stderr, "kite run: unknown or incomplete option '%s'\n", a);
      usage();
      return 2;
    }
#undef ARG
  }
  if (!model_path) {
    fprintf(stderr, "kite run: --model FILE.gguf is required\n");
    usage();
    return 2;
  }
  if (n_gen < 0 || threads < 0 || batch < 0 || chunk < 1 || sp.temperature < 0) {
    fprintf(stderr, "kite run: -n, --threads, --batch, --chunk and --temperature must be >= 0\n");
    return 2;
  }
  kr_weights wmode;
  if (strcmp(weights, "auto") == 0)
    wmode = KR_WEIGHTS_AUTO;
  else if (strcmp(weights, "f32") == 0)
    wmode = KR_WEIGHTS_F32;
  else if (strcmp(weights, "bf16") == 0)
    wmode = KR_WEIGHTS_BF16;
  else if (strcmp(weights, "int8") == 0)
    wmode = KR_WEIGHTS_INT8;
  else if (strcmp(weights, "q4") == 0)
    wmode = KR_WEIGHTS_Q4;
  else {
    fprintf(stderr, "kite run: --weights %s unknown (auto, f32, bf16, int8, q4)\n", weights);
    return 2;
  }
  kite_ctx_params cp = kite_ctx_params_default();
  if (strcmp(device, "cuda") == 0)
    cp.device.device_type = kDLCUDA;
  else if (strcmp(device, "cpu") != 0) {
    fprintf(stderr, "kite run: --device %s unknown (cpu, cuda)\n", device);
    return 2;
  }
  cp.num_threads = threads;
  cp.seed = sp.seed;

  char err[1024];
  kr_gguf g;
  if (kr_gguf_open(model_path, &g, err, sizeof err)) {
    fprintf(stderr, "kite run: %s\n", err);
    return 1;
  }
  int rc = 1;
  kite_ctx *ctx = NULL;
  kr_model *m = NULL;
  char *file = NULL;
  char **texts = NULL;
  int n_prompts = 0;
  int32_t **outs = NULL;
  size_t *out_n = NULL;
  int32_t *ids = NULL;
  size_t n_ids = 0, cap_ids = 0;
  kr_tokenizer *tok = kr_tok_load(&g, err, sizeof err);
  if (!tok) {
    fprintf(stderr, "kite run: %s\n", err);
    goto done;
  }
  if (tokenize) {
    if (kr_tok_encode(tok, tokenize, strlen(tokenize), 1, &ids, &n_ids, &cap_ids)) goto done;
    for (size_t i = 0; i < n_ids; i++) printf("%s%d", i ? " " : "", ids[i]);
    printf("\n");
    rc = 0;
    goto done;
  }

  /* the prompts */
  if (prompts_path) {
    size_t len;
    file = read_file(prompts_path, &len);
    if (!file) {
      fprintf(stderr, "kite run: cannot read %s\n", prompts_path);
      goto done;
    }
    texts = calloc(len + 1, sizeof *texts);
    if (!texts) goto done;
    for (char *line = strtok(file, "\n"); line; line = strtok(NULL, "\n"))
      if (line[0]) texts[n_prompts++] = line;
  } else {
    texts = calloc(1, sizeof *texts);
    if (!texts) goto done;
    if (chat) {
      texts[0] = chatml(&g, chat);
      file = texts[0];
    } else {
      texts[0] = (char *)(prompt ? prompt : "");
    }
    n_prompts = 1;
  }
  if (n_prompts == 0 || !texts[0]) {
    fprintf(stderr, "kite run: no prompt (--prompt, --chat or --prompts)\n");
    goto done;
  }

  if (kite_ctx_create(&cp, &ctx) != KITE_OK) {
    fprintf(stderr, "kite run: %s\n", kite_last_error());
    goto done;
  }
  kr_model_params mp = {.weights = wmode,
                        .max_batch = batch ? batch : (n_prompts < 64 ? n_prompts : 64),
                        .max_tokens = chunk,
                        .block_size = 16};
  if (mp.max_tokens < mp.max_batch) mp.max_tokens = mp.max_batch;
  double t0 = 0;
  m = kr_model_load(ctx, &g, &mp, err, sizeof err);
  if (!m) {
    fprintf(stderr, "kite run: %s\n", err);
    goto done;
  }
  const kr_config *c = kr_model_config(m);
  if (bench)
    fprintf(stderr,
            "kite run: %s, %d layers, hidden %d, heads %d/%d, vocab %d; weights %s (%.1f MB) on "
            "%s\n",
            c->arch, c->n_layer, c->n_embd, c->n_head, c->n_head_kv, c->n_vocab,
            kr_weights_name(kr_model_weights(m)), (double)kr_model_weight_bytes(m) / 1e6, device);
  (void)t0;
  outs = calloc((size_t)n_prompts, sizeof *outs);
  out_n = calloc((size_t)n_prompts, sizeof *out_n);
  if (!outs || !out_n) goto done;
  /* --bench: one untimed pass over the same prompts (2 tokens each) first, so that the rates
   * leave out what only the first use of each kernel and shape costs (module loading, GEMM
   * plans, scratch growth) */
  if (bench) {
    run_state quiet = {tok, 0, 0, NULL, NULL, 1};
    if (submit_prompts(m, tok, texts, n_prompts, 2, &ids, &cap_ids)) goto done;
    if (kr_generate(m, &sp, on_token, on_stop, &quiet, err, sizeof err)) {
      fprintf(stderr, "kite run: %s\n", err);
      goto done;
    }
    kr_reset(m);
  }
  if (submit_prompts(m, tok, texts, n_prompts, n_gen, &ids, &cap_ids)) goto done;
  for (int i = 0; i < n_prompts; i++) {
    outs[i] = malloc(((size_t)n_gen + 1) * 4);
    if (!outs[i]) goto done;
  }
  run_state st = {tok, print_ids, n_prompts == 1, outs, out_n, ignore_eos};
  if (n_prompts == 1 && !print_ids && !chat) printf("%s", texts[0]);
  fflush(stdout);
  if (kr_generate(m, &sp, on_token, on_stop, &st, err, sizeof err)) {
    fprintf(stderr, "\nkite run: %s\n", err);
    goto done;
  }
  printf("\n");
  if (n_prompts > 1)
    for (int i = 0; i < n_prompts; i++) {
      printf("[%d] ", i + 1);
      if (print_ids) {
        for (size_t j = 0; j < out_n[i]; j++) printf(" %d", outs[i][j]);
      } else {
        printf("%s", texts[i]);
        for (size_t j = 0; j < out_n[i]; j++) {
          char buf[256];
          size_t len = kr_tok_piece(tok, outs[i][j], 0, buf, sizeof buf);
          fwrite(buf, 1, len < sizeof buf ? len : sizeof buf, stdout);
        }
      }
      printf("\n");
    }
  if (bench) {
    kr_stats s;
    kr_model_stats(m, &s);
    fprintf(stderr,
            "kite run: prompt %lld tokens in %.3f s = %.1f tok/s; decode %lld tokens in %.3f s "
            "= %.1f tok/s (%lld steps)\n",
            (long long)s.prefill_tokens, s.prefill_s,
            s.prefill_s > 0 ? (double)s.prefill_tokens / s.prefill_s : 0.0,
            (long long)s.decode_tokens, s.decode_s,
            s.decode_s > 0 ? (double)s.decode_tokens / s.decode_s : 0.0, (long long)s.steps);
  }
  rc = 0;
done:
  if (outs)
    for (int i = 0; i < n_prompts; i++) free(outs[i]);
  free(outs);
  free(out_n);
  free(ids);
  kr_model_free(m);
  if (ctx) kite_ctx_destroy(ctx);
  kr_tok_free(tok);
  free(texts);
  free(file);
  kr_gguf_close(&g);
  return rc;
}
