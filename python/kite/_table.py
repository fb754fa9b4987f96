"""The Python side of the op table: defaults, outputs and extra arguments of every op.

The C side (python/src/ops_table.h) gives each op's arguments in order, with their kinds
(input / written tensor, optional or not, float, int) and names; this table adds what Python
needs on top:

- ``defaults``: argument name -> default value. An argument gets its default only when every
  argument after it has one too (otherwise it stays required; pass None for an optional tensor).
- ``out``: the written tensors that are results (allocated when not given), name -> a Python
  expression over the arguments giving the new tensor: ``like(x)`` (x's shape and dtype) or
  ``new(x, shape[, dtype])`` (x's device; dtype a torch dtype name, default x's). Written
  tensors not listed here are updated in place (rope's q and k, add_*_norm's residual, the
  KV caches). An optional written tensor listed here (lse) is computed only when asked for.
- ``extra``: Python-only arguments used by the ``out`` expressions (the dtype of a new tensor),
  name -> (torch schema type, default).

Adding an op: a row in ops_table.h (the C call) and a row here.
"""

ATTN = dict(scale=0.0, softcap=0.0, window_left=-1, gqa=0, causal=1)

OPS = {
    "silu": dict(out=dict(y="like(x)")),
    "gelu": dict(out=dict(y="like(x)")),
    "gelu_tanh": dict(out=dict(y="like(x)")),
    "gelu_quick": dict(out=dict(y="like(x)")),
    "relu": dict(out=dict(y="like(x)")),
    "silu_and_mul": dict(defaults=dict(limit=0.0),
                         out=dict(y="new(x, tuple(x.shape[:-1]) + (x.shape[-1] // 2,))")),
    "gelu_and_mul": dict(defaults=dict(limit=0.0),
                         out=dict(y="new(x, tuple(x.shape[:-1]) + (x.shape[-1] // 2,))")),
    "gelu_tanh_and_mul": dict(defaults=dict(limit=0.0),
                              out=dict(y="new(x, tuple(x.shape[:-1]) + (x.shape[-1] // 2,))")),
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
    "paged_decode": dict(defaults=ATTN,
                         out=dict(o="like(q)", lse="new(q, tuple(q.shape[:2]), 'float32')")),
    "paged_prefill": dict(defaults=ATTN,
                          out=dict(o="like(q)", lse="new(q, tuple(q.shape[:2]), 'float32')")),
    "sdpa": dict(defaults=dict(mask=None, **ATTN),
                 out=dict(o="like(q)", lse="new(q, tuple(q.shape[:3]), 'float32')")),
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
}
