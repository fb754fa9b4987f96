/* The cpu kernels on AVX-512 F/BW/VL/DQ (this file is compiled with those -m flags and only runs
 * where CPUID reports them). */
#include "vec_avx512.h"

#define CPU_KERNELS cpu_kernels_avx512
#include "kernels.h"
