/* The templated cpu kernels in portable C: correct on any architecture; the compiler vectorizes
 * the lane loops of vec_scalar.h with whatever the baseline target offers. */
#include "vec_scalar.h"

#define CPU_ISA scalar
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
