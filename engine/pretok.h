/*
 * Pre-tokenizers of byte-level BPE vocabularies: the split of a text into words before BPE, as
 * tokenizer.ggml.pre names it. Each kind is one of the regular expressions the vocabularies were
 * trained with, matched leftmost-first over code points (\p{L}, \p{N}: unicode_tables.h; \s:
 * Unicode White_Space):
 *   GPT2    's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   DIGITS  \p{N} first (every digit a word of its own), then GPT2 between the digits
 *   LLAMA3  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *           ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *   QWEN2   LLAMA3 with \p{N} (single digits) in place of \p{N}{1,3}
 */
#ifndef KITE_ENGINE_PRETOK_H
#define KITE_ENGINE_PRETOK_H

#include <stddef.h>
#include <stdint.h>

typedef enum kr_pretok { KR_PRE_GPT2, KR_PRE_DIGITS, KR_PRE_LLAMA3, KR_PRE_QWEN2 } kr_pretok;

/* The kind a tokenizer.ggml.pre value (name[0, len), not NUL-terminated) stands for, or -1 when
 * the value is not one of those listed in pretok.c. *ignore_merges is set when the family looks
 * a whole word up in the vocabulary before merging (Llama 3's tokenizer). */
int kr_pretok_from_name(const char *name, size_t len, int *ignore_merges);

/* Called for each word, the code points [start, end) of the text; nonzero stops the split. */
typedef int (*kr_pretok_word)(void *user, size_t start, size_t end);

/* Splits cps[0, n) into words, in order, covering every code point once. Returns 0, or the
 * callback's nonzero value. */
int kr_pretok_split(kr_pretok kind, const uint32_t *cps, size_t n, kr_pretok_word word, void *user);

#endif /* KITE_ENGINE_PRETOK_H */
