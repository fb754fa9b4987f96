/* libFuzzer target: any bytes through the GGUF parser, and what parses through the tokenizer
 * loader and an encode/decode of a short text. Built with clang -fsanitize=fuzzer,address,
 * undefined (engine/CMakeLists.txt); scripts/fuzz-gguf.sh runs it long. */
#include <stdint.h>
#include <stdlib.h>

#include "gguf.h"
#include "tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kr_gguf g;
  char err[256];
  if (kr_gguf_parse(data, size, &g, err, sizeof err) == 0) {
    kr_tokenizer *t = kr_tok_load(&g, err, sizeof err);
    if (t) {
      static const char text[] = "Hi 12 caf\xc3\xa9 <|im_end|>  x";
      int32_t *ids = NULL;
      size_t n = 0, cap = 0;
      if (kr_tok_encode(t, text, sizeof text - 1, 1, &ids, &n, &cap) == 0) {
        char piece[64];
        for (size_t i = 0; i < n; i++) kr_tok_piece(t, ids[i], 1, piece, sizeof piece);
      }
      free(ids);
      kr_tok_free(t);
    }
  }
  kr_gguf_close(&g);
  return 0;
}
