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
  s->h_rows = calloc(B * KR_ROW_FIELDS, sizeof *s->h_rows);
  if (!s->h_seeds || !s->h_steps || !s->h_rows)
    return kr_errf(err, err_len, "sampler: out of memory");
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
  free(s->h_rows);
  memset(s, 0, sizeof *s);
}

/* Which of the settings a step uses: off ones pass NULL to kite (their fast path). */
typedef struct uses {
  int sample, top_k, top_p, min_p; /* any row samples (temperature > 0), and its filters */
  int repeat, presence, frequency; /* any row's penalties */
} uses;

static void add_uses(uses *u, const kr_sampling *p) {
  u->sample |= p->temperature > 0;
  u->top_k |= p->temperature > 0 && p->top_k > 0;
  u->top_p |= p->temperature > 0 && p->top_p < 1;
  u->min_p |= p->temperature > 0 && p->min_p > 0;
  u->repeat |= p->repeat_penalty != 0 && p->repeat_penalty != 1;
  u->presence |= p->presence_penalty != 0;
  u->frequency |= p->frequency_penalty != 0;
}

static int penalizes(const uses *u) {
  return u->repeat || u->presence || u->frequency;
}

/* The settings' device rows in h_rows' order, and the value of p each one takes (a repetition
 * of 0 is off, which kite spells 1). */
static void **row_buf(kr_sampler *s, int f) {
  void **bufs[KR_ROW_FIELDS] = {&s->temperature, &s->top_k,    &s->top_p,    &s->min_p,
                                &s->repetition,  &s->presence, &s->frequency};
  return bufs[f];
}

static uint32_t row_value(const kr_sampling *p, int f) {
  const float rep = p->repeat_penalty != 0 ? p->repeat_penalty : 1.0f;
  const float vals[KR_ROW_FIELDS] = {
      p->temperature, 0, p->top_p, p->min_p, rep, p->presence_penalty, p->frequency_penalty};
  uint32_t v;
  if (f == 1)
    memcpy(&v, &p->top_k, 4);
  else
    memcpy(&v, &vals[f], 4);
  return v;
}

/* Uploads field f of rows [0, n_rows) (row r's settings from ps[r]) into its device row. */
static int upload_rows(kr_sampler *s, int f, const kr_sampling *const *ps, int n_rows, char *err,
                       size_t err_len) {
  uint32_t *host = s->h_rows + (size_t)f * (size_t)s->max_rows;
  for (int r = 0; r < n_rows; r++) host[r] = row_value(ps[r], f);
  KR_CALL(kite_memcpy(s->ctx, *row_buf(s, f), host, (size_t)n_rows * 4, KITE_COPY_HOST_TO_DEVICE));
  return 0;
}

int kr_sampler_begin(kr_sampler *s, const kr_sampling *p, char *err, size_t err_len) {
  memset(&s->p, 0, sizeof s->p);
  if (p) s->p = *p;
  uses u = {0};
  add_uses(&u, &s->p);
  s->greedy = !u.sample;
  s->penalize = penalizes(&u);
  if (s->greedy && !s->penalize) return 0;
  /* the run's settings in every row, uploaded once */
  const kr_sampling **ps = malloc((size_t)s->max_rows * sizeof *ps);
  if (!ps) return kr_errf(err, err_len, "sampler: out of memory");
  for (int r = 0; r < s->max_rows; r++) ps[r] = &s->p;
  int rc = 0;
  for (int f = s->greedy ? 4 : 0; f < (s->penalize ? KR_ROW_FIELDS : 4) && !rc; f++)
    rc = upload_rows(s, f, ps, s->max_rows, err, err_len);
  free(ps);
  return rc;
}

/* kite_apply_penalties over each row's prompt [n_rows, Lp] and output [n_rows, Lo] ids, both
 * in one device buffer filled by one copy (ids of -1 pad the shorter rows). */
static int penalize(kr_sampler *s, const uses *u, DLTensor *logits, int n_rows,
                    const kr_sample_row *rows, char *err, size_t err_len) {
  const int use_prompt = u->repeat;
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
  KR_CALL(kite_apply_penalties(
      s->ctx, logits,
      lp ? kr_view2(&tp, s->dev, d_prompt, KITE_DTYPE_I32, n_rows, (int64_t)lp) : NULL,
      lo ? kr_view2(&to, s->dev, d_output, KITE_DTYPE_I32, n_rows, (int64_t)lo) : NULL,
      use_prompt ? kr_view1(&trep, s->dev, s->repetition, KITE_DTYPE_F32, n_rows) : NULL,
      u->presence ? kr_view1(&tpres, s->dev, s->presence, KITE_DTYPE_F32, n_rows) : NULL,
      u->frequency ? kr_view1(&tfreq, s->dev, s->frequency, KITE_DTYPE_F32, n_rows) : NULL));
  return 0;
}

/* The step's uses: the run's when no row has its own settings; else every row's, uploaded. */
static int step_uses(kr_sampler *s, int n_rows, const kr_sample_row *rows, uses *u, char *err,
                     size_t err_len) {
  int own = 0;
  for (int r = 0; r < n_rows; r++) own |= rows[r].sp != NULL;
  memset(u, 0, sizeof *u);
  if (!own) {
    add_uses(u, &s->p);
    return 0;
  }
  const kr_sampling **ps = malloc((size_t)n_rows * sizeof *ps);
  if (!ps) return kr_errf(err, err_len, "sampler: out of memory");
  for (int r = 0; r < n_rows; r++) add_uses(u, ps[r] = rows[r].sp ? rows[r].sp : &s->p);
  const int used[KR_ROW_FIELDS] = {u->sample, u->top_k,    u->top_p,    u->min_p,
                                   u->repeat, u->presence, u->frequency};
  int rc = 0;
  for (int f = 0; f < KR_ROW_FIELDS && !rc; f++)
    if (used[f]) rc = upload_rows(s, f, ps, n_rows, err, err_len);
  free(ps);
  return rc;
}

int kr_sampler_run(kr_sampler *s, void *logits, int n_rows, const kr_sample_row *rows,
                   int32_t *tokens, char *err, size_t err_len) {
  kr_tensor tl, tt;
  DLTensor *L = kr_view2(&tl, s->dev, logits, s->logit_dtype, n_rows, s->n_vocab);
  DLTensor *T = kr_view1(&tt, s->dev, s->tokens, KITE_DTYPE_I32, n_rows);
  uses u;
  if (step_uses(s, n_rows, rows, &u, err, err_len)) return -1;
  if (s->softcap > 0 && (u.sample || penalizes(&u))) KR_CALL(kite_softcap(s->ctx, L, s->softcap));
  if (penalizes(&u) && penalize(s, &u, L, n_rows, rows, err, err_len)) return -1;
  if (!u.sample) {
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
    if (u.top_k) sp.top_k = kr_view1(&ttopk, s->dev, s->top_k, KITE_DTYPE_I32, n_rows);
    if (u.top_p) sp.top_p = kr_view1(&ttopp, s->dev, s->top_p, KITE_DTYPE_F32, n_rows);
    if (u.min_p) sp.min_p = kr_view1(&tminp, s->dev, s->min_p, KITE_DTYPE_F32, n_rows);
    sp.seeds = kr_view1(&tseeds, s->dev, s->seeds, KITE_DTYPE_I64, n_rows);
    sp.steps = kr_view1(&tsteps, s->dev, s->steps, KITE_DTYPE_I64, n_rows);
    KR_CALL(kite_sample(s->ctx, L, &sp, T));
  }
  KR_CALL(kite_memcpy(s->ctx, tokens, s->tokens, (size_t)n_rows * sizeof(int32_t),
                      KITE_COPY_DEVICE_TO_HOST));
  return 0;
}
