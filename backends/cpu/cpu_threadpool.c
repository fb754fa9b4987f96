/*
 * A small persistent thread pool for the cpu kernels.
 *
 * Workers are created lazily, as many as the largest call asked for (minus the caller, which
 * works too), and live until the library is unloaded. One call uses the pool at a time; a call
 * that finds it busy (another ctx on another thread) runs inline instead of waiting.
 *
 * A job is published as one 64-bit ticket: generation (32 bits) | parts (16) | next part (16).
 * Claiming a part is a compare-and-swap on the ticket, so a worker that wakes late, still
 * holding an old generation, can never claim a part of a newer job; and the caller itself claims
 * parts, so the call finishes even if no worker ever wakes. After a job, workers spin briefly
 * before sleeping on a condition variable: back-to-back calls (a model's layers) then start
 * within a few hundred nanoseconds instead of a futex wake-up.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#include "cpu.h"

#define POOL_MAX_WORKERS 255 /* parts fit in the ticket's 16 bits with room to spare */
#define POOL_SPIN_NS 100000  /* how long an idle worker polls before sleeping */
#define MIN_PART_WORK 16384  /* elements a part should have at least */

static struct {
  pthread_mutex_t call_lock; /* held by the one call using the pool */
  pthread_mutex_t mu;        /* guards sleeping */
  pthread_cond_t wake;
  pthread_t threads[POOL_MAX_WORKERS];
  int workers;         /* started, under call_lock */
  atomic_int sleepers; /* workers blocked (or about to block) on wake */
  atomic_bool stop;    /* set when the library unloads */
  _Atomic uint64_t ticket;
  atomic_int remaining; /* parts of the current job not yet finished */
  uint32_t generation;  /* of the last job, under call_lock */
  /* The current job: written before the ticket is published, read after a part is claimed. */
  cpu_task_fn fn;
  const void *job;
  int64_t items;
} pool = {
    .call_lock = PTHREAD_MUTEX_INITIALIZER,
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .wake = PTHREAD_COND_INITIALIZER,
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint32_t ticket_gen(uint64_t t) {
  return (uint32_t)(t >> 32);
}

/* Claims and runs parts of job `gen` until none is left or a newer job replaced it. */
static void run_parts(uint32_t gen) {
  uint64_t t = atomic_load(&pool.ticket);
  for (;;) {
    const int parts = (int)(t >> 16 & 0xffff), part = (int)(t & 0xffff);
    if (ticket_gen(t) != gen || part >= parts) return;
    if (!atomic_compare_exchange_weak(&pool.ticket, &t, t + 1)) continue;
    /* [begin, end) of part `part`: the first items % parts parts get one item more. */
    const int64_t base = pool.items / parts, extra = pool.items % parts;
    const int64_t begin = part * base + (part < extra ? part : extra);
    const int64_t end = begin + base + (part < extra ? 1 : 0);
    pool.fn(pool.job, begin, end, part);
    atomic_fetch_sub_explicit(&pool.remaining, 1, memory_order_release);
    t = atomic_load(&pool.ticket);
  }
}

/* Waits for a generation other than `seen`: spins a while, then sleeps. */
static uint32_t wait_job(uint32_t seen) {
  const uint64_t start = now_ns();
  for (unsigned i = 1;; i++) {
    const uint32_t g = ticket_gen(atomic_load(&pool.ticket));
    if (g != seen || atomic_load(&pool.stop)) return g;
    cpu_relax();
    if (i % 64 == 0 && now_ns() - start > POOL_SPIN_NS) break;
  }
  pthread_mutex_lock(&pool.mu);
  /* sleepers is raised before the ticket is read again; the caller publishes the ticket before
   * it reads sleepers. Both are sequentially consistent, so one of the two sees the other. */
  atomic_fetch_add(&pool.sleepers, 1);
  uint32_t g;
  while ((g = ticket_gen(atomic_load(&pool.ticket))) == seen && !atomic_load(&pool.stop))
    pthread_cond_wait(&pool.wake, &pool.mu);
  atomic_fetch_sub(&pool.sleepers, 1);
  pthread_mutex_unlock(&pool.mu);
  return g;
}

static void *worker_main(void *arg) {
  uint32_t seen = (uint32_t)(uintptr_t)arg;
  for (;;) {
    seen = wait_job(seen);
    if (atomic_load(&pool.stop)) return NULL;
    run_parts(seen);
  }
}

/* Starts workers up to n (under call_lock). A failure leaves fewer workers, which only makes
 * the caller run more parts itself. */
static void grow(int n) {
  if (n > POOL_MAX_WORKERS) n = POOL_MAX_WORKERS;
  while (pool.workers < n) {
    void *seen = (void *)(uintptr_t)pool.generation;
    if (pthread_create(&pool.threads[pool.workers], NULL, worker_main, seen) != 0) return;
    pool.workers++;
  }
}

int cpu_parallel_parts(const kite_ctx *ctx, int64_t items, int64_t work) {
  if (work < CPU_INLINE_WORK || items < 2) return 1;
  int64_t parts = kite_ctx_num_threads(ctx);
  if (parts > POOL_MAX_WORKERS + 1) parts = POOL_MAX_WORKERS + 1;
  if (parts > items) parts = items;
  if (parts > work / MIN_PART_WORK) parts = work / MIN_PART_WORK;
  return parts > 1 ? (int)parts : 1;
}

void cpu_parallel_run(int parts, int64_t items, cpu_task_fn fn, const void *job) {
  if (items <= 0) return;
  if (parts <= 1 || pthread_mutex_trylock(&pool.call_lock) != 0) {
    fn(job, 0, items, 0);
    return;
  }
  grow(parts - 1);
  pool.fn = fn;
  pool.job = job;
  pool.items = items;
  atomic_store_explicit(&pool.remaining, parts, memory_order_relaxed);
  const uint32_t gen = ++pool.generation;
  atomic_store(&pool.ticket, (uint64_t)gen << 32 | (uint64_t)parts << 16);
  if (atomic_load(&pool.sleepers) > 0) {
    pthread_mutex_lock(&pool.mu);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.mu);
  }

  run_parts(gen);
  for (unsigned i = 1; atomic_load_explicit(&pool.remaining, memory_order_acquire) > 0; i++) {
    cpu_relax();
    if (i % 1024 == 0) sched_yield();
  }
  pthread_mutex_unlock(&pool.call_lock);
}

cpu_grid cpu_grid_make(const kite_ctx *ctx, int64_t rows, int64_t cols) {
  cpu_grid g = {.rows = rows, .cols = cols, .blocks = 1, .block_cols = cols > 0 ? cols : 1};
  const int64_t threads = kite_ctx_num_threads(ctx);
  if (rows > 0 && rows < threads && cols >= 2 * 1024) {
    /* Blocks of a multiple of 64 columns, at least 1024: whole cache lines, whole vectors. */
    int64_t blocks = (threads + rows - 1) / rows;
    if (blocks > cols / 1024) blocks = cols / 1024;
    g.block_cols = ((cols + blocks - 1) / blocks + 63) / 64 * 64;
    g.blocks = (cols + g.block_cols - 1) / g.block_cols;
  }
  g.items = rows * g.blocks;
  return g;
}

/* Stops and joins the workers when the library is unloaded (dlclose), so no thread is left
 * running code that is no longer mapped. */
__attribute__((destructor)) static void pool_shutdown(void) {
  if (pool.workers == 0) return;
  atomic_store(&pool.stop, true);
  pthread_mutex_lock(&pool.mu);
  pthread_cond_broadcast(&pool.wake);
  pthread_mutex_unlock(&pool.mu);
  for (int i = 0; i < pool.workers; i++) pthread_join(pool.threads[i], NULL);
  pool.workers = 0;
}

/* A forked child has only the forking thread: forget the workers, whose threads did not follow,
 * and the locks, which another thread may have held at the fork. */
static void pool_after_fork_child(void) {
  pool.workers = 0;
  atomic_store(&pool.sleepers, 0);
  pthread_mutex_init(&pool.call_lock, NULL);
  pthread_mutex_init(&pool.mu, NULL);
  pthread_cond_init(&pool.wake, NULL);
}

__attribute__((constructor)) static void pool_register_fork_handler(void) {
  pthread_atfork(NULL, NULL, pool_after_fork_child);
}
