/*
 * Tokenizers read from GGUF metadata (tokenizer.ggml.*):
 *   gpt2  byte-level BPE (tokens + merges), the text first split into words as
 *         tokenizer.ggml.pre says (pretok.h lists the kinds and the names of each); a name not
 *         listed is an error, a missing one (or "default") splits as GPT-2 does, with a note
 *         (kr_tok_note);
 *   llama SentencePiece-style (Llama 2, Gemma, Phi-3): spaces become U+2581 (one prepended to
 *         each text between special tokens when tokenizer.ggml.add_space_prefix, the default),
 *         pieces merge by score, unknown bytes fall back to <0xXX> tokens.
 * Special tokens (control and user-defined types) are matched in the text first, longest first,
 * when encoding with parse_special.
 */
#ifndef KITE_ENGINE_TOKENIZER_H
#define KITE_ENGINE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

typedef struct kr_tokenizer kr_tokenizer;

/* Reads the tokenizer from g (which must outlive it). Returns NULL with a message in err. */
kr_tokenizer *kr_tok_load(const kr_gguf *g, char *err, size_t err_len);
void kr_tok_free(kr_tokenizer *t);

int32_t kr_tok_vocab(const kr_tokenizer *t);
int32_t kr_tok_bos(const kr_tokenizer *t); /* -1 when none */
int32_t kr_tok_eos(const kr_tokenizer *t);
int kr_tok_add_bos(const kr_tokenizer *t); /* tokenizer.ggml.add_bos_token */
/* A choice the loader made that a user should be told of (a fallback), or NULL. */
const char *kr_tok_note(const kr_tokenizer *t);
/* The id of a token's exact text ("<|im_end|>"), or -1. */
int32_t kr_tok_find(const kr_tokenizer *t, const char *text);
/* Whether a token ends generation: eos, eot, and the turn ends chat templates write (<|im_end|>,
 * <|eot_id|>, <|end|>, <end_of_turn>, <|endoftext|>, ...) where the vocabulary has them. */
int kr_tok_is_eog(const kr_tokenizer *t, int32_t id);

/* Appends the ids of text[0, len) to *ids (realloc'ed; *n and *cap updated). Returns 0, or -1 when
 * out of memory. */
int kr_tok_encode(const kr_tokenizer *t, const char *text, size_t len, int parse_special,
                  int32_t **ids, size_t *n, size_t *cap);

/* The bytes a token stands for (byte-level mapping undone, U+2581 back to space, <0xXX> to its
 * byte); control tokens give their text only when `special`. Returns the length (which may
 * exceed cap: then only cap bytes were written). */
size_t kr_tok_piece(const kr_tokenizer *t, int32_t id, int special, char *buf, size_t cap);

#endif /* KITE_ENGINE_TOKENIZER_H */
