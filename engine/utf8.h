/* UTF-8 decoding and encoding, and the Unicode classes the pre-tokenizers split on. */
#ifndef KITE_ENGINE_UTF8_H
#define KITE_ENGINE_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Decodes one code point at s[0, n) (n >= 1) into *cp and returns its length; an invalid or
 * truncated sequence counts as one byte (U+FFFD). */
size_t kr_utf8_next(const char *s, size_t n, uint32_t *cp);
/* Encodes cp into o[0, 4) and returns its length. */
size_t kr_utf8_put(uint32_t cp, char *o);

/* \p{L}, \p{N} (Unicode 14 tables) and \s. */
int kr_is_letter(uint32_t cp);
int kr_is_number(uint32_t cp);
int kr_is_space(uint32_t cp);

#endif /* KITE_ENGINE_UTF8_H */
