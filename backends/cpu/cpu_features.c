/*
 * Which vector ISAs the kernels may use here: what the CPU reports through CPUID, provided the OS
 * saves the registers they need (XCR0 through XGETBV), capped by KITE_CPU_ISA so that users and
 * tests can force a lower ISA on a machine that has a higher one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

#if defined(__x86_64__)
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

/* Linux hands a process the AMX tile-data state only on request (arch_prctl
 * ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA); without it the first tile instruction faults.
 * Granted once for the whole process; 1 when AMX may be used. */
static bool amx_permitted(void) {
#if defined(__linux__)
  const long arch_req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;
  return syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) == 0;
#else
  return false;
#endif
}

/* XCR0: which register states the OS saves on a context switch. */
static uint64_t read_xcr0(void) {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t)hi << 32 | lo;
}

static uint64_t detect_x86(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  const bool osxsave = c & (1u << 27), avx = c & (1u << 28);
  if (!osxsave || !avx) return 0;
  const uint64_t xcr0 = read_xcr0();
  if ((xcr0 & 0x6) != 0x6) return 0; /* XMM and YMM state */

  uint64_t f = 0;
  if (c & (1u << 12)) f |= CPU_F_FMA;
  if (c & (1u << 29)) f |= CPU_F_F16C;
  if (__get_cpuid_max(0, NULL) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  if (b & (1u << 5)) f |= CPU_F_AVX2;
  if ((xcr0 & 0xe0) != 0xe0) return f; /* opmask, upper ZMM0-15, ZMM16-31 state */
  if (b & (1u << 16)) f |= CPU_F_AVX512F;
  if (b & (1u << 17)) f |= CPU_F_AVX512DQ;
  if (b & (1u << 30)) f |= CPU_F_AVX512BW;
  if (b & (1u << 31)) f |= CPU_F_AVX512VL;
  if (c & (1u << 11)) f |= CPU_F_AVX512_VNNI;
  /* AMX-BF16 (22), AMX-TILE (24), AMX-INT8 (25); XCR0 bits 17-18: tile config and data state */
  const unsigned amx = (1u << 22) | (1u << 24) | (1u << 25);
  if ((d & amx) == amx && (xcr0 & 0x60000) == 0x60000 && amx_permitted()) f |= CPU_F_AMX;
  __cpuid_count(7, 1, a, b, c, d);
  if (a & (1u << 5)) f |= CPU_F_AVX512_BF16;
  return f;
}
#endif

static const struct {
  uint64_t bit;
  const char *name;
} cpu_feature_names[] = {
    {CPU_F_AVX2, "avx2"},
    {CPU_F_FMA, "fma"},
    {CPU_F_F16C, "f16c"},
    {CPU_F_AVX512F, "avx512f"},
    {CPU_F_AVX512BW, "avx512bw"},
    {CPU_F_AVX512VL, "avx512vl"},
    {CPU_F_AVX512DQ, "avx512dq"},
    {CPU_F_AVX512_VNNI, "avx512_vnni"},
    {CPU_F_AVX512_BF16, "avx512_bf16"},
    {CPU_F_AMX, "amx_tile,amx_bf16,amx_int8"},
    {CPU_F_OPENBLAS, "libopenblas.so.0"},
    {CPU_F_ONEDNN, "libdnnl.so.2"},
};

void cpu_features_render(uint64_t bits, char *out, size_t n) {
  size_t len = 0;
  out[0] = '\0';
  for (size_t i = 0; i < sizeof cpu_feature_names / sizeof cpu_feature_names[0]; i++) {
    if (!(bits & cpu_feature_names[i].bit)) continue;
    const int w = snprintf(out + len, n - len, "%s%s", len ? "," : "", cpu_feature_names[i].name);
    if (w < 0 || (size_t)w >= n - len) return; /* cut short: n below CPU_FEATURE_NAMES_MAX */
    len += (size_t)w;
  }
}

/* The mask KITE_CPU_ISA allows; every bit for no or an unknown value. */
static uint64_t isa_cap(void) {
  const char *s = getenv("KITE_CPU_ISA");
  if (!s) return ~(uint64_t)0;
  if (strcmp(s, "scalar") == 0) return 0;
  if (strcmp(s, "avx2") == 0) return CPU_ISA_AVX2;
  if (strcmp(s, "avx512") == 0) return CPU_ISA_AVX512;
  if (strcmp(s, "avx512vnni") == 0) return CPU_ISA_AVX512VNNI;
  if (strcmp(s, "avx512bf16") == 0) return CPU_ISA_AVX512BF16;
  if (strcmp(s, "amx") == 0) return CPU_ISA_AMX;
  return ~(uint64_t)0;
}

uint64_t cpu_features_detect(void) {
#if defined(__x86_64__)
  return detect_x86() & isa_cap();
#else
  return 0;
#endif
}
