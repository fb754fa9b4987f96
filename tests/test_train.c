/*
 * The training ops' promises that the conformance harness does not see: reductions over rows
 * (dw and db of the norm backward, dtable of embedding backward, the reduced losses) give the
 * same bits whatever the thread count, on every kernel that runs here; a loss over rows that are
 * all ignored is 0 with zero gradients; the gradient written over the logits (in place) equals
 * the one written elsewhere.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kite/backend.h"

static DLTensor tensor(void *p, DLDataType t, int ndim, int64_t *shape) {
  DLTensor d = {.data = p,
                .device = {kDLCPU, 0},
                .ndim = ndim,
                .dtype = t,
                .shape = shape,
                .strides = NULL,
                .byte_offset = 0};
  return d;
}

static const DLDataType F32 = {kDLFloat, 32, 1}, BF16 = {kDLBfloat, 16, 1}, I32 = {kDLInt, 32, 1};

static uint32_t g_rng = 12345u;
static float frand(void) {
  g_rng = g_rng * 1664525u + 1013904223u;
  return (float)(g_rng >> 8) * 0x1p-24f * 2.0f - 1.0f;
}

/* Fills n bf16 values in [-1, 1). */
static void fill_bf16(uint16_t *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float f = frand();
    uint32_t u;
    memcpy(&u, &f, 4);
    p[i] = (uint16_t)(u >> 16);
  }
}

/* Every kernel of op that runs here, by its "backend.variant" name, into names[]; for f32 calls
 * (bf16 0) not the bf16-only variants. */
static int kernels_of(kite_op op, int bf16, char names[][64], int max) {
  int n = 0;
  for (size_t i = 0; i < kite_kernel_count() && n < max; i++) {
    kite_kernel_info k;
    if (kite_kernel_get(i, &k) != KITE_OK || k.op != op || !k.runs_here) continue;
    if (!bf16 && strstr(k.variant, "bf16")) continue;
    snprintf(names[n++], 64, "%s.%s", k.backend, k.variant);
  }
  return n;
}

static void pin(kite_op op, const char *kernel) {
  char cfg[160];
  snprintf(cfg, sizeof cfg, "%s=%s", kite_op_name(op), kernel);
  CHECK(kite_config_set(cfg) == KITE_OK, "pin %s", cfg);
}

/* rms/layer norm backward: dw, db bits with 1 and 2 threads (and again with 2). */
static void norm_determinism(kite_ctx *c1, kite_ctx *c2) {
  enum { R = 300, H = 1031 };
  uint16_t *x = malloc(R * H * 2), *dy = malloc(R * H * 2), *dx = malloc(R * H * 2);
  uint16_t w[H], dw[3][H], db[3][H];
  fill_bf16(x, R * H), fill_bf16(dy, R * H), fill_bf16(w, H);
  int64_t s2[2] = {R, H}, s1[1] = {H};
  DLTensor X = tensor(x, BF16, 2, s2), DY = tensor(dy, BF16, 2, s2), DX = tensor(dx, BF16, 2, s2);
  DLTensor W = tensor(w, BF16, 1, s1);
  char names[16][64];
  const kite_op ops[2] = {KITE_OP_RMS_NORM_BACKWARD, KITE_OP_LAYER_NORM_BACKWARD};
  for (int o = 0; o < 2; o++) {
    const int n = kernels_of(ops[o], 1, names, 16);
    for (int k = 0; k < n; k++) {
      pin(ops[o], names[k]);
      snprintf(g_where, sizeof g_where, "%s %.60s", kite_op_name(ops[o]), names[k]);
      for (int run = 0; run < 3; run++) {
        kite_ctx *c = run == 0 ? c1 : c2;
        DLTensor DW = tensor(dw[run], BF16, 1, s1), DB = tensor(db[run], BF16, 1, s1);
        kite_status s = o == 0 ? kite_rms_norm_backward(c, &X, &W, &DY, 1e-6f, 0.0f, &DX, &DW)
                               : kite_layer_norm_backward(c, &X, &W, &DY, 1e-6f, &DX, &DW, &DB);
        CHECK(s == KITE_OK, "call %d", run);
      }
      CHECK(!memcmp(dw[0], dw[1], sizeof dw[0]), "dw differs between 1 and 2 threads");
      CHECK(!memcmp(dw[1], dw[2], sizeof dw[0]), "dw differs between two runs");
      if (o == 1) CHECK(!memcmp(db[0], db[1], sizeof db[0]), "db differs between 1 and 2 threads");
    }
  }
  g_where[0] = '\0';
  kite_config_set("");
  free(x), free(dy), free(dx);
}

/* embedding backward: dtable bits with 1 and 2 threads, many tokens on few ids. */
static void embedding_determinism(kite_ctx *c1, kite_ctx *c2) {
  enum { T = 2000, V = 37, H = 300 };
  float *dy = malloc(T * H * 4), *dt[2] = {malloc(V * H * 4), malloc(V * H * 4)};
  int32_t ids[T];
  for (int i = 0; i < T * H; i++) dy[i] = frand();
  for (int i = 0; i < T; i++) ids[i] = (int32_t)(i * 7 % (V + 3)) - 1; /* some outside [0, V) */
  int64_t st[1] = {T}, sd[2] = {T, H}, sv[2] = {V, H};
  DLTensor I = tensor(ids, I32, 1, st), DY = tensor(dy, F32, 2, sd);
  char names[16][64];
  const int n = kernels_of(KITE_OP_EMBEDDING_BACKWARD, 0, names, 16);
  for (int k = 0; k < n; k++) {
    pin(KITE_OP_EMBEDDING_BACKWARD, names[k]);
    snprintf(g_where, sizeof g_where, "embedding_backward %.60s", names[k]);
    for (int run = 0; run < 2; run++) {
      DLTensor D = tensor(dt[run], F32, 2, sv);
      CHECK(kite_embedding_backward(run ? c2 : c1, &I, &DY, &D) == KITE_OK, "call");
    }
    CHECK(!memcmp(dt[0], dt[1], V * H * 4), "dtable differs between 1 and 2 threads");
  }
  g_where[0] = '\0';
  kite_config_set("");
  free(dy), free(dt[0]), free(dt[1]);
}

/* Losses: all rows ignored -> 0 and zero gradients; the reduced loss the same with 1 and 2
 * threads; in place dlogits equal to out of place. */
static void losses(kite_ctx *c1, kite_ctx *c2) {
  enum { N = 64, V = 1000, H = 16 };
  float *logits = malloc(N * V * 4), *g1 = malloc(N * V * 4), *g2 = malloc(N * V * 4);
  float lse[N], loss[2], dloss = 1.0f, h[N * H], w[V * H], dh[N * H], dw[V * H];
  int32_t tg[N], ignored[N];
  for (int i = 0; i < N * V; i++) logits[i] = 4.0f * frand();
  for (int i = 0; i < N * H; i++) h[i] = frand();
  for (int i = 0; i < V * H; i++) w[i] = frand();
  for (int i = 0; i < N; i++) tg[i] = (i * 37) % V, ignored[i] = -100;
  int64_t sl[2] = {N, V}, sn[1] = {N}, s1[1] = {1}, sh[2] = {N, H}, sw[2] = {V, H};
  DLTensor L = tensor(logits, F32, 2, sl), G1 = tensor(g1, F32, 2, sl), G2 = tensor(g2, F32, 2, sl);
  DLTensor T = tensor(tg, I32, 1, sn), TI = tensor(ignored, I32, 1, sn),
           E = tensor(lse, F32, 1, sn);
  DLTensor DL = tensor(&dloss, F32, 1, s1), HH = tensor(h, F32, 2, sh), WW = tensor(w, F32, 2, sw);
  DLTensor DH = tensor(dh, F32, 2, sh), DW = tensor(dw, F32, 2, sw);
  kite_ce_opts o = kite_ce_opts_default(); /* mean */
  o.label_smoothing = 0.1f, o.z_loss = 1e-3f;
  char names[16][64];
  int n = kernels_of(KITE_OP_CROSS_ENTROPY, 0, names, 16);
  for (int k = 0; k < n; k++) {
    pin(KITE_OP_CROSS_ENTROPY, names[k]);
    snprintf(g_where, sizeof g_where, "cross_entropy %.60s", names[k]);
    for (int run = 0; run < 2; run++) {
      DLTensor LS = tensor(&loss[run], F32, 1, s1);
      CHECK(kite_cross_entropy(run ? c2 : c1, &L, &T, &o, &LS, &E) == KITE_OK, "call");
    }
    CHECK(!memcmp(&loss[0], &loss[1], 4), "mean loss differs between 1 and 2 threads");
    DLTensor LS = tensor(&loss[0], F32, 1, s1);
    CHECK(kite_cross_entropy(c2, &L, &TI, &o, &LS, &E) == KITE_OK && loss[0] == 0.0f,
          "every row ignored: loss %g, want 0", (double)loss[0]);
  }
  kite_config_set("");
  n = kernels_of(KITE_OP_CROSS_ENTROPY_BACKWARD, 0, names, 16);
  for (int k = 0; k < n; k++) {
    pin(KITE_OP_CROSS_ENTROPY_BACKWARD, names[k]);
    snprintf(g_where, sizeof g_where, "cross_entropy_backward %.60s", names[k]);
    DLTensor LS = tensor(&loss[0], F32, 1, s1);
    CHECK(kite_cross_entropy(c2, &L, &T, &o, &LS, &E) == KITE_OK, "forward");
    CHECK(kite_cross_entropy_backward(c2, &L, &T, &E, &DL, &o, &G1) == KITE_OK, "out of place");
    memcpy(g2, logits, N * V * 4);
    CHECK(kite_cross_entropy_backward(c2, &G2, &T, &E, &DL, &o, &G2) == KITE_OK, "in place");
    CHECK(!memcmp(g1, g2, N * V * 4), "in place dlogits differ from out of place");
    CHECK(kite_cross_entropy_backward(c2, &L, &TI, &E, &DL, &o, &G1) == KITE_OK, "all ignored");
    int zeros = 1;
    for (int i = 0; i < N * V; i++) zeros &= g1[i] == 0.0f;
    CHECK(zeros, "every row ignored: dlogits not all zero");
  }
  kite_config_set("");
  n = kernels_of(KITE_OP_FUSED_LINEAR_CROSS_ENTROPY, 0, names, 16);
  for (int k = 0; k < n; k++) {
    pin(KITE_OP_FUSED_LINEAR_CROSS_ENTROPY, names[k]);
    snprintf(g_where, sizeof g_where, "fused_linear_cross_entropy %.60s", names[k]);
    kite_flce_opts fo = {.ce = o, .chunk_bytes = 4096};
    DLTensor LS = tensor(&loss[0], F32, 1, s1);
    CHECK(kite_fused_linear_cross_entropy(c2, &HH, &WW, NULL, &TI, &fo, &LS, &DH, &DW, NULL) ==
              KITE_OK,
          "all ignored");
    int zeros = loss[0] == 0.0f;
    for (int i = 0; i < N * H; i++) zeros &= dh[i] == 0.0f;
    for (int i = 0; i < V * H; i++) zeros &= dw[i] == 0.0f;
    CHECK(zeros, "every row ignored: loss %g, gradients not all zero", (double)loss[0]);
    float l1, dw2[V * H];
    DLTensor L1 = tensor(&l1, F32, 1, s1), DW2 = tensor(dw2, F32, 2, sw);
    CHECK(kite_fused_linear_cross_entropy(c1, &HH, &WW, NULL, &T, &fo, &LS, NULL, &DW, NULL) ==
              KITE_OK,
          "1 thread");
    CHECK(kite_fused_linear_cross_entropy(c2, &HH, &WW, NULL, &T, &fo, &L1, NULL, &DW2, NULL) ==
              KITE_OK,
          "2 threads");
    CHECK(loss[0] == l1 && !memcmp(dw, dw2, sizeof dw),
          "loss or dw differ between 1 and 2 threads");
  }
  g_where[0] = '\0';
  kite_config_set("");
  free(logits), free(g1), free(g2);
}

int main(void) {
  kite_ctx *c1 = NULL, *c2 = NULL;
  kite_ctx_params p = kite_ctx_params_default();
  p.num_threads = 1;
  if (kite_ctx_create(&p, &c1) != KITE_OK) return 1;
  p.num_threads = 2;
  if (kite_ctx_create(&p, &c2) != KITE_OK) return 1;
  norm_determinism(c1, c2);
  embedding_determinism(c1, c2);
  losses(c1, c2);
  kite_ctx_destroy(c1);
  kite_ctx_destroy(c2);
  return check_summary();
}
