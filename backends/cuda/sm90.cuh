/*
 * Hopper (sm_90a) building blocks shared by the wgmma kernels (attention_sm90.cu, its header and
 * attention_sm90pp.cu, attention_backward_sm90ws.cu, group_gemm_sm90.cu): the 128-byte swizzled
 * tile layout, mbarrier, TMA (and the driver's tensor-map encoder), proxy fences, named barriers,
 * setmaxnreg, wgmma (m64nNk16, f32 accumulators) and its shared-memory descriptors. The device part
 * compiles only for sm_90a (KITE_SM90_DEVICE).
 */
#ifndef KITE_CUDA_SM90_CUH
#define KITE_CUDA_SM90_CUH

/* CUtensorMap (the TMA wrapper); libcuda is not linked */
#include <cuda.h>
#include <cudaTypedefs.h> /* PFN_cuTensorMapEncodeTiled */

#include "attention.cuh"

namespace kite_cuda {

/* Every visible device is compute capability 9.0: the sm_90a code runs on nothing else. */
bool all_devices_sm90();

/* cuTensorMapEncodeTiled of the driver, reached through the runtime (the plugin does not link
 * libcuda); NULL where the driver has none. */
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder();

/* The tensor map of a 4-d tensor [batch][heads][rows][head_dim] of dtype's bf16/f16 (esize 2) or
 * of e4m3 codes (esize 1) at element strides stride = [b, h, row], read in boxes of one 128-byte
 * column block x box_rows rows, 128-byte swizzled (the layout of swz); rows past `rows` read as
 * zeros. False where TMA cannot address it (no encoder, base or strides not multiples of 16
 * bytes, a dimension out of range). */
bool rows_tensor_map(CUtensorMap *map, kite_dtype dtype, int esize, const void *base,
                     const int64_t stride[3], int64_t head_dim, int64_t rows, int64_t heads,
                     int64_t batch, int box_rows);

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KITE_SM90_DEVICE 1
#endif

#ifdef KITE_SM90_DEVICE
/* Byte offset of the 16-byte chunk c (8 elements) of row r in a swizzled tile of `rows` rows. */
__device__ __forceinline__ uint32_t swz(int rows, int r, int c) {
  return (uint32_t)((c >> 3) * rows * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

/* ---- PTX wrappers (sm_90a) ----------------------------------------------------------------- */
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, int parity) {
  uint32_t done;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(bar), "r"(parity)
                 : "memory");
  } while (!done);
}
/* The next phase of `bar` also waits for `bytes` of asynchronous copies (this thread arrives). */
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
/* TMA: the box of `map` at coordinates (c0, c1, c2, c3) (innermost first) into shared memory at
 * dst, completing its bytes on bar. */
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap *map, int c0, int c1,
                                            int c2, int c3, uint32_t bar) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes "
               "[%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
               "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
               : "memory");
}
/* The 2-d, 3-d and 5-d forms of tma_load_4d. */
__device__ __forceinline__ void tma_load_5d(uint32_t dst, const CUtensorMap *map, int c0, int c1,
                                            int c2, int c3, int c4, uint32_t bar) {
  asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes "
               "[%0], [%1, {%2, %3, %4, %5, %6}], [%7];\n" ::"r"(dst),
               "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap *map, int c0, int c1,
                                            uint32_t bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes "
               "[%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
               "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap *map, int c0, int c1,
                                            int c2, uint32_t bar) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes "
               "[%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
               "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
               : "memory");
}
/* TMA store: the box of `map` at coordinates (c0, c1) from shared memory at src, in this thread's
 * current bulk group (coordinates past the tensor's end are not written). */
__device__ __forceinline__ void tma_store_2d(const CUtensorMap *map, uint32_t src, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(
          (uint64_t)map),
      "r"(c0), "r"(c1), "r"(src)
      : "memory");
}
/* Closes this thread's current bulk group of TMA stores. */
__device__ __forceinline__ void bulk_commit() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
/* Waits until at most N of this thread's bulk groups still read their shared-memory sources. */
template <int N> __device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
/* Waits until at most N of this thread's bulk groups are incomplete (their writes done). */
template <int N> __device__ __forceinline__ void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}
/* dst[0 .. bytes / 4) += the f32 values at shared address src, element by element and atomically
 * (bytes a multiple of 16, both addresses 16-byte aligned), in this thread's current bulk group. */
__device__ __forceinline__ void bulk_reduce_add_f32(float *dst, uint32_t src, int bytes) {
  asm volatile(
      "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst),
      "r"(src), "r"(bytes)
      : "memory");
}
/* Orders this thread's generic-proxy accesses to global memory with its async-proxy ones (bulk
 * copies) on either side. */
__device__ __forceinline__ void fence_async_global() {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}
/* Generic-proxy writes to shared memory (st.shared, landed cp.async) made visible to wgmma. */
__device__ __forceinline__ void fence_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
/* Arrives at named barrier id without waiting (its waiters pass once `threads` arrived). */
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
template <int N> __device__ __forceinline__ void reg_dealloc() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> __device__ __forceinline__ void reg_alloc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Keeps the compiler from moving accumulator reads or writes across a wgmma wait. */
template <int N> __device__ __forceinline__ void fence_regs(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}

/* Four 8x8 b16 matrices of mma fragments (r[i]: matrix i, a row pair per lane) stored transposed:
 * lane l gives the address of row l % 8 of matrix l / 8, which receives the matrix's column. */
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile(
      "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
      "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
      : "memory");
}

/* The same four matrices stored as they are: lane l gives the address of row l % 8 of matrix
 * l / 8, which receives that row (the mma accumulator layout, packed to b16 pairs). */
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

/* Shared-memory matrix descriptor of a 128-byte swizzled tile: start address, leading and
 * stride byte offsets (all >> 4) and the swizzle mode (1 = 128 bytes) in bits 62-63. */
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((addr & 0x3ffff) >> 4) | (uint64_t)((lbo >> 4) & 0x3fff) << 16 |
         (uint64_t)((sbo >> 4) & 0x3fff) << 32 | 1ull << 62;
}

/* wgmma m64nNk16 with f32 accumulators d (N / 2 per thread), for T = bf16 or f16 (TY). SS: A and B
 * by descriptors of K-major tiles, accumulate false overwrites d; RS: A from registers (the m64 A
 * fragment), B by a descriptor of an MN-major tile (transposed), accumulating. The operand lists
 * of the accumulators come first, so the others are numbered from N / 2. */
#define KITE_WGMMA_SS(N, TY, TR, REGS, DA, DB, P, ...)                                             \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\n"                                      \
               "wgmma.mma_async.sync.aligned.m64n" N "k16.f32." TY "." TY " {" REGS "}, " DA       \
               ", " DB ", p, 1, 1, " TR ";\n}\n"                                                   \
               : __VA_ARGS__                                                                       \
               : "l"(a), "l"(b), "r"((int)accumulate))
#define KITE_WGMMA_RS(N, TY, REGS, A, DB, P, ...)                                                  \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\n"                                      \
               "wgmma.mma_async.sync.aligned.m64n" N "k16.f32." TY "." TY " {" REGS "}, {" A       \
               "}, " DB ", p, 1, 1, 1;\n}\n"                                                       \
               : __VA_ARGS__                                                                       \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1))

#define KITE_ACC32                                                                                 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),  \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),     \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),   \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),   \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define KITE_REGS32                                                                                \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "     \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define KITE_ACC64                                                                                 \
  KITE_ACC32, "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]),        \
      "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]),   \
      "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]),   \
      "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]),   \
      "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define KITE_REGS64                                                                                \
  KITE_REGS32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
              "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"

#define KITE_ACC128                                                                                \
  KITE_ACC64, "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),        \
      "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),   \
      "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),   \
      "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),   \
      "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),   \
      "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),            \
      "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),          \
      "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),          \
      "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]),          \
      "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
#define KITE_REGS128                                                                               \
  KITE_REGS64                                                                                      \
  ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, "        \
  "%81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, "     \
  "%99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, "      \
  "%114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

/* wgmma_ss_n<N><T>, wgmma_sst_n<N><T> (SS with B MN-major: transposed) and wgmma_rs_n<N><T> for N
 * columns (NACC = N / 2 accumulators), each the instruction of T's type; the operands after the
 * accumulators are numbered from NACC on: SS's two descriptors and predicate, RS's four A
 * registers, descriptor and predicate. */
#define KITE_WGMMA_PAIR(N, NACC, REGS, ACC, SS_OPS, RS_OPS)                                        \
  template <typename T>                                                                            \
  __device__ __forceinline__ void wgmma_ss_n##N(float(&d)[NACC], uint64_t a, uint64_t b,           \
                                                bool accumulate) {                                 \
    if constexpr (std::is_same<T, __nv_bfloat16>::value)                                           \
      KITE_WGMMA_SS(#N, "bf16", "0, 0", REGS, SS_OPS, ACC);                                        \
    else                                                                                           \
      KITE_WGMMA_SS(#N, "f16", "0, 0", REGS, SS_OPS, ACC);                                         \
  }                                                                                                \
  template <typename T>                                                                            \
  __device__ __forceinline__ void wgmma_sst_n##N(float(&d)[NACC], uint64_t a, uint64_t b,          \
                                                 bool accumulate) {                                \
    if constexpr (std::is_same<T, __nv_bfloat16>::value)                                           \
      KITE_WGMMA_SS(#N, "bf16", "0, 1", REGS, SS_OPS, ACC);                                        \
    else                                                                                           \
      KITE_WGMMA_SS(#N, "f16", "0, 1", REGS, SS_OPS, ACC);                                         \
  }                                                                                                \
  template <typename T>                                                                            \
  __device__ __forceinline__ void wgmma_rs_n##N(float(&d)[NACC], const uint32_t(&a)[4],            \
                                                uint64_t b) {                                      \
    if constexpr (std::is_same<T, __nv_bfloat16>::value)                                           \
      KITE_WGMMA_RS(#N, "bf16", REGS, RS_OPS, ACC);                                                \
    else                                                                                           \
      KITE_WGMMA_RS(#N, "f16", REGS, RS_OPS, ACC);                                                 \
  }
#define KITE_SS_OPS32 "%32", "%33", "%34"
#define KITE_RS_OPS32 "%32, %33, %34, %35", "%36", "%37"
#define KITE_SS_OPS64 "%64", "%65", "%66"
#define KITE_RS_OPS64 "%64, %65, %66, %67", "%68", "%69"
#define KITE_SS_OPS128 "%128", "%129", "%130"
#define KITE_RS_OPS128 "%128, %129, %130, %131", "%132", "%133"
KITE_WGMMA_PAIR(64, 32, KITE_REGS32, KITE_ACC32, KITE_SS_OPS32, KITE_RS_OPS32)
KITE_WGMMA_PAIR(128, 64, KITE_REGS64, KITE_ACC64, KITE_SS_OPS64, KITE_RS_OPS64)
KITE_WGMMA_PAIR(256, 128, KITE_REGS128, KITE_ACC128, KITE_SS_OPS128, KITE_RS_OPS128)

/* wgmma m64n128k32 of e4m3 A and B (both K-major by descriptor: fp8 has no transposed form), f32
 * accumulators d; accumulate false overwrites d. */
__device__ __forceinline__ void wgmma_ss_e4m3_n128(float (&d)[64], uint64_t a, uint64_t b,
                                                   bool accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {" KITE_REGS64
               "}, %64, %65, p, 1, 1;\n}\n"
               : KITE_ACC64
               : "l"(a), "l"(b), "r"((int)accumulate));
}
#endif /* KITE_SM90_DEVICE */

} // namespace kite_cuda

#endif /* KITE_CUDA_SM90_CUH */
