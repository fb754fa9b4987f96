/* The cpu attention kernels on AVX2 + FMA + F16C (this file is compiled with -mavx2 -mfma
 * -mf16c and its entries only run where CPUID reports them). */
#include "vec_avx2.h"

#define CPU_ATTN_ISA avx2
#include "kernels_attention.h"
