/*
 * KITE_CHECK_INDICES on the device (kite.h): before an op that reads index values from device
 * memory (store_kv's and mla_store_kv's slots; paged_decode / paged_prefill / mla_decode's
 * seq_lens, cu_q_lens and block ids;
 * group_gemm's sizes; the cross-entropy ops' targets), a small kernel looks at every value and
 * records the first bad one in a 64-bit word of the device; the op's own kernels then run
 * unchanged, never out of bounds. The next synchronization of that device (kite_ctx_synchronize, or
 * a kite_memcpy, which synchronizes) reads the word, clears it and returns INVALID_ARG naming the
 * op and the value.
 *
 * The word: bits 56..63 the op + 1 (0 = nothing recorded), 48..55 what was wrong, 32..47 the
 * sequence (or element, group) saturated at 65535, 0..31 the value. The first atomicCAS wins.
 * One word per device, allocated at the first checked call (so not inside a graph capture).
 */
#include <pthread.h>
#include <stdio.h>

#include "common.cuh"

namespace {

enum Bad : unsigned {
  BAD_SEQ_LEN_NEGATIVE = 1,
  BAD_SEQ_LEN_PAST_TABLE,
  BAD_BLOCK_ID,
  BAD_QUERY_CHUNK,
  BAD_CU_Q_LENS,
  BAD_SLOT,
  BAD_GROUP_SIZE,
  BAD_GROUP_SUM,
  BAD_TARGET,
};

__device__ __forceinline__ void record(unsigned long long *word, kite_op op, Bad what, int64_t at,
                                       int64_t value) {
  const unsigned long long idx = at < 0 ? 0 : at > 65535 ? 65535 : (unsigned long long)at;
  const unsigned long long code = (unsigned long long)(op + 1) << 56 |
                                  (unsigned long long)what << 48 | idx << 32 |
                                  (unsigned long long)(uint32_t)(int32_t)value;
  atomicCAS(word, 0ull, code);
}

/* A block per sequence. */
__global__ void paged_check_kernel(kite_paged_attn_args a, unsigned long long *word) {
  const int64_t b = blockIdx.x;
  const int64_t capacity = a.max_blocks * a.block_size;
  const int64_t seq_len = a.seq_lens[b];
  if (threadIdx.x == 0) {
    if (seq_len < 0) record(word, a.op, BAD_SEQ_LEN_NEGATIVE, b, seq_len);
    if (seq_len > capacity) record(word, a.op, BAD_SEQ_LEN_PAST_TABLE, b, seq_len);
    if (a.cu_q_lens) {
      const int64_t q_len = (int64_t)a.cu_q_lens[b + 1] - a.cu_q_lens[b];
      if (q_len < 0) record(word, a.op, BAD_CU_Q_LENS, b + 1, a.cu_q_lens[b + 1]);
      if (q_len > seq_len) record(word, a.op, BAD_QUERY_CHUNK, b, seq_len);
      if (b == 0 && a.cu_q_lens[0] != 0) record(word, a.op, BAD_CU_Q_LENS, 0, a.cu_q_lens[0]);
      if (b == a.batch - 1 && a.cu_q_lens[a.batch] != a.tokens)
        record(word, a.op, BAD_CU_Q_LENS, a.batch, a.cu_q_lens[a.batch]);
    }
  }
  const int64_t keys = seq_len < 0 ? 0 : seq_len > capacity ? capacity : seq_len;
  const int32_t *row = a.block_table + b * a.block_table_stride;
  for (int64_t j = threadIdx.x; j < (keys + a.block_size - 1) / a.block_size; j += blockDim.x)
    if (row[j] < 0 || row[j] >= a.num_blocks) record(word, a.op, BAD_BLOCK_ID, b, row[j]);
}

__global__ void slots_check_kernel(kite_store_kv_args a, unsigned long long *word) {
  const int64_t capacity = a.num_blocks * a.block_size;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < a.tokens;
       i += (int64_t)gridDim.x * blockDim.x)
    if (a.slots[i] >= capacity) record(word, a.op, BAD_SLOT, i, a.slots[i]);
}

__global__ void groups_check_kernel(kite_group_gemm_args a, unsigned long long *word) {
  int64_t sum = 0;
  for (int64_t g = 0; g < a.groups; g++) {
    if (a.group_sizes[g] < 0) record(word, a.op, BAD_GROUP_SIZE, g, a.group_sizes[g]);
    sum += a.group_sizes[g];
  }
  if (sum != a.m) record(word, a.op, BAD_GROUP_SUM, a.groups, sum);
}

/* targets of the cross-entropy ops: ignore_index or in [0, vocab) */
__global__ void targets_check_kernel(kite_op op, const int32_t *targets, int64_t rows,
                                     int64_t vocab, int32_t ignore, unsigned long long *word) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < rows;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int32_t t = targets[i];
    if (t != ignore && (t < 0 || t >= vocab)) record(word, op, BAD_TARGET, i, t);
  }
}

constexpr int MAX_DEVICES = 64;
pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
unsigned long long *g_word[MAX_DEVICES]; /* device words, allocated on first use */

/* The word of the device, allocated (and zeroed) on first use; NULL when that fails. */
unsigned long long *device_word(int device) {
  if (device < 0 || device >= MAX_DEVICES) return nullptr;
  pthread_mutex_lock(&g_lock);
  if (!g_word[device]) {
    void *p = nullptr;
    if (cudaMalloc(&p, sizeof(unsigned long long)) == cudaSuccess &&
        cudaMemset(p, 0, sizeof(unsigned long long)) == cudaSuccess)
      g_word[device] = (unsigned long long *)p;
    else
      (void)cudaGetLastError();
  }
  unsigned long long *w = g_word[device];
  pthread_mutex_unlock(&g_lock);
  return w;
}

void describe(char *buf, size_t n, unsigned what, unsigned long long at, int v) {
  switch (what) {
  case BAD_SEQ_LEN_NEGATIVE:
    snprintf(buf, n, "seq_lens: sequence %llu: seq_len %d is negative", at, v);
    break;
  case BAD_SEQ_LEN_PAST_TABLE:
    snprintf(buf, n, "seq_lens: sequence %llu: seq_len %d is past the block table", at, v);
    break;
  case BAD_BLOCK_ID:
    snprintf(buf, n, "block_table: sequence %llu: block id %d is outside the cache", at, v);
    break;
  case BAD_QUERY_CHUNK:
    snprintf(buf, n, "seq_lens: sequence %llu: seq_len %d is below its query count", at, v);
    break;
  case BAD_CU_Q_LENS:
    snprintf(buf, n, "cu_q_lens: cu_q_lens[%llu] = %d (must start at 0, not decrease, end at T)",
             at, v);
    break;
  case BAD_SLOT:
    snprintf(buf, n, "slots: slots[%llu] = %d is past the cache", at, v);
    break;
  case BAD_GROUP_SIZE:
    snprintf(buf, n, "group_sizes: group_sizes[%llu] = %d is negative", at, v);
    break;
  case BAD_GROUP_SUM:
    snprintf(buf, n, "group_sizes: the %llu sizes sum to %d, not M", at, v);
    break;
  case BAD_TARGET:
    snprintf(buf, n, "targets: targets[%llu] = %d is outside [0, V) and is not ignore_index", at,
             v);
    break;
  default:
    snprintf(buf, n, "index %llu: value %d is out of range", at, v);
    break;
  }
}

} // namespace

extern "C" kite_status cuda_index_check(kite_ctx *ctx, const void *args) {
  if (!(kite_ctx_checks(ctx) & KITE_CHECK_INDICES)) return KITE_OK;
  const kite_op op = *(const kite_op *)args;
  const char *name = cuda_op_str(op);
  cudaStream_t s;
  kite_status st = kite_cuda::begin(ctx, name, &s);
  if (st != KITE_OK) return st;
  unsigned long long *word = device_word(kite_ctx_device(ctx).device_id);
  if (!word)
    return kite_set_error(KITE_ERR_DEVICE, "%s: cuda: cannot allocate the index-check word", name);
  if (op == KITE_OP_PAGED_DECODE || op == KITE_OP_PAGED_PREFILL) {
    const kite_paged_attn_args *a = (const kite_paged_attn_args *)args;
    if (a->batch > 0) paged_check_kernel<<<(unsigned)a->batch, 128, 0, s>>>(*a, word);
  } else if (op == KITE_OP_STORE_KV) {
    const kite_store_kv_args *a = (const kite_store_kv_args *)args;
    if (a->tokens > 0)
      slots_check_kernel<<<
          (unsigned)((a->tokens + 255) / 256 < 1024 ? (a->tokens + 255) / 256 : 1024), 256, 0, s>>>(
          *a, word);
  } else if (op == KITE_OP_MLA_DECODE) { /* the paged check over the same block-table fields */
    const kite_mla_decode_args *m = (const kite_mla_decode_args *)args;
    kite_paged_attn_args a = {};
    a.op = op, a.batch = a.tokens = m->batch, a.num_blocks = m->num_blocks;
    a.block_size = m->block_size, a.block_table = m->block_table, a.max_blocks = m->max_blocks;
    a.block_table_stride = m->block_table_stride, a.seq_lens = m->seq_lens;
    if (a.batch > 0) paged_check_kernel<<<(unsigned)a.batch, 128, 0, s>>>(a, word);
  } else if (op == KITE_OP_MLA_STORE_KV) { /* the slots check of store_kv */
    const kite_mla_store_kv_args *m = (const kite_mla_store_kv_args *)args;
    kite_store_kv_args a = {};
    a.op = op, a.tokens = m->tokens, a.num_blocks = m->num_blocks, a.block_size = m->block_size;
    a.slots = m->slots;
    if (a.tokens > 0)
      slots_check_kernel<<<
          (unsigned)((a.tokens + 255) / 256 < 1024 ? (a.tokens + 255) / 256 : 1024), 256, 0, s>>>(
          a, word);
  } else if (op == KITE_OP_GROUP_GEMM) {
    groups_check_kernel<<<1, 1, 0, s>>>(*(const kite_group_gemm_args *)args, word);
  } else if (op == KITE_OP_CROSS_ENTROPY || op == KITE_OP_CROSS_ENTROPY_BACKWARD ||
             op == KITE_OP_CROSS_ENTROPY_WITH_GRAD || op == KITE_OP_FUSED_LINEAR_CROSS_ENTROPY) {
    const bool flce = op == KITE_OP_FUSED_LINEAR_CROSS_ENTROPY;
    const kite_ce_args *c = (const kite_ce_args *)args;
    const kite_flce_args *f = (const kite_flce_args *)args;
    const int64_t rows = flce ? f->rows : c->rows;
    if (rows > 0)
      targets_check_kernel<<<(unsigned)((rows + 255) / 256 < 1024 ? (rows + 255) / 256 : 1024), 256,
                             0, s>>>(op, flce ? f->targets : c->targets, rows,
                                     flce ? f->vocab : c->vocab,
                                     flce ? f->opts.ignore_index : c->opts.ignore_index, word);
  }
  return cuda_check_launch(name, "index check");
}

extern "C" kite_status cuda_index_report(int device) {
  if (device < 0 || device >= MAX_DEVICES) return KITE_OK;
  pthread_mutex_lock(&g_lock);
  unsigned long long *word = g_word[device], v = 0;
  cudaError_t e = cudaSuccess;
  if (word) {
    e = cudaMemcpy(&v, word, sizeof v, cudaMemcpyDeviceToHost);
    if (e == cudaSuccess && v) e = cudaMemset(word, 0, sizeof v);
  }
  pthread_mutex_unlock(&g_lock);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return kite_set_error(KITE_ERR_DEVICE, "cuda: synchronize: reading the index-check word: %s",
                          cudaGetErrorString(e));
  }
  if (!v) return KITE_OK;
  char what[160];
  describe(what, sizeof what, (unsigned)(v >> 48 & 0xff), v >> 32 & 0xffff,
           (int)(int32_t)(uint32_t)v);
  return kite_set_error(KITE_ERR_INVALID_ARG, "%s: %s (KITE_CHECK_INDICES, cuda:%d)",
                        cuda_op_str((kite_op)((v >> 56) - 1)), what, device);
}
