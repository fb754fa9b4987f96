/*
 * bf16 linear on AVX-512 BF16 (compiled with -mavx512f ... -mavx512bf16; registered for bf16 with
 * those feature bits). VDPBF16PS multiplies pairs of bf16 and adds both products into an f32
 * lane: 32 multiply-adds per instruction, twice an f32 FMA of the same width, with no widening.
 *
 * Both sides are packed as 32-bit words holding a pair (v[2p], v[2p + 1]) of bf16 (a zero
 * completes an odd K): w into panels of 32 columns, x into panels of 8 rows. The 8x32 tile keeps
 * 16 zmm accumulators; per pair: 2 loads, 8 broadcasts, 16 VDPBF16PS. Partial sums go to an f32
 * workspace [M, N], rounded once into y with the bias when a block's last K step is done.
 * Threads split N (or M when N is narrow) into contiguous ranges, each packing its own panels.
 */
#include <immintrin.h>
#include <string.h>

#include "cpu_gemm.h"
#include "kite/dtype.h"

#define BMR 8
#define BNR 32
#define BKP 256 /* bf16 pairs per packed block */
#define BMC 128
#define BNC 1024
#define BALIGN 64
#define BMIN(a, b) ((a) < (b) ? (a) : (b))

typedef struct bgemm {
  int64_t m, n, k;
  const uint16_t *x, *w;
  int64_t ldx, ldw;
  float *c; /* [m, n] */
  uint16_t *y;
  int64_t ldy;
  const uint16_t *bias;
  bool split_n;
  int64_t span;
  char *scratch;
} bgemm;

#define AP_BYTES ((size_t)BMC * BKP * 4)
#define BP_BYTES ((size_t)BNC * BKP * 4)

static inline uint32_t bf16_pair(const uint16_t *v, int64_t k, int64_t kc) {
  return (uint32_t)v[k] | (uint32_t)(k + 1 < kc ? v[k + 1] : 0) << 16;
}

/* rows [r0, r0 + rows) of a [*, ld] bf16 matrix, depth [k0, k0 + kc), into a panel of `width`
 * words per pair step: out[p * width + i]. */
static void pack_pairs(const uint16_t *base, int64_t ld, int64_t r0, int64_t rows, int width,
                       int64_t k0, int64_t kc, uint32_t *out) {
  const int64_t kp = (kc + 1) / 2;
  for (int i = 0; i < width; i++) {
    if (i >= rows) {
      for (int64_t p = 0; p < kp; p++) out[p * width + i] = 0;
      continue;
    }
    const uint16_t *v = base + (r0 + i) * ld + k0;
    for (int64_t p = 0; p < kp; p++) out[p * width + i] = bf16_pair(v, 2 * p, kc);
  }
}

static void kernel_8x32(int64_t kp, const uint32_t *a, const uint32_t *b, float *c, int64_t ldc,
                        int acc, int64_t mr, int64_t nr) {
  __m512 v[BMR][2];
  for (int r = 0; r < BMR; r++) v[r][0] = v[r][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kp; p++) {
    const __m512bh b0 = (__m512bh)_mm512_load_si512(b), b1 = (__m512bh)_mm512_load_si512(b + 16);
    for (int r = 0; r < BMR; r++) {
      const __m512bh x = (__m512bh)_mm512_set1_epi32((int)a[r]);
      v[r][0] = _mm512_dpbf16_ps(v[r][0], x, b0);
      v[r][1] = _mm512_dpbf16_ps(v[r][1], x, b1);
    }
    a += BMR;
    b += BNR;
  }
  float tile[BMR][BNR];
  for (int r = 0; r < BMR; r++) {
    _mm512_storeu_ps(tile[r], v[r][0]);
    _mm512_storeu_ps(tile[r] + 16, v[r][1]);
  }
  for (int64_t r = 0; r < mr; r++)
    for (int64_t j = 0; j < nr; j++) c[r * ldc + j] = (acc ? c[r * ldc + j] : 0.0f) + tile[r][j];
}

static void epilogue(const bgemm *g, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  for (int64_t r = r0; r < r1; r++)
    for (int64_t j = c0; j < c1; j++) {
      float v = g->c[r * g->n + j];
      if (g->bias) v += kite_bf16_to_f32(g->bias[j]);
      g->y[r * g->ldy + j] = kite_f32_to_bf16(v);
    }
}

static void block(const bgemm *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1, uint32_t *ap,
                  uint32_t *bp) {
  for (int64_t jc = n0; jc < n1; jc += BNC) {
    const int64_t nc = BMIN(BNC, n1 - jc);
    for (int64_t pc = 0; pc < g->k; pc += 2 * BKP) {
      const int64_t kc = BMIN(2 * BKP, g->k - pc), kp = (kc + 1) / 2;
      for (int64_t jr = 0; jr < nc; jr += BNR)
        pack_pairs(g->w, g->ldw, jc + jr, BMIN(BNR, nc - jr), BNR, pc, kc, bp + jr * kp);
      for (int64_t ic = m0; ic < m1; ic += BMC) {
        const int64_t mc = BMIN(BMC, m1 - ic);
        for (int64_t ir = 0; ir < mc; ir += BMR)
          pack_pairs(g->x, g->ldx, ic + ir, BMIN(BMR, mc - ir), BMR, pc, kc, ap + ir * kp);
        for (int64_t jr = 0; jr < nc; jr += BNR)
          for (int64_t ir = 0; ir < mc; ir += BMR)
            kernel_8x32(kp, ap + ir * kp, bp + jr * kp, g->c + (ic + ir) * g->n + jc + jr, g->n,
                        pc > 0, BMIN(BMR, mc - ir), BMIN(BNR, nc - jr));
        if (pc + kc >= g->k) epilogue(g, ic, ic + mc, jc, jc + nc);
      }
    }
  }
}

static void task(const void *job, int64_t begin, int64_t end, int part) {
  const bgemm *g = job;
  uint32_t *ap = (uint32_t *)(g->scratch + (size_t)part * (AP_BYTES + BP_BYTES));
  uint32_t *bp = (uint32_t *)((char *)ap + AP_BYTES);
  const int64_t lo = begin * g->span, hi = BMIN(end * g->span, g->split_n ? g->n : g->m);
  if (lo >= hi) return;
  if (g->split_n)
    block(g, 0, g->m, lo, hi, ap, bp);
  else
    block(g, lo, hi, 0, g->n, ap, bp);
}

kite_status cpu_linear_avx512bf16(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_linear_args *a = args;
  if (a->dtype != KITE_DTYPE_BF16)
    return kite_set_error(KITE_ERR_UNSUPPORTED, "linear: cpu.avx512bf16: bf16 only");
  /* Few rows are bound by reading w, not by multiplies: packing w into pairs would only add a
   * pass over it, so they take the weight-streaming GEMV (AVX2 code, present on every AVX-512
   * CPU). */
  if (a->m <= CPU_GEMV_MAX_M) return cpu_linear_avx2(k, ctx, args);
  bgemm g = {.m = a->m,
             .n = a->n,
             .k = a->k,
             .x = a->x,
             .w = a->w,
             .ldx = a->x_stride,
             .ldw = a->w_stride,
             .y = a->y,
             .ldy = a->y_stride,
             .bias = a->bias};
  if (g.k == 0) {
    for (int64_t r = 0; r < g.m; r++)
      for (int64_t j = 0; j < g.n; j++) g.y[r * g.ldy + j] = g.bias ? g.bias[j] : 0;
    return KITE_OK;
  }
  const double work = (double)g.m * (double)g.n * (double)g.k;
  int parts = kite_ctx_num_threads(ctx);
  if (work < (double)parts * (1 << 21)) parts = (int)(work / (1 << 21));
  if (parts < 1) parts = 1;
  g.split_n = g.n >= g.m || g.n >= (int64_t)parts * 256;
  const int64_t dim = g.split_n ? g.n : g.m, align = g.split_n ? BNR : BMR;
  g.span = ((dim + parts - 1) / parts + align - 1) / align * align;
  const int64_t items = (dim + g.span - 1) / g.span;

  void *ws = NULL;
  const size_t cbytes = ((size_t)(g.m * g.n) * 4 + BALIGN - 1) / BALIGN * BALIGN;
  kite_status s =
      kite_ctx_workspace(ctx, cbytes + (size_t)parts * (AP_BYTES + BP_BYTES) + BALIGN, &ws);
  if (s != KITE_OK) return s;
  char *p = (char *)(((uintptr_t)ws + BALIGN - 1) & ~(uintptr_t)(BALIGN - 1));
  g.c = (float *)p;
  g.scratch = p + cbytes;
  cpu_parallel_run(items < parts ? (int)items : parts, items, task, &g);
  return KITE_OK;
}
