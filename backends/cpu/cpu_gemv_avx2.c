/*
 * The GEMV of linear on AVX2 (few rows, decode): the weights are streamed once from their own
 * rows; each block of GEMV_NB weight rows meets every x row (converted to f32 once) while it
 * sits in L1/L2, so the cost is reading the weight bytes: bandwidth-bound, as it must be.
 */
#include "cpu_gemm_avx2.h"

/* x rows [mb] . weight rows [nb] (compile-time constants at every call, mb * nb <= 12), into
 * psum rows of stride GEMV_NB. With mb <= 2 each weight vector is converted and used at once
 * (12 accumulators + 2 x + 1 w registers); with more rows the nb weight vectors are converted
 * first and each x row is loaded once (12 + 3 + 1). */
INLINE void gemv_tile(kite_dtype t, int mb, int nb, const float *const *x, const char *const *w,
                      int64_t k1, vf *psum) {
  vf acc[GEMV_MB][GEMV_NB];
  for (int i = 0; i < mb; i++)
    for (int j = 0; j < nb; j++) acc[i][j] = _mm256_setzero_ps();
  const int64_t es = esize(t);
  int64_t k = 0;
#pragma GCC unroll 2
  for (; k + 8 <= k1; k += 8) {
    if (mb <= 2) {
      vf xv[2];
      for (int i = 0; i < mb; i++) xv[i] = _mm256_loadu_ps(x[i] + k);
      for (int j = 0; j < nb; j++) {
        const vf wv = load8(t, w[j] + k * es);
        for (int i = 0; i < mb; i++) acc[i][j] = _mm256_fmadd_ps(xv[i], wv, acc[i][j]);
      }
    } else {
      vf wv[GEMV_NB];
      for (int j = 0; j < nb; j++) wv[j] = load8(t, w[j] + k * es);
      for (int i = 0; i < mb; i++) {
        const vf xv = _mm256_loadu_ps(x[i] + k);
        for (int j = 0; j < nb; j++) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
      }
    }
  }
  if (k < k1) {
    const int64_t r = k1 - k;
    vf wv[GEMV_NB];
    for (int j = 0; j < nb; j++) wv[j] = load_part(t, w[j] + k * es, r);
    for (int i = 0; i < mb; i++) {
      const vf xv = load_part(KITE_DTYPE_F32, x[i] + k, r);
      for (int j = 0; j < nb; j++) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < mb; i++)
    for (int j = 0; j < nb; j++)
      psum[i * GEMV_NB + j] = _mm256_add_ps(psum[i * GEMV_NB + j], acc[i][j]);
}

/* A block of GEMV_NB = 6 weight rows against all m x rows.
 * m <= 2: one tile of m x 6, each weight vector converted (bf16/f16 -> f32) once.
 * m > 2: tiles of 4 x rows x 3 weight rows, so each weight vector is converted once per 4 x rows
 * (it was once per 2 with 2 x 4 tiles) and, for m <= 4, the block is read in a single pass: with
 * two passes the second one runs from cache while nothing streams from DRAM. */
INLINE void gemv_tiles(kite_dtype t, int64_t m, const float *xf, int64_t ldx, const char *const *w,
                       int64_t k1, vf *psum) {
  if (m <= 2) {
    const float *x[2] = {xf, xf + (m - 1) * ldx};
    if (m == 2)
      gemv_tile(t, 2, GEMV_NB, x, w, k1, psum);
    else
      gemv_tile(t, 1, GEMV_NB, x, w, k1, psum);
    return;
  }
  for (int64_t i0 = 0; i0 < m; i0 += GEMV_MB) {
    const float *x[GEMV_MB];
    for (int i = 0; i < GEMV_MB; i++) x[i] = xf + MIN(i0 + i, m - 1) * ldx;
    for (int j0 = 0; j0 < GEMV_NB; j0 += 3) {
      vf *ps = psum + i0 * GEMV_NB + j0;
      switch (MIN(GEMV_MB, m - i0)) {
      case 4:
        gemv_tile(t, 4, 3, x, w + j0, k1, ps);
        break;
      case 3:
        gemv_tile(t, 3, 3, x, w + j0, k1, ps);
        break;
      case 2:
        gemv_tile(t, 2, 3, x, w + j0, k1, ps);
        break;
      default:
        gemv_tile(t, 1, 3, x, w + j0, k1, ps);
        break;
      }
    }
  }
}

void cpu_avx2_gemv_task(const void *job, int64_t begin, int64_t end, int part) {
  const gemv *g = job;
  vf psum[GEMV_MAX_M * GEMV_NB];
  for (int64_t blk = begin; blk < end; blk++) {
    const int64_t n0 = blk * GEMV_NB, nb = MIN(GEMV_NB, g->n - n0);
    const char *w[GEMV_NB];
    for (int j = 0; j < GEMV_NB; j++) w[j] = src_row(&g->w, n0 + (j < nb ? j : 0));
    for (int64_t i = 0; i < g->m * GEMV_NB; i++) psum[i] = _mm256_setzero_ps();
    switch (g->w.t) {
    case KITE_DTYPE_BF16:
      gemv_tiles(KITE_DTYPE_BF16, g->m, g->xf, g->ldx, w, g->k, psum);
      break;
    case KITE_DTYPE_F16:
      gemv_tiles(KITE_DTYPE_F16, g->m, g->xf, g->ldx, w, g->k, psum);
      break;
    default:
      gemv_tiles(KITE_DTYPE_F32, g->m, g->xf, g->ldx, w, g->k, psum);
      break;
    }
    for (int64_t i = 0; i < g->m; i++)
      for (int64_t j = 0; j < nb; j++) {
        float v = vf_reduce_add(psum[i * GEMV_NB + j]);
        if (g->bias) v += kite_load_f32(g->yt, g->bias, n0 + j);
        kite_store_f32(g->yt, g->y, i * g->ldy + n0 + j, v);
      }
  }
}

/* ---- the GEMV over weights stored [k, n] (src.kn: fused_moe_ex's transposed experts) ---------
 * An item is GEMVT_NB = 32 consecutive outputs: each stored row k gives their 32 weights in one
 * run (64 bytes of bf16), broadcast-multiplied by x[i, k] into 2 x 4 accumulators; more than two
 * x rows walk the item's column block again, from L2. */

/* acc[i][v] = sum over k of x_i[k] w[k, v 8 ...] for mb (1 or 2) rows; nc < GEMVT_NB columns
 * (the last block) load partial vectors, zeros past nc. */
INLINE void gemvt_tile(kite_dtype t, int mb, bool full, const float *x0, const float *x1,
                       const char *w, int64_t ldb, int64_t k1, int64_t nc,
                       vf acc[2][GEMVT_NB / 8]) {
  const int64_t es = esize(t);
  for (int i = 0; i < 2; i++)
    for (int v = 0; v < GEMVT_NB / 8; v++) acc[i][v] = _mm256_setzero_ps();
  for (int64_t k = 0; k < k1; k++) {
    const char *row = w + k * ldb;
    if (k + 8 < k1) /* rows ldb apart: no stream for the hardware prefetcher to follow */
      _mm_prefetch(row + 8 * ldb, _MM_HINT_T0);
    const vf a0 = _mm256_broadcast_ss(x0 + k), a1 = _mm256_broadcast_ss(x1 + k);
    for (int v = 0; v < GEMVT_NB / 8; v++) {
      const int64_t left = nc - v * 8;
      const vf wv = full        ? load8(t, row + v * 8 * es)
                    : left >= 8 ? load8(t, row + v * 8 * es)
                    : left > 0  ? load_part(t, row + v * 8 * es, left)
                                : _mm256_setzero_ps();
      acc[0][v] = _mm256_fmadd_ps(a0, wv, acc[0][v]);
      if (mb > 1) acc[1][v] = _mm256_fmadd_ps(a1, wv, acc[1][v]);
    }
  }
}

/* Column blocks [begin, end) of GEMVT_NB outputs: a cpu_task_fn over a gemv whose w is kn. */
void cpu_avx2_gemvt_task(const void *job, int64_t begin, int64_t end, int part) {
  const gemv *g = job;
  const int64_t es = esize(g->w.t), ldb = g->w.ld * es;
  for (int64_t blk = begin; blk < end; blk++) {
    const int64_t n0 = blk * GEMVT_NB, nc = MIN(GEMVT_NB, g->n - n0);
    const char *w = (const char *)g->w.p + n0 * es;
    const bool full = nc == GEMVT_NB;
    for (int64_t i0 = 0; i0 < g->m; i0 += 2) {
      const int mb = g->m - i0 >= 2 ? 2 : 1;
      const float *x0 = g->xf + i0 * g->ldx, *x1 = g->xf + (i0 + mb - 1) * g->ldx;
      vf acc[2][GEMVT_NB / 8];
#define GEMVT_TILE(T)                                                                              \
  (mb == 2 ? (full ? gemvt_tile(T, 2, true, x0, x1, w, ldb, g->k, nc, acc)                         \
                   : gemvt_tile(T, 2, false, x0, x1, w, ldb, g->k, nc, acc))                       \
           : (full ? gemvt_tile(T, 1, true, x0, x1, w, ldb, g->k, nc, acc)                         \
                   : gemvt_tile(T, 1, false, x0, x1, w, ldb, g->k, nc, acc)))
      switch (g->w.t) {
      case KITE_DTYPE_BF16:
        GEMVT_TILE(KITE_DTYPE_BF16);
        break;
      case KITE_DTYPE_F16:
        GEMVT_TILE(KITE_DTYPE_F16);
        break;
      default:
        GEMVT_TILE(KITE_DTYPE_F32);
        break;
      }
#undef GEMVT_TILE
      for (int i = 0; i < mb; i++)
        for (int v = 0; v < GEMVT_NB / 8 && v * 8 < nc; v++) {
          const int64_t c = n0 + v * 8, m = MIN(8, nc - v * 8);
          vf y = acc[i][v];
          if (g->bias) y = _mm256_add_ps(y, vf_load(g->yt, g->bias, c, m));
          vf_store(g->yt, g->y, (i0 + i) * g->ldy + c, y, m, false);
        }
    }
  }
}
