/* The templated cpu kernels on AVX-512 F/BW/VL/DQ (compiled with those -m flags; their entries
 * only run where CPUID reports them). Attention is not instantiated here: cpu.avx2 serves it. */
#include "vec_avx512.h"

#define CPU_ISA avx512
#include "kernels/common.inc"

#include "kernels/act.inc"
#include "kernels/norm.inc"
#include "kernels/rope.inc"
#include "kernels/softmax.inc"
#include "kernels/embedding.inc"
#include "kernels/loss.inc"
#include "kernels/sampling.inc"
#include "kernels/gguf.inc"
