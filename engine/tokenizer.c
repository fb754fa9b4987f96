#include "tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pretok.h"
#include "utf8.h"

enum { KIND_BPE, KIND_SPM };
/* tokenizer.ggml.token_type values */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

/* Open-addressing map from a byte string (not owned) to an int32. */
typedef struct strmap {
  const char **key;
  uint32_t *len;
  int32_t *val;
  size_t cap; /* power of two */
} strmap;

static uint64_t hash_bytes(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
  return h;
}

static int map_init(strmap *m, size_t n) {
  m->cap = 16;
  while (m->cap < 2 * n + 2) m->cap *= 2;
  m->key = calloc(m->cap, sizeof *m->key);
  m->len = calloc(m->cap, sizeof *m->len);
  m->val = calloc(m->cap, sizeof *m->val);
  return m->key && m->len && m->val ? 0 : -1;
}

static void map_free(strmap *m) {
  free(m->key);
  free(m->len);
  free(m->val);
}

/* Keeps the first value stored for a key (the lowest id / rank). */
static void map_put(strmap *m, const char *k, size_t n, int32_t v) {
  size_t i = hash_bytes(k, n) & (m->cap - 1);
  while (m->key[i]) {
    if (m->len[i] == n && memcmp(m->key[i], k, n) == 0) return;
    i = (i + 1) & (m->cap - 1);
  }
  m->key[i] = k;
  m->len[i] = (uint32_t)n;
  m->val[i] = v;
}

static int32_t map_get(const strmap *m, const char *k, size_t n) {
  size_t i = hash_bytes(k, n) & (m->cap - 1);
  while (m->key[i]) {
    if (m->len[i] == n && memcmp(m->key[i], k, n) == 0) return m->val[i];
    i = (i + 1) & (m->cap - 1);
  }
  return -1;
}

struct kr_tokenizer {
  int kind;
  kr_pretok pre;
  int ignore_merges; /* a word the vocabulary holds is one token, unmerged */
  const char *note;  /* what the loader chose that a user should know, or NULL */
  int32_t n_vocab;
  const char **text;
  uint32_t *len;
  int32_t *type;
  float *score;
  strmap vocab, merges;
  char *merge_keys; /* the merges as stored ("a b"), one buffer */
  int32_t *special; /* ids of control / user-defined tokens, longest text first */
  int32_t n_special;
  int32_t bos, eos, eot;
  /* the turn ends chat templates write, found by text as llama.cpp finds them (-1: none) */
  int32_t eog[8];
  int add_bos, add_space_prefix;
  int32_t byte_token[256]; /* SPM: <0xXX>; BPE: the token of each byte's mapped character */
  uint32_t byte_to_cp[256];
  int16_t cp_to_byte[324]; /* inverse of byte_to_cp; -1 where none */
};

int32_t kr_tok_vocab(const kr_tokenizer *t) {
  return t->n_vocab;
}
int32_t kr_tok_bos(const kr_tokenizer *t) {
  return t->bos;
}
int32_t kr_tok_eos(const kr_tokenizer *t) {
  return t->eos;
}
int kr_tok_add_bos(const kr_tokenizer *t) {
  return t->add_bos;
}
const char *kr_tok_note(const kr_tokenizer *t) {
  return t->note;
}

int32_t kr_tok_find(const kr_tokenizer *t, const char *text) {
  return map_get(&t->vocab, text, strlen(text));
}

int kr_tok_is_eog(const kr_tokenizer *t, int32_t id) {
  if (id < 0) return 0;
  if (id == t->eos || id == t->eot) return 1;
  for (size_t i = 0; i < sizeof t->eog / sizeof *t->eog; i++)
    if (id == t->eog[i]) return 1;
  return 0;
}

/* ---- growable buffers ----------------------------------------------------------------------- */
static int push_id(int32_t **ids, size_t *n, size_t *cap, int32_t id) {
  if (*n == *cap) {
    size_t c = *cap ? *cap * 2 : 64;
    int32_t *p = realloc(*ids, c * sizeof *p);
    if (!p) return -1;
    *ids = p;
    *cap = c;
  }
  (*ids)[(*n)++] = id;
  return 0;
}

/* A symbol of a word being merged: bytes [off, off + len) of the word buffer. */
typedef struct sym {
  uint32_t off, len;
} sym;

/* BPE over one pre-tokenized word (already byte-mapped): merge the lowest-ranked adjacent pair,
 * leftmost first, until none is in the merge table; then look each symbol up. */
static int bpe_word(const kr_tokenizer *t, const char *w, size_t n, int32_t **ids, size_t *cnt,
                    size_t *cap) {
  if (n == 0) return 0;
  sym *s = malloc(n * sizeof *s);
  char *key = malloc(2 * n + 2);
  if (!s || !key) {
    free(s);
    free(key);
    return -1;
  }
  size_t ns = 0;
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    size_t l = kr_utf8_next(w + i, n - i, &cp);
    s[ns++] = (sym){(uint32_t)i, (uint32_t)l};
    i += l;
  }
  for (;;) {
    int32_t best = -1;
    size_t at = 0;
    for (size_t i = 0; i + 1 < ns; i++) {
      int32_t r;
      if (t->kind == KIND_BPE) {
        memcpy(key, w + s[i].off, s[i].len);
        key[s[i].len] = ' ';
        memcpy(key + s[i].len + 1, w + s[i + 1].off, s[i + 1].len);
        r = map_get(&t->merges, key, s[i].len + 1 + s[i + 1].len);
        if (r >= 0 && (best < 0 || r < best)) best = r, at = i;
      } else {
        /* SPM: the merged text must be a token; the highest score wins */
        r = map_get(&t->vocab, w + s[i].off, s[i].len + s[i + 1].len);
        if (r >= 0 && (best < 0 || t->score[r] > t->score[best])) best = r, at = i;
      }
    }
    if (best < 0) break;
    s[at].len += s[at + 1].len;
    memmove(&s[at + 1], &s[at + 2], (ns - at - 2) * sizeof *s);
    ns--;
  }
  int rc = 0;
  for (size_t i = 0; i < ns && !rc; i++) {
    int32_t id = map_get(&t->vocab, w + s[i].off, s[i].len);
    if (id >= 0) {
      rc = push_id(ids, cnt, cap, id);
      continue;
    }
    if (t->kind == KIND_BPE) {
      /* an unmerged character missing from the vocabulary: its bytes' tokens */
      for (uint32_t j = 0; j < s[i].len && !rc;) {
        uint32_t cp;
        size_t l = kr_utf8_next(w + s[i].off + j, s[i].len - j, &cp);
        int32_t b = map_get(&t->vocab, w + s[i].off + j, l);
        if (b >= 0) rc = push_id(ids, cnt, cap, b);
        j += (uint32_t)l;
      }
    } else {
      for (uint32_t j = 0; j < s[i].len && !rc; j++) {
        int32_t b = t->byte_token[(uint8_t)w[s[i].off + j]];
        if (b >= 0) rc = push_id(ids, cnt, cap, b);
      }
    }
  }
  free(s);
  free(key);
  return rc;
}

/* Byte-maps text[0, n) and runs BPE on it. */
static int bpe_piece(const kr_tokenizer *t, const char *p, size_t n, int32_t **ids, size_t *cnt,
                     size_t *cap) {
  char *w = malloc(2 * n + 1);
  if (!w) return -1;
  size_t m = 0;
  for (size_t i = 0; i < n; i++) m += kr_utf8_put(t->byte_to_cp[(uint8_t)p[i]], w + m);
  int32_t whole = t->ignore_merges ? map_get(&t->vocab, w, m) : -1;
  int rc = whole >= 0 ? push_id(ids, cnt, cap, whole) : bpe_word(t, w, m, ids, cnt, cap);
  free(w);
  return rc;
}

/* The words of one text go through bpe_piece (the whole word first where the vocabulary holds it
 * and the family ignores merges then). */
typedef struct split_ctx {
  const kr_tokenizer *t;
  const char *text;
  const size_t *offs; /* byte offset of each code point, and of the end */
  int32_t **ids;
  size_t *cnt, *cap;
} split_ctx;

static int on_word(void *user, size_t start, size_t end) {
  const split_ctx *c = user;
  return bpe_piece(c->t, c->text + c->offs[start], c->offs[end] - c->offs[start], c->ids, c->cnt,
                   c->cap);
}

/* Encodes text without special tokens. */
static int encode_plain(const kr_tokenizer *t, const char *text, size_t len, int32_t **ids,
                        size_t *cnt, size_t *cap) {
  if (len == 0) return 0;
  if (t->kind == KIND_SPM) {
    /* spaces become U+2581 (3 bytes), one prepended when the model asks for it */
    char *w = malloc(3 * len + 4);
    if (!w) return -1;
    size_t m = 0;
    if (t->add_space_prefix) m += kr_utf8_put(0x2581, w);
    for (size_t i = 0; i < len; i++) {
      if (text[i] == ' ')
        m += kr_utf8_put(0x2581, w + m);
      else
        w[m++] = text[i];
    }
    int rc = bpe_word(t, w, m, ids, cnt, cap);
    free(w);
    return rc;
  }
  uint32_t *cps = malloc((len + 1) * sizeof *cps);
  size_t *offs = malloc((len + 1) * sizeof *offs);
  if (!cps || !offs) {
    free(cps);
    free(offs);
    return -1;
  }
  size_t n = 0;
  for (size_t i = 0; i < len;) {
    offs[n] = i;
    i += kr_utf8_next(text + i, len - i, &cps[n]);
    n++;
  }
  offs[n] = len;
  split_ctx c = {t, text, offs, ids, cnt, cap};
  int rc = kr_pretok_split(t->pre, cps, n, on_word, &c);
  free(cps);
  free(offs);
  return rc;
}

int kr_tok_encode(const kr_tokenizer *t, const char *text, size_t len, int parse_special,
                  int32_t **ids, size_t *n, size_t *cap) {
  size_t a = 0, i = 0;
  while (parse_special && i < len) {
    int32_t hit = -1;
    for (int32_t s = 0; s < t->n_special; s++) {
      int32_t id = t->special[s];
      if (t->len[id] && t->len[id] <= len - i && memcmp(text + i, t->text[id], t->len[id]) == 0) {
        hit = id;
        break;
      }
    }
    if (hit < 0) {
      i++;
      continue;
    }
    if (encode_plain(t, text + a, i - a, ids, n, cap) || push_id(ids, n, cap, hit)) return -1;
    i += t->len[hit];
    a = i;
  }
  return encode_plain(t, text + a, len - a, ids, n, cap);
}

/* The value of a hex digit, or -1. */
static int hex_digit(char c) {
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                : -1;
}

size_t kr_tok_piece(const kr_tokenizer *t, int32_t id, int special, char *buf, size_t cap) {
  if (id < 0 || id >= t->n_vocab) return 0;
  const char *s = t->text[id];
  size_t n = t->len[id], m = 0;
  char tmp[4];
  if (t->type[id] == TT_CONTROL || t->type[id] == TT_UNKNOWN) {
    if (!special) return 0;
    for (size_t i = 0; i < n; i++, m++)
      if (m < cap) buf[m] = s[i];
    return m;
  }
  /* <0xXX>: the text is not NUL-terminated, so it is parsed within its n bytes */
  int hi, lo;
  if (t->kind == KIND_SPM && t->type[id] == TT_BYTE && n == 6 && memcmp(s, "<0x", 3) == 0 &&
      s[5] == '>' && (hi = hex_digit(s[3])) >= 0 && (lo = hex_digit(s[4])) >= 0) {
    if (cap) buf[0] = (char)(hi * 16 + lo);
    return 1;
  }
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    size_t l = kr_utf8_next(s + i, n - i, &cp);
    size_t k;
    if (t->kind == KIND_BPE && cp < 324 && t->cp_to_byte[cp] >= 0) {
      tmp[0] = (char)t->cp_to_byte[cp];
      k = 1;
    } else if (t->kind == KIND_SPM && cp == 0x2581) {
      tmp[0] = ' ';
      k = 1;
    } else {
      memcpy(tmp, s + i, l);
      k = l;
    }
    for (size_t j = 0; j < k; j++, m++)
      if (m < cap) buf[m] = tmp[j];
    i += l;
  }
  return m;
}

void kr_tok_free(kr_tokenizer *t) {
  if (!t) return;
  free(t->text);
  free(t->len);
  free(t->type);
  free(t->score);
  map_free(&t->vocab);
  map_free(&t->merges);
  free(t->merge_keys);
  free(t->special);
  free(t);
}

static const kr_tokenizer *sort_ctx;
static int by_len_desc(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  if (sort_ctx->len[x] != sort_ctx->len[y]) return sort_ctx->len[x] > sort_ctx->len[y] ? -1 : 1;
  return x < y ? -1 : x > y;
}

/* An optional metadata array of n elem_type values (*out NULL when absent); 0, or -1 with a
 * message when it has another type or length. */
static int optional_array(const kr_gguf *g, const char *key, uint32_t elem_type, uint64_t n,
                          const kr_gguf_value **out, char *err, size_t err_len) {
  *out = NULL;
  int rc = kr_gguf_meta_array(g, key, elem_type, out, err, err_len);
  if (rc > 0) *out = NULL;
  if (rc == 0 && (*out)->n != n) {
    snprintf(err, err_len, "tokenizer: %s holds %llu values for %llu tokens", key,
             (unsigned long long)(*out)->n, (unsigned long long)n);
    rc = -1;
  }
  return rc < 0 ? -1 : 0;
}

/* An optional token id: -1 when absent or outside [0, n_vocab). */
static int optional_id(const kr_gguf *g, const char *key, int32_t n_vocab, int32_t *out, char *err,
                       size_t err_len) {
  int64_t v = -1;
  if (kr_gguf_meta_int(g, key, &v, err, err_len) < 0) return -1;
  *out = v >= 0 && v < n_vocab ? (int32_t)v : -1;
  return 0;
}

kr_tokenizer *kr_tok_load(const kr_gguf *g, char *err, size_t err_len) {
  const char *model;
  uint64_t model_len;
  int rc = kr_gguf_meta_str(g, "tokenizer.ggml.model", &model, &model_len, err, err_len);
  if (rc > 0) snprintf(err, err_len, "tokenizer: no tokenizer.ggml.model in the file");
  if (rc) return NULL;
  kr_tokenizer *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  if (model_len == 4 && memcmp(model, "gpt2", 4) == 0)
    t->kind = KIND_BPE;
  else if (model_len == 5 && memcmp(model, "llama", 5) == 0)
    t->kind = KIND_SPM;
  else {
    snprintf(err, err_len, "tokenizer: model '%.*s' not supported (gpt2 and llama are)",
             (int)(model_len > 40 ? 40 : model_len), model);
    goto fail;
  }
  const char *pre;
  uint64_t pre_len;
  t->pre = KR_PRE_GPT2;
  rc = kr_gguf_meta_str(g, "tokenizer.ggml.pre", &pre, &pre_len, err, err_len);
  if (rc < 0) goto fail;
  /* SentencePiece vocabularies have no pre-tokenizer; a BPE one without a name (or "default")
   * is split as GPT-2 splits, and says so */
  if (t->kind == KIND_BPE && (rc > 0 || (pre_len == 7 && memcmp(pre, "default", 7) == 0)))
    t->note = "tokenizer: no tokenizer.ggml.pre in the file (or \"default\"): words split as "
              "GPT-2 splits them";
  else if (t->kind == KIND_BPE) {
    int kind = kr_pretok_from_name(pre, (size_t)pre_len, &t->ignore_merges);
    if (kind < 0) {
      snprintf(err, err_len, "tokenizer: pre-tokenizer '%.*s' (tokenizer.ggml.pre) not supported",
               (int)(pre_len > 40 ? 40 : pre_len), pre);
      goto fail;
    }
    t->pre = (kr_pretok)kind;
  }

  const kr_gguf_value *tok = NULL;
  rc = kr_gguf_meta_array(g, "tokenizer.ggml.tokens", KR_GGUF_STRING, &tok, err, err_len);
  if (rc < 0) goto fail;
  if (rc > 0 || tok->n == 0 || tok->n > (1u << 24)) {
    snprintf(err, err_len, "tokenizer: tokenizer.ggml.tokens %s",
             rc > 0 ? "missing" : "empty or longer than 2^24");
    goto fail;
  }
  int32_t nv = t->n_vocab = (int32_t)tok->n;
  t->text = calloc((size_t)nv, sizeof *t->text);
  t->len = calloc((size_t)nv, sizeof *t->len);
  t->type = calloc((size_t)nv, sizeof *t->type);
  t->score = calloc((size_t)nv, sizeof *t->score);
  if (!t->text || !t->len || !t->type || !t->score || map_init(&t->vocab, (size_t)nv)) goto oom;
  const uint8_t *p = tok->data;
  for (int32_t i = 0; i < nv; i++) {
    uint64_t l;
    kr_gguf_next_string(&p, &t->text[i], &l);
    t->len[i] = (uint32_t)l;
    t->type[i] = TT_NORMAL;
    map_put(&t->vocab, t->text[i], l, i);
  }
  const kr_gguf_value *ty, *sc;
  if (optional_array(g, "tokenizer.ggml.token_type", KR_GGUF_I32, (uint64_t)nv, &ty, err,
                     err_len) ||
      optional_array(g, "tokenizer.ggml.scores", KR_GGUF_F32, (uint64_t)nv, &sc, err, err_len))
    goto fail;
  if (ty) memcpy(t->type, ty->data, (size_t)nv * 4);
  if (sc) memcpy(t->score, sc->data, (size_t)nv * 4);

  if (t->kind == KIND_BPE) {
    const kr_gguf_value *mg = NULL;
    rc = kr_gguf_meta_array(g, "tokenizer.ggml.merges", KR_GGUF_STRING, &mg, err, err_len);
    if (rc > 0) snprintf(err, err_len, "tokenizer: gpt2 model without tokenizer.ggml.merges");
    if (rc) goto fail;
    if (map_init(&t->merges, (size_t)mg->n)) goto oom;
    p = mg->data;
    for (uint64_t i = 0; i < mg->n && i < INT32_MAX; i++) {
      const char *s;
      uint64_t l;
      kr_gguf_next_string(&p, &s, &l);
      map_put(&t->merges, s, l, (int32_t)i);
    }
    /* bytes_to_unicode: printable bytes map to themselves, the rest to 256, 257, ... */
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) {
      int keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      t->byte_to_cp[b] = keep ? (uint32_t)b : next++;
    }
    for (int i = 0; i < 324; i++) t->cp_to_byte[i] = -1;
    for (int b = 0; b < 256; b++) t->cp_to_byte[t->byte_to_cp[b]] = (int16_t)b;
  }
  for (int b = 0; b < 256; b++) {
    char name[8];
    snprintf(name, sizeof name, "<0x%02X>", b);
    t->byte_token[b] = map_get(&t->vocab, name, 6);
  }

  t->special = malloc((size_t)nv * sizeof *t->special);
  if (!t->special) goto oom;
  for (int32_t i = 0; i < nv; i++)
    if (t->type[i] == TT_CONTROL || t->type[i] == TT_USER) t->special[t->n_special++] = i;
  sort_ctx = t;
  qsort(t->special, (size_t)t->n_special, sizeof *t->special, by_len_desc);

  /* absent flags default to what each tokenizer kind does */
  t->add_bos = t->add_space_prefix = t->kind == KIND_SPM;
  if (optional_id(g, "tokenizer.ggml.bos_token_id", nv, &t->bos, err, err_len) ||
      optional_id(g, "tokenizer.ggml.eos_token_id", nv, &t->eos, err, err_len) ||
      optional_id(g, "tokenizer.ggml.eot_token_id", nv, &t->eot, err, err_len) ||
      kr_gguf_meta_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos, err, err_len) < 0 ||
      kr_gguf_meta_bool(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix, err, err_len) <
          0)
    goto fail;
  /* the turn ends of ChatML, Llama 3, Phi-3, Gemma, and end-of-text */
  static const char *const eog[] = {"<|im_end|>", "<|endoftext|>", "<|eot_id|>",      "<|eom_id|>",
                                    "<|end|>",    "<end_of_turn>", "<|end_of_text|>", "<EOT>"};
  for (size_t i = 0; i < sizeof eog / sizeof *eog; i++) t->eog[i] = kr_tok_find(t, eog[i]);
  return t;
oom:
  snprintf(err, err_len, "tokenizer: out of memory");
fail:
  kr_tok_free(t);
  return NULL;
}
