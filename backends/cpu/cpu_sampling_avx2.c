/* The cpu sampling kernels on AVX2 (this file is compiled with its -m flags and its entries
 * only run where CPUID reports them). */
#include "vec_avx2.h"

#define CPU_SAMPLING_ISA avx2
#include "kernels_sampling.h"
