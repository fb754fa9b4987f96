/*
 * The host side of the kernels: each run resolves its tensors to (cl_mem, offset), sets the
 * kernel's arguments in the order of its .cl signature and enqueues one launch on the ctx's queue
 * (no host loop over rows or heads). Arguments and the enqueue happen under the device's lock, as
 * a cl_kernel's arguments are shared by every thread.
 */
#include "ocl_internal.h"

/* ---- launches ------------------------------------------------------------------------------ */

kite_status ocl_begin(ocl_launch *L, kite_ctx *ctx, kite_op op, ocl_kernel_id kid) {
  L->op = ocl_op_str(op);
  L->n = 0;
  L->err = CL_SUCCESS;
  L->st = KITE_OK;
  kite_status s = ocl_device_get(kite_ctx_device(ctx).device_id, L->op, &L->d);
  if (s != KITE_OK) return s;
  L->k = L->d->kernels[kid];
  L->q = ocl_queue(ctx, L->d);
  pthread_mutex_lock(&L->d->lock);
  return KITE_OK;
}

static void set(ocl_launch *L, size_t size, const void *v) {
  if (L->err != CL_SUCCESS || L->st != KITE_OK) {
    L->n++;
    return;
  }
  L->err = clSetKernelArg(L->k, L->n++, size, v);
}

void ocl_arg_buf(ocl_launch *L, const char *name, const void *p) {
  ocl_buf b = {0};
  if (L->st == KITE_OK) L->st = ocl_resolve(L->op, name, p, &b);
  set(L, sizeof b.mem, b.mem ? &b.mem : NULL);
  set(L, sizeof b.off, &b.off);
}
void ocl_arg_i32(ocl_launch *L, int v) {
  cl_int x = v;
  set(L, sizeof x, &x);
}
void ocl_arg_i64(ocl_launch *L, int64_t v) {
  cl_long x = v;
  set(L, sizeof x, &x);
}
void ocl_arg_u64(ocl_launch *L, uint64_t v) {
  cl_ulong x = v;
  set(L, sizeof x, &x);
}
void ocl_arg_f32(ocl_launch *L, float v) {
  cl_float x = v;
  set(L, sizeof x, &x);
}
void ocl_arg_local(ocl_launch *L, size_t bytes) {
  set(L, bytes, NULL);
}

kite_status ocl_end(ocl_launch *L, cl_uint dims, const size_t *global, const size_t *local) {
  size_t g[2];
  int empty = 0;
  for (cl_uint i = 0; i < dims; i++) {
    g[i] = (global[i] + local[i] - 1) / local[i] * local[i];
    empty |= g[i] == 0;
  }
  if (L->st == KITE_OK && L->err == CL_SUCCESS && !empty)
    L->err = clEnqueueNDRangeKernel(L->q, L->k, dims, NULL, g, local, 0, NULL, NULL);
  pthread_mutex_unlock(&L->d->lock);
  if (L->st != KITE_OK) return L->st;
  return L->err == CL_SUCCESS ? KITE_OK : ocl_error(L->op, "launch", L->err);
}

/* 2-D elementwise range: dim 0 along rows of `cols`, dim 1 over rows */
static kite_status end_2d(ocl_launch *L, int64_t cols, int64_t rows) {
  const size_t global[2] = {(size_t)cols, (size_t)rows}, local[2] = {64, 1};
  return ocl_end(L, 2, global, local);
}

/* one group of the device's row size per row */
static kite_status end_rows(ocl_launch *L, int64_t rows) {
  const size_t local[1] = {L->d->row_group}, global[1] = {(size_t)rows * L->d->row_group};
  return ocl_end(L, 1, global, local);
}

/* ---- supports ------------------------------------------------------------------------------ */

OCL_SUPPORTS(ocl_float_supports) {
  (void)k;
  const kite_dtype t = kite_args_head_of(args)->dtype;
  if (t == KITE_DTYPE_F32 || t == KITE_DTYPE_F16 || t == KITE_DTYPE_BF16) return true;
  *why = "dtype must be f32, f16 or bf16";
  return false;
}

OCL_SUPPORTS(ocl_paged_supports) {
  const kite_paged_attn_args *a = args;
  if (!ocl_float_supports(k, args, why)) return false;
  if (a->head_dim > 256) {
    *why = "head_dim must be <= 256";
    return false;
  }
  if (a->sinks) {
    *why = "no attention sinks";
    return false;
  }
  return true;
}

/* ---- runs ---------------------------------------------------------------------------------- */

/* the gate's activation code of the .cl (ACT_SILU..ACT_RELU) */
static int act_code(kite_op op) {
  switch (op) {
  case KITE_OP_SILU:
    return 0;
  case KITE_OP_GELU:
    return 1;
  case KITE_OP_GELU_TANH:
    return 2;
  case KITE_OP_GELU_QUICK:
    return 3;
  default:
    return 4; /* relu */
  }
}

/* An activation (kernel OCL_K_ACT) or a gated activation (OCL_K_GATED, which takes the clamp
 * limit last): the same arguments otherwise. */
static kite_status act_launch(kite_ctx *ctx, kite_op op, ocl_kernel_id kernel, int act,
                              kite_dtype dtype, int64_t rows, int64_t cols, const void *x,
                              int64_t x_stride, void *y, int64_t y_stride, const float *limit) {
  ocl_launch L;
  kite_status s = ocl_begin(&L, ctx, op, kernel);
  if (s != KITE_OK) return s;
  ocl_arg_i32(&L, act);
  ocl_arg_i32(&L, (int)dtype);
  ocl_arg_i64(&L, rows);
  ocl_arg_i64(&L, cols);
  ocl_arg_buf(&L, "x", x);
  ocl_arg_i64(&L, x_stride);
  ocl_arg_buf(&L, "y", y);
  ocl_arg_i64(&L, y_stride);
  if (limit) ocl_arg_f32(&L, *limit);
  return end_2d(&L, cols, rows);
}

OCL_RUN(ocl_act_run) {
  (void)k;
  const kite_act_args *a = args;
  return act_launch(ctx, a->op, OCL_K_ACT, act_code(a->op), a->dtype, a->rows, a->cols, a->x,
                    a->x_stride, a->y, a->y_stride, NULL);
}

OCL_RUN(ocl_gated_run) {
  (void)k;
  const kite_gated_args *a = args;
  return act_launch(ctx, a->op, OCL_K_GATED, act_code(kite_gated_op_act(a->op)), a->dtype, a->rows,
                    a->cols, a->x, a->x_stride, a->y, a->y_stride, &a->limit);
}

OCL_RUN(ocl_norm_run) {
  (void)k;
  const kite_norm_args *a = args;
  ocl_launch L;
  kite_status s = ocl_begin(&L, ctx, a->op, OCL_K_NORM);
  if (s != KITE_OK) return s;
  const int layer = a->op == KITE_OP_LAYER_NORM || a->op == KITE_OP_ADD_LAYER_NORM;
  ocl_arg_i32(&L, (int)a->dtype);
  ocl_arg_i32(&L, layer);
  ocl_arg_i64(&L, a->cols);
  ocl_arg_buf(&L, "x", a->x);
  ocl_arg_i64(&L, a->x_stride);
  ocl_arg_buf(&L, "residual", a->residual);
  ocl_arg_i64(&L, a->residual_stride);
  ocl_arg_buf(&L, "w", a->w);
  ocl_arg_buf(&L, "b", layer ? a->b : NULL);
  ocl_arg_buf(&L, "y", a->y);
  ocl_arg_i64(&L, a->y_stride);
  ocl_arg_f32(&L, a->eps);
  ocl_arg_f32(&L, a->offset);
  ocl_arg_i32(&L, a->pos == KITE_NORM_POST);
  ocl_arg_local(&L, L.d->row_group * sizeof(float));
  return end_rows(&L, a->rows);
}

OCL_RUN(ocl_softmax_run) {
  (void)k;
  const kite_softmax_args *a = args;
  ocl_launch L;
  kite_status s = ocl_begin(&L, ctx, a->op, OCL_K_SOFTMAX);
  if (s != KITE_OK) return s;
  ocl_arg_i32(&L, (int)a->dtype);
  ocl_arg_i64(&L, a->cols);
  ocl_arg_buf(&L, "x", a->x);
  ocl_arg_i64(&L, a->x_stride);
  ocl_arg_buf(&L, "y", a->y);
  ocl_arg_i64(&L, a->y_stride);
  ocl_arg_f32(&L, a->scale);
  ocl_arg_local(&L, L.d->row_group * sizeof(float));
  return end_rows(&L, a->rows);
}

OCL_RUN(ocl_embedding_run) {
  (void)k;
  const kite_embedding_args *a = args;
  ocl_launch L;
  kite_status s = ocl_begin(&L, ctx, a->op, OCL_K_EMBEDDING);
  if (s != KITE_OK) return s;
  ocl_arg_i32(&L, (int)a->dtype);
  ocl_arg_i64(&L, a->tokens);
  ocl_arg_i64(&L, a->hidden);
  ocl_arg_i64(&L, a->vocab);
  ocl_arg_buf(&L, "ids", a->ids);
  ocl_arg_buf(&L, "table", a->table);
  ocl_arg_i64(&L, a->table_stride);
  ocl_arg_buf(&L, "y", a->y);
  ocl_arg_i64(&L, a->y_stride);
  return end_2d(&L, a->hidden, a->tokens);
}

OCL_RUN(ocl_store_kv_run) {
  (void)k;
  const kite_store_kv_args *a = args;
  ocl_launch L;
  kite_status s = ocl_begin(&L, ctx, a->op, OCL_K_STORE_KV);
  if (s != KITE_OK) return s;
  ocl_arg_i32(&L, (int)a->dtype);
  ocl_arg_i64(&L, a->tokens);
  ocl_arg_i64(&L, a->hkv);
  ocl_arg_i64(&L, a->head_dim);
  ocl_arg_buf(&L, "k", a->k);
  ocl_arg_i64(&L, a->k_stride_t);
  ocl_arg_i64(&L, a->k_stride_h);
  ocl_arg_buf(&L, "v", a->v);
  ocl_arg_i64(&L, a->v_stride_t);
  ocl_arg_i64(&L, a->v_stride_h);
  ocl_arg_buf(&L, "key_cache", a->key_cache);
  ocl_arg_buf(&L, "value_cache", a->value_cache);
  ocl_arg_i64(&L, a->num_blocks);
  ocl_arg_i64(&L, a->block_size);
  ocl_arg_buf(&L, "slots", a->slots);
  return end_2d(&L, a->head_dim, a->tokens * a->hkv);
}

OCL_RUN(ocl_rope_run) {
  (void)k;
  const kite_rope_args *a = args;
  ocl_launch L;
  kite_status s = ocl_begin(&L, ctx, a->op, OCL_K_ROPE);
  if (s != KITE_OK) return s;
  ocl_arg_i32(&L, (int)a->dtype);
  ocl_arg_i64(&L, a->tokens);
  ocl_arg_i64(&L, a->hq);
  ocl_arg_i64(&L, a->k ? a->hkv : 0);
  ocl_arg_i64(&L, a->rot_dim);
  ocl_arg_i64(&L, a->max_pos);
  ocl_arg_buf(&L, "q", a->q);
  ocl_arg_i64(&L, a->q_stride_t);
  ocl_arg_i64(&L, a->q_stride_h);
  ocl_arg_buf(&L, "k", a->k);
  ocl_arg_i64(&L, a->k_stride_t);
  ocl_arg_i64(&L, a->k_stride_h);
  ocl_arg_buf(&L, "positions", a->positions);
  ocl_arg_buf(&L, "cos_sin", a->cos_sin);
  ocl_arg_i32(&L, a->style == KITE_ROPE_GPTJ);
  ocl_arg_f32(&L, a->op == KITE_OP_ROPE_BACKWARD ? -1.0f : 1.0f);
  return end_2d(&L, a->rot_dim / 2, a->tokens * (a->hq + (a->k ? a->hkv : 0)));
}

OCL_RUN(ocl_paged_decode_run) {
  (void)k;
  const kite_paged_attn_args *a = args;
  ocl_launch L;
  kite_status s = ocl_begin(&L, ctx, a->op, OCL_K_PAGED_DECODE);
  if (s != KITE_OK) return s;
  ocl_arg_i32(&L, (int)a->dtype);
  ocl_arg_i64(&L, a->hq);
  ocl_arg_i64(&L, a->hkv);
  ocl_arg_i64(&L, a->head_dim);
  ocl_arg_buf(&L, "q", a->q);
  ocl_arg_i64(&L, a->q_stride_t);
  ocl_arg_i64(&L, a->q_stride_h);
  ocl_arg_buf(&L, "key_cache", a->key_cache);
  ocl_arg_buf(&L, "value_cache", a->value_cache);
  ocl_arg_i64(&L, a->num_blocks);
  ocl_arg_i64(&L, a->block_size);
  ocl_arg_buf(&L, "block_table", a->block_table);
  ocl_arg_i64(&L, a->max_blocks);
  ocl_arg_i64(&L, a->block_table_stride);
  ocl_arg_buf(&L, "seq_lens", a->seq_lens);
  ocl_arg_f32(&L, a->opts.scale);
  ocl_arg_f32(&L, a->opts.softcap);
  ocl_arg_i32(&L, a->opts.window_left);
  ocl_arg_i32(&L, a->opts.gqa == KITE_GQA_INTERLEAVED);
  ocl_arg_buf(&L, "o", a->o);
  ocl_arg_i64(&L, a->o_stride_t);
  ocl_arg_i64(&L, a->o_stride_h);
  ocl_arg_buf(&L, "lse", a->lse);
  const size_t local[2] = {OCL_PAGED_GROUP, 1};
  const size_t global[2] = {(size_t)a->hq * OCL_PAGED_GROUP, (size_t)a->batch};
  return ocl_end(&L, 2, global, local);
}

OCL_RUN(ocl_sample_run) {
  (void)k;
  const kite_sample_args *a = args;
  ocl_launch L;
  kite_status s = ocl_begin(&L, ctx, a->op, OCL_K_SAMPLE);
  if (s != KITE_OK) return s;
  ocl_arg_i32(&L, (int)a->dtype);
  ocl_arg_i32(&L, a->op == KITE_OP_ARGMAX);
  ocl_arg_i64(&L, a->vocab);
  ocl_arg_buf(&L, "logits", a->logits);
  ocl_arg_i64(&L, a->logits_stride);
  ocl_arg_buf(&L, "temperature", a->temperature);
  ocl_arg_buf(&L, "top_k", a->top_k);
  ocl_arg_buf(&L, "top_p", a->top_p);
  ocl_arg_buf(&L, "min_p", a->min_p);
  ocl_arg_buf(&L, "seeds", a->seeds);
  ocl_arg_buf(&L, "steps", a->steps);
  ocl_arg_u64(&L, a->seed);
  ocl_arg_u64(&L, a->step);
  ocl_arg_buf(&L, "tokens", a->tokens);
  return end_rows(&L, a->rows);
}

kite_status ocl_bias_store(kite_ctx *ctx, kite_op op, kite_dtype dt, int64_t rows, int64_t cols,
                           const void *src, const void *bias, void *y, int64_t ys, int from_y) {
  ocl_launch L;
  kite_status s = ocl_begin(&L, ctx, op, OCL_K_BIAS_STORE);
  if (s != KITE_OK) return s;
  ocl_arg_i32(&L, (int)dt);
  ocl_arg_i64(&L, rows);
  ocl_arg_i64(&L, cols);
  ocl_arg_buf(&L, "workspace", src);
  ocl_arg_buf(&L, "bias", bias);
  ocl_arg_buf(&L, "y", y);
  ocl_arg_i64(&L, ys);
  ocl_arg_i32(&L, from_y);
  return end_2d(&L, cols, rows);
}
