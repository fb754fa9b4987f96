/*
 * Tensor parallelism (engine/tp.h) on the small random-weight llama model of
 * tests/engine/tiny_model.c (4 query heads over 2 kv heads: GQA), over 2 CPU ranks in this
 * process (the ref backend's communicator, ranks as threads):
 *   - f32: the greedy tokens of one prompt, and of three prompts batched with a small prefill
 *     chunk (decode and prefill rows in one step), are those of the one-rank model;
 *   - each rank holds half the KV cache, and less than the whole model's weights;
 *   - a rank count that does not divide the kv heads is refused with a message naming them.
 * The int8 path (and the q4 mode's int8 matrices) is not compared: a row-parallel layer
 * quantizes each rank's share of its input with the share's own per-token scale, so its
 * products differ from the one-rank model's. test_engine_gguf runs K-quant blocks as stored on
 * 2 ranks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tiny_model.h"
#include "gguf.h"
#include "model.h"

enum { NP = 3, NEW = 10 };

typedef struct collect {
  int32_t out[NP][MAXT];
  int n[NP];
} collect;

static void on_tok(void *user, int seq, int32_t token) {
  collect *c = user;
  if (seq < NP && c->n[seq] < MAXT) c->out[seq][c->n[seq]++] = token;
}

static const int32_t p0[] = {17, 200, 5, 99, 42, 7, 250};
static const int32_t p1[] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5};
static const int32_t p2[] = {123, 45};

/* Greedy tokens of the first n_prompts prompts run together on nranks ranks. */
static kr_model *generate(kite_ctx *const *ctxs, int nranks, const kr_gguf *g, kr_weights w,
                          int n_prompts, int chunk, collect *c) {
  const int32_t *prompts[NP] = {p0, p1, p2};
  const int lens[NP] = {7, 11, 2};
  char err[512];
  kr_model_params p = {
      .weights = w, .max_batch = n_prompts, .max_tokens = chunk, .block_size = 4, .ctx_len = 64};
  kr_model *m = kr_model_load_tp(ctxs, nranks, g, &p, err, sizeof err);
  CHECK(m, "load (%s, %d ranks): %s", kr_weights_name(w), nranks, err);
  if (!m) return NULL;
  memset(c, 0, sizeof *c);
  for (int i = 0; i < n_prompts; i++)
    CHECK(kr_submit(m, prompts[i], (size_t)lens[i], NEW, err, sizeof err) == i, "submit: %s", err);
  kr_sampling greedy = {0};
  CHECK(kr_generate(m, &greedy, on_tok, NULL, c, err, sizeof err) == 0,
        "generate (%s, %d ranks): %s", kr_weights_name(w), nranks, err);
  CHECK(kr_model_free_blocks(m) == kr_model_num_blocks(m), "%d of %d KV blocks free after the run",
        kr_model_free_blocks(m), kr_model_num_blocks(m));
  return m;
}

static void same_tokens(const collect *a, const collect *b, int n_prompts, const char *what) {
  for (int i = 0; i < n_prompts; i++) {
    CHECK(a->n[i] == NEW && b->n[i] == NEW, "%s: prompt %d: %d and %d tokens", what, i, a->n[i],
          b->n[i]);
    CHECK(memcmp(a->out[i], b->out[i], sizeof a->out[i]) == 0,
          "%s: prompt %d: the 2-rank greedy tokens differ from the 1-rank ones", what, i);
  }
}

static void test_tokens(kite_ctx *const *ctxs, const kr_gguf *g, kr_weights w) {
  collect one, two;
  const char *name = kr_weights_name(w);
  /* one prompt, whole-prompt prefill then decode steps */
  kr_model *m1 = generate(ctxs, 1, g, w, 1, 64, &one);
  kr_model *m2 = generate(ctxs, 2, g, w, 1, 64, &two);
  if (m1 && m2) {
    same_tokens(&one, &two, 1, name);
    int distinct = 0;
    for (int i = 0; i < one.n[0]; i++) distinct += i == 0 || one.out[0][i] != one.out[0][i - 1];
    CHECK(distinct > 2, "%s: the tokens hardly change: the comparison shows little", name);
    /* memory of each rank: half the KV heads, a share of the matrices */
    size_t w1, kv1, w2[2], kv2[2];
    kr_model_rank_bytes(m1, 0, &w1, &kv1);
    for (int r = 0; r < 2; r++) {
      kr_model_rank_bytes(m2, r, &w2[r], &kv2[r]);
      CHECK(kv2[r] * 2 == kv1, "%s: rank %d's KV cache is %zu bytes, the whole one %zu", name, r,
            kv2[r], kv1);
      CHECK(w2[r] < w1, "%s: rank %d holds %zu weight bytes, the whole model %zu", name, r, w2[r],
            w1);
      printf("%s rank %d: weights %zu bytes, KV cache %zu (1 rank: %zu, %zu)\n", name, r, w2[r],
             kv2[r], w1, kv1);
    }
  }
  kr_model_free(m1);
  kr_model_free(m2);
  /* three prompts with a prefill chunk of 5 rows: steps mix decode and prefill rows */
  m1 = generate(ctxs, 1, g, w, NP, 5, &one);
  m2 = generate(ctxs, 2, g, w, NP, 5, &two);
  if (m1 && m2) same_tokens(&one, &two, NP, name);
  kr_model_free(m1);
  kr_model_free(m2);
}

static void test_refusals(kite_ctx *const *ctxs, const kr_gguf *g) {
  char err[512] = "";
  kr_model_params p = {.weights = KR_WEIGHTS_F32, .max_batch = 1, .ctx_len = 64};
  kr_model *m = kr_model_load_tp(ctxs, 3, g, &p, err, sizeof err);
  CHECK(!m, "3 ranks load a model of 2 kv heads");
  CHECK(strstr(err, "3 ranks") && strstr(err, "2 kv heads"),
        "the refusal names neither the ranks nor the kv heads: %s", err);
  kr_model_free(m);
}

int main(void) {
  tm_make_tensors();
  tm_buf img = tm_write_gguf(TM_GOOD);
  const char *path = "test_engine_tp_model.gguf";
  FILE *f = fopen(path, "wb");
  const int written = f && fwrite(img.p, 1, img.n, f) == img.n;
  if (f) fclose(f);
  CHECK(written, "writing %s", path);
  char err[512];
  kr_gguf g;
  const int opened = written && kr_gguf_open(path, &g, err, sizeof err) == 0;
  CHECK(opened, "open: %s", written ? err : "not written");
  kite_ctx *ctxs[3] = {NULL, NULL, NULL};
  for (int r = 0; r < 3; r++) {
    kite_ctx_params cp = kite_ctx_params_default();
    cp.num_threads = 1; /* a thread per rank */
    CHECK(kite_ctx_create(&cp, &ctxs[r]) == KITE_OK, "ctx: %s", kite_last_error());
  }
  if (opened && ctxs[2]) {
    test_tokens(ctxs, &g, KR_WEIGHTS_F32);
    test_refusals(ctxs, &g);
  }
  for (int r = 0; r < 3; r++) kite_ctx_destroy(ctxs[r]);
  if (opened) kr_gguf_close(&g);
  remove(path);
  free(img.p);
  tm_free_tensors();
  printf("test_engine_tp: %s\n", tm_failures ? "FAILED" : "ok");
  return tm_failures ? 1 : 0;
}
