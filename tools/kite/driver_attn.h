/*
 * What the attention drivers share, defined in driver_attn_plan.c: driver_attn.c (store_kv, the
 * paged ops, sdpa), driver_attn_train.c (sdpa_varlen and the backwards of sdpa and sdpa_varlen)
 * and driver_mla.c (the paged fills).
 */
#ifndef KITE_TOOLS_DRIVER_ATTN_H
#define KITE_TOOLS_DRIVER_ATTN_H

#include "driver.h"

/* sdpa mask kinds (kt_attn_case.mask) */
enum {
  MASK_NONE,
  MASK_BOOL,     /* [Sq, Sk] kDLBool */
  MASK_U8,       /* [B, Hq, Sq, Sk] uint8, one mask per head */
  MASK_F32,      /* [Sq, Sk] f32, added to the scores */
  MASK_QT_BCAST, /* [1, Hq, Sq, Sk] in q's dtype with batch and head strides 0 */
  MASK_F32_B1,   /* [B, 1, Sq, Sk] f32: the head dim broadcast by its shape */
  MASK_KINDS
};
static const char *const kt_mask_name[MASK_KINDS] = {
    "", "bool[Sq,Sk]", "u8[B,H,Sq,Sk]", "f32[Sq,Sk]", "qt[1,H,Sq,Sk]/s0", "f32[B,1,Sq,Sk]"};

/* KT_SCALARS fields of the kite_attn_opts arguments (scale, softcap, window_left, gqa, causal)
 * from kt_attn_case.opts. */
#define KT_ATTN_OPTS_FIELDS                                                                        \
  KT_FIELD("scale", 'f', attn.opts.scale), KT_FIELD("softcap", 'f', attn.opts.softcap),            \
      KT_FIELD("window_left", 'i', attn.opts.window_left), KT_FIELD("gqa", 'i', attn.opts.gqa),    \
      KT_FIELD("causal", 'i', attn.opts.causal)

/* ceil(a / b), b > 0 */
static inline int64_t kt_cdiv(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

/* x[N, H, D] with head stride D + pad, in a buffer of its own. */
int kt_attn_add_heads(kt_run *r, const char *name, kite_dtype t, kt_role role, int64_t N, int64_t H,
                      int64_t D, int64_t pad, float lo, float hi);
/* x[B, H, S, D] with row stride D + pad; bshd: the memory is [B, S, H, D + pad]. */
int kt_attn_add_bhsd(kt_run *r, const char *name, kite_dtype t, kt_role role, int64_t B, int64_t H,
                     int64_t S, int64_t D, int64_t pad, int bshd, float lo, float hi);
/* sdpa's mask of kind c->attn.mask bound to "mask" (its view, -1 for MASK_NONE), filled by
 * kt_attn_fill_mask. */
int kt_attn_plan_mask(kt_run *r, const kt_case *c);
void kt_attn_fill_mask(const kt_run *r, int vi, uint64_t seed, unsigned char *body);
/* With c->attn.sinks, sinks f32 [Hq] in [-1, 2] bound to "sinks" (its view); else -1. */
int kt_attn_plan_sinks(kt_run *r, const kt_case *c);
/* The mask element at buffer element `at`, in query row i: for bool masks 0 / 1, else the
 * added value (-inf hides). Query row 1 sees no key. */
double kt_attn_mask_value(int is_bool, uint64_t seed, int64_t at, int64_t i);

/* The paged ops' custom fills, shared with the MLA driver (driver_mla.c), over kt_attn_case's
 * batch, seq_lens, block_size, num_blocks, max_blocks, tokens and skip_slots:
 * block_table[B, max_blocks]: sequence b's blocks are the next ceil(L_b / bs) entries of a
 * seeded permutation of the physical blocks, entries past them -1; seq_lens[B]; slots[T]:
 * distinct slots in random order, about a fifth negative with skip_slots. */
void kt_attn_fill_block_table(const kt_run *r, int vi, uint64_t seed, unsigned char *body);
void kt_attn_fill_seq_lens(const kt_run *r, int vi, uint64_t seed, unsigned char *body);
void kt_attn_fill_slots(const kt_run *r, int vi, uint64_t seed, unsigned char *body);
/* Gives view vi (>= 0) the custom fill fn. */
void kt_attn_set_custom(kt_run *r, int vi, kt_fill_fn fn);
/* An int32 vector [n] with a custom fill, in a buffer of its own. */
int kt_attn_add_ints(kt_run *r, const char *name, int64_t n, kt_fill_fn fn);
/* The longest of a's sequences; the keys of all of them and the blocks those fill. */
int32_t kt_attn_max_len(const kt_attn_case *a);
void kt_attn_count_keys(const kt_attn_case *a, double *keys, double *blocks);
/* a's batch and seq_lens from lens[batch], and a pool (with a->block_size set) of their blocks
 * plus 3 that no sequence owns, each block-table row one unused entry past its blocks. */
void kt_attn_set_lens(kt_attn_case *a, int batch, const int32_t *lens);
/* block_table (row stride max_blocks + pad) and seq_lens of a's sequences, bound by name. */
void kt_attn_plan_table(kt_run *r, const kt_attn_case *a);

#endif
