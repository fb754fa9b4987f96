#include "utf8.h"

#include "unicode_tables.h"

static int in_ranges(uint32_t cp, const uint32_t (*r)[2], size_t n) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (cp < r[mid][0])
      hi = mid;
    else if (cp > r[mid][1])
      lo = mid + 1;
    else
      return 1;
  }
  return 0;
}
#define NRANGES(a) (sizeof(a) / sizeof((a)[0]))
int kr_is_letter(uint32_t cp) {
  return in_ranges(cp, kr_unicode_letters, NRANGES(kr_unicode_letters));
}
int kr_is_number(uint32_t cp) {
  return in_ranges(cp, kr_unicode_numbers, NRANGES(kr_unicode_numbers));
}
int kr_is_space(uint32_t cp) {
  return (cp >= 9 && cp <= 13) || cp == 32 || cp == 0x85 || cp == 0xa0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 || cp == 0x202f ||
         cp == 0x205f || cp == 0x3000;
}

/* Decodes one code point at s[0, n); an invalid sequence counts as one byte (U+FFFD). */
size_t kr_utf8_next(const char *s, size_t n, uint32_t *cp) {
  const uint8_t *u = (const uint8_t *)s;
  if (u[0] < 0x80) {
    *cp = u[0];
    return 1;
  }
  size_t len = (u[0] & 0xe0) == 0xc0   ? 2
               : (u[0] & 0xf0) == 0xe0 ? 3
               : (u[0] & 0xf8) == 0xf0 ? 4
                                       : 0;
  if (!len || len > n) {
    *cp = 0xfffd;
    return 1;
  }
  uint32_t c = u[0] & (0x7f >> len);
  for (size_t i = 1; i < len; i++) {
    if ((u[i] & 0xc0) != 0x80) {
      *cp = 0xfffd;
      return 1;
    }
    c = (c << 6) | (u[i] & 0x3f);
  }
  *cp = c;
  return len;
}

size_t kr_utf8_put(uint32_t cp, char *o) {
  if (cp < 0x80) {
    o[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (char)(0xc0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (char)(0xe0 | (cp >> 12));
    o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
  }
  o[0] = (char)(0xf0 | (cp >> 18));
  o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
  o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
  o[3] = (char)(0x80 | (cp & 0x3f));
  return 4;
}
