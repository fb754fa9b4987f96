/*
 * What the engine reads before it runs anything, on the small model of tests/engine/tiny_model.c
 * and hand-made images:
 *   - the GGUF reader: every truncation of the file and a set of corrupted headers fail with a
 *     message; byte flips never crash (ASan/UBSan in the sanitizer build); a directory given as
 *     the file says it is a directory;
 *   - metadata: a key present with the wrong type is an error naming the key and both types (a
 *     required one and an optional one alike), "missing" only when the key is absent;
 *   - the byte-level BPE tokenizer on the file's small vocabulary and merges;
 *   - SentencePiece byte tokens (<0xXX>) parsed within the token's bytes: the last token of an
 *     image that ends at an inaccessible page (a read past it faults), and a 6-byte look-alike
 *     that is not a byte token.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/tiny_model.h"
#include "gguf.h"
#include "model.h"
#include "tokenizer.h"

static void test_malformed(const tm_buf *img) {
  char err[512];
  kr_gguf g;
  CHECK(kr_gguf_parse(img->p, img->n, &g, err, sizeof err) == 0, "the image parses: %s", err);
  kr_gguf_close(&g);
  /* every truncation that cuts a tensor or the header fails */
  const tm_tensor *lt = &tm_tensors[tm_n_tensors - 1];
  const size_t last = img->n - (lt->nbytes + 31) / 32 * 32 + lt->nbytes;
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
      const uint64_t r = tm_rand();
      c[r % header] ^= (unsigned char)(1u << (r >> 60) % 8);
    }
    if (kr_gguf_parse(c, img->n, &g, err, sizeof err) == 0) {
      kr_tokenizer *t = kr_tok_load(&g, err, sizeof err);
      kr_tok_free(t);
    }
    kr_gguf_close(&g);
  }
  free(c);
}

static void test_directory(void) {
  char err[512] = "";
  kr_gguf g;
  CHECK(kr_gguf_open(".", &g, err, sizeof err) != 0, "a directory opened as a GGUF file");
  CHECK(strstr(err, "is a directory") != NULL, "directory: message '%s'", err);
  kr_gguf_close(&g);
}

/* Each variant's defect, and the words its message must hold (every one). */
static void test_metadata_types(void) {
  const struct {
    tm_variant v;
    int tokenizer; /* the tokenizer's loader reads it, else the model's */
    const char *says[3];
  } cases[] = {
      {TM_BLOCK_COUNT_STRING, 0, {"llama.block_count", "string", "integer"}},
      {TM_FREQ_BASE_STRING, 0, {"llama.rope.freq_base", "string", "number"}},
      {TM_NO_BLOCK_COUNT, 0, {"llama.block_count", "missing", ""}},
      {TM_EOS_STRING, 1, {"tokenizer.ggml.eos_token_id", "string", "integer"}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    tm_buf img = tm_write_gguf(cases[i].v);
    char err[512] = "";
    kr_gguf g;
    CHECK(kr_gguf_parse(img.p, img.n, &g, err, sizeof err) == 0, "variant %d parses: %s",
          (int)cases[i].v, err);
    int failed;
    if (cases[i].tokenizer) {
      kr_tokenizer *t = kr_tok_load(&g, err, sizeof err);
      failed = t == NULL;
      kr_tok_free(t);
    } else {
      kr_config c;
      failed = kr_model_probe(&g, &c, err, sizeof err) != 0;
    }
    CHECK(failed, "variant %d: loaded", (int)cases[i].v);
    for (int w = 0; w < 3; w++)
      CHECK(strstr(err, cases[i].says[w]), "variant %d: message '%s' lacks '%s'", (int)cases[i].v,
            err, cases[i].says[w]);
    CHECK(cases[i].v == TM_NO_BLOCK_COUNT || !strstr(err, "missing"),
          "variant %d: a present key called missing: '%s'", (int)cases[i].v, err);
    kr_gguf_close(&g);
    free(img.p);
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
  CHECK(kr_tok_vocab(t) == V, "vocabulary of %d, %d written", kr_tok_vocab(t), V);
  free(ids);
  kr_tok_free(t);
}

/* A SentencePiece vocabulary whose tokens array is the image's last value: "<unk>",
 * "<0x41>" (byte), "<0x41Z" (6 bytes typed byte, but no byte token), "<0x42>" (byte, the last
 * bytes of the image, so nothing after it terminates it). */
static void test_byte_tokens(void) {
  static const char *const tokens[] = {"<unk>", "<0x41>", "<0x41Z", "<0x42>"};
  static const uint32_t types[] = {2, 6, 6, 6}; /* unknown, byte */
  tm_buf b = {0};
  tm_put(&b, "GGUF", 4);
  tm_put_u32(&b, 3);
  tm_put_u64(&b, 0); /* tensors */
  tm_put_u64(&b, 3); /* metadata */
  tm_kv_str(&b, "tokenizer.ggml.model", "llama");
  tm_put_str(&b, "tokenizer.ggml.token_type");
  tm_put_u32(&b, KR_GGUF_ARRAY);
  tm_put_u32(&b, KR_GGUF_I32);
  tm_put_u64(&b, 4);
  for (int i = 0; i < 4; i++) tm_put_u32(&b, types[i]);
  tm_put_str(&b, "tokenizer.ggml.tokens");
  tm_put_u32(&b, KR_GGUF_ARRAY);
  tm_put_u32(&b, KR_GGUF_STRING);
  tm_put_u64(&b, 4);
  for (int i = 0; i < 4; i++) tm_put_str(&b, tokens[i]);
  /* the image ends where an inaccessible page begins: a read past its last byte faults */
  const size_t page = (size_t)sysconf(_SC_PAGESIZE), span = (b.n + page - 1) / page * page;
  unsigned char *map =
      mmap(NULL, span + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(map != MAP_FAILED && mprotect(map + span, page, PROT_NONE) == 0, "guard page");
  if (map == MAP_FAILED) return;
  unsigned char *exact = map + span - b.n;
  memcpy(exact, b.p, b.n);
  char err[256] = "";
  kr_gguf g;
  CHECK(kr_gguf_parse(exact, b.n, &g, err, sizeof err) == 0, "byte-token image: %s", err);
  kr_tokenizer *t = kr_tok_load(&g, err, sizeof err);
  CHECK(t, "byte-token tokenizer: %s", err);
  if (t) {
    char piece[16];
    size_t len = kr_tok_piece(t, 1, 0, piece, sizeof piece);
    CHECK(len == 1 && piece[0] == 'A', "<0x41>: %zu bytes", len);
    len = kr_tok_piece(t, 3, 0, piece, sizeof piece);
    CHECK(len == 1 && piece[0] == 'B', "<0x42> at the image's end: %zu bytes", len);
    len = kr_tok_piece(t, 2, 0, piece, sizeof piece);
    CHECK(len == 6 && memcmp(piece, "<0x41Z", 6) == 0, "<0x41Z is text, not a byte: %zu bytes",
          len);
  }
  kr_tok_free(t);
  kr_gguf_close(&g);
  munmap(map, span + page);
  free(b.p);
}

int main(void) {
  tm_buf img = tm_write_gguf(TM_GOOD);
  test_malformed(&img);
  test_directory();
  test_metadata_types();
  test_byte_tokens();
  char err[512];
  kr_gguf g;
  CHECK(kr_gguf_parse(img.p, img.n, &g, err, sizeof err) == 0, "parse: %s", err);
  test_tokenizer(&g);
  kr_gguf_close(&g);
  free(img.p);
  tm_free_tensors();
  printf("test_engine_input: %s\n", tm_failures ? "FAILED" : "ok");
  return tm_failures ? 1 : 0;
}
