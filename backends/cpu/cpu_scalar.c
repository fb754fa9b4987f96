/* The cpu kernels in portable C: correct on any architecture; the compiler vectorizes the lane
 * loops of vec_scalar.h with whatever the baseline target offers. */
#include "vec_scalar.h"

#define CPU_KERNELS cpu_kernels_scalar
#include "kernels.h"
