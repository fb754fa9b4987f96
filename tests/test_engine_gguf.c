/*
 * The engine on a small random llama model whose matrices are GGUF K-quant and other block
 * types, as a Q4_K_M file mixes them (q and k Q4_K with v Q6_K fused into one projection, and
 * so on): the blocks run as stored (kite_linear_gguf, kite_linear_wq4) and give the same greedy
 * tokens as the model with its weights dequantized to f32 at load (the engine's f32 path). A
 * file with a matrix of a type kite does not run (Q8_1) is refused with a message naming the
 * tensor and the type. Hidden 256 and FFN 512, so every row is whole 256-value blocks.
 * Split over 2 tensor-parallel CPU ranks (engine/tp.h) the model gives the same greedy tokens in
 * f32 and with its blocks as stored: q, k, v, gate and up split along whole rows of blocks, the
 * ranks' halves of ffn_down (256 columns) are whole blocks, those of attn_output (128 columns of
 * 256-value K-quant blocks) are not and run dense.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kite/dtype.h>

#include "engine/tiny_model.h"
#include "gguf.h"
#include "model.h"

enum { GL = 2, GH = 256, GHQ = 4, GHKV = 2, GD = 64, GF = 512, GV = 300, NT = 12 };

/* A block type's f16 scale fields (byte offsets, -1: none) and the largest |integer| its
 * scale multiplies, so that d ~ amp / qmax gives weights of order amp. */
static const struct {
  uint32_t type;
  int d, m;
  float qmax;
} g_scales[] = {
    {KR_GGML_Q4_0, 0, -1, 8},      {KR_GGML_Q4_1, 0, 2, 15},     {KR_GGML_Q5_0, 0, -1, 16},
    {KR_GGML_Q5_1, 0, 2, 31},      {KR_GGML_Q8_0, 0, -1, 127},   {KR_GGML_Q2_K, 80, 82, 45},
    {KR_GGML_Q3_K, 108, -1, 128},  {KR_GGML_Q4_K, 0, 2, 945},    {KR_GGML_Q5_K, 0, 2, 1953},
    {KR_GGML_Q6_K, 208, -1, 4064}, {KR_GGML_IQ4_NL, 0, -1, 127}, {KR_GGML_Q8_1, 0, 2, 127},
    {KR_GGML_F32, -1, -1, 1}};

typedef struct gtensor {
  char name[48];
  int64_t cols, rows;
  uint32_t type;
  unsigned char *data;
  size_t nbytes;
} gtensor;

static gtensor g_t[4 + 9 * GL];
static int g_n;

static float urand(void) {
  return (float)(tm_rand() >> 40) * 0x1p-24f * 2.0f - 1.0f; /* [-1, 1) */
}

static void put_f16(unsigned char *p, float v) {
  const uint16_t h = kite_f32_to_f16(v);
  p[0] = (unsigned char)(h & 0xff), p[1] = (unsigned char)(h >> 8);
}

/* Random blocks (or f32 values around `shift`) of weights of order amp. */
static void add(const char *name, int64_t cols, int64_t rows, uint32_t type, float amp,
                float shift) {
  gtensor *t = &g_t[g_n++];
  snprintf(t->name, sizeof t->name, "%s", name);
  t->cols = cols, t->rows = rows, t->type = type;
  uint64_t bv, bb;
  kr_ggml_block(type, &bv, &bb);
  t->nbytes = (size_t)(cols / (int64_t)bv * (int64_t)bb * rows);
  t->data = malloc(t->nbytes);
  if (type == KR_GGML_F32) {
    for (int64_t i = 0; i < cols * rows; i++) {
      const float v = shift + amp * urand();
      memcpy(t->data + 4 * i, &v, 4);
    }
    return;
  }
  size_t s = 0;
  while (g_scales[s].type != type) s++;
  for (size_t i = 0; i < t->nbytes; i++) t->data[i] = (unsigned char)tm_rand();
  for (size_t b = 0; b < t->nbytes / bb; b++) {
    unsigned char *blk = t->data + b * bb;
    const float d = (1.0f + 0.5f * urand()) * amp / g_scales[s].qmax * (urand() < 0 ? -1 : 1);
    put_f16(blk + g_scales[s].d, d);
    if (g_scales[s].m >= 0) put_f16(blk + g_scales[s].m, 0.3f * d * g_scales[s].qmax / 8);
  }
}

/* The model: the matrices of layer l in the order q, k, v, o, gate, up, down; `bad` puts one
 * Q8_1 matrix in (a type the reader knows and kite does not run). */
static tm_buf write_model(int bad) {
  static const uint32_t types[GL][7] = {{KR_GGML_Q4_K, KR_GGML_Q4_K, KR_GGML_Q6_K, KR_GGML_Q5_K,
                                         KR_GGML_Q2_K, KR_GGML_Q3_K, KR_GGML_Q6_K},
                                        {KR_GGML_Q5_0, KR_GGML_Q5_1, KR_GGML_Q8_0, KR_GGML_IQ4_NL,
                                         KR_GGML_Q4_0, KR_GGML_Q4_1, KR_GGML_Q4_K}};
  g_n = 0;
  add("token_embd.weight", GH, GV, KR_GGML_Q4_K, 1.0f, 0.0f);
  add("output_norm.weight", GH, 1, KR_GGML_F32, 0.2f, 1.0f);
  add("output.weight", GH, GV, KR_GGML_Q6_K, 0.3f, 0.0f);
  for (int l = 0; l < GL; l++) {
    static const struct {
      const char *s;
      int64_t cols, rows;
    } m[7] = {{"attn_q", GH, GHQ * GD},      {"attn_k", GH, GHKV * GD}, {"attn_v", GH, GHKV * GD},
              {"attn_output", GHQ * GD, GH}, {"ffn_gate", GH, GF},      {"ffn_up", GH, GF},
              {"ffn_down", GF, GH}};
    char n[48];
    snprintf(n, sizeof n, "blk.%d.attn_norm.weight", l);
    add(n, GH, 1, KR_GGML_F32, 0.2f, 1.0f);
    snprintf(n, sizeof n, "blk.%d.ffn_norm.weight", l);
    add(n, GH, 1, KR_GGML_F32, 0.2f, 1.0f);
    for (int i = 0; i < 7; i++) {
      snprintf(n, sizeof n, "blk.%d.%s.weight", l, m[i].s);
      const uint32_t t = bad && l == 1 && i == 3 ? KR_GGML_Q8_1 : types[l][i];
      add(n, m[i].cols, m[i].rows, t, 1.5f / sqrtf((float)m[i].cols), 0.0f);
    }
  }
  tm_buf b = {0};
  int n_kv = 9;
  tm_put(&b, "GGUF", 4);
  tm_put_u32(&b, 3);
  tm_put_u64(&b, (uint64_t)g_n);
  const size_t kv_count_at = b.n;
  tm_put_u64(&b, 0);
  tm_kv_str(&b, "general.architecture", "llama");
  tm_kv_u32(&b, "llama.block_count", GL);
  tm_kv_u32(&b, "llama.embedding_length", GH);
  tm_kv_u32(&b, "llama.feed_forward_length", GF);
  tm_kv_u32(&b, "llama.attention.head_count", GHQ);
  tm_kv_u32(&b, "llama.attention.head_count_kv", GHKV);
  tm_kv_u32(&b, "llama.context_length", 256);
  tm_kv_f32(&b, "llama.rope.freq_base", 10000.0f);
  tm_kv_f32(&b, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
  tm_write_tokenizer(&b, GV, TM_GOOD, &n_kv);
  const uint64_t nk = (uint64_t)n_kv;
  memcpy(b.p + kv_count_at, &nk, 8);
  uint64_t off = 0;
  for (int i = 0; i < g_n; i++)
    tm_put_tensor_info(&b, g_t[i].name, g_t[i].cols, g_t[i].rows, g_t[i].type, g_t[i].nbytes, &off);
  tm_align(&b);
  for (int i = 0; i < g_n; i++) {
    tm_put(&b, g_t[i].data, g_t[i].nbytes);
    tm_align(&b);
    free(g_t[i].data);
  }
  return b;
}

static int open_model(const char *path, int bad, kr_gguf *g) {
  tm_buf img = write_model(bad);
  FILE *f = fopen(path, "wb");
  const int ok = f && fwrite(img.p, 1, img.n, f) == img.n;
  if (f) fclose(f);
  free(img.p);
  char err[512];
  CHECK(ok, "writing %s", path);
  const int rc = ok ? kr_gguf_open(path, g, err, sizeof err) : -1;
  CHECK(rc == 0, "open %s: %s", path, ok ? err : "not written");
  return rc;
}

typedef struct tokens {
  int32_t t[NT];
  int n;
} tokens;

static void on_tok(void *user, int seq, int32_t token) {
  tokens *c = user;
  if (seq == 0 && c->n < NT) c->t[c->n++] = token;
}

/* Greedy tokens of the prompt on nranks tensor-parallel ranks (ctxs[0..nranks)). */
static int greedy(kite_ctx *const *ctxs, int nranks, const kr_gguf *g, kr_weights w, tokens *out) {
  static const int32_t prompt[] = {17, 200, 5, 99, 42, 7, 250};
  char err[512];
  kr_model_params p = {
      .weights = w, .max_batch = 1, .max_tokens = 256, .block_size = 4, .ctx_len = 128};
  kr_model *m = kr_model_load_tp(ctxs, nranks, g, &p, err, sizeof err);
  CHECK(m, "load (%s, %d ranks): %s", kr_weights_name(w), nranks, err);
  if (!m) return -1;
  memset(out, 0, sizeof *out);
  CHECK(kr_submit(m, prompt, 7, NT, err, sizeof err) == 0, "submit: %s", err);
  kr_sampling s = {0};
  const int rc = kr_generate(m, &s, on_tok, NULL, out, err, sizeof err);
  CHECK(rc == 0, "generate (%s): %s", kr_weights_name(w), err);
  kr_model_free(m);
  return rc;
}

/* The tokens of 2 ranks against those of one, f32 and blocks as stored. */
static void test_tp(kite_ctx *const *ctxs, const kr_gguf *g, const tokens *f32) {
  const kr_weights modes[2] = {KR_WEIGHTS_F32, KR_WEIGHTS_AUTO};
  for (int i = 0; i < 2; i++) {
    tokens two;
    if (greedy(ctxs, 2, g, modes[i], &two)) continue;
    CHECK(two.n == NT, "%d tokens on 2 ranks", two.n);
    CHECK(memcmp(two.t, f32->t, sizeof two.t) == 0,
          "greedy tokens on 2 ranks (%s) differ from the 1-rank f32 model's",
          kr_weights_name(modes[i]));
  }
}

int main(void) {
  kite_ctx *ctxs[2] = {NULL, NULL};
  for (int r = 0; r < 2; r++) {
    kite_ctx_params cp = kite_ctx_params_default();
    cp.num_threads = r ? 1 : 2; /* 2 cores: rank 1 of the tp runs takes one */
    CHECK(kite_ctx_create(&cp, &ctxs[r]) == KITE_OK, "ctx: %s", kite_last_error());
  }
  kite_ctx *ctx = ctxs[0];
  kr_gguf g;
  if (ctx && open_model("test_engine_gguf.gguf", 0, &g) == 0) {
    tokens stored, f32;
    /* AUTO picks the blocks as stored for a K-quant file */
    if (!greedy(ctxs, 1, &g, KR_WEIGHTS_AUTO, &stored) &&
        !greedy(ctxs, 1, &g, KR_WEIGHTS_F32, &f32)) {
      CHECK(stored.n == NT && f32.n == NT, "%d and %d tokens", stored.n, f32.n);
      CHECK(memcmp(stored.t, f32.t, sizeof stored.t) == 0,
            "greedy tokens with the blocks as stored differ from the f32 model's");
      int distinct = 0;
      for (int i = 0; i < f32.n; i++) distinct += i == 0 || f32.t[i] != f32.t[i - 1];
      CHECK(distinct > 2, "the tokens hardly change: the comparison shows little");
      printf("greedy tokens:");
      for (int i = 0; i < stored.n; i++) printf(" %d", stored.t[i]);
      printf("\n");
      if (ctxs[1]) test_tp(ctxs, &g, &f32);
    }
    kr_gguf_close(&g);
  }
  if (ctx && open_model("test_engine_gguf_bad.gguf", 1, &g) == 0) {
    char err[512] = "";
    kr_model_params p = {.weights = KR_WEIGHTS_AUTO, .max_batch = 1, .ctx_len = 128};
    kr_model *m = kr_model_load(ctx, &g, &p, err, sizeof err);
    CHECK(!m, "a Q8_1 matrix loads");
    CHECK(strstr(err, "blk.1.attn_output.weight") && strstr(err, "q8_1"),
          "the refusal names neither the tensor nor its type: %s", err);
    kr_model_free(m);
    kr_gguf_close(&g);
  }
  for (int r = 0; r < 2; r++) kite_ctx_destroy(ctxs[r]);
  if (tm_failures) fprintf(stderr, "%d check(s) failed\n", tm_failures);
  return tm_failures ? 1 : 0;
}
