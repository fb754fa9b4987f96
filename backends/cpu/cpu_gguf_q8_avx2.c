/* linear_gguf_q8 on AVX2 + FMA + F16C (cpu_gguf_q8.inc; VPMADDUBSW + VPMADDWD). */
#define GQ_RUN cpu_gguf_q8_avx2
#include "cpu_gguf_q8.inc"
