/*
 * A GGUF reader: header, metadata of every value type, tensor infos, alignment, mmap.
 *
 * Every count, length, offset and size in the file is checked against the bytes that are there
 * before it is used, so a truncated or hostile file gives an error message, never a crash or a
 * read past the end. After kr_gguf_parse succeeds every pointer it hands out lies inside the
 * buffer, and every string/array walk below stays inside it too.
 *
 * File layout (little endian): "GGUF", u32 version (2 or 3), u64 tensor count, u64 metadata
 * count; metadata: key string, u32 value type, value; tensor infos: name string, u32 n_dims,
 * u64 ne[n_dims] (ne[0] innermost), u32 ggml type, u64 offset into the data section; the data
 * section starts at the next multiple of general.alignment (32 by default). A string is a u64
 * length and that many bytes (no NUL).
 */
#ifndef KITE_ENGINE_GGUF_H
#define KITE_ENGINE_GGUF_H

#include <stddef.h>
#include <stdint.h>

typedef enum kr_gguf_type {
  KR_GGUF_U8 = 0,
  KR_GGUF_I8 = 1,
  KR_GGUF_U16 = 2,
  KR_GGUF_I16 = 3,
  KR_GGUF_U32 = 4,
  KR_GGUF_I32 = 5,
  KR_GGUF_F32 = 6,
  KR_GGUF_BOOL = 7,
  KR_GGUF_STRING = 8,
  KR_GGUF_ARRAY = 9,
  KR_GGUF_U64 = 10,
  KR_GGUF_I64 = 11,
  KR_GGUF_F64 = 12,
  KR_GGUF_TYPE_COUNT
} kr_gguf_type;

/* ggml tensor types this reader knows the block size of (others are an error). */
typedef enum kr_ggml_type {
  KR_GGML_F32 = 0,
  KR_GGML_F16 = 1,
  KR_GGML_Q4_0 = 2, /* 32 values: f16 d, 16 bytes of nibbles; x = (q - 8) * d */
  KR_GGML_Q4_1 = 3, /* 32 values: f16 d, f16 m, 16 bytes of nibbles; x = q * d + m */
  KR_GGML_Q5_0 = 6,
  KR_GGML_Q5_1 = 7,
  KR_GGML_Q8_0 = 8, /* 32 values: f16 d, 32 int8; x = q * d */
  KR_GGML_Q8_1 = 9,
  KR_GGML_Q2_K = 10,
  KR_GGML_Q3_K = 11,
  KR_GGML_Q4_K = 12,
  KR_GGML_Q5_K = 13,
  KR_GGML_Q6_K = 14,
  KR_GGML_Q8_K = 15,
  KR_GGML_IQ4_NL = 20, /* 32 values: f16 d, 16 bytes of nibbles indexing a 16-entry table */
  KR_GGML_I8 = 24,
  KR_GGML_I16 = 25,
  KR_GGML_I32 = 26,
  KR_GGML_I64 = 27,
  KR_GGML_F64 = 28,
  KR_GGML_BF16 = 30,
} kr_ggml_type;

/* Name of a ggml type ("q4_1"), or NULL when unknown. */
const char *kr_ggml_type_name(uint32_t type);
/* Values per block and bytes per block; 0 for an unknown type. */
int kr_ggml_block(uint32_t type, uint64_t *values, uint64_t *bytes);

/* A metadata value. For scalars `data` points at the value's bytes. For a string, data points
 * at its bytes and n is the length. For an array, elem_type is the element type, n the count,
 * data the first element (strings inside: walk them with kr_gguf_next_string). */
typedef struct kr_gguf_value {
  uint32_t type;
  uint32_t elem_type;
  uint64_t n;
  const uint8_t *data;
  const uint8_t *end; /* one past the value's last byte */
} kr_gguf_value;

typedef struct kr_gguf_kv {
  char *key; /* NUL-terminated copy */
  kr_gguf_value value;
} kr_gguf_kv;

typedef struct kr_gguf_tensor {
  char *name; /* NUL-terminated copy */
  uint32_t n_dims;
  int64_t ne[4]; /* ne[0] innermost; unused dims are 1 */
  uint32_t type;
  uint64_t offset; /* from the start of the data section */
  uint64_t nbytes;
  const void *data;
} kr_gguf_tensor;

typedef struct kr_gguf {
  const uint8_t *base; /* the whole file */
  size_t size;
  void *map; /* mmap'ed region (kr_gguf_open), or NULL */
  uint32_t version;
  uint64_t n_kv, n_tensors;
  kr_gguf_kv *kv;
  kr_gguf_tensor *tensors;
  uint64_t alignment;
  uint64_t data_offset;
} kr_gguf;

/* Parses a GGUF image held in memory (not copied: buf must outlive g). Returns 0, or -1 with a
 * message in err. */
int kr_gguf_parse(const void *buf, size_t size, kr_gguf *g, char *err, size_t err_len);
/* mmaps the file and parses it. Returns 0, or -1 with a message naming the file. */
int kr_gguf_open(const char *path, kr_gguf *g, char *err, size_t err_len);
/* Frees what parse/open allocated and unmaps; g may be zeroed or partly filled. */
void kr_gguf_close(kr_gguf *g);

/* Name of a metadata value type ("u32", "string", "array"), "?" when unknown. */
const char *kr_gguf_type_name(uint32_t type);

/* Metadata lookups that tell an absent key from a wrongly typed one: 0 with the value, 1 when
 * the key is absent, -1 when it is present with another type (err then names the key, the type
 * it has and the type wanted), so that a caller uses its default only for an absent key.
 *   int:   any integer type whose value fits in int64 (not bool);
 *   bool:  bool;
 *   float: f32 or f64 (or an integer);
 *   str:   a string (its bytes, not NUL-terminated, and length);
 *   array: an array of elem_type elements. */
int kr_gguf_meta_int(const kr_gguf *g, const char *key, int64_t *out, char *err, size_t err_len);
int kr_gguf_meta_bool(const kr_gguf *g, const char *key, int *out, char *err, size_t err_len);
int kr_gguf_meta_float(const kr_gguf *g, const char *key, double *out, char *err, size_t err_len);
int kr_gguf_meta_str(const kr_gguf *g, const char *key, const char **s, uint64_t *len, char *err,
                     size_t err_len);
int kr_gguf_meta_array(const kr_gguf *g, const char *key, uint32_t elem_type,
                       const kr_gguf_value **out, char *err, size_t err_len);

/* Lookups: NULL / -1 when the key is missing or its type does not fit. */
const kr_gguf_kv *kr_gguf_find(const kr_gguf *g, const char *key);
const kr_gguf_tensor *kr_gguf_tensor_find(const kr_gguf *g, const char *name);
/* Any integer or bool scalar that fits in int64. */
int kr_gguf_get_int(const kr_gguf *g, const char *key, int64_t *out);
/* f32 or f64 scalar (integers too). */
int kr_gguf_get_float(const kr_gguf *g, const char *key, double *out);
/* A string scalar: its bytes (not NUL-terminated) and length. */
int kr_gguf_get_str(const kr_gguf *g, const char *key, const char **s, uint64_t *len);
/* Walks a string array: *p starts at value.data; each call yields the next string and advances.
 * The parser checked that all value.n strings lie inside the value. */
void kr_gguf_next_string(const uint8_t **p, const char **s, uint64_t *len);

#endif /* KITE_ENGINE_GGUF_H */
