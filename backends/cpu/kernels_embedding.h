/*
 * Embedding: y[t, :] = table[ids[t], :] copied bit for bit (any element type), zeros for an id
 * outside [0, vocab). Nothing to compute: the gain is in the threads, which split (token, column
 * block) items so that a few long rows still spread, and, for calls past the streaming size, in
 * streaming stores (a row copied by memcpy reads each output line into cache before writing it:
 * a third more traffic, 72 % of memcpy at 8192 x 4096 bf16 on a Zen 3).
 * Part of kernels.h.
 */

typedef struct embedding_job {
  const kite_embedding_args *a;
  int64_t es;
  cpu_grid grid;
  bool stream;
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
    if (id < 0 || id >= a->vocab) {
      memset(dst, 0, bytes);
      continue;
    }
    const char *src = cpu_row(a->table, a->table_stride, id, j->es) + c0 * j->es;
    if (j->stream)
      vb_copy_stream(dst, src, bytes);
    else
      memcpy(dst, src, bytes);
  }
  if (j->stream) vf_stream_end();
}

static kite_status embedding_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  const kite_embedding_args *a = args;
  if (a->tokens <= 0 || a->hidden <= 0) return KITE_OK;
  const embedding_job j = {
      .a = a,
      .es = (int64_t)kite_dtype_size(a->dtype),
      .grid = cpu_grid_make(ctx, a->tokens, a->hidden),
      .stream = cpu_streams(a->tokens * a->hidden * 2 * (int64_t)kite_dtype_size(a->dtype))};
  const int64_t work = a->tokens * a->hidden * 2;
  cpu_parallel_run(cpu_parallel_parts(ctx, j.grid.items, work), j.grid.items, embedding_task, &j);
  return KITE_OK;
}
