/* The cpu sampling kernels on AVX512 (this file is compiled with its -m flags and its entries
 * only run where CPUID reports them). */
#include "vec_avx512.h"

#define CPU_SAMPLING_ISA avx512
#include "kernels_sampling.h"
