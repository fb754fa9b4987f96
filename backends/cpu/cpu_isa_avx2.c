/* The templated cpu kernels on AVX2 + FMA + F16C (compiled with -mavx2 -mfma -mf16c; the table
 * gives their entries those feature bits, so they only run where CPUID reports them). */
#include "vec_avx2.h"

#define CPU_ISA avx2
#include "kernels/common.inc"

#include "kernels/act.inc"
#include "kernels/norm.inc"
#include "kernels/rope.inc"
#include "kernels/softmax.inc"
#include "kernels/embedding.inc"
#include "kernels/loss.inc"
#include "kernels/attention.inc"
#include "kernels/attention_fp8.inc"
#include "kernels/attention_train.inc"
#include "kernels/sampling.inc"
#include "kernels/gguf.inc"
