/* linear_gguf_q8 on AVX-512 VNNI + VL (cpu_gguf_q8.inc; VPDPBUSD on 8 lanes for the unit-scale
 * types). */
#define GQ_VNNI 1
#define GQ_RUN cpu_gguf_q8_avx512vnni
#include "cpu_gguf_q8.inc"
