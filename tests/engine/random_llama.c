/*
 * A random-weight llama GGUF of any shape, for timing the engine on a real model's geometry
 * without a download (scripts/gpu-check.sh's tp stage):
 *   random_llama OUT.gguf [HIDDEN LAYERS HEADS KV_HEADS FFN VOCAB]
 * The default is Llama 3.2 1B's shape (2048, 16, 32, 8, 8192, 128256; tied embeddings). The
 * matrices are f16, uniform in +-sqrt(3 / cols) (unit-variance outputs for unit inputs), the norm
 * weights 1; the tokenizer is tiny_model.c's byte-level one padded to VOCAB tokens. The tensor
 * data is written as it is drawn, so the file may be larger than memory.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kite/dtype.h>

#include "engine/tiny_model.h"
#include "gguf.h"

typedef struct rl_tensor {
  char name[48];
  int64_t cols, rows;
  uint32_t type;
} rl_tensor;

static uint64_t nbytes(const rl_tensor *t) {
  return (uint64_t)(t->cols * t->rows) * (t->type == KR_GGML_F16 ? 2u : 4u);
}

/* Writes t's values row by row, then the padding to 32 bytes. */
static int write_data(FILE *f, const rl_tensor *t) {
  const size_t es = t->type == KR_GGML_F16 ? 2 : 4;
  unsigned char *row = malloc((size_t)t->cols * es);
  if (!row) return -1;
  const double amp = sqrt(3.0 / (double)t->cols);
  int rc = 0;
  for (int64_t r = 0; r < t->rows && !rc; r++) {
    for (int64_t c = 0; c < t->cols; c++) {
      if (t->type == KR_GGML_F32) { /* norm weights */
        const float one = 1.0f;
        memcpy(row + 4 * c, &one, 4);
        continue;
      }
      const double u = (double)(tm_rand() >> 11) / 9007199254740992.0 * 2.0 - 1.0;
      const uint16_t h = kite_f32_to_f16((float)(u * amp));
      memcpy(row + 2 * c, &h, 2);
    }
    rc = fwrite(row, es, (size_t)t->cols, f) == (size_t)t->cols ? 0 : -1;
  }
  free(row);
  static const unsigned char zeros[32];
  const size_t pad = (size_t)((32 - nbytes(t) % 32) % 32);
  if (!rc && pad && fwrite(zeros, 1, pad, f) != pad) rc = -1;
  return rc;
}

int main(int argc, char **argv) {
  long v[6] = {2048, 16, 32, 8, 8192, 128256}; /* hidden, layers, heads, kv heads, ffn, vocab */
  if (argc != 2 && argc != 8) {
    fprintf(stderr, "usage: random_llama OUT.gguf [HIDDEN LAYERS HEADS KV_HEADS FFN VOCAB]\n");
    return 2;
  }
  for (int i = 0; argc == 8 && i < 6; i++) {
    char *end;
    v[i] = strtol(argv[2 + i], &end, 10);
    if (*end || v[i] < 1 || v[i] > (1l << 24)) {
      fprintf(stderr, "random_llama: '%s' is not a size\n", argv[2 + i]);
      return 2;
    }
  }
  const int64_t HID = v[0], NLAY = v[1], NH = v[2], NKV = v[3], FF = v[4], VOC = v[5];
  if (HID % NH || NH % NKV || VOC < 260) {
    fprintf(stderr, "random_llama: heads must divide hidden, kv heads heads; vocab >= 260\n");
    return 2;
  }
  const int64_t Dq = HID, Dkv = HID / NH * NKV;
  const int64_t n_t = 2 + 9 * NLAY;
  rl_tensor *ts = calloc((size_t)n_t, sizeof *ts);
  if (!ts) return 1;
  int n = 0;
#define ADD(c, r, ty, ...)                                                                         \
  (snprintf(ts[n].name, sizeof ts[n].name, __VA_ARGS__), ts[n].cols = (c), ts[n].rows = (r),       \
   ts[n].type = (ty), n++)
  ADD(HID, VOC, KR_GGML_F16, "token_embd.weight");
  ADD(HID, 1, KR_GGML_F32, "output_norm.weight");
  for (int64_t l = 0; l < NLAY; l++) {
    ADD(HID, 1, KR_GGML_F32, "blk.%lld.attn_norm.weight", (long long)l);
    ADD(HID, 1, KR_GGML_F32, "blk.%lld.ffn_norm.weight", (long long)l);
    ADD(HID, Dq, KR_GGML_F16, "blk.%lld.attn_q.weight", (long long)l);
    ADD(HID, Dkv, KR_GGML_F16, "blk.%lld.attn_k.weight", (long long)l);
    ADD(HID, Dkv, KR_GGML_F16, "blk.%lld.attn_v.weight", (long long)l);
    ADD(Dq, HID, KR_GGML_F16, "blk.%lld.attn_output.weight", (long long)l);
    ADD(HID, FF, KR_GGML_F16, "blk.%lld.ffn_gate.weight", (long long)l);
    ADD(HID, FF, KR_GGML_F16, "blk.%lld.ffn_up.weight", (long long)l);
    ADD(FF, HID, KR_GGML_F16, "blk.%lld.ffn_down.weight", (long long)l);
  }
#undef ADD
  tm_buf b = {0};
  int n_kv = 0;
  tm_put(&b, "GGUF", 4);
  tm_put_u32(&b, 3);
  tm_put_u64(&b, (uint64_t)n);
  const size_t kv_count_at = b.n;
  tm_put_u64(&b, 0);
  tm_kv_str(&b, "general.architecture", "llama");
  tm_kv_u32(&b, "llama.block_count", (uint32_t)NLAY);
  tm_kv_u32(&b, "llama.embedding_length", (uint32_t)HID);
  tm_kv_u32(&b, "llama.feed_forward_length", (uint32_t)FF);
  tm_kv_u32(&b, "llama.attention.head_count", (uint32_t)NH);
  tm_kv_u32(&b, "llama.attention.head_count_kv", (uint32_t)NKV);
  tm_kv_u32(&b, "llama.context_length", 4096);
  tm_kv_f32(&b, "llama.rope.freq_base", 500000.0f);
  tm_kv_f32(&b, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
  n_kv += 9;
  tm_write_tokenizer(&b, (int)VOC, TM_GOOD, &n_kv);
  const uint64_t nk = (uint64_t)n_kv;
  memcpy(b.p + kv_count_at, &nk, 8);
  uint64_t off = 0;
  for (int i = 0; i < n; i++)
    tm_put_tensor_info(&b, ts[i].name, ts[i].cols, ts[i].rows, ts[i].type, nbytes(&ts[i]), &off);
  tm_align(&b);
  FILE *f = fopen(argv[1], "wb");
  int rc = f && fwrite(b.p, 1, b.n, f) == b.n ? 0 : -1;
  for (int i = 0; i < n && !rc; i++) rc = write_data(f, &ts[i]);
  if (f && fclose(f)) rc = -1;
  if (rc) fprintf(stderr, "random_llama: cannot write %s\n", argv[1]);
  free(b.p);
  free(ts);
  return rc ? 1 : 0;
}
