/* The templated cpu kernels on AVX-512 with the BF16 extension: bf16 results are converted by
 * VCVTNEPS2BF16, one instruction where the integer rounding takes eight. Registered for bf16
 * only; f32 and f16 gain nothing over cpu_isa_avx512.c. */
#define CPU_VEC_NATIVE_BF16 1
#include "vec_avx512.h"

#define CPU_ISA avx512bf16
#include "kernels/common.inc"

#include "kernels/act.inc"
#include "kernels/norm.inc"
#include "kernels/rope.inc"
#include "kernels/softmax.inc"
#include "kernels/embedding.inc"
#include "kernels/loss.inc"
