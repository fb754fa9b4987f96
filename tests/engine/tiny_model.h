/*
 * A small random-weight llama model written as a GGUF image (no download), for the engine's
 * tests: 2 layers, hidden 64, 4 query heads and 2 kv heads of 16, FFN 96, vocab 300, matrices in
 * every type the engine loads, a byte-level BPE tokenizer. Variants of the image carry one defect
 * each, for the tests of what the engine refuses.
 */
#ifndef KITE_TESTS_TINY_MODEL_H
#define KITE_TESTS_TINY_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* A failed check prints where and why and counts in tm_failures; the test goes on. */
extern int tm_failures;
#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      tm_failures++;                                                                               \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                         \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, "\n");                                                                       \
    }                                                                                              \
  } while (0)

enum { NL = 2, H = 64, HQ = 4, HKV = 2, D = 16, F = 96, V = 300, MAXT = 64 };

/* A growable byte buffer and the GGUF writing helpers over it. */
typedef struct tm_buf {
  unsigned char *p;
  size_t n, cap;
} tm_buf;
void tm_put(tm_buf *b, const void *src, size_t n);
void tm_put_u32(tm_buf *b, uint32_t v);
void tm_put_u64(tm_buf *b, uint64_t v);
void tm_put_str(tm_buf *b, const char *s);
void tm_kv_u32(tm_buf *b, const char *k, uint32_t v);
void tm_kv_f32(tm_buf *b, const char *k, float v);
void tm_kv_str(tm_buf *b, const char *k, const char *v);
/* One GGUF tensor-info entry (2-D: ne0 = cols, ne1 = rows) at data offset *off, which then
 * moves past the tensor's nbytes rounded up to GGUF's 32-byte alignment. */
void tm_put_tensor_info(tm_buf *b, const char *name, int64_t cols, int64_t rows, uint32_t type,
                        uint64_t nbytes, uint64_t *off);
/* Zero bytes up to the next 32-byte boundary (GGUF's alignment). */
void tm_align(tm_buf *b);

typedef struct tm_tensor {
  char name[48];
  int64_t cols, rows;
  uint32_t type;
  float *ref; /* [rows, cols] the dequantized values a reference computes with */
  unsigned char *data;
  size_t nbytes;
} tm_tensor;

extern tm_tensor tm_tensors[];
extern int tm_n_tensors;

/* Makes the tensors (once; the values come from a fixed xorshift stream) and frees them. */
void tm_make_tensors(void);
void tm_free_tensors(void);
/* The dequantized values of a tensor by name (aborts when there is none). */
const float *tm_weight(const char *name);
/* The next value of the test's xorshift stream. */
uint64_t tm_rand(void);

typedef enum tm_variant {
  TM_GOOD,
  TM_SMALL_VOCAB,        /* the tokenizer has V - 20 tokens, the embedding V rows */
  TM_BLOCK_COUNT_STRING, /* llama.block_count (required) is a string */
  TM_FREQ_BASE_STRING,   /* llama.rope.freq_base (optional) is a string */
  TM_NO_BLOCK_COUNT,     /* llama.block_count is absent */
  TM_EOS_STRING,         /* tokenizer.ggml.eos_token_id is a string */
} tm_variant;

/* The tokenizer's metadata (n_vocab tokens: 256 bytes, merges, <|im_end|> = 259), adding the
 * count of keys written to *n_kv; the variant may make eos_token_id a string. */
void tm_write_tokenizer(tm_buf *b, int n_vocab, tm_variant variant, int *n_kv);
/* The GGUF image of the model with the variant's defect; free .p. */
tm_buf tm_write_gguf(tm_variant v);
/* The variant named on a command line ("good", "small-vocab", ...); -1 when unknown. */
int tm_variant_by_name(const char *name);

#endif /* KITE_TESTS_TINY_MODEL_H */
