/* The options of `kite run` (engine/run_options.c): strict parsing, one message per problem. */
#ifndef KITE_ENGINE_RUN_OPTIONS_H
#define KITE_ENGINE_RUN_OPTIONS_H

#include <stdint.h>
#include <stdio.h>

#include <kite/kite.h>

#include "model.h"

typedef struct kr_run_opts {
  const char *model, *prompt, *chat, *prompts_file, *tokenize;
  const char *system;      /* --system: the conversation's system message, or NULL */
  const char *chat_render; /* --chat-render FILE: print the conversation's prompt and exit */
  int no_think;            /* --no-think: enable_thinking false for templates that read it */
  const char *device_name; /* as given: "cpu" or "cuda" */
  DLDeviceType device;
  kr_weights weights;
  int n_predict; /* -n: tokens to generate per prompt, >= 0 */
  int threads;   /* 0: all cores */
  int tp;        /* tensor-parallel ranks, [1, KR_MAX_TP] */
  int batch;     /* 0: the number of prompts, at most 64 */
  int chunk;     /* prefill tokens per step */
  int ctx;       /* 0: the model's context, capped at KR_DEFAULT_CTX_CAP */
  kr_sampling sampling;
  int has_seed; /* --seed given; else a random seed is drawn (and printed) */
  int bench, ignore_eos, print_ids, help;
  int no_graphs; /* --no-graphs */
} kr_run_opts;

/* Fills o from argv (the options after "run"). Returns 0, or 2 (the usage exit code) after
 * printing the problem, naming the option, to stderr. */
int kr_run_parse(int argc, char **argv, kr_run_opts *o);
void kr_run_usage(FILE *f);

#endif /* KITE_ENGINE_RUN_OPTIONS_H */
