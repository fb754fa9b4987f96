/*
 * The engine on a small random-weight llama model written here as a GGUF file (no download):
 *   - the GGUF reader: every truncation of the file and a set of corrupted headers fail with a
 *     message; byte flips never crash (ASan/UBSan in the sanitizer build);
 *   - the model in each weights mode (f32, bf16, int8, q4) against a plain double-precision
 *     forward pass written here from the same dequantized weights: at every generated position
 *     the engine's greedy token has the reference's top logit (within a small tolerance for
 *     near-ties; wider for the quantized modes);
 *   - continuous batching: three prompts of different lengths run together with a small prefill
 *     chunk give exactly the tokens each gives alone, and every KV block is free afterwards;
 *   - the byte-level BPE tokenizer on the file's small vocabulary and merges.
 * `test_engine --write-seed FILE` writes the model file (the GGUF fuzzer's seed) and exits;
 * `test_engine --device cuda` runs the model tests on a CUDA ctx (the same bounds: f32 there runs
 * in f32, never TF32; the batched and the alone runs must still give the same tokens).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kite/dtype.h>

#include "gguf.h"
#include "model.h"
#include "tokenizer.h"

static int failures;
#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      failures++;                                                                                  \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                         \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, "\n");                                                                       \
    }                                                                                              \
  } while (0)

/* ---- a GGUF writer ------------------------------------------------------------------------ */
typedef struct buf {
  unsigned char *p;
  size_t n, cap;
} buf;

static void put(buf *b, const void *src, size_t n) {
  if (b->n + n > b->cap) {
    b->cap = (b->n + n) * 2;
    b->p = realloc(b->p, b->cap);
    if (!b->p) abort();
  }
  memcpy(b->p + b->n, src, n);
  b->n += n;
}
static void put_u32(buf *b, uint32_t v) {
  put(b, &v, 4);
}
static void put_u64(buf *b, uint64_t v) {
  put(b, &v, 8);
}
static void put_str(buf *b, const char *s) {
  put_u64(b, strlen(s));
  put(b, s, strlen(s));
}
static void kv_u32(buf *b, const char *k, uint32_t v) {
  put_str(b, k);
  put_u32(b, KR_GGUF_U32);
  put_u32(b, v);
}
static void kv_f32(buf *b, const char *k, float v) {
  put_str(b, k);
  put_u32(b, KR_GGUF_F32);
  put(b, &v, 4);
}
static void kv_str(buf *b, const char *k, const char *v) {
  put_str(b, k);
  put_u32(b, KR_GGUF_STRING);
  put_str(b, v);
}

/* Model geometry: 2 layers, hidden 64, 4 query heads and 2 kv heads of 16, FFN 96, vocab 300. */
enum { NL = 2, H = 64, HQ = 4, HKV = 2, D = 16, F = 96, V = 300, MAXT = 64 };

typedef struct tdesc {
  char name[48];
  int64_t cols, rows;
  uint32_t type;
  float *ref; /* the dequantized values the reference computes with */
  unsigned char *data;
  size_t nbytes;
  uint64_t offset;
} tdesc;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform in [-1, 1) */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (float)((rng >> 40) * 0x1p-24) * 2.0f - 1.0f;
}

/* Quantizes v[cols] into a row of the tensor's type and stores back the dequantized values. */
static void quantize_row(uint32_t type, float *v, int64_t cols, unsigned char *out) {
  if (type == KR_GGML_F32) {
    memcpy(out, v, (size_t)cols * 4);
    return;
  }
  if (type == KR_GGML_F16 || type == KR_GGML_BF16) {
    for (int64_t i = 0; i < cols; i++) {
      uint16_t h = type == KR_GGML_F16 ? kite_f32_to_f16(v[i]) : kite_f32_to_bf16(v[i]);
      memcpy(out + 2 * i, &h, 2);
      v[i] = type == KR_GGML_F16 ? kite_f16_to_f32(h) : kite_bf16_to_f32(h);
    }
    return;
  }
  for (int64_t b = 0; b < cols / 32; b++) {
    float *x = v + 32 * b, amax = 0, mn = x[0], mx = x[0];
    for (int i = 0; i < 32; i++) {
      amax = fmaxf(amax, fabsf(x[i]));
      mn = fminf(mn, x[i]);
      mx = fmaxf(mx, x[i]);
    }
    if (type == KR_GGML_Q8_0) {
      unsigned char *o = out + 34 * b;
      uint16_t hd = kite_f32_to_f16(amax / 127.0f);
      float d = kite_f16_to_f32(hd);
      memcpy(o, &hd, 2);
      for (int i = 0; i < 32; i++) {
        int q = d > 0 ? (int)lrintf(x[i] / d) : 0;
        q = q < -127 ? -127 : q > 127 ? 127 : q;
        o[2 + i] = (unsigned char)(int8_t)q;
        x[i] = (float)q * d;
      }
    } else {
      int min = type == KR_GGML_Q4_1, bb = min ? 20 : 18;
      unsigned char *o = out + bb * b;
      uint16_t hd = kite_f32_to_f16(min ? (mx - mn) / 15.0f : amax / 8.0f);
      uint16_t hm = kite_f32_to_f16(mn);
      float d = kite_f16_to_f32(hd), m = min ? kite_f16_to_f32(hm) : 0.0f;
      memcpy(o, &hd, 2);
      if (min) memcpy(o + 2, &hm, 2);
      unsigned char *qs = o + (min ? 4 : 2);
      memset(qs, 0, 16);
      for (int i = 0; i < 32; i++) {
        int q = d > 0 ? (int)lrintf((x[i] - m) / d) + (min ? 0 : 8) : (min ? 0 : 8);
        q = q < 0 ? 0 : q > 15 ? 15 : q;
        qs[i % 16] |= (unsigned char)(i < 16 ? q : q << 4);
        x[i] = min ? (float)q * d + m : (float)(q - 8) * d;
      }
    }
  }
}

static size_t type_bytes(uint32_t type, int64_t cols) {
  uint64_t bv, bb;
  kr_ggml_block(type, &bv, &bb);
  return (size_t)((uint64_t)cols / bv * bb);
}

static tdesc tensors[4 + NL * 9];
static int n_tensors;

static tdesc *add_tensor(const char *name, int64_t cols, int64_t rows, uint32_t type, float scale,
                         float shift) {
  tdesc *t = &tensors[n_tensors++];
  snprintf(t->name, sizeof t->name, "%s", name);
  t->cols = cols, t->rows = rows, t->type = type;
  t->ref = malloc((size_t)(cols * rows) * 4);
  t->nbytes = type_bytes(type, cols) * (size_t)rows;
  t->data = malloc(t->nbytes);
  for (int64_t r = 0; r < rows; r++) {
    float *v = t->ref + r * cols;
    for (int64_t i = 0; i < cols; i++) v[i] = shift + scale * frand();
    quantize_row(type, v, cols, t->data + (size_t)r * type_bytes(type, cols));
  }
  return t;
}

static const float *W(const char *name) {
  for (int i = 0; i < n_tensors; i++)
    if (strcmp(tensors[i].name, name) == 0) return tensors[i].ref;
  abort();
}

/* The tensors: matrices cycle through Q4_0, Q4_1, Q8_0, F16, BF16, F32 so each loads. */
static void make_tensors(void) {
  static const uint32_t types[] = {KR_GGML_Q4_0, KR_GGML_Q4_1, KR_GGML_Q8_0,
                                   KR_GGML_F16,  KR_GGML_BF16, KR_GGML_F32};
  int ti = 0;
  add_tensor("token_embd.weight", H, V, KR_GGML_Q8_0, 1.0f, 0.0f);
  add_tensor("output_norm.weight", H, 1, KR_GGML_F32, 0.2f, 1.0f);
  add_tensor("output.weight", H, V, KR_GGML_Q4_1, 0.3f, 0.0f);
  for (int l = 0; l < NL; l++) {
    char n[48];
    const struct {
      const char *s;
      int64_t cols, rows;
    } m[] = {{"attn_q", H, HQ * D},      {"attn_k", H, HKV * D}, {"attn_v", H, HKV * D},
             {"attn_output", HQ * D, H}, {"ffn_gate", H, F},     {"ffn_up", H, F},
             {"ffn_down", F, H}};
    snprintf(n, sizeof n, "blk.%d.attn_norm.weight", l);
    add_tensor(n, H, 1, KR_GGML_F32, 0.2f, 1.0f);
    snprintf(n, sizeof n, "blk.%d.ffn_norm.weight", l);
    add_tensor(n, H, 1, KR_GGML_F32, 0.2f, 1.0f);
    for (int i = 0; i < 7; i++) {
      snprintf(n, sizeof n, "blk.%d.%s.weight", l, m[i].s);
      /* q, k, v share a type, and gate, up: the engine fuses them */
      uint32_t t = i < 3    ? types[(l * 3) % 6]
                   : i == 3 ? types[(l * 3 + 1) % 6]
                   : i < 6  ? types[(l * 3 + 2) % 6]
                            : types[ti++ % 6];
      add_tensor(n, m[i].cols, m[i].rows, t, 1.5f / sqrtf((float)m[i].cols), 0.0f);
    }
  }
}

/* Byte tokens for every byte (GPT-2's printable mapping), then merges "a b" -> "ab",
 * "ab c" -> "abc", "Ġ a" -> "Ġa", and <|im_end|> as a control token. */
static void write_tokenizer(buf *b, int *n_kv) {
  kv_str(b, "tokenizer.ggml.model", "gpt2");
  kv_str(b, "tokenizer.ggml.pre", "smollm");
  (*n_kv) += 2;
  put_str(b, "tokenizer.ggml.tokens");
  put_u32(b, KR_GGUF_ARRAY);
  put_u32(b, KR_GGUF_STRING);
  put_u64(b, V);
  uint32_t next = 256;
  for (int i = 0; i < 256; i++) {
    int keep = (i >= 33 && i <= 126) || (i >= 161 && i <= 172) || i >= 174;
    uint32_t cp = keep ? (uint32_t)i : next++;
    char s[4];
    size_t n;
    if (cp < 0x80) {
      s[0] = (char)cp;
      n = 1;
    } else {
      s[0] = (char)(0xc0 | (cp >> 6));
      s[1] = (char)(0x80 | (cp & 0x3f));
      n = 2;
    }
    put_u64(b, n);
    put(b, s, n);
  }
  const char *extra[] = {"ab", "abc",
                         "\xc4\xa0"
                         "a",
                         "<|im_end|>"};
  for (int i = 0; i < V - 256; i++) {
    char s[32];
    snprintf(s, sizeof s, "%s", i < 4 ? extra[i] : "");
    if (i >= 4) snprintf(s, sizeof s, "<unused%d>", i);
    put_str(b, s);
  }
  put_str(b, "tokenizer.ggml.token_type");
  put_u32(b, KR_GGUF_ARRAY);
  put_u32(b, KR_GGUF_I32);
  put_u64(b, V);
  for (int i = 0; i < V; i++) put_u32(b, i == 259 ? 3u : i > 259 ? 5u : 1u);
  put_str(b, "tokenizer.ggml.merges");
  put_u32(b, KR_GGUF_ARRAY);
  put_u32(b, KR_GGUF_STRING);
  put_u64(b, 3);
  put_str(b, "a b");
  put_str(b, "ab c");
  put_str(b, "\xc4\xa0 a");
  kv_u32(b, "tokenizer.ggml.eos_token_id", 259);
  (*n_kv) += 4;
}

static buf write_gguf(void) {
  buf b = {0};
  int n_kv = 0;
  put(&b, "GGUF", 4);
  put_u32(&b, 3);
  put_u64(&b, (uint64_t)n_tensors);
  size_t kv_count_at = b.n;
  put_u64(&b, 0);
  kv_str(&b, "general.architecture", "llama");
  kv_u32(&b, "llama.block_count", NL);
  kv_u32(&b, "llama.embedding_length", H);
  kv_u32(&b, "llama.feed_forward_length", F);
  kv_u32(&b, "llama.attention.head_count", HQ);
  kv_u32(&b, "llama.attention.head_count_kv", HKV);
  kv_u32(&b, "llama.context_length", 256);
  kv_f32(&b, "llama.rope.freq_base", 10000.0f);
  kv_f32(&b, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
  n_kv += 9;
  write_tokenizer(&b, &n_kv);
  uint64_t nk = (uint64_t)n_kv;
  memcpy(b.p + kv_count_at, &nk, 8);
  uint64_t off = 0;
  for (int i = 0; i < n_tensors; i++) {
    tdesc *t = &tensors[i];
    put_str(&b, t->name);
    put_u32(&b, 2);
    put_u64(&b, (uint64_t)t->cols);
    put_u64(&b, (uint64_t)t->rows);
    put_u32(&b, t->type);
    t->offset = off;
    put_u64(&b, off);
    off += (t->nbytes + 31) / 32 * 32;
  }
  while (b.n % 32) put(&b, "", 1);
  for (int i = 0; i < n_tensors; i++) {
    put(&b, tensors[i].data, tensors[i].nbytes);
    while (b.n % 32) put(&b, "", 1);
  }
  return b;
}

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
    for (int i = 0; i < H; i++) x[t][i] = W("token_embd.weight")[tok[t] * H + i];
    for (int l = 0; l < NL; l++) {
      char nm[64];
      double h[H], q[HQ * D], o[HQ * D], a[H], g[F], u[F], dn[H];
#define LW(s) (snprintf(nm, sizeof nm, "blk.%d.%s.weight", l, s), W(nm))
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
    rms(x[t], W("output_norm.weight"), h);
    matvec(W("output.weight"), h, V, H, lg + (size_t)t * V);
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

static int generate(kite_ctx *ctx, const kr_gguf *g, kr_weights w, int batch, int chunk,
                    const int32_t *const *prompts, const int *lens, int n_prompts, int n_new,
                    collect *c) {
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
  kr_sampling sp = {0};
  int rc = kr_generate(m, &sp, on_tok, NULL, c, err, sizeof err);
  CHECK(rc == 0, "generate (%s): %s", kr_weights_name(w), err);
  CHECK(kr_model_free_blocks(m) == kr_model_num_blocks(m), "%d of %d KV blocks free after the run",
        kr_model_free_blocks(m), kr_model_num_blocks(m));
  kr_model_free(m);
  return rc;
}

static void test_against_reference(kite_ctx *ctx, const kr_gguf *g) {
  static const int32_t prompt[] = {17, 200, 5, 99, 42, 7, 250};
  const int np = 7, n_new = 12;
  const int32_t *pp[1] = {prompt};
  int lens[1] = {np};
  const kr_weights modes[] = {KR_WEIGHTS_F32, KR_WEIGHTS_BF16, KR_WEIGHTS_INT8, KR_WEIGHTS_Q4};
  const double tol[] = {1e-3, 0.15, 0.15, 0.05};
  static double lg[MAXT * V];
  for (int mi = 0; mi < 4; mi++) {
    collect c;
    if (generate(ctx, g, modes[mi], 1, 256, pp, lens, 1, n_new, &c)) continue;
    CHECK(c.n[0] == n_new, "%s: %d tokens generated", kr_weights_name(modes[mi]), c.n[0]);
    int32_t all[MAXT];
    memcpy(all, prompt, sizeof prompt);
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
    for (int i = 0; i < 3; i++) generate(ctx, g, mode, 1, 256, &pp[i], &lens[i], 1, 9, &alone[i]);
    /* chunks of 4 tokens: the long prompt prefills over three steps while others decode */
    generate(ctx, g, mode, 3, 4, pp, lens, 3, 9, &together);
    for (int i = 0; i < 3; i++) {
      CHECK(together.n[i] == alone[i].n[0], "%s: prompt %d: %d tokens batched, %d alone",
            kr_weights_name(mode), i, together.n[i], alone[i].n[0]);
      CHECK(memcmp(together.out[i], alone[i].out[0], (size_t)alone[i].n[0] * 4) == 0,
            "%s: prompt %d: batched tokens differ from the prompt run alone", kr_weights_name(mode),
            i);
    }
  }
}

static void test_tokenizer(const kr_gguf *g) {
  char err[256];
  kr_tokenizer *t = kr_tok_load(g, err, sizeof err);
  CHECK(t, "tokenizer: %s", err);
  if (!t) return;
  const char *text = "abc ab a<|im_end|>12";
  int32_t *ids = NULL;
  size_t n = 0, cap = 0;
  CHECK(kr_tok_encode(t, text, strlen(text), 1, &ids, &n, &cap) == 0, "encode");
  /* "abc" -> abc; " ab" -> Ġ ab ("a b" ranks before "Ġ a"; no "Ġ ab" merge); " a" -> Ġa;
   * <|im_end|>; digits one by one */
  const int32_t want[] = {257, ' ', 256, 258, 259, '1', '2'};
  CHECK(n == sizeof want / 4 && memcmp(ids, want, sizeof want) == 0,
        "encode: %zu ids, expected 7 (abc, Ġ, ab, Ġa, <|im_end|>, 1, 2)", n);
  char piece[32];
  size_t len = kr_tok_piece(t, 258, 0, piece, sizeof piece);
  CHECK(len == 2 && memcmp(piece, " a", 2) == 0, "piece of Ġa");
  CHECK(kr_tok_is_eog(t, 259), "<|im_end|> ends generation");
  free(ids);
  kr_tok_free(t);
}

static void test_malformed(const buf *img) {
  char err[512];
  kr_gguf g;
  CHECK(kr_gguf_parse(img->p, img->n, &g, err, sizeof err) == 0, "the image parses: %s", err);
  kr_gguf_close(&g);
  /* every truncation that cuts a tensor or the header fails */
  const size_t last =
      img->n - (tensors[n_tensors - 1].nbytes + 31) / 32 * 32 + tensors[n_tensors - 1].nbytes;
  for (size_t n = 0; n < last; n += (n < 4096 ? 1 : 97)) {
    int rc = kr_gguf_parse(img->p, n, &g, err, sizeof err);
    CHECK(rc != 0, "truncated to %zu bytes: parsed", n);
    CHECK(rc == 0 || strstr(err, "gguf:"), "truncated to %zu bytes: message '%s'", n, err);
    kr_gguf_close(&g);
  }
  unsigned char *c = malloc(img->n);
  /* corrupted fields: each must be refused with a message */
  struct {
    size_t at;
    uint64_t v;
    int width;
    const char *what;
  } bad[] = {{0, 0x46554746u, 4, "magic"},
             {4, 7, 4, "version"},
             {8, 1ull << 60, 8, "tensor count"},
             {16, 1ull << 60, 8, "metadata count"},
             {24, 1ull << 62, 8, "first key length"}};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    memcpy(c, img->p, img->n);
    memcpy(c + bad[i].at, &bad[i].v, (size_t)bad[i].width);
    CHECK(kr_gguf_parse(c, img->n, &g, err, sizeof err) != 0, "bad %s parsed", bad[i].what);
    kr_gguf_close(&g);
  }
  /* byte flips anywhere in the header: any outcome but a crash or an over-read */
  const size_t header = img->n > 8192 ? 8192 : img->n;
  for (int i = 0; i < 3000; i++) {
    memcpy(c, img->p, img->n);
    for (int f = 0; f < 1 + i % 4; f++) {
      rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
      c[rng % header] ^= (unsigned char)(1u << (rng >> 60) % 8);
    }
    if (kr_gguf_parse(c, img->n, &g, err, sizeof err) == 0) {
      kr_tokenizer *t = kr_tok_load(&g, err, sizeof err);
      kr_tok_free(t);
    }
    kr_gguf_close(&g);
  }
  free(c);
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
  make_tensors();
  buf img = write_gguf();
  if (argc == 3 && strcmp(argv[1], "--write-seed") == 0) {
    FILE *f = fopen(argv[2], "wb");
    const int bad = !f || fwrite(img.p, 1, img.n, f) != img.n;
    if (f) fclose(f);
    free(img.p);
    return bad;
  }
  test_malformed(&img);
  const char *path = "test_engine_model.gguf";
  FILE *f = fopen(path, "wb");
  CHECK(f && fwrite(img.p, 1, img.n, f) == img.n, "writing %s", path);
  if (f) fclose(f);
  char err[512];
  kr_gguf g;
  CHECK(kr_gguf_open(path, &g, err, sizeof err) == 0, "open: %s", err);
  kite_ctx *ctx = NULL;
  kite_ctx_params cp = kite_ctx_params_default();
  cp.num_threads = 2;
  cp.device.device_type = dev;
  CHECK(kite_ctx_create(&cp, &ctx) == KITE_OK, "ctx: %s", kite_last_error());
  if (ctx && !failures) {
    test_tokenizer(&g);
    test_against_reference(ctx, &g);
    test_batching(ctx, &g);
  }
  kite_ctx_destroy(ctx);
  kr_gguf_close(&g);
  remove(path);
  free(img.p);
  for (int i = 0; i < n_tensors; i++) free(tensors[i].ref), free(tensors[i].data);
  printf("test_engine: %s\n", failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
