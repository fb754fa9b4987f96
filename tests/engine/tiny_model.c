#include "tiny_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kite/dtype.h>

#include "gguf.h"

int tm_failures;

/* ---- the GGUF writer ---------------------------------------------------------------------- */
void tm_put(tm_buf *b, const void *src, size_t n) {
  if (b->n + n > b->cap) {
    b->cap = (b->n + n) * 2;
    b->p = realloc(b->p, b->cap);
    if (!b->p) abort();
  }
  memcpy(b->p + b->n, src, n);
  b->n += n;
}
void tm_put_u32(tm_buf *b, uint32_t v) {
  tm_put(b, &v, 4);
}
void tm_put_u64(tm_buf *b, uint64_t v) {
  tm_put(b, &v, 8);
}
void tm_put_str(tm_buf *b, const char *s) {
  tm_put_u64(b, strlen(s));
  tm_put(b, s, strlen(s));
}
void tm_kv_u32(tm_buf *b, const char *k, uint32_t v) {
  tm_put_str(b, k);
  tm_put_u32(b, KR_GGUF_U32);
  tm_put_u32(b, v);
}
void tm_kv_f32(tm_buf *b, const char *k, float v) {
  tm_put_str(b, k);
  tm_put_u32(b, KR_GGUF_F32);
  tm_put(b, &v, 4);
}
void tm_kv_str(tm_buf *b, const char *k, const char *v) {
  tm_put_str(b, k);
  tm_put_u32(b, KR_GGUF_STRING);
  tm_put_str(b, v);
}

void tm_put_tensor_info(tm_buf *b, const char *name, int64_t cols, int64_t rows, uint32_t type,
                        uint64_t nbytes, uint64_t *off) {
  tm_put_str(b, name);
  tm_put_u32(b, 2);
  tm_put_u64(b, (uint64_t)cols);
  tm_put_u64(b, (uint64_t)rows);
  tm_put_u32(b, type);
  tm_put_u64(b, *off);
  *off += (nbytes + 31) / 32 * 32;
}

void tm_align(tm_buf *b) {
  while (b->n % 32) tm_put(b, "", 1);
}

/* ---- the tensors -------------------------------------------------------------------------- */
tm_tensor tm_tensors[3 + NL * 9];
int tm_n_tensors;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
uint64_t tm_rand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}
static float frand(void) { /* uniform in [-1, 1) */
  return (float)((tm_rand() >> 40) * 0x1p-24) * 2.0f - 1.0f;
}

/* Bytes of a row of cols values of a ggml type (the reader's block table). */
static size_t row_bytes(uint32_t type, int64_t cols) {
  uint64_t bv, bb;
  kr_ggml_block(type, &bv, &bb);
  return (size_t)((uint64_t)cols / bv * bb);
}

/* Quantizes v[cols] into a row of the tensor's type and stores back the dequantized values.
 * Blocks of the quantized types: f16 d, (Q4_1: f16 m,) then the values (bv / 2 bytes of nibbles
 * for Q4, low nibbles first; bv int8 for Q8_0). */
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
  uint64_t bv64, bb;
  kr_ggml_block(type, &bv64, &bb);
  const int bv = (int)bv64, half = bv / 2;
  for (int64_t b = 0; b < cols / bv; b++) {
    float *x = v + bv * b, amax = 0, mn = x[0], mx = x[0];
    for (int i = 0; i < bv; i++) {
      amax = fmaxf(amax, fabsf(x[i]));
      mn = fminf(mn, x[i]);
      mx = fmaxf(mx, x[i]);
    }
    unsigned char *o = out + (size_t)bb * (size_t)b;
    if (type == KR_GGML_Q8_0) {
      uint16_t hd = kite_f32_to_f16(amax / 127.0f);
      float d = kite_f16_to_f32(hd);
      memcpy(o, &hd, 2);
      for (int i = 0; i < bv; i++) {
        int q = d > 0 ? (int)lrintf(x[i] / d) : 0;
        q = q < -127 ? -127 : q > 127 ? 127 : q;
        o[2 + i] = (unsigned char)(int8_t)q;
        x[i] = (float)q * d;
      }
    } else {
      const int min = type == KR_GGML_Q4_1;
      uint16_t hd = kite_f32_to_f16(min ? (mx - mn) / 15.0f : amax / 8.0f);
      uint16_t hm = kite_f32_to_f16(mn);
      float d = kite_f16_to_f32(hd), m = min ? kite_f16_to_f32(hm) : 0.0f;
      memcpy(o, &hd, 2);
      if (min) memcpy(o + 2, &hm, 2);
      unsigned char *qs = o + (min ? 4 : 2);
      memset(qs, 0, (size_t)half);
      for (int i = 0; i < bv; i++) {
        int q = d > 0 ? (int)lrintf((x[i] - m) / d) + (min ? 0 : 8) : (min ? 0 : 8);
        q = q < 0 ? 0 : q > 15 ? 15 : q;
        qs[i % half] |= (unsigned char)(i < half ? q : q << 4);
        x[i] = min ? (float)q * d + m : (float)(q - 8) * d;
      }
    }
  }
}

static void add_tensor(const char *name, int64_t cols, int64_t rows, uint32_t type, float scale,
                       float shift) {
  tm_tensor *t = &tm_tensors[tm_n_tensors++];
  snprintf(t->name, sizeof t->name, "%s", name);
  t->cols = cols, t->rows = rows, t->type = type;
  t->ref = malloc((size_t)(cols * rows) * 4);
  t->nbytes = row_bytes(type, cols) * (size_t)rows;
  t->data = malloc(t->nbytes);
  for (int64_t r = 0; r < rows; r++) {
    float *v = t->ref + r * cols;
    for (int64_t i = 0; i < cols; i++) v[i] = shift + scale * frand();
    quantize_row(type, v, cols, t->data + (size_t)r * row_bytes(type, cols));
  }
}

const float *tm_weight(const char *name) {
  for (int i = 0; i < tm_n_tensors; i++)
    if (strcmp(tm_tensors[i].name, name) == 0) return tm_tensors[i].ref;
  abort();
}

/* Matrices cycle through Q4_0, Q4_1, Q8_0, F16, BF16, F32 so each loads. */
void tm_make_tensors(void) {
  static const uint32_t types[] = {KR_GGML_Q4_0, KR_GGML_Q4_1, KR_GGML_Q8_0,
                                   KR_GGML_F16,  KR_GGML_BF16, KR_GGML_F32};
  if (tm_n_tensors) return;
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

void tm_free_tensors(void) {
  for (int i = 0; i < tm_n_tensors; i++) free(tm_tensors[i].ref), free(tm_tensors[i].data);
  tm_n_tensors = 0;
}

/* ---- the image ---------------------------------------------------------------------------- */
/* Byte tokens for every byte (GPT-2's printable mapping), then merges "a b" -> "ab",
 * "ab c" -> "abc", "Ġ a" -> "Ġa", and <|im_end|> as a control token. */
void tm_write_tokenizer(tm_buf *b, int n_vocab, tm_variant variant, int *n_kv) {
  tm_kv_str(b, "tokenizer.ggml.model", "gpt2");
  tm_kv_str(b, "tokenizer.ggml.pre", "smollm");
  (*n_kv) += 2;
  tm_put_str(b, "tokenizer.ggml.tokens");
  tm_put_u32(b, KR_GGUF_ARRAY);
  tm_put_u32(b, KR_GGUF_STRING);
  tm_put_u64(b, (uint64_t)n_vocab);
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
    tm_put_u64(b, n);
    tm_put(b, s, n);
  }
  const char *extra[] = {"ab", "abc",
                         "\xc4\xa0"
                         "a",
                         "<|im_end|>"};
  for (int i = 0; i < n_vocab - 256; i++) {
    char s[32];
    snprintf(s, sizeof s, "%s", i < 4 ? extra[i] : "");
    if (i >= 4) snprintf(s, sizeof s, "<unused%d>", i);
    tm_put_str(b, s);
  }
  tm_put_str(b, "tokenizer.ggml.token_type");
  tm_put_u32(b, KR_GGUF_ARRAY);
  tm_put_u32(b, KR_GGUF_I32);
  tm_put_u64(b, (uint64_t)n_vocab);
  for (int i = 0; i < n_vocab; i++) tm_put_u32(b, i == 259 ? 3u : i > 259 ? 5u : 1u);
  tm_put_str(b, "tokenizer.ggml.merges");
  tm_put_u32(b, KR_GGUF_ARRAY);
  tm_put_u32(b, KR_GGUF_STRING);
  tm_put_u64(b, 3);
  tm_put_str(b, "a b");
  tm_put_str(b, "ab c");
  tm_put_str(b, "\xc4\xa0 a");
  if (variant == TM_EOS_STRING)
    tm_kv_str(b, "tokenizer.ggml.eos_token_id", "259");
  else
    tm_kv_u32(b, "tokenizer.ggml.eos_token_id", 259);
  (*n_kv) += 4;
}

tm_buf tm_write_gguf(tm_variant variant) {
  tm_make_tensors();
  tm_buf b = {0};
  int n_kv = 0;
  tm_put(&b, "GGUF", 4);
  tm_put_u32(&b, 3);
  tm_put_u64(&b, (uint64_t)tm_n_tensors);
  size_t kv_count_at = b.n;
  tm_put_u64(&b, 0);
  tm_kv_str(&b, "general.architecture", "llama");
  if (variant == TM_BLOCK_COUNT_STRING)
    tm_kv_str(&b, "llama.block_count", "2");
  else if (variant != TM_NO_BLOCK_COUNT)
    tm_kv_u32(&b, "llama.block_count", NL);
  tm_kv_u32(&b, "llama.embedding_length", H);
  tm_kv_u32(&b, "llama.feed_forward_length", F);
  tm_kv_u32(&b, "llama.attention.head_count", HQ);
  tm_kv_u32(&b, "llama.attention.head_count_kv", HKV);
  tm_kv_u32(&b, "llama.context_length", 256);
  if (variant == TM_FREQ_BASE_STRING)
    tm_kv_str(&b, "llama.rope.freq_base", "10000");
  else
    tm_kv_f32(&b, "llama.rope.freq_base", 10000.0f);
  tm_kv_f32(&b, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
  n_kv += variant == TM_NO_BLOCK_COUNT ? 8 : 9;
  tm_write_tokenizer(&b, variant == TM_SMALL_VOCAB ? V - 20 : V, variant, &n_kv);
  uint64_t nk = (uint64_t)n_kv;
  memcpy(b.p + kv_count_at, &nk, 8);
  uint64_t off = 0;
  for (int i = 0; i < tm_n_tensors; i++) {
    const tm_tensor *t = &tm_tensors[i];
    tm_put_tensor_info(&b, t->name, t->cols, t->rows, t->type, t->nbytes, &off);
  }
  tm_align(&b);
  for (int i = 0; i < tm_n_tensors; i++) {
    tm_put(&b, tm_tensors[i].data, tm_tensors[i].nbytes);
    tm_align(&b);
  }
  return b;
}

int tm_variant_by_name(const char *name) {
  static const char *const names[] = {
      "good",           "small-vocab", "block-count-string", "freq-base-string",
      "no-block-count", "eos-string"};
  for (int i = 0; i < (int)(sizeof names / sizeof *names); i++)
    if (strcmp(name, names[i]) == 0) return i;
  return -1;
}
