/*
 * What harnesses use around dispatch: kite_kernel_run, one kernel entry run with the
 * precondition dispatch guarantees (supports() said yes) checked here, so that run functions
 * never check it again; and the device timer of a ctx.
 */
#include <stddef.h>

#include "internal.h"

/* Every args struct starts with kite_args_head, member for member. */
#define HEAD_OK(T)                                                                                 \
  _Static_assert(offsetof(T, op) == offsetof(kite_args_head, op) &&                                \
                     offsetof(T, dtype) == offsetof(kite_args_head, dtype),                        \
                 #T " must start with kite_args_head's members")
HEAD_OK(kite_act_args);
HEAD_OK(kite_gated_args);
HEAD_OK(kite_norm_args);
HEAD_OK(kite_comm_args);
HEAD_OK(kite_comm_norm_args);
HEAD_OK(kite_rope_args);
HEAD_OK(kite_softmax_args);
HEAD_OK(kite_embedding_args);
HEAD_OK(kite_store_kv_args);
HEAD_OK(kite_gguf_args);
HEAD_OK(kite_group_gguf_args);
HEAD_OK(kite_paged_attn_args);
HEAD_OK(kite_sdpa_args);
HEAD_OK(kite_sdpa_fp8_args);
HEAD_OK(kite_quant_fp8_blocks_args);
HEAD_OK(kite_sdpa_varlen_args);
HEAD_OK(kite_sdpa_backward_args);
HEAD_OK(kite_sdpa_varlen_backward_args);
HEAD_OK(kite_linear_args);
HEAD_OK(kite_group_gemm_args);
HEAD_OK(kite_topk_args);
HEAD_OK(kite_moe_args);
HEAD_OK(kite_route_args);
HEAD_OK(kite_moe_ex_args);
HEAD_OK(kite_aux_loss_args);
HEAD_OK(kite_quant_args);
HEAD_OK(kite_linear_quant_args);
HEAD_OK(kite_act_bwd_args);
HEAD_OK(kite_norm_bwd_args);
HEAD_OK(kite_softmax_bwd_args);
HEAD_OK(kite_embedding_bwd_args);
HEAD_OK(kite_ce_args);
HEAD_OK(kite_flce_args);
HEAD_OK(kite_mla_store_kv_args);
HEAD_OK(kite_mla_decode_args);
HEAD_OK(kite_softcap_args);

kite_status kite_kernel_run(const kite_kernel *k, kite_ctx *ctx, const void *args) {
  if (!k || !ctx || !args || !k->run)
    return kite_set_error(KITE_ERR_INVALID_ARG, "kite_kernel_run: kernel, ctx or args is NULL");
  const kite_args_head *h = kite_args_head_of(args);
  if (h->op != k->op)
    return kite_set_error(KITE_ERR_INVALID_ARG, "kite_kernel_run: args of %s given to a %s kernel",
                          kite_op_name(h->op), kite_op_name(k->op));
  const char *why = NULL;
  if (k->supports && !k->supports(k, args, &why))
    return kite_set_error(KITE_ERR_UNSUPPORTED, "%s: %s: %s", kite_op_name(k->op), k->variant,
                          why ? why : "declined these arguments");
  kite_clear_error();
  kite_status s = k->run(k, ctx, args);
  return s == KITE_OK ? s : kite_kernel_failed(kite_kernel_backend_name(k), k, s);
}

kite_status kite_ctx_timer_start(kite_ctx *ctx, void **timer) {
  if (!ctx || !timer) return kite_set_error(KITE_ERR_INVALID_ARG, "kite_ctx_timer_start: NULL");
  const kite_backend *b = ctx->mem;
  if (!b->timer_start || !b->timer_stop)
    return kite_set_error(KITE_ERR_UNSUPPORTED, "kite_ctx_timer_start: %s has no device timer",
                          b->name);
  return b->timer_start(b, ctx->p.device.device_id, ctx->p.stream, timer);
}

kite_status kite_ctx_timer_stop(kite_ctx *ctx, void *timer, double *seconds) {
  if (!ctx || !timer || !seconds)
    return kite_set_error(KITE_ERR_INVALID_ARG, "kite_ctx_timer_stop: NULL");
  const kite_backend *b = ctx->mem;
  if (!b->timer_stop)
    return kite_set_error(KITE_ERR_UNSUPPORTED, "kite_ctx_timer_stop: %s has no device timer",
                          b->name);
  return b->timer_stop(b, ctx->p.device.device_id, ctx->p.stream, timer, seconds);
}
