#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct {
  uint32_t type;
  const char *name;
  uint32_t values, bytes;
} ggml_types[] = {
    {KR_GGML_F32, "f32", 1, 4},         {KR_GGML_F16, "f16", 1, 2},
    {KR_GGML_Q4_0, "q4_0", 32, 18},     {KR_GGML_Q4_1, "q4_1", 32, 20},
    {KR_GGML_Q5_0, "q5_0", 32, 22},     {KR_GGML_Q5_1, "q5_1", 32, 24},
    {KR_GGML_Q8_0, "q8_0", 32, 34},     {KR_GGML_Q8_1, "q8_1", 32, 36},
    {KR_GGML_Q2_K, "q2_k", 256, 84},    {KR_GGML_Q3_K, "q3_k", 256, 110},
    {KR_GGML_Q4_K, "q4_k", 256, 144},   {KR_GGML_Q5_K, "q5_k", 256, 176},
    {KR_GGML_Q6_K, "q6_k", 256, 210},   {KR_GGML_Q8_K, "q8_k", 256, 292},
    {KR_GGML_I8, "i8", 1, 1},           {KR_GGML_I16, "i16", 1, 2},
    {KR_GGML_I32, "i32", 1, 4},         {KR_GGML_I64, "i64", 1, 8},
    {KR_GGML_F64, "f64", 1, 8},         {KR_GGML_BF16, "bf16", 1, 2},
    {KR_GGML_IQ4_NL, "iq4_nl", 32, 18},
};

const char *kr_ggml_type_name(uint32_t type) {
  for (size_t i = 0; i < sizeof ggml_types / sizeof ggml_types[0]; i++)
    if (ggml_types[i].type == type) return ggml_types[i].name;
  return NULL;
}

int kr_ggml_block(uint32_t type, uint64_t *values, uint64_t *bytes) {
  for (size_t i = 0; i < sizeof ggml_types / sizeof ggml_types[0]; i++)
    if (ggml_types[i].type == type) {
      *values = ggml_types[i].values;
      *bytes = ggml_types[i].bytes;
      return 1;
    }
  return 0;
}

/* Bytes of one scalar metadata value; 0 for string/array/unknown. */
static uint64_t scalar_size(uint32_t t) {
  switch (t) {
  case KR_GGUF_U8:
  case KR_GGUF_I8:
  case KR_GGUF_BOOL:
    return 1;
  case KR_GGUF_U16:
  case KR_GGUF_I16:
    return 2;
  case KR_GGUF_U32:
  case KR_GGUF_I32:
  case KR_GGUF_F32:
    return 4;
  case KR_GGUF_U64:
  case KR_GGUF_I64:
  case KR_GGUF_F64:
    return 8;
  default:
    return 0;
  }
}

typedef struct reader {
  const uint8_t *p, *end, *base;
  char *err;
  size_t err_len;
} reader;

static int fail(reader *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = snprintf(r->err, r->err_len, "gguf: at byte %zu: ", (size_t)(r->p - r->base));
  if (n >= 0 && (size_t)n < r->err_len) vsnprintf(r->err + n, r->err_len - (size_t)n, fmt, ap);
  va_end(ap);
  return -1;
}

static uint64_t left(const reader *r) {
  return (uint64_t)(r->end - r->p);
}

static int rd(reader *r, void *dst, size_t n, const char *what) {
  memset(dst, 0, n);
  if (left(r) < n) return fail(r, "file truncated in %s", what);
  memcpy(dst, r->p, n);
  r->p += n;
  return 0;
}

/* A string: u64 length then bytes. Returns its bytes without copying. */
static int rd_str(reader *r, const uint8_t **s, uint64_t *len, const char *what) {
  if (rd(r, len, 8, what)) return -1;
  if (*len > left(r))
    return fail(r, "%s: string length %llu past the end of the file", what,
                (unsigned long long)*len);
  *s = r->p;
  r->p += *len;
  return 0;
}

static char *dup_str(const uint8_t *s, uint64_t len) {
  char *d = malloc((size_t)len + 1);
  if (!d) return NULL;
  memcpy(d, s, (size_t)len);
  d[len] = 0;
  return d;
}

static int rd_value(reader *r, uint32_t type, kr_gguf_value *v, const char *key) {
  v->type = type;
  v->elem_type = 0;
  v->n = 1;
  v->data = r->p;
  if (type == KR_GGUF_STRING) {
    const uint8_t *s = NULL;
    if (rd_str(r, &s, &v->n, key)) return -1;
    v->data = s;
  } else if (type == KR_GGUF_ARRAY) {
    if (rd(r, &v->elem_type, 4, key) || rd(r, &v->n, 8, key)) return -1;
    v->data = r->p;
    if (v->elem_type == KR_GGUF_ARRAY)
      return fail(r, "%s: arrays of arrays are not supported", key);
    if (v->elem_type == KR_GGUF_STRING) {
      /* every string takes at least its 8-byte length */
      if (v->n > left(r) / 8)
        return fail(r, "%s: %llu strings cannot fit in the %llu bytes left", key,
                    (unsigned long long)v->n, (unsigned long long)left(r));
      for (uint64_t i = 0; i < v->n; i++) {
        const uint8_t *s = NULL;
        uint64_t len = 0;
        if (rd_str(r, &s, &len, key)) return -1;
      }
    } else {
      uint64_t es = scalar_size(v->elem_type);
      if (!es) return fail(r, "%s: unknown array element type %u", key, v->elem_type);
      if (v->n > left(r) / es)
        return fail(r, "%s: array of %llu elements past the end of the file", key,
                    (unsigned long long)v->n);
      r->p += v->n * es;
    }
  } else {
    uint64_t sz = scalar_size(type);
    if (!sz) return fail(r, "%s: unknown value type %u", key, type);
    if (left(r) < sz) return fail(r, "file truncated in the value of %s", key);
    r->p += sz;
  }
  v->end = r->p;
  return 0;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A name held twice among n records (the char * at `off` of each), or NULL; sorted copies of the
 * pointers, so a file with a million entries costs n log n, not n^2. */
static const char *first_duplicate(const void *recs, uint64_t n, size_t size, size_t off) {
  if (n < 2) return NULL;
  const char **names = malloc(n * sizeof *names);
  if (!names) return NULL;
  for (uint64_t i = 0; i < n; i++)
    memcpy(&names[i], (const char *)recs + i * size + off, sizeof *names);
  qsort(names, n, sizeof *names, cmp_str);
  const char *dup = NULL;
  for (uint64_t i = 1; i < n && !dup; i++)
    if (strcmp(names[i - 1], names[i]) == 0) dup = names[i];
  free(names);
  return dup;
}

void kr_gguf_next_string(const uint8_t **p, const char **s, uint64_t *len) {
  memcpy(len, *p, 8);
  *s = (const char *)*p + 8;
  *p += 8 + *len;
}

int kr_gguf_parse(const void *buf, size_t size, kr_gguf *g, char *err, size_t err_len) {
  char dummy[8];
  if (!err || !err_len) {
    err = dummy;
    err_len = sizeof dummy;
  }
  err[0] = 0;
  memset(g, 0, sizeof *g);
  g->base = buf;
  g->size = size;
  reader r = {buf, (const uint8_t *)buf + size, buf, err, err_len};
  if (!buf) return fail(&r, "no data");

  uint32_t magic = 0;
  if (rd(&r, &magic, 4, "the magic")) return -1;
  if (memcmp(&magic, "GGUF", 4) != 0) {
    r.p = r.base;
    return fail(&r, "not a GGUF file (magic is not \"GGUF\")");
  }
  if (rd(&r, &g->version, 4, "the version")) return -1;
  if (g->version != 2 && g->version != 3)
    return fail(&r, "version %u not supported (2 and 3 are)", g->version);
  if (rd(&r, &g->n_tensors, 8, "the tensor count") || rd(&r, &g->n_kv, 8, "the metadata count"))
    return -1;
  /* a metadata entry takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor info at least
   * 8 + 4 + 4 + 8: counts beyond what the file can hold are rejected before allocating */
  if (g->n_kv > left(&r) / 13)
    return fail(&r, "metadata count %llu cannot fit in the file", (unsigned long long)g->n_kv);
  if (g->n_tensors > left(&r) / 24)
    return fail(&r, "tensor count %llu cannot fit in the file", (unsigned long long)g->n_tensors);

  g->kv = calloc(g->n_kv ? g->n_kv : 1, sizeof *g->kv);
  g->tensors = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *g->tensors);
  if (!g->kv || !g->tensors) return fail(&r, "out of memory");

  g->alignment = 32;
  for (uint64_t i = 0; i < g->n_kv; i++) {
    const uint8_t *k = NULL;
    uint64_t klen = 0;
    uint32_t type = 0;
    if (rd_str(&r, &k, &klen, "a metadata key")) goto bad;
    if (!(g->kv[i].key = dup_str(k, klen))) return fail(&r, "out of memory");
    if (strlen(g->kv[i].key) != klen)
      return fail(&r, "metadata key %llu holds a NUL byte", (unsigned long long)i);
    if (rd(&r, &type, 4, g->kv[i].key)) goto bad;
    if (rd_value(&r, type, &g->kv[i].value, g->kv[i].key)) goto bad;
    if (strcmp(g->kv[i].key, "general.alignment") == 0) {
      uint32_t a;
      if (type != KR_GGUF_U32) return fail(&r, "general.alignment is not a u32");
      memcpy(&a, g->kv[i].value.data, 4);
      if (a == 0 || (a & (a - 1)) != 0)
        return fail(&r, "general.alignment %u is not a power of two", a);
      g->alignment = a;
    }
  }

  for (uint64_t i = 0; i < g->n_tensors; i++) {
    kr_gguf_tensor *t = &g->tensors[i];
    const uint8_t *n = NULL;
    uint64_t nlen = 0;
    if (rd_str(&r, &n, &nlen, "a tensor name")) goto bad;
    if (!(t->name = dup_str(n, nlen))) return fail(&r, "out of memory");
    if (rd(&r, &t->n_dims, 4, t->name)) goto bad;
    if (t->n_dims < 1 || t->n_dims > 4)
      return fail(&r, "tensor %s: %u dims (1 to 4 allowed)", t->name, t->n_dims);
    uint64_t count = 1;
    for (int d = 0; d < 4; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
      uint64_t ne = 0;
      if (rd(&r, &ne, 8, t->name)) goto bad;
      if (ne == 0 || ne > ((uint64_t)1 << 40) || count > (((uint64_t)1 << 62) / ne))
        return fail(&r, "tensor %s: dim %u of %llu is absurd", t->name, d, (unsigned long long)ne);
      t->ne[d] = (int64_t)ne;
      count *= ne;
    }
    if (rd(&r, &t->type, 4, t->name) || rd(&r, &t->offset, 8, t->name)) goto bad;
    uint64_t bv, bb;
    if (!kr_ggml_block(t->type, &bv, &bb))
      return fail(&r, "tensor %s: unknown type %u", t->name, t->type);
    if (t->ne[0] % (int64_t)bv)
      return fail(&r, "tensor %s: row of %lld values is not a whole number of %s blocks (%llu)",
                  t->name, (long long)t->ne[0], kr_ggml_type_name(t->type), (unsigned long long)bv);
    t->nbytes = count / bv * bb;
  }
  const char *dup = first_duplicate(g->kv, g->n_kv, sizeof *g->kv, offsetof(kr_gguf_kv, key));
  if (dup) return fail(&r, "duplicate metadata key %s", dup);
  dup =
      first_duplicate(g->tensors, g->n_tensors, sizeof *g->tensors, offsetof(kr_gguf_tensor, name));
  if (dup) return fail(&r, "duplicate tensor name %s", dup);

  uint64_t pos = (uint64_t)(r.p - r.base);
  g->data_offset = (pos + g->alignment - 1) / g->alignment * g->alignment;
  if (g->data_offset < pos || (g->n_tensors && g->data_offset > size))
    return fail(&r, "data section starts past the end of the file");
  for (uint64_t i = 0; i < g->n_tensors; i++) {
    kr_gguf_tensor *t = &g->tensors[i];
    if (t->offset % g->alignment)
      return fail(&r, "tensor %s: offset %llu not a multiple of the alignment %llu", t->name,
                  (unsigned long long)t->offset, (unsigned long long)g->alignment);
    uint64_t room = size - g->data_offset;
    if (t->offset > room || t->nbytes > room - t->offset)
      return fail(&r, "tensor %s: %llu bytes at offset %llu run past the end of the file", t->name,
                  (unsigned long long)t->nbytes, (unsigned long long)t->offset);
    t->data = r.base + g->data_offset + t->offset;
  }
  return 0;
bad:
  return -1;
}

int kr_gguf_open(const char *path, kr_gguf *g, char *err, size_t err_len) {
  memset(g, 0, sizeof *g);
  int fd = open(path, O_RDONLY);
  if (fd < 0) {
    snprintf(err, err_len, "%s: %s", path, strerror(errno));
    return -1;
  }
  /* a directory opens and has a size, but mmap says "No such device": tell what it is */
  struct stat st;
  const char *why = fstat(fd, &st) != 0    ? strerror(errno)
                    : S_ISDIR(st.st_mode)  ? "is a directory, not a GGUF file"
                    : !S_ISREG(st.st_mode) ? "not a regular file"
                    : st.st_size <= 0      ? "empty file"
                                           : NULL;
  if (why) {
    snprintf(err, err_len, "%s: %s", path, why);
    close(fd);
    return -1;
  }
  void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) {
    snprintf(err, err_len, "%s: mmap: %s", path, strerror(errno));
    return -1;
  }
  char msg[512];
  if (kr_gguf_parse(map, (size_t)st.st_size, g, msg, sizeof msg)) {
    snprintf(err, err_len, "%s: %s", path, msg);
    g->map = map;
    kr_gguf_close(g);
    return -1;
  }
  g->map = map;
  return 0;
}

void kr_gguf_close(kr_gguf *g) {
  if (!g) return;
  if (g->kv)
    for (uint64_t i = 0; i < g->n_kv; i++) free(g->kv[i].key);
  if (g->tensors)
    for (uint64_t i = 0; i < g->n_tensors; i++) free(g->tensors[i].name);
  free(g->kv);
  free(g->tensors);
  if (g->map) munmap(g->map, g->size);
  memset(g, 0, sizeof *g);
}

const kr_gguf_kv *kr_gguf_find(const kr_gguf *g, const char *key) {
  for (uint64_t i = 0; i < g->n_kv; i++)
    if (strcmp(g->kv[i].key, key) == 0) return &g->kv[i];
  return NULL;
}

const kr_gguf_tensor *kr_gguf_tensor_find(const kr_gguf *g, const char *name) {
  for (uint64_t i = 0; i < g->n_tensors; i++)
    if (strcmp(g->tensors[i].name, name) == 0) return &g->tensors[i];
  return NULL;
}

int kr_gguf_get_int(const kr_gguf *g, const char *key, int64_t *out) {
  const kr_gguf_kv *kv = kr_gguf_find(g, key);
  if (!kv) return -1;
  const uint8_t *d = kv->value.data;
  union {
    uint8_t u8;
    int8_t i8;
    uint16_t u16;
    int16_t i16;
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    int64_t i64;
  } u;
  memcpy(&u, d, scalar_size(kv->value.type) ? scalar_size(kv->value.type) : 0);
  switch (kv->value.type) {
  case KR_GGUF_U8:
  case KR_GGUF_BOOL:
    *out = u.u8;
    return 0;
  case KR_GGUF_I8:
    *out = u.i8;
    return 0;
  case KR_GGUF_U16:
    *out = u.u16;
    return 0;
  case KR_GGUF_I16:
    *out = u.i16;
    return 0;
  case KR_GGUF_U32:
    *out = u.u32;
    return 0;
  case KR_GGUF_I32:
    *out = u.i32;
    return 0;
  case KR_GGUF_U64:
    if (u.u64 > INT64_MAX) return -1;
    *out = (int64_t)u.u64;
    return 0;
  case KR_GGUF_I64:
    *out = u.i64;
    return 0;
  default:
    return -1;
  }
}

int kr_gguf_get_float(const kr_gguf *g, const char *key, double *out) {
  const kr_gguf_kv *kv = kr_gguf_find(g, key);
  if (!kv) return -1;
  if (kv->value.type == KR_GGUF_F32) {
    float f;
    memcpy(&f, kv->value.data, 4);
    *out = f;
    return 0;
  }
  if (kv->value.type == KR_GGUF_F64) {
    memcpy(out, kv->value.data, 8);
    return 0;
  }
  int64_t i;
  if (kr_gguf_get_int(g, key, &i)) return -1;
  *out = (double)i;
  return 0;
}

int kr_gguf_get_str(const kr_gguf *g, const char *key, const char **s, uint64_t *len) {
  const kr_gguf_kv *kv = kr_gguf_find(g, key);
  if (!kv || kv->value.type != KR_GGUF_STRING) return -1;
  *s = (const char *)kv->value.data;
  *len = kv->value.n;
  return 0;
}

const char *kr_gguf_type_name(uint32_t type) {
  static const char *const names[KR_GGUF_TYPE_COUNT] = {"u8",  "i8",  "u16",  "i16",    "u32",
                                                        "i32", "f32", "bool", "string", "array",
                                                        "u64", "i64", "f64"};
  return type < KR_GGUF_TYPE_COUNT ? names[type] : "?";
}

/* The message of a key present with another type than `want`; returns -1. */
static int wrong_type(const kr_gguf_kv *kv, const char *want, char *err, size_t err_len) {
  if (err && err_len) {
    if (kv->value.type == KR_GGUF_ARRAY)
      snprintf(err, err_len, "metadata %s is an array of %s, expected %s", kv->key,
               kr_gguf_type_name(kv->value.elem_type), want);
    else
      snprintf(err, err_len, "metadata %s is a %s, expected %s", kv->key,
               kr_gguf_type_name(kv->value.type), want);
  }
  return -1;
}

static int is_int_type(uint32_t t) {
  return t == KR_GGUF_U8 || t == KR_GGUF_I8 || t == KR_GGUF_U16 || t == KR_GGUF_I16 ||
         t == KR_GGUF_U32 || t == KR_GGUF_I32 || t == KR_GGUF_U64 || t == KR_GGUF_I64;
}

int kr_gguf_meta_int(const kr_gguf *g, const char *key, int64_t *out, char *err, size_t err_len) {
  const kr_gguf_kv *kv = kr_gguf_find(g, key);
  if (!kv) return 1;
  if (!is_int_type(kv->value.type)) return wrong_type(kv, "an integer", err, err_len);
  if (kr_gguf_get_int(g, key, out)) {
    if (err && err_len) snprintf(err, err_len, "metadata %s does not fit in an int64", key);
    return -1;
  }
  return 0;
}

int kr_gguf_meta_bool(const kr_gguf *g, const char *key, int *out, char *err, size_t err_len) {
  const kr_gguf_kv *kv = kr_gguf_find(g, key);
  if (!kv) return 1;
  if (kv->value.type != KR_GGUF_BOOL) return wrong_type(kv, "a bool", err, err_len);
  *out = kv->value.data[0] != 0;
  return 0;
}

int kr_gguf_meta_float(const kr_gguf *g, const char *key, double *out, char *err, size_t err_len) {
  const kr_gguf_kv *kv = kr_gguf_find(g, key);
  if (!kv) return 1;
  if (kv->value.type != KR_GGUF_F32 && kv->value.type != KR_GGUF_F64 &&
      !is_int_type(kv->value.type))
    return wrong_type(kv, "a number (f32 or f64)", err, err_len);
  return kr_gguf_get_float(g, key, out) ? wrong_type(kv, "a number", err, err_len) : 0;
}

int kr_gguf_meta_str(const kr_gguf *g, const char *key, const char **s, uint64_t *len, char *err,
                     size_t err_len) {
  const kr_gguf_kv *kv = kr_gguf_find(g, key);
  if (!kv) return 1;
  if (kv->value.type != KR_GGUF_STRING) return wrong_type(kv, "a string", err, err_len);
  *s = (const char *)kv->value.data;
  *len = kv->value.n;
  return 0;
}

int kr_gguf_meta_array(const kr_gguf *g, const char *key, uint32_t elem_type,
                       const kr_gguf_value **out, char *err, size_t err_len) {
  const kr_gguf_kv *kv = kr_gguf_find(g, key);
  if (!kv) return 1;
  if (kv->value.type != KR_GGUF_ARRAY || kv->value.elem_type != elem_type) {
    char want[32];
    snprintf(want, sizeof want, "an array of %s", kr_gguf_type_name(elem_type));
    return wrong_type(kv, want, err, err_len);
  }
  *out = &kv->value;
  return 0;
}
