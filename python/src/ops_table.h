/*
 * The op table of kite._C: one row per public op of kite.h.
 *
 *   KITE_PY_OP(name, kinds, call)
 *
 * args: "kind:name" per Python argument, in order, space-separated; kind is one of
 *   T  input tensor            t  optional input tensor (None -> NULL)
 *   W  written tensor          w  optional written tensor (None -> NULL)
 *   f  float                   i  integer
 * An input tensor whose last dim is not unit-stride is copied to a contiguous one first (torch
 * tensors only; kite refuses other such views with its own message). call is the C call, with
 * T(n) / F(n) / I(n) for argument n and OPTS(n) for a kite_attn_opts built from the five
 * arguments n..n+4 (scale f, softcap f, window_left i, gqa i, causal i), CE(n) for a
 * kite_ce_opts from n..n+4 (ignore_index i, label_smoothing f, z_loss f, softcap f, reduction i),
 * FLCE(n) for a kite_flce_opts from those five and chunk_bytes i, and SAMPLING(n) for a
 * kite_sampling_params from n..n+7 (temperature, top_k, top_p, min_p, seeds, steps: optional
 * tensors; seed i, step i). `c` is the kite_ctx. An enum argument (kite_op of the backward
 * activations) comes after the tensors, so that the first argument is always a tensor (the
 * stream is taken from it).
 *
 * Adding an op: a row here and a row in python/kite/_table.py (its Python signature, torch
 * schema and output shapes).
 */
KITE_PY_OP(silu, "T:x W:y", kite_silu(c, T(0), T(1)))
KITE_PY_OP(gelu, "T:x W:y", kite_gelu(c, T(0), T(1)))
KITE_PY_OP(gelu_tanh, "T:x W:y", kite_gelu_tanh(c, T(0), T(1)))
KITE_PY_OP(gelu_quick, "T:x W:y", kite_gelu_quick(c, T(0), T(1)))
KITE_PY_OP(relu, "T:x W:y", kite_relu(c, T(0), T(1)))
KITE_PY_OP(silu_and_mul, "T:x f:limit W:y", kite_silu_and_mul(c, T(0), F(1), T(2)))
KITE_PY_OP(gelu_and_mul, "T:x f:limit W:y", kite_gelu_and_mul(c, T(0), F(1), T(2)))
KITE_PY_OP(gelu_tanh_and_mul, "T:x f:limit W:y", kite_gelu_tanh_and_mul(c, T(0), F(1), T(2)))
KITE_PY_OP(rms_norm, "T:x t:w f:eps f:offset W:y", kite_rms_norm(c, T(0), T(1), F(2), F(3), T(4)))
KITE_PY_OP(layer_norm, "T:x t:w t:b f:eps W:y", kite_layer_norm(c, T(0), T(1), T(2), F(3), T(4)))
KITE_PY_OP(add_rms_norm, "T:x W:residual t:w f:eps f:offset i:pos W:y",
           kite_add_rms_norm(c, T(0), T(1), T(2), F(3), F(4), (kite_norm_pos)I(5), T(6)))
KITE_PY_OP(add_layer_norm, "T:x W:residual t:w t:b f:eps i:pos W:y",
           kite_add_layer_norm(c, T(0), T(1), T(2), T(3), F(4), (kite_norm_pos)I(5), T(6)))
KITE_PY_OP(rope, "W:q w:k T:positions T:cos_sin i:rot_dim i:style",
           kite_rope(c, T(0), T(1), T(2), T(3), I(4), (kite_rope_style)I(5)))
KITE_PY_OP(softmax, "T:x f:scale W:y", kite_softmax(c, T(0), F(1), T(2)))
KITE_PY_OP(embedding, "T:ids T:table W:y", kite_embedding(c, T(0), T(1), T(2)))
KITE_PY_OP(store_kv, "T:k T:v W:key_cache W:value_cache T:slots",
           kite_store_kv(c, T(0), T(1), T(2), T(3), T(4)))
KITE_PY_OP(paged_decode,
           "T:q T:key_cache T:value_cache T:block_table T:seq_lens f:scale f:softcap i:window_left "
           "i:gqa i:causal W:o w:lse",
           kite_paged_decode(c, T(0), T(1), T(2), T(3), T(4), OPTS(5), T(10), T(11)))
KITE_PY_OP(paged_prefill,
           "T:q T:key_cache T:value_cache T:block_table T:cu_q_lens T:seq_lens f:scale f:softcap "
           "i:window_left i:gqa i:causal W:o w:lse",
           kite_paged_prefill(c, T(0), T(1), T(2), T(3), T(4), T(5), OPTS(6), T(11), T(12)))
KITE_PY_OP(sdpa, "T:q T:k T:v t:mask f:scale f:softcap i:window_left i:gqa i:causal W:o w:lse",
           kite_sdpa(c, T(0), T(1), T(2), T(3), OPTS(4), T(9), T(10)))
KITE_PY_OP(linear, "T:x T:w t:bias W:y", kite_linear(c, T(0), T(1), T(2), T(3)))
KITE_PY_OP(group_gemm, "T:x T:w T:group_sizes W:y", kite_group_gemm(c, T(0), T(1), T(2), T(3)))
KITE_PY_OP(topk_gating, "T:logits i:k i:renormalize W:weights W:ids",
           kite_topk_gating(c, T(0), I(1), (int)I(2), T(3), T(4)))
KITE_PY_OP(fused_moe, "T:x T:w13 T:w2 T:weights T:ids i:act W:y",
           kite_fused_moe(c, T(0), T(1), T(2), T(3), T(4), (kite_moe_act)I(5), T(6)))
KITE_PY_OP(quant, "T:x W:q W:scales", kite_quant(c, T(0), T(1), T(2)))
KITE_PY_OP(dequant, "T:q T:scales W:y", kite_dequant(c, T(0), T(1), T(2)))
KITE_PY_OP(linear_quant, "T:xq T:x_scales T:wq T:w_scales t:bias W:y",
           kite_linear_quant(c, T(0), T(1), T(2), T(3), T(4), T(5)))
KITE_PY_OP(activation_backward, "T:x T:dy i:act W:dx",
           kite_activation_backward(c, (kite_op)I(2), T(0), T(1), T(3)))
KITE_PY_OP(gated_backward, "T:x T:dy i:act f:limit W:dx",
           kite_gated_backward(c, (kite_op)I(2), T(0), T(1), F(3), T(4)))
KITE_PY_OP(rms_norm_backward, "T:x t:w T:dy f:eps f:offset W:dx W:dw",
           kite_rms_norm_backward(c, T(0), T(1), T(2), F(3), F(4), T(5), T(6)))
KITE_PY_OP(layer_norm_backward, "T:x t:w T:dy f:eps W:dx W:dw W:db",
           kite_layer_norm_backward(c, T(0), T(1), T(2), F(3), T(4), T(5), T(6)))
KITE_PY_OP(rope_backward, "W:dq w:dk T:positions T:cos_sin i:rot_dim i:style",
           kite_rope_backward(c, T(0), T(1), T(2), T(3), I(4), (kite_rope_style)I(5)))
KITE_PY_OP(softmax_backward, "T:y T:dy f:scale W:dx",
           kite_softmax_backward(c, T(0), T(1), F(2), T(3)))
/* num_rows (V) only sizes the result on the Python side; kite checks dtable's shape. */
KITE_PY_OP(embedding_backward, "T:ids T:dy i:num_rows W:dtable",
           kite_embedding_backward(c, T(0), T(1), T(3)))
KITE_PY_OP(cross_entropy,
           "T:logits T:targets i:ignore_index f:label_smoothing f:z_loss f:softcap i:reduction "
           "W:loss W:lse",
           kite_cross_entropy(c, T(0), T(1), CE(2), T(7), T(8)))
KITE_PY_OP(cross_entropy_backward,
           "T:logits T:targets T:lse T:dloss i:ignore_index f:label_smoothing f:z_loss "
           "f:softcap i:reduction W:dlogits",
           kite_cross_entropy_backward(c, T(0), T(1), T(2), T(3), CE(4), T(9)))
KITE_PY_OP(fused_linear_cross_entropy,
           "T:h T:w t:bias T:targets i:ignore_index f:label_smoothing f:z_loss f:softcap "
           "i:reduction i:chunk_bytes W:loss W:dh W:dw W:db",
           kite_fused_linear_cross_entropy(c, T(0), T(1), T(2), T(3), FLCE(4), T(10), T(11), T(12),
                                           T(13)))
KITE_PY_OP(argmax, "T:logits W:tokens", kite_argmax(c, T(0), T(1)))
KITE_PY_OP(sample,
           "T:logits t:temperature t:top_k t:top_p t:min_p t:seeds t:steps i:seed i:step W:tokens",
           kite_sample(c, T(0), SAMPLING(1), T(9)))
KITE_PY_OP(apply_penalties,
           "W:logits t:prompt_ids t:output_ids t:repetition t:presence t:frequency",
           kite_apply_penalties(c, T(0), T(1), T(2), T(3), T(4), T(5)))
/* n = 0 asks for no top-n lists: kite wants NULL there, Python passes [B, 0] tensors. */
KITE_PY_OP(logprobs, "T:logits T:tokens i:n W:token_logprobs W:top_ids W:top_logprobs",
           kite_logprobs(c, T(0), T(1), I(2), T(3), I(2) ? T(4) : NULL, I(2) ? T(5) : NULL))
KITE_PY_OP(linear_wq4, "T:x T:w i:format t:bias W:y",
           kite_linear_wq4(c, T(0), T(1), (kite_wq4_format)I(2), T(3), T(4)))
