"""The causal-LM loss of kite.torch.patch: a <Family>ForCausalLM's forward(labels=...) in
training mode computes the loss with kite's fused linear cross-entropy from the last hidden
states and lm_head's weight (the [tokens, vocab] logits never exist), as transformers'
ForCausalLMLoss would (labels shifted, ignore_index, num_items_in_batch, shift_labels; the final
logit softcap; a family's logit scaling; the MoE router aux loss as the model adds it)."""
import inspect
import weakref

import torch
from torch import nn

from . import nn as knn
from .families import TABLE, modeling


def _causal_lm(model):
    """The transformers <Family>ForCausalLM inside model (model itself, or a PEFT model's base),
    or None."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if type(base).__name__.endswith("ForCausalLM") and isinstance(getattr(base, "lm_head", None),
                                                                   nn.Module):
        return base
    return None


def _causal_lm_loss(model):
    try:
        from transformers.loss.loss_utils import ForCausalLMLoss
    except ImportError:
        return None
    return ForCausalLMLoss


def _slice(hidden, logits_to_keep):
    try:
        from transformers.modeling_utils import slice_logits_to_keep
    except ImportError:
        slice_logits_to_keep = None
    if slice_logits_to_keep is not None:
        return slice_logits_to_keep(hidden, logits_to_keep)
    if isinstance(logits_to_keep, int):
        return hidden if logits_to_keep == 0 else hidden[:, -logits_to_keep:, :]
    return hidden[:, logits_to_keep, :]


def _make_lm_forward(model, original, model_type):
    """model.forward (an instance attribute) computing the training loss with kite's fused
    linear cross-entropy; every other call goes to original (the model's own forward). It holds
    the model weakly (no reference cycle through the model's __dict__). The base model is
    model.base_model (model.model, GPT-NeoX's model.gpt_neox); a family whose logits are divided
    by a config value (Granite's logits_scaling) gets its hidden states divided by it (and the
    head's bias, if any), which is the same division of the logits."""
    sig = inspect.signature(original)
    fam = TABLE.get(model_type)
    scale_attr = fam.logits_scaling if fam is not None else None
    flce_loss = _causal_lm_loss(model)
    softcap = getattr(model.config, "final_logit_softcapping", None)
    moe = "output_router_logits" in sig.parameters
    var_kw = next((n for n, p in sig.parameters.items() if p.kind is p.VAR_KEYWORD), None)
    model_ref = weakref.ref(model)

    def forward(*args, **kwargs):
        model = model_ref()
        skip_logits = kwargs.pop("skip_logits", None)
        bound = sig.bind(*args, **kwargs)
        a = bound.arguments
        extra = dict(a.get(var_kw, {})) if var_kw else {}
        labels, shift_labels = a.get("labels"), extra.get("shift_labels")
        if skip_logits is None:
            skip_logits = model.training
        head = model.lm_head
        if (not skip_logits or labels is None or type(head) is not nn.Linear or flce_loss is None
                or model.loss_function is not flce_loss):
            return original(*args, **kwargs)
        return_dict = extra.pop("return_dict", None)
        if return_dict is None:
            return_dict = getattr(model.config, "return_dict", True)
        ignore_index = extra.get("ignore_index", -100)
        num_items = extra.get("num_items_in_batch")
        base_args = {k: v for k, v in a.items() if k not in ("labels", "logits_to_keep", var_kw)}
        if moe:
            orl = base_args.get("output_router_logits")
            base_args["output_router_logits"] = (model.config.output_router_logits
                                                 if orl is None else orl)
        outputs = model.base_model(**base_args, **extra)
        hidden = _slice(outputs.last_hidden_state, a.get("logits_to_keep", 0))
        bias = head.bias
        scale = getattr(model.config, scale_attr, None) if scale_attr else None
        if scale is not None and scale != 1:
            hidden = hidden / scale
            bias = None if bias is None else bias / scale
        if shift_labels is None:
            shift_labels = nn.functional.pad(labels, (0, 1), value=ignore_index)[..., 1:]
        t = shift_labels.reshape(-1).to(hidden.device)
        loss_fn = knn.FusedLinearCrossEntropyLoss(
            ignore_index=ignore_index, reduction="sum" if num_items is not None else "mean",
            softcap=softcap)
        loss = loss_fn(head.weight, hidden.reshape(-1, hidden.shape[-1]), t, bias)
        if num_items is not None:
            loss = loss / (num_items.to(loss.device) if torch.is_tensor(num_items) else num_items)
        from transformers import modeling_outputs as mo
        if moe:
            aux_loss = None
            if base_args["output_router_logits"]:
                lb = modeling(model_type).load_balancing_loss_func
                aux_loss = lb(outputs.router_logits, model.num_experts, model.num_experts_per_tok,
                              a.get("attention_mask"))
                loss = loss + model.router_aux_loss_coef * aux_loss.to(loss.device)
            out = mo.MoeCausalLMOutputWithPast(
                loss=loss, aux_loss=aux_loss, logits=None,
                past_key_values=outputs.past_key_values, hidden_states=outputs.hidden_states,
                attentions=outputs.attentions, router_logits=outputs.router_logits)
        else:
            out = mo.CausalLMOutputWithPast(
                loss=loss, logits=None, past_key_values=outputs.past_key_values,
                hidden_states=outputs.hidden_states, attentions=outputs.attentions)
        return out if return_dict else out.to_tuple()

    forward.__signature__ = sig
    forward.__doc__ = original.__doc__
    forward._kite_lm_forward = True
    return forward
