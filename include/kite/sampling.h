/*
 * The rules of kite_sample shared by every backend (C and CUDA): how a row's parameters are
 * decoded (defaults, disabled filters, values a device cannot report) and which random number
 * each token draws. Kernels differ only in how they find the kept set and the winner.
 */
#ifndef KITE_SAMPLING_H
#define KITE_SAMPLING_H

#include <stdint.h>

#include "kite/backend.h"
#include "kite/philox.h"

/* Bits of kite_sample_row.bad: a value that host-visible backends report as INVALID_ARG. */
#define KITE_SAMPLE_BAD_TEMPERATURE 1u
#define KITE_SAMPLE_BAD_TOP_P 2u
#define KITE_SAMPLE_BAD_MIN_P 4u

/* Temperatures below this are greedy (vLLM's _SAMPLING_EPS). */
#define KITE_SAMPLE_GREEDY_BELOW 1e-5f

/* Row id of the Philox counter for rows that carry their own seed. */
#define KITE_SAMPLE_SEEDED_ROW 0xffffffffu

/* One row's decoded parameters. greedy: argmax. top_k in [1, vocab) or 0 (off); top_p in [0, 1)
 * or 1 (off), 0 meaning only the largest logits; min_p in (0, inf) or 0 (off). */
typedef struct kite_sample_row {
  int greedy;
  float temperature;
  int64_t top_k;
  float top_p;
  float min_p;
  uint32_t key0, key1, row, step0, step1;
  unsigned bad;
} kite_sample_row;

KITE_HD kite_sample_row kite_sample_row_get(const kite_sample_args *a, int64_t r) {
  kite_sample_row p;
  p.bad = 0;
  float t = a->temperature ? a->temperature[r] : 1.0f;
  /* !(t >= 0) catches NaN; t - t != 0 catches +-inf without needing isfinite on every target */
  if (!(t >= 0.0f) || t - t != 0.0f) {
    p.bad |= KITE_SAMPLE_BAD_TEMPERATURE;
    t = 0.0f;
  }
  /* below vLLM's epsilon a temperature is greedy: dividing by it would overflow the logits */
  p.greedy = a->op == KITE_OP_ARGMAX || t < KITE_SAMPLE_GREEDY_BELOW;
  p.temperature = t;
  const int64_t k = a->top_k ? a->top_k[r] : 0;
  p.top_k = k > 0 && k < a->vocab ? k : 0;
  float tp = a->top_p ? a->top_p[r] : 1.0f;
  if (tp != tp) {
    p.bad |= KITE_SAMPLE_BAD_TOP_P;
    tp = 1.0f;
  }
  p.top_p = tp >= 1.0f ? 1.0f : tp <= 0.0f ? 0.0f : tp;
  float mp = a->min_p ? a->min_p[r] : 0.0f;
  if (mp != mp) {
    p.bad |= KITE_SAMPLE_BAD_MIN_P;
    mp = 0.0f;
  }
  p.min_p = mp > 0.0f ? mp : 0.0f;
  const uint64_t seed = a->seeds ? (uint64_t)a->seeds[r] : a->seed;
  const uint64_t step = a->steps ? (uint64_t)a->steps[r] : a->step;
  p.key0 = (uint32_t)seed;
  p.key1 = (uint32_t)(seed >> 32);
  p.row = a->seeds ? KITE_SAMPLE_SEEDED_ROW : (uint32_t)r;
  p.step0 = (uint32_t)step;
  p.step1 = (uint32_t)(step >> 32);
  return p;
}

/* One row's penalties of kite_apply_penalties: repetition > 0 and finite, presence and frequency
 * finite (vLLM's rules). A value outside them is an error on a host ctx (the front-end reads
 * them before any kernel runs); a device kernel takes that penalty as off. */
typedef struct kite_penalty_row {
  double repetition, presence, frequency;
} kite_penalty_row;

KITE_HD int kite_penalty_repetition_ok(float r) {
  return r > 0.0f && r - r == 0.0f; /* NaN and -inf fail r > 0; +inf fails r - r == 0 */
}
KITE_HD int kite_penalty_additive_ok(float v) {
  return v - v == 0.0f; /* finite */
}

KITE_HD kite_penalty_row kite_penalty_row_get(const kite_penalty_args *a, int64_t r) {
  kite_penalty_row p;
  const float rep = a->repetition ? a->repetition[r] : 1.0f;
  const float pres = a->presence ? a->presence[r] : 0.0f;
  const float freq = a->frequency ? a->frequency[r] : 0.0f;
  p.repetition = kite_penalty_repetition_ok(rep) ? rep : 1.0;
  p.presence = kite_penalty_additive_ok(pres) ? pres : 0.0;
  p.frequency = kite_penalty_additive_ok(freq) ? freq : 0.0;
  return p;
}

/* The four Philox words of tokens 4 q .. 4 q + 3 of the row: word i % 4 belongs to token i. */
KITE_HD kite_philox4 kite_sample_words(const kite_sample_row *p, int64_t q) {
  return kite_philox4x32_10((uint32_t)q, p->row, p->step0, p->step1, p->key0, p->key1);
}

/* Token i's uniform (0, 1); its Gumbel noise is -log(-log(u)). */
KITE_HD float kite_sample_uniform(const kite_sample_row *p, int64_t i) {
  return kite_philox_uniform(kite_sample_words(p, i >> 2).v[i & 3]);
}

#endif /* KITE_SAMPLING_H */
