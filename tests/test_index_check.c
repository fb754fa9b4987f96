/*
 * KITE_CHECK_INDICES on a device (kite.h): bad index values in device memory leave the kernels in
 * bounds and are reported by the next synchronization as INVALID_ARG naming the op and the value;
 * the report clears the record; without the flag the same calls succeed (the documented device
 * behaviour). Needs a device that is not the host (the CUDA plugin and a GPU): elsewhere the test
 * reports a skip (exit code 77).
 */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "kite/kite.h"

/* got == want, and a message holding needle when there is one. */
static void expect(const char *what, kite_status got, kite_status want, const char *needle) {
  CHECK(got == want && (!needle || strstr(kite_last_error(), needle)), "%s: got %s, want %s%s%s",
        what, kite_status_name(got), kite_status_name(want), needle ? " with " : "",
        needle ? needle : "");
}

typedef struct dev {
  kite_ctx *ctx;
  void *q, *kc, *vc, *bt, *sl, *o, *x, *w, *gs, *y, *tg;
} dev;

static DLTensor t(void *data, DLDevice d, DLDataType dt, int ndim, int64_t *shape) {
  DLTensor r = {.data = data, .device = d, .ndim = ndim, .dtype = dt, .shape = shape};
  return r;
}

static void *upload(kite_ctx *ctx, const void *host, size_t bytes) {
  void *p = NULL;
  if (kite_malloc(ctx, bytes, &p) != KITE_OK) return NULL;
  if (host && kite_memcpy(ctx, p, host, bytes, KITE_COPY_HOST_TO_DEVICE) != KITE_OK) return NULL;
  return p;
}

/* paged_decode over 2 sequences: caches [4 blocks, Hkv 2, block 4, D 8], block_table [2, 3]. */
static kite_status decode(dev *d, DLDevice dv, const int32_t *bt, const int32_t *sl) {
  const DLDataType f32 = {kDLFloat, 32, 1}, i32 = {kDLInt, 32, 1};
  if (kite_memcpy(d->ctx, d->bt, bt, 6 * sizeof *bt, KITE_COPY_HOST_TO_DEVICE) != KITE_OK ||
      kite_memcpy(d->ctx, d->sl, sl, 2 * sizeof *sl, KITE_COPY_HOST_TO_DEVICE) != KITE_OK)
    return KITE_ERR_INTERNAL;
  int64_t qs[3] = {2, 4, 8}, cs[4] = {4, 2, 4, 8}, bs[2] = {2, 3}, ss[1] = {2};
  DLTensor q = t(d->q, dv, f32, 3, qs), kc = t(d->kc, dv, f32, 4, cs),
           vc = t(d->vc, dv, f32, 4, cs), btt = t(d->bt, dv, i32, 2, bs),
           slt = t(d->sl, dv, i32, 1, ss), o = t(d->o, dv, f32, 3, qs);
  return kite_paged_decode(d->ctx, &q, &kc, &vc, &btt, &slt, NULL, NULL, &o, NULL);
}

/* group_gemm x[5, 8] over 2 groups of w[2, 6, 8]. */
static kite_status group_gemm(dev *d, DLDevice dv, const int32_t *sizes) {
  const DLDataType f32 = {kDLFloat, 32, 1}, i32 = {kDLInt, 32, 1};
  if (kite_memcpy(d->ctx, d->gs, sizes, 2 * sizeof *sizes, KITE_COPY_HOST_TO_DEVICE) != KITE_OK)
    return KITE_ERR_INTERNAL;
  int64_t xs[2] = {5, 8}, ws[3] = {2, 6, 8}, gs[1] = {2}, ys[2] = {5, 6};
  DLTensor x = t(d->x, dv, f32, 2, xs), w = t(d->w, dv, f32, 3, ws), g = t(d->gs, dv, i32, 1, gs),
           y = t(d->y, dv, f32, 2, ys);
  return kite_group_gemm(d->ctx, &x, &w, &g, &y);
}

/* cross_entropy (reduction none) over x[5, 8] of zeros -> loss[5] in y: log 8 a row, 0 for an
 * ignored one. */
static kite_status cross_entropy(dev *d, DLDevice dv, const int32_t *targets) {
  const DLDataType f32 = {kDLFloat, 32, 1}, i32 = {kDLInt, 32, 1};
  if (kite_memcpy(d->ctx, d->tg, targets, 5 * sizeof *targets, KITE_COPY_HOST_TO_DEVICE) != KITE_OK)
    return KITE_ERR_INTERNAL;
  int64_t xs[2] = {5, 8}, ns[1] = {5};
  DLTensor x = t(d->x, dv, f32, 2, xs), tg = t(d->tg, dv, i32, 1, ns),
           loss = t(d->y, dv, f32, 1, ns);
  kite_ce_opts o = kite_ce_opts_default();
  o.reduction = KITE_REDUCTION_NONE;
  return kite_cross_entropy(d->ctx, &x, &tg, &o, &loss, NULL);
}

/* fused_linear_cross_entropy: h = x[5, 8], w[6, 8] (V = 6), mean loss in y, no gradients. */
static kite_status flce(dev *d, DLDevice dv, const int32_t *targets) {
  const DLDataType f32 = {kDLFloat, 32, 1}, i32 = {kDLInt, 32, 1};
  if (kite_memcpy(d->ctx, d->tg, targets, 5 * sizeof *targets, KITE_COPY_HOST_TO_DEVICE) != KITE_OK)
    return KITE_ERR_INTERNAL;
  int64_t hs[2] = {5, 8}, ws[2] = {6, 8}, ns[1] = {5}, ls[1] = {1};
  DLTensor h = t(d->x, dv, f32, 2, hs), w = t(d->w, dv, f32, 2, ws), tg = t(d->tg, dv, i32, 1, ns),
           loss = t(d->y, dv, f32, 1, ls);
  return kite_fused_linear_cross_entropy(d->ctx, &h, &w, NULL, &tg, NULL, &loss, NULL, NULL, NULL);
}

static int make(dev *d, DLDevice dv, uint32_t checks) {
  memset(d, 0, sizeof *d);
  kite_ctx_params p = kite_ctx_params_default();
  p.device = dv;
  p.checks = checks;
  if (kite_ctx_create(&p, &d->ctx) != KITE_OK) return 0;
  static float zeros[4 * 2 * 4 * 8];
  d->q = upload(d->ctx, zeros, 64 * 4), d->kc = upload(d->ctx, zeros, sizeof zeros);
  d->vc = upload(d->ctx, zeros, sizeof zeros), d->bt = upload(d->ctx, NULL, 6 * 4);
  d->sl = upload(d->ctx, NULL, 2 * 4), d->o = upload(d->ctx, NULL, 64 * 4);
  d->x = upload(d->ctx, zeros, 40 * 4), d->w = upload(d->ctx, zeros, 96 * 4);
  d->gs = upload(d->ctx, NULL, 2 * 4), d->y = upload(d->ctx, NULL, 30 * 4);
  d->tg = upload(d->ctx, NULL, 5 * 4);
  return d->q && d->kc && d->vc && d->bt && d->sl && d->o && d->x && d->w && d->gs && d->y && d->tg;
}

static void release(dev *d) {
  void *all[] = {d->q, d->kc, d->vc, d->bt, d->sl, d->o, d->x, d->w, d->gs, d->y, d->tg};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) kite_free(d->ctx, all[i]);
  kite_ctx_destroy(d->ctx);
}

int main(void) {
  const DLDevice dv = {kDLCUDA, 0};
  dev on, off;
  if (!make(&on, dv, KITE_CHECK_INDICES)) {
    printf("skipped: no CUDA device (%s)\n", kite_last_error());
    return 77;
  }
  if (!make(&off, dv, 0)) {
    printf("FAIL cannot set up the unchecked ctx: %s\n", kite_last_error());
    return 1;
  }
  const int32_t bt[6] = {0, 1, 2, 3, 0, 1}, bad_bt[6] = {9, 1, 2, 3, 0, 1};
  const int32_t sl[2] = {5, 12}, long_sl[2] = {5, 13}, neg_sl[2] = {-4, 12};

  expect("valid decode", decode(&on, dv, bt, sl), KITE_OK, NULL);
  expect("valid decode: synchronize", kite_ctx_synchronize(on.ctx), KITE_OK, NULL);

  expect("seq_len past the table: call", decode(&on, dv, bt, long_sl), KITE_OK, NULL);
  expect("seq_len past the table: synchronize", kite_ctx_synchronize(on.ctx), KITE_ERR_INVALID_ARG,
         "paged_decode: seq_lens: sequence 1: seq_len 13");
  expect("the report clears the record", kite_ctx_synchronize(on.ctx), KITE_OK, NULL);

  expect("negative seq_len: call", decode(&on, dv, bt, neg_sl), KITE_OK, NULL);
  expect("negative seq_len: synchronize", kite_ctx_synchronize(on.ctx), KITE_ERR_INVALID_ARG,
         "seq_len -4");

  expect("block id past the cache: call", decode(&on, dv, bad_bt, sl), KITE_OK, NULL);
  expect("block id past the cache: synchronize", kite_ctx_synchronize(on.ctx), KITE_ERR_INVALID_ARG,
         "block id 9");

  const int32_t sizes[2] = {2, 3}, bad_sum[2] = {2, 4}, negative[2] = {-1, 6};
  expect("valid group_gemm", group_gemm(&on, dv, sizes), KITE_OK, NULL);
  expect("valid group_gemm: synchronize", kite_ctx_synchronize(on.ctx), KITE_OK, NULL);
  expect("group sizes summing to 6: call", group_gemm(&on, dv, bad_sum), KITE_OK, NULL);
  expect("group sizes summing to 6: synchronize", kite_ctx_synchronize(on.ctx),
         KITE_ERR_INVALID_ARG, "sum to 6");
  expect("negative group size: call", group_gemm(&on, dv, negative), KITE_OK, NULL);
  expect("negative group size: synchronize", kite_ctx_synchronize(on.ctx), KITE_ERR_INVALID_ARG,
         "group_sizes[0] = -1");

  const int32_t targets[5] = {0, 1, 7, 3, -100}, bad_targets[5] = {0, 8, 2, 3, -100};
  expect("valid cross_entropy", cross_entropy(&on, dv, targets), KITE_OK, NULL);
  expect("valid cross_entropy: synchronize", kite_ctx_synchronize(on.ctx), KITE_OK, NULL);
  expect("target past V: call", cross_entropy(&on, dv, bad_targets), KITE_OK, NULL);
  expect("target past V: synchronize", kite_ctx_synchronize(on.ctx), KITE_ERR_INVALID_ARG,
         "cross_entropy: targets: targets[1] = 8");
  expect("flce target past V: call", flce(&on, dv, bad_targets), KITE_OK, NULL);
  expect("flce target past V: synchronize", kite_ctx_synchronize(on.ctx), KITE_ERR_INVALID_ARG,
         "fused_linear_cross_entropy: targets: targets[1] = 8");

  /* without the flag: the documented device behaviour, no error */
  float loss[5] = {0};
  expect("unchecked: target past V", cross_entropy(&off, dv, bad_targets), KITE_OK, NULL);
  expect("unchecked: read the losses",
         kite_memcpy(off.ctx, loss, off.y, sizeof loss, KITE_COPY_DEVICE_TO_HOST), KITE_OK, NULL);
  /* zero logits: log 8 a row; the bad row NaN; the ignored one 0 */
  const int loss_ok = loss[0] > 2.0794f && loss[0] < 2.0795f && loss[1] != loss[1] &&
                      loss[2] == loss[0] && loss[3] == loss[0] && loss[4] == 0.0f;
  expect("unchecked: a NaN loss for the bad row only", loss_ok ? KITE_OK : KITE_ERR_INTERNAL,
         KITE_OK, NULL);
  expect("unchecked: seq_len past the table", decode(&off, dv, bt, long_sl), KITE_OK, NULL);
  expect("unchecked: block id past the cache", decode(&off, dv, bad_bt, sl), KITE_OK, NULL);
  expect("unchecked: group sizes summing to 6", group_gemm(&off, dv, bad_sum), KITE_OK, NULL);
  expect("unchecked: synchronize", kite_ctx_synchronize(off.ctx), KITE_OK, NULL);

  release(&on);
  release(&off);
  return check_summary();
}
