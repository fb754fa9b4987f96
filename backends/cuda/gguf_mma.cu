/*
 * linear_gguf on tensor cores for many rows (m >= 16, f16 / bf16 activations), every block type.
 *
 * Every block type is, over each run of 16 consecutive values of a row ("a chunk": the scale
 * groups of all types are 16 values or multiples of 16), w = a q + b with small integer codes q
 * (|q| <= 128, exact in f16 and bf16) and f32 a, b read from the block (d sc, -dmin mn, 2^(e-128),
 * ...; exact products of the block's fields). So a chunk's share of y[m, n] is
 *   a[n] (x[m, chunk] . q[n, chunk]) + b[n] sum(x[m, chunk]),
 * where the dot product of x (as stored) with the codes runs on mma.sync m16n8k16 with f32
 * accumulators, exactly as the weights' definition asks: no weight is rounded to 16 bits.
 *
 * A CTA computes a BM x BN tile of y with 8 warps (2 along m, 4 along n). Each step of 32 values
 * of k: the x tile (BM x 32, plus each row's chunk sums when the type has offsets) and the codes
 * of the w tile (BN x 32, plus each column's a, b per chunk) go to shared memory, double-
 * buffered so that one step's decoding overlaps the previous step's mma; per chunk, a warp's
 * products land in fresh accumulators that are scaled into the outputs.
 * group_gemm_gguf runs the same kernel over the 64-row, one-group tiles of group_gemm's device
 * schedule (gemm.cuh), each CTA reading its group's weights and bias.
 */
#include "attention.cuh"
#include "cuda_backend.h"
#include "gemm.cuh"
#include "gguf.cuh"

using namespace kite_cuda;

namespace {

constexpr int BK = 32;      /* k per step: two chunks */
constexpr int LDS = BK + 8; /* shared pitch in elements: 80 bytes, so the 8 rows of an ldmatrix
                             * phase land in distinct bank groups */
constexpr int THREADS = 256;

/* The types whose chunks have an offset b (a min term). */
__host__ __device__ constexpr bool has_offset(int t) {
  return t == KITE_GGUF_Q4_1 || t == KITE_GGUF_Q5_1 || t == KITE_GGUF_Q2_K || t == KITE_GGUF_Q4_K ||
         t == KITE_GGUF_Q5_K;
}

/* Codes q[l] of values 16 c + l (l < 16) of block blk, and the chunk's a and b (kite.h). */
__device__ __forceinline__ void decode_chunk(int t, const uint8_t *blk, int c, int (&q)[16],
                                             float &a, float &b) {
  b = 0.0f;
  switch (t) {
  case KITE_GGUF_Q4_0:
  case KITE_GGUF_IQ4_NL:
  case KITE_GGUF_Q4_1:
  case KITE_GGUF_MXFP4: {
    const int off = t == KITE_GGUF_Q4_1 ? 4 : t == KITE_GGUF_MXFP4 ? 1 : 2, sh = 4 * c;
    a = t == KITE_GGUF_MXFP4 ? mxfp4_scale(blk[0]) : f16_at(blk);
    if (t == KITE_GGUF_Q4_1) b = f16_at(blk + 2);
#pragma unroll
    for (int l = 0; l < 16; l++) {
      const int nib = (blk[off + l] >> sh) & 15;
      q[l] = t == KITE_GGUF_Q4_0    ? nib - 8
             : t == KITE_GGUF_Q4_1  ? nib
             : t == KITE_GGUF_MXFP4 ? c_e2m1x2[nib]
                                    : c_iq4_nl[nib];
    }
    return;
  }
  case KITE_GGUF_Q5_0:
  case KITE_GGUF_Q5_1: {
    const int off = t == KITE_GGUF_Q5_0 ? 2 : 4, sh = 4 * c;
    const unsigned h = (unsigned)blk[off + 2 * c] | (unsigned)blk[off + 2 * c + 1] << 8;
    a = f16_at(blk);
    if (t == KITE_GGUF_Q5_1) b = f16_at(blk + 2);
#pragma unroll
    for (int l = 0; l < 16; l++) {
      const int v = ((blk[off + 4 + l] >> sh) & 15) | (int)((h >> l) & 1) << 4;
      q[l] = t == KITE_GGUF_Q5_0 ? v - 16 : v;
    }
    return;
  }
  case KITE_GGUF_Q8_0:
  case KITE_GGUF_Q8_K: {
    const int off = t == KITE_GGUF_Q8_0 ? 2 : 4;
    a = t == KITE_GGUF_Q8_0 ? f16_at(blk)
                            : __uint_as_float((unsigned)blk[0] | (unsigned)blk[1] << 8 |
                                              (unsigned)blk[2] << 16 | (unsigned)blk[3] << 24);
#pragma unroll
    for (int l = 0; l < 16; l++) q[l] = (int8_t)blk[off + 16 * c + l];
    return;
  }
  case KITE_GGUF_Q2_K:
  case KITE_GGUF_Q3_K:
  case KITE_GGUF_Q6_K: {
    /* chunk c is values 128 h + 32 j + 16 half + l: scale index c itself */
    const int h = c / 8, j = c % 8 / 2, half = c % 2;
    if (t == KITE_GGUF_Q2_K) {
      const uint8_t *qs = blk + 16 + 32 * h + 16 * half;
      a = f16_at(blk + 80) * (float)(blk[c] & 15);
      b = -(f16_at(blk + 82) * (float)(blk[c] >> 4));
#pragma unroll
      for (int l = 0; l < 16; l++) q[l] = (qs[l] >> (2 * j)) & 3;
    } else if (t == KITE_GGUF_Q3_K) {
      const uint8_t *qs = blk + 32 + 32 * h + 16 * half, *hm = blk + 16 * half, *sc = blk + 96;
      const int low = c < 8 ? sc[c] & 15 : sc[c - 8] >> 4;
      a = f16_at(blk + 108) * (float)((low | ((sc[8 + c % 4] >> (2 * (c / 4))) & 3) << 4) - 32);
#pragma unroll
      for (int l = 0; l < 16; l++)
        q[l] = ((qs[l] >> (2 * j)) & 3) - ((hm[l] >> (4 * h + j)) & 1 ? 0 : 4);
    } else {
      const uint8_t *ql = blk + 64 * h + 32 * (j % 2) + 16 * half;
      const uint8_t *qh = blk + 128 + 32 * h + 16 * half;
      a = f16_at(blk + 208) * (float)(int8_t)blk[192 + c];
#pragma unroll
      for (int l = 0; l < 16; l++)
        q[l] = ((j < 2 ? ql[l] & 15 : ql[l] >> 4) | ((qh[l] >> (2 * j)) & 3) << 4) - 32;
    }
    return;
  }
  case KITE_GGUF_Q4_K:
  case KITE_GGUF_Q5_K: {
    /* values 64 cc + l2 (l2 = 16 (c % 4) + l): sub-block s = 2 cc + l2 / 32, nibble l2 / 32 */
    const int cc = c / 4, l0 = 16 * (c % 4), s = 2 * cc + l0 / 32, sh = 4 * (l0 / 32);
    const uint8_t *qs = blk + (t == KITE_GGUF_Q4_K ? 16 : 48) + 32 * cc + l0 % 32;
    a = f16_at(blk) * (float)k4_scale(blk + 4, s, false);
    b = -(f16_at(blk + 2) * (float)k4_scale(blk + 4, s, true));
#pragma unroll
    for (int l = 0; l < 16; l++) {
      int v = (qs[l] >> sh) & 15;
      if (t == KITE_GGUF_Q5_K) v |= ((blk[16 + l0 % 32 + l] >> s) & 1) << 4;
      q[l] = v;
    }
    return;
  }
  default:
    a = 0.0f;
#pragma unroll
    for (int l = 0; l < 16; l++) q[l] = 0;
  }
}

/* A launch: the call (x, y, w and bias of group 0), and for group_gemm_gguf the byte stride
 * between groups' weights and the device schedule of 64-row tiles (gemm.cuh), NULL for linear. */
struct MmaArgs {
  kite_gguf_args a;
  int64_t w_stride_g;
  const GemmTile *tiles;
  const int32_t *tile_count;
  bool vec_x; /* x's rows 16-byte aligned: x tiles in 16-byte loads */
};

template <typename T, int BM, int BN> struct Smem {
  T x[2][BM * LDS], w[2][BN * LDS];
  float a[2][BN][2], b[2][BN][2]; /* per column and chunk */
  float xs[2][BM][2];             /* per row and chunk: sum of x (types with offsets) */
};

/* One step's operands into buffer `buf`: x[m0..m_end, k0..k0+32) and the codes of w[n0.., same
 * k) (w: the tile's group's rows). */
template <typename T, int BM, int BN, bool OFF>
__device__ __forceinline__ void stage(const kite_gguf_args &p, const uint8_t *w,
                                      Smem<T, BM, BN> &sm, int buf, int64_t m0, int64_t m_end,
                                      int64_t n0, int64_t k0, bool vec_x) {
  const int tid = threadIdx.x;
  for (int it = tid; it < 2 * BM; it += THREADS) {
    const int r = it / 2, ch = it % 2;
    const int64_t m = m0 + r;
    uint4 v[2] = {make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0)};
    if (m < m_end) {
      const T *src = (const T *)p.x + m * p.x_stride + k0 + 16 * ch;
      if (vec_x) {
        v[0] = ((const uint4 *)src)[0], v[1] = ((const uint4 *)src)[1];
      } else {
        T *d = (T *)v;
#pragma unroll
        for (int l = 0; l < 16; l++) d[l] = src[l];
      }
    }
    uint4 *dst = (uint4 *)&sm.x[buf][r * LDS + 16 * ch];
    dst[0] = v[0], dst[1] = v[1];
    if (OFF) {
      const T *e = (const T *)v;
      float s = 0.0f;
#pragma unroll
      for (int l = 0; l < 16; l++) s += to_float(e[l]);
      sm.xs[buf][r][ch] = s;
    }
  }
  for (int it = tid; it < 2 * BN; it += THREADS) {
    const int r = it / 2, ch = it % 2;
    const int64_t n = n0 + r, kc = k0 + 16 * ch;
    int q[16];
    float a = 0.0f, b = 0.0f;
    if (n < p.n) {
      decode_chunk(p.type, w + n * p.w_stride + kc / p.bv * p.bb, (int)(kc % p.bv / 16), q, a, b);
    } else {
#pragma unroll
      for (int l = 0; l < 16; l++) q[l] = 0;
    }
    uint32_t packed[8];
#pragma unroll
    for (int l = 0; l < 8; l++) packed[l] = pack2<T>((float)q[2 * l], (float)q[2 * l + 1]);
    uint4 *dst = (uint4 *)&sm.w[buf][r * LDS + 16 * ch];
    dst[0] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
    dst[1] = make_uint4(packed[4], packed[5], packed[6], packed[7]);
    sm.a[buf][r][ch] = a;
    if (OFF) sm.b[buf][r][ch] = b;
  }
}

template <typename T, int BM, int BN, bool OFF>
__global__ void __launch_bounds__(THREADS) mma_kernel(MmaArgs args) {
  constexpr int WM = BM / 2, WN = BN / 4, MT = WM / 16, NT = WN / 8;
  static_assert(MT >= 1 && NT % 2 == 0, "warp tile of whole 16 x 16 mma pairs");
  __shared__ __align__(16) Smem<T, BM, BN> sm;
  const kite_gguf_args &p = args.a;
  const bool vec_x = args.vec_x;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, wm = warp / 4, wn = warp % 4;
  const int64_t n0 = (int64_t)blockIdx.x * BN;
  int64_t m0, m_end;
  const uint8_t *w = p.w;
  const T *bias = (const T *)p.bias;
  if (args.tiles) { /* group_gemm_gguf: tile blockIdx.y of the schedule, if there is one */
    if ((int64_t)blockIdx.y >= *args.tile_count) return;
    const GemmTile t = args.tiles[blockIdx.y];
    m0 = t.row0, m_end = t.row0 + t.rows;
    w += t.group * args.w_stride_g;
    if (bias) bias += t.group * p.n;
  } else {
    m0 = (int64_t)blockIdx.y * BM, m_end = m0 + BM < p.m ? m0 + BM : p.m;
  }
  float acc[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; i++)
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

  if (p.k > 0) stage<T, BM, BN, OFF>(p, w, sm, 0, m0, m_end, n0, 0, vec_x);
  __syncthreads();
  int buf = 0;
  for (int64_t k0 = 0; k0 < p.k; k0 += BK, buf ^= 1) {
    if (k0 + BK < p.k) stage<T, BM, BN, OFF>(p, w, sm, buf ^ 1, m0, m_end, n0, k0 + BK, vec_x);
#pragma unroll
    for (int kk = 0; kk < 2; kk++) {
      uint32_t af[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; mt++)
        ldmatrix_x4(
            af[mt],
            smem_addr(
                &sm.x[buf][(wm * WM + mt * 16 + (lane & 15)) * LDS + kk * 16 + 8 * (lane >> 4)]));
      float xs[MT][2] = {};
      if (OFF)
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
          const int r = wm * WM + mt * 16 + lane / 4;
          xs[mt][0] = sm.xs[buf][r][kk], xs[mt][1] = sm.xs[buf][r + 8][kk];
        }
#pragma unroll
      for (int nb = 0; nb < NT / 2; nb++) {
        uint32_t bf[4];
        ldmatrix_x4(bf,
                    smem_addr(&sm.w[buf][(wn * WN + nb * 16 + (lane & 7) + 8 * (lane >> 4)) * LDS +
                                         kk * 16 + 8 * ((lane >> 3) & 1)]));
#pragma unroll
        for (int h = 0; h < 2; h++) {
          const int nt = 2 * nb + h, col = wn * WN + nt * 8 + 2 * (lane & 3);
          const float a0 = sm.a[buf][col][kk], a1 = sm.a[buf][col + 1][kk];
          const float b0 = OFF ? sm.b[buf][col][kk] : 0.0f,
                      b1 = OFF ? sm.b[buf][col + 1][kk] : 0.0f;
#pragma unroll
          for (int mt = 0; mt < MT; mt++) {
            float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            mma16816<T>(t, af[mt], bf[2 * h], bf[2 * h + 1]);
            float *c = acc[mt][nt];
            c[0] = fmaf(t[0], a0, c[0]), c[1] = fmaf(t[1], a1, c[1]);
            c[2] = fmaf(t[2], a0, c[2]), c[3] = fmaf(t[3], a1, c[3]);
            if (OFF) {
              c[0] = fmaf(b0, xs[mt][0], c[0]), c[1] = fmaf(b1, xs[mt][0], c[1]);
              c[2] = fmaf(b0, xs[mt][1], c[2]), c[3] = fmaf(b1, xs[mt][1], c[3]);
            }
          }
        }
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int mt = 0; mt < MT; mt++)
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int64_t m = m0 + wm * WM + mt * 16 + lane / 4 + 8 * (e / 2);
        const int64_t n = n0 + wn * WN + nt * 8 + 2 * (lane & 3) + (e & 1);
        if (m >= m_end || n >= p.n) continue;
        float v = acc[mt][nt][e];
        if (bias) v += to_float(bias[n]);
        ((T *)p.y)[m * p.y_stride + n] = from_float<T>(v);
      }
}

template <typename T, int BM, int BN>
void launch(const MmaArgs &p, int64_t ytiles, cudaStream_t s) {
  const dim3 grid((unsigned)((p.a.n + BN - 1) / BN), (unsigned)ytiles);
  if (has_offset(p.a.type))
    mma_kernel<T, BM, BN, true><<<grid, THREADS, 0, s>>>(p);
  else
    mma_kernel<T, BM, BN, false><<<grid, THREADS, 0, s>>>(p);
}

/* linear_gguf: row tiles of BM, up to 65535 of them (grid.y) per launch. */
template <typename T, int BM, int BN> void launch_rows(const MmaArgs &p, cudaStream_t s) {
  const int64_t max_rows = (int64_t)65535 * BM;
  for (int64_t r0 = 0; r0 < p.a.m; r0 += max_rows) {
    MmaArgs part = p;
    part.a.m = p.a.m - r0 < max_rows ? p.a.m - r0 : max_rows;
    part.a.x = (const T *)p.a.x + r0 * p.a.x_stride;
    part.a.y = (T *)p.a.y + r0 * p.a.y_stride;
    launch<T, BM, BN>(part, (part.a.m + BM - 1) / BM, s);
  }
}

bool x_vec_ok(const void *x, int64_t x_stride) {
  return aligned16(x) && x_stride % 8 == 0;
}

int64_t tiles(const kite_gguf_args *a, int64_t bm, int64_t bn) {
  return (a->m + bm - 1) / bm * ((a->n + bn - 1) / bn);
}

} // namespace

/* f16 / bf16, at least 16 rows (fewer leave most of each 16-row mma empty: the warp GEMV of
 * gguf.cu reads the weights once, which is what bounds those). */
extern "C" CUDA_SUPPORTS(cuda_gguf_mma_supports) {
  const kite_gguf_args *a = (const kite_gguf_args *)args;
  if (a->dtype != KITE_DTYPE_F16 && a->dtype != KITE_DTYPE_BF16) {
    *why = "dtype must be f16 or bf16";
    return false;
  }
  if (a->op != KITE_OP_LINEAR_GGUF) {
    *why = "linear_gguf only";
    return false;
  }
  return ok_unless(a->m < 16, "needs m >= 16 rows", why);
}

extern "C" CUDA_RUN(cuda_gguf_mma_run) {
  const kite_gguf_args *a = (const kite_gguf_args *)args;
  if (a->m <= 0 || a->n <= 0) return KITE_OK;
  const MmaArgs p = {*a, 0, nullptr, nullptr, x_vec_ok(a->x, a->x_stride)};
  const int64_t sms = sm_count();
  return launch_typed(ctx, "linear_gguf", "mma", a->dtype, [&](auto tag, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same<T, float>::value) {
      return kite_set_error(KITE_ERR_UNSUPPORTED, "linear_gguf: cuda.mma: f32 is not supported");
    } else {
      /* the largest tile that still gives every SM a CTA */
      if (tiles(a, 128, 128) >= sms)
        launch_rows<T, 128, 128>(p, s);
      else if (tiles(a, 64, 64) >= sms)
        launch_rows<T, 64, 64>(p, s);
      else
        launch_rows<T, 32, 64>(p, s);
      return KITE_OK;
    }
  });
}

/* group_gemm_gguf: f16 / bf16 (no row minimum: a group's rows are few whatever M is). */
extern "C" CUDA_SUPPORTS(cuda_group_gguf_mma_supports) {
  const kite_group_gguf_args *a = (const kite_group_gguf_args *)args;
  return ok_unless(a->dtype != KITE_DTYPE_F16 && a->dtype != KITE_DTYPE_BF16,
                   "dtype must be f16 or bf16", why);
}

/* The schedule of gemm.cu's group_gemm (64-row tiles of one group each, built on the device from
 * the device-resident sizes), one CTA per tile and 64 columns; rows no group claims become zeros.
 */
extern "C" CUDA_RUN(cuda_group_gguf_mma_run) {
  const kite_group_gguf_args *a = (const kite_group_gguf_args *)args;
  if (a->m <= 0 || a->n <= 0) return KITE_OK;
  cudaStream_t s;
  kite_status st = begin(ctx, "group_gemm_gguf", &s);
  if (st != KITE_OK) return st;
  TileSchedule sch;
  if ((st = tile_gemm_plan(ctx, a->group_sizes, a->groups, a->m, s, &sch)) != KITE_OK) return st;
  MmaArgs p = {};
  p.a.op = KITE_OP_LINEAR_GGUF, p.a.dtype = a->dtype, p.a.type = a->type;
  p.a.bv = a->bv, p.a.bb = a->bb, p.a.m = a->m, p.a.n = a->n, p.a.k = a->k;
  p.a.x = a->x, p.a.x_stride = a->x_stride, p.a.w = a->w, p.a.w_stride = a->w_stride_n;
  p.a.bias = a->bias, p.a.y = a->y, p.a.y_stride = a->y_stride;
  p.w_stride_g = a->w_stride_g, p.tiles = sch.tiles, p.tile_count = sch.count;
  p.vec_x = x_vec_ok(a->x, a->x_stride);
  st = with_float_type(a->dtype, "group_gemm_gguf", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same<T, float>::value) {
      return kite_set_error(KITE_ERR_UNSUPPORTED,
                            "group_gemm_gguf: cuda.mma: f32 is not supported");
    } else {
      static_assert(kTileGemmRows == 64, "one 64-row CTA tile per schedule tile");
      launch<T, 64, 64>(p, sch.max_tiles, s);
      tile_gemm_zero_rows<T>((T *)a->y, a->y_stride, a->m, a->n, sch.rows_used, s);
      return KITE_OK;
    }
  });
  return st != KITE_OK ? st : cuda_check_launch("group_gemm_gguf", "mma");
}
