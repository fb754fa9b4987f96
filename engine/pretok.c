#include "pretok.h"

#include <string.h>

#include "utf8.h"

/* tokenizer.ggml.pre values and the split each stands for (llama.cpp's names; a family whose
 * regular expression is none of the four kinds is left out, so that loading it fails). */
static const struct {
  const char *name;
  kr_pretok kind;
  int ignore_merges;
} names[] = {
    {"gpt-2", KR_PRE_GPT2, 0},       {"phi-2", KR_PRE_GPT2, 0},
    {"mpt", KR_PRE_GPT2, 0},         {"olmo", KR_PRE_GPT2, 0},
    {"jais", KR_PRE_GPT2, 0},        {"trillion", KR_PRE_GPT2, 0},
    {"exaone4", KR_PRE_GPT2, 0},     {"granite-docling", KR_PRE_GPT2, 0},
    {"gigachat", KR_PRE_GPT2, 0},    {"mellum", KR_PRE_GPT2, 0},
    {"a.x-4.0", KR_PRE_GPT2, 0},     {"smollm", KR_PRE_DIGITS, 0},
    {"starcoder", KR_PRE_DIGITS, 0}, {"refact", KR_PRE_DIGITS, 0},
    {"command-r", KR_PRE_DIGITS, 0}, {"codeshell", KR_PRE_DIGITS, 0},
    {"exaone", KR_PRE_DIGITS, 0},    {"minerva-7b", KR_PRE_DIGITS, 0},
    {"llama3", KR_PRE_LLAMA3, 1},    {"llama-v3", KR_PRE_LLAMA3, 1},
    {"llama-bpe", KR_PRE_LLAMA3, 1}, {"falcon3", KR_PRE_LLAMA3, 1},
    {"falcon-h1", KR_PRE_LLAMA3, 1}, {"pixtral", KR_PRE_LLAMA3, 1},
    {"midm-2.0", KR_PRE_LLAMA3, 1},  {"lfm2", KR_PRE_LLAMA3, 1},
    {"dbrx", KR_PRE_LLAMA3, 0},      {"smaug-bpe", KR_PRE_LLAMA3, 0},
    {"glm4", KR_PRE_LLAMA3, 0},      {"chatglm-bpe", KR_PRE_LLAMA3, 0},
    {"qwen2", KR_PRE_QWEN2, 0},      {"deepseek-r1-qwen", KR_PRE_QWEN2, 0},
    {"megrez", KR_PRE_QWEN2, 0},     {"stablelm2", KR_PRE_QWEN2, 0},
    {"hunyuan", KR_PRE_QWEN2, 0},    {"solar-open", KR_PRE_QWEN2, 0},
};

int kr_pretok_from_name(const char *name, size_t len, int *ignore_merges) {
  for (size_t i = 0; i < sizeof names / sizeof *names; i++)
    if (strlen(names[i].name) == len && memcmp(names[i].name, name, len) == 0) {
      *ignore_merges = names[i].ignore_merges;
      return (int)names[i].kind;
    }
  return -1;
}

/* The classes of one code point (-1 past the end: none of them). */
#define AT(i) ((i) < n ? cps[i] : 0xffffffffu)
#define LET(i) ((i) < n && kr_is_letter(cps[i]))
#define NUM(i) ((i) < n && kr_is_number(cps[i]))
#define SPC(i) ((i) < n && kr_is_space(cps[i]))
#define OTHER(i) ((i) < n && !kr_is_space(cps[i]) && !kr_is_letter(cps[i]) && !kr_is_number(cps[i]))
#define NL(c) ((c) == '\r' || (c) == '\n')

/* The length of a contraction ('s 't 're 've 'm 'll 'd) at pos, or 0; ASCII case folded when
 * fold. */
static size_t contraction(const uint32_t *cps, size_t n, size_t pos, int fold) {
  if (AT(pos) != '\'') return 0;
  uint32_t a = AT(pos + 1), b = AT(pos + 2);
  if (fold) {
    a = a >= 'A' && a <= 'Z' ? a + 32 : a;
    b = b >= 'A' && b <= 'Z' ? b + 32 : b;
  }
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

/* The end of the whitespace alternatives at pos: \s*[\r\n]+ (when newlines), then \s+(?!\S),
 * then \s+ (a run of one before a non-space). */
static size_t spaces(const uint32_t *cps, size_t n, size_t pos, int newlines) {
  size_t end = pos, last_nl = 0;
  while (SPC(end)) {
    if (newlines && NL(cps[end])) last_nl = end + 1;
    end++;
  }
  if (last_nl) return last_nl;
  if (end - pos > 1 && end < n) return end - 1; /* leaves one space to the next word */
  return end;
}

/* GPT-2's alternatives at pos; returns the word's end (> pos). */
static size_t gpt2_word(const uint32_t *cps, size_t n, size_t pos) {
  size_t c = contraction(cps, n, pos, 0);
  if (c) return pos + c;
  size_t q = pos + (AT(pos) == ' ');
  if (LET(q)) {
    while (LET(q)) q++;
    return q;
  }
  if (NUM(q)) {
    while (NUM(q)) q++;
    return q;
  }
  if (OTHER(q)) {
    while (OTHER(q)) q++;
    return q;
  }
  size_t e = spaces(cps, n, pos, 0);
  return e > pos ? e : pos + 1;
}

/* Llama 3's alternatives (max_digits 3) or Qwen2's (1) at pos. */
static size_t llama3_word(const uint32_t *cps, size_t n, size_t pos, size_t max_digits) {
  size_t c = contraction(cps, n, pos, 1);
  if (c) return pos + c;
  uint32_t c0 = cps[pos];
  if (LET(pos) || (!NL(c0) && !NUM(pos) && LET(pos + 1))) {
    size_t q = pos + 1;
    while (LET(q)) q++;
    return q;
  }
  if (NUM(pos)) {
    size_t q = pos;
    while (NUM(q) && q - pos < max_digits) q++;
    return q;
  }
  size_t q = pos + (c0 == ' ');
  if (OTHER(q)) {
    while (OTHER(q)) q++;
    while (q < n && NL(cps[q])) q++;
    return q;
  }
  size_t e = spaces(cps, n, pos, 1);
  return e > pos ? e : pos + 1;
}

int kr_pretok_split(kr_pretok kind, const uint32_t *cps, size_t n, kr_pretok_word word,
                    void *user) {
  int rc = 0;
  for (size_t pos = 0, end; pos < n && !rc; pos = end) {
    switch (kind) {
    case KR_PRE_LLAMA3:
      end = llama3_word(cps, n, pos, 3);
      break;
    case KR_PRE_QWEN2:
      end = llama3_word(cps, n, pos, 1);
      break;
    case KR_PRE_DIGITS:
      if (NUM(pos)) {
        end = pos + 1;
        break;
      }
      /* GPT-2's split of the text up to the next digit */
      {
        size_t stop = pos;
        while (stop < n && !kr_is_number(cps[stop])) stop++;
        end = gpt2_word(cps, stop, pos);
      }
      break;
    default:
      end = gpt2_word(cps, n, pos);
      break;
    }
    rc = word(user, pos, end);
  }
  return rc;
}
