/*
 * all_reduce and all_reduce_add_rms_norm over peer memory (NVLink / PCIe peer access), for the
 * message sizes where NCCL's fixed cost dominates. Each rank of a comm owns one device buffer,
 * registered once when the comm is made (nccl.c: the buffers' records are all-gathered through
 * NCCL; within one process the peers' pointers are used directly after
 * cudaDeviceEnablePeerAccess, across processes through cudaIpcOpenMemHandle). Every rank maps
 * every peer's buffer, so a kernel reads the peers' data with plain loads.
 *
 * Buffer of one rank (PEER_* below):
 *   flags[PEER_BLOCKS][PEER_MAX_RANKS]  u32, written by the peers: flags[b][q] is the last
 *                                       barrier value that block b of rank q has reached
 *   calls[PEER_BLOCKS]                  u32, this rank's own: calls block b has run
 *   slot 0, slot 1                      the data of alternate calls, each A (a rank's whole
 *                                       input) then R (the two-shot's reduced segment)
 *
 * Synchronization. Every kernel runs the same grid of PEER_BLOCKS blocks of PEER_THREADS threads
 * on every rank, and block b of each rank works on the same part of the data; so block b needs to
 * wait only for block b of each peer (a per-block barrier: write our value into each peer's
 * flags[b][rank] with a system-scope release, then spin on our own flags[b][q] with
 * system-scope acquires until every peer has reached it). Barrier values come from the block's
 * call counter, kept on the device (calls[b]), so that nothing on the host changes between calls:
 * a captured CUDA graph replays correctly. Call c (counted from 1) uses the values 2c (and 2c + 1
 * for the two-shot's second barrier); flags only grow (compared by signed difference, so the
 * 32-bit counter may wrap). The call alternates between two data slots (c & 1): a rank writes
 * slot s at call c + 2 only after its call c + 1 passed a barrier with every peer's call c + 1,
 * which each peer started after its call c (the last reader of slot s) had finished. All peer
 * kernels share the counters and slots, so one-shot, two-shot and the fused norm may follow one
 * another in any order. A comm's collectives must therefore run in order on the device (one
 * stream, or streams ordered by events), as NCCL's do.
 *
 * Sums: every rank adds the ranks' values in rank order 0, 1, ..., n - 1 in float32 and rounds
 * once to the dtype, so every rank gets the same bits and a rerun gives the same result.
 *
 * "oneshot": each rank copies its x into its slot's A, one barrier, then reads every rank's A and
 *   sums. Reads (n - 1) x the message over the links: for small messages.
 * "twoshot": reduce-scatter then all-gather through the buffers: rank r sums segment r of every
 *   rank's A into its R (barrier), then every rank copies each rank's R to its y. Reads
 *   2 (n - 1) / n x the message over the links, with one barrier more.
 * all_reduce_add_rms_norm "oneshot": a block per row; the row's sum over ranks (rounded to the
 *   dtype, as all_reduce returns it), then add_rms_norm's PRE / POST rules with the residual, in
 *   the same launch.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <new>

#include "common.cuh"

using namespace kite_cuda;

namespace {

constexpr int PEER_MAX_RANKS = CUDA_PEER_MAX_RANKS;
constexpr int PEER_BLOCKS = 64;
constexpr int PEER_THREADS = 512;
/* the largest message of any peer kernel, and the one-shot's limit for more than 2 ranks */
constexpr size_t PEER_MAX_BYTES = (size_t)8 << 20;
constexpr size_t ONESHOT_MANY_BYTES = (size_t)256 << 10;
constexpr size_t FLAGS_OFF = 0, CALLS_OFF = 4096, SLOT0_OFF = 8192;
/* A, then R: a segment of at most half the message (n >= 2) plus its last partial pack */
constexpr size_t R_OFF = PEER_MAX_BYTES;
constexpr size_t SLOT_BYTES = PEER_MAX_BYTES + PEER_MAX_BYTES / 2 + 4096;
constexpr size_t BUFFER_BYTES = SLOT0_OFF + 2 * SLOT_BYTES;
constexpr uint32_t RECORD_MAGIC = 0x6b706565u;
/* the fused norm keeps one float per column in shared memory */
constexpr int64_t NORM_MAX_COLS = 16384;

static_assert(PEER_BLOCKS * PEER_MAX_RANKS * 4 <= CALLS_OFF, "flags overlap the counters");
static_assert(CALLS_OFF + PEER_BLOCKS * 4 <= SLOT0_OFF, "counters overlap the data");

/* The pointers one kernel needs: every rank's buffer (this rank's own at [rank]). */
struct Peers {
  char *base[PEER_MAX_RANKS];
  int nranks, rank;
};

/* ---- flags ---------------------------------------------------------------------------------- */
__device__ __forceinline__ void store_release_sys(uint32_t *p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t load_acquire_sys(const uint32_t *p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

/* The block's call number for this launch (from 1), its counter advanced; every thread gets
 * it. Only thread 0 of block b ever touches calls[b], and launches on the stream are ordered. */
__device__ __forceinline__ uint32_t next_call(const Peers &p) {
  __shared__ uint32_t call;
  if (threadIdx.x == 0) {
    uint32_t *calls = (uint32_t *)(p.base[p.rank] + CALLS_OFF);
    call = calls[blockIdx.x] + 1;
    calls[blockIdx.x] = call;
  }
  __syncthreads();
  return call;
}

/* Block b of every rank meets here: what this block wrote before it (in any thread: bar.sync then
 * the release) is visible to every peer's block b after it, and the other way round. */
__device__ __forceinline__ void barrier(const Peers &p, uint32_t value) {
  __syncthreads();
  const int q = threadIdx.x;
  if (q < p.nranks && q != p.rank) {
    uint32_t *theirs = (uint32_t *)(p.base[q] + FLAGS_OFF) + blockIdx.x * PEER_MAX_RANKS + p.rank;
    store_release_sys(theirs, value);
    const uint32_t *mine =
        (const uint32_t *)(p.base[p.rank] + FLAGS_OFF) + blockIdx.x * PEER_MAX_RANKS + q;
    while ((int32_t)(load_acquire_sys(mine) - value) < 0) {
    }
  }
  __syncthreads();
}

__device__ __forceinline__ char *slot_of(const Peers &p, int q, uint32_t call) {
  return p.base[q] + SLOT0_OFF + (call & 1u) * SLOT_BYTES;
}

/* ---- packs: V = 16 / sizeof(T) elements; a message's last pack may be partial -------------- */
__device__ __forceinline__ bool is16(const void *p) {
  return ((uintptr_t)p & 15u) == 0;
}
template <typename T> __device__ __forceinline__ void load_pack(const T *p, int64_t n, float *v) {
  constexpr int V = vec_elems<T>();
  if (n >= V && is16(p)) {
    load_floats<V>(p, v);
  } else {
#pragma unroll
    for (int j = 0; j < V; j++) v[j] = j < n ? to_float(p[j]) : 0.0f;
  }
}
template <typename T> __device__ __forceinline__ void store_pack(T *p, int64_t n, const float *v) {
  constexpr int V = vec_elems<T>();
  if (n >= V && is16(p)) {
    store_floats<V>(p, v);
  } else {
#pragma unroll
    for (int j = 0; j < V; j++)
      if (j < n) p[j] = from_float<T>(v[j]);
  }
}
/* A pack of a peer's buffer (always 16-byte aligned), past L1: peers write it between calls. */
template <typename T> __device__ __forceinline__ void load_peer(const T *p, float *v) {
  constexpr int V = vec_elems<T>();
  const uint4 raw = __ldcg(reinterpret_cast<const uint4 *>(p));
  const T *e = reinterpret_cast<const T *>(&raw);
#pragma unroll
  for (int j = 0; j < V; j++) v[j] = to_float(e[j]);
}
/* Copies pack u of x (count elements) into the buffer at dst, unchanged. */
template <typename T>
__device__ __forceinline__ void stage_pack(const T *x, int64_t count, int64_t u, T *dst) {
  constexpr int V = vec_elems<T>();
  const int64_t i = u * V, n = count - i < V ? count - i : V;
  if (n == V && is16(x + i)) {
    *reinterpret_cast<uint4 *>(dst + i) = *reinterpret_cast<const uint4 *>(x + i);
  } else {
    for (int64_t j = 0; j < n; j++) dst[i + j] = x[i + j];
  }
}
/* The sum over ranks, in rank order, of pack `u` of each rank's region at byte offset `off` of
 * the slot. */
template <typename T>
__device__ __forceinline__ void sum_pack(const Peers &p, uint32_t call, size_t off, int64_t u,
                                         float *acc) {
  constexpr int V = vec_elems<T>();
#pragma unroll
  for (int j = 0; j < V; j++) acc[j] = 0.0f;
  for (int q = 0; q < p.nranks; q++) {
    float v[V];
    load_peer<T>((const T *)(slot_of(p, q, call) + off) + u * V, v);
#pragma unroll
    for (int j = 0; j < V; j++) acc[j] += v[j];
  }
}

/* ---- kernels -------------------------------------------------------------------------------- */
template <typename T>
__global__ void __launch_bounds__(PEER_THREADS)
    oneshot_kernel(Peers p, const T *x, T *y, int64_t count) {
  constexpr int V = vec_elems<T>();
  const uint32_t call = next_call(p);
  const int64_t packs = (count + V - 1) / V;
  const int64_t first = (int64_t)blockIdx.x * PEER_THREADS + threadIdx.x;
  const int64_t step = (int64_t)PEER_BLOCKS * PEER_THREADS;
  T *mine = (T *)slot_of(p, p.rank, call);
  for (int64_t u = first; u < packs; u += step) stage_pack<T>(x, count, u, mine);
  barrier(p, 2 * call);
  for (int64_t u = first; u < packs; u += step) {
    float acc[V];
    sum_pack<T>(p, call, 0, u, acc);
    store_pack<T>(y + u * V, count - u * V, acc);
  }
}

/* Segment s = packs [s seg, (s + 1) seg): block b handles the same offsets j of every segment. */
template <typename T>
__global__ void __launch_bounds__(PEER_THREADS)
    twoshot_kernel(Peers p, const T *x, T *y, int64_t count) {
  constexpr int V = vec_elems<T>();
  const uint32_t call = next_call(p);
  const int n = p.nranks;
  const int64_t packs = (count + V - 1) / V, seg = (packs + n - 1) / n;
  const int64_t first = (int64_t)blockIdx.x * PEER_THREADS + threadIdx.x;
  const int64_t step = (int64_t)PEER_BLOCKS * PEER_THREADS;
  T *mine = (T *)slot_of(p, p.rank, call);
  for (int64_t j = first; j < seg; j += step)
    for (int s = 0; s < n; s++)
      if (s * seg + j < packs) stage_pack<T>(x, count, s * seg + j, mine);
  barrier(p, 2 * call);
  T *reduced = (T *)((char *)mine + R_OFF);
  for (int64_t j = first; j < seg && p.rank * seg + j < packs; j += step) {
    float acc[V];
    sum_pack<T>(p, call, 0, p.rank * seg + j, acc);
    Pack<T, V> pk;
#pragma unroll
    for (int e = 0; e < V; e++) pk.v[e] = from_float<T>(acc[e]);
    *reinterpret_cast<Pack<T, V> *>(reduced + j * V) = pk;
  }
  barrier(p, 2 * call + 1);
  for (int64_t j = first; j < seg; j += step)
    for (int s = 0; s < n; s++) {
      const int64_t u = s * seg + j;
      if (u >= packs) continue;
      float v[V];
      load_peer<T>((const T *)(slot_of(p, s, call) + R_OFF) + j * V, v);
      store_pack<T>(y + u * V, count - u * V, v);
    }
}

/* A block per row (rows b, b + PEER_BLOCKS, ...): stage the rows, barrier, then for each row the
 * ranks' sum rounded to T, + residual, the rms norm, y and the residual written. VEC: cols a
 * multiple of V and every local row 16-byte aligned (a choice local to the rank: the barrier
 * only needs the same rows per block on every rank). */
template <typename T, bool VEC>
__global__ void __launch_bounds__(PEER_THREADS) norm_kernel(Peers p, kite_norm_args a) {
  constexpr int V = vec_elems<T>();
  extern __shared__ float srow[];
  const uint32_t call = next_call(p);
  const int64_t cols = a.cols;
  T *mine = (T *)slot_of(p, p.rank, call);
  const T *x = (const T *)a.x;
  for (int64_t r = blockIdx.x; r < a.rows; r += PEER_BLOCKS) {
    if (VEC) {
      for (int64_t u = threadIdx.x; u < cols / V; u += PEER_THREADS)
        *reinterpret_cast<uint4 *>(mine + r * cols + u * V) =
            *reinterpret_cast<const uint4 *>(x + r * cols + u * V);
    } else {
      for (int64_t i = threadIdx.x; i < cols; i += PEER_THREADS)
        mine[r * cols + i] = x[r * cols + i];
    }
  }
  barrier(p, 2 * call);
  const float inv_cols = 1.0f / (float)cols;
  for (int64_t r = blockIdx.x; r < a.rows; r += PEER_BLOCKS) {
    T *res = (T *)a.residual + r * a.residual_stride;
    float acc = 0.0f;
    if (VEC) {
      for (int64_t u = threadIdx.x; u < cols / V; u += PEER_THREADS) {
        float s[V], rv[V];
        sum_pack<T>(p, call, 0, (r * cols) / V + u, s);
        load_floats<V>(res + u * V, rv);
#pragma unroll
        for (int j = 0; j < V; j++) s[j] = round_to<T>(s[j]) + rv[j];
        if (a.pos == KITE_NORM_PRE) {
          store_floats<V>(res + u * V, s);
#pragma unroll
          for (int j = 0; j < V; j++) s[j] = round_to<T>(s[j]);
        }
#pragma unroll
        for (int j = 0; j < V; j++) {
          srow[u * V + j] = s[j];
          acc += s[j] * s[j];
        }
      }
    } else {
      for (int64_t i = threadIdx.x; i < cols; i += PEER_THREADS) {
        float s = 0.0f;
        for (int q = 0; q < p.nranks; q++)
          s += to_float(__ldcg((const T *)slot_of(p, q, call) + r * cols + i));
        s = round_to<T>(s) + to_float(res[i]);
        if (a.pos == KITE_NORM_PRE) {
          res[i] = from_float<T>(s);
          s = round_to<T>(s);
        }
        srow[i] = s;
        acc += s * s;
      }
    }
    const float rstd = rsqrtf(block_sum(acc) * inv_cols + a.eps);
    T *yr = (T *)a.y + r * a.y_stride;
    const T *w = (const T *)a.w;
    /* each thread reads back only the columns it wrote itself */
    if (VEC) {
      for (int64_t u = threadIdx.x; u < cols / V; u += PEER_THREADS) {
        float s[V], wv[V];
        if (w) load_floats<V>(w + u * V, wv);
#pragma unroll
        for (int j = 0; j < V; j++) s[j] = srow[u * V + j] * rstd * (w ? a.offset + wv[j] : 1.0f);
        store_floats<V>(yr + u * V, s);
        if (a.pos == KITE_NORM_POST) store_floats<V>(res + u * V, s);
      }
    } else {
      for (int64_t i = threadIdx.x; i < cols; i += PEER_THREADS) {
        const float v = srow[i] * rstd * (w ? a.offset + to_float(w[i]) : 1.0f);
        yr[i] = from_float<T>(v);
        if (a.pos == KITE_NORM_POST) res[i] = from_float<T>(v);
      }
    }
    __syncthreads(); /* srow is the next row's */
  }
}

/* Whole-group facts every rank sees alike, so that every rank picks the same kernel. */
const cuda_peer_group *group_of(const void *args, const char **why) {
  const kite_args_head *h = kite_args_head_of(args);
  const kite_comm_ref *c = h->op == KITE_OP_ALL_REDUCE_ADD_RMS_NORM
                               ? &((const kite_comm_norm_args *)args)->comm
                               : &((const kite_comm_args *)args)->comm;
  if (!c->backend || c->backend->comm_create != cuda_comm_create) {
    *why = "the comm belongs to another backend";
    return nullptr;
  }
  const cuda_peer_group *g = ((const cuda_comm *)c->handle)->peer;
  if (!g) *why = "the comm's ranks have no peer access to each other (or a single rank)";
  return g;
}

size_t oneshot_limit(int nranks) {
  return nranks == 2 ? PEER_MAX_BYTES : ONESHOT_MANY_BYTES;
}

} // namespace

/* ---- the comm's buffer: made, shared, released (nccl.c drives the exchange) ----------------- */

struct cuda_peer_group {
  Peers peers;
  int device;
  char *own;
  bool opened[PEER_MAX_RANKS];             /* base[q] from cudaIpcOpenMemHandle */
  cuda_peer_group *shared[PEER_MAX_RANKS]; /* same process: the owner of base[q] */
  std::atomic<int> users; /* this buffer's users in this process, its own included */
};

/* What a rank tells the others of its buffer. */
struct PeerRecord {
  uint32_t magic;
  int32_t pid;
  uint64_t host;
  int32_t device, ipc_ok;
  uint64_t ptr, group;
  cudaIpcMemHandle_t handle;
};
static_assert(sizeof(PeerRecord) <= sizeof(cuda_peer_record), "record too large");

static uint64_t host_id(void) {
  char name[256] = {0};
  gethostname(name, sizeof name - 1);
  uint64_t h = 1469598103934665603ull ^ (uint64_t)gethostid();
  for (const char *c = name; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
  return h;
}

static void release(cuda_peer_group *g) {
  if (g && g->users.fetch_sub(1) == 1) {
    cudaFree(g->own);
    delete g;
  }
}

extern "C" kite_status cuda_peer_alloc(int device, int nranks, int rank, cuda_peer_group **out,
                                       cuda_peer_record *rec) {
  const char *fn = "kite_comm_create";
  *out = nullptr;
  memset(rec, 0, sizeof *rec);
  if (nranks < 2 || nranks > PEER_MAX_RANKS) return KITE_OK; /* no peer kernels: NCCL alone */
  kite_status s = cuda_use_device(fn, device);
  if (s != KITE_OK) return s;
  cuda_peer_group *g = new (std::nothrow) cuda_peer_group();
  if (!g) return kite_set_error(KITE_ERR_OUT_OF_MEMORY, "%s: cuda: out of memory", fn);
  cudaError_t e = cudaMalloc((void **)&g->own, BUFFER_BYTES);
  if (e == cudaSuccess) e = cudaMemset(g->own, 0, BUFFER_BYTES);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    if (g->own) cudaFree(g->own);
    delete g;
    return cuda_device_error(fn, "peer buffer", e);
  }
  g->device = device;
  g->peers.nranks = nranks;
  g->peers.rank = rank;
  g->peers.base[rank] = g->own;
  g->users.store(1);
  PeerRecord r = {};
  r.magic = RECORD_MAGIC;
  r.pid = (int32_t)getpid();
  r.host = host_id();
  r.device = device;
  r.ptr = (uint64_t)(uintptr_t)g->own;
  r.group = (uint64_t)(uintptr_t)g;
  r.ipc_ok = cudaIpcGetMemHandle(&r.handle, g->own) == cudaSuccess;
  if (!r.ipc_ok) (void)cudaGetLastError();
  memcpy(rec->bytes, &r, sizeof r);
  *out = g;
  return KITE_OK;
}

extern "C" bool cuda_peer_attach(cuda_peer_group *g, const cuda_peer_record *recs) {
  const int n = g->peers.nranks, me = g->peers.rank;
  PeerRecord mine;
  memcpy(&mine, recs[me].bytes, sizeof mine);
  if (cuda_use_device("kite_comm_create", g->device) != KITE_OK) return false;
  for (int q = 0; q < n; q++) {
    if (q == me) continue;
    PeerRecord r;
    memcpy(&r, recs[q].bytes, sizeof r);
    if (r.magic != RECORD_MAGIC || r.host != mine.host) return false;
    if (r.pid == mine.pid) {
      int can = 0;
      if (r.device == g->device ||
          cudaDeviceCanAccessPeer(&can, g->device, r.device) != cudaSuccess || !can)
        return false;
      cudaError_t e = cudaDeviceEnablePeerAccess(r.device, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError();
      } else if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
      }
      g->peers.base[q] = (char *)(uintptr_t)r.ptr;
      g->shared[q] = (cuda_peer_group *)(uintptr_t)r.group;
      g->shared[q]->users.fetch_add(1);
    } else {
      void *ptr = nullptr;
      if (!r.ipc_ok ||
          cudaIpcOpenMemHandle(&ptr, r.handle, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
      }
      g->peers.base[q] = (char *)ptr;
      g->opened[q] = true;
    }
  }
  return true;
}

/* Unmaps the peers' buffers; this rank's own buffer goes when its last user in the process
 * does (a peer in this process may still read it until that peer's own comm is destroyed). */
extern "C" void cuda_peer_free(cuda_peer_group *g) {
  if (!g) return;
  if (cuda_use_device("kite_comm_destroy", g->device) != KITE_OK) (void)cudaGetLastError();
  for (int q = 0; q < g->peers.nranks; q++) {
    if (g->opened[q]) cudaIpcCloseMemHandle(g->peers.base[q]);
    release(g->shared[q]);
  }
  (void)cudaGetLastError();
  release(g);
}

/* ---- supports and runs ------------------------------------------------------------------------
 */

CUDA_SUPPORTS(cuda_peer_oneshot_supports) {
  (void)k;
  const kite_comm_args *a = (const kite_comm_args *)args;
  const cuda_peer_group *g = group_of(args, why);
  if (!g || !float_dtype(a->dtype, why)) return false;
  return ok_unless((size_t)a->count * kite_dtype_size(a->dtype) > oneshot_limit(g->peers.nranks),
                   "message larger than the one-shot's limit (8 MB on 2 ranks, 256 KB on more)",
                   why);
}

CUDA_SUPPORTS(cuda_peer_twoshot_supports) {
  (void)k;
  const kite_comm_args *a = (const kite_comm_args *)args;
  const cuda_peer_group *g = group_of(args, why);
  if (!g || !float_dtype(a->dtype, why)) return false;
  return ok_unless((size_t)a->count * kite_dtype_size(a->dtype) > PEER_MAX_BYTES,
                   "message larger than the peer buffers (8 MB)", why);
}

CUDA_SUPPORTS(cuda_peer_norm_supports) {
  (void)k;
  const kite_norm_args *a = &((const kite_comm_norm_args *)args)->norm;
  const cuda_peer_group *g = group_of(args, why);
  if (!g || !float_dtype(a->dtype, why)) return false;
  if (a->cols > NORM_MAX_COLS) {
    *why = "rows longer than 16384 columns";
    return false;
  }
  return ok_unless(
      (size_t)(a->rows * a->cols) * kite_dtype_size(a->dtype) > oneshot_limit(g->peers.nranks),
      "message larger than the one-shot's limit (8 MB on 2 ranks, 256 KB on more)", why);
}

static kite_status run_all_reduce(const kite_kernel *k, kite_ctx *ctx, const void *args, bool two) {
  const kite_comm_args *a = (const kite_comm_args *)args;
  const char *name = cuda_op_str(a->op);
  const cuda_peer_group *g = ((const cuda_comm *)a->comm.handle)->peer;
  if (a->count == 0) return KITE_OK; /* every rank has no work: no barrier, counters unchanged */
  return launch_typed(ctx, name, k->variant, a->dtype, [&](auto tag, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    if (two)
      twoshot_kernel<T>
          <<<PEER_BLOCKS, PEER_THREADS, 0, s>>>(g->peers, (const T *)a->x, (T *)a->y, a->count);
    else
      oneshot_kernel<T>
          <<<PEER_BLOCKS, PEER_THREADS, 0, s>>>(g->peers, (const T *)a->x, (T *)a->y, a->count);
    return KITE_OK;
  });
}

CUDA_RUN(cuda_peer_oneshot_run) {
  return run_all_reduce(k, ctx, args, false);
}

CUDA_RUN(cuda_peer_twoshot_run) {
  return run_all_reduce(k, ctx, args, true);
}

CUDA_RUN(cuda_peer_norm_run) {
  const kite_comm_norm_args *ca = (const kite_comm_norm_args *)args;
  const kite_norm_args &a = ca->norm;
  const char *name = cuda_op_str(ca->op);
  const cuda_peer_group *g = ((const cuda_comm *)ca->comm.handle)->peer;
  if (a.rows * a.cols == 0) return KITE_OK;
  const size_t es = kite_dtype_size(a.dtype);
  const bool vec = a.cols % vec_elems_of(a.dtype) == 0 && aligned16(a.x) &&
                   rows_aligned16(a.residual, a.rows, a.residual_stride, es) &&
                   rows_aligned16(a.y, a.rows, a.y_stride, es) && (!a.w || aligned16(a.w));
  const size_t smem = (size_t)a.cols * sizeof(float);
  return launch_typed(ctx, name, k->variant, a.dtype, [&](auto tag, cudaStream_t s) {
    using T = typename decltype(tag)::type;
    auto kernel = vec ? norm_kernel<T, true> : norm_kernel<T, false>;
    if (smem > 48 * 1024) {
      cudaError_t e =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
      if (e != cudaSuccess) return cuda_device_error(name, "cudaFuncSetAttribute", e);
    }
    kernel<<<PEER_BLOCKS, PEER_THREADS, smem, s>>>(g->peers, a);
    return KITE_OK;
  });
}
