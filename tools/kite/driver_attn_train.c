/*
 * Drivers of the training-side attention ops: sdpa_varlen (packed sequences), sdpa_backward
 * and sdpa_varlen_backward.
 *
 * A backward case needs the forward's o and lse for its q, k, v (and mask): any other values
 * would make p = exp(u - lse) meaningless (and underflow f16). So q, k, v, dout and the mask of
 * these cases are filled from fixed keys (not the run's seed) and o and lse are computed from
 * them on the host, in double, as the forward defines them (o rounded to the dtype, lse to
 * f32). Mask rows that see no key give lse = -inf (with sinks: the sink), which the backward
 * must treat as "no contribution". Sinks, when the case has them, are fixed-filled too, and the
 * backward's dsinks is an output beside dq, dk, dv.
 *
 * Varlen cases are B sequences of q_lens[b] queries and seq_lens[b] keys packed back to back
 * ([T, H, D] with head stride D + pad); the lengths include 0 on either side and unequal pairs
 * (Sq < Sk and Sq > Sk), so causal alignment and the window are measured per sequence.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver_attn.h"
#include "util.h"

static int attn_train_has(kite_op op) {
  return op == KITE_OP_SDPA_VARLEN || op == KITE_OP_SDPA_BACKWARD ||
         op == KITE_OP_SDPA_VARLEN_BACKWARD;
}

static int is_varlen(kite_op op) {
  return op != KITE_OP_SDPA_BACKWARD;
}

static int64_t sum_lens(const int32_t *v, int64_t n) {
  int64_t s = 0;
  for (int64_t b = 0; b < n; b++) s += v[b];
  return s;
}

/* ---- descriptions ------------------------------------------------------------------------ */

static void attn_train_shape(const kt_case *c, char *buf, size_t n) {
  const kt_attn_case *a = &c->attn;
  if (is_varlen(c->op))
    snprintf(buf, n, "B%lld Tq%lld Tk%lld %lld/%lldx%lld%s", (long long)a->batch,
             (long long)a->tokens, (long long)sum_lens(a->seq_lens, a->batch), (long long)a->hq,
             (long long)a->hkv, (long long)a->head_dim, a->opts.causal ? "" : " nc");
  else
    snprintf(buf, n, "B%lld %lld/%lld %lldx%lldx%lld%s", (long long)a->batch, (long long)a->hq,
             (long long)a->hkv, (long long)a->sq, (long long)a->sk, (long long)a->head_dim,
             a->opts.causal ? "" : " nc");
}

static void attn_train_describe(const kt_case *c, char *buf, size_t n) {
  const kt_attn_case *a = &c->attn;
  const kite_attn_opts *o = &a->opts;
  size_t len = 0;
  buf[0] = '\0';
  attn_train_shape(c, buf, n);
  len = strlen(buf);
  if (is_varlen(c->op)) {
    kt_cat(buf, n, &len, " q=");
    for (int64_t b = 0; b < a->batch && b < 8; b++)
      kt_cat(buf, n, &len, "%s%d", b ? "," : "", (int)a->q_lens[b]);
    kt_cat(buf, n, &len, " k=");
    for (int64_t b = 0; b < a->batch && b < 8; b++)
      kt_cat(buf, n, &len, "%s%d", b ? "," : "", (int)a->seq_lens[b]);
  }
  if (a->mask) kt_cat(buf, n, &len, " mask=%s", kt_mask_name[a->mask]);
  if (a->bshd) kt_cat(buf, n, &len, " bshd");
  if (o->softcap != 0.0f) kt_cat(buf, n, &len, " softcap=%g", (double)o->softcap);
  if (o->window_left >= 0) kt_cat(buf, n, &len, " window=%d", (int)o->window_left);
  if (o->scale != 0.0f) kt_cat(buf, n, &len, " scale=%g", (double)o->scale);
  if (o->gqa == KITE_GQA_INTERLEAVED) kt_cat(buf, n, &len, " interleaved");
  if (a->with_lse) kt_cat(buf, n, &len, " lse");
  if (a->sinks) kt_cat(buf, n, &len, " sinks");
  if (a->pad) kt_cat(buf, n, &len, " pad=%lld", (long long)a->pad);
}

/* ---- fixed fills and the host forward ---------------------------------------------------- */

#define FIXED_KEY 0x6174746e74726e00ull /* the inputs' key: one per tensor name */

static uint64_t fixed_key(const char *name) {
  uint64_t h = FIXED_KEY;
  for (const char *p = name; *p; p++) h = kt_hash(h, (uint64_t)(unsigned char)*p);
  return h;
}

/* Logical element n of input view v as the fill writes it (rounded to the view's dtype). */
static double fixed_value(const kt_view *v, int64_t n) {
  unsigned char tmp[8];
  kt_store(v->dtype, tmp, 0, v->lo + (v->hi - v->lo) * kt_unit(fixed_key(v->name), (uint64_t)n));
  return kt_load(v->dtype, tmp, 0);
}

static void fill_fixed(const kt_run *r, int vi, uint64_t seed, unsigned char *body) {
  const kt_view *v = &r->view[vi];
  for (int64_t n = 0, numel = kt_view_numel(v); n < numel; n++)
    kt_store(v->dtype, body, kt_view_at(v, n), fixed_value(v, n));
}

static void fill_mask_fixed(const kt_run *r, int vi, uint64_t seed, unsigned char *body) {
  kt_attn_fill_mask(r, vi, fixed_key("mask"), body);
}

/* The named view's logical values, in double (NULL when out of memory). */
static double *fixed_values(const kt_run *r, const char *name) {
  const kt_view *v = &r->view[kt_arg_view(r, name)];
  const int64_t n = kt_view_numel(v);
  double *x = malloc((size_t)(n > 0 ? n : 1) * sizeof *x);
  for (int64_t i = 0; x && i < n; i++) x[i] = fixed_value(v, i);
  return x;
}

/* One problem of the host forward: a dense batch entry, or a packed sequence. Query i of head
 * h is row q_row(h, i) of the [rows, D] logical view of q, key j of kv head g is row
 * k_row(g, j) of k and v. */
typedef struct host_seq {
  int64_t b, sq, sk, t0, s0; /* dense: batch b; varlen: first query / key token */
} host_seq;

static int64_t q_row(const kt_case *c, const host_seq *s, int64_t h, int64_t i) {
  const kt_attn_case *a = &c->attn;
  return is_varlen(c->op) ? (s->t0 + i) * a->hq + h : (s->b * a->hq + h) * a->sq + i;
}

static int64_t k_row(const kt_case *c, const host_seq *s, int64_t g, int64_t j) {
  const kt_attn_case *a = &c->attn;
  return is_varlen(c->op) ? (s->s0 + j) * a->hkv + g : (s->b * a->hkv + g) * a->sk + j;
}

/* The final score u of (query row, key row) or -inf when unseen; m the mask view or NULL. */
static double host_score(const kt_run *r, const host_seq *s, const double *q, const double *k,
                         int64_t h, int64_t i, int64_t g, int64_t j, const kt_view *m) {
  const kt_attn_case *a = &r->c.attn;
  const kite_attn_opts *o = &a->opts;
  const int64_t D = a->head_dim, pos = i + s->sk - s->sq;
  if (o->causal && j > pos) return -INFINITY;
  if (o->window_left >= 0 && (j < pos - o->window_left || j > pos)) return -INFINITY;
  double mv = 0.0;
  if (m) {
    const int64_t *st = m->strides;
    const int64_t at = m->ndim == 2 ? m->offset + i * st[0] + j * st[1]
                                    : m->offset + s->b * st[0] + h * st[1] + i * st[2] + j * st[3];
    const int is_bool = m->dtype == KITE_DTYPE_U8;
    mv = kt_attn_mask_value(is_bool, fixed_key("mask"), at, i);
    if (is_bool && mv == 0.0) return -INFINITY;
    if (is_bool) mv = 0.0;
    unsigned char tmp[8];
    kt_store(m->dtype, tmp, 0, mv);
    mv = kt_load(m->dtype, tmp, 0);
  }
  const double scale = o->scale != 0.0f ? o->scale : 1.0 / sqrt((double)D);
  double dot = 0.0;
  const double *qr = q + q_row(&r->c, s, h, i) * D, *kr = k + k_row(&r->c, s, g, j) * D;
  for (int64_t d = 0; d < D; d++) dot += qr[d] * kr[d];
  double u = scale * dot;
  if (o->softcap > 0.0f) u = o->softcap * tanh(u / o->softcap);
  return u + mv;
}

/* The forward's o (want_o) or lse of the case into view vi: every problem, head and query. */
static void host_forward(const kt_run *r, int vi, unsigned char *body, int want_o) {
  const kt_attn_case *a = &r->c.attn;
  const kt_view *v = &r->view[vi];
  const int mv = kt_arg_view(r, "mask");
  const kt_view *m = mv >= 0 ? &r->view[mv] : NULL;
  const int64_t D = a->head_dim, nseq = is_varlen(r->c.op) ? a->batch : a->batch;
  double *q = fixed_values(r, "q"), *k = fixed_values(r, "k"), *val = fixed_values(r, "v");
  double *sinks = a->sinks ? fixed_values(r, "sinks") : NULL;
  const int64_t most = is_varlen(r->c.op) ? 1 + sum_lens(a->seq_lens, a->batch) : 1 + a->sk;
  double *p = malloc((size_t)most * sizeof *p), *acc = malloc((size_t)D * sizeof *acc);
  if (!q || !k || !val || !p || !acc || (a->sinks && !sinks)) goto done;
  host_seq s = {0};
  for (int64_t b = 0; b < nseq; b++) {
    s.b = b;
    if (is_varlen(r->c.op)) {
      s.sq = a->q_lens[b], s.sk = a->seq_lens[b];
    } else {
      s.sq = a->sq, s.sk = a->sk;
    }
    for (int64_t h = 0; h < a->hq; h++) {
      const int64_t g = a->opts.gqa == KITE_GQA_INTERLEAVED ? h % a->hkv : h / (a->hq / a->hkv);
      for (int64_t i = 0; i < s.sq; i++) {
        const double sink = sinks ? sinks[h] : -INFINITY; /* one more score, no value */
        double mx = sink, sum = 0.0;
        for (int64_t j = 0; j < s.sk; j++) {
          p[j] = host_score(r, &s, q, k, h, i, g, j, m);
          if (p[j] > mx) mx = p[j];
        }
        if (mx > -INFINITY) sum = exp(sink - mx);
        for (int64_t d = 0; d < D; d++) acc[d] = 0.0;
        for (int64_t j = 0; mx > -INFINITY && j < s.sk; j++) {
          p[j] = exp(p[j] - mx);
          sum += p[j];
          const double *vr = val + k_row(&r->c, &s, g, j) * D;
          for (int64_t d = 0; d < D; d++) acc[d] += p[j] * vr[d];
        }
        const int64_t row = q_row(&r->c, &s, h, i);
        if (!want_o) {
          ((float *)body)[v->offset + row] = mx > -INFINITY ? (float)(mx + log(sum)) : -INFINITY;
          continue;
        }
        for (int64_t d = 0; d < D; d++)
          kt_store(v->dtype, body, kt_view_at(v, row * D + d), sum > 0 ? acc[d] / sum : 0.0);
      }
    }
    s.t0 += s.sq, s.s0 += s.sk;
  }
done:
  free(q), free(k), free(val), free(sinks), free(p), free(acc);
}

static void fill_o(const kt_run *r, int vi, uint64_t seed, unsigned char *body) {
  host_forward(r, vi, body, 1);
}

static void fill_lse(const kt_run *r, int vi, uint64_t seed, unsigned char *body) {
  host_forward(r, vi, body, 0);
}

/* cu_seqlens: the running sums of q_lens / seq_lens, from 0. */
static void fill_cu(const kt_run *r, int vi, uint64_t seed, unsigned char *body) {
  const kt_attn_case *a = &r->c.attn;
  const int32_t *lens = strcmp(r->view[vi].name, "cu_seqlens_q") == 0 ? a->q_lens : a->seq_lens;
  int32_t *cu = (int32_t *)body + r->view[vi].offset;
  cu[0] = 0;
  for (int64_t b = 0; b < a->batch; b++) cu[b + 1] = cu[b] + lens[b];
}

/* ---- plans ------------------------------------------------------------------------------- */

static int custom(kt_run *r, int vi, kt_fill_fn fn) {
  if (vi < 0) return vi;
  r->view[vi].fill = KT_FILL_CUSTOM;
  r->view[vi].fill_fn = fn;
  return vi;
}

/* q, k, v, o, lse and (backward) dout, dq, dk, dv, each by the table's name; the inputs of a
 * backward case fixed-filled, its o and lse the host forward's. */
static void attn_train_plan(kt_run *r, const kt_case *c) {
  const kt_attn_case *a = &c->attn;
  const kite_dtype t = c->dtype;
  const int bwd = c->op != KITE_OP_SDPA_VARLEN, vl = is_varlen(c->op);
  const kt_role o_role = bwd ? KT_IN : KT_OUT;
  const int64_t B = a->batch, D = a->head_dim, tq = a->tokens, tk = sum_lens(a->seq_lens, B);
  if (B < 0 || B > KT_MAX_SEQS) {
    r->bad = 1;
    return;
  }
  static const char *const in_names[] = {"q", "k", "v", "dout"};
  static const float lo[] = {-2, -1, -1, -1}, hi[] = {2, 1, 1, 1};
  int views[4] = {-1, -1, -1, -1};
  for (int n = 0; n < (bwd ? 4 : 3); n++) {
    const int64_t H = n == 1 || n == 2 ? a->hkv : a->hq;
    views[n] =
        vl ? kt_attn_add_heads(r, in_names[n], t, KT_IN, n == 1 || n == 2 ? tk : tq, H, D, a->pad,
                               lo[n], hi[n])
           : kt_attn_add_bhsd(r, in_names[n], t, KT_IN, B, H, n == 1 || n == 2 ? a->sk : a->sq, D,
                              a->pad, a->bshd, lo[n], hi[n]);
    kt_bind(r, in_names[n], bwd ? custom(r, views[n], fill_fixed) : views[n]);
  }
  if (vl) {
    int64_t shape[1] = {B + 1};
    kt_bind(r, "cu_seqlens_q",
            custom(r,
                   kt_add_tensor(r, "cu_seqlens_q", KITE_DTYPE_I32, KT_IN, 1, shape, KT_FILL_CUSTOM,
                                 0, 0),
                   fill_cu));
    kt_bind(r, "cu_seqlens_k",
            custom(r,
                   kt_add_tensor(r, "cu_seqlens_k", KITE_DTYPE_I32, KT_IN, 1, shape, KT_FILL_CUSTOM,
                                 0, 0),
                   fill_cu));
  } else if (a->mask) {
    custom(r, kt_attn_plan_mask(r, c), fill_mask_fixed);
  }
  int o = vl ? kt_attn_add_heads(r, "o", t, o_role, tq, a->hq, D, a->pad, 0, 0)
             : kt_attn_add_bhsd(r, "o", t, o_role, B, a->hq, a->sq, D, a->pad, a->bshd, 0, 0);
  kt_bind(r, "o", bwd ? custom(r, o, fill_o) : o);
  if (bwd || a->with_lse) {
    int64_t shape[3] = {vl ? tq : B, a->hq, a->sq};
    int l = kt_add_tensor(r, "lse", KITE_DTYPE_F32, o_role, vl ? 2 : 3, shape,
                          bwd ? KT_FILL_CUSTOM : KT_FILL_UNIFORM, 0, 0);
    kt_bind(r, "lse", bwd ? custom(r, l, fill_lse) : l);
  }
  const int sv = kt_attn_plan_sinks(r, c);
  if (bwd) custom(r, sv, fill_fixed);
  if (!bwd) return;
  if (a->sinks) {
    int64_t shape[1] = {a->hq};
    kt_bind(r, "dsinks",
            kt_add_tensor(r, "dsinks", KITE_DTYPE_F32, KT_OUT, 1, shape, KT_FILL_UNIFORM, 0, 0));
  }
  static const char *const out_names[] = {"dq", "dk", "dv"};
  for (int n = 0; n < 3; n++) {
    const int64_t H = n ? a->hkv : a->hq;
    kt_bind(r, out_names[n],
            vl ? kt_attn_add_heads(r, out_names[n], t, KT_OUT, n ? tk : tq, H, D, a->pad, 0, 0)
               : kt_attn_add_bhsd(r, out_names[n], t, KT_OUT, B, H, n ? a->sk : a->sq, D, a->pad,
                                  a->bshd, 0, 0));
  }
}

KT_SCALARS(attn_train_scalar, KT_FIELD("scale", 'f', attn.opts.scale),
           KT_FIELD("softcap", 'f', attn.opts.softcap),
           KT_FIELD("window_left", 'i', attn.opts.window_left), KT_FIELD("gqa", 'i', attn.opts.gqa),
           KT_FIELD("causal", 'i', attn.opts.causal), KT_FIELD("max_seqlen_q", 'l', attn.sq),
           KT_FIELD("max_seqlen_k", 'l', attn.sk))

/* ---- bytes, FLOPs, bounds ---------------------------------------------------------------- */

/* Query-key pairs of the case (causal halves them, as FlashAttention counts). */
static double pairs(const kt_case *c) {
  const kt_attn_case *a = &c->attn;
  double n = 0, half = a->opts.causal ? 0.5 : 1.0;
  if (!is_varlen(c->op)) return half * (double)a->batch * (double)a->sq * (double)a->sk;
  for (int64_t b = 0; b < a->batch; b++) n += half * a->q_lens[b] * (double)a->seq_lens[b];
  return n;
}

/* Least bytes: the forward reads q, k, v and writes o (+ lse); the backward reads q, k, v, o,
 * dout, lse and writes dq, dk, dv. */
static double attn_train_bytes(const kt_case *c) {
  const kt_attn_case *a = &c->attn;
  const double e = (double)kite_dtype_size(c->dtype), D = (double)a->head_dim;
  const int vl = is_varlen(c->op);
  const double nq = vl ? (double)a->tokens : (double)(a->batch * a->sq);
  const double nk = vl ? (double)sum_lens(a->seq_lens, a->batch) : (double)(a->batch * a->sk);
  const double q = nq * a->hq * D * e, kv = 2 * nk * a->hkv * D * e, lse = 4 * nq * a->hq;
  if (c->op == KITE_OP_SDPA_VARLEN) return 2 * q + kv + (a->with_lse ? lse : 0);
  return 4 * q + 2 * kv + lse;
}

/* Forward: 4 D per (query head, key) pair; backward: 10 D (s, dp, dq, dk, dv: five GEMMs of
 * 2 D each, recomputing the scores as FlashAttention does). */
static double attn_train_flops(const kt_case *c) {
  const double per = c->op == KITE_OP_SDPA_VARLEN ? 4 : 10;
  return per * pairs(c) * (double)c->attn.hq * (double)c->attn.head_dim;
}

/* NMSE bounds [f32, f16, bf16]. The forward: driver_attn.c's bounds (the same rounding). The
 * backward: outputs rounded once to the dtype as ref rounds them (~1e-14 / 4e-8 / 3e-6), the
 * f32 sums of a kernel over at most a few hundred keys (~1e-12 relative in NMSE), and on a
 * tensor-core device P and dS rounded to 16 bits before their GEMMs (each a relative rms of
 * ~2^-11 / 2^-8 over sqrt(3): ~1e-7 / 5e-6 in NMSE per product, a few products deep). A wrong
 * mask, position or head changes affected rows by O(1): far above every bound. */
static double attn_train_bound(kite_op op, kite_dtype t) {
  static const double fwd[3] = {1e-10, 2e-6, 1e-4}, bwd[3] = {1e-9, 1e-5, 3e-4};
  const int i = t == KITE_DTYPE_F16 ? 1 : t == KITE_DTYPE_BF16 ? 2 : 0;
  return op == KITE_OP_SDPA_VARLEN ? fwd[i] : bwd[i];
}

/* ---- cases ------------------------------------------------------------------------------- */

static kt_case dense_case(kite_dtype t, int64_t B, int64_t hq, int64_t hkv, int64_t sq, int64_t sk,
                          int64_t D) {
  kt_case c = kt_case_default(KITE_OP_SDPA_BACKWARD, t, 0, 0);
  kt_attn_case *a = &c.attn;
  a->opts = kite_attn_opts_default();
  a->batch = B, a->hq = hq, a->hkv = hkv, a->sq = sq, a->sk = sk, a->head_dim = D;
  return c;
}

/* B sequences of ql[b] queries and kl[b] keys; sq / sk hold the max_seqlen bounds. */
static kt_case varlen_case(kite_op op, kite_dtype t, int64_t hq, int64_t hkv, int64_t D, int B,
                           const int32_t *ql, const int32_t *kl) {
  kt_case c = dense_case(t, B, hq, hkv, 0, 0, D);
  c.op = op;
  kt_attn_case *a = &c.attn;
  for (int b = 0; b < B && b < KT_MAX_SEQS; b++) {
    a->q_lens[b] = ql[b], a->seq_lens[b] = kl[b];
    a->tokens += ql[b];
    if (ql[b] > a->sq) a->sq = ql[b];
    if (kl[b] > a->sk) a->sk = kl[b];
  }
  return c;
}

typedef struct dense_geom {
  int64_t batch, hq, hkv, sq, sk, head_dim;
} dense_geom;

static const dense_geom g_dense[] = {
    {2, 4, 2, 9, 13, 32},     {1, 6, 2, 20, 7, 64}, /* Sq > Sk */
    {1, 8, 8, 33, 70, 128},   {2, 4, 1, 16, 16, 80},
    {1, 2, 1, 130, 260, 128}, /* several key blocks and query tiles: dq added in turn */
    {2, 4, 2, 200, 300, 64},  /* the same at head_dim 64, queries ending mid-tile */
};

typedef struct varlen_geom {
  int64_t hq, hkv, head_dim;
  int batch;
  int32_t ql[6], kl[6];
} varlen_geom;

static const varlen_geom g_varlen[] = {
    {4, 2, 32, 5, {5, 0, 3, 9, 1}, {5, 4, 0, 12, 1}}, /* an empty side, Sq < Sk, both 1 */
    {8, 2, 64, 3, {40, 17, 6}, {40, 9, 30}},          /* Sq > Sk and Sq < Sk */
    {6, 6, 128, 2, {1, 33}, {70, 33}},
    {2, 1, 64, 2, {130, 70}, {260, 70}}, /* several key blocks and query tiles */
};

/* Options tried: {scale, softcap, window_left, gqa, causal}, mask kind (dense only), bshd. */
typedef struct train_variant {
  kite_attn_opts opts;
  int mask, bshd;
} train_variant;

static const train_variant g_variants[] = {
    {{0.0f, 0.0f, -1, KITE_GQA_GROUPED, 1}, MASK_NONE, 0},
    {{0.0f, 0.0f, -1, KITE_GQA_INTERLEAVED, 0}, MASK_BOOL, 1},
    {{0.0f, 3.0f, -1, KITE_GQA_GROUPED, 1}, MASK_F32, 0},
    /* unmasked (the Hopper kernels' calls): softcap, then a window */
    {{0.0f, 2.5f, -1, KITE_GQA_GROUPED, 0}, MASK_NONE, 1},
    {{0.3f, 0.0f, 4, KITE_GQA_INTERLEAVED, 1}, MASK_U8, 0},
    {{0.0f, 2.0f, 6, KITE_GQA_GROUPED, 0}, MASK_QT_BCAST, 1},
    {{0.0f, 0.0f, -1, KITE_GQA_GROUPED, 0}, MASK_F32_B1, 0},
    {{0.2f, 0.0f, 37, KITE_GQA_INTERLEAVED, 1}, MASK_NONE, 0},
};

static void attn_train_check_cases(kite_op op, kite_dtype t, int quick, kt_case_list *l) {
  const int nv = quick ? 4 : KT_COUNT(g_variants);
  if (op == KITE_OP_SDPA_BACKWARD) {
    for (int k = 0; k < (quick ? 2 : KT_COUNT(g_dense)); k++)
      for (int vi = 0; vi < nv; vi++) {
        const dense_geom *g = &g_dense[k];
        kt_case c = dense_case(t, g->batch, g->hq, g->hkv, g->sq, g->sk, g->head_dim);
        c.attn.opts = g_variants[vi].opts;
        c.attn.mask = g_variants[vi].mask;
        c.attn.bshd = g_variants[vi].bshd;
        c.attn.pad = (k + vi) % 3 == 1 ? 3 : 0;
        c.attn.sinks = (k + vi) % 3 == 2;
        kt_case_push(l, c);
      }
    return;
  }
  for (int k = 0; k < (quick ? 2 : KT_COUNT(g_varlen)); k++)
    for (int vi = 0; vi < nv; vi++) {
      const varlen_geom *g = &g_varlen[k];
      kt_case c = varlen_case(op, t, g->hq, g->hkv, g->head_dim, g->batch, g->ql, g->kl);
      c.attn.opts = g_variants[vi].opts;
      c.attn.with_lse = vi % 2 == 0;
      c.attn.pad = (k + vi) % 3 == 1 ? 3 : 0;
      c.attn.sinks = (k + vi) % 3 == 2;
      if (vi == 1) c.attn.sq += 5, c.attn.sk += 2; /* loose max_seqlen bounds */
      kt_case_push(l, c);
    }
}

/* Bench: the host forward fills the backward's o and lse, so the shapes stay mid-sized. */
static void attn_train_bench_cases(kite_op op, kite_dtype t, int llm, kt_case_list *l) {
  const int64_t S = llm ? 1024 : 512;
  for (int causal = 1; causal >= 0; causal--) {
    if (!llm && !causal) break;
    if (op == KITE_OP_SDPA_BACKWARD) {
      kt_case c = dense_case(t, 1, 16, 4, S, S, 128);
      c.attn.opts.causal = causal;
      kt_case_push(l, c);
      continue;
    }
    int32_t ql[4] = {(int32_t)S, (int32_t)S / 2, (int32_t)S / 4, (int32_t)S / 4};
    kt_case c = varlen_case(op, t, 16, 4, 128, 4, ql, ql);
    c.attn.opts.causal = causal;
    kt_case_push(l, c);
  }
}

const kt_family_ops kt_family_attn_train = {
    KT_FAMILY_FIELDS(attn_train, attn_train_has, attn_train_flops)};
