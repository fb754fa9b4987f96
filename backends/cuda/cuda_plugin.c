/*
 * The CUDA backend as a plugin (libkite-cuda.so): device memory through the CUDA runtime, and the
 * kernel table.
 *
 * The top of the plugin's host code: it lists the run and supports functions of the .cu files and
 * of nccl.c and peer_comm.cu (the collectives) in its table and registers the backend. Below it,
 * nccl.c and the .cu files stand on cuda_device.c (device selection, launch checks, names for
 * messages); none of them calls back into this file. Every op has a "generic" kernel that runs any
 * valid call and, where it pays, a faster variant at a higher priority whose supports() states what
 * it needs (16-byte alignment, a row that fits in registers).
 *
 * Loading never fails for want of a GPU: without a driver or device, device_count is 0 and the
 * kernels are listed as not running here. CUDA errors become KITE_ERR_DEVICE, never an abort.
 */
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "cuda_backend.h"

#define EXPORT __attribute__((visibility("default")))

/* ---- backend: devices and memory ----------------------------------------------------------- */
static int cuda_device_count(const kite_backend *b) {
  (void)b;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

/* Bits every visible device has, so that a kernel that needs one runs on whichever device a ctx
 * names. */
static uint64_t cuda_features_present(const kite_backend *b) {
  int n = cuda_device_count(b), major = 0;
  if (n <= 0) return 0;
  uint64_t bits = CUDA_FEATURE_SM90;
  for (int d = 0; d < n; d++) {
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    if (major < 9) bits &= ~CUDA_FEATURE_SM90;
  }
  return bits;
}

/* 0 bytes still gets a real allocation, so every successful alloc returns a pointer to free. */
static kite_status cuda_alloc(const kite_backend *b, int device_id, size_t bytes, void **out) {
  (void)b;
  if (!out) return kite_set_error(KITE_ERR_INVALID_ARG, "cuda: alloc: out is NULL");
  *out = NULL;
  kite_status s = cuda_use_device("cuda: alloc", device_id);
  if (s != KITE_OK) return s;
  cudaError_t e = cudaMalloc(out, bytes ? bytes : 256);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    *out = NULL;
    return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "cuda: alloc: cannot allocate %zu bytes", bytes);
  }
  if (e != cudaSuccess) {
    *out = NULL;
    return cuda_device_error("cuda: alloc", "cudaMalloc", e);
  }
  return KITE_OK;
}

static void cuda_free(const kite_backend *b, int device_id, void *ptr) {
  (void)b;
  if (!ptr || cuda_use_device("cuda: free", device_id) != KITE_OK) return;
  if (cudaFree(ptr) != cudaSuccess) (void)cudaGetLastError();
}

static kite_status cuda_copy(const kite_backend *b, int device_id, void *dst, const void *src,
                             size_t bytes, kite_copy_kind kind, void *stream) {
  (void)b;
  if (bytes == 0) return KITE_OK;
  if (!dst || !src) return kite_set_error(KITE_ERR_INVALID_ARG, "cuda: copy: NULL pointer");
  enum cudaMemcpyKind k;
  switch (kind) {
  case KITE_COPY_HOST_TO_DEVICE:
    k = cudaMemcpyHostToDevice;
    break;
  case KITE_COPY_DEVICE_TO_HOST:
    k = cudaMemcpyDeviceToHost;
    break;
  case KITE_COPY_DEVICE_TO_DEVICE:
    k = cudaMemcpyDeviceToDevice;
    break;
  default:
    return kite_set_error(KITE_ERR_INVALID_ARG, "cuda: copy: unknown kind %d", (int)kind);
  }
  kite_status s = cuda_use_device("cuda: copy", device_id);
  if (s != KITE_OK) return s;
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, k, (cudaStream_t)stream);
  return e == cudaSuccess ? KITE_OK : cuda_device_error("cuda: copy", "cudaMemcpyAsync", e);
}

static kite_status cuda_memset(const kite_backend *b, int device_id, void *dst, int value,
                               size_t bytes, void *stream) {
  (void)b;
  if (bytes == 0) return KITE_OK;
  if (!dst) return kite_set_error(KITE_ERR_INVALID_ARG, "cuda: memset: NULL pointer");
  kite_status s = cuda_use_device("cuda: memset", device_id);
  if (s != KITE_OK) return s;
  cudaError_t e = cudaMemsetAsync(dst, value, bytes, (cudaStream_t)stream);
  return e == cudaSuccess ? KITE_OK : cuda_device_error("cuda: memset", "cudaMemsetAsync", e);
}

static kite_status cuda_synchronize(const kite_backend *b, int device_id, void *stream) {
  (void)b;
  kite_status s = cuda_use_device("cuda: synchronize", device_id);
  if (s != KITE_OK) return s;
  cudaError_t e = cudaStreamSynchronize((cudaStream_t)stream);
  if (e != cudaSuccess) return cuda_device_error("cuda: synchronize", "cudaStreamSynchronize", e);
  return cuda_index_report(device_id);
}

/* The ops whose index values live in device memory run their kernels after cuda_index_check. */
#define CHECKED(fn)                                                                                \
  static CUDA_RUN(checked_##fn) {                                                                  \
    kite_status s = cuda_index_check(ctx, args);                                                   \
    return s != KITE_OK ? s : fn(k, ctx, args);                                                    \
  }
CHECKED(cuda_store_kv_run)
CHECKED(cuda_paged_mma_run)
CHECKED(cuda_paged_sm90_run)
CHECKED(cuda_paged_vec_run)
CHECKED(cuda_paged_generic_run)
CHECKED(cuda_mla_store_kv_run)
CHECKED(cuda_mla_decode_generic_run)
CHECKED(cuda_mla_decode_mma_run)
CHECKED(cuda_group_gemm_cublaslt_run)
CHECKED(cuda_group_gemm_tiles_run)
CHECKED(cuda_group_gemm_wgmma_run)
CHECKED(cuda_ce_vec_run)
CHECKED(cuda_ce_generic_run)
CHECKED(cuda_ce_cluster_run)
CHECKED(cuda_flce_cublaslt_run)
CHECKED(cuda_flce_generic_run)

/* Device time between two events on the stream (kite bench's copy ceiling). */
static kite_status cuda_timer_start(const kite_backend *b, int device_id, void *stream,
                                    void **timer) {
  (void)b;
  kite_status s = cuda_use_device("cuda: timer", device_id);
  if (s != KITE_OK) return s;
  cudaEvent_t *ev = calloc(2, sizeof *ev);
  if (!ev) return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "cuda: timer: out of memory");
  cudaError_t e = cudaEventCreate(&ev[0]);
  if (e == cudaSuccess) {
    e = cudaEventCreate(&ev[1]);
    if (e != cudaSuccess) cudaEventDestroy(ev[0]);
  }
  if (e != cudaSuccess) {
    free(ev);
    return cuda_device_error("cuda: timer", "cudaEventCreate", e);
  }
  e = cudaEventRecord(ev[0], (cudaStream_t)stream);
  if (e != cudaSuccess) {
    cudaEventDestroy(ev[0]);
    cudaEventDestroy(ev[1]);
    free(ev);
    return cuda_device_error("cuda: timer", "cudaEventRecord", e);
  }
  *timer = ev;
  return KITE_OK;
}

static kite_status cuda_timer_stop(const kite_backend *b, int device_id, void *stream, void *timer,
                                   double *seconds) {
  (void)b;
  cudaEvent_t *ev = timer;
  kite_status s = cuda_use_device("cuda: timer", device_id);
  cudaError_t e = cudaSuccess;
  float ms = 0.0f;
  if (s == KITE_OK) {
    e = cudaEventRecord(ev[1], (cudaStream_t)stream);
    if (e == cudaSuccess) e = cudaEventSynchronize(ev[1]);
    if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, ev[0], ev[1]);
  }
  cudaEventDestroy(ev[0]);
  cudaEventDestroy(ev[1]);
  free(ev);
  if (s != KITE_OK) return s;
  if (e != cudaSuccess) return cuda_device_error("cuda: timer", "cudaEventElapsedTime", e);
  *seconds = ms * 1e-3;
  return KITE_OK;
}

/* ---- kernel table -------------------------------------------------------------------------- */
/* Faster variants outrank generic ones; a variant for a narrower case outranks the broad one. */
enum {
  PRIORITY_GENERIC = 10,
  PRIORITY_VEC = 20,
  PRIORITY_SPLIT = 30,
  PRIORITY_CLUSTER = 40,
  PRIORITY_SELECT = 45,   /* sample with top-k: above the cluster kernel at every B */
  PRIORITY_SELECT16 = 46, /* its small-batch variant, first where both run */
  PRIORITY_LIBRARY = 50,
  PRIORITY_WGMMA = 55, /* Hopper GEMMs of our own, above the vendor libraries' calls */
  /* the collectives over peer memory, above NCCL up to their size limits (peer_comm.cu) */
  PRIORITY_TWOSHOT = 60,
  PRIORITY_ONESHOT = 70
};

/* A row needing the feature bits `bits` (named `bits_str`); KERNEL needs none. */
#define KERNEL_NEEDS(bits, bits_str, op_id, name, prio, supports_fn, run_fn, desc)                 \
  {                                                                                                \
    .op = (op_id), .variant = (name), .priority = (prio), .features = (bits),                      \
    .features_str = (bits_str), .supports = (supports_fn), .run = (run_fn), .description = (desc), \
    .userdata = NULL                                                                               \
  }
#define KERNEL(...) KERNEL_NEEDS(0, "", __VA_ARGS__)
#define KERNEL_SM90(...) KERNEL_NEEDS(CUDA_FEATURE_SM90, "sm_90", __VA_ARGS__)
#define VEC(op_id, family, desc)                                                                   \
  KERNEL(op_id, "vec", PRIORITY_VEC, cuda_##family##_vec_supports, cuda_##family##_vec_run, desc)
/* the norm backward's persistent rows_fused, before vec (any form whose rows fit) */
#define ROWS(op_id, name, run_fn, desc)                                                            \
  KERNEL(op_id, name, PRIORITY_VEC, cuda_norm_bwd_rows_supports, run_fn, desc)
#define GENERIC(op_id, family, desc)                                                               \
  KERNEL(op_id, "generic", PRIORITY_GENERIC, cuda_float_supports, cuda_##family##_generic_run, desc)
/* The two rows of an op whose kernels differ only in their loads: "<what>, 16-byte loads" and
 * "<what>, any layout". */
#define VEC_AND_GENERIC(op_id, family, what)                                                       \
  VEC(op_id, family, what ", 16-byte loads"), GENERIC(op_id, family, what ", any layout")
/* A norm's two rows; add = "fused add, " for the add_* ops. */
#define NORM_ROWS(op_id, add)                                                                      \
  VEC(op_id, norm, add "block per row, row in registers, 16-byte loads"),                          \
      GENERIC(op_id, norm, add "block per row, any layout and length")

static const kite_kernel cuda_kernels[] = {
/* the activations and gated activations of backend.h's lists */
#define CUDA_ACT_ROWS(ID, name) VEC_AND_GENERIC(KITE_OP_##ID, act, #name),
#define CUDA_GATED_ROWS(ID, name, AID, aname)                                                      \
  VEC_AND_GENERIC(KITE_OP_##ID, gated, #aname "(gate) * up"),
    KITE_ACTIVATION_OPS(CUDA_ACT_ROWS) KITE_GATED_OPS(CUDA_GATED_ROWS)
    /* norms */
    NORM_ROWS(KITE_OP_RMS_NORM, ""),
    NORM_ROWS(KITE_OP_LAYER_NORM, ""),
    NORM_ROWS(KITE_OP_ADD_RMS_NORM, "fused add, "),
    NORM_ROWS(KITE_OP_ADD_LAYER_NORM, "fused add, "),
    VEC(KITE_OP_ROPE, rope, "neox/gptj, 16-byte packs of pairs, q and k in one launch"),
    GENERIC(KITE_OP_ROPE, rope, "neox/gptj, a pair per thread, any layout"),
    KERNEL_SM90(KITE_OP_SOFTMAX, "cluster", PRIORITY_CLUSTER, cuda_softmax_cluster_supports,
                cuda_softmax_cluster_run, "few long rows: a row per 8-block cluster, one launch"),
    KERNEL(KITE_OP_SOFTMAX, "split", PRIORITY_SPLIT, cuda_softmax_split_supports,
           cuda_softmax_split_run, "few long rows: chunks on separate blocks, two launches"),
    VEC(KITE_OP_SOFTMAX, softmax,
        "block per row, row in registers or shared memory, 16-byte loads"),
    GENERIC(KITE_OP_SOFTMAX, softmax, "block per row, online max/sum, any length"),
    VEC(KITE_OP_EMBEDDING, embedding, "row copy in 16-byte units, zeros for bad ids"),
    KERNEL(KITE_OP_EMBEDDING, "generic", PRIORITY_GENERIC, NULL, cuda_embedding_generic_run,
           "row copy per element, zeros for bad ids"),
    KERNEL(KITE_OP_STORE_KV, "generic", PRIORITY_GENERIC, cuda_float_supports,
           checked_cuda_store_kv_run, "k and v into the caches in one launch, bad slots skipped"),
    KERNEL(KITE_OP_MLA_STORE_KV, "generic", PRIORITY_GENERIC, cuda_float_supports,
           checked_cuda_mla_store_kv_run,
           "c_kv and k_pe into the latent caches, bad slots skipped"),
    KERNEL(KITE_OP_MLA_DECODE, "mma", PRIORITY_SPLIT, cuda_mla_decode_mma_supports,
           checked_cuda_mla_decode_mma_run,
           "tensor cores, 64 heads of a sequence per CTA, split-KV, cp.async (R 512, P 64)"),
    KERNEL(KITE_OP_MLA_DECODE, "generic", PRIORITY_GENERIC, cuda_mla_decode_generic_supports,
           checked_cuda_mla_decode_generic_run,
           "a warp per head, 8 heads of a sequence per CTA, f32 online softmax, any size"),
    KERNEL(KITE_OP_PAGED_DECODE, "mma", PRIORITY_SPLIT, cuda_paged_mma_supports,
           checked_cuda_paged_mma_run,
           "tensor cores, GQA rows of a kv head per CTA, split-KV, cp.async"),
    KERNEL(KITE_OP_PAGED_DECODE, "vec", PRIORITY_VEC, cuda_paged_vec_supports,
           checked_cuda_paged_vec_run,
           "GQA heads of a kv head per CTA, split-KV with LSE merge, 16-byte loads"),
    KERNEL(KITE_OP_PAGED_DECODE, "generic", PRIORITY_GENERIC, cuda_paged_generic_supports,
           checked_cuda_paged_generic_run, "GQA heads of a kv head per CTA, split-KV, any layout"),
    KERNEL_SM90(KITE_OP_PAGED_PREFILL, "sm90pp", PRIORITY_CLUSTER, cuda_paged_sm90pp_supports,
                checked_cuda_paged_sm90_run,
                "Hopper, head_dim 64/128: wgmma with the next Q K^T beside the softmax"),
    KERNEL_SM90(
        KITE_OP_PAGED_PREFILL, "sm90", PRIORITY_CLUSTER, cuda_paged_sm90_supports,
        checked_cuda_paged_sm90_run,
        "Hopper, head_dim 256: wgmma, producer/consumer warpgroups, 128 packed GQA rows per CTA"),
    KERNEL(KITE_OP_PAGED_PREFILL, "mma", PRIORITY_SPLIT, cuda_paged_mma_supports,
           checked_cuda_paged_mma_run, "flash tiles on tensor cores, 128 packed GQA rows per CTA"),
    KERNEL(KITE_OP_PAGED_PREFILL, "vec", PRIORITY_VEC, cuda_paged_vec_supports,
           checked_cuda_paged_vec_run,
           "a query row and kv head per CTA, CUDA cores, 16-byte loads"),
    KERNEL(KITE_OP_PAGED_PREFILL, "generic", PRIORITY_GENERIC, cuda_paged_generic_supports,
           checked_cuda_paged_generic_run, "a query row and kv head per CTA, any layout"),
    KERNEL_SM90(KITE_OP_SDPA, "sm90pp", PRIORITY_CLUSTER, cuda_sdpa_sm90pp_supports,
                cuda_sdpa_sm90_run,
                "Hopper, head_dim 64/128: wgmma with the next Q K^T beside the softmax"),
    KERNEL_SM90(KITE_OP_SDPA, "sm90", PRIORITY_CLUSTER, cuda_sdpa_sm90_supports, cuda_sdpa_sm90_run,
                "Hopper, head_dim 256: wgmma, producer/consumer warpgroups, no mask, 16-byte "
                "aligned strides"),
    KERNEL(KITE_OP_SDPA, "mma", PRIORITY_SPLIT, cuda_sdpa_mma_supports, cuda_sdpa_mma_run,
           "flash tiles on tensor cores, no mask, 16-byte aligned strides"),
    KERNEL(KITE_OP_SDPA, "vec", PRIORITY_VEC, cuda_sdpa_vec_supports, cuda_sdpa_vec_run,
           "a query row and kv head per CTA, CUDA cores, 16-byte loads"),
    KERNEL(KITE_OP_SDPA, "generic", PRIORITY_GENERIC, cuda_sdpa_generic_supports,
           cuda_sdpa_generic_run, "a query row and kv head per CTA, any layout and mask"),
    KERNEL_SM90(KITE_OP_SDPA_FP8, "sm90fp8", PRIORITY_CLUSTER, cuda_sdpa_fp8_sm90_supports,
                cuda_sdpa_fp8_sm90_run,
                "Hopper, head_dim 128: e4m3 wgmma for Q K^T, V widened to bf16 by the producer"),
    KERNEL(KITE_OP_SDPA_FP8, "generic", PRIORITY_GENERIC, cuda_sdpa_fp8_generic_supports,
           cuda_sdpa_fp8_generic_run, "a warp per query row and head, f32 throughout"),
    KERNEL(KITE_OP_QUANT_FP8_BLOCKS, "generic", PRIORITY_GENERIC, cuda_float_supports,
           cuda_quant_fp8_blocks_generic_run, "a CTA per block of 128 rows: amax, then the codes"),
    KERNEL(KITE_OP_SDPA_VARLEN, "mma", PRIORITY_SPLIT, cuda_sdpa_varlen_mma_supports,
           cuda_sdpa_varlen_mma_run,
           "flash tiles on tensor cores, 128 packed GQA rows per CTA, 16-byte aligned strides"),
    KERNEL(KITE_OP_SDPA_VARLEN, "vec", PRIORITY_VEC, cuda_sdpa_varlen_vec_supports,
           cuda_sdpa_varlen_vec_run, "a query row and kv head per CTA, CUDA cores, 16-byte loads"),
    KERNEL(KITE_OP_SDPA_VARLEN, "generic", PRIORITY_GENERIC, cuda_sdpa_varlen_generic_supports,
           cuda_sdpa_varlen_generic_run, "a query row and kv head per CTA, any layout"),
    KERNEL_SM90(KITE_OP_SDPA_BACKWARD, "sm90ws", PRIORITY_WGMMA, cuda_sdpa_bwd_sm90ws_supports,
                cuda_sdpa_bwd_sm90ws_run,
                "Hopper: wgmma, 128 keys per CTA, head_dim 64/128, no mask; TMA loader warp, two "
                "dq writer warps (bulk reduce-add in key order)"),
    KERNEL(KITE_OP_SDPA_BACKWARD, "mma", PRIORITY_SPLIT, cuda_sdpa_bwd_mma_supports,
           cuda_sdpa_bwd_mma_run,
           "mma.sync, 128 keys per CTA, head_dim 64/128; masks, pre-Hopper; dq added in key order"),
    KERNEL(KITE_OP_SDPA_BACKWARD, "generic", PRIORITY_GENERIC, cuda_sdpa_bwd_generic_supports,
           cuda_sdpa_bwd_generic_run, "a warp per query row, then per key row; any layout, mask"),
    KERNEL_SM90(KITE_OP_SDPA_VARLEN_BACKWARD, "sm90ws", PRIORITY_WGMMA,
                cuda_sdpa_varlen_bwd_sm90ws_supports, cuda_sdpa_varlen_bwd_sm90ws_run,
                "Hopper: wgmma, 128 keys per CTA, head_dim 64/128, no mask; TMA loader warp, two "
                "dq writer warps (bulk reduce-add in key order)"),
    KERNEL(KITE_OP_SDPA_VARLEN_BACKWARD, "mma", PRIORITY_SPLIT, cuda_sdpa_varlen_bwd_mma_supports,
           cuda_sdpa_varlen_bwd_mma_run,
           "mma.sync, 128 keys per CTA, head_dim 64/128; pre-Hopper; dq added in key order"),
    KERNEL(KITE_OP_SDPA_VARLEN_BACKWARD, "generic", PRIORITY_GENERIC,
           cuda_sdpa_varlen_bwd_generic_supports, cuda_sdpa_varlen_bwd_generic_run,
           "a warp per query row, then per key row; any layout"),
    KERNEL(KITE_OP_LINEAR, "cublaslt", PRIORITY_LIBRARY, cuda_float_supports,
           cuda_linear_cublaslt_run, "cuBLASLt matmul, bias epilogue, f32 without TF32"),
    KERNEL(KITE_OP_LINEAR, "tiles", PRIORITY_GENERIC, cuda_float_supports, cuda_linear_tiles_run,
           "64x64 f32 tiles on CUDA cores, any layout"),
    KERNEL_SM90(
        KITE_OP_GROUP_GEMM, "wgmma", PRIORITY_WGMMA, cuda_group_gemm_wgmma_supports,
        checked_cuda_group_gemm_wgmma_run,
        "Hopper: one persistent wgmma launch, 128 x 256 tiles, TMA ring, y staged in shared "
        "memory and TMA-stored behind the next tile, group sizes read on the device "
        "(graph-safe); f16/bf16, 16-byte aligned x and w rows"),
    KERNEL(KITE_OP_GROUP_GEMM, "cublaslt", PRIORITY_LIBRARY, cuda_float_supports,
           checked_cuda_group_gemm_cublaslt_run,
           "equal groups as one cuBLAS strided batch (torch.bmm's call), others as a cuBLASLt "
           "matmul per group (sizes read on the host; tiles under graph capture)"),
    KERNEL(KITE_OP_GROUP_GEMM, "tiles", PRIORITY_GENERIC, cuda_float_supports,
           checked_cuda_group_gemm_tiles_run, "64x64 tiles, group schedule built on the device"),
    KERNEL(KITE_OP_TOPK_GATING, "warp", PRIORITY_GENERIC, cuda_float_supports, cuda_topk_gating_run,
           "a warp per token, k ranked picks"),
    KERNEL(KITE_OP_FUSED_MOE, "grouped", PRIORITY_GENERIC, cuda_float_supports, cuda_fused_moe_run,
           "routing on the device, then grouped tiled GEMMs"),
    KERNEL(KITE_OP_MOE_ROUTE, "thread", PRIORITY_GENERIC, cuda_float_supports, cuda_moe_route_run,
           "a thread per token: scores, keys, groups, k arg-max passes"),
    KERNEL(KITE_OP_FUSED_MOE_EX, "grouped", PRIORITY_LIBRARY, cuda_fused_moe_ex_grouped_supports,
           cuda_fused_moe_ex_grouped_run,
           "f16/bf16, T k > max(2 E, 8): pairs sorted by expert, cuBLASLt products per expert "
           "(one batch when balanced); pairs kernel below and under capture"),
    KERNEL(KITE_OP_FUSED_MOE_EX, "pairs", PRIORITY_GENERIC, cuda_float_supports,
           cuda_fused_moe_ex_run,
           "per (token, pick) pair: gate/up and down as split-K matrix-vector products at memory "
           "speed, act, combine in pick order; graph-safe"),
    KERNEL(KITE_OP_MOE_AUX_LOSS, "rows", PRIORITY_GENERIC, cuda_float_supports,
           cuda_moe_aux_loss_run, "row softmax stats, expert sums in row order, one reduction"),
    KERNEL(KITE_OP_MOE_AUX_LOSS_BACKWARD, "rows", PRIORITY_GENERIC, cuda_float_supports,
           cuda_moe_aux_loss_run, "expert counts in row order, then a thread per gradient row"),
    KERNEL(KITE_OP_QUANT, "generic", PRIORITY_GENERIC, cuda_quant_supports, cuda_quant_run,
           "a block per row, int8 or e4m3"),
    KERNEL(KITE_OP_DEQUANT, "generic", PRIORITY_GENERIC, cuda_quant_supports, cuda_quant_run,
           "q * scale in double, rounded once"),
    KERNEL(KITE_OP_LINEAR_QUANT, "cublaslt", PRIORITY_LIBRARY, cuda_linear_quant_lt_supports,
           cuda_linear_quant_lt_run,
           "int8 on cuBLASLt's integer tensor cores (exact int32), then scales and bias"),
    KERNEL(KITE_OP_LINEAR_QUANT, "generic", PRIORITY_GENERIC, cuda_linear_quant_supports,
           cuda_linear_quant_run, "a thread per output, exact int8 sums"),
    KERNEL_SM90(KITE_OP_ARGMAX, "cluster", PRIORITY_CLUSTER, cuda_sample_cluster_supports,
                cuda_sample_cluster_run, "a row per 8-block cluster, read once into shared memory"),
    KERNEL(KITE_OP_ARGMAX, "block", PRIORITY_GENERIC, cuda_float_supports, cuda_sample_run,
           "a block per row, one pass"),
    KERNEL_SM90(KITE_OP_SAMPLE, "select16", PRIORITY_SELECT16, cuda_sample_select16_supports,
                cuda_sample_select16_run,
                "cuda.select with 16-block clusters, one load step, a first bound on tau and block "
                "0 pulling a peer's candidates a warp"),
    KERNEL_SM90(KITE_OP_SAMPLE, "select", PRIORITY_SELECT, cuda_sample_select_supports,
                cuda_sample_select_run,
                "1-8 blocks a row keep the logits above a running top-k bound, no sort, one pass"),
    KERNEL_SM90(KITE_OP_SAMPLE, "cluster", PRIORITY_CLUSTER, cuda_sample_cluster_supports,
                cuda_sample_cluster_run,
                "a row per 8-block cluster in shared memory: radix selects over merged histograms"),
    KERNEL(KITE_OP_SAMPLE, "block", PRIORITY_GENERIC, cuda_float_supports, cuda_sample_run,
           "a block per row: radix-select top-k / top-p thresholds, exponential race, no sort"),
    KERNEL_SM90(
        KITE_OP_LOGPROBS, "cluster", PRIORITY_CLUSTER, cuda_logprobs_cluster_supports,
        cuda_logprobs_cluster_run,
        "a row per 8-block cluster in shared memory: log-sum-exp, top n as top-k candidates"),
    KERNEL(KITE_OP_LOGPROBS, "block", PRIORITY_GENERIC, cuda_float_supports, cuda_logprobs_run,
           "a block per row: log-sum-exp, then n block-wide picks"),
    KERNEL(KITE_OP_APPLY_PENALTIES, "owner", PRIORITY_GENERIC, cuda_float_supports,
           cuda_penalties_run, "a block per row, the first position of each id updates it"),
    KERNEL(KITE_OP_SOFTCAP, "rows", PRIORITY_GENERIC, cuda_float_supports, cuda_softcap_run,
           "a block per row, threads over its columns, tanhf in f32"),
    KERNEL(KITE_OP_LINEAR_WQ4, "warp", PRIORITY_GENERIC, cuda_float_supports, cuda_linear_wq4_run,
           "a warp per output column and 8 rows, blocks over lanes"),
    KERNEL(KITE_OP_LINEAR_GGUF, "mma", PRIORITY_VEC, cuda_gguf_mma_supports, cuda_gguf_mma_run,
           "m >= 16, f16/bf16: codes of 16-value chunks on mma.sync, f32 chunk scales"),
    KERNEL(KITE_OP_LINEAR_GGUF, "simple", PRIORITY_GENERIC, cuda_float_supports, cuda_gguf_run,
           "weights decoded per element: a warp per column for <= 8 rows, 64 x 64 tiles above"),
    KERNEL(KITE_OP_GROUP_GEMM_GGUF, "mma", PRIORITY_VEC, cuda_group_gguf_mma_supports,
           cuda_group_gguf_mma_run,
           "f16/bf16: linear_gguf's mma tiles over group_gemm's device schedule of 64-row tiles"),
    KERNEL(KITE_OP_DEQUANT_GGUF, "simple", PRIORITY_GENERIC, cuda_float_supports, cuda_gguf_run,
           "a thread per weight"),
    KERNEL(KITE_OP_ALL_REDUCE, "oneshot", PRIORITY_ONESHOT, cuda_peer_oneshot_supports,
           cuda_peer_oneshot_run,
           "peer memory, up to 8 MB on 2 ranks, 256 KB on more: stage x, one barrier, every "
           "rank's buffer summed in rank order"),
    KERNEL(KITE_OP_ALL_REDUCE, "twoshot", PRIORITY_TWOSHOT, cuda_peer_twoshot_supports,
           cuda_peer_twoshot_run,
           "peer memory, up to 8 MB: reduce-scatter then all-gather through the peers' buffers"),
    KERNEL(KITE_OP_ALL_REDUCE, "nccl", PRIORITY_LIBRARY, cuda_nccl_supports, cuda_nccl_run,
           "ncclAllReduce (sum) on the ctx's stream"),
    KERNEL(KITE_OP_ALL_GATHER, "nccl", PRIORITY_LIBRARY, cuda_nccl_supports, cuda_nccl_run,
           "ncclAllGather on the ctx's stream"),
    KERNEL(KITE_OP_REDUCE_SCATTER, "nccl", PRIORITY_LIBRARY, cuda_nccl_supports, cuda_nccl_run,
           "ncclReduceScatter (sum) on the ctx's stream"),
    KERNEL(KITE_OP_ALL_REDUCE_ADD_RMS_NORM, "oneshot", PRIORITY_ONESHOT, cuda_peer_norm_supports,
           cuda_peer_norm_run,
           "peer memory, one-shot's limits, rows up to 16384: a block per row sums the ranks' "
           "rows, adds the residual, normalizes"),
    KERNEL(KITE_OP_ALL_REDUCE_ADD_RMS_NORM, "nccl", PRIORITY_LIBRARY, cuda_nccl_supports,
           cuda_nccl_run, "ncclAllReduce into the workspace, then kite's add_rms_norm kernel"),
    /* training: backward ops */
    VEC_AND_GENERIC(KITE_OP_ACTIVATION_BACKWARD, act_bwd, "dy * act'(x)"),
    VEC_AND_GENERIC(KITE_OP_GATED_BACKWARD, act_bwd, "d gate and d up"),
    ROWS(KITE_OP_RMS_NORM_BACKWARD, "rows_fused", cuda_norm_bwd_rows_fused_run,
         "persistent bands of rows, a warp or a few per row, the row's two sums in one reduction, "
         "dw in registers"),
    VEC(KITE_OP_RMS_NORM_BACKWARD, norm_bwd,
        "runs of rows per block, row in registers, dw by fixed-order partials"),
    GENERIC(KITE_OP_RMS_NORM_BACKWARD, norm_bwd,
            "runs of rows per block, any layout, dw by fixed-order partials"),
    KERNEL(KITE_OP_LAYER_NORM_BACKWARD, "rows_fused_wide", PRIORITY_VEC,
           cuda_norm_bwd_wide_supports, cuda_norm_bwd_rows_fused_wide_run,
           "rows_fused with dres only, at most 2 packs per thread: more warps per row, fewer "
           "registers"),
    ROWS(KITE_OP_LAYER_NORM_BACKWARD, "rows_fused", cuda_norm_bwd_rows_fused_run,
         "persistent bands of rows, a warp or a few per row, the row's four sums in one "
         "reduction, dw/db in registers"),
    VEC(KITE_OP_LAYER_NORM_BACKWARD, norm_bwd,
        "runs of rows per block, row in registers, dw/db by fixed-order partials"),
    GENERIC(KITE_OP_LAYER_NORM_BACKWARD, norm_bwd,
            "runs of rows per block, any layout, dw/db by fixed-order partials"),
    VEC(KITE_OP_ROPE_BACKWARD, rope, "rotation by -theta, 16-byte packs of pairs"),
    GENERIC(KITE_OP_ROPE_BACKWARD, rope, "rotation by -theta, a pair per thread, any layout"),
    VEC_AND_GENERIC(KITE_OP_SOFTMAX_BACKWARD, softmax_bwd, "block per row, two passes"),
    KERNEL(KITE_OP_EMBEDDING_BACKWARD, "sorted", PRIORITY_GENERIC, cuda_embedding_bwd_supports,
           cuda_embedding_bwd_run,
           "stable radix sort of ids, then each table row summed in token order"),
    /* training: losses */
    KERNEL(KITE_OP_CROSS_ENTROPY, "vec", PRIORITY_VEC, cuda_ce_vec_supports,
           checked_cuda_ce_vec_run, "block per row, one pass, 16-byte loads, fixed-order sum"),
    KERNEL(KITE_OP_CROSS_ENTROPY, "generic", PRIORITY_GENERIC, cuda_float_supports,
           checked_cuda_ce_generic_run, "block per row, one pass, any layout, fixed-order sum"),
    KERNEL(KITE_OP_CROSS_ENTROPY_BACKWARD, "vec", PRIORITY_VEC, cuda_ce_vec_supports,
           checked_cuda_ce_vec_run, "block per row, 16-byte loads, in place allowed"),
    KERNEL(KITE_OP_CROSS_ENTROPY_BACKWARD, "generic", PRIORITY_GENERIC, cuda_float_supports,
           checked_cuda_ce_generic_run, "block per row, any layout, in place allowed"),
    KERNEL_SM90(KITE_OP_CROSS_ENTROPY_WITH_GRAD, "cluster", PRIORITY_CLUSTER,
                cuda_ce_cluster_supports, checked_cuda_ce_cluster_run,
                "a row per cluster of up to 8 blocks, a block's share in registers: one read, "
                "one write"),
    KERNEL(KITE_OP_CROSS_ENTROPY_WITH_GRAD, "vec", PRIORITY_VEC, cuda_ce_vec_supports,
           checked_cuda_ce_vec_run, "block per row, statistics then gradient, 16-byte loads"),
    KERNEL(KITE_OP_CROSS_ENTROPY_WITH_GRAD, "generic", PRIORITY_GENERIC, cuda_float_supports,
           checked_cuda_ce_generic_run, "block per row, statistics then gradient, any layout"),
    KERNEL(KITE_OP_FUSED_LINEAR_CROSS_ENTROPY, "cublaslt", PRIORITY_LIBRARY, cuda_float_supports,
           checked_cuda_flce_cublaslt_run,
           "chunks of rows: cuBLASLt GEMMs, cross-entropy forward+backward in place per piece"),
    KERNEL(KITE_OP_FUSED_LINEAR_CROSS_ENTROPY, "generic", PRIORITY_GENERIC, cuda_float_supports,
           checked_cuda_flce_generic_run, "chunks of rows: tiled GEMMs on CUDA cores, any layout"),
};

static const kite_backend cuda_backend = {
    .name = "cuda",
    .device_type = kDLCUDA,
    .description = "CUDA kernels (Hopper sm_90a code, PTX for other GPUs)",
    .device_count = cuda_device_count,
    .features_present = cuda_features_present,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .copy = cuda_copy,
    .memset = cuda_memset,
    .synchronize = cuda_synchronize,
    .timer_start = cuda_timer_start,
    .timer_stop = cuda_timer_stop,
    .kernels = cuda_kernels,
    .num_kernels = sizeof cuda_kernels / sizeof cuda_kernels[0],
    .userdata = NULL,
    .comm_unique_id = cuda_comm_unique_id,
    .comm_create = cuda_comm_create,
    .comm_create_all = cuda_comm_create_all,
    .comm_destroy = cuda_comm_destroy,
    .kernel_unavailable = cuda_nccl_unavailable,
    .graph_begin = cuda_graph_begin,
    .graph_end = cuda_graph_end,
    .graph_launch = cuda_graph_launch,
    .graph_destroy = cuda_graph_destroy,
};

EXPORT const uint32_t kite_plugin_abi_version = KITE_BACKEND_ABI_VERSION;

EXPORT kite_status kite_plugin_init(uint32_t host_abi_version);
EXPORT kite_status kite_plugin_init(uint32_t host_abi_version) {
  if (host_abi_version != KITE_BACKEND_ABI_VERSION)
    return kite_set_error(KITE_ERR_PLUGIN, "cuda: host backend ABI %u, plugin built for %u",
                          host_abi_version, (unsigned)KITE_BACKEND_ABI_VERSION);
  return kite_backend_register(&cuda_backend);
}
