"""The Python side of the op table: defaults, outputs and extra arguments of every op.

kite's op table (include/kite/ops.def, read through kite._C.ops()) gives each op function's
arguments in order, with their kinds (input / written tensor, optional or not, float, integer)
and names; this table adds what Python needs on top:

- ``defaults``: argument name -> default value. An argument gets its default only when every
  argument after it has one too (otherwise it stays required; pass None for an optional tensor).
- ``out``: the written tensors that are results (allocated when not given), name -> a Python
  expression over the arguments giving the new tensor: ``like(x)`` (x's shape and dtype) or
  ``new(x, shape[, dtype])`` (x's device; dtype a torch dtype name, default x's). Written
  tensors not listed here are updated in place (rope's q and k, add_*_norm's residual, the
  KV caches). An optional written tensor listed here (lse) is computed only when asked for.
- ``extra``: Python-only arguments used by the ``out`` expressions (the dtype of a new tensor),
  name -> (torch schema type, default); REQUIRED as the default makes it a required argument.
- ``required``: arguments that kite takes as optional (NULL) and Python always passes.
- ``scalars``: optional [B] input tensors (per-row parameters) that kite.ops also takes as a
  Python number, name -> dtype ("float32" or "int32", as kite.h gives the tensor): the number is
  made into a [B] tensor of that dtype on the device of the op's first tensor (B its first dim)
  before the call. torch.ops.kite takes tensors only (a schema argument has one type).

Adding an op: its row in include/kite/ops.def and a row here (none for an activation or a gated
activation: FAMILY_ROWS); kite.ops fails to import while an
op function of kite._C has no row here (kite._C.unbound() lists the functions not bound).
"""

REQUIRED = object()

ATTN = dict(scale=0.0, softcap=0.0, window_left=-1, gqa=0, causal=1)
# the attention ops' sinks (f32 [Hq], kite.h "Sinks") come after their options: None = none
SINKS = dict(sinks=None)
# the backwards' dsinks: an optional result, computed by the .out form when given
DSINKS = "new(q, (q.shape[1],), 'float32')"  # [Hq]: q is [B, Hq, Sq, D] or [Tq, Hq, D]
# kite_ce_opts_default(); reduction 0 none, 1 sum, 2 mean
CE = dict(ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=0.0, reduction=2)

def _norm_backward(x, grads, **defaults):
    """A norm backward's row: dx like its input x, the weight gradients [H] always computed."""
    out = dict(dx=f"like({x})", **{g: f"new({x}, ({x}.shape[-1],))" for g in grads})
    return dict(required=grads, defaults=defaults, out=out)


# Rows shared by a family's ops, by (family, argument kinds): an activation or a gated activation
# added to kite needs no row here.
FAMILY_ROWS = {
    ("activation", ("T", "W")): dict(out=dict(y="like(x)")),
    ("gated", ("T", "f", "W")): dict(defaults=dict(limit=0.0),
                                     out=dict(y="new(x, tuple(x.shape[:-1]) + (x.shape[-1] // 2,))")),
}

OPS = {
    "rms_norm": dict(defaults=dict(w=None, eps=1e-6, offset=0.0), out=dict(y="like(x)")),
    "layer_norm": dict(defaults=dict(w=None, b=None, eps=1e-5), out=dict(y="like(x)")),
    "add_rms_norm": dict(defaults=dict(w=None, eps=1e-6, offset=0.0, pos=0),
                         out=dict(y="like(x)")),
    "add_layer_norm": dict(defaults=dict(w=None, b=None, eps=1e-5, pos=0),
                           out=dict(y="like(x)")),
    "rope": dict(defaults=dict(style=0)),
    "softmax": dict(defaults=dict(scale=1.0), out=dict(y="like(x)")),
    "embedding": dict(out=dict(y="new(table, (ids.shape[0], table.shape[1]))")),
    "store_kv": dict(),
    "paged_decode": dict(defaults=dict(ATTN, **SINKS),
                         out=dict(o="like(q)", lse="new(q, tuple(q.shape[:2]), 'float32')")),
    "paged_prefill": dict(defaults=dict(ATTN, **SINKS),
                          out=dict(o="like(q)", lse="new(q, tuple(q.shape[:2]), 'float32')")),
    "sdpa": dict(defaults=dict(mask=None, **ATTN, **SINKS),
                 out=dict(o="like(q)", lse="new(q, tuple(q.shape[:3]), 'float32')")),
    "sdpa_varlen": dict(defaults=dict(ATTN, **SINKS),
                        out=dict(o="like(q)", lse="new(q, tuple(q.shape[:2]), 'float32')")),
    # o's dtype picks the output (bfloat16, float16 or float32); q, k, v float8_e4m3fn codes
    "sdpa_fp8": dict(defaults=ATTN, extra=dict(dtype=("str", "bfloat16")),
                     out=dict(o="new(q, tuple(q.shape), dtype)",
                              lse="new(q, tuple(q.shape[:3]), 'float32')")),
    "quant_fp8_blocks": dict(out=dict(
        q="new(x, tuple(x.shape), 'float8_e4m3fn')",
        scales="new(x, (x.shape[0], x.shape[1], -(-x.shape[2] // 128)), 'float32')")),
    "sdpa_backward": dict(defaults=SINKS,
                          out=dict(dq="like(q)", dk="like(k)", dv="like(v)", dsinks=DSINKS)),
    "sdpa_varlen_backward": dict(defaults=SINKS,
                                 out=dict(dq="like(q)", dk="like(k)", dv="like(v)",
                                          dsinks=DSINKS)),
    "linear": dict(defaults=dict(bias=None), out=dict(y="new(x, (x.shape[0], w.shape[0]))")),
    "group_gemm": dict(out=dict(y="new(x, (x.shape[0], w.shape[1]))")),
    "topk_gating": dict(defaults=dict(renormalize=0),
                        out=dict(weights="new(logits, (logits.shape[0], k), 'float32')",
                                 ids="new(logits, (logits.shape[0], k), 'int32')")),
    "fused_moe": dict(defaults=dict(act=0), out=dict(y="like(x)")),
    "quant": dict(extra=dict(qdtype=("str", "int8")),
                  out=dict(q="new(x, tuple(x.shape), qdtype)",
                           scales="new(x, tuple(x.shape[:1]), 'float32')")),
    "dequant": dict(extra=dict(dtype=("str", "float32")),
                    out=dict(y="new(q, tuple(q.shape), dtype)")),
    "linear_quant": dict(defaults=dict(bias=None), extra=dict(dtype=("str", "bfloat16")),
                         out=dict(y="new(xq, (xq.shape[0], wq.shape[0]), dtype)")),
    # training: act / the gated act are kite_op ids (kite.OP_SILU ...); the norms' gradients of
    # w and b are always computed (they do not depend on w or b)
    "activation_backward": dict(out=dict(dx="like(x)")),
    "gated_backward": dict(defaults=dict(limit=0.0), out=dict(dx="like(x)")),
    "rms_norm_backward": _norm_backward("x", ("dw",), eps=1e-6, offset=0.0),
    "layer_norm_backward": _norm_backward("x", ("dw", "db"), eps=1e-5),
    "add_rms_norm_backward": _norm_backward("s", ("dw",), eps=1e-6, offset=0.0),
    "add_layer_norm_backward": _norm_backward("s", ("dw", "db"), eps=1e-5),
    "rope_backward": dict(defaults=dict(style=0)),
    "softmax_backward": dict(defaults=dict(scale=1.0), out=dict(dx="like(y)")),
    "embedding_backward": dict(extra=dict(num_rows=("int", REQUIRED)),
                               out=dict(dtable="new(dy, (num_rows, dy.shape[-1]))")),
    "cross_entropy": dict(required=('lse',),
                          defaults=CE,
                          out=dict(loss="new(logits, (logits.shape[0] if reduction == 0 else 1,),"
                                        " 'float32')",
                                   lse="new(logits, (logits.shape[0],), 'float32')")),
    "cross_entropy_backward": dict(defaults=CE, out=dict(dlogits="like(logits)")),
    "cross_entropy_with_grad": dict(required=('lse',),
                                    defaults=CE,
                                    out=dict(loss="new(logits, (logits.shape[0] if reduction == 0"
                                                  " else 1,), 'float32')",
                                             lse="new(logits, (logits.shape[0],), 'float32')",
                                             dlogits="like(logits)")),
    "fused_linear_cross_entropy": dict(required=('dh', 'dw', 'db'),
                                       
        defaults=dict(CE, chunk_bytes=0),
        out=dict(loss="new(h, (h.shape[0] if reduction == 0 else 1,), 'float32')",
                 dh="like(h)", dw="like(w)", db="new(h, (w.shape[0],))")),
    # sampling: argmax / sample give int32 tokens [B]
    "argmax": dict(out=dict(tokens="new(logits, (logits.shape[0],), 'int32')")),
    "sample": dict(defaults=dict(temperature=None, top_k=None, top_p=None, min_p=None,
                                 seeds=None, steps=None, seed=0, step=0),
                   scalars=dict(temperature="float32", top_k="int32", top_p="float32",
                                min_p="float32"),
                   out=dict(tokens="new(logits, (logits.shape[0],), 'int32')")),
    "apply_penalties": dict(defaults=dict(prompt_ids=None, output_ids=None, repetition=None,
                                          presence=None, frequency=None),
                            scalars=dict(repetition="float32", presence="float32",
                                         frequency="float32")),
    "logprobs": dict(defaults=dict(n=0),
                     required=("tokens", "token_logprobs", "top_ids", "top_logprobs"),
                     out=dict(token_logprobs="new(logits, (logits.shape[0],), 'float32')",
                              top_ids="new(logits, (logits.shape[0], n), 'int32')",
                              top_logprobs="new(logits, (logits.shape[0], n), 'float32')")),
    "softcap": dict(),
    "linear_wq4": dict(defaults=dict(format=0, bias=None),
                       out=dict(y="new(x, (x.shape[0], w.shape[0]))")),
    # MoE of today's models: score 0 softmax, 1 sigmoid, 2 softmax_topk; act 0 silu, 1 gelu,
    # 2 swiglu_oai; layout 0 split, 1 interleaved
    "moe_route": dict(defaults=dict(score=0, n_group=1, topk_group=1, renormalize=0, scaling=1.0),
                      out=dict(weights="new(logits, (logits.shape[0], k), 'float32')",
                               ids="new(logits, (logits.shape[0], k), 'int32')")),
    "fused_moe_ex": dict(defaults=dict(act=0, layout=0, alpha=1.702, limit=0.0, transposed=0),
                         out=dict(y="like(x)")),
    "moe_aux_loss": dict(defaults=dict(mask=None),
                         out=dict(loss="new(logits, (1,), 'float32')")),
    "moe_aux_loss_backward": dict(out=dict(dlogits="like(logits)")),
    # GGUF blocks: type is GGUF's number (kite_gguf_type); dequant_gguf writes a given y[N, K]
    "linear_gguf": dict(defaults=dict(bias=None), out=dict(y="new(x, (x.shape[0], w.shape[0]))")),
    "dequant_gguf": dict(),
    # MLA (DeepSeek-V2/V3): the latent caches are written in place; scale has no default
    "mla_store_kv": dict(),
    "mla_decode": dict(out=dict(o="like(q_nope)",
                                lse="new(q_nope, tuple(q_nope.shape[:2]), 'float32')")),
    "linear_gguf_q8": dict(defaults=dict(bias=None),
                           out=dict(y="new(x, (x.shape[0], w.shape[0]))")),
    # grouped GGUF blocks (MoE experts as stored): w[G, N, row bytes], bias[G, N] or None
    "group_gemm_gguf": dict(defaults=dict(bias=None),
                            out=dict(y="new(x, (x.shape[0], w.shape[1]))")),
}
