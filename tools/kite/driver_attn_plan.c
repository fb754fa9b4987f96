/*
 * What the attention drivers share (driver_attn.h): the paged cases' geometry (sequence lengths,
 * the block pool), their custom fills (block table, seq_lens, slots, sdpa masks) and the plan
 * pieces (heads, [B, H, S, D] tensors, int vectors, block table, sinks, masks) that
 * driver_attn.c, driver_attn_train.c and driver_mla.c lay their cases out with.
 */
#include <math.h>
#include <stdlib.h>

#include "driver_attn.h"
#include "util.h"

/* ---- paged geometry ---------------------------------------------------------------------- */

int32_t kt_attn_max_len(const kt_attn_case *a) {
  int32_t m = 0;
  for (int64_t b = 0; b < a->batch; b++) m = a->seq_lens[b] > m ? a->seq_lens[b] : m;
  return m;
}

void kt_attn_count_keys(const kt_attn_case *a, double *keys, double *blocks) {
  *keys = *blocks = 0;
  for (int64_t b = 0; b < a->batch; b++) {
    *keys += a->seq_lens[b];
    *blocks += (double)kt_cdiv(a->seq_lens[b], a->block_size > 0 ? a->block_size : 1);
  }
}

void kt_attn_set_lens(kt_attn_case *a, int batch, const int32_t *lens) {
  int64_t used = 0, widest = 0;
  a->batch = batch;
  for (int b = 0; b < batch && b < KT_MAX_SEQS; b++) {
    a->seq_lens[b] = lens[b];
    const int64_t nb = kt_cdiv(lens[b], a->block_size);
    used += nb;
    widest = nb > widest ? nb : widest;
  }
  a->num_blocks = used + 3;
  a->max_blocks = widest + 1;
}

/* ---- custom fills ------------------------------------------------------------------------ */

/* A seeded permutation of 0..n-1 (Fisher-Yates); NULL when out of memory. */
static int32_t *permutation(uint64_t seed, int64_t n) {
  int32_t *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
  if (!p) return NULL;
  for (int64_t i = 0; i < n; i++) p[i] = (int32_t)i;
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)(kt_hash(seed, (uint64_t)i) % (uint64_t)(i + 1));
    int32_t t = p[i];
    p[i] = p[j], p[j] = t;
  }
  return p;
}

/* block_table[B, max_blocks]: sequence b's blocks are the next ceil(L_b / bs) entries of a
 * permutation of the physical blocks; entries past them are -1 (never read). */
void kt_attn_fill_block_table(const kt_run *r, int vi, uint64_t seed, unsigned char *body) {
  const kt_attn_case *a = &r->c.attn;
  const kt_view *v = &r->view[vi];
  int32_t *perm = permutation(seed, a->num_blocks), *bt = (int32_t *)body;
  int64_t next = 0;
  for (int64_t b = 0; b < a->batch; b++)
    for (int64_t j = 0; j < a->max_blocks; j++) {
      int32_t blk = -1;
      if (j * a->block_size < a->seq_lens[b] && next < a->num_blocks)
        blk = perm ? perm[next++] : (int32_t)next++;
      bt[v->offset + b * v->strides[0] + j] = blk;
    }
  free(perm);
}

void kt_attn_fill_seq_lens(const kt_run *r, int vi, uint64_t seed, unsigned char *body) {
  const kt_attn_case *a = &r->c.attn;
  for (int64_t b = 0; b < a->batch; b++) ((int32_t *)body)[r->view[vi].offset + b] = a->seq_lens[b];
}

/* slots[T]: distinct slots of the cache in random order (two tokens on one slot would make
 * the result depend on the kernel's write order); with skip_slots about a fifth are -1..-3. */
void kt_attn_fill_slots(const kt_run *r, int vi, uint64_t seed, unsigned char *body) {
  const kt_attn_case *a = &r->c.attn;
  int64_t capacity = a->num_blocks * a->block_size;
  int32_t *perm = permutation(seed, capacity), *slots = (int32_t *)body + r->view[vi].offset;
  for (int64_t i = 0; i < a->tokens; i++) {
    uint64_t h = kt_hash(seed ^ 0x5bd1e995u, (uint64_t)i);
    slots[i] = perm ? perm[i % capacity] : (int32_t)(i % capacity);
    if (a->skip_slots && h % 5 == 0) slots[i] = -1 - (int32_t)(h / 5 % 3);
  }
  free(perm);
}

/* sdpa masks. Every memory element gets a value from its own position, so broadcast views
 * (stride 0) read one consistent mask. Query row 1 sees no key (o = 0, lse = -inf); elsewhere
 * a bool mask hides about a quarter of the keys and a float mask adds values in [-2, 2] with
 * about a fifth at -inf. */
double kt_attn_mask_value(int is_bool, uint64_t seed, int64_t at, int64_t i) {
  uint64_t h = kt_hash(seed, (uint64_t)at);
  int hidden = i == 1 || (is_bool ? h % 4 == 0 : h % 5 == 0);
  if (is_bool) return !hidden;
  return hidden ? -INFINITY : -2.0 + 4.0 * kt_unit(h, 1);
}

void kt_attn_fill_mask(const kt_run *r, int vi, uint64_t seed, unsigned char *body) {
  const kt_attn_case *a = &r->c.attn;
  const kt_view *v = &r->view[vi];
  int64_t n = kt_view_numel(v);
  int is_bool = v->dtype == KITE_DTYPE_U8;
  for (int64_t e = 0; e < n; e++) {
    int64_t at = kt_view_at(v, e);
    double x = kt_attn_mask_value(is_bool, seed, at, e / a->sk % a->sq);
    if (is_bool)
      body[at] = (unsigned char)x;
    else
      kt_store(v->dtype, body, at, x);
  }
}

/* ---- plans ------------------------------------------------------------------------------- */

void kt_attn_set_custom(kt_run *r, int vi, kt_fill_fn fn) {
  if (vi < 0) return;
  r->view[vi].fill = KT_FILL_CUSTOM;
  r->view[vi].fill_fn = fn;
}

int kt_attn_add_ints(kt_run *r, const char *name, int64_t n, kt_fill_fn fn) {
  int64_t shape[1] = {n};
  int vi = kt_add_tensor(r, name, KITE_DTYPE_I32, KT_IN, 1, shape, KT_FILL_CUSTOM, 0, 0);
  kt_attn_set_custom(r, vi, fn);
  return vi;
}

/* x[N, H, D] with head stride D + pad, in a buffer of its own. */
int kt_attn_add_heads(kt_run *r, const char *name, kite_dtype t, kt_role role, int64_t N, int64_t H,
                      int64_t D, int64_t pad, float lo, float hi) {
  int64_t shape[3] = {N, H, D}, strides[3] = {H * (D + pad), D + pad, 1};
  int b = kt_add_buf(r, name, t, N * H * (D + pad));
  return kt_add_view(r, name, b, t, role, 3, shape, strides, 0, KT_FILL_UNIFORM, lo, hi);
}

/* x[B, H, S, D] with row stride D + pad; bshd: the memory is [B, S, H, D + pad]. */
int kt_attn_add_bhsd(kt_run *r, const char *name, kite_dtype t, kt_role role, int64_t B, int64_t H,
                     int64_t S, int64_t D, int64_t pad, int bshd, float lo, float hi) {
  int64_t row = D + pad, shape[4] = {B, H, S, D};
  int64_t bhsd[4] = {H * S * row, S * row, row, 1}, bshd_s[4] = {S * H * row, row, H * row, 1};
  int b = kt_add_buf(r, name, t, B * H * S * row);
  return kt_add_view(r, name, b, t, role, 4, shape, bshd ? bshd_s : bhsd, 0, KT_FILL_UNIFORM, lo,
                     hi);
}

void kt_attn_plan_table(kt_run *r, const kt_attn_case *a) {
  int64_t shape[2] = {a->batch, a->max_blocks}, strides[2] = {a->max_blocks + a->pad, 1};
  int b = kt_add_buf(r, "block_table", KITE_DTYPE_I32, a->batch * (a->max_blocks + a->pad));
  int bt = kt_bind(r, "block_table",
                   kt_add_view(r, "block_table", b, KITE_DTYPE_I32, KT_IN, 2, shape, strides, 0,
                               KT_FILL_CUSTOM, 0, 0));
  kt_attn_set_custom(r, bt, kt_attn_fill_block_table);
  kt_bind(r, "seq_lens", kt_attn_add_ints(r, "seq_lens", a->batch, kt_attn_fill_seq_lens));
}

int kt_attn_plan_sinks(kt_run *r, const kt_case *c) {
  if (!c->attn.sinks) return -1;
  int64_t shape[1] = {c->attn.hq};
  return kt_bind(
      r, "sinks",
      kt_add_tensor(r, "sinks", KITE_DTYPE_F32, KT_IN, 1, shape, KT_FILL_UNIFORM, -1, 2));
}

int kt_attn_plan_mask(kt_run *r, const kt_case *c) {
  const kt_attn_case *a = &c->attn;
  int64_t B = a->batch, H = a->hq, Sq = a->sq, Sk = a->sk;
  kite_dtype t = a->mask == MASK_BOOL || a->mask == MASK_U8 ? KITE_DTYPE_U8
                 : a->mask == MASK_QT_BCAST                 ? c->dtype
                                                            : KITE_DTYPE_F32;
  int64_t shape[4], strides[4], n;
  int ndim = 4;
  switch (a->mask) {
  case MASK_BOOL:
  case MASK_F32:
    ndim = 2, shape[0] = Sq, shape[1] = Sk, strides[0] = Sk, strides[1] = 1, n = Sq * Sk;
    break;
  case MASK_U8:
    shape[0] = B, shape[1] = H, shape[2] = Sq, shape[3] = Sk;
    strides[0] = H * Sq * Sk, strides[1] = Sq * Sk, strides[2] = Sk, strides[3] = 1;
    n = B * H * Sq * Sk;
    break;
  case MASK_QT_BCAST:
    shape[0] = 1, shape[1] = H, shape[2] = Sq, shape[3] = Sk;
    strides[0] = 0, strides[1] = 0, strides[2] = Sk, strides[3] = 1;
    n = Sq * Sk;
    break;
  case MASK_F32_B1:
    shape[0] = B, shape[1] = 1, shape[2] = Sq, shape[3] = Sk;
    strides[0] = Sq * Sk, strides[1] = Sq * Sk, strides[2] = Sk, strides[3] = 1;
    n = B * Sq * Sk;
    break;
  default:
    return -1;
  }
  int b = kt_add_buf(r, "mask", t, n);
  int m =
      kt_bind(r, "mask",
              kt_add_view(r, "mask", b, t, KT_IN, ndim, shape, strides, 0, KT_FILL_CUSTOM, 0, 0));
  kt_attn_set_custom(r, m, kt_attn_fill_mask);
  /* the buffer is uint8 to the harness; the op is told it holds DLPack booleans */
  if (m >= 0) r->view[m].dl_bool = a->mask == MASK_BOOL;
  return m;
}
