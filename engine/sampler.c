#include "sampler.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"

int kr_sampler_init(kr_sampler *s, kite_ctx *ctx, int max_rows, int64_t n_vocab,
                    kite_dtype logit_dtype, char *err, size_t err_len) {
  memset(s, 0, sizeof *s);
  s->ctx = ctx;
  s->dev = kite_ctx_device(ctx);
  s->max_rows = max_rows;
  s->n_vocab = n_vocab;
  s->logit_dtype = logit_dtype;
  s->greedy = 1;
  const size_t B = (size_t)max_rows;
  void **f32[] = {&s->temperature, &s->top_p,    &s->min_p,     &s->top_k,
                  &s->repetition,  &s->presence, &s->frequency, &s->tokens};
  for (size_t i = 0; i < sizeof f32 / sizeof *f32; i++) /* 4-byte rows (f32 and i32) */
    if (kr_dev_alloc(ctx, B * 4, f32[i], err, err_len)) return -1;
  if (kr_dev_alloc(ctx, B * sizeof(int64_t), &s->seeds, err, err_len) ||
      kr_dev_alloc(ctx, B * sizeof(int64_t), &s->steps, err, err_len))
    return -1;
  s->h_seeds = calloc(B, sizeof *s->h_seeds);
  s->h_steps = calloc(B, sizeof *s->h_steps);
  if (!s->h_seeds || !s->h_steps) return kr_errf(err, err_len, "sampler: out of memory");
  return 0;
}

void kr_sampler_free(kr_sampler *s) {
  if (!s->ctx) return;
  void **bufs[] = {&s->temperature, &s->top_p, &s->min_p, &s->top_k,  &s->repetition, &s->presence,
                   &s->frequency,   &s->seeds, &s->steps, &s->tokens, &s->d_history};
  for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) kr_dev_free(s->ctx, bufs[i]);
  free(s->h_seeds);
  free(s->h_steps);
  free(s->h_history);
  memset(s, 0, sizeof *s);
}

/* Fills the device row buffer dst[max_rows] with copies of one 4-byte value. */
static int fill_rows(kr_sampler *s, void *dst, const void *value, uint32_t *host, char *err,
                     size_t err_len) {
  for (int i = 0; i < s->max_rows; i++) memcpy(&host[i], value, 4);
  KR_CALL(kite_memcpy(s->ctx, dst, host, (size_t)s->max_rows * 4, KITE_COPY_HOST_TO_DEVICE));
  return 0;
}

static int penalty_on(float repeat, float presence, float frequency) {
  return (repeat != 0 && repeat != 1) || presence != 0 || frequency != 0;
}

int kr_sampler_begin(kr_sampler *s, const kr_sampling *p, char *err, size_t err_len) {
  memset(&s->p, 0, sizeof s->p);
  if (p) s->p = *p;
  s->greedy = s->p.temperature <= 0;
  s->penalize = penalty_on(s->p.repeat_penalty, s->p.presence_penalty, s->p.frequency_penalty);
  if (s->greedy && !s->penalize) return 0;
  uint32_t *host = malloc((size_t)s->max_rows * 4); /* [max_rows] one value repeated */
  if (!host) return kr_errf(err, err_len, "sampler: out of memory");
  int rc = 0;
  if (!s->greedy)
    rc = fill_rows(s, s->temperature, &s->p.temperature, host, err, err_len) ||
         fill_rows(s, s->top_k, &s->p.top_k, host, err, err_len) ||
         fill_rows(s, s->top_p, &s->p.top_p, host, err, err_len) ||
         fill_rows(s, s->min_p, &s->p.min_p, host, err, err_len);
  if (!rc && s->penalize)
    rc = fill_rows(s, s->repetition, &s->p.repeat_penalty, host, err, err_len) ||
         fill_rows(s, s->presence, &s->p.presence_penalty, host, err, err_len) ||
         fill_rows(s, s->frequency, &s->p.frequency_penalty, host, err, err_len);
  free(host);
  return rc ? -1 : 0;
}

/* kite_apply_penalties over each row's prompt [n_rows, Lp] and output [n_rows, Lo] ids, both
 * in one device buffer filled by one copy (ids of -1 pad the shorter rows). */
static int penalize(kr_sampler *s, DLTensor *logits, int n_rows, const kr_sample_row *rows,
                    char *err, size_t err_len) {
  const int use_prompt = s->p.repeat_penalty != 0 && s->p.repeat_penalty != 1;
  size_t lp = 0, lo = 0;
  for (int r = 0; r < n_rows; r++) {
    if (use_prompt && rows[r].n_prompt > lp) lp = rows[r].n_prompt;
    if (rows[r].n_output > lo) lo = rows[r].n_output;
  }
  const size_t need = (size_t)n_rows * (lp + lo);
  if (need > s->history_cap) {
    kr_dev_free(s->ctx, &s->d_history);
    free(s->h_history);
    s->history_cap = 0;
    if (!(s->h_history = malloc(need * sizeof(int32_t))))
      return kr_errf(err, err_len, "sampler: out of memory");
    if (kr_dev_alloc(s->ctx, need * sizeof(int32_t), &s->d_history, err, err_len)) return -1;
    s->history_cap = need;
  }
  int32_t *prompt = s->h_history, *output = s->h_history + (size_t)n_rows * lp;
  for (int r = 0; r < n_rows; r++) {
    for (size_t i = 0; i < lp; i++)
      prompt[r * lp + i] = i < rows[r].n_prompt ? rows[r].prompt[i] : -1;
    for (size_t i = 0; i < lo; i++)
      output[r * lo + i] = i < rows[r].n_output ? rows[r].output[i] : -1;
  }
  if (need)
    KR_CALL(kite_memcpy(s->ctx, s->d_history, s->h_history, need * sizeof(int32_t),
                        KITE_COPY_HOST_TO_DEVICE));
  kr_tensor tp, to, trep, tpres, tfreq;
  int32_t *d_prompt = s->d_history, *d_output = (int32_t *)s->d_history + (size_t)n_rows * lp;
  const kr_sampling *p = &s->p;
  KR_CALL(kite_apply_penalties(
      s->ctx, logits,
      lp ? kr_view2(&tp, s->dev, d_prompt, KITE_DTYPE_I32, n_rows, (int64_t)lp) : NULL,
      lo ? kr_view2(&to, s->dev, d_output, KITE_DTYPE_I32, n_rows, (int64_t)lo) : NULL,
      use_prompt ? kr_view1(&trep, s->dev, s->repetition, KITE_DTYPE_F32, n_rows) : NULL,
      p->presence_penalty != 0 ? kr_view1(&tpres, s->dev, s->presence, KITE_DTYPE_F32, n_rows)
                               : NULL,
      p->frequency_penalty != 0 ? kr_view1(&tfreq, s->dev, s->frequency, KITE_DTYPE_F32, n_rows)
                                : NULL));
  return 0;
}

int kr_sampler_run(kr_sampler *s, void *logits, int n_rows, const kr_sample_row *rows,
                   int32_t *tokens, char *err, size_t err_len) {
  kr_tensor tl, tt;
  DLTensor *L = kr_view2(&tl, s->dev, logits, s->logit_dtype, n_rows, s->n_vocab);
  DLTensor *T = kr_view1(&tt, s->dev, s->tokens, KITE_DTYPE_I32, n_rows);
  if (s->penalize && penalize(s, L, n_rows, rows, err, err_len)) return -1;
  if (s->greedy) {
    KR_CALL(kite_argmax(s->ctx, L, T));
  } else {
    for (int r = 0; r < n_rows; r++) {
      s->h_seeds[r] = (int64_t)rows[r].seed;
      s->h_steps[r] = rows[r].step;
    }
    const size_t bytes = (size_t)n_rows * sizeof(int64_t);
    KR_CALL(kite_memcpy(s->ctx, s->seeds, s->h_seeds, bytes, KITE_COPY_HOST_TO_DEVICE));
    KR_CALL(kite_memcpy(s->ctx, s->steps, s->h_steps, bytes, KITE_COPY_HOST_TO_DEVICE));
    kr_tensor ttemp, ttopk, ttopp, tminp, tseeds, tsteps;
    kite_sampling_params sp = kite_sampling_params_default();
    sp.temperature = kr_view1(&ttemp, s->dev, s->temperature, KITE_DTYPE_F32, n_rows);
    if (s->p.top_k > 0) sp.top_k = kr_view1(&ttopk, s->dev, s->top_k, KITE_DTYPE_I32, n_rows);
    if (s->p.top_p < 1) sp.top_p = kr_view1(&ttopp, s->dev, s->top_p, KITE_DTYPE_F32, n_rows);
    if (s->p.min_p > 0) sp.min_p = kr_view1(&tminp, s->dev, s->min_p, KITE_DTYPE_F32, n_rows);
    sp.seeds = kr_view1(&tseeds, s->dev, s->seeds, KITE_DTYPE_I64, n_rows);
    sp.steps = kr_view1(&tsteps, s->dev, s->steps, KITE_DTYPE_I64, n_rows);
    KR_CALL(kite_sample(s->ctx, L, &sp, T));
  }
  KR_CALL(kite_memcpy(s->ctx, tokens, s->tokens, (size_t)n_rows * sizeof(int32_t),
                      KITE_COPY_DEVICE_TO_HOST));
  return 0;
}
