/*
 * The sampling family's semantics on every host backend (ref, cpu), each pinned in turn:
 *   - statistics: 10^5 draws (rows of one batch, several steps) from fixed distributions match
 *     the filtered softmax written out here in float64, by a chi-square test (p > 1e-3), for each
 *     filter alone and combined; a token outside the kept set is a failure outright;
 *   - edge cases: one finite logit among -inf, ties, top_k = 1, a tiny top_p, V = 1, +inf, NaN
 *     (an error naming the row, and still no token outside [0, V)), greedy and sampled rows in
 *     one batch, per-row seeds and steps (the same draw wherever the row sits);
 *   - apply_penalties and logprobs on small cases worked out by hand.
 * Token-for-token agreement between backends is kite check's job (tools/kite).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static DLTensor vec(void *data, DLDataType t, int64_t *shape) {
  DLTensor d = {.data = data, .device = {kDLCPU, 0}, .ndim = 1, .dtype = t, .shape = shape};
  return d;
}
static DLTensor mat(void *data, DLDataType t, int64_t *shape) {
  DLTensor d = {.data = data, .device = {kDLCPU, 0}, .ndim = 2, .dtype = t, .shape = shape};
  return d;
}
static const DLDataType F32 = {kDLFloat, 32, 1}, I32 = {kDLInt, 32, 1}, I64 = {kDLInt, 64, 1};

/* ---- the filtered distribution, written out plainly ----------------------------------------- */
typedef struct filt {
  float t, top_p, min_p;
  int32_t top_k;
} filt;

/* p[i] of the filtered softmax of l[0, v) (0 outside the kept set). */
static void filtered(const float *l, int v, filt f, double *p) {
  double m = -INFINITY;
  for (int i = 0; i < v; i++) m = l[i] > m ? l[i] : m;
  /* top-k keeps token i when fewer than k tokens are strictly larger (ties with the k-th stay) */
  double keep_k[64];
  for (int i = 0; i < v; i++) {
    int above = 0;
    for (int j = 0; j < v; j++) above += l[j] > l[i];
    keep_k[i] = !(f.top_k > 0 && f.top_k < v) || above < f.top_k;
  }
  double z = 0;
  for (int i = 0; i < v; i++) p[i] = keep_k[i] ? exp((l[i] - m) / f.t) : 0.0, z += p[i];
  if (f.top_p < 1.0f) {
    double keep[64];
    for (int i = 0; i < v; i++) {
      double above = 0;
      for (int j = 0; j < v; j++) above += l[j] > l[i] ? p[j] : 0.0;
      keep[i] = p[i] > 0 && (above < f.top_p * z || above == 0);
    }
    for (int i = 0; i < v; i++) p[i] = keep[i] ? p[i] : 0.0;
  }
  for (int i = 0; i < v; i++)
    if (f.min_p > 0 && exp((l[i] - m) / f.t) < f.min_p) p[i] = 0.0;
  double s = 0;
  for (int i = 0; i < v; i++) s += p[i];
  for (int i = 0; i < v; i++) p[i] /= s;
}

/* Upper tail of chi-square with df degrees of freedom (Wilson-Hilferty; ample for p ~ 1e-3). */
static double chi2_sf(double x, int df) {
  const double k = df, h = 2.0 / (9.0 * k);
  const double zs = (cbrt(x / k) - (1.0 - h)) / sqrt(h);
  return 0.5 * erfc(zs / sqrt(2.0));
}

enum { ROWS = 20000, STEPS = 5, V = 10 };

static void test_statistics(const char *backend) {
  static const float l[V] = {2.0f, 1.5f, 1.5f, 0.3f, -1.0f, 0.0f, 0.7f, -INFINITY, 1.0f, -0.5f};
  static const filt filters[] = {
      {1.0f, 1.0f, 0.0f, 0}, {0.7f, 1.0f, 0.0f, 0}, {1.0f, 1.0f, 0.0f, 3},  {1.0f, 0.6f, 0.0f, 0},
      {1.0f, 1.0f, 0.2f, 0}, {1.3f, 0.8f, 0.1f, 5}, {2.0f, 0.95f, 0.0f, 4}, {0.5f, 1.0f, 0.05f, 0},
  };
  float *logits = malloc(sizeof(float) * ROWS * V);
  float *temp = malloc(sizeof(float) * ROWS), *tp = malloc(sizeof(float) * ROWS);
  float *mp = malloc(sizeof(float) * ROWS);
  int32_t *tk = malloc(sizeof(int32_t) * ROWS), *tok = malloc(sizeof(int32_t) * ROWS);
  for (int r = 0; r < ROWS; r++) memcpy(logits + r * V, l, sizeof l);
  int64_t sh[2] = {ROWS, V}, sb[1] = {ROWS};
  DLTensor L = mat(logits, F32, sh), T = vec(tok, I32, sb), TT = vec(temp, F32, sb);
  DLTensor TK = vec(tk, I32, sb), TP = vec(tp, F32, sb), MP = vec(mp, F32, sb);
  kite_ctx *ctx;
  kite_ctx_create(NULL, &ctx);
  for (size_t fi = 0; fi < sizeof filters / sizeof filters[0]; fi++) {
    const filt f = filters[fi];
    snprintf(g_where, sizeof g_where, "%s t=%g k=%d p=%g min_p=%g", backend, (double)f.t,
             (int)f.top_k, (double)f.top_p, (double)f.min_p);
    for (int r = 0; r < ROWS; r++) temp[r] = f.t, tk[r] = f.top_k, tp[r] = f.top_p, mp[r] = f.min_p;
    double p[V];
    filtered(l, V, f, p);
    long count[V] = {0}, outside = 0;
    for (int s = 0; s < STEPS; s++) {
      kite_sampling_params sp = kite_sampling_params_default();
      sp.temperature = &TT, sp.top_k = &TK, sp.top_p = &TP, sp.min_p = &MP;
      sp.seed = 0x5eed + fi, sp.step = (uint64_t)s;
      kite_status st = kite_sample(ctx, &L, &sp, &T);
      CHECK(st == KITE_OK, "kite_sample failed\n");
      for (int r = 0; r < ROWS; r++) {
        if (tok[r] < 0 || tok[r] >= V || p[tok[r]] == 0.0)
          outside++;
        else
          count[tok[r]]++;
      }
    }
    CHECK(outside == 0, "%ld draws outside the kept set\n", outside);
    double chi2 = 0;
    int df = -1;
    const double n = (double)ROWS * STEPS;
    for (int i = 0; i < V; i++) {
      if (p[i] == 0.0) continue;
      df++;
      const double e = n * p[i];
      chi2 += (count[i] - e) * (count[i] - e) / e;
    }
    if (df > 0) {
      const double pv = chi2_sf(chi2, df);
      CHECK(pv > 1e-3, "chi-square %.1f with %d degrees of freedom: p = %.2e\n", chi2, df, pv);
    } else {
      CHECK(count[0] + outside == (long)n || df == 0, "one kept token must take every draw\n");
    }
  }
  g_where[0] = '\0';
  kite_ctx_destroy(ctx);
  free(logits), free(temp), free(tp), free(mp), free(tk), free(tok);
}

/* One row: the token kite_sample draws (all parameters given) and its status. */
static kite_status sample1(kite_ctx *ctx, float *l, int64_t v, filt f, uint64_t step,
                           int32_t *tok) {
  int64_t sh[2] = {1, v}, sb[1] = {1};
  float t = f.t, tp = f.top_p, mp = f.min_p;
  int32_t tk = f.top_k;
  DLTensor L = mat(l, F32, sh), T = vec(tok, I32, sb), TT = vec(&t, F32, sb);
  DLTensor TK = vec(&tk, I32, sb), TP = vec(&tp, F32, sb), MP = vec(&mp, F32, sb);
  kite_sampling_params sp = kite_sampling_params_default();
  sp.temperature = &TT, sp.top_k = &TK, sp.top_p = &TP, sp.min_p = &MP;
  sp.seed = 99, sp.step = step;
  *tok = -7;
  return kite_sample(ctx, &L, &sp, &T);
}

static void test_edges(const char *backend) {
  kite_ctx *ctx;
  kite_ctx_create(NULL, &ctx);
  const filt plain = {1.0f, 1.0f, 0.0f, 0};
  int32_t tok;
  snprintf(g_where, sizeof g_where, "%s", backend);
  /* one finite logit among -inf, under every filter */
  float l[64];
  for (int i = 0; i < 64; i++) l[i] = -INFINITY;
  l[37] = -3.0f;
  const filt fs[] = {plain, {0.3f, 0.5f, 0.5f, 2}, {5.0f, 1e-6f, 0.0f, 1}, {0.0f, 1, 0, 0}};
  for (int s = 0; s < 20; s++)
    for (int j = 0; j < 4; j++) {
      CHECK(sample1(ctx, l, 64, fs[j], (uint64_t)s, &tok) == KITE_OK && tok == 37,
            "one finite logit: got %d\n", tok);
    }
  /* all -inf: token 0 */
  l[37] = -INFINITY;
  CHECK(sample1(ctx, l, 64, plain, 0, &tok) == KITE_OK && tok == 0, "all -inf: got %d\n", tok);
  /* ties: greedy, top_k = 1 and a tiny top_p give the lowest index of the max */
  for (int i = 0; i < 64; i++) l[i] = (float)(i % 5);
  for (int s = 0; s < 20; s++) {
    CHECK(sample1(ctx, l, 64, (filt){0.0f, 1, 0, 0}, (uint64_t)s, &tok) == KITE_OK && tok == 4,
          "greedy tie: got %d\n", tok);
    CHECK(sample1(ctx, l, 64, (filt){1.0f, 1, 0, 1}, (uint64_t)s, &tok) == KITE_OK && tok % 5 == 4,
          "top_k = 1 keeps the tied max group: got %d\n", tok);
    CHECK(sample1(ctx, l, 64, (filt){1.0f, 1e-7f, 0, 0}, (uint64_t)s, &tok) == KITE_OK &&
              tok % 5 == 4,
          "tiny top_p keeps the max group: got %d\n", tok);
    CHECK(sample1(ctx, l, 64, (filt){1.0f, 0.0f, 0, 0}, (uint64_t)s, &tok) == KITE_OK &&
              tok % 5 == 4,
          "top_p 0 keeps the max group: got %d\n", tok);
  }
  /* V = 1 */
  float one = 0.5f;
  CHECK(sample1(ctx, &one, 1, plain, 3, &tok) == KITE_OK && tok == 0, "V = 1: got %d\n", tok);
  /* a temperature below 1e-5 (vLLM's epsilon) is greedy: every step the largest logit */
  for (int i = 0; i < 64; i++) l[i] = (float)(i % 7) * 0.01f;
  l[23] = 0.065f;
  for (int s = 0; s < 20; s++)
    CHECK(sample1(ctx, l, 64, (filt){9e-6f, 1.0f, 0, 0}, (uint64_t)s, &tok) == KITE_OK && tok == 23,
          "temperature 9e-6, step %d: token %d, want 23 (greedy)\n", s, tok);
  /* +inf: the first +inf */
  for (int i = 0; i < 64; i++) l[i] = (float)i;
  l[9] = l[50] = INFINITY;
  CHECK(sample1(ctx, l, 64, plain, 1, &tok) == KITE_OK && tok == 9, "+inf: got %d\n", tok);
  /* NaN: an error naming the row; the token is still in range (NaN counts as -inf) */
  l[9] = l[50] = NAN;
  kite_status st = sample1(ctx, l, 64, plain, 1, &tok);
  CHECK(st == KITE_ERR_INVALID_ARG && strstr(kite_last_error(), "NaN") && tok >= 0 && tok < 64,
        "NaN: status %s, token %d\n", kite_status_name(st), tok);
  for (int i = 0; i < 64; i++) l[i] = NAN;
  st = sample1(ctx, l, 64, plain, 1, &tok);
  CHECK(st == KITE_ERR_INVALID_ARG && tok == 0, "all NaN: status %s, token %d\n",
        kite_status_name(st), tok);

  /* greedy and sampled rows in one batch; per-row seeds and steps ignore the row's position */
  enum { B = 8, W = 300 };
  static float lb[B * W];
  for (int i = 0; i < B * W; i++) lb[i] = (float)((i * 7919) % 1000) / 250.0f;
  float temp[B] = {0, 1, 0, 1, 1, 1, 0, 1};
  int64_t seeds[B] = {5, 5, 6, 7, 5, 9, 9, 5}, steps[B] = {3, 3, 3, 4, 3, 3, 3, 3};
  for (int r = 0; r < B; r++) memcpy(lb + r * W, lb, sizeof(float) * W); /* same logits */
  int32_t toks[B], greedy[B];
  int64_t sh[2] = {B, W}, sb[1] = {B};
  DLTensor L = mat(lb, F32, sh), T = vec(toks, I32, sb), TT = vec(temp, F32, sb);
  DLTensor S = vec(seeds, I64, sb), ST = vec(steps, I64, sb), G = vec(greedy, I32, sb);
  kite_sampling_params sp = kite_sampling_params_default();
  sp.temperature = &TT, sp.seeds = &S, sp.steps = &ST;
  CHECK(kite_sample(ctx, &L, &sp, &T) == KITE_OK, "mixed batch\n");
  CHECK(kite_argmax(ctx, &L, &G) == KITE_OK, "argmax\n");
  for (int r = 0; r < B; r++)
    if (temp[r] == 0)
      CHECK(toks[r] == greedy[r], "greedy row %d: %d vs %d\n", r, toks[r], greedy[r]);
  CHECK(toks[1] == toks[4] && toks[4] == toks[7], "rows seeded (5, 3): %d %d %d\n", toks[1],
        toks[4], toks[7]);
  /* the same seed and step drawn alone, at row 0 of a batch of one */
  {
    int64_t s1[1] = {5}, st1[1] = {3}, sh1[2] = {1, W}, sb1[1] = {1};
    float t1 = 1.0f;
    int32_t one_tok;
    DLTensor L1 = mat(lb, F32, sh1), T1 = vec(&one_tok, I32, sb1), TT1 = vec(&t1, F32, sb1);
    DLTensor S1 = vec(s1, I64, sb1), ST1 = vec(st1, I64, sb1);
    kite_sampling_params p1 = kite_sampling_params_default();
    p1.temperature = &TT1, p1.seeds = &S1, p1.steps = &ST1;
    CHECK(kite_sample(ctx, &L1, &p1, &T1) == KITE_OK && one_tok == toks[1],
          "a seeded row alone: %d vs %d in the batch\n", one_tok, toks[1]);
  }
  g_where[0] = '\0';
  kite_ctx_destroy(ctx);
}

static void test_penalties_logprobs(const char *backend) {
  kite_ctx *ctx;
  kite_ctx_create(NULL, &ctx);
  snprintf(g_where, sizeof g_where, "%s", backend);
  /* row: logits 2, -1, 0.5, 3, -2; prompt 0, 0, 9 (padding); output 1, 3, 3, -1 */
  float l[5] = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f};
  int32_t pr[3] = {0, 0, 9}, out[4] = {1, 3, 3, -1};
  float rep = 2.0f, pres = 0.5f, freq = 0.25f;
  int64_t sl[2] = {1, 5}, sp[2] = {1, 3}, so[2] = {1, 4}, s1[1] = {1};
  DLTensor L = mat(l, F32, sl), P = mat(pr, I32, sp), O = mat(out, I32, so);
  DLTensor R = vec(&rep, F32, s1), PR = vec(&pres, F32, s1), FR = vec(&freq, F32, s1);
  CHECK(kite_apply_penalties(ctx, &L, &P, &O, &R, &PR, &FR) == KITE_OK, "apply_penalties\n");
  /* 0: prompt only: 2 / 2 = 1; 1: output once: -1 * 2 - 0.25 - 0.5; 2: unseen; 3: output twice:
   * 3 / 2 - 0.5 - 0.5; 4: unseen */
  const float want[5] = {1.0f, -2.75f, 0.5f, 0.5f, -2.0f};
  for (int i = 0; i < 5; i++)
    CHECK(l[i] == want[i], "penalized logit %d: %g, want %g\n", i, l[i], want[i]);

  /* penalties outside vLLM's rules: an error naming the row, nothing written */
  const float bad_rep[3] = {0.0f, -1.0f, NAN}, bad_add[2] = {NAN, INFINITY};
  for (int i = 0; i < 5; i++) {
    float before[5];
    memcpy(before, l, sizeof before);
    float r2 = i < 3 ? bad_rep[i] : 1.0f, p2 = i < 3 ? 0.0f : bad_add[i - 3];
    DLTensor R2 = vec(&r2, F32, s1), P2 = vec(&p2, F32, s1);
    kite_status st = kite_apply_penalties(ctx, &L, &P, &O, &R2, &P2, NULL);
    CHECK(st == KITE_ERR_INVALID_ARG &&
              strstr(kite_last_error(), i < 3 ? "repetition[0]" : "presence[0]"),
          "bad penalty %d: status %s\n", i, kite_status_name(st));
    CHECK(memcmp(before, l, sizeof before) == 0, "bad penalty %d wrote the logits\n", i);
  }

  /* logprobs of 0, 1, 2, 2, 1: lse = log(1 + 2e + 2e^2) */
  float x[5] = {0.0f, 1.0f, 2.0f, 2.0f, 1.0f};
  int32_t t[1] = {4}, ids[3];
  float tl[1], tops[3];
  int64_t s3[2] = {1, 3};
  const double lse = log(1.0 + 2.0 * exp(1.0) + 2.0 * exp(2.0));
  DLTensor X = mat(x, F32, sl), T = vec(t, I32, s1), TL = vec(tl, F32, s1);
  DLTensor ID = mat(ids, I32, s3), TO = mat(tops, F32, s3);
  CHECK(kite_logprobs(ctx, &X, &T, 3, &TL, &ID, &TO) == KITE_OK, "logprobs\n");
  CHECK(fabs(tl[0] - (1.0 - lse)) < 1e-5, "token logprob %g, want %g\n", tl[0], 1.0 - lse);
  CHECK(ids[0] == 2 && ids[1] == 3 && ids[2] == 1, "top ids %d %d %d, want 2 3 1\n", ids[0], ids[1],
        ids[2]);
  CHECK(fabs(tops[0] - (2.0 - lse)) < 1e-5 && fabs(tops[2] - (1.0 - lse)) < 1e-5,
        "top logprobs %g %g\n", tops[0], tops[2]);
  g_where[0] = '\0';
  kite_ctx_destroy(ctx);
}

int main(void) {
  static const char *const backends[] = {"ref", "cpu"};
  for (int b = 0; b < 2; b++) {
    char cfg[128];
    snprintf(cfg, sizeof cfg, "sample=%s,argmax=%s,apply_penalties=%s,logprobs=%s", backends[b],
             backends[b], backends[b], backends[b]);
    CHECK(kite_config_set(cfg) == KITE_OK, "config %s\n", cfg);
    test_statistics(backends[b]);
    test_edges(backends[b]);
    test_penalties_logprobs(backends[b]);
  }
  kite_config_set(NULL);
  return check_summary();
}
