/*
 * Logits processing and sampling of a step's rows through kite's ops: the model's logit softcap
 * (kite_softcap), penalties (kite_apply_penalties) over each row's prompt and output tokens, then
 * kite_argmax (greedy) or kite_sample (temperature, top-k, top-p, min-p) with each row's own seed
 * and step, so a sequence draws the same tokens whatever runs beside it.
 */
#ifndef KITE_ENGINE_SAMPLER_H
#define KITE_ENGINE_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include <kite/kite.h>

#include "common.h"
#include "model.h"

typedef struct kr_sampler {
  kite_ctx *ctx;
  DLDevice dev;
  int max_rows;
  int64_t n_vocab;
  kite_dtype logit_dtype;
  kr_sampling p;        /* the run's settings (kr_sampler_begin) */
  int greedy, penalize; /* temperature 0; any penalty on */
  /* the model's final logit softcap (0: none), applied before penalties and sampling; greedy
   * steps without penalties skip it, argmax being the same with or without it */
  float softcap;
  /* device [max_rows] each: the run's settings, the same in every row (uploaded once a run) */
  void *temperature, *top_p, *min_p;       /* f32 */
  void *top_k;                             /* i32 */
  void *repetition, *presence, *frequency; /* f32 */
  void *seeds, *steps;                     /* i64: each row's seed and step */
  void *tokens;                            /* i32: the drawn tokens */
  int64_t *h_seeds, *h_steps;              /* [max_rows] host mirrors */
  /* penalties: each row's prompt ids [rows, Lp] then output ids [rows, Lo], -1 padded */
  int32_t *h_history;
  void *d_history;
  size_t history_cap; /* int32 elements of both */
  uint32_t *h_rows;   /* [KR_ROW_FIELDS, max_rows] host: rows' own settings (4-byte values) */
} kr_sampler;

/* The 4-byte per-row settings, in the order of h_rows. */
enum { KR_ROW_FIELDS = 7 };

/* One row of a step: its sequence's settings (NULL: the run's, kr_sampler_begin), seed and step
 * (tokens generated so far), and its tokens so far for the penalties. */
typedef struct kr_sample_row {
  const kr_sampling *sp;
  uint64_t seed;
  int64_t step;
  const int32_t *prompt, *output;
  size_t n_prompt, n_output;
} kr_sample_row;

int kr_sampler_init(kr_sampler *s, kite_ctx *ctx, int max_rows, int64_t n_vocab,
                    kite_dtype logit_dtype, char *err, size_t err_len);
void kr_sampler_free(kr_sampler *s);
/* Takes the run's settings (NULL: greedy) and uploads the per-row constants. */
int kr_sampler_begin(kr_sampler *s, const kr_sampling *p, char *err, size_t err_len);
/* Draws tokens[n_rows] (host) from logits[n_rows, n_vocab] (device, logit_dtype; the penalties
 * change it in place). Rows that carry their own settings have them uploaded for this call (the
 * others take the run's): requests with different settings share one step. */
int kr_sampler_run(kr_sampler *s, void *logits, int n_rows, const kr_sample_row *rows,
                   int32_t *tokens, char *err, size_t err_len);

#endif /* KITE_ENGINE_SAMPLER_H */
