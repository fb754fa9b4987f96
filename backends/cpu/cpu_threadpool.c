/*
 * A small persistent thread pool for the cpu kernels.
 *
 * Workers are created lazily, as many as the largest call asked for (minus the caller, which
 * works too), and live until the library is unloaded. One call uses the pool at a time; a call
 * that finds it busy (another ctx on another thread) runs inline instead of waiting.
 *
 * A call on T threads cuts [0, items) into up to 4 T pieces that the caller and T - 1 workers
 * claim until none is left: a thread that the OS preempts holds up at most one small piece, and
 * the call finishes even if no worker ever wakes. The job is published as one 64-bit ticket:
 * generation (24 bits) | workers allowed (8) | pieces (16) | next piece (16). Claiming a piece is
 * a compare-and-swap on the ticket, so a worker that wakes late, still holding an old
 * generation, can never claim a piece of a newer job. After a job, workers spin briefly before
 * sleeping on a condition variable: back-to-back calls (a model's layers) then start within a
 * few hundred nanoseconds instead of a futex wake-up.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#include "cpu.h"

#define POOL_MAX_WORKERS 255 /* fits the ticket's 8 bits */
#define PIECES_PER_THREAD 4
#define POOL_SPIN_NS 100000 /* how long an idle worker polls before sleeping */
#define MIN_PART_WORK 16384 /* elements a thread should have at least */

static struct {
  pthread_mutex_t call_lock; /* held by the one call using the pool */
  pthread_mutex_t mu;        /* guards sleeping */
  pthread_cond_t wake;
  pthread_t threads[POOL_MAX_WORKERS];
  int workers;         /* started, under call_lock */
  atomic_int sleepers; /* workers blocked (or about to block) on wake */
  atomic_bool stop;    /* set when the library unloads */
  _Atomic uint64_t ticket;
  atomic_int remaining; /* pieces of the current job not yet finished */
  uint32_t generation;  /* of the last job, under call_lock */
  /* The current job: written before the ticket is published, read after a piece is claimed. */
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
  return (uint32_t)(t >> 40);
}

static inline uint64_t make_ticket(uint32_t gen, int helpers, int pieces) {
  return (uint64_t)(gen & 0xffffff) << 40 | (uint64_t)helpers << 32 | (uint64_t)pieces << 16;
}

/* Claims and runs pieces of job `gen` as thread `slot` (0 the caller, worker w is w + 1) until
 * none is left or a newer job replaced it. */
static void run_pieces(uint32_t gen, int slot) {
  uint64_t t = atomic_load(&pool.ticket);
  for (;;) {
    const int helpers = (int)(t >> 32 & 0xff), pieces = (int)(t >> 16 & 0xffff);
    const int piece = (int)(t & 0xffff);
    if (ticket_gen(t) != gen || slot > helpers || piece >= pieces) return;
    if (!atomic_compare_exchange_weak(&pool.ticket, &t, t + 1)) continue;
    /* [begin, end) of piece `piece`: the first items % pieces pieces get one item more */
    const int64_t base = pool.items / pieces, extra = pool.items % pieces;
    const int64_t begin = piece * base + (piece < extra ? piece : extra);
    const int64_t end = begin + base + (piece < extra ? 1 : 0);
    pool.fn(pool.job, begin, end, slot);
    atomic_fetch_sub_explicit(&pool.remaining, 1, memory_order_release);
    t = atomic_load(&pool.ticket);
  }
}

/* Whether ticket t is a job, newer than `seen`, that worker `slot` may join. */
static inline bool ticket_for(uint64_t t, uint32_t seen, int slot) {
  return ticket_gen(t) != seen && slot <= (int)(t >> 32 & 0xff);
}

/* Waits for a job that worker `slot` may join: spins a while, then sleeps. Jobs on fewer
 * threads pass it by, so workers beyond a call's thread count stay asleep. */
static uint32_t wait_job(uint32_t seen, int slot) {
  const uint64_t start = now_ns();
  for (unsigned i = 1;; i++) {
    const uint64_t t = atomic_load(&pool.ticket);
    if (ticket_for(t, seen, slot) || atomic_load(&pool.stop)) return ticket_gen(t);
    cpu_relax();
    if (i % 64 == 0 && now_ns() - start > POOL_SPIN_NS) break;
  }
  pthread_mutex_lock(&pool.mu);
  /* sleepers is raised before the ticket is read again; the caller publishes the ticket before
   * it reads sleepers. Both are sequentially consistent, so one of the two sees the other. */
  atomic_fetch_add(&pool.sleepers, 1);
  uint64_t t;
  while (!ticket_for(t = atomic_load(&pool.ticket), seen, slot) && !atomic_load(&pool.stop))
    pthread_cond_wait(&pool.wake, &pool.mu);
  atomic_fetch_sub(&pool.sleepers, 1);
  pthread_mutex_unlock(&pool.mu);
  return ticket_gen(t);
}

static void *worker_main(void *arg) {
  const int slot = (int)(uintptr_t)arg;
  uint32_t seen = 0; /* a job in progress when the worker starts is joined */
  for (;;) {
    seen = wait_job(seen, slot);
    if (atomic_load(&pool.stop)) return NULL;
    run_pieces(seen, slot);
  }
}

/* Starts workers up to n (under call_lock). A failure leaves fewer workers, which only makes
 * the caller run more pieces itself. */
static void grow(int n) {
  if (n > POOL_MAX_WORKERS) n = POOL_MAX_WORKERS;
  while (pool.workers < n) {
    void *slot = (void *)(uintptr_t)(pool.workers + 1);
    if (pthread_create(&pool.threads[pool.workers], NULL, worker_main, slot) != 0) return;
    pool.workers++;
  }
}

int cpu_parallel_parts(const kite_ctx *ctx, int64_t items, int64_t work) {
  if (work < CPU_INLINE_WORK || items < 2) return 1;
  int64_t threads = kite_ctx_num_threads(ctx);
  if (threads > POOL_MAX_WORKERS + 1) threads = POOL_MAX_WORKERS + 1;
  if (threads > items) threads = items;
  if (threads > work / MIN_PART_WORK) threads = work / MIN_PART_WORK;
  return threads > 1 ? (int)threads : 1;
}

void cpu_parallel_run(int parts, int64_t items, cpu_task_fn fn, const void *job) {
  if (items <= 0) return;
  if (parts <= 1 || pthread_mutex_trylock(&pool.call_lock) != 0) {
    fn(job, 0, items, 0);
    return;
  }
  if (parts > POOL_MAX_WORKERS + 1) parts = POOL_MAX_WORKERS + 1;
  grow(parts - 1);
  const int64_t pieces =
      items < (int64_t)parts * PIECES_PER_THREAD ? items : (int64_t)parts * PIECES_PER_THREAD;
  pool.fn = fn;
  pool.job = job;
  pool.items = items;
  atomic_store_explicit(&pool.remaining, (int)pieces, memory_order_relaxed);
  const uint32_t gen = ++pool.generation & 0xffffff;
  atomic_store(&pool.ticket, make_ticket(gen, parts - 1, (int)pieces));
  if (atomic_load(&pool.sleepers) > 0) {
    pthread_mutex_lock(&pool.mu);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.mu);
  }

  run_pieces(gen, 0);
  for (unsigned i = 1; atomic_load_explicit(&pool.remaining, memory_order_acquire) > 0; i++) {
    cpu_relax();
    if (i % 1024 == 0) sched_yield();
  }
  pthread_mutex_unlock(&pool.call_lock);
}

cpu_grid cpu_grid_make(const kite_ctx *ctx, int64_t rows, int64_t cols) {
  cpu_grid g = {.rows = rows, .cols = cols, .blocks = 1, .block_cols = cols > 0 ? cols : 1};
  const int64_t pieces = (int64_t)kite_ctx_num_threads(ctx) * PIECES_PER_THREAD;
  if (rows > 0 && rows < pieces && cols >= 2 * 1024) {
    /* Blocks of a multiple of 64 columns, at least 1024: whole cache lines, whole vectors. */
    int64_t blocks = (pieces + rows - 1) / rows;
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
