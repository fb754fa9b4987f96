/*
 * linear_wq4 on the CPU (cpu_wq4.h): the common driver and the portable kernel, which widens the
 * nibbles of a block in plain C and shares one decoded block among up to 4 rows of x. The x86
 * kernels are cpu_wq4_avx2.c and cpu_wq4_avx512.c.
 */
#include "cpu_kernels.h"
#include "cpu_wq4.h"

/* Output column n (weights `row`) for rows [r0, r0 + nr) of x, nr <= 4. */
static inline __attribute__((always_inline)) void
wq4_cols_scalar(const wq4_job *j, const uint8_t *row, int64_t n, int64_t r0, int nr) {
  const kite_linear_wq4_args *a = j->a;
  const int64_t nb = a->k / 32;
  float acc[4] = {0, 0, 0, 0};
  for (int64_t b = 0; b < nb; b++) {
    float d, c, q[32];
    cpu_q4_nibbles(cpu_q4_scales(row + b * j->bb, a->format == KITE_WQ4_MIN, &d, &c), q);
    if (a->format == KITE_WQ4_SYM) c = -8.0f * d;
    for (int r = 0; r < nr; r++) {
      const float *x = j->x + (r0 + r) * a->k + b * 32;
      float s = 0;
      for (int i = 0; i < 32; i++) s += x[i] * q[i];
      acc[r] += d * s + c * j->sx[(r0 + r) * nb + b];
    }
  }
  wq4_store(j, n, r0, nr, acc);
}

static void wq4_task_scalar(const void *job, int64_t begin, int64_t end, int slot) {
  wq4_walk(job, begin, end, 4, wq4_cols_scalar);
}

kite_status cpu_wq4_run(kite_ctx *ctx, const kite_linear_wq4_args *a, cpu_task_fn task) {
  if (a->k == 0) { /* y = bias (or 0); w and x may have no memory at all (NULL data) */
    for (int64_t r = 0; r < a->m; r++)
      for (int64_t n = 0; n < a->n; n++)
        kite_store_f32(a->dtype, a->y, r * a->y_stride + n,
                       a->bias ? kite_load_f32(a->dtype, a->bias, n) : 0.0f);
    return KITE_OK;
  }
  const int64_t nb = a->k / 32;
  void *ws;
  kite_status s = kite_ctx_workspace(ctx, (size_t)(a->m * a->k + a->m * nb) * sizeof(float), &ws);
  if (s != KITE_OK) return s;
  float *x = ws, *sx = x + a->m * a->k;
  for (int64_t r = 0; r < a->m; r++)
    for (int64_t b = 0; b < nb; b++) {
      float t = 0;
      for (int i = 0; i < 32; i++) {
        const float v = kite_load_f32(a->dtype, a->x, r * a->x_stride + b * 32 + i);
        x[r * a->k + b * 32 + i] = v;
        t += v;
      }
      sx[r * nb + b] = t;
    }
  wq4_job j = {a, x, sx, a->format == KITE_WQ4_SYM ? 18 : 20};
  const int parts = cpu_parallel_parts(ctx, a->n, a->m * a->k / 8 * a->n);
  cpu_parallel_run(parts, a->n, task, &j);
  return KITE_OK;
}

kite_status cpu_linear_wq4_scalar(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  return cpu_wq4_run(ctx, args, wq4_task_scalar);
}
