/*
 * Embedding: y[t, :] = table[ids[t], :] copied bit for bit (any element type), zeros for an id
 * outside [0, vocab). Nothing to compute, so no vector code: the gain is in the threads, which
 * split (token, column block) items so that a few long rows still spread.
 * Part of kernels.h.
 */

typedef struct embedding_job {
  const kite_embedding_args *a;
  int64_t es;
  cpu_grid grid;
} embedding_job;

static void embedding_task(const void *job, int64_t begin, int64_t end, int slot) {
  const embedding_job *j = job;
  const kite_embedding_args *a = j->a;
  for (int64_t it = begin; it < end; it++) {
    int64_t tok, c0, c1;
    cpu_grid_item(&j->grid, it, &tok, &c0, &c1);
    char *dst = cpu_row(a->y, a->y_stride, tok, j->es) + c0 * j->es;
    const size_t bytes = (size_t)((c1 - c0) * j->es);
    const int64_t id = a->ids[tok];
    if (id >= 0 && id < a->vocab)
      memcpy(dst, cpu_row(a->table, a->table_stride, id, j->es) + c0 * j->es, bytes);
    else
      memset(dst, 0, bytes);
  }
}

static kite_status embedding_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_embedding_args *a = args;
  if (a->tokens <= 0 || a->hidden <= 0) return KITE_OK;
  const embedding_job j = {.a = a,
                           .es = (int64_t)kite_dtype_size(a->dtype),
                           .grid = cpu_grid_make(ctx, a->tokens, a->hidden)};
  const int64_t work = a->tokens * a->hidden * 2;
  cpu_parallel_run(cpu_parallel_parts(ctx, j.grid.items, work), j.grid.items, embedding_task, &j);
  return KITE_OK;
}
