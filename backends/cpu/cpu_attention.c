/*
 * Attention kernels of the cpu backend: the portable build of kernels_attention.h, and the kernel
 * entries of every ISA build (store_kv, paged_decode, paged_prefill, sdpa), which cpu_backend.c
 * appends to its table.
 */
#include "vec_scalar.h"

#define CPU_ATTN_ISA scalar
#include "kernels_attention.h"

/* Every attention args struct starts with op, dtype; the front-ends only pass float dtypes. */
static bool att_supports(const kite_kernel *k, const void *args, const char **why) {
  if (!cpu_is_float(((const kite_store_kv_args *)args)->dtype)) {
    *why = "dtype not supported (f32, f16, bf16)";
    return false;
  }
  return true;
}

#define ATT_ENTRY(op_id, isa, prio, feat, feat_str, fn, desc)                                      \
  {                                                                                                \
    .op = (op_id), .variant = #isa, .priority = (prio), .features = (feat),                        \
    .features_str = (feat_str), .supports = att_supports, .run = fn##isa, .description = (desc)    \
  }
#define ATT_ENTRIES(isa, prio, feat, feat_str, what)                                               \
  ATT_ENTRY(KITE_OP_STORE_KV, isa, prio, feat, feat_str, cpu_attn_store_kv_,                       \
            "row copy into the paged caches, kv heads over threads"),                              \
      ATT_ENTRY(KITE_OP_PAGED_DECODE, isa, prio, feat, feat_str, cpu_attn_paged_,                  \
                "online softmax, GQA heads share each K/V row, keys split over threads when "      \
                "sequences are few, " what),                                                       \
      ATT_ENTRY(KITE_OP_PAGED_PREFILL, isa, prio, feat, feat_str, cpu_attn_paged_,                 \
                "online softmax over (query tile, kv head) items, unseen keys skipped, " what),    \
      ATT_ENTRY(KITE_OP_SDPA, isa, prio, feat, feat_str, cpu_attn_sdpa_,                           \
                "online softmax over (query tile, kv head) items, masks per tile, " what)

const kite_kernel cpu_attn_kernels[] = {
    ATT_ENTRIES(scalar, 10, 0, "", "portable C"),
#if defined(__x86_64__)
    ATT_ENTRIES(avx2, 20, CPU_ISA_AVX2, "avx2,fma,f16c", "AVX2 FMA"),
#endif
};
const size_t cpu_attn_num_kernels = sizeof cpu_attn_kernels / sizeof cpu_attn_kernels[0];
