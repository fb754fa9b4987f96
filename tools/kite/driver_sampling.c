/*
 * Drivers of the sampling family: argmax, sample, apply_penalties, logprobs, softcap over
 * logits[B, V].
 *
 * Check cases cover V from 1 to past 128256, every combination of the per-row parameter tensors
 * (each row drawing its own values, disabled ones included), greedy and sampled rows mixed,
 * per-row seeds and steps, ties (integer logits) and rows of -inf with a few finite logits.
 * Tokens are compared with ref exactly (bound 0): kite.h's exponential race makes every backend
 * pick the same token unless two scores sit within rounding of each other.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "driver.h"
#include "util.h"

static int kt_sampling_has(kite_op op) {
  return op == KITE_OP_ARGMAX || op == KITE_OP_SAMPLE || op == KITE_OP_APPLY_PENALTIES ||
         op == KITE_OP_LOGPROBS || op == KITE_OP_SOFTCAP;
}

/* Per-row tensors of a case (kt_sample_case.params). */
enum {
  KT_SP_TEMPERATURE = 1u << 0,
  KT_SP_TOP_K = 1u << 1,
  KT_SP_TOP_P = 1u << 2,
  KT_SP_MIN_P = 1u << 3,
  KT_SP_SEEDS = 1u << 4,
  KT_SP_STEPS = 1u << 5,
  /* apply_penalties */
  KT_SP_PROMPT = 1u << 6,
  KT_SP_OUTPUT = 1u << 7,
  KT_SP_REPETITION = 1u << 8,
  KT_SP_PRESENCE = 1u << 9,
  KT_SP_FREQUENCY = 1u << 10,
  /* logprobs */
  KT_SP_TOKENS = 1u << 11,
};

/* How logits are drawn. */
enum {
  KT_LOGITS_UNIFORM = 0, /* uniform in [shift - amp, shift + amp] */
  KT_LOGITS_TIES,        /* integers in [-3, 3]: many exact ties */
  KT_LOGITS_NEG_INF,     /* -inf but for one to three finite logits per row */
};

/* Argument slots. */

/* ---- fills ------------------------------------------------------------------------------- */

static void fill_logits(const kt_run *r, int vi, uint64_t seed, unsigned char *body) {
  const kt_view *v = &r->view[vi];
  const kt_case *c = &r->c;
  const int64_t cols = kt_view_cols(v);
  for (int64_t e = 0, n = kt_view_numel(v); e < n; e++) {
    const int64_t at = kt_view_at(v, e), row = e / cols, col = e % cols;
    double x;
    if (c->sample.logits == KT_LOGITS_TIES) {
      x = (double)(int)(kt_unit(seed, (uint64_t)at) * 7.0f) - 3.0;
    } else if (c->sample.logits == KT_LOGITS_NEG_INF) {
      /* finite at 1 + (row % 3) columns spread over the row */
      const int64_t finite = 1 + row % 3;
      x = -INFINITY;
      for (int64_t j = 0; j < finite; j++)
        if (col == (int64_t)(kt_hash(seed ^ 0x5bd1e995u, (uint64_t)(row * 4 + j)) % (uint64_t)cols))
          x = 2.0 * kt_unit(seed, (uint64_t)at) - 1.0;
    } else {
      x = c->shift - c->amp + 2.0 * c->amp * kt_unit(seed, (uint64_t)at);
    }
    kt_store(v->dtype, body, at, x);
  }
}

/* One value per row from a table of interesting values (disabled ones included). */
static uint64_t pick(uint64_t seed, int64_t row, uint64_t n) {
  return kt_hash(seed, (uint64_t)row) % n;
}

static void fill_params(const kt_run *r, int vi, uint64_t seed, unsigned char *body) {
  static const float temps[] = {0.0f, 0.5f, 1.0f, 1.0f, 1.5f, 0.7f, 1.0f, 2.0f};
  static const float top_ps[] = {1.0f, 0.95f, 0.9f, 0.5f, 0.2f, 1e-6f, 0.0f, 1.5f};
  static const float min_ps[] = {0.0f, 0.01f, 0.05f, 0.1f, 0.5f, 1.0f, -1.0f, 0.2f};
  const kt_view *v = &r->view[vi];
  const kt_case *c = &r->c;
  const int64_t V = c->cols;
  const int64_t top_ks[] = {0, 1, 2, 5, 50, V - 1, V, -3, 1000, 20};
  for (int64_t b = 0, n = kt_view_numel(v); b < n; b++) {
    const int64_t at = kt_view_at(v, b);
    const int fixed = c->sample.fixed;
    if (strcmp(v->name, "temperature") == 0)
      ((float *)body)[at] = fixed ? c->sample.temperature : temps[pick(seed, b, 8)];
    else if (strcmp(v->name, "top_p") == 0)
      ((float *)body)[at] = fixed ? c->sample.top_p : top_ps[pick(seed, b, 8)];
    else if (strcmp(v->name, "min_p") == 0)
      ((float *)body)[at] = fixed ? c->sample.min_p : min_ps[pick(seed, b, 8)];
    else if (strcmp(v->name, "top_k") == 0)
      ((int32_t *)body)[at] = fixed ? c->sample.top_k : (int32_t)top_ks[pick(seed, b, 10)];
    else if (strcmp(v->name, "repetition") == 0)
      ((float *)body)[at] = 0.5f + 1.5f * kt_unit(seed, (uint64_t)b);
    else if (strcmp(v->name, "presence") == 0 || strcmp(v->name, "frequency") == 0)
      ((float *)body)[at] = 2.0f * kt_unit(seed, (uint64_t)b) - 0.5f;
    else /* seeds, steps: any 64-bit value */
      ((int64_t *)body)[at] = (int64_t)kt_hash(seed, (uint64_t)b);
  }
}

/* ---- layout ------------------------------------------------------------------------------ */

static int add_param(kt_run *r, const char *name, kite_dtype t) {
  int64_t n = r->c.rows;
  int v = kt_add_tensor(r, name, t, KT_IN, 1, &n, KT_FILL_CUSTOM, 0, 0);
  if (v >= 0) r->view[v].fill_fn = fill_params;
  return v;
}

static void sampling_plan(kt_run *r, const kt_case *c) {
  const int64_t B = c->rows, V = c->cols;
  const unsigned p = c->sample.params;
  const kt_role lrole =
      c->op == KITE_OP_APPLY_PENALTIES || c->op == KITE_OP_SOFTCAP ? KT_INOUT : KT_IN;
  int lg = kt_bind(r, "logits", kt_add_matrix(r, "logits", c->dtype, lrole, B, V, c->pad_x, 0, 0));
  if (lg >= 0) {
    r->view[lg].fill = KT_FILL_CUSTOM;
    r->view[lg].fill_fn = fill_logits;
  }
  switch (c->op) {
  case KITE_OP_ARGMAX:
  case KITE_OP_SAMPLE:
    kt_bind(r, "tokens",
            kt_add_tensor(r, "tokens", KITE_DTYPE_I32, KT_OUT, 1, &B, KT_FILL_IDS, 0, 0));
    if (p & KT_SP_TEMPERATURE)
      kt_bind(r, "temperature", add_param(r, "temperature", KITE_DTYPE_F32));
    if (p & KT_SP_TOP_K) kt_bind(r, "top_k", add_param(r, "top_k", KITE_DTYPE_I32));
    if (p & KT_SP_TOP_P) kt_bind(r, "top_p", add_param(r, "top_p", KITE_DTYPE_F32));
    if (p & KT_SP_MIN_P) kt_bind(r, "min_p", add_param(r, "min_p", KITE_DTYPE_F32));
    if (p & KT_SP_SEEDS) kt_bind(r, "seeds", add_param(r, "seeds", KITE_DTYPE_I64));
    if (p & KT_SP_STEPS) kt_bind(r, "steps", add_param(r, "steps", KITE_DTYPE_I64));
    break;
  case KITE_OP_APPLY_PENALTIES: {
    /* prompt ids spill outside [0, V) on both sides (padding); output ids repeat */
    const float spill = (float)(V / 8 + 2);
    const float out_hi = (float)(2 * c->sample.n < V ? 2 * c->sample.n : V);
    if (p & KT_SP_PROMPT)
      kt_bind(r, "prompt_ids",
              kt_add_matrix(r, "prompt_ids", KITE_DTYPE_I32, KT_IN, B, c->sample.n, c->pad_y,
                            -spill, (float)V + spill));
    if (p & KT_SP_OUTPUT)
      kt_bind(r, "output_ids",
              kt_add_matrix(r, "output_ids", KITE_DTYPE_I32, KT_IN, B, c->sample.n, c->pad_y, -1.0f,
                            out_hi));
    for (int i = 0; i < 2; i++) { /* id views are filled as integers */
      int v = kt_arg_view(r, i ? "output_ids" : "prompt_ids");
      if (v >= 0) r->view[v].fill = KT_FILL_IDS;
    }
    if (p & KT_SP_REPETITION) kt_bind(r, "repetition", add_param(r, "repetition", KITE_DTYPE_F32));
    if (p & KT_SP_PRESENCE) kt_bind(r, "presence", add_param(r, "presence", KITE_DTYPE_F32));
    if (p & KT_SP_FREQUENCY) kt_bind(r, "frequency", add_param(r, "frequency", KITE_DTYPE_F32));
    break;
  }
  case KITE_OP_SOFTCAP: /* logits only */
    break;
  case KITE_OP_LOGPROBS:
    if (p & KT_SP_TOKENS) {
      /* a few tokens outside [0, V): their logprob is NaN on every backend */
      kt_bind(
          r, "tokens",
          kt_add_tensor(r, "tokens", KITE_DTYPE_I32, KT_IN, 1, &B, KT_FILL_IDS, -1.0f, V + 1.0f));
      int lp = kt_bind(
          r, "token_logprobs",
          kt_add_tensor(r, "token_logprobs", KITE_DTYPE_F32, KT_OUT, 1, &B, KT_FILL_IDS, 0, 0));
      if (lp >= 0) r->view[lp].nan_ok = 1;
    }
    if (c->sample.n > 0) {
      kt_bind(r, "top_ids",
              kt_add_matrix(r, "top_ids", KITE_DTYPE_I32, KT_OUT, B, c->sample.n, c->pad_y, 0, 0));
      kt_bind(
          r, "top_logprobs",
          kt_add_matrix(r, "top_logprobs", KITE_DTYPE_F32, KT_OUT, B, c->sample.n, c->pad_y, 0, 0));
    }
    break;
  default:
    r->bad = 1;
    break;
  }
}

/* sample's seed and step are fixed per shape; logprobs' n is the case's; softcap's cap is the
 * case's temperature field (a cap below the logits' amplitude saturates, one above it barely
 * bends them) */
static int sampling_scalar(const kt_case *c, const kite_arg_info *a, kite_value *out) {
  if (strcmp(a->name, "seed") == 0)
    out->u = 0x243f6a8885a308d3ull ^ (uint64_t)c->rows;
  else if (strcmp(a->name, "step") == 0)
    out->u = (uint64_t)c->cols * 7919u;
  else if (strcmp(a->name, "n") == 0)
    out->i = c->sample.n;
  else if (strcmp(a->name, "cap") == 0)
    out->f = c->sample.temperature;
  else
    return 1;
  return 0;
}

static void sampling_shape(const kt_case *c, char *buf, size_t n) {
  snprintf(buf, n, "%lldx%lld", (long long)c->rows, (long long)c->cols);
}

static void sampling_describe(const kt_case *c, char *buf, size_t n) {
  size_t len = 0;
  const kt_sample_case *s = &c->sample;
  buf[0] = '\0';
  kt_cat(buf, n, &len, "%lldx%lld", (long long)c->rows, (long long)c->cols);
  if (s->logits == KT_LOGITS_TIES) kt_cat(buf, n, &len, " ties");
  if (s->logits == KT_LOGITS_NEG_INF) kt_cat(buf, n, &len, " -inf");
  if (s->logits == KT_LOGITS_UNIFORM) kt_cat(buf, n, &len, " amp=%g", (double)c->amp);
  if (s->fixed) {
    kt_cat(buf, n, &len, " t=%g", (double)s->temperature);
    if (s->top_k > 0) kt_cat(buf, n, &len, " k=%d", (int)s->top_k);
    if (s->top_p < 1) kt_cat(buf, n, &len, " p=%g", (double)s->top_p);
    if (s->min_p > 0) kt_cat(buf, n, &len, " min_p=%g", (double)s->min_p);
  } else {
    static const char *const names[] = {"temp",   "top_k",  "top_p", "min_p", "seeds", "steps",
                                        "prompt", "output", "rep",   "pres",  "freq",  "tokens"};
    for (int i = 0; i < 12; i++)
      if (s->params & (1u << i)) kt_cat(buf, n, &len, " %s", names[i]);
  }
  if (c->op == KITE_OP_LOGPROBS || c->op == KITE_OP_APPLY_PENALTIES)
    kt_cat(buf, n, &len, " n=%lld", (long long)s->n);
  if (c->op == KITE_OP_SOFTCAP) kt_cat(buf, n, &len, " cap=%g", (double)s->temperature);
  if (c->pad_x) kt_cat(buf, n, &len, " logits+%lld", (long long)c->pad_x);
}

/* ---- bounds ------------------------------------------------------------------------------ *
 * argmax, sample: 0, the token must be ref's.
 * apply_penalties: a kernel computing each penalized logit in float64 and rounding once gets
 *   ref's value exactly; one in f32 may be an ulp off on a few elements: 1e-12 (f32), 1e-6 (f16),
 *   1e-4 (bf16) still reject a missed or doubled penalty (~1e-3 of a row's energy or more).
 * softcap: each logit in f32 is a few ulp of ref's (NMSE ~1e-13): 1e-12; in f16 / bf16 a
 *   rounding may land one ulp of the dtype apart: 1e-6 / 1e-4, as apply_penalties.
 * logprobs: the values are log-softmax in f32 (relative error ~1e-7: NMSE ~1e-14); ids are
 *   compared as numbers under the same bound: one wrong id among B n ids below V moves NMSE by
 *   >= 1 / (B n V^2), which is > 1.5e-12 in every case below (B n V^2 <= 6.6e11), so 1e-12
 *   makes any wrong id fail. */
static double sampling_bound(kite_op op, kite_dtype t) {
  switch (op) {
  case KITE_OP_APPLY_PENALTIES:
  case KITE_OP_SOFTCAP:
    return t == KITE_DTYPE_F16 ? 1e-6 : t == KITE_DTYPE_BF16 ? 1e-4 : 1e-12;
  case KITE_OP_LOGPROBS:
    return 1e-12;
  default:
    return 0;
  }
}

/* ---- cases ------------------------------------------------------------------------------- */

static kt_case sample_case(kite_op op, kite_dtype t, int64_t b, int64_t v, unsigned params,
                           int logits, float amp) {
  kt_case c = kt_case_default(op, t, b, v);
  c.sample.params = params;
  c.sample.logits = logits;
  c.amp = amp;
  return c;
}

static const int64_t g_vocabs[] = {1, 2, 7, 100, 1000, 32000, 128256, 128259};

/* One row of a fixed sampler: temperature 1, top-k 50 and top-p 0.9 (FlashInfer's benchmark),
 * or the plain distribution. */
static kt_case fixed_case(kite_op op, kite_dtype t, int64_t b, int64_t v, int filtered) {
  const unsigned all = KT_SP_TEMPERATURE | KT_SP_TOP_K | KT_SP_TOP_P | KT_SP_MIN_P;
  kt_case c = sample_case(op, t, b, v, op == KITE_OP_SAMPLE ? all : 0, KT_LOGITS_UNIFORM, 8.0f);
  c.sample.fixed = 1;
  c.sample.temperature = 1.0f;
  c.sample.top_k = filtered ? 50 : 0;
  c.sample.top_p = filtered ? 0.9f : 1.0f;
  c.sample.min_p = 0.0f;
  return c;
}

/* The quick set keeps one vocabulary long enough for the long-row kernels (clusters of blocks). */
static void sampling_check_cases(kite_op op, kite_dtype t, int quick, kt_case_list *l) {
  const int nv = quick ? 6 : (int)(sizeof g_vocabs / sizeof *g_vocabs);
  /* a few long rows (1 to 4), as in decoding one or a few sequences */
  if (!quick && (op == KITE_OP_ARGMAX || op == KITE_OP_SAMPLE || op == KITE_OP_LOGPROBS))
    for (int64_t b = 1; b <= 4; b += 3)
      for (int filtered = 0; filtered < 2; filtered++) {
        kt_case c = fixed_case(op, t, b, 128256, filtered);
        if (op == KITE_OP_LOGPROBS) {
          c.sample.params = KT_SP_TOKENS;
          c.sample.n = filtered ? 20 : 1;
        }
        kt_case_push(l, c);
      }
  switch (op) {
  case KITE_OP_ARGMAX:
    for (int i = 0; i < nv; i++) {
      const int64_t v = g_vocabs[i], b = v > 10000 ? 8 : 64;
      kt_case_push(l, sample_case(op, t, b, v, 0, KT_LOGITS_UNIFORM, 4.0f));
      kt_case_push(l, sample_case(op, t, b, v, 0, KT_LOGITS_TIES, 1.0f));
      kt_case_push(l, sample_case(op, t, b, v, 0, KT_LOGITS_NEG_INF, 1.0f));
    }
    kt_case_push(l, sample_case(op, t, 0, 100, 0, KT_LOGITS_UNIFORM, 1.0f));
    break;
  case KITE_OP_SAMPLE: {
    /* every combination of the four filter tensors, with seeds and steps on alternate ones */
    for (unsigned m = 0; m < 16; m++) {
      const unsigned p = m | (m & 1 ? KT_SP_SEEDS : 0) | (m & 2 ? KT_SP_STEPS : 0);
      if (quick && m % 5) continue;
      for (int i = 0; i < nv; i++) {
        const int64_t v = g_vocabs[i];
        if (v > 10000 && m % 3) continue; /* the large vocabularies on a third of the masks */
        const int64_t b = v > 10000 ? 6 : v >= 1000 ? 48 : 96;
        kt_case c = sample_case(op, t, b, v, p, KT_LOGITS_UNIFORM, m & 4 ? 8.0f : 2.0f);
        c.pad_x = m & 8 ? 5 : 0;
        kt_case_push(l, c);
      }
    }
    /* ties, and rows of -inf, under every filter */
    const unsigned all = KT_SP_TEMPERATURE | KT_SP_TOP_K | KT_SP_TOP_P | KT_SP_MIN_P;
    for (int i = 0; i < nv; i++) {
      const int64_t v = g_vocabs[i], b = v > 10000 ? 6 : 64;
      kt_case_push(l, sample_case(op, t, b, v, all | KT_SP_SEEDS, KT_LOGITS_TIES, 1.0f));
      kt_case_push(l, sample_case(op, t, b, v, all, KT_LOGITS_NEG_INF, 1.0f));
      kt_case_push(l, sample_case(op, t, b, v, KT_SP_TEMPERATURE, KT_LOGITS_UNIFORM, 30.0f));
    }
    kt_case_push(l, sample_case(op, t, 0, 100, all, KT_LOGITS_UNIFORM, 1.0f));
    break;
  }
  case KITE_OP_APPLY_PENALTIES: {
    const unsigned ids[] = {KT_SP_PROMPT, KT_SP_OUTPUT, KT_SP_PROMPT | KT_SP_OUTPUT};
    for (unsigned m = 0; m < 8; m++)
      for (int j = 0; j < 3; j++)
        for (int i = 0; i < nv; i += 2) {
          const int64_t v = g_vocabs[i];
          kt_case c =
              sample_case(op, t, v > 10000 ? 4 : 16, v, ids[j] | m << 8, KT_LOGITS_UNIFORM, 3.0f);
          c.sample.n = v > 1000 ? 300 : 7;
          c.pad_x = j == 2 ? 3 : 0;
          c.pad_y = m & 1 ? 2 : 0;
          kt_case_push(l, c);
        }
    break;
  }
  case KITE_OP_SOFTCAP: {
    /* caps below, at and above the amplitude of the logits; -inf rows give -cap */
    static const float caps[] = {0.5f, 4.0f, 30.0f};
    for (int i = 0; i < nv; i++)
      for (int j = 0; j < 3; j++) {
        const int64_t v = g_vocabs[i];
        kt_case c = sample_case(op, t, v > 10000 ? 4 : 16, v, 0,
                                j == 2 ? KT_LOGITS_NEG_INF : KT_LOGITS_UNIFORM, 8.0f);
        c.sample.temperature = caps[j];
        c.pad_x = j == 1 ? 3 : 0;
        kt_case_push(l, c);
      }
    kt_case c = sample_case(op, t, 0, 100, 0, KT_LOGITS_UNIFORM, 1.0f); /* B = 0 */
    c.sample.temperature = 1.0f;
    kt_case_push(l, c);
    break;
  }
  case KITE_OP_LOGPROBS: {
    static const int64_t ns[] = {0, 1, 5, 20};
    for (int i = 0; i < nv; i++)
      for (int j = 0; j < 4; j++) {
        const int64_t v = g_vocabs[i], n = ns[j] < v ? ns[j] : v;
        const int64_t b = v > 100000 ? 2 : v > 10000 ? 16 : 64;
        for (int kind = 0; kind < 3; kind++) {
          kt_case c = sample_case(op, t, b, v, j % 2 || n == 0 ? KT_SP_TOKENS : 0, kind, 4.0f);
          c.sample.n = n;
          if (n == 0 && !(c.sample.params & KT_SP_TOKENS)) c.sample.params = KT_SP_TOKENS;
          c.pad_y = j == 2 ? 3 : 0;
          kt_case_push(l, c);
        }
      }
    break;
  }
  default:
    break;
  }
}

/* llm: B in {1, 64, 256} at V = 128256 (Llama 3), f32 logits as engines hand them over. */
static void sampling_bench_cases(kite_op op, kite_dtype t, int llm, kt_case_list *l) {
  static const int64_t batches[] = {1, 64, 256};
  const int64_t V = 128256;
  for (int i = llm ? 0 : 1; i < (llm ? 3 : 2); i++) {
    const int64_t b = batches[i];
    switch (op) {
    case KITE_OP_SAMPLE:
      kt_case_push(l, fixed_case(op, t, b, V, 1));
      kt_case_push(l, fixed_case(op, t, b, V, 0));
      break;
    case KITE_OP_APPLY_PENALTIES: {
      kt_case c = sample_case(op, t, b, V,
                              KT_SP_PROMPT | KT_SP_OUTPUT | KT_SP_REPETITION | KT_SP_PRESENCE |
                                  KT_SP_FREQUENCY,
                              KT_LOGITS_UNIFORM, 3.0f);
      c.sample.n = 1024;
      kt_case_push(l, c);
      break;
    }
    case KITE_OP_SOFTCAP: {
      kt_case c = sample_case(op, t, b, V, 0, KT_LOGITS_UNIFORM, 8.0f);
      c.sample.temperature = 30.0f;
      kt_case_push(l, c);
      break;
    }
    case KITE_OP_LOGPROBS: {
      kt_case c = fixed_case(op, t, b, V, 0);
      c.sample.params = KT_SP_TOKENS;
      c.sample.n = 20;
      kt_case_push(l, c);
      break;
    }
    default:
      kt_case_push(l, fixed_case(op, t, b, V, 0));
      break;
    }
  }
}

/* Least bytes per call: argmax, sample, logprobs read the logits once (B V e) and write B
 * tokens or logprobs (the per-row parameters and top-n outputs count too); apply_penalties reads
 * the ids and reads and writes at most one logit per id; softcap reads and writes every logit. */
static double sampling_bytes(const kt_case *c) {
  const double e = (double)kite_dtype_size(c->dtype), B = (double)c->rows, V = (double)c->cols;
  switch (c->op) {
  case KITE_OP_APPLY_PENALTIES: {
    const double ids =
        B * (double)c->sample.n *
        ((c->sample.params & KT_SP_PROMPT ? 1 : 0) + (c->sample.params & KT_SP_OUTPUT ? 1 : 0));
    return ids * (4 + 2 * e) + 12 * B;
  }
  case KITE_OP_LOGPROBS:
    return B * V * e + 8 * B + 8 * B * (double)c->sample.n;
  case KITE_OP_SOFTCAP:
    return 2 * B * V * e;
  default:
    return B * V * e + 4 * B + (c->op == KITE_OP_SAMPLE ? 16 * B : 0);
  }
}

const kt_family_ops kt_family_sampling = {KT_FAMILY_FIELDS(sampling, kt_sampling_has, NULL)};
