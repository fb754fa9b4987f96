/*
 * The GEMM family's cases (driver_gemm.h): kite check's shapes of linear, group_gemm,
 * topk_gating, fused_moe, quant, dequant, linear_quant and linear_wq4, the NMSE bound each op's
 * outputs are checked against, and kite bench's shapes. Cases cover 0, 1 and many rows, odd
 * sizes, one large dimension at a time, strided views, bias on and off, empty groups, ties in the
 * gating logits, expert ids out of range, and the special values of quantization. driver_gemm.c
 * plans, fills, describes and calls them.
 */
#include <string.h>

#include "driver_gemm.h"

/* ---- bounds ------------------------------------------------------------------------------ */

/* NMSE bounds against the float64 ref, one per (op, dtype) for every output of the op.
 *   linear, group_gemm, linear_quant (fp8: f32 accumulation): f32 accumulation over K <= 4096
 *     terms: blocked sums measure 1e-14 .. 6e-13 (the worst over 120 seeds: K = 4096 with
 *     only 17 outputs, whose NMSE is noisy); naive summation is at worst ~K 2^-48 = 1.5e-11
 *     relative to the row's scale (a plain f32 loop, CUDA's tiled kernel: up to 2.2e-12
 *     measured). 5e-11 accepts both and still rejects a dropped term (~1/K = 2e-4) or
 *     reduced-precision tf32 products (~2^-22 = 2e-7); f16 / bf16 outputs rounded once (relative
 *     2^-11 / 2^-8): NMSE ~1e-7 / ~5e-6, bounds 1e-6 / 1e-4.
 *   linear_quant int8: exact integer dot products, then two f32 scale products: ~1e-14.
 *   linear_wq4: weights decoded exactly; f32 sums of x q per block, then d times that plus the
 *     block's offset (m or -8 d) times the f32 sum of x: each block rounds a few times relative
 *     to its own magnitude; the block's two terms (d sum(x q) and the offset times sum(x)) may
 *     cancel, leaving an output far smaller than the terms (measured: NMSE 1.3e-7 on the single
 *     output of N = 1, K = 32 with a bias): 1e-6 for f32 (a dropped block moves NMSE by
 *     ~32/K >= 8e-3), the linear bounds for f16/bf16.
 *   fused_moe: the intermediate act(gate) * up is rounded to the dtype, and a kernel's f32
 *     gate may round it the other way than ref's float64 one: a few intermediate elements off
 *     by one ulp of the dtype on top of the output rounding: f32 1e-10, f16 1e-5, bf16 1e-4.
 *   topk_gating: weights are f32 softmax (~1e-14); ids are compared as numbers under the same
 *     bound: one wrong id among T k ids of at most E - 1 moves NMSE by >= 1 / sum(ids^2) >=
 *     1 / (T k E^2), which is > 5e-8 in every case here (T k E^2 <= 2e7), so 1e-11 makes any
 *     wrong id (a swapped tie too, whose weights are equal) fail.
 *   quant: 0. The quotient is an f32 division on every backend, so codes agree bit for bit;
 *     scales are amax / qmax in f32, also exact; any wrong int8 code moves NMSE by >= 1.
 *   dequant: 0. The exact product code * scale (<= 8 + 24 significant bits) is rounded once to
 *     the dtype on every backend (kite.h), so all agree bit for bit; a kernel that rounds the
 *     f32 product to nearest and then to f16 / bf16 is one ulp off on some ties and fails. */
double gemm_bound(kite_op op, kite_dtype t) {
  int f16 = t == KITE_DTYPE_F16, bf16 = t == KITE_DTYPE_BF16;
  switch (op) {
  case KITE_OP_LINEAR:
  case KITE_OP_GROUP_GEMM:
  case KITE_OP_LINEAR_QUANT:
    return f16 ? 1e-6 : bf16 ? 1e-4 : 5e-11;
  case KITE_OP_FUSED_MOE:
    return f16 ? 1e-5 : bf16 ? 1e-4 : 1e-10;
  case KITE_OP_LINEAR_WQ4:
    return f16 ? 1e-6 : bf16 ? 1e-4 : 1e-6;
  case KITE_OP_TOPK_GATING:
    return 1e-11;
  default:
    return 0;
  }
}

/* ---- the cases --------------------------------------------------------------------------- */

static kt_case gemm_case(kite_op op, kite_dtype t, int64_t m, int64_t n, int64_t k) {
  kt_case c = kt_case_default(op, t, m, n);
  c.gemm.m = m, c.gemm.n = n, c.gemm.k = k;
  c.gemm.qtype = KITE_DTYPE_I8;
  return c;
}

typedef struct mnk {
  int64_t m, n, k;
} mnk;

/* From {1, 3, 17, 64, 127, 4096}: every size in every position, 4096 only beside small ones;
 * then every row count of the few-row (GEMV) tiles, 2 and 4 to 16, against N and K that leave
 * partial weight blocks and vector tails; then K = 0 (y = bias or 0) and M = 0. */
static const mnk g_linear[] = {
    {1, 1, 1},       {1, 3, 17},     {3, 17, 64},   {17, 64, 127},   {64, 127, 3},  {127, 1, 64},
    {3, 127, 17},    {17, 3, 1},     {64, 64, 64},  {127, 127, 127}, {1, 4096, 64}, {3, 64, 4096},
    {17, 127, 4096}, {4096, 17, 64}, {4096, 3, 17}, {1, 17, 4096},   {2, 13, 37},   {4, 7, 64},
    {5, 13, 37},     {6, 5, 127},    {7, 64, 8},    {8, 13, 4101},   {9, 6, 37},    {10, 7, 17},
    {11, 1, 127},    {12, 13, 64},   {13, 64, 7},   {14, 5, 37},     {15, 13, 127}, {16, 64, 4101},
    {5, 9, 0},       {0, 17, 64}};
static const mnk g_quick_linear[] = {{1, 3, 17}, {3, 17, 64}, {17, 64, 127}, {3, 64, 4096}};

/* The cases of a linear-shaped op over the shapes s[0, n), once per variant v < variants (linear:
 * one; linear_quant: int8, e4m3; linear_wq4: sym, min): bias on every other case, padded rows on
 * two of every three. */
static void mnk_cases(kite_op op, kite_dtype t, const mnk *s, int n, int variants,
                      kt_case_list *l) {
  for (int v = 0; v < variants; v++)
    for (int i = 0; i < n; i++) {
      kt_case c = gemm_case(op, t, s[i].m, s[i].n, s[i].k);
      if (op == KITE_OP_LINEAR_QUANT) c.gemm.qtype = v ? KITE_DTYPE_FP8_E4M3 : KITE_DTYPE_I8;
      if (op == KITE_OP_LINEAR_WQ4) c.gemm.wq4 = v ? KITE_WQ4_MIN : KITE_WQ4_SYM;
      c.gemm.with_bias = (i + v) % 2 == 0;
      if (i % 3 == 1) c.gemm.pad_x = 5, c.gemm.pad_y = 3;
      if (i % 3 == 2) c.gemm.pad_w = 7, c.gemm.pad_y = 1;
      kt_case_push(l, c);
    }
}

typedef struct group_geom {
  int64_t m, n, k, g; /* m -1: the sum of the sizes */
  int32_t sizes[8];
} group_geom;

/* Empty groups first, in the middle and last; one group; many. Sizes that are negative or do not
 * add up to M are an error where the harness's inputs live (host memory, kite.h), so no case
 * has them. Odd-indexed cases pad the rows (group_gemm_cases), so that row strides are not
 * multiples of 16 bytes (cuBLASLt's alignment hints then differ from the unpadded cases'). */
static const group_geom g_groups[] = {{-1, 17, 64, 3, {0, 1, 2}},
                                      {-1, 33, 19, 5, {5, 0, 12, 0, 23}},
                                      {-1, 64, 127, 4, {70, 57, 0, 0}},
                                      {-1, 127, 17, 1, {17}},
                                      {-1, 3, 4096, 3, {0, 64, 0}},
                                      {-1, 64, 64, 8, {16, 1, 0, 31, 3, 17, 8, 4}},
                                      {-1, 1, 3, 2, {0, 0}},
                                      /* equal groups: cuda.cublaslt's one batched call */
                                      {-1, 33, 64, 3, {32, 32, 32}},
                                      {-1, 64, 48, 4, {8, 8, 8, 8}},
                                      {-1, 9, 40, 3, {1, 1, 1}},
                                      /* ragged, aligned, a group of one row */
                                      {-1, 64, 64, 5, {0, 1, 7, 0, 24}},
                                      /* equal groups, padded rows */
                                      {-1, 17, 24, 4, {2, 2, 2, 2}},
                                      /* ragged, aligned, eight groups */
                                      {-1, 48, 32, 8, {3, 0, 9, 1, 0, 16, 2, 5}},
                                      /* groups past one 128-row tile, padded rows */
                                      {-1, 96, 64, 2, {100, 28}},
                                      /* aligned: several row and column tiles, K not a multiple
                                       * of 64, N not a multiple of 128, empty groups */
                                      {-1, 300, 200, 6, {130, 0, 257, 1, 0, 64}},
                                      /* full 64-row halves of tiles beside partial ones; the
                                       * second with 16-byte aligned rows of y (TMA-stored y:
                                       * boxes ending where a group ends, columns past N) */
                                      {-1, 264, 64, 3, {192, 0, 72}},
                                      {-1, 320, 72, 4, {200, 64, 0, 129}}};
static const group_geom g_quick_groups[] = {{-1, 33, 19, 5, {5, 0, 12, 0, 23}},
                                            {-1, 127, 17, 1, {17}},
                                            {-1, 300, 200, 6, {130, 0, 257, 1, 0, 64}},
                                            {-1, 264, 64, 3, {192, 0, 72}},
                                            {-1, 320, 72, 4, {200, 64, 0, 129}}};

static void group_gemm_cases(kite_dtype t, int quick, kt_case_list *l) {
  const group_geom *s = quick ? g_quick_groups : g_groups;
  int n = quick ? KT_COUNT(g_quick_groups) : KT_COUNT(g_groups);
  for (int i = 0; i < n; i++) {
    int64_t m = 0;
    for (int64_t j = 0; j < s[i].g; j++) m += s[i].sizes[j];
    kt_case c = gemm_case(KITE_OP_GROUP_GEMM, t, s[i].m >= 0 ? s[i].m : m, s[i].n, s[i].k);
    c.gemm.groups = s[i].g;
    memcpy(c.gemm.group_sizes, s[i].sizes, sizeof s[i].sizes);
    if (i % 2 == 1) c.gemm.pad_x = 3, c.gemm.pad_w = 2, c.gemm.pad_y = 1;
    kt_case_push(l, c);
  }
}

typedef struct topk_geom {
  int64_t t, e, k;
  int renorm, ties;
} topk_geom;

static const topk_geom g_topk[] = {{17, 8, 2, 1, 0},  {64, 64, 6, 0, 1},  {3, 3, 3, 1, 1},
                                   {1, 127, 1, 0, 0}, {127, 17, 4, 1, 1}, {5, 8, 8, 0, 0},
                                   {64, 8, 1, 1, 1},  {33, 256, 8, 1, 0}, {0, 8, 2, 1, 0}};
static const topk_geom g_quick_topk[] = {{17, 8, 2, 1, 0}, {64, 64, 6, 0, 1}, {3, 3, 3, 1, 1}};

static void topk_cases(kite_dtype t, int quick, kt_case_list *l) {
  const topk_geom *s = quick ? g_quick_topk : g_topk;
  int n = quick ? KT_COUNT(g_quick_topk) : KT_COUNT(g_topk);
  for (int i = 0; i < n; i++) {
    kt_case c = gemm_case(KITE_OP_TOPK_GATING, t, s[i].t, s[i].e, 0);
    c.gemm.topk = s[i].k, c.gemm.renormalize = s[i].renorm, c.gemm.ties = s[i].ties;
    if (i % 2 == 1) c.gemm.pad_x = 3, c.gemm.pad_y = 2;
    kt_case_push(l, c);
  }
}

typedef struct moe_geom {
  int64_t t, h, in, e, k;
  kite_moe_act act;
  int oob;
} moe_geom;

static const moe_geom g_moe[] = {
    {0, 64, 48, 8, 2, KITE_MOE_SILU, 1},   {1, 64, 48, 8, 2, KITE_MOE_SILU, 1},
    {1, 64, 48, 8, 2, KITE_MOE_GELU, 0},   {17, 40, 24, 8, 2, KITE_MOE_GELU, 1},
    {64, 33, 20, 8, 2, KITE_MOE_SILU, 1},  {127, 64, 32, 8, 2, KITE_MOE_GELU, 0},
    {5, 17, 3, 3, 3, KITE_MOE_SILU, 0},    {3, 17, 0, 3, 2, KITE_MOE_SILU, 0},
    {16, 128, 127, 8, 2, KITE_MOE_SILU, 1}};
static const moe_geom g_quick_moe[] = {{1, 64, 48, 8, 2, KITE_MOE_SILU, 1},
                                       {17, 40, 24, 8, 2, KITE_MOE_GELU, 1}};

static void moe_cases(kite_dtype t, int quick, kt_case_list *l) {
  const moe_geom *s = quick ? g_quick_moe : g_moe;
  int n = quick ? KT_COUNT(g_quick_moe) : KT_COUNT(g_moe);
  for (int i = 0; i < n; i++) {
    kt_case c = gemm_case(KITE_OP_FUSED_MOE, t, s[i].t, s[i].h, s[i].in);
    c.gemm.groups = s[i].e, c.gemm.topk = s[i].k, c.gemm.act = s[i].act;
    c.gemm.oob_ids = s[i].oob;
    if (i % 2 == 1) c.gemm.pad_x = 5, c.gemm.pad_w = 1, c.gemm.pad_y = 3;
    kt_case_push(l, c);
  }
}

typedef struct qshape {
  int64_t m, k;
  int specials;
} qshape;

static const qshape g_quant[] = {{17, 127, 0}, {3, 4096, 0}, {14, 64, 1}, {21, 17, 1}, {7, 4096, 1},
                                 {1, 3, 0},    {64, 1, 1},   {2, 0, 0},   {0, 64, 0}};
static const qshape g_quick_quant[] = {{17, 127, 0}, {14, 64, 1}};

static void quant_cases(kite_op op, kite_dtype t, int quick, kt_case_list *l) {
  const qshape *s = quick ? g_quick_quant : g_quant;
  int n = quick ? KT_COUNT(g_quick_quant) : KT_COUNT(g_quant);
  for (int q = 0; q < 2; q++)
    for (int i = 0; i < n; i++) {
      kt_case c = gemm_case(op, t, s[i].m, 0, s[i].k);
      c.gemm.qtype = q ? KITE_DTYPE_FP8_E4M3 : KITE_DTYPE_I8;
      c.gemm.specials = s[i].specials;
      if (i % 2 == 1) c.gemm.pad_x = 3, c.gemm.pad_y = 5;
      kt_case_push(l, c);
    }
}

static const mnk g_lq[] = {{1, 17, 64},     {3, 127, 17},  {17, 1, 127}, {64, 3, 1}, {127, 64, 3},
                           {64, 127, 4096}, {1, 4096, 64}, {3, 5, 0},    {0, 17, 64}};
static const mnk g_quick_lq[] = {{3, 127, 17}, {17, 64, 127}};

/* K a multiple of 32: one block, odd block counts, SmolLM2's 576 and 1536, a long row; 0 and 1
 * rows, the GEMV's few rows and many (the packed-GEMM path: several w panels and K blocks);
 * N odd. Both formats, bias on and off, padded rows. */
static const mnk g_wq4[] = {{1, 1, 32},    {1, 7, 96},    {3, 17, 576},  {4, 64, 1536},
                            {5, 3, 4096},  {17, 127, 64}, {64, 13, 576}, {127, 5, 160},
                            {8, 576, 576}, {0, 17, 64},   {2, 1, 32},    {40, 70, 1056}};
static const mnk g_quick_wq4[] = {{1, 7, 96}, {17, 127, 64}, {3, 17, 576}};

/* mnk_cases over the table `full`, or `quick_set` for a quick run. */
#define MNK_CASES(op, full, quick_set, variants)                                                   \
  mnk_cases(op, t, quick ? quick_set : full, quick ? KT_COUNT(quick_set) : KT_COUNT(full),         \
            variants, l)

/* kite check's cases of op at dtype t (the float dtype: x, logits, y of linear_quant). */
void gemm_check_cases(kite_op op, kite_dtype t, int quick, kt_case_list *l) {
  switch (op) {
  case KITE_OP_LINEAR:
    MNK_CASES(op, g_linear, g_quick_linear, 1);
    break;
  case KITE_OP_GROUP_GEMM:
    group_gemm_cases(t, quick, l);
    break;
  case KITE_OP_TOPK_GATING:
    topk_cases(t, quick, l);
    break;
  case KITE_OP_FUSED_MOE:
    moe_cases(t, quick, l);
    break;
  case KITE_OP_QUANT:
  case KITE_OP_DEQUANT:
    quant_cases(op, t, quick, l);
    break;
  case KITE_OP_LINEAR_QUANT:
    MNK_CASES(op, g_lq, g_quick_lq, 2);
    break;
  case KITE_OP_LINEAR_WQ4:
    MNK_CASES(op, g_wq4, g_quick_wq4, 2);
    break;
  default:
    break;
  }
}

/* ---- bench ------------------------------------------------------------------------------- */

static kt_case moe_bench_case(kite_dtype t, int64_t tokens) {
  kt_case c = gemm_case(KITE_OP_FUSED_MOE, t, tokens, 4096, 14336);
  c.gemm.groups = 8, c.gemm.topk = 2;
  c.gemm.distinct_ids = 1, c.gemm.alt_scratch = 1;
  return c;
}

static kt_case group_bench_case(kite_dtype t, int64_t groups, int32_t rows, int64_t n, int64_t k) {
  kt_case c = gemm_case(KITE_OP_GROUP_GEMM, t, groups * rows, n, k);
  c.gemm.groups = groups;
  for (int64_t g = 0; g < groups && g < KT_MAX_SEQS; g++) c.gemm.group_sizes[g] = rows;
  return c;
}

static kt_case qtype_case(kite_op op, kite_dtype t, int64_t m, int64_t n, int64_t k,
                          kite_dtype qt) {
  kt_case c = gemm_case(op, t, m, n, k);
  c.gemm.qtype = qt;
  return c;
}

/* llm: the shapes of an 8B-class model's projections and an 8-expert MoE layer at bf16 (f32
 * and the linear 2048^3 beside OpenBLAS); small: one mid shape per op. */
void gemm_bench_cases(kite_op op, kite_dtype t, int llm, kt_case_list *l) {
  int bf16 = t == KITE_DTYPE_BF16;
  switch (op) {
  case KITE_OP_LINEAR:
    if (!llm) {
      kt_case_push(l, gemm_case(op, t, 512, 4096, 4096));
      break;
    }
    kt_case_push(l, gemm_case(op, t, 2048, 2048, 2048));
    if (!bf16) break;
    for (int64_t m = 1; m <= 16; m *= 4) kt_case_push(l, gemm_case(op, t, m, 4096, 4096));
    kt_case_push(l, gemm_case(op, t, 8192, 8192, 8192)); /* a GPU shape */
    /* beside linear_gguf's bf16 rows (driver_gguf.c): 4096 x 4096 at M 64 and 4096, and a
     * gpt-oss-20b expert's gate_up (N 5760, K 2880) at M 1, 64 and 4096 */
    for (int64_t m = 64; m <= 4096; m *= 64) kt_case_push(l, gemm_case(op, t, m, 4096, 4096));
    for (int64_t m = 1; m <= 4096; m *= 64) kt_case_push(l, gemm_case(op, t, m, 5760, 2880));
    break;
  case KITE_OP_GROUP_GEMM:
    if (llm && bf16) kt_case_push(l, group_bench_case(t, 8, 512, 4096, 4096));
    /* beside group_gemm_gguf's MXFP4 rows: gpt-oss-20b's 32 experts, 4 and 128 rows each */
    if (llm && bf16) kt_case_push(l, group_bench_case(t, 32, 4, 5760, 2880));
    if (llm && bf16) kt_case_push(l, group_bench_case(t, 32, 128, 5760, 2880));
    if (!llm) kt_case_push(l, group_bench_case(t, 8, 64, 1024, 1024));
    break;
  case KITE_OP_TOPK_GATING: {
    kt_case c = gemm_case(op, t, llm ? 8192 : 512, 64, 0);
    c.gemm.topk = 6, c.gemm.renormalize = 1;
    kt_case_push(l, c);
    break;
  }
  case KITE_OP_FUSED_MOE:
    if (!llm) { /* T 1, 16 and 256 (fused_moe_ex's small bench has the same plain shapes) */
      for (int64_t tok = 1; tok <= 256; tok *= 16) {
        kt_case c = gemm_case(op, t, tok, 1024, 2048);
        c.gemm.groups = 8, c.gemm.topk = 2, c.gemm.distinct_ids = 1, c.gemm.alt_scratch = 1;
        kt_case_push(l, c);
      }
    } else if (bf16) {
      for (int64_t tok = 1; tok <= 256; tok *= 16) kt_case_push(l, moe_bench_case(t, tok));
    }
    break;
  case KITE_OP_QUANT:
  case KITE_OP_DEQUANT:
    if (!bf16) break;
    kt_case_push(l, qtype_case(op, t, llm ? 8192 : 512, 0, 4096, KITE_DTYPE_I8));
    kt_case_push(l, qtype_case(op, t, llm ? 8192 : 512, 0, 4096, KITE_DTYPE_FP8_E4M3));
    break;
  case KITE_OP_LINEAR_WQ4: {
    /* decode and a 512-token prompt on SmolLM2's MLP (576 -> 1536) and an 8B-class projection */
    static const mnk sh[] = {{1, 1536, 576}, {512, 1536, 576}, {1, 4096, 4096}, {16, 4096, 4096}};
    for (int i = 0; i < (llm ? 4 : 2); i++)
      for (int f = 0; f < 2; f++) {
        kt_case c = gemm_case(op, t, sh[i].m, sh[i].n, sh[i].k);
        c.gemm.wq4 = f ? KITE_WQ4_MIN : KITE_WQ4_SYM;
        kt_case_push(l, c);
      }
    break;
  }
  case KITE_OP_LINEAR_QUANT:
    if (!bf16) break;
    if (llm)
      kt_case_push(l, qtype_case(op, t, 2048, 2048, 2048, KITE_DTYPE_I8));
    else
      kt_case_push(l, qtype_case(op, t, 512, 4096, 4096, KITE_DTYPE_I8));
    break;
  default:
    break;
  }
}
