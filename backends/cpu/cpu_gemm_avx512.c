/*
 * linear and linear_quant on AVX-512: one packed-GEMM driver over 32-bit words and three
 * micro-kernels that consume them. The file is compiled with -mavx512f/bw/vl/dq alone (what
 * cpu.avx512 needs); the bf16, VNNI and AMX micro-kernels enable their extensions for themselves
 * (target attributes), so the plain entry never runs an instruction it did not ask for. Each
 * entry is registered with the feature bits its own instructions need.
 *
 *   kind  a word holds                    multiply-add            per instruction
 *   f32   one f32 (bf16, f16 widened)     VFMADD231PS             16, f32 sums
 *   bf16  a pair of bf16 (k, k + 1)       VDPBF16PS               32, f32 sums
 *   int8  four int8 (k .. k + 3)          VPDPBUSD                64, int32 sums (exact)
 *
 * Panels: w rows n0 .. n0 + 31 -> bp[p * 32 + j] (word p of row j), x rows -> ap[p * 12 + r]; rows
 * past the matrix and words past K are zeros. The 12x32 tile keeps 24 of the 32 zmm registers as
 * accumulators: per word step 2 loads, 12 broadcasts, 24 multiply-adds.
 * VPDPBUSD multiplies unsigned by signed bytes, so x is packed as x + 128 (x ^ 0x80): every sum
 * then carries 128 * sum_k w[n, k], which the epilogue takes off (colsum, one pass over w).
 * Sums over K blocks accumulate in c [M, N] (f32, or int32 for int8; y itself when y is f32);
 * after a block's last K step the epilogue writes y = c * x_scale * w_scale + bias in y's dtype.
 * Threads split N (or M when N is narrow) into contiguous ranges, each packing its own panels.
 */
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cpu_gemm.h"
#include "cpu_kernels.h"
#include "kite/dtype.h"

#define WMR 12
#define WNR 32
#define WKP 256 /* words per packed K block: w panel 32 KB (L1), x panel 8 KB */
#define WMC 120 /* x rows per packed block (a multiple of WMR): 120 KB (L2) */
#define WNC 1024
#define AMX_MC 128 /* x rows per block on AMX, a multiple of 32 */
#define AMX_GEMV_MAX_M 8
#define WALIGN 64
#define WMIN(a, b) ((a) < (b) ? (a) : (b))
#define INLINE static inline __attribute__((always_inline))

typedef enum wkind { WK_F32, WK_BF16, WK_I8 } wkind;

typedef struct wgemm {
  wkind kind;
  kite_dtype t; /* x's and w's element type: WK_F32 also takes bf16 / f16, widened while packed */
  int64_t m, n, k;
  const char *x, *w; /* [m, k] and [n, k], rows ldx / ldw elements apart */
  int64_t ldx, ldw;
  void *c; /* [m, n] sums, rows ldc apart: f32 (int32 for WK_I8) */
  int64_t ldc;
  kite_dtype yt; /* y's and bias's dtype */
  void *y;
  int64_t ldy;
  const void *bias;
  const float *xs, *ws;  /* WK_I8: scales [m] and [n] */
  const int32_t *colsum; /* WK_I8 on VPDPBUSD: sum_k w[n, k]; NULL on AMX (signed x signed) */
  const kite_linear_wq4_args *q4; /* WK_F32: w is this linear_wq4 matrix, decoded while packed */
  bool amx;                       /* AMX tiles (WK_BF16, WK_I8) instead of the zmm micro-kernels */
  bool split_n;
  int64_t span;
  char *scratch;
} wgemm;

#define AP_BYTES ((size_t)AMX_MC * WKP * 4) /* >= WMC * WKP * 4 */
#define BP_BYTES ((size_t)WNC * WKP * 4)

/* In-register 16 x 16 transpose of 32-bit words: r[i] (row i) becomes column i. Unpacks pair the
 * words and then the doublewords of four rows inside each 128-bit lane (u[4g + c] holds, in lane
 * L, rows 4g .. 4g + 3 of column 4L + c); lane shuffles then gather column 4L + c from
 * u[c], u[4 + c], u[8 + c], u[12 + c]. */
INLINE void transpose16(__m512i r[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int g = 0; g < 16; g += 4) {
    u[g] = _mm512_unpacklo_epi64(t[g], t[g + 2]);
    u[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
    u[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
    u[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
  }
  for (int c = 0; c < 4; c++) {
    const __m512i x0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44);
    const __m512i x1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xee);
    const __m512i y0 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44);
    const __m512i y1 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xee);
    r[c] = _mm512_shuffle_i32x4(x0, y0, 0x88);
    r[4 + c] = _mm512_shuffle_i32x4(x0, y0, 0xdd);
    r[8 + c] = _mm512_shuffle_i32x4(x1, y1, 0x88);
    r[12 + c] = _mm512_shuffle_i32x4(x1, y1, 0xdd);
  }
}

/* The first `full` words (rounded down to 16) of a whole w panel (WNR rows) through 16 x 16
 * transposes; returns how many words of each row it packed. */
static int64_t pack_words_x16(const char *base, int64_t ld, int es, int64_t r0, int64_t k0,
                              int64_t full, uint32_t flip, uint32_t *out) {
  const __m512i f = _mm512_set1_epi32((int)flip);
  const int64_t n16 = full / 16 * 16;
  for (int h = 0; h < WNR / 16; h++) {
    const char *v[16];
    for (int i = 0; i < 16; i++) v[i] = base + ((r0 + 16 * h + i) * ld + k0) * es;
    for (int64_t p0 = 0; p0 < n16; p0 += 16) {
      __m512i r[16];
      for (int i = 0; i < 16; i++)
        r[i] = _mm512_xor_si512(_mm512_loadu_si512((const void *)(v[i] + 4 * p0)), f);
      transpose16(r);
      for (int j = 0; j < 16; j++) _mm512_storeu_si512(out + (p0 + j) * WNR + 16 * h, r[j]);
    }
  }
  return n16;
}

/* Rows [r0, r0 + rows) of a matrix (row stride ld elements of es bytes), depth [k0, k0 + kc), into
 * `width` words per step: out[p * width + i]. flip is XORed into every word (0x80808080 turns
 * int8 x into x + 128); the part of the last word past kc is zero before the flip. Whole w panels
 * go through 16 x 16 transposes (word by word, packing 16 rows of w took longer than the
 * multiplies on AMX). */
static void pack_words(const char *base, int64_t ld, int es, int64_t r0, int64_t rows, int width,
                       int64_t k0, int64_t kc, uint32_t flip, uint32_t *out) {
  const int64_t g = 4 / es, full = kc / g, words = (kc + g - 1) / g;
  const int64_t done =
      width == WNR && rows == WNR ? pack_words_x16(base, ld, es, r0, k0, full, flip, out) : 0;
  for (int i = 0; i < width; i++) {
    uint32_t *o = out + i;
    if (i >= rows) {
      for (int64_t p = 0; p < words; p++) o[p * width] = 0;
      continue;
    }
    const char *v = base + ((r0 + i) * ld + k0) * es;
    for (int64_t p = done; p < full; p++) {
      uint32_t u;
      memcpy(&u, v + 4 * p, 4);
      o[p * width] = u ^ flip;
    }
    if (full < words) {
      uint32_t u = 0;
      memcpy(&u, v + 4 * full, (size_t)((kc - full * g) * es));
      o[full * width] = u ^ flip;
    }
  }
}

/* As pack_words into f32 words, widening 16-bit elements (bf16, f16) of type t. */
static void pack_widen(kite_dtype t, const char *base, int64_t ld, int64_t r0, int64_t rows,
                       int width, int64_t k0, int64_t kc, uint32_t *out) {
  for (int i = 0; i < width; i++) {
    uint32_t *o = out + i;
    if (i >= rows) {
      for (int64_t p = 0; p < kc; p++) o[p * width] = 0;
      continue;
    }
    const uint16_t *v = (const uint16_t *)base + (r0 + i) * ld + k0;
    if (t == KITE_DTYPE_BF16) {
      for (int64_t p = 0; p < kc; p++) o[p * width] = (uint32_t)v[p] << 16;
    } else {
      for (int64_t p = 0; p < kc; p++) {
        const float f = kite_f16_to_f32(v[p]);
        memcpy(o + p * width, &f, 4);
      }
    }
  }
}

/* w rows [r0, r0 + rows) of g->q4's 4-bit matrix, depth [k0, k0 + kc) (whole blocks of 32), into
 * f32 words w = d q + c, as pack_words lays them out (zero rows past the matrix). */
static void pack_q4(const wgemm *g, int64_t r0, int64_t rows, int64_t k0, int64_t kc,
                    uint32_t *out) {
  const kite_linear_wq4_args *a = g->q4;
  const bool sym = a->format == KITE_WQ4_SYM;
  const int64_t bb = sym ? 18 : 20, qoff = sym ? 2 : 4;
  float *o = (float *)out;
  for (int i = 0; i < WNR; i++) {
    if (i >= rows) {
      for (int64_t p = 0; p < kc; p++) o[p * WNR + i] = 0.0f;
      continue;
    }
    const uint8_t *row = a->w + (r0 + i) * a->w_stride;
    for (int64_t b = k0 / 32; b < (k0 + kc) / 32; b++) {
      const uint8_t *blk = row + b * bb, *qs = blk + qoff;
      const float d = kite_f16_to_f32((uint16_t)(blk[0] | blk[1] << 8));
      const float c = sym ? -8.0f * d : kite_f16_to_f32((uint16_t)(blk[2] | blk[3] << 8));
      float *ob = o + (b * 32 - k0) * WNR + i;
      for (int t = 0; t < 16; t++) {
        ob[t * WNR] = fmaf((float)(qs[t] & 15), d, c);
        ob[(t + 16) * WNR] = fmaf((float)(qs[t] >> 4), d, c);
      }
    }
  }
}

/* Panel of rows [r0, r0 + rows) of x or w for g's kind; flip as in pack_words. */
static void pack_panel(const wgemm *g, const char *base, int64_t ld, int64_t r0, int64_t rows,
                       int width, int64_t k0, int64_t kc, uint32_t flip, uint32_t *out) {
  if (g->kind == WK_F32 && g->t != KITE_DTYPE_F32)
    pack_widen(g->t, base, ld, r0, rows, width, k0, kc, out);
  else
    pack_words(base, ld, (int)kite_dtype_size(g->t), r0, rows, width, k0, kc, flip, out);
}

/* Lanes [0, n) of a 16-lane vector, n may be <= 0 or >= 16. */
INLINE __mmask16 lanes(int64_t n) {
  return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

/* The micro-kernels: c[mr x nr] (=|+=) a-panel . b-panel over kp word steps. MADD(acc, x, b) is
 * the kind's multiply-add of a broadcast x word with a row of 16 b words. The 24 accumulators are
 * named variables: as an array indexed after the loop, GCC kept some of them on the stack. */
#define WROW(MADD, r, i)                                                                           \
  x = _mm512_set1_epi32((int)a[i]);                                                                \
  c##r##0 = MADD(c##r##0, x, b0);                                                                  \
  c##r##1 = MADD(c##r##1, x, b1);

#define WKERNEL(name, V, ZERO, MADD, LOADC, ADD, STOREC)                                           \
  static void name(int64_t kp, const uint32_t *a, const uint32_t *b, void *cv, int64_t ldc,        \
                   int acc, int64_t mr, int64_t nr) {                                              \
    V c00 = ZERO, c01 = ZERO, c10 = ZERO, c11 = ZERO, c20 = ZERO, c21 = ZERO, c30 = ZERO;          \
    V c31 = ZERO, c40 = ZERO, c41 = ZERO, c50 = ZERO, c51 = ZERO, c60 = ZERO, c61 = ZERO;          \
    V c70 = ZERO, c71 = ZERO, c80 = ZERO, c81 = ZERO, c90 = ZERO, c91 = ZERO, cA0 = ZERO;          \
    V cA1 = ZERO, cB0 = ZERO, cB1 = ZERO;                                                          \
    _Pragma("GCC unroll 2") for (int64_t p = 0; p < kp; p++) {                                     \
      const __m512i b0 = _mm512_load_si512(b), b1 = _mm512_load_si512(b + 16);                     \
      __m512i x;                                                                                   \
      WROW(MADD, 0, 0) WROW(MADD, 1, 1) WROW(MADD, 2, 2) WROW(MADD, 3, 3);                         \
      WROW(MADD, 4, 4) WROW(MADD, 5, 5) WROW(MADD, 6, 6) WROW(MADD, 7, 7);                         \
      WROW(MADD, 8, 8) WROW(MADD, 9, 9) WROW(MADD, A, 10) WROW(MADD, B, 11);                       \
      a += WMR;                                                                                    \
      b += WNR;                                                                                    \
    }                                                                                              \
    V v[WMR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51},         \
                   {c60, c61}, {c70, c71}, {c80, c81}, {c90, c91}, {cA0, cA1}, {cB0, cB1}};        \
    const __mmask16 m0 = lanes(nr), m1 = lanes(nr - 16);                                           \
    for (int64_t r = 0; r < mr; r++) {                                                             \
      char *cr = (char *)cv + r * ldc * 4;                                                         \
      if (acc) {                                                                                   \
        v[r][0] = ADD(v[r][0], LOADC(m0, cr));                                                     \
        v[r][1] = ADD(v[r][1], LOADC(m1, cr + 64));                                                \
      }                                                                                            \
      STOREC(cr, m0, v[r][0]);                                                                     \
      STOREC(cr + 64, m1, v[r][1]);                                                                \
    }                                                                                              \
  }

#define MADD_F32(s, x, b) _mm512_fmadd_ps(_mm512_castsi512_ps(x), _mm512_castsi512_ps(b), s)
#define MADD_BF16(s, x, b) _mm512_dpbf16_ps(s, (__m512bh)(x), (__m512bh)(b))
#define MADD_I8(s, x, b) _mm512_dpbusd_epi32(s, x, b)
#define LOADC_F(m, p) _mm512_maskz_loadu_ps(m, p)
#define STOREC_F(p, m, v) _mm512_mask_storeu_ps(p, m, v)
#define LOADC_I(m, p) _mm512_maskz_loadu_epi32(m, p)
#define STOREC_I(p, m, v) _mm512_mask_storeu_epi32(p, m, v)

/* The extensions a micro-kernel needs beyond the file's flags, on that function alone. */
#define TARGET(isa) __attribute__((target(isa)))
TARGET("avx512bf16")
static void kernel_bf16_12x32(int64_t kp, const uint32_t *a, const uint32_t *b, void *cv,
                              int64_t ldc, int acc, int64_t mr, int64_t nr);
TARGET("avx512vnni")
static void kernel_i8_12x32(int64_t kp, const uint32_t *a, const uint32_t *b, void *cv, int64_t ldc,
                            int acc, int64_t mr, int64_t nr);

WKERNEL(kernel_f32_12x32, __m512, _mm512_setzero_ps(), MADD_F32, LOADC_F, _mm512_add_ps, STOREC_F)
WKERNEL(kernel_bf16_12x32, __m512, _mm512_setzero_ps(), MADD_BF16, LOADC_F, _mm512_add_ps, STOREC_F)
WKERNEL(kernel_i8_12x32, __m512i, _mm512_setzero_si512(), MADD_I8, LOADC_I, _mm512_add_epi32,
        STOREC_I)

/* 16 lanes of a row in dtype t (lanes outside m read as 0). */
INLINE __m512 load16(kite_dtype t, const void *p, int64_t j, __mmask16 m) {
  switch (t) {
  case KITE_DTYPE_BF16:
    return _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)p + j)), 16));
  case KITE_DTYPE_F16:
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)p + j));
  default:
    return _mm512_maskz_loadu_ps(m, (const float *)p + j);
  }
}

/* Stores lanes m of v in dtype t, rounding to nearest even as kite_store_f32 does (bf16: NaN
 * quieted, not rounded into infinity). */
INLINE void store16(kite_dtype t, void *p, int64_t j, __mmask16 m, __m512 v) {
  switch (t) {
  case KITE_DTYPE_BF16: {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(
        _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    _mm256_mask_storeu_epi16((uint16_t *)p + j, m, _mm512_cvtepi32_epi16(r));
    break;
  }
  case KITE_DTYPE_F16:
    _mm256_mask_storeu_epi16((uint16_t *)p + j, m,
                             _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    break;
  default:
    _mm512_mask_storeu_ps((float *)p + j, m, v);
    break;
  }
}

/* y rows [r0, r1) x columns [c0, c1) from the finished sums. */
static void epilogue(const wgemm *g, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  const bool in_place = g->c == g->y; /* f32 sums already in y: only the bias is left */
  if (in_place && !g->bias) return;
  for (int64_t r = r0; r < r1; r++) {
    const char *cr = (const char *)g->c + r * g->ldc * 4;
    char *yr = (char *)g->y + r * g->ldy * (int64_t)kite_dtype_size(g->yt);
    for (int64_t j = c0; j < c1; j += 16) {
      const __mmask16 m = lanes(c1 - j);
      __m512 v;
      if (g->kind == WK_I8) {
        __m512i s = _mm512_maskz_loadu_epi32(m, cr + j * 4);
        if (g->colsum)
          s = _mm512_sub_epi32(s, _mm512_slli_epi32(_mm512_maskz_loadu_epi32(m, g->colsum + j), 7));
        v = _mm512_mul_ps(_mm512_cvtepi32_ps(s), _mm512_set1_ps(g->xs[r]));
        v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, g->ws + j));
      } else {
        v = _mm512_maskz_loadu_ps(m, cr + j * 4);
      }
      if (g->bias) v = _mm512_add_ps(v, load16(g->yt, g->bias, j, m));
      store16(g->yt, yr, j, m, v);
    }
  }
}

/* ---- AMX: 32 x 32 blocks of C in four 16 x 16 tiles --------------------------------------
 * tmm0-3 C (f32 or int32), tmm4-5 two 16-row slices of x, tmm6-7 two 16-column slices of w.
 * A tile row is 64 bytes: 16 words of depth. x is packed row-major (AMX_MC rows, each kp16
 * words, zero padded), w in the same word panels as above (32 words a step), so a w tile is 16
 * steps of 16 words, 128 bytes apart. TDPBF16PS and TDPBSSD (signed x signed: no shift of x). */
typedef struct amx_cfg {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} amx_cfg;

TARGET("amx-tile") static void amx_configure(void) {
  amx_cfg cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  /* not _tile_loadconfig: GCC 12's macro tells the compiler it reads 8 bytes of cfg, which then
   * drops the stores past them (the rows and column widths), and ldtilecfg faults on what is
   * left in the reserved bytes. The operand here is the whole 64-byte struct. */
  __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}

TARGET("amx-tile") static void amx_release(void) {
  _tile_release();
}

/* C tile d += x tile xa . w tile wb (tile numbers are immediates). */
#define AMX_DP(kind, d, xa, wb)                                                                    \
  do {                                                                                             \
    if ((kind) == WK_BF16)                                                                         \
      _tile_dpbf16ps(d, xa, wb);                                                                   \
    else                                                                                           \
      _tile_dpbssd(d, xa, wb);                                                                     \
  } while (0)

/* c[mr x nr] (=|+=) the 32 x 32 block of a (row-major, astride bytes) . b-panel over kp16 words
 * (a multiple of 16). Edge blocks go through a local 32 x 32 buffer; a block of at most 16 rows
 * (decode-sized x) uses only the upper two C tiles and one x tile. */
TARGET("amx-tile,amx-bf16,amx-int8")
static void amx_kernel(wkind kind, int64_t kp16, const char *a, int64_t astride, const uint32_t *b,
                       void *cv, int64_t ldc, int acc, int64_t mr, int64_t nr) {
  float buf[32][32];
  const bool full = mr == 32 && nr == 32, half = mr <= 16;
  char *c = full ? (char *)cv : (char *)buf;
  const int64_t cs = full ? ldc * 4 : 128;
  if (!full) {
    memset(buf, 0, sizeof buf);
    if (acc)
      for (int64_t r = 0; r < mr; r++) memcpy(buf[r], (char *)cv + r * ldc * 4, (size_t)nr * 4);
  }
  if (acc || !full) {
    _tile_loadd(0, c, cs);
    _tile_loadd(1, c + 64, cs);
    _tile_loadd(2, c + 16 * cs, cs);
    _tile_loadd(3, c + 16 * cs + 64, cs);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int64_t p = 0; p < kp16; p += 16) {
    _tile_loadd(4, a + p * 4, astride);
    _tile_loadd(6, b + p * WNR, WNR * 4);
    _tile_loadd(7, b + p * WNR + 16, WNR * 4);
    AMX_DP(kind, 0, 4, 6);
    AMX_DP(kind, 1, 4, 7);
    if (half) continue;
    _tile_loadd(5, a + 16 * astride + p * 4, astride);
    AMX_DP(kind, 2, 5, 6);
    AMX_DP(kind, 3, 5, 7);
  }
  _tile_stored(0, c, cs);
  _tile_stored(1, c + 64, cs);
  _tile_stored(2, c + 16 * cs, cs);
  _tile_stored(3, c + 16 * cs + 64, cs);
  if (!full)
    for (int64_t r = 0; r < mr; r++) memcpy((char *)cv + r * ldc * 4, buf[r], (size_t)nr * 4);
}

/* x rows [ic, ic + mc) for the AMX tiles, row-major: rows of astride bytes, zero past kc and,
 * up to a multiple of 16 rows, past mc. */
static void pack_rows_amx(const wgemm *g, int64_t ic, int64_t mc, int64_t pc, int64_t kc,
                          int64_t astride, char *a) {
  const int64_t es = (int64_t)kite_dtype_size(g->t), rows = (mc + 15) / 16 * 16;
  for (int64_t r = 0; r < rows; r++) {
    char *row = a + r * astride;
    const size_t have = r < mc ? (size_t)(kc * es) : 0;
    if (have) memcpy(row, g->x + ((ic + r) * g->ldx + pc) * es, have);
    memset(row + have, 0, (size_t)astride - have);
  }
}

/* Rows [m0, m1) x columns [n0, n1) of y: w panels packed per (N, K) block, x per (M, K) block,
 * then the zmm micro-kernels (12 x 32) or the AMX tiles (32 x 32, g->amx). */
static void block(const wgemm *g, int64_t m0, int64_t m1, int64_t n0, int64_t n1, uint32_t *ap,
                  uint32_t *bp) {
  const int64_t g_k = g->kind == WK_BF16 ? 2 : g->kind == WK_I8 ? 4 : 1; /* k values per word */
  const uint32_t flip = g->colsum ? 0x80808080u : 0;                     /* VPDPBUSD: x + 128 */
  const int64_t mcb = g->amx ? AMX_MC : WMC, mrb = g->amx ? 32 : WMR;
  void (*kernel)(int64_t, const uint32_t *, const uint32_t *, void *, int64_t, int, int64_t,
                 int64_t) = g->kind == WK_F32    ? kernel_f32_12x32
                            : g->kind == WK_BF16 ? kernel_bf16_12x32
                                                 : kernel_i8_12x32;
  for (int64_t jc = n0; jc < n1; jc += WNC) {
    const int64_t nc = WMIN(WNC, n1 - jc);
    for (int64_t pc = 0; pc < g->k; pc += WKP * g_k) {
      const int64_t kc = WMIN(WKP * g_k, g->k - pc), kp = (kc + g_k - 1) / g_k;
      const int64_t steps = g->amx ? (kp + 15) / 16 * 16 : kp; /* AMX: whole 16-word tiles */
      for (int64_t jr = 0; jr < nc; jr += WNR) {
        uint32_t *panel = bp + jr * steps;
        if (g->q4)
          pack_q4(g, jc + jr, WMIN(WNR, nc - jr), pc, kc, panel);
        else
          pack_panel(g, g->w, g->ldw, jc + jr, WMIN(WNR, nc - jr), WNR, pc, kc, 0, panel);
        memset(panel + kp * WNR, 0, (size_t)((steps - kp) * WNR) * 4);
      }
      for (int64_t ic = m0; ic < m1; ic += mcb) {
        const int64_t mc = WMIN(mcb, m1 - ic);
        if (g->amx)
          pack_rows_amx(g, ic, mc, pc, kc, steps * 4, (char *)ap);
        else
          for (int64_t ir = 0; ir < mc; ir += WMR)
            pack_panel(g, g->x, g->ldx, ic + ir, WMIN(WMR, mc - ir), WMR, pc, kc, flip,
                       ap + ir * kp);
        for (int64_t jr = 0; jr < nc; jr += WNR)
          for (int64_t ir = 0; ir < mc; ir += mrb) {
            char *c = (char *)g->c + ((ic + ir) * g->ldc + jc + jr) * 4;
            const int64_t mr = WMIN(mrb, mc - ir), nr = WMIN(WNR, nc - jr);
            if (g->amx)
              amx_kernel(g->kind, steps, (const char *)ap + ir * steps * 4, steps * 4,
                         bp + jr * steps, c, g->ldc, pc > 0, mr, nr);
            else
              kernel(kp, ap + ir * kp, bp + jr * kp, c, g->ldc, pc > 0, mr, nr);
          }
        if (pc + kc >= g->k) epilogue(g, ic, ic + mc, jc, jc + nc);
      }
    }
  }
}

static void task(const void *job, int64_t begin, int64_t end, int part) {
  const wgemm *g = job;
  uint32_t *ap = (uint32_t *)(g->scratch + (size_t)part * (AP_BYTES + BP_BYTES));
  uint32_t *bp = (uint32_t *)((char *)ap + AP_BYTES);
  const int64_t lo = begin * g->span, hi = WMIN(end * g->span, g->split_n ? g->n : g->m);
  if (lo >= hi) return;
  if (g->amx) amx_configure(); /* the tile configuration is per thread */
  if (g->split_n)
    block(g, 0, g->m, lo, hi, ap, bp);
  else
    block(g, lo, hi, 0, g->n, ap, bp);
  if (g->amx) amx_release();
}

/* colsum[j] = sum_k w[j, k] for int8 w: 64 bytes a step, biased to unsigned for VPSADBW. */
static void colsum_task(const void *job, int64_t begin, int64_t end, int part) {
  (void)part;
  const wgemm *g = job;
  int32_t *colsum = (int32_t *)g->colsum;
  const __m512i bias = _mm512_set1_epi8((char)0x80), zero = _mm512_setzero_si512();
  for (int64_t j = begin; j < end; j++) {
    const int8_t *w = (const int8_t *)g->w + j * g->ldw;
    __m512i acc = zero;
    int64_t k = 0;
    for (; k + 64 <= g->k; k += 64)
      acc = _mm512_add_epi64(
          acc, _mm512_sad_epu8(_mm512_xor_si512(_mm512_loadu_si512(w + k), bias), zero));
    if (k < g->k) {
      const __mmask64 m = (__mmask64)(~0ull >> (64 - (g->k - k)));
      const __m512i v =
          _mm512_maskz_mov_epi8(m, _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, w + k), bias));
      acc = _mm512_add_epi64(acc, _mm512_sad_epu8(v, zero));
    }
    colsum[j] = (int32_t)(_mm512_reduce_add_epi64(acc) - 128 * g->k);
  }
}

/* int8 with few rows (decode): bound by reading w, so w is streamed as stored instead of packed
 * (packing would add a pass over it and a write of it). Columns [begin, end) of y: for each w row,
 * 64 bytes a step, VPDPBUSD of (x + 128) for up to 4 x rows at a time and of ones for
 * sum_k w[n, k], which is taken off as 128 * sum; then the epilogue (colsum NULL). Bytes past K are
 * loaded as zeros in w, so they add nothing whatever x holds there. */
TARGET("avx512vnni")
static void gemv_i8_task(const void *job, int64_t begin, int64_t end, int part) {
  (void)part;
  const wgemm *g = job;
  const __m512i flip = _mm512_set1_epi8((char)0x80), ones = _mm512_set1_epi8(1);
  for (int64_t j = begin; j < end; j++) {
    const int8_t *w = (const int8_t *)g->w + j * g->ldw;
    int32_t wsum = 0;
    for (int64_t r0 = 0; r0 < g->m; r0 += 4) {
      const int rows = (int)WMIN(4, g->m - r0);
      __m512i acc[4], cs = _mm512_setzero_si512();
      for (int i = 0; i < 4; i++) acc[i] = _mm512_setzero_si512();
      for (int64_t k = 0; k < g->k; k += 64) {
        const __mmask64 mk = g->k - k >= 64 ? ~0ull : ~0ull >> (64 - (g->k - k));
        const __m512i wv = _mm512_maskz_loadu_epi8(mk, w + k);
        if (r0 == 0) cs = _mm512_dpbusd_epi32(cs, ones, wv);
        for (int i = 0; i < 4; i++) {
          if (i >= rows) break;
          const int8_t *x = (const int8_t *)g->x + (r0 + i) * g->ldx + k;
          acc[i] = _mm512_dpbusd_epi32(acc[i],
                                       _mm512_xor_si512(_mm512_maskz_loadu_epi8(mk, x), flip), wv);
        }
      }
      if (r0 == 0) wsum = _mm512_reduce_add_epi32(cs);
      for (int i = 0; i < rows; i++)
        ((int32_t *)g->c)[(r0 + i) * g->ldc + j] = _mm512_reduce_add_epi32(acc[i]) - 128 * wsum;
    }
  }
  epilogue(g, 0, g->m, begin, end);
}

/* Runs g (k >= 1) on the ctx's threads; c, colsum and yt/y/bias/scales already set. */
static kite_status run(kite_ctx *ctx, wgemm *g) {
  if (g->m == 0 || g->n == 0) return KITE_OK;
  const cpu_gemm_plan plan =
      cpu_gemm_plan_make(cpu_gemm_parts(ctx, g->m, g->n, g->k), g->m, g->n, g->amx ? 32 : WMR, WNR);
  g->split_n = plan.split_n;
  g->span = plan.span;

  /* workspace: [c (m x n x 4) when y is not f32 or is int8] [colsum (n x 4) for int8] [panels];
   * the int8 GEMV (few rows) needs c alone */
  const bool own_c = g->kind == WK_I8 || g->yt != KITE_DTYPE_F32;
  const size_t cbytes = own_c ? ((size_t)(g->m * g->n) * 4 + WALIGN - 1) / WALIGN * WALIGN : 0;
  const bool shifted = g->kind == WK_I8 && !g->amx; /* VPDPBUSD: x + 128, colsum to take off */
  const bool gemv = shifted && g->m <= CPU_GEMV_MAX_M;
  const size_t sbytes = shifted && !gemv ? ((size_t)g->n * 4 + WALIGN - 1) / WALIGN * WALIGN : 0;
  const size_t pbytes = gemv ? 0 : (size_t)plan.parts * (AP_BYTES + BP_BYTES);
  void *ws = NULL;
  kite_status s = kite_ctx_workspace(ctx, cbytes + sbytes + pbytes + WALIGN, &ws);
  if (s != KITE_OK) return s;
  char *p = (char *)(((uintptr_t)ws + WALIGN - 1) & ~(uintptr_t)(WALIGN - 1));
  if (own_c) {
    g->c = p;
    g->ldc = g->n;
  } else {
    g->c = g->y;
    g->ldc = g->ldy;
  }
  if (gemv) {
    g->colsum = NULL; /* taken off by the GEMV itself */
    cpu_parallel_run(cpu_parallel_parts(ctx, g->n, g->n * g->k * g->m), g->n, gemv_i8_task, g);
    return KITE_OK;
  }
  if (shifted) {
    g->colsum = (const int32_t *)(p + cbytes);
    cpu_parallel_run(cpu_parallel_parts(ctx, g->n, g->n * g->k), g->n, colsum_task, g);
  }
  g->scratch = p + cbytes + sbytes;
  cpu_parallel_run(plan.parts, plan.items, task, g);
  return KITE_OK;
}

/* linear through the driver with kernel `kind`: WK_F32 for f32 / bf16 / f16 (16-bit types widened
 * while packed), WK_BF16 for bf16 pairs. */
static kite_status linear(const kite_kernel *k, kite_ctx *ctx, const kite_linear_args *a,
                          wkind kind, bool amx) {
  /* Few rows are bound by reading w, not by multiplies: packing w would only add a pass over
   * it, so they take the weight-streaming GEMV (AVX2 code, present on every AVX-512 CPU). On AMX
   * the multiplies cost so little that from 9 rows on the tiles win (w is packed in L2-sized
   * blocks and still read from memory once). */
  if (a->m <= (amx ? AMX_GEMV_MAX_M : CPU_GEMV_MAX_M)) return cpu_linear_avx2(k, ctx, a);
  if (a->k == 0) {
    cpu_linear_bias_only(a->dtype, a->m, a->n, a->bias, a->y, a->y_stride);
    return KITE_OK;
  }
  wgemm g = {.kind = kind,
             .amx = amx,
             .t = a->dtype,
             .m = a->m,
             .n = a->n,
             .k = a->k,
             .x = a->x,
             .w = a->w,
             .ldx = a->x_stride,
             .ldw = a->w_stride,
             .yt = a->dtype,
             .y = a->y,
             .ldy = a->y_stride,
             .bias = a->bias};
  return run(ctx, &g);
}

kite_status cpu_linear_avx512(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_linear_args *a = args;
  if (!cpu_is_float(a->dtype))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "linear: cpu.avx512: f32, f16, bf16 only");
  return linear(k, ctx, a, WK_F32, false);
}

kite_status cpu_linear_avx512bf16(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_linear_args *a = args;
  if (a->dtype != KITE_DTYPE_BF16)
    return kite_set_error(KITE_ERR_UNSUPPORTED, "linear: cpu.avx512bf16: bf16 only");
  return linear(k, ctx, a, WK_BF16, false);
}

kite_status cpu_linear_amx(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_linear_args *a = args;
  if (a->dtype != KITE_DTYPE_BF16 || !cpu_amx_ready())
    return kite_set_error(KITE_ERR_UNSUPPORTED, "linear: cpu.amx: bf16 with AMX only");
  return linear(k, ctx, a, WK_BF16, true);
}

/* linear_wq4 with many rows of x: the f32 GEMM with w's blocks decoded while its panels are
 * packed (once per panel and K block, shared by every row of x), x widened as linear's. */
kite_status cpu_wq4_gemm_avx512(kite_ctx *ctx, const kite_linear_wq4_args *a) {
  wgemm g = {.kind = WK_F32,
             .t = a->dtype,
             .m = a->m,
             .n = a->n,
             .k = a->k,
             .x = a->x,
             .ldx = a->x_stride,
             .yt = a->dtype,
             .y = a->y,
             .ldy = a->y_stride,
             .bias = a->bias,
             .q4 = a};
  if (a->k == 0) {
    cpu_linear_bias_only(a->dtype, a->m, a->n, a->bias, a->y, a->y_stride);
    return KITE_OK;
  }
  return run(ctx, &g);
}

/* int8 linear_quant on VPDPBUSD (x shifted, colsum) or AMX TDPBSSD. */
static kite_status quant(kite_ctx *ctx, const kite_linear_quant_args *a, bool amx) {
  if (a->k == 0) {
    cpu_linear_bias_only(a->dtype, a->m, a->n, a->bias, a->y, a->y_stride);
    return KITE_OK;
  }
  wgemm g = {.kind = WK_I8,
             .amx = amx,
             .t = KITE_DTYPE_I8,
             .m = a->m,
             .n = a->n,
             .k = a->k,
             .x = a->xq,
             .w = a->wq,
             .ldx = a->x_stride,
             .ldw = a->w_stride,
             .yt = a->dtype,
             .y = a->y,
             .ldy = a->y_stride,
             .bias = a->bias,
             .xs = a->x_scales,
             .ws = a->w_scales};
  return run(ctx, &g);
}

kite_status cpu_linear_quant_avx512vnni(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_linear_quant_args *a = args;
  if (a->qdtype != KITE_DTYPE_I8)
    return kite_set_error(KITE_ERR_UNSUPPORTED, "linear_quant: cpu.avx512vnni: int8 only");
  return quant(ctx, a, false);
}

kite_status cpu_linear_quant_amx(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_linear_quant_args *a = args;
  if (a->qdtype != KITE_DTYPE_I8 || !cpu_amx_ready())
    return kite_set_error(KITE_ERR_UNSUPPORTED, "linear_quant: cpu.amx: int8 with AMX only");
  return quant(ctx, a, true);
}

/* Linux hands out the AMX tile state only to processes that ask (arch_prctl), once. */
static pthread_once_t g_amx_once = PTHREAD_ONCE_INIT;
static bool g_amx_ok;

static void amx_request(void) {
  g_amx_ok = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
}

bool cpu_amx_ready(void) {
  pthread_once(&g_amx_once, amx_request);
  return g_amx_ok;
}
