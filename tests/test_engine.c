/*
 * The engine on the small random-weight llama model of tests/engine/tiny_model.c (no download):
 *   - the model in each weights mode (f32, bf16, int8, q4) against a plain double-precision
 *     forward pass written here from the same dequantized weights: at every generated position
 *     the engine's greedy token has the reference's top logit (within a small tolerance for
 *     near-ties; wider for the quantized modes);
 *   - continuous batching: three prompts of different lengths run together with a small prefill
 *     chunk give exactly the tokens each gives alone, and every KV block is free afterwards;
 *   - the sampler: min_p = 1 keeps only the top token (so sampling gives the greedy tokens); a
 *     huge presence or frequency penalty never repeats a generated token; max_new = 0 generates
 *     nothing;
 *   - serving sizes that cannot be met (a batch past KR_MAX_BATCH, a context past the model's)
 *     are refused with a message before any allocation.
 * test_engine_input.c covers malformed files, metadata and the tokenizer.
 * `test_engine --write-seed FILE` writes the model file (the GGUF fuzzer's seed) and exits;
 * `test_engine --write-variant NAME FILE` writes a defective variant (tiny_model.h) for the CLI
 * tests; `test_engine --device cuda` runs the model tests on a CUDA ctx (the same bounds: f32
 * there runs in f32, never TF32; the batched and the alone runs must still give the same tokens).
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tiny_model.h"
#include "gguf.h"
#include "model.h"

/* ---- the reference forward pass (double) ------------------------------------------------- */
static void rms(const double *x, const float *w, double *y) {
  double s = 0;
  for (int i = 0; i < H; i++) s += x[i] * x[i];
  double r = 1.0 / sqrt(s / H + 1e-5);
  for (int i = 0; i < H; i++) y[i] = x[i] * r * w[i];
}

static void matvec(const float *w, const double *x, int rows, int cols, double *y) {
  for (int r = 0; r < rows; r++) {
    double s = 0;
    for (int c = 0; c < cols; c++) s += (double)w[(size_t)r * cols + c] * x[c];
    y[r] = s;
  }
}

/* Logits after each of the n tokens (causal), lg[n][V]. */
static void reference(const int32_t *tok, int n, double *lg) {
  static double x[MAXT][H], k[NL][MAXT][HKV * D], v[NL][MAXT][HKV * D];
  for (int t = 0; t < n; t++) {
    for (int i = 0; i < H; i++) x[t][i] = tm_weight("token_embd.weight")[tok[t] * H + i];
    for (int l = 0; l < NL; l++) {
      char nm[64];
      double h[H], q[HQ * D], o[HQ * D], a[H], g[F], u[F], dn[H];
#define LW(s) (snprintf(nm, sizeof nm, "blk.%d.%s.weight", l, s), tm_weight(nm))
      rms(x[t], LW("attn_norm"), h);
      matvec(LW("attn_q"), h, HQ * D, H, q);
      matvec(LW("attn_k"), h, HKV * D, H, k[l][t]);
      matvec(LW("attn_v"), h, HKV * D, H, v[l][t]);
      /* rope, adjacent pairs (llama's layout in GGUF) */
      for (int hd = 0; hd < HQ + HKV; hd++) {
        double *p = hd < HQ ? q + hd * D : k[l][t] + (hd - HQ) * D;
        for (int i = 0; i < D / 2; i++) {
          double f = t * pow(10000.0, -2.0 * i / D), c = cos(f), s = sin(f);
          double x0 = p[2 * i], x1 = p[2 * i + 1];
          p[2 * i] = x0 * c - x1 * s;
          p[2 * i + 1] = x0 * s + x1 * c;
        }
      }
      for (int hd = 0; hd < HQ; hd++) {
        int kv = hd / (HQ / HKV);
        double sc[MAXT], mx = -1e300, sum = 0;
        for (int j = 0; j <= t; j++) {
          double s = 0;
          for (int i = 0; i < D; i++) s += q[hd * D + i] * k[l][j][kv * D + i];
          sc[j] = s / sqrt((double)D);
          mx = fmax(mx, sc[j]);
        }
        for (int j = 0; j <= t; j++) sum += (sc[j] = exp(sc[j] - mx));
        for (int i = 0; i < D; i++) {
          double s = 0;
          for (int j = 0; j <= t; j++) s += sc[j] * v[l][j][kv * D + i];
          o[hd * D + i] = s / sum;
        }
      }
      matvec(LW("attn_output"), o, H, HQ * D, a);
      for (int i = 0; i < H; i++) x[t][i] += a[i];
      rms(x[t], LW("ffn_norm"), h);
      matvec(LW("ffn_gate"), h, F, H, g);
      matvec(LW("ffn_up"), h, F, H, u);
      for (int i = 0; i < F; i++) g[i] = g[i] / (1 + exp(-g[i])) * u[i];
      matvec(LW("ffn_down"), g, H, F, dn);
      for (int i = 0; i < H; i++) x[t][i] += dn[i];
#undef LW
    }
    double h[H];
    rms(x[t], tm_weight("output_norm.weight"), h);
    matvec(tm_weight("output.weight"), h, V, H, lg + (size_t)t * V);
  }
}

/* ---- the engine --------------------------------------------------------------------------- */
typedef struct collect {
  int32_t out[4][MAXT];
  int n[4];
} collect;

static void on_tok(void *user, int seq, int32_t token) {
  collect *c = user;
  if (c->n[seq] < MAXT) c->out[seq][c->n[seq]++] = token;
}

/* Generates n_new tokens for each prompt together (sp NULL: greedy) into c. */
static int generate(kite_ctx *ctx, const kr_gguf *g, kr_weights w, int batch, int chunk,
                    const int32_t *const *prompts, const int *lens, int n_prompts, int n_new,
                    const kr_sampling *sp, collect *c) {
  char err[512];
  kr_model_params p = {
      .weights = w, .max_batch = batch, .max_tokens = chunk, .block_size = 4, .ctx_len = 128};
  kr_model *m = kr_model_load(ctx, g, &p, err, sizeof err);
  CHECK(m, "load (%s): %s", kr_weights_name(w), err);
  if (!m) return -1;
  memset(c, 0, sizeof *c);
  for (int i = 0; i < n_prompts; i++)
    CHECK(kr_submit(m, prompts[i], (size_t)lens[i], n_new, err, sizeof err) == i, "submit: %s",
          err);
  kr_sampling greedy = {0};
  int rc = kr_generate(m, sp ? sp : &greedy, on_tok, NULL, c, err, sizeof err);
  CHECK(rc == 0, "generate (%s): %s", kr_weights_name(w), err);
  CHECK(kr_model_free_blocks(m) == kr_model_num_blocks(m), "%d of %d KV blocks free after the run",
        kr_model_free_blocks(m), kr_model_num_blocks(m));
  kr_model_free(m);
  return rc;
}

static const int32_t prompt7[] = {17, 200, 5, 99, 42, 7, 250};

static void test_against_reference(kite_ctx *ctx, const kr_gguf *g) {
  const int np = 7, n_new = 12;
  const int32_t *pp[1] = {prompt7};
  int lens[1] = {np};
  const kr_weights modes[] = {KR_WEIGHTS_F32, KR_WEIGHTS_BF16, KR_WEIGHTS_INT8, KR_WEIGHTS_Q4};
  const double tol[] = {1e-3, 0.15, 0.15, 0.05};
  static double lg[MAXT * V];
  for (int mi = 0; mi < 4; mi++) {
    collect c;
    if (generate(ctx, g, modes[mi], 1, 256, pp, lens, 1, n_new, NULL, &c)) continue;
    CHECK(c.n[0] == n_new, "%s: %d tokens generated", kr_weights_name(modes[mi]), c.n[0]);
    int32_t all[MAXT];
    memcpy(all, prompt7, sizeof prompt7);
    memcpy(all + np, c.out[0], (size_t)c.n[0] * 4);
    reference(all, np + c.n[0], lg);
    int worst = -1;
    for (int i = 0; i < c.n[0]; i++) {
      const double *l = lg + (size_t)(np - 1 + i) * V;
      double mx = l[0];
      for (int j = 1; j < V; j++) mx = fmax(mx, l[j]);
      /* logits here are of order 1: the tolerance is absolute */
      if (l[c.out[0][i]] < mx - tol[mi] && worst < 0) worst = i;
    }
    CHECK(worst < 0, "%s: token %d (%d) is not the reference's greedy pick",
          kr_weights_name(modes[mi]), worst, worst >= 0 ? c.out[0][worst] : -1);
    printf("%-5s greedy tokens:", kr_weights_name(modes[mi]));
    for (int i = 0; i < c.n[0]; i++) printf(" %d", c.out[0][i]);
    printf("\n");
  }
}

static void test_batching(kite_ctx *ctx, const kr_gguf *g) {
  static const int32_t a[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, b[] = {280},
                       c3[] = {40, 50, 60, 70, 80};
  const int32_t *pp[3] = {a, b, c3};
  int lens[3] = {11, 1, 5};
  for (int w = 0; w < 2; w++) {
    kr_weights mode = w ? KR_WEIGHTS_Q4 : KR_WEIGHTS_F32;
    collect alone[3], together;
    for (int i = 0; i < 3; i++)
      generate(ctx, g, mode, 1, 256, &pp[i], &lens[i], 1, 9, NULL, &alone[i]);
    /* chunks of 4 tokens: the long prompt prefills over three steps while others decode */
    generate(ctx, g, mode, 3, 4, pp, lens, 3, 9, NULL, &together);
    for (int i = 0; i < 3; i++) {
      CHECK(together.n[i] == alone[i].n[0], "%s: prompt %d: %d tokens batched, %d alone",
            kr_weights_name(mode), i, together.n[i], alone[i].n[0]);
      CHECK(memcmp(together.out[i], alone[i].out[0], (size_t)alone[i].n[0] * 4) == 0,
            "%s: prompt %d: batched tokens differ from the prompt run alone", kr_weights_name(mode),
            i);
    }
  }
}

static void test_sampler(kite_ctx *ctx, const kr_gguf *g) {
  const int32_t *pp[1] = {prompt7};
  int lens[1] = {7};
  const int n_new = 24;
  collect greedy, c;
  if (generate(ctx, g, KR_WEIGHTS_F32, 1, 256, pp, lens, 1, n_new, NULL, &greedy)) return;
  /* min_p = 1 keeps the tokens as likely as the top one: sampling gives the greedy tokens */
  kr_sampling sp = {.temperature = 1.0f, .top_p = 1.0f, .min_p = 1.0f, .seed = 5};
  generate(ctx, g, KR_WEIGHTS_F32, 1, 256, pp, lens, 1, n_new, &sp, &c);
  CHECK(c.n[0] == greedy.n[0] && memcmp(c.out[0], greedy.out[0], (size_t)c.n[0] * 4) == 0,
        "min_p 1: sampled tokens differ from the greedy ones");
  /* a huge presence (then frequency) penalty: no generated token twice, greedy or sampled */
  for (int i = 0; i < 3; i++) {
    kr_sampling pen = {.temperature = i == 2 ? 0.8f : 0.0f, .top_p = 1.0f, .seed = 9};
    if (i == 1)
      pen.frequency_penalty = 1e6f;
    else
      pen.presence_penalty = 1e6f;
    generate(ctx, g, KR_WEIGHTS_F32, 1, 256, pp, lens, 1, n_new, &pen, &c);
    CHECK(c.n[0] == n_new, "penalty %d: %d tokens", i, c.n[0]);
    for (int a = 0; a < c.n[0]; a++)
      for (int b = a + 1; b < c.n[0]; b++)
        CHECK(c.out[0][a] != c.out[0][b], "penalty %d: token %d repeats at %d and %d", i,
              c.out[0][a], a, b);
  }
  /* greedy tokens repeat within 24 here, so the penalty test above is not vacuous */
  int repeats = 0;
  for (int a = 0; a < greedy.n[0]; a++)
    for (int b = a + 1; b < greedy.n[0]; b++) repeats += greedy.out[0][a] == greedy.out[0][b];
  CHECK(repeats > 0, "the greedy run repeats no token: the penalty test shows nothing");
}

static void test_serving_bounds(kite_ctx *ctx, const kr_gguf *g) {
  char err[512];
  const struct {
    kr_model_params p;
    const char *says;
  } bad[] = {{{.max_batch = INT_MAX}, "batch"},
             {{.max_batch = -1}, "batch"},
             {{.max_tokens = INT_MAX}, "tokens per step"},
             {{.block_size = INT_MAX}, "block size"},
             {{.ctx_len = 257}, "context"},
             {{.num_blocks = -3}, "blocks"}};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    err[0] = 0;
    kr_model *m = kr_model_load(ctx, g, &bad[i].p, err, sizeof err);
    CHECK(!m && strstr(err, bad[i].says), "bad params %zu: loaded, or message '%s'", i, err);
    kr_model_free(m);
  }
  /* max_new = 0: done at once, nothing generated, no step run */
  kr_model_params p = {.weights = KR_WEIGHTS_F32, .block_size = 4, .ctx_len = 64};
  kr_model *m = kr_model_load(ctx, g, &p, err, sizeof err);
  CHECK(m, "load: %s", err);
  if (!m) return;
  collect c = {0};
  kr_sampling greedy = {0};
  CHECK(kr_submit(m, prompt7, 7, 0, err, sizeof err) == 0, "submit: %s", err);
  CHECK(kr_generate(m, &greedy, on_tok, NULL, &c, err, sizeof err) == 0, "generate: %s", err);
  kr_stats st;
  kr_model_stats(m, &st);
  CHECK(c.n[0] == 0 && st.steps == 0, "max_new 0: %d tokens in %lld steps", c.n[0],
        (long long)st.steps);
  CHECK(kr_model_ctx_len(m) == 64, "context %d, 64 asked", kr_model_ctx_len(m));
  kr_model_free(m);
}

/* A server's use of the scheduler: requests with their own settings beside the run's, stepped
 * one at a time, one cancelled mid-way and its slot reused: each gives the tokens of its run
 * alone, and every KV block comes back. */
static void test_serving_steps(kite_ctx *ctx, const kr_gguf *g) {
  const int32_t *pp[1] = {prompt7};
  int lens[1] = {7};
  const int n_new = 16;
  const kr_sampling sp = {.temperature = 0.9f,
                          .top_k = 40,
                          .top_p = 0.95f,
                          .repeat_penalty = 1.2f,
                          .presence_penalty = 0.3f,
                          .seed = 11};
  collect greedy, sampled, c = {0};
  if (generate(ctx, g, KR_WEIGHTS_F32, 1, 256, pp, lens, 1, n_new, NULL, &greedy) ||
      generate(ctx, g, KR_WEIGHTS_F32, 1, 256, pp, lens, 1, n_new, &sp, &sampled))
    return;
  char err[512];
  kr_model_params p = {
      .weights = KR_WEIGHTS_F32, .max_batch = 3, .max_tokens = 8, .block_size = 4, .ctx_len = 128};
  kr_model *m = kr_model_load(ctx, g, &p, err, sizeof err);
  CHECK(m && kr_begin(m, NULL, err, sizeof err) == 0, "load: %s", err);
  if (!m) return;
  const int a = kr_submit_with(m, prompt7, 7, n_new, &sp, err, sizeof err);
  const int b = kr_submit_with(m, prompt7, 7, n_new, NULL, err, sizeof err); /* the run's */
  const int d = kr_submit_with(m, prompt7, 7, n_new, &sp, err, sizeof err);
  CHECK(a == 0 && b == 1 && d == 2, "submit: %d %d %d: %s", a, b, d, err);
  for (int i = 0; i < 4; i++) /* d, last in, has its prompt in after 3 steps of 8 tokens */
    CHECK(kr_generate_step(m, on_tok, NULL, &c, err, sizeof err) > 0, "step: %s", err);
  kr_cancel(m, d);
  CHECK(kr_done(m, d) && !kr_done(m, a) && kr_active(m) == 2, "cancel: done %d, active %d",
        kr_done(m, d), kr_active(m));
  const int n_d = c.n[d];
  int rc;
  while ((rc = kr_generate_step(m, on_tok, NULL, &c, err, sizeof err)) > 0) {
  }
  CHECK(rc == 0, "step: %s", err);
  CHECK(c.n[d] == n_d && n_d > 0 && n_d < n_new, "cancelled: %d tokens, then %d", n_d, c.n[d]);
  CHECK(c.n[a] == n_new && memcmp(c.out[a], sampled.out[0], (size_t)n_new * 4) == 0,
        "own settings: tokens differ from the run of those settings alone");
  CHECK(c.n[b] == n_new && memcmp(c.out[b], greedy.out[0], (size_t)n_new * 4) == 0,
        "the run's settings: tokens differ from the greedy run alone");
  /* a released slot is reused, and its new sequence runs from the start */
  kr_release(m, d);
  c.n[d] = 0;
  CHECK(kr_submit_with(m, prompt7, 7, n_new, &sp, err, sizeof err) == d, "slot not reused: %s",
        err);
  while ((rc = kr_generate_step(m, on_tok, NULL, &c, err, sizeof err)) > 0) {
  }
  CHECK(c.n[d] == n_new && memcmp(c.out[d], sampled.out[0], (size_t)n_new * 4) == 0,
        "reused slot: tokens differ from the run alone");
  CHECK(kr_active(m) == 0 && kr_model_free_blocks(m) == kr_model_num_blocks(m),
        "after the run: %d active, %d of %d blocks free", kr_active(m), kr_model_free_blocks(m),
        kr_model_num_blocks(m));
  kr_model_free(m);
}

static int write_file(const char *path, const tm_buf *img) {
  FILE *f = fopen(path, "wb");
  const int bad = !f || fwrite(img->p, 1, img->n, f) != img->n;
  if (f) fclose(f);
  return bad;
}

int main(int argc, char **argv) {
  DLDeviceType dev = kDLCPU;
  if (argc == 3 && strcmp(argv[1], "--device") == 0) {
    if (strcmp(argv[2], "cuda") == 0) {
      dev = kDLCUDA;
    } else if (strcmp(argv[2], "cpu") != 0) {
      fprintf(stderr, "test_engine: --device %s unknown (cpu, cuda)\n", argv[2]);
      return 2;
    }
  }
  if ((argc == 3 && strcmp(argv[1], "--write-seed") == 0) ||
      (argc == 4 && strcmp(argv[1], "--write-variant") == 0)) {
    const int v = argc == 3 ? TM_GOOD : tm_variant_by_name(argv[2]);
    if (v < 0) {
      fprintf(stderr, "test_engine: variant %s unknown\n", argv[2]);
      return 2;
    }
    tm_buf img = tm_write_gguf((tm_variant)v);
    const int bad = write_file(argv[argc - 1], &img);
    free(img.p);
    tm_free_tensors();
    return bad;
  }
  tm_buf img = tm_write_gguf(TM_GOOD);
  const char *path = "test_engine_model.gguf";
  CHECK(write_file(path, &img) == 0, "writing %s", path);
  char err[512];
  kr_gguf g;
  CHECK(kr_gguf_open(path, &g, err, sizeof err) == 0, "open: %s", err);
  kite_ctx *ctx = NULL;
  kite_ctx_params cp = kite_ctx_params_default();
  cp.num_threads = 2;
  cp.device.device_type = dev;
  CHECK(kite_ctx_create(&cp, &ctx) == KITE_OK, "ctx: %s", kite_last_error());
  if (ctx && !tm_failures) {
    test_against_reference(ctx, &g);
    test_batching(ctx, &g);
    test_sampler(ctx, &g);
    test_serving_bounds(ctx, &g);
    test_serving_steps(ctx, &g);
  }
  kite_ctx_destroy(ctx);
  kr_gguf_close(&g);
  remove(path);
  free(img.p);
  tm_free_tensors();
  printf("test_engine: %s\n", tm_failures ? "FAILED" : "ok");
  return tm_failures ? 1 : 0;
}
