#include "run_options.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void kr_run_usage(FILE *f) {
  fprintf(
      f,
      "usage: kite run --model FILE.gguf [--prompt TEXT | --chat TEXT | --prompts FILE] [OPTIONS]\n"
      "\n"
      "  --prompt TEXT          continue TEXT (streams the generated text)\n"
      "  --chat TEXT            TEXT as a user turn of the model's chat template (its\n"
      "                         tokenizer.chat_template; ChatML when it has none)\n"
      "  --chat -               a conversation: on a terminal, read a line, answer, repeat; else\n"
      "                         stdin holds one user message per line, each answered in turn\n"
      "  --system TEXT          a system message first in --chat's conversation\n"
      "  --no-think             enable_thinking=false for templates that read it (Qwen3)\n"
      "  --chat-render FILE     print FILE's conversation (a JSON list of {\"role\", "
      "\"content\"})\n"
      "                         as the chat template renders it, with the generation prompt, and\n"
      "                         exit\n"
      "  --prompts FILE         one prompt per line, generated together (continuous batching)\n"
      "  -n N                   tokens to generate per prompt (default 64; 0: none)\n"
      "  --ctx N                context size in tokens (default: the model's, at most %d)\n"
      "sampling (default greedy):\n"
      "  --temperature T        0 = greedy (default); > 0 samples\n"
      "  --top-k K              keep the K most likely tokens (0: off)\n"
      "  --top-p P              keep the smallest set of mass >= P, in [0, 1] (1: off)\n"
      "  --min-p P              keep tokens of probability >= P times the top one, in [0, 1]\n"
      "  --repeat-penalty R     > 0, over the prompt and the output (1: off)\n"
      "  --presence-penalty A   subtracted once from each token of the output (0: off)\n"
      "  --frequency-penalty A  subtracted per occurrence in the output (0: off)\n"
      "  --seed S               the sampling seed (default: random, printed)\n"
      "execution:\n"
      "  --device D             cpu (default) or cuda\n"
      "  --threads N            CPU threads (default 0: all cores), per rank with --tp\n"
      "  --tp N                 tensor parallelism over N ranks in this process, [1, %d]\n"
      "                         (default 1): CUDA devices 0..N-1, or N CPU ctxs; N must\n"
      "                         divide the kv head count and the FFN width\n"
      "  --weights W            auto | f32 | bf16 | int8 | q4 (default auto: q4 for a 4-bit file)\n"
      "  --batch B              sequences decoded together, [0, %d] (default 0: the number of\n"
      "                         prompts, at most 64)\n"
      "  --chunk T              prefill tokens per step, [1, %d] (default 512)\n"
      "  --no-graphs            run every decode step's calls one by one (default: a device that\n"
      "                         records graphs replays each batch size's decode step as one)\n"
      "output:\n"
      "  --bench                print prompt and decode tokens per second (stderr), after an\n"
      "                         untimed pass over the same prompts (2 tokens each)\n"
      "  --ignore-eos           generate exactly N tokens per prompt, past end-of-text (for "
      "timing)\n"
      "  --tokens               print the generated token ids instead of text\n"
      "  --tokenize TEXT        print TEXT's token ids (special tokens parsed) and exit\n"
      "The seed and the timings (load, prompt eval, eval) go to stderr.\n",
      KR_DEFAULT_CTX_CAP, KR_MAX_TP, KR_MAX_BATCH, KR_MAX_TOKENS);
}

/* Each returns 1 when s is a number in range, else prints why (naming the option) and returns 0.
 * Numbers are decimal with an optional '-' for signed ones: no blanks, '+', hex or suffix. */
static int bad(const char *opt, const char *s, const char *what) {
  fprintf(stderr, "kite run: %s '%s' is not %s\n", opt, s, what);
  return 0;
}

static int parse_int(const char *opt, const char *s, long long lo, long long hi, int *out) {
  const char *d = s[0] == '-' ? s + 1 : s;
  if (d[0] < '0' || d[0] > '9') return bad(opt, s, "an integer");
  char *end;
  errno = 0;
  const long long v = strtoll(s, &end, 10);
  if (*end) return bad(opt, s, "an integer");
  if (errno == ERANGE || v < lo || v > hi) {
    fprintf(stderr, "kite run: %s %s is outside [%lld, %lld]\n", opt, s, lo, hi);
    return 0;
  }
  *out = (int)v;
  return 1;
}

static int parse_u64(const char *opt, const char *s, uint64_t *out) {
  if (s[0] < '0' || s[0] > '9') return bad(opt, s, "an unsigned integer");
  char *end;
  errno = 0;
  const unsigned long long v = strtoull(s, &end, 10);
  if (*end) return bad(opt, s, "an unsigned integer");
  if (errno == ERANGE) {
    fprintf(stderr, "kite run: %s %s is outside [0, %llu]\n", opt, s,
            (unsigned long long)UINT64_MAX);
    return 0;
  }
  *out = v;
  return 1;
}

static int parse_float(const char *opt, const char *s, double lo, double hi, float *out) {
  const char *d = s[0] == '-' ? s + 1 : s;
  if (!((d[0] >= '0' && d[0] <= '9') || (d[0] == '.' && d[1] >= '0' && d[1] <= '9')))
    return bad(opt, s, "a number");
  char *end;
  const double v = strtod(s, &end);
  if (*end || !isfinite(v)) return bad(opt, s, "a finite number");
  if (v < lo || v > hi) {
    fprintf(stderr, "kite run: %s %s is outside [%g, %g]\n", opt, s, lo, hi);
    return 0;
  }
  *out = (float)v;
  return 1;
}

static int parse_weights(const char *s, kr_weights *out) {
  if (kr_weights_parse(s, out) == 0) return 1;
  fprintf(stderr, "kite run: --weights %s unknown (auto, f32, bf16, int8, q4)\n", s);
  return 0;
}

static int parse_device(const char *s, DLDeviceType *out) {
  if (strcmp(s, "cpu") == 0 || strcmp(s, "cuda") == 0) {
    *out = s[1] == 'p' ? kDLCPU : kDLCUDA;
    return 1;
  }
  fprintf(stderr, "kite run: --device %s unknown (cpu, cuda)\n", s);
  return 0;
}

/* The options that take a value. */
static const char *const value_opts[] = {"--model",
                                         "--prompt",
                                         "--chat",
                                         "--prompts",
                                         "--tokenize",
                                         "--system",
                                         "--chat-render",
                                         "-n",
                                         "--ctx",
                                         "--threads",
                                         "--batch",
                                         "--chunk",
                                         "--top-k",
                                         "--temperature",
                                         "--top-p",
                                         "--min-p",
                                         "--repeat-penalty",
                                         "--presence-penalty",
                                         "--frequency-penalty",
                                         "--seed",
                                         "--device",
                                         "--weights",
                                         "--tp"};

static int is_value_opt(const char *a) {
  for (size_t i = 0; i < sizeof value_opts / sizeof *value_opts; i++)
    if (strcmp(a, value_opts[i]) == 0) return 1;
  return 0;
}

/* Option a (one of value_opts) with its value v; 1 when taken, 0 after a message. */
static int take(const char *a, const char *v, kr_run_opts *o) {
  kr_sampling *sp = &o->sampling;
  const double big = 1e9; /* bounds of the unbounded float options: finite, and printable */
  const char **strs[] = {&o->model,    &o->prompt, &o->chat,       &o->prompts_file,
                         &o->tokenize, &o->system, &o->chat_render};
  for (size_t i = 0; i < sizeof strs / sizeof *strs; i++)
    if (strcmp(a, value_opts[i]) == 0) {
      *strs[i] = v;
      return 1;
    }
  if (strcmp(a, "-n") == 0) return parse_int(a, v, 0, INT_MAX, &o->n_predict);
  if (strcmp(a, "--ctx") == 0) return parse_int(a, v, 1, INT_MAX, &o->ctx);
  if (strcmp(a, "--threads") == 0) return parse_int(a, v, 0, 4096, &o->threads);
  if (strcmp(a, "--batch") == 0) return parse_int(a, v, 0, KR_MAX_BATCH, &o->batch);
  if (strcmp(a, "--chunk") == 0) return parse_int(a, v, 1, KR_MAX_TOKENS, &o->chunk);
  if (strcmp(a, "--top-k") == 0) return parse_int(a, v, 0, INT_MAX, &sp->top_k);
  if (strcmp(a, "--temperature") == 0) return parse_float(a, v, 0, big, &sp->temperature);
  if (strcmp(a, "--top-p") == 0) return parse_float(a, v, 0, 1, &sp->top_p);
  if (strcmp(a, "--min-p") == 0) return parse_float(a, v, 0, 1, &sp->min_p);
  if (strcmp(a, "--presence-penalty") == 0)
    return parse_float(a, v, -big, big, &sp->presence_penalty);
  if (strcmp(a, "--frequency-penalty") == 0)
    return parse_float(a, v, -big, big, &sp->frequency_penalty);
  if (strcmp(a, "--repeat-penalty") == 0) {
    if (!parse_float(a, v, 0, big, &sp->repeat_penalty)) return 0;
    if (sp->repeat_penalty > 0) return 1;
    fprintf(stderr, "kite run: --repeat-penalty %s must be > 0 (1 is off)\n", v);
    return 0;
  }
  if (strcmp(a, "--seed") == 0) return o->has_seed = parse_u64(a, v, &sp->seed);
  if (strcmp(a, "--device") == 0) return o->device_name = v, parse_device(v, &o->device);
  if (strcmp(a, "--tp") == 0) return parse_int(a, v, 1, KR_MAX_TP, &o->tp);
  return parse_weights(v, &o->weights); /* --weights */
}

int kr_run_parse(int argc, char **argv, kr_run_opts *o) {
  memset(o, 0, sizeof *o);
  o->device_name = "cpu";
  o->device = kDLCPU;
  o->n_predict = 64;
  o->tp = 1;
  o->chunk = 512;
  o->sampling = (kr_sampling){.top_p = 1.0f, .repeat_penalty = 1.0f};
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    int *flag = strcmp(a, "--bench") == 0                          ? &o->bench
                : strcmp(a, "--ignore-eos") == 0                   ? &o->ignore_eos
                : strcmp(a, "--tokens") == 0                       ? &o->print_ids
                : strcmp(a, "--no-think") == 0                     ? &o->no_think
                : strcmp(a, "--no-graphs") == 0                    ? &o->no_graphs
                : strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0 ? &o->help
                                                                   : NULL;
    if (flag) {
      *flag = 1;
      continue;
    }
    if (!is_value_opt(a)) {
      fprintf(stderr, "kite run: unknown option '%s' (kite run --help lists them)\n", a);
      return 2;
    }
    if (i + 1 == argc) {
      fprintf(stderr, "kite run: %s needs a value\n", a);
      return 2;
    }
    if (!take(a, argv[++i], o)) return 2;
  }
  if (!o->help && !o->model) {
    fprintf(stderr, "kite run: --model FILE.gguf is required\n");
    return 2;
  }
  return 0;
}
