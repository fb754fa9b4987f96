/*
 * The attention backwards' own rules, beyond `kite check` (which compares with ref):
 *   - the same bits for any thread count and run after run (dk / dv of a GQA group are summed in
 *     a fixed order), for every kernel of sdpa_backward and sdpa_varlen_backward that runs here;
 *   - a call with key rows but no query rows still writes dk = dv = 0.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define B 2
#define HQ 8
#define HKV 2
#define SQ 45
#define SK 70
#define D 40
#define NQ (B * HQ * SQ * D)
#define NK (B * HKV * SK * D)

static float g_q[NQ], g_k[NK], g_v[NK], g_o[NQ], g_dout[NQ], g_lse[B * HQ * SQ];

static DLTensor dense(float *p, int64_t *shape) {
  DLTensor t = {
      .data = p, .device = {kDLCPU, 0}, .ndim = 4, .dtype = {kDLFloat, 32, 1}, .shape = shape};
  return t;
}

static float unit(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (float)(*s >> 40) * 0x1p-24f * 2.0f - 1.0f;
}

/* dq, dk, dv of one call of sdpa_backward (varlen: the batch as 2 packed sequences of SQ
 * queries and SK keys each) with `threads` threads, into out (NQ + 2 NK floats). */
static kite_status run(int varlen, int threads, const kite_attn_opts *opts, float *out) {
  kite_ctx_params p = kite_ctx_params_default();
  p.num_threads = threads;
  kite_ctx *ctx;
  kite_status s = kite_ctx_create(&p, &ctx);
  if (s != KITE_OK) return s;
  int64_t qs[4] = {B, HQ, SQ, D}, ks[4] = {B, HKV, SK, D}, ls[3] = {B, HQ, SQ};
  DLTensor q = dense(g_q, qs), k = dense(g_k, ks), v = dense(g_v, ks), o = dense(g_o, qs);
  DLTensor dout = dense(g_dout, qs), dq = dense(out, qs), dk = dense(out + NQ, ks);
  DLTensor dv = dense(out + NQ + NK, ks), lse = dense(g_lse, ls);
  lse.ndim = 3;
  if (!varlen) {
    s = kite_sdpa(ctx, &q, &k, &v, NULL, NULL, opts, &o, &lse);
    if (s == KITE_OK)
      s = kite_sdpa_backward(ctx, &q, &k, &v, NULL, NULL, opts, &o, &lse, &dout, &dq, &dk, &dv,
                             NULL);
  } else { /* the same memory as [T, H, D] */
    int64_t qv[3] = {B * SQ, HQ, D}, kv[3] = {B * SK, HKV, D}, lv[2] = {B * SQ, HQ}, cs[1] = {3};
    int32_t cq[3] = {0, SQ, 2 * SQ}, ck[3] = {0, SK, 2 * SK};
    DLTensor *t3[] = {&q, &o, &dout, &dq, &k, &v, &dk, &dv};
    for (int i = 0; i < 8; i++) t3[i]->ndim = 3, t3[i]->shape = i < 4 ? qv : kv;
    lse.ndim = 2, lse.shape = lv;
    DLTensor cuq = {
        .data = cq, .device = {kDLCPU, 0}, .ndim = 1, .dtype = {kDLInt, 32, 1}, .shape = cs};
    DLTensor cuk = cuq;
    cuk.data = ck;
    s = kite_sdpa_varlen(ctx, &q, &k, &v, &cuq, &cuk, SQ, SK, NULL, opts, &o, &lse);
    if (s == KITE_OK)
      s = kite_sdpa_varlen_backward(ctx, &q, &k, &v, &cuq, &cuk, SQ, SK, NULL, opts, &o, &lse,
                                    &dout, &dq, &dk, &dv, NULL);
  }
  kite_ctx_destroy(ctx);
  return s;
}

static void test_same_bits(const char *kernel) {
  static float first[NQ + 2 * NK], again[NQ + 2 * NK];
  kite_attn_opts opts = kite_attn_opts_default();
  opts.softcap = 4.0f;
  for (int varlen = 0; varlen <= 1; varlen++)
    for (int gqa = 0; gqa <= 1; gqa++) {
      opts.gqa = gqa ? KITE_GQA_INTERLEAVED : KITE_GQA_GROUPED;
      snprintf(g_where, sizeof g_where, "%s %s %s", kernel, varlen ? "varlen" : "dense",
               gqa ? "interleaved" : "grouped");
      kite_status s = run(varlen, 1, &opts, first);
      CHECK(s == KITE_OK, "1 thread: %s\n", kite_status_name(s));
      static const int threads[] = {2, 3, 8, 1};
      for (size_t i = 0; s == KITE_OK && i < sizeof threads / sizeof *threads; i++) {
        kite_status s2 = run(varlen, threads[i], &opts, again);
        CHECK(s2 == KITE_OK && memcmp(first, again, sizeof first) == 0,
              "%d threads: %s, results differ from 1 thread's\n", threads[i], kite_status_name(s2));
      }
      float norm = 0.0f;
      for (int i = 0; i < NQ + 2 * NK; i++) norm += fabsf(first[i]);
      CHECK(norm > 0.0f && isfinite(norm), "gradients all zero or not finite (%g)\n", (double)norm);
    }
  g_where[0] = '\0';
}

/* No query: dk and dv written with zeros. */
static void test_no_queries(kite_ctx *ctx) {
  float k[2 * 3 * 4] = {1, 2, 3}, dk[24], dv[24], dummy[1] = {0};
  for (int i = 0; i < 24; i++) dk[i] = dv[i] = NAN;
  int64_t qs[4] = {1, 2, 0, 4}, ks[4] = {1, 2, 3, 4}, ls[3] = {1, 2, 0};
  DLTensor q = dense(dummy, qs), kt = dense(k, ks), o = dense(dummy, qs), dout = dense(dummy, qs);
  DLTensor dq = dense(dummy, qs), dkt = dense(dk, ks), dvt = dense(dv, ks), lse = dense(dummy, ls);
  lse.ndim = 3;
  kite_status s = kite_sdpa_backward(ctx, &q, &kt, &kt, NULL, NULL, NULL, &o, &lse, &dout, &dq,
                                     &dkt, &dvt, NULL);
  int zeros = 1;
  for (int i = 0; i < 24; i++) zeros &= dk[i] == 0.0f && dv[i] == 0.0f;
  CHECK(s == KITE_OK && zeros, "Sq = 0: %s, dk / dv not all zero\n", kite_status_name(s));
}

int main(void) {
  uint64_t seed = 7;
  for (int i = 0; i < NQ; i++) g_q[i] = unit(&seed), g_dout[i] = unit(&seed);
  for (int i = 0; i < NK; i++) g_k[i] = unit(&seed), g_v[i] = unit(&seed);
  kite_ctx *ctx;
  if (kite_ctx_create(NULL, &ctx) != KITE_OK) return 1;
  /* every kernel of the two backwards that runs here, each pinned */
  for (size_t i = 0; i < kite_kernel_count(); i++) {
    kite_kernel_info k;
    if (kite_kernel_get(i, &k) != KITE_OK || k.op != KITE_OP_SDPA_BACKWARD || !k.runs_here)
      continue;
    char cfg[320], name[128];
    snprintf(name, sizeof name, "%s.%s", k.backend, k.variant);
    snprintf(cfg, sizeof cfg, "sdpa_backward=%s,sdpa_varlen_backward=%s", name, name);
    CHECK(kite_config_set(cfg) == KITE_OK, "config %s\n", cfg);
    test_same_bits(name);
    test_no_queries(ctx);
  }
  kite_config_set(NULL);
  kite_ctx_destroy(ctx);
  return check_summary();
}
