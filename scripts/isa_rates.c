/*
 * Instructions per second of one core for the multiply-adds the GEMM kernels are built on, on
 * 12 independent accumulators (so throughput, not latency, is measured). These rates bound what
 * a kernel can reach: e.g. exact int8 on AVX2 needs VPMADDWD + VPADDD per 16 products, bf16 on
 * AVX-512 one VDPBF16PS per 32.
 *   cc -O2 scripts/isa_rates.c -o /tmp/isa_rates && /tmp/isa_rates
 * Only the instruction sets the CPU reports are timed.
 */
#include <stdio.h>
#include <time.h>

#define N 50000000L
#define R12(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void report(const char *what, int macs, double t) {
  const double rate = 12.0 * (double)N / t / 1e9;
  printf("%-34s %6.2f G/s  %7.1f G multiply-adds/s\n", what, rate, rate * macs);
}

#define YMM                                                                                        \
  "ymm0", "ymm1", "ymm2", "ymm3", "ymm4", "ymm5", "ymm6", "ymm7", "ymm8", "ymm9", "ymm10",         \
      "ymm11", "ymm14"
#define ZMM                                                                                        \
  "zmm0", "zmm1", "zmm2", "zmm3", "zmm4", "zmm5", "zmm6", "zmm7", "zmm8", "zmm9", "zmm10", "zmm11"

#define TIME(what, macs, body, clobbers)                                                           \
  do {                                                                                             \
    const double t0 = now();                                                                       \
    for (long n = 0; n < N; n++) __asm__ volatile(body ::: clobbers);                              \
    report(what, macs, now() - t0);                                                                \
  } while (0)

__attribute__((target("avx2,fma"))) static void avx2_rates(void) {
  __asm__ volatile("vpxor %%ymm12, %%ymm12, %%ymm12\n\tvpxor %%ymm13, %%ymm13, %%ymm13" ::
                       : "ymm12", "ymm13");
#define FMA(i) "vfmadd231ps %%ymm12, %%ymm13, %%ymm" #i "\n\t"
  TIME("vfmadd231ps ymm (f32)", 8, R12(FMA), YMM);
#define MADD(i) "vpmaddwd %%ymm12, %%ymm13, %%ymm14\n\tvpaddd %%ymm14, %%ymm" #i ", %%ymm" #i "\n\t"
  TIME("vpmaddwd + vpaddd ymm (int16 pairs)", 16, R12(MADD), YMM);
#define UBS(i) "vpmaddubsw %%ymm12, %%ymm13, %%ymm" #i "\n\t"
  TIME("vpmaddubsw ymm (saturating)", 32, R12(UBS), YMM);
}

__attribute__((target("avx512f,avx512bf16,avx512vnni"))) static void avx512_rates(void) {
  __asm__ volatile("vpxord %%zmm12, %%zmm12, %%zmm12\n\tvpxord %%zmm13, %%zmm13, %%zmm13" ::
                       : "zmm12", "zmm13");
#define FMA5(i) "vfmadd231ps %%zmm12, %%zmm13, %%zmm" #i "\n\t"
  TIME("vfmadd231ps zmm (f32)", 16, R12(FMA5), ZMM);
#define BF16(i) "vdpbf16ps %%zmm12, %%zmm13, %%zmm" #i "\n\t"
  if (__builtin_cpu_supports("avx512bf16")) TIME("vdpbf16ps zmm (bf16 pairs)", 32, R12(BF16), ZMM);
#define VNNI(i) "vpdpbusd %%zmm12, %%zmm13, %%zmm" #i "\n\t"
  if (__builtin_cpu_supports("avx512vnni"))
    TIME("vpdpbusd zmm (u8 x s8 quads)", 64, R12(VNNI), ZMM);
}

int main(void) {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) avx2_rates();
  if (__builtin_cpu_supports("avx512f")) avx512_rates();
  return 0;
}
