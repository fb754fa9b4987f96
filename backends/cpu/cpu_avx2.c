/* The cpu kernels on AVX2 + FMA + F16C (this file is compiled with -mavx2 -mfma -mf16c and only
 * runs where CPUID reports them). */
#include "vec_avx2.h"

#define CPU_KERNELS cpu_kernels_avx2
#include "kernels.h"
