/*
 * Attention consistency, for every kernel of store_kv / paged_decode / paged_prefill / sdpa that
 * runs here (each backend.variant pinned in turn):
 *   - store_kv writes exactly k and v at their slots, skips negative slots, and refuses a slot
 *     past the cache without writing;
 *   - paged_prefill of n tokens equals n successive paged_decode steps over the same cache;
 *   - paged_prefill equals dense sdpa over the cache gathered into [1, Hkv, L, D], with causal,
 *     with the same pattern as a bool mask and as a broadcast float mask;
 *   - a sequence of length 0 decodes to zeros with lse = -inf;
 *   - block ids outside the cache read as absent keys and a seq_len past the block table is
 *     clamped, as in ref.
 * Caches use shuffled physical blocks; ragged lengths include 0 and 1. Prints "N passed, M failed".
 * Comparisons of each kernel with ref over valid inputs live in `kite check` (tools/kite).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kite/dtype.h"
#include "kite/kite.h"

static int g_skip;

/* ---- small helpers ------------------------------------------------------------------------- */
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static double rnd(void) { /* uniform in [0, 1), splitmix64 */
  uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (double)((z ^ (z >> 31)) >> 11) / 9007199254740992.0;
}

/* A DLTensor with its own shape and strides; used by pointer only (t points into it). */
typedef struct tview {
  DLTensor t;
  int64_t shape[4], strides[4];
} tview;

static DLTensor *tv(tview *v, void *data, kite_dtype dt, int ndim, const int64_t *shape,
                    const int64_t *strides) {
  memset(v, 0, sizeof *v);
  memcpy(v->shape, shape, (size_t)ndim * sizeof *shape);
  if (strides) memcpy(v->strides, strides, (size_t)ndim * sizeof *strides);
  v->t = (DLTensor){
      data, {kDLCPU, 0}, ndim, kite_dtype_dlpack(dt), v->shape, strides ? v->strides : NULL, 0};
  return &v->t;
}

static void *xcalloc(int64_t n, size_t es) {
  void *p = calloc((size_t)(n > 0 ? n : 1), es);
  if (!p) {
    printf("out of memory\n");
    exit(2);
  }
  return p;
}

static void fill(kite_dtype t, void *p, int64_t n, double amp) {
  for (int64_t i = 0; i < n; i++) kite_store_f32(t, p, i, (float)((2.0 * rnd() - 1.0) * amp));
}

/* Largest |a - b| over n elements of dtype t; NaN in either gives +inf. */
static double max_err(kite_dtype t, const void *a, const void *b, int64_t n) {
  double m = 0.0;
  for (int64_t i = 0; i < n; i++) {
    const double x = kite_load_f32(t, a, i), y = kite_load_f32(t, b, i);
    if (isnan(x) || isnan(y)) return INFINITY;
    if (fabs(x - y) > m) m = fabs(x - y);
  }
  return m;
}

/* Largest lse difference; -inf must meet -inf. */
static double lse_err(const float *a, const float *b, int64_t n) {
  double m = 0.0;
  for (int64_t i = 0; i < n; i++) {
    if (isinf(a[i]) || isinf(b[i])) {
      if (a[i] != b[i]) return INFINITY;
      continue;
    }
    if (isnan(a[i]) || isnan(b[i])) return INFINITY;
    if (fabs((double)a[i] - b[i]) > m) m = fabs((double)a[i] - b[i]);
  }
  return m;
}

/* Outputs are rounded once to the dtype: two correct kernels differ by about an ulp near 1. */
static double tol(kite_dtype t) {
  return t == KITE_DTYPE_F32 ? 2e-5 : t == KITE_DTYPE_F16 ? 2e-3 : 1.6e-2;
}
#define LSE_TOL 1e-3

/* ---- scenarios ----------------------------------------------------------------------------- */
#define MAX_SEQS 6
typedef struct scenario {
  const char *name;
  int64_t hq, hkv, head_dim, block_size;
  int batch;
  int32_t seq_lens[MAX_SEQS], q_lens[MAX_SEQS]; /* q_len <= seq_len: the last q_len positions */
} scenario;

static const scenario g_scenarios[] = {
    {"gqa4 d64 bs16", 8, 2, 64, 16, 5, {0, 1, 17, 40, 33}, {0, 1, 17, 3, 1}},
    {"mha d80 bs1", 4, 4, 80, 1, 3, {5, 12, 1}, {5, 2, 1}},
    {"mqa d33 bs7", 6, 1, 33, 7, 2, {30, 9}, {4, 9}},
    {"long d128 bs16", 8, 2, 128, 16, 1, {700}, {3}},
    {"d256 bs3", 2, 1, 256, 3, 2, {10, 4}, {2, 4}},
};

typedef struct optset {
  const char *name;
  kite_attn_opts opts;
} optset;

static const optset g_optsets[] = {
    {"default", {0.0f, 0.0f, -1, KITE_GQA_GROUPED, 1}},
    {"softcap", {0.0f, 2.0f, -1, KITE_GQA_GROUPED, 1}},
    {"window5 interleaved scale.3", {0.3f, 0.0f, 5, KITE_GQA_INTERLEAVED, 1}},
    {"non-causal", {0.0f, 0.0f, -1, KITE_GQA_GROUPED, 0}},
    {"non-causal window0", {0.0f, 0.0f, 0, KITE_GQA_GROUPED, 0}},
};

/* One scenario's data: k/v rows (with padding tokens), the filled caches, q for prefill. */
typedef struct world {
  const scenario *s;
  kite_dtype dt;
  size_t es;
  int64_t num_blocks, max_blocks, bt_stride, rows, tokens;
  int32_t *block_table, *slots, *cu_q_lens, *seq_lens;
  int64_t *row_of; /* k/v row of (sequence b, position p): row_of[b * max_len + p] */
  int64_t max_len, kv_stride_t;
  void *k, *v, *key_cache, *value_cache, *q;
} world;

static void world_free(world *w) {
  free(w->block_table), free(w->slots), free(w->cu_q_lens), free(w->seq_lens), free(w->row_of);
  free(w->k), free(w->v), free(w->key_cache), free(w->value_cache), free(w->q);
}

/* Lays out the sequences over shuffled physical blocks and makes k/v rows (one padding row with
 * slot -1 after every sequence), without storing them yet. */
static void world_make(world *w, const scenario *s, kite_dtype dt) {
  memset(w, 0, sizeof *w);
  w->s = s, w->dt = dt, w->es = kite_dtype_size(dt);
  const int64_t bs = s->block_size, hkv = s->hkv, D = s->head_dim;
  int64_t used = 0;
  for (int b = 0; b < s->batch; b++) {
    const int64_t nb = (s->seq_lens[b] + bs - 1) / bs;
    used += nb;
    if (nb > w->max_blocks) w->max_blocks = nb;
    if (s->seq_lens[b] > w->max_len) w->max_len = s->seq_lens[b];
    w->tokens += s->q_lens[b];
  }
  w->max_blocks += 1; /* an unused entry at the end of every row */
  w->num_blocks = used + 3;
  w->bt_stride = w->max_blocks + 2; /* row-strided block table */

  int64_t *perm = xcalloc(w->num_blocks, sizeof *perm);
  for (int64_t i = 0; i < w->num_blocks; i++) perm[i] = i;
  for (int64_t i = w->num_blocks - 1; i > 0; i--) {
    const int64_t j = (int64_t)(rnd() * (double)(i + 1));
    const int64_t t = perm[i];
    perm[i] = perm[j], perm[j] = t;
  }
  w->block_table = xcalloc(s->batch * w->bt_stride, sizeof(int32_t));
  for (int64_t i = 0; i < s->batch * w->bt_stride; i++) w->block_table[i] = -1;
  int64_t next = 0;
  for (int b = 0; b < s->batch; b++)
    for (int64_t j = 0; j * bs < s->seq_lens[b]; j++)
      w->block_table[b * w->bt_stride + j] = (int32_t)perm[next++];
  free(perm);

  w->rows = 0;
  for (int b = 0; b < s->batch; b++) w->rows += s->seq_lens[b] + 1;
  w->kv_stride_t = hkv * D + 3; /* row-strided k and v */
  w->k = xcalloc(w->rows * w->kv_stride_t, w->es);
  w->v = xcalloc(w->rows * w->kv_stride_t, w->es);
  fill(dt, w->k, w->rows * w->kv_stride_t, 1.0);
  fill(dt, w->v, w->rows * w->kv_stride_t, 1.0);
  w->slots = xcalloc(w->rows, sizeof(int32_t));
  w->row_of = xcalloc(s->batch * (w->max_len > 0 ? w->max_len : 1), sizeof(int64_t));
  int64_t r = 0;
  for (int b = 0; b < s->batch; b++) {
    for (int64_t p = 0; p < s->seq_lens[b]; p++, r++) {
      w->slots[r] = (int32_t)(w->block_table[b * w->bt_stride + p / bs] * bs + p % bs);
      w->row_of[b * w->max_len + p] = r;
    }
    w->slots[r++] = -1; /* padding */
  }

  const int64_t cache_n = w->num_blocks * hkv * bs * D;
  w->key_cache = xcalloc(cache_n, w->es);
  w->value_cache = xcalloc(cache_n, w->es);
  w->seq_lens = xcalloc(s->batch, sizeof(int32_t));
  w->cu_q_lens = xcalloc(s->batch + 1, sizeof(int32_t));
  for (int b = 0; b < s->batch; b++) {
    w->seq_lens[b] = s->seq_lens[b];
    w->cu_q_lens[b + 1] = w->cu_q_lens[b] + s->q_lens[b];
  }
  w->q = xcalloc(w->tokens * s->hq * D, w->es);
  fill(dt, w->q, w->tokens * s->hq * D, 2.0);
}

static kite_status call_store_kv(kite_ctx *ctx, world *w, const int32_t *slots) {
  const scenario *s = w->s;
  tview k, v, kc, vc, sl;
  const int64_t kv_shape[3] = {w->rows, s->hkv, s->head_dim};
  const int64_t kv_strides[3] = {w->kv_stride_t, s->head_dim, 1};
  const int64_t cache_shape[4] = {w->num_blocks, s->hkv, s->block_size, s->head_dim};
  const int64_t slot_shape[1] = {w->rows};
  return kite_store_kv(ctx, tv(&k, w->k, w->dt, 3, kv_shape, kv_strides),
                       tv(&v, w->v, w->dt, 3, kv_shape, kv_strides),
                       tv(&kc, w->key_cache, w->dt, 4, cache_shape, NULL),
                       tv(&vc, w->value_cache, w->dt, 4, cache_shape, NULL),
                       tv(&sl, (void *)slots, KITE_DTYPE_I32, 1, slot_shape, NULL));
}

/* Element offset of (kv head g, position p) of sequence b in the caches. */
static int64_t cache_off(const world *w, int b, int64_t g, int64_t p) {
  const scenario *s = w->s;
  const int64_t blk = w->block_table[b * w->bt_stride + p / s->block_size];
  return ((blk * s->hkv + g) * s->block_size + p % s->block_size) * s->head_dim;
}

/* store_kv into zeroed caches, then every stored row must equal its k/v row byte for byte; a
 * slot past the end must fail and leave the caches untouched. */
static void test_store_kv(kite_ctx *ctx, world *w) {
  const scenario *s = w->s;
  const size_t row_bytes = (size_t)s->head_dim * w->es;
  kite_status st = call_store_kv(ctx, w, w->slots);
  CHECK(st == KITE_OK, "store_kv returned %s\n", kite_status_name(st));
  int bad = 0;
  for (int b = 0; b < s->batch; b++)
    for (int64_t p = 0; p < s->seq_lens[b]; p++)
      for (int64_t g = 0; g < s->hkv; g++) {
        const int64_t r = w->row_of[b * w->max_len + p];
        const int64_t src = r * w->kv_stride_t + g * s->head_dim, dst = cache_off(w, b, g, p);
        bad +=
            memcmp((char *)w->key_cache + dst * w->es, (char *)w->k + src * w->es, row_bytes) != 0;
        bad += memcmp((char *)w->value_cache + dst * w->es, (char *)w->v + src * w->es,
                      row_bytes) != 0;
      }
  CHECK(bad == 0, "store_kv: %d cache rows differ from k/v\n", bad);

  /* The same call with one slot past the end: an error, and nothing written. */
  const int64_t cache_bytes = w->num_blocks * s->hkv * s->block_size * s->head_dim * (int64_t)w->es;
  int32_t *slots = xcalloc(w->rows, sizeof(int32_t));
  memcpy(slots, w->slots, (size_t)w->rows * sizeof(int32_t));
  slots[w->rows - 1] = (int32_t)(w->num_blocks * s->block_size);
  void *snap = xcalloc(cache_bytes, 1);
  memcpy(snap, w->key_cache, (size_t)cache_bytes);
  fill(w->dt, w->k, w->rows * w->kv_stride_t, 1.0); /* new values that must not land */
  st = call_store_kv(ctx, w, slots);
  CHECK(st == KITE_ERR_INVALID_ARG, "store_kv with slot = capacity returned %s\n",
        kite_status_name(st));
  CHECK(memcmp(snap, w->key_cache, (size_t)cache_bytes) == 0,
        "store_kv with a bad slot wrote into the cache\n");
  free(snap);
  free(slots);
}

static kite_status call_prefill(kite_ctx *ctx, world *w, const kite_attn_opts *opts, void *o,
                                float *lse) {
  const scenario *s = w->s;
  tview q, kc, vc, bt, cu, sl, ov, lv;
  const int64_t q_shape[3] = {w->tokens, s->hq, s->head_dim};
  const int64_t cache_shape[4] = {w->num_blocks, s->hkv, s->block_size, s->head_dim};
  const int64_t bt_shape[2] = {s->batch, w->max_blocks}, bt_strides[2] = {w->bt_stride, 1};
  const int64_t cu_shape[1] = {s->batch + 1}, sl_shape[1] = {s->batch};
  const int64_t lse_shape[2] = {w->tokens, s->hq};
  return kite_paged_prefill(ctx, tv(&q, w->q, w->dt, 3, q_shape, NULL),
                            tv(&kc, w->key_cache, w->dt, 4, cache_shape, NULL),
                            tv(&vc, w->value_cache, w->dt, 4, cache_shape, NULL),
                            tv(&bt, w->block_table, KITE_DTYPE_I32, 2, bt_shape, bt_strides),
                            tv(&cu, w->cu_q_lens, KITE_DTYPE_I32, 1, cu_shape, NULL),
                            tv(&sl, w->seq_lens, KITE_DTYPE_I32, 1, sl_shape, NULL), NULL, opts,
                            tv(&ov, o, w->dt, 3, q_shape, NULL),
                            tv(&lv, lse, KITE_DTYPE_F32, 2, lse_shape, NULL));
}

/* Step i decodes query i of every sequence (its last query once past its q_len) with the keys
 * up to its position; the results land in o/lse at the prefill rows. A sequence with no query
 * decodes with seq_len 0 and must give zeros and -inf. */
static void run_decode_steps(kite_ctx *ctx, world *w, const kite_attn_opts *opts, void *o,
                             float *lse) {
  const scenario *s = w->s;
  const int64_t hd = s->hq * s->head_dim, B = s->batch;
  int max_q = 0;
  for (int b = 0; b < B; b++) max_q = s->q_lens[b] > max_q ? s->q_lens[b] : max_q;
  void *q = xcalloc(B * hd, w->es), *od = xcalloc(B * hd, w->es);
  float *ld = xcalloc(B * s->hq, sizeof(float));
  int32_t *lens = xcalloc(B, sizeof(int32_t));
  for (int i = 0; i < max_q; i++) {
    for (int b = 0; b < B; b++) {
      const int n = s->q_lens[b], qi = i < n ? i : n - 1;
      lens[b] = n > 0 ? s->seq_lens[b] - n + qi + 1 : 0;
      if (n > 0)
        memcpy((char *)q + b * hd * w->es, (char *)w->q + (w->cu_q_lens[b] + qi) * hd * w->es,
               (size_t)hd * w->es);
    }
    tview qv, kc, vc, bt, sl, ov, lv;
    const int64_t q_shape[3] = {B, s->hq, s->head_dim};
    const int64_t cache_shape[4] = {w->num_blocks, s->hkv, s->block_size, s->head_dim};
    const int64_t bt_shape[2] = {B, w->max_blocks}, bt_strides[2] = {w->bt_stride, 1};
    const int64_t sl_shape[1] = {B}, lse_shape[2] = {B, s->hq};
    kite_status st = kite_paged_decode(
        ctx, tv(&qv, q, w->dt, 3, q_shape, NULL),
        tv(&kc, w->key_cache, w->dt, 4, cache_shape, NULL),
        tv(&vc, w->value_cache, w->dt, 4, cache_shape, NULL),
        tv(&bt, w->block_table, KITE_DTYPE_I32, 2, bt_shape, bt_strides),
        tv(&sl, lens, KITE_DTYPE_I32, 1, sl_shape, NULL), NULL, opts,
        tv(&ov, od, w->dt, 3, q_shape, NULL), tv(&lv, ld, KITE_DTYPE_F32, 2, lse_shape, NULL));
    CHECK(st == KITE_OK, "paged_decode step %d returned %s\n", i, kite_status_name(st));
    for (int b = 0; b < B; b++) {
      if (s->q_lens[b] == 0) {
        double z = 0;
        for (int64_t e = 0; e < hd; e++) z = fmax(z, fabs(kite_load_f32(w->dt, od, b * hd + e)));
        int inf = 1;
        for (int64_t h = 0; h < s->hq; h++) inf &= ld[b * s->hq + h] == -INFINITY;
        if (i == 0) CHECK(z == 0 && inf, "decode of seq_len 0: max |o| %g, lse not all -inf\n", z);
        continue;
      }
      if (i >= s->q_lens[b]) continue;
      const int64_t t = w->cu_q_lens[b] + i;
      memcpy((char *)o + t * hd * w->es, (char *)od + b * hd * w->es, (size_t)hd * w->es);
      memcpy(lse + t * s->hq, ld + b * s->hq, (size_t)s->hq * sizeof(float));
    }
  }
  free(q), free(od), free(ld), free(lens);
}

/* mask_kind 0: none (opts as given); 1: causal as a bool [Sq, Sk] mask; 2: causal as a float
 * [1, Hq, Sq, Sk] mask broadcast with stride 0 (0 or -inf). Per sequence, over the gathered
 * cache; results land in o/lse at the prefill rows. */
static void run_sdpa(kite_ctx *ctx, world *w, const kite_attn_opts *opts, int mask_kind, void *o,
                     float *lse) {
  const scenario *s = w->s;
  const int64_t D = s->head_dim, hq = s->hq, hkv = s->hkv;
  kite_attn_opts op = *opts;
  if (mask_kind) op.causal = 0;
  for (int b = 0; b < s->batch; b++) {
    const int64_t L = s->seq_lens[b], n = s->q_lens[b], t0 = w->cu_q_lens[b];
    if (n == 0) continue;
    void *k = xcalloc(hkv * L * D, w->es), *v = xcalloc(hkv * L * D, w->es);
    for (int64_t g = 0; g < hkv; g++)
      for (int64_t p = 0; p < L; p++) {
        const int64_t src = cache_off(w, b, g, p), dst = (g * L + p) * D;
        memcpy((char *)k + dst * w->es, (char *)w->key_cache + src * w->es, (size_t)D * w->es);
        memcpy((char *)v + dst * w->es, (char *)w->value_cache + src * w->es, (size_t)D * w->es);
      }
    uint8_t *bmask = xcalloc(n * L, 1);
    float *fmask = xcalloc(n * L, sizeof(float));
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = 0; j < L; j++) {
        const int see = j <= i + L - n;
        bmask[i * L + j] = (uint8_t)see;
        fmask[i * L + j] = see ? 0.0f : -INFINITY;
      }
    float *ls = xcalloc(hq * n, sizeof(float));

    tview qv, kv, vv, mv, ov, lv;
    /* q and o are [T, Hq, D] buffers: sequence b's part viewed as [1, Hq, n, D]. */
    const int64_t q_shape[4] = {1, hq, n, D}, q_strides[4] = {0, D, hq * D, 1};
    const int64_t k_shape[4] = {1, hkv, L, D}, lse_shape[3] = {1, hq, n};
    const int64_t m2_shape[2] = {n, L}, m4_shape[4] = {1, hq, n, L}, m4_strides[4] = {0, 0, L, 1};
    const DLTensor *mask = NULL;
    if (mask_kind == 1) mask = tv(&mv, bmask, KITE_DTYPE_U8, 2, m2_shape, NULL);
    if (mask_kind == 2) mask = tv(&mv, fmask, KITE_DTYPE_F32, 4, m4_shape, m4_strides);
    kite_status st =
        kite_sdpa(ctx, tv(&qv, (char *)w->q + t0 * hq * D * w->es, w->dt, 4, q_shape, q_strides),
                  tv(&kv, k, w->dt, 4, k_shape, NULL), tv(&vv, v, w->dt, 4, k_shape, NULL), mask,
                  NULL, &op, tv(&ov, (char *)o + t0 * hq * D * w->es, w->dt, 4, q_shape, q_strides),
                  tv(&lv, ls, KITE_DTYPE_F32, 3, lse_shape, NULL));
    CHECK(st == KITE_OK, "sdpa (mask kind %d) of sequence %d returned %s\n", mask_kind, b,
          kite_status_name(st));
    for (int64_t h = 0; h < hq; h++)
      for (int64_t i = 0; i < n; i++) lse[(t0 + i) * hq + h] = ls[h * n + i];
    free(k), free(v), free(bmask), free(fmask), free(ls);
  }
}

/* Index values that live in host memory (this ctx is on the CPU) are checked before any kernel
 * runs (kite.h): a block id outside the cache inside a sequence, a seq_len past the block
 * table's capacity, a negative seq_len and a query chunk longer than its sequence are each an
 * INVALID_ARG naming the sequence and the value, whichever kernel is configured, and o is left
 * untouched. */
static void expect_bad_index(kite_ctx *ctx, world *w, int b, const char *what, const char *value) {
  const int64_t n = w->tokens * w->s->hq * w->s->head_dim, nl = w->tokens * w->s->hq;
  unsigned char *o = xcalloc(n, w->es);
  float *l = xcalloc(nl, sizeof(float));
  memset(o, 0x5a, (size_t)n * w->es);
  const kite_attn_opts opts = kite_attn_opts_default();
  kite_status st = call_prefill(ctx, w, &opts, o, l);
  char seq[32];
  snprintf(seq, sizeof seq, "sequence %d", b);
  const char *msg = kite_last_error();
  CHECK(st == KITE_ERR_INVALID_ARG && strstr(msg, seq) && strstr(msg, value),
        "%s: prefill returned %s, message \"%s\" (want \"%s\" and \"%s\")\n", what,
        kite_status_name(st), msg, seq, value);
  size_t changed = 0;
  for (size_t i = 0; i < (size_t)n * w->es; i++) changed += o[i] != 0x5a;
  CHECK(changed == 0, "%s: o written (%zu bytes) although the call failed\n", what, changed);
  free(o), free(l);
}

static void test_bad_indices(kite_ctx *ctx, world *w) {
  const scenario *s = w->s;
  int b = 0; /* the sequence with the most blocks */
  for (int i = 1; i < s->batch; i++)
    if (s->seq_lens[i] > s->seq_lens[b]) b = i;
  if (s->seq_lens[b] < 2) return;
  int32_t *row = w->block_table + b * w->bt_stride, saved[2] = {row[0], row[1]};
  char value[64];
  row[0] = -3;
  expect_bad_index(ctx, w, b, "negative block id", "= -3");
  row[0] = saved[0];
  if (s->seq_lens[b] > s->block_size) {
    row[1] = (int32_t)(w->num_blocks + 7);
    snprintf(value, sizeof value, "= %d", (int)row[1]);
    expect_bad_index(ctx, w, b, "block id past the cache", value);
    row[1] = saved[1];
  }
  w->seq_lens[b] = (int32_t)(w->max_blocks * s->block_size + 5);
  snprintf(value, sizeof value, "seq_len %d", (int)w->seq_lens[b]);
  expect_bad_index(ctx, w, b, "seq_len past the block table", value);
  w->seq_lens[b] = -2;
  expect_bad_index(ctx, w, b, "negative seq_len", "seq_len -2");
  if (s->q_lens[b] >= 1) {
    w->seq_lens[b] = s->q_lens[b] - 1;
    snprintf(value, sizeof value, "seq_len %d is below its %d queries", (int)w->seq_lens[b],
             (int)s->q_lens[b]);
    expect_bad_index(ctx, w, b, "query chunk longer than its sequence", value);
  }
  w->seq_lens[b] = s->seq_lens[b];
}

/* ---- kernels under test -------------------------------------------------------------------- */
static const kite_op g_ops[] = {KITE_OP_STORE_KV, KITE_OP_PAGED_DECODE, KITE_OP_PAGED_PREFILL,
                                KITE_OP_SDPA};
#define NUM_OPS 4

static int is_attn_op(kite_op op) {
  for (int i = 0; i < NUM_OPS; i++)
    if (g_ops[i] == op) return 1;
  return 0;
}

/* The config pinning each attention op that `set` ("backend.variant") provides to it; the
 * others keep the default choice. */
static void set_config(const char *set, char *cfg, size_t n) {
  cfg[0] = '\0';
  for (size_t i = 0; i < kite_kernel_count(); i++) {
    kite_kernel_info k;
    char name[128];
    if (kite_kernel_get(i, &k) != KITE_OK || !is_attn_op(k.op) || !k.runs_here) continue;
    snprintf(name, sizeof name, "%s.%s", k.backend, k.variant);
    if (strcmp(name, set) != 0) continue;
    size_t used = strlen(cfg);
    snprintf(cfg + used, n - used, "%s%.40s=%.100s", used ? "," : "", k.op_name, set);
  }
}

static void run_scenario(kite_ctx *ctx, const char *set, const char *cfg, const scenario *s,
                         kite_dtype dt) {
  world w;
  world_make(&w, s, dt);
  snprintf(g_where, sizeof g_where, "%.100s %s %.60s", set, kite_dtype_name(dt), s->name);
  test_store_kv(ctx, &w);

  const int64_t n = w.tokens * s->hq * s->head_dim, nl = w.tokens * s->hq;
  void *o_pf = xcalloc(n, w.es), *o_x = xcalloc(n, w.es);
  float *l_pf = xcalloc(nl, sizeof(float)), *l_x = xcalloc(nl, sizeof(float));
  for (size_t oi = 0; oi < sizeof g_optsets / sizeof g_optsets[0]; oi++) {
    const kite_attn_opts *opts = &g_optsets[oi].opts;
    snprintf(g_where, sizeof g_where, "%.100s %s %.60s %.60s", set, kite_dtype_name(dt), s->name,
             g_optsets[oi].name);
    kite_config_set(cfg);
    kite_status st = call_prefill(ctx, &w, opts, o_pf, l_pf);
    if (st == KITE_ERR_UNSUPPORTED) {
      g_skip++;
      continue;
    }
    CHECK(st == KITE_OK, "paged_prefill returned %s\n", kite_status_name(st));

    double e, el;
    if (opts->causal) {
      memset(o_x, 0, (size_t)n * w.es);
      run_decode_steps(ctx, &w, opts, o_x, l_x);
      e = max_err(dt, o_pf, o_x, n), el = lse_err(l_pf, l_x, nl);
      CHECK(e <= tol(dt) && el <= LSE_TOL, "prefill vs decode steps: max |do| %g, |dlse| %g\n", e,
            el);
    }
    for (int mask_kind = 0; mask_kind < (opts->causal ? 3 : 1); mask_kind++) {
      memset(o_x, 0, (size_t)n * w.es);
      run_sdpa(ctx, &w, opts, mask_kind, o_x, l_x);
      e = max_err(dt, o_pf, o_x, n), el = lse_err(l_pf, l_x, nl);
      CHECK(e <= tol(dt) && el <= LSE_TOL,
            "prefill vs sdpa (mask kind %d): max |do| %g, |dlse| %g\n", mask_kind, e, el);
    }
  }
  snprintf(g_where, sizeof g_where, "%.100s %s %.60s", set, kite_dtype_name(dt), s->name);
  test_bad_indices(ctx, &w);
  free(o_pf), free(o_x), free(l_pf), free(l_x);
  world_free(&w);
}

/* paged_decode of q[1, Hq, 8] (Hq from q_shape) over caches kc[c_shape] (v half kc + v_off) with
 * one sequence of 4 keys in blocks 0 and 1, into o (o_shape = q_shape); lse NULL or [lse_shape]. */
static kite_status bad_decode(kite_ctx *ctx, float *q, const int64_t *q_shape, float *kc,
                              const int64_t *c_shape, int64_t v_off, const kite_attn_opts *opts,
                              float *o, float *lse, const int64_t *lse_shape) {
  static int32_t bt[2] = {0, 1}, sl[1] = {4};
  static const int64_t bt_shape[2] = {1, 2}, sl_shape[1] = {1};
  tview qv, kv, vv, btv, slv, ov, lv;
  return kite_paged_decode(ctx, tv(&qv, q, KITE_DTYPE_F32, 3, q_shape, NULL),
                           tv(&kv, kc, KITE_DTYPE_F32, 4, c_shape, NULL),
                           tv(&vv, kc + v_off, KITE_DTYPE_F32, 4, c_shape, NULL),
                           tv(&btv, bt, KITE_DTYPE_I32, 2, bt_shape, NULL),
                           tv(&slv, sl, KITE_DTYPE_I32, 1, sl_shape, NULL), NULL, opts,
                           tv(&ov, o, KITE_DTYPE_F32, 3, q_shape, NULL),
                           lse ? tv(&lv, lse, KITE_DTYPE_F32, 2, lse_shape, NULL) : NULL);
}

/* A few argument errors the front-ends must catch. */
static void test_bad_args(kite_ctx *ctx) {
  snprintf(g_where, sizeof g_where, "bad arguments");
  float q[3 * 4 * 8] = {0}, o[3 * 4 * 8], kc[256] = {0}, lse[16];
  tview qv, kv, vv, ov;
  const int64_t q_shape[3] = {1, 3, 8}, c_shape[4] = {2, 2, 4, 8}, lse_ok[2] = {1, 4};
  /* 3 q heads over 2 kv heads */
  kite_status st = bad_decode(ctx, q, q_shape, kc, c_shape, 128, NULL, o, NULL, NULL);
  CHECK(st == KITE_ERR_INVALID_ARG && strstr(kite_last_error(), "multiple"),
        "Hq %% Hkv != 0 returned %s\n", kite_status_name(st));

  const int64_t q2_shape[3] = {1, 4, 8};
  kite_attn_opts bad = kite_attn_opts_default();
  bad.softcap = -1.0f;
  const int64_t c1_shape[4] = {1, 2, 4, 8};
  st = bad_decode(ctx, q, q2_shape, kc, c1_shape, 64, &bad, o, NULL, NULL);
  CHECK(st == KITE_ERR_INVALID_ARG, "softcap < 0 returned %s\n", kite_status_name(st));
  st = bad_decode(ctx, q, q2_shape, kc, c1_shape, 64, NULL, o, lse, lse_ok);
  CHECK(st == KITE_OK, "valid decode returned %s\n", kite_status_name(st));
  const int64_t lse_wrong[2] = {1, 3};
  st = bad_decode(ctx, q, q2_shape, kc, c1_shape, 64, NULL, o, lse, lse_wrong);
  CHECK(st == KITE_ERR_INVALID_ARG, "lse of the wrong shape returned %s\n", kite_status_name(st));
  /* o aliasing q */
  st = bad_decode(ctx, q, q2_shape, kc, c1_shape, 64, NULL, q, NULL, NULL);
  CHECK(st == KITE_ERR_INVALID_ARG, "o aliasing q returned %s\n", kite_status_name(st));
  /* sdpa mask that does not broadcast */
  const int64_t sq_shape[4] = {1, 4, 2, 8}, sk_shape[4] = {1, 2, 3, 8}, m_shape[2] = {2, 4};
  uint8_t m[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  tview mv;
  st = kite_sdpa(ctx, tv(&qv, q, KITE_DTYPE_F32, 4, sq_shape, NULL),
                 tv(&kv, kc, KITE_DTYPE_F32, 4, sk_shape, NULL),
                 tv(&vv, kc + 64, KITE_DTYPE_F32, 4, sk_shape, NULL),
                 tv(&mv, m, KITE_DTYPE_U8, 2, m_shape, NULL), NULL, NULL,
                 tv(&ov, o, KITE_DTYPE_F32, 4, sq_shape, NULL), NULL);
  CHECK(st == KITE_ERR_INVALID_ARG, "sdpa mask [2, 4] for Sk 3 returned %s\n",
        kite_status_name(st));
}

int main(void) {
  const char *seed_env = getenv("KITE_TEST_SEED");
  const uint64_t seed = seed_env ? strtoull(seed_env, NULL, 0) : 20240611u;
  g_rng = seed;
  printf("attention: seed %llu\n", (unsigned long long)seed);

  kite_ctx *ctx = NULL;
  if (kite_ctx_create(NULL, &ctx) != KITE_OK) {
    printf("cannot create a ctx: %s\n", kite_last_error());
    return 1;
  }
  test_bad_args(ctx);

  /* Every backend.variant providing an attention op that runs here. */
  char sets[32][128];
  int nsets = 0;
  for (size_t i = 0; i < kite_kernel_count() && nsets < 32; i++) {
    kite_kernel_info k;
    if (kite_kernel_get(i, &k) != KITE_OK || !is_attn_op(k.op) || !k.runs_here) continue;
    char name[128];
    snprintf(name, sizeof name, "%s.%s", k.backend, k.variant);
    int seen = 0;
    for (int j = 0; j < nsets; j++) seen |= strcmp(sets[j], name) == 0;
    if (!seen) snprintf(sets[nsets++], sizeof sets[0], "%s", name);
  }

  /* KITE_TEST_QUICK (set for the sanitizer build, ~10x slower) keeps one 16-bit dtype. */
  const kite_dtype dtypes[] = {KITE_DTYPE_BF16, KITE_DTYPE_F32, KITE_DTYPE_F16};
  const size_t ndtypes = getenv("KITE_TEST_QUICK") ? 1 : sizeof dtypes / sizeof dtypes[0];
  for (int si = 0; si < nsets; si++) {
    char cfg[512];
    set_config(sets[si], cfg, sizeof cfg);
    printf("kernels %s (%s)\n", sets[si], cfg);
    for (size_t di = 0; di < ndtypes; di++)
      for (size_t sc = 0; sc < sizeof g_scenarios / sizeof g_scenarios[0]; sc++) {
        if (kite_config_set(cfg) != KITE_OK) {
          snprintf(g_where, sizeof g_where, "%.100s", sets[si]);
          CHECK(0, "config '%s' rejected\n", cfg);
          continue;
        }
        run_scenario(ctx, sets[si], cfg, &g_scenarios[sc], dtypes[di]);
      }
  }
  kite_config_set(NULL);
  kite_ctx_destroy(ctx);
  printf("%d passed, %d failed (%d cases skipped: kernel does not support them)\n", g_pass, g_fail,
         g_skip);
  return g_fail ? 1 : 0;
}
