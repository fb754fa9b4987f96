"""Training through kite.torch.patch: tiny random-init transformers models (built from configs,
no downloads) in f32, once plain and once patched with the default kite.torch.patch(model) in
training mode (norms, gated MLP, rotary and attention through kite's forward and backward ops,
the loss of forward(labels=...) through kite's fused linear cross-entropy; the MoE router and
experts left to torch, which patch reports). 20 AdamW steps: each step's loss within 1e-4
relative of the plain model's, and the step-1 gradient of every parameter within 1e-4 (max
error relative to the largest magnitude); the same with a PEFT LoRA model (when peft is
installed), with gradient checkpointing, and after save_pretrained -> from_pretrained. Also:
unpatch, the no-gradient guards of the kite modules patch installs on an eval model, the
causal-LM loss wiring (shift, ignore_index, num_items_in_batch, logits None in training), and a
family patch has no entry for (partial mode: norms and rotary only) training the same."""
import gc
import os
import types
import weakref

import pytest
import torch
import torch.nn.functional as F
from test_models import FAMILIES, _arcee
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import kite
import kite.torch
import kite.torch.nn as knn

transformers = pytest.importorskip("transformers")

STEPS = 20
TOL = 1e-4


@pytest.fixture(autouse=True)
def _one_thread_and_restore_rotary():
    # the host's 2 cores are shared: torch's 2-thread kernels on these tiny shapes slow down 50x
    # when the other core is busy
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
    for f in list(FAMILIES) + ["arcee"]:  # arcee: the partial mode's family
        kite.torch.patch_module.unpatch_rotary(f)


def _model(family, train=True):
    torch.manual_seed(0)
    cfg = FAMILIES[family]()
    cfg._attn_implementation = "eager"
    m = transformers.AutoModelForCausalLM.from_config(cfg).float()
    return m.train(train)


def _batch():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 256, (2, 24), generator=g)
    labels = ids.clone()
    labels[0, :3] = -100  # a prompt not trained on
    return ids, labels


def _train(model, steps=STEPS, **kw):
    """(losses, step-1 gradients by parameter name) of AdamW steps on forward(labels=...)."""
    ids, labels = _batch()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    losses, grads = [], None
    for i in range(steps):
        out = model(input_ids=ids, labels=labels, **kw)
        opt.zero_grad()
        out.loss.backward()
        if i == 0:
            grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        opt.step()
        losses.append(out.loss.item())
    return losses, grads


def _rel(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp(min=1e-30)).item()


def _assert_same_training(plain, kite_run, what):
    (lp, gp), (lk, gk) = plain, kite_run
    assert lp[-1] < lp[0], f"{what}: the plain model does not train"
    for i, (a, b) in enumerate(zip(lp, lk)):
        assert abs(a - b) / abs(a) <= TOL, f"{what}: step {i + 1}: loss {b} (kite) vs {a} (torch)"
    assert set(gp) == set(gk), f"{what}: parameters with a gradient differ: {set(gp) ^ set(gk)}"
    for n in gp:
        err = _rel(gk[n], gp[n])
        assert err <= TOL, f"{what}: step-1 gradient of {n}: relative error {err:.3g}"
    return max(abs(a - b) / abs(a) for a, b in zip(lp, lk)), max(_rel(gk[n], gp[n]) for n in gp)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_default_patch_trains_like_torch(family):
    plain = _model(family)
    patched = _model(family)
    keys = list(patched.state_dict())
    done = kite.torch.patch(patched)
    kinds = "\n".join(done)
    norm = "-> LayerNorm" if family == "gpt_neox" else "-> RMSNorm"
    assert norm in kinds and "-> rope" in kinds and "fused linear cross-entropy" in kinds
    assert "kite sdpa" in kinds and "attention: left to torch" not in kinds
    assert "-> fused_moe" not in kinds and "-> topk_gating" not in kinds
    if family in ("mixtral", "qwen2_moe"):
        assert "Experts left to torch" in kinds and "TopKRouter left to torch" in kinds
    if family == "gpt_neox":
        assert "-> MLP(gelu)" in kinds
    elif family != "mixtral":
        assert "-> GatedMLP" in kinds
    assert list(patched.state_dict()) == keys  # the model's own parameters, no copies
    ids, labels = _batch()
    assert patched(input_ids=ids, labels=labels).logits is None  # no [tokens, vocab] logits
    a, b = _train(plain), _train(patched)
    assert set(b[1]) == {n for n, p in patched.named_parameters() if p.requires_grad}
    loss_err, grad_err = _assert_same_training(a, b, family)
    print(f"{family}: max loss rel diff {loss_err:.2e}, max step-1 grad rel err {grad_err:.2e}")


def test_partial_mode_trains_like_torch():
    """A family patch has no entry for (Arcee): norms and rotary through kite, the rest torch's;
    the same training check."""
    plain, patched = _arcee().train(), _arcee().train()
    report = kite.torch.patch(patched)
    assert report.partial and "-> RMSNorm" in "\n".join(report)
    assert "attention" in report.by_type and not report.by_type["attention"]["replaced"]
    a, b = _train(plain), _train(patched)
    loss_err, grad_err = _assert_same_training(a, b, "arcee (partial mode)")
    print(f"arcee (partial mode): {loss_err:.2e} / {grad_err:.2e}")


@pytest.mark.parametrize("reentrant", [True, False], ids=["reentrant", "non_reentrant"])
def test_gradient_checkpointing_trains_like_torch(reentrant):
    plain, patched = _model("llama"), _model("llama")
    kw = {"use_reentrant": reentrant}
    for m in (plain, patched):
        if hasattr(m, "activation_checkpointing_enable"):
            m.activation_checkpointing_enable(kw)
        else:
            m.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kw)
        m.config.use_cache = False
    kite.torch.patch(patched)
    loss_err, grad_err = _assert_same_training(_train(plain), _train(patched), "checkpointing")
    print(f"llama + gradient checkpointing (reentrant={reentrant}): "
          f"{loss_err:.2e} / {grad_err:.2e}")


def test_num_items_in_batch_and_shift_labels_as_transformers():
    plain, patched = _model("qwen2"), _model("qwen2")
    kite.torch.patch(patched)
    ids, labels = _batch()
    n = torch.tensor(17)
    for kw in (dict(labels=labels, num_items_in_batch=n),
               dict(labels=ids, shift_labels=torch.nn.functional.pad(labels, (0, 1),
                                                                     value=-100)[:, 1:]
                                                            .contiguous()),
               dict(labels=labels, return_dict=False)):
        want = plain(input_ids=ids, **kw)
        got = patched(input_ids=ids, **kw)
        want_loss = want[0] if isinstance(want, tuple) else want.loss
        got_loss = got[0] if isinstance(got, tuple) else got.loss
        torch.testing.assert_close(got_loss, want_loss, rtol=1e-5, atol=1e-6)
    patched.eval()  # evaluation: the model's own forward, logits kept
    with torch.no_grad():
        out = patched(input_ids=ids, labels=labels)
        ref = plain.eval()(input_ids=ids, labels=labels)
    assert out.logits is not None
    torch.testing.assert_close(out.loss, ref.loss, rtol=1e-5, atol=1e-6)


def test_moe_aux_loss_as_transformers():
    plain, patched = _model("mixtral"), _model("mixtral")
    kite.torch.patch(patched)
    ids, labels = _batch()
    want = plain(input_ids=ids, labels=labels, output_router_logits=True)
    got = patched(input_ids=ids, labels=labels, output_router_logits=True)
    assert got.logits is None and got.aux_loss is not None
    torch.testing.assert_close(got.aux_loss, want.aux_loss, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got.loss, want.loss, rtol=1e-5, atol=1e-6)


def test_save_pretrained_from_pretrained(tmp_path):
    m = _model("llama")
    keys = list(m.state_dict())
    kite.torch.patch(m)
    _train(m, steps=3)
    m.eval()
    ids, _ = _batch()
    with torch.no_grad():
        want = m(ids).logits
    m.save_pretrained(tmp_path)
    with open(os.path.join(tmp_path, "config.json")) as f:
        assert '"kite"' not in f.read()  # the attention implementation is not saved
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path,
                                                               attn_implementation="eager")
    assert list(loaded.state_dict()) == keys
    for (n, p), (_, q) in zip(m.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(p, q), f"{n} reloaded differs"
    kite.torch.patch(loaded.train())  # patched as m was (in training mode), then evaluated
    loaded.eval()
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, want)
    kite.torch.unpatch(loaded)
    kite.torch.unpatch(m)
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, m(ids).logits)


def _lora(model, seed):
    peft = pytest.importorskip("peft")
    cfg = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0,
                          target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                          "up_proj", "down_proj"])
    pm = peft.get_peft_model(model, cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # non-zero B: the adapters change the outputs from the first step
        for n, p in pm.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    return pm


@pytest.mark.parametrize("order", ["peft_then_patch", "patch_then_peft"])
def test_lora_trains_like_torch(order):
    pytest.importorskip("peft")
    plain = _lora(_model("llama"), 3)
    if order == "peft_then_patch":
        patched = _lora(_model("llama"), 3)
        done = kite.torch.patch(patched)
    else:
        base = _model("llama")
        done = kite.torch.patch(base)
        patched = _lora(base, 3)
    assert any("GatedMLP" in d for d in done)
    trainable = {n for n, p in patched.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    a, b = _train(plain), _train(patched)
    assert set(b[1]) == trainable  # adapters train, the base stays frozen
    loss_err, grad_err = _assert_same_training(a, b, f"LoRA {order}")
    print(f"llama + LoRA ({order}): {loss_err:.2e} / {grad_err:.2e}")
    # the gate/up adapters apply inside kite's GatedMLP: dropping them changes the outputs
    ids, _ = _batch()
    with torch.no_grad():
        with_adapters = patched(input_ids=ids).logits
        with patched.disable_adapter():
            without = patched(input_ids=ids).logits
    assert not torch.allclose(with_adapters, without)


@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "left_padded"])
@pytest.mark.parametrize("family", ["llama", "gemma2", "mixtral"])
def test_eval_patch_with_grad_falls_back(family, padded):
    """An eval model whose parameters require grad (as from_pretrained leaves them): kite's
    attention (and MoE) are installed, and a call that needs a gradient runs torch's."""
    plain, patched = _model(family, train=False), _model(family, train=False)
    done = "\n".join(kite.torch.patch(patched))
    assert "kite sdpa" in done
    if family == "mixtral":
        assert "-> fused_moe (" in done and "-> topk_gating" in done
    ids, labels = _batch()
    mask = torch.ones_like(ids)
    if padded:
        mask[1, :5] = 0
        # position 4 (padding) sees no key: what attention gives there is the implementation's
        # own (eager: the mean of every value, kite: zeros), so its next-token label is ignored
        labels = labels.masked_fill(torch.nn.functional.pad(mask, (1, 0))[:, :-1] == 0, -100)
    with torch.no_grad():
        want, got = plain(ids, attention_mask=mask).logits, patched(ids, attention_mask=mask).logits
        valid = mask.bool()
        torch.testing.assert_close(got[valid], want[valid], rtol=1e-4, atol=1e-4)
    plain(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
    patched(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
    for (n, p), (_, q) in zip(plain.named_parameters(), patched.named_parameters()):
        assert q.grad is not None, f"{n}: no gradient"
        assert _rel(q.grad, p.grad) <= TOL, f"{n}: {_rel(q.grad, p.grad):.3g}"


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("family", ["llama", "qwen2_moe", "gpt_neox", "phi3"])
def test_unpatch_restores(family, train):
    gc.collect()  # patched models of earlier tests still hold the family's kite rope
    m = _model(family, train=train)
    ml = kite.torch.patch_module._modeling(family)
    rotary_before = ml.apply_rotary_pos_emb
    types = {n: type(x) for n, x in m.named_modules()}
    impl = m.config._attn_implementation
    ids, _ = _batch()
    with torch.no_grad():
        want = m(ids).logits
    kite.torch.patch(m)
    assert {n: type(x) for n, x in m.named_modules()} != types
    assert "forward" in m.__dict__
    restored = kite.torch.unpatch(m)
    assert restored
    assert {n: type(x) for n, x in m.named_modules()} == types
    assert m.config._attn_implementation == impl
    assert "forward" not in m.__dict__ and "_kite_patch" not in m.__dict__
    assert ml.apply_rotary_pos_emb is rotary_before
    with torch.no_grad():
        assert torch.equal(m(ids).logits, want)
    assert kite.torch.unpatch(m) == []  # twice: nothing left to undo


def test_attention_mode_is_checked_set_and_undone():
    m = _model("llama", train=True)
    with pytest.raises(kite.InvalidArgument, match="attention="):
        kite.torch.patch(m, attention="flash")
    attn = [x for x in m.modules() if type(x).__name__.endswith("Attention")]
    assert attn
    report = kite.torch.patch(m)  # auto: kite's sdpa here (CPU), torch's SDPA for CUDA training
    assert all(x._kite_attention == "auto" for x in attn)
    assert any("CUDA" in r and "scaled_dot_product_attention" in r for r in report)
    kite.torch.unpatch(m)
    assert not any("_kite_attention" in x.__dict__ for x in attn)
    kite.torch.patch(m, attention="kite")
    assert all(x._kite_attention == "kite" for x in attn)
    kite.torch.unpatch(m)


@pytest.mark.parametrize("family", ["llama", "gemma2"])
def test_auto_attention_torch_path_trains_like_torch(family, monkeypatch):
    # the path patch(attention="auto") takes for a call on CUDA that needs a gradient, forced here
    # on the CPU: transformers' own SDPA attention (or the explicit softcap form for Gemma 2)
    monkeypatch.setattr(kite.torch.patch_module, "_torch_backward", lambda *a: True)
    ref, m = _model(family, train=True), _model(family, train=True)
    kite.torch.patch(m)
    ids, labels = _batch()
    ref(ids, labels=labels).loss.backward()
    m(ids, labels=labels).loss.backward()
    for (n, p), q in zip(ref.named_parameters(), m.parameters()):
        assert _rel(q.grad, p.grad) <= TOL, f"{n}: {_rel(q.grad, p.grad):.3g}"


def test_unpatch_keeps_adapters_added_after_patch():
    peft = pytest.importorskip("peft")
    base = _model("llama")
    kite.torch.patch(base)
    pm = _lora(base, 5)
    ids, _ = _batch()
    with torch.no_grad():
        want = pm(input_ids=ids).logits
    kite.torch.unpatch(base)
    assert isinstance(base.model.layers[0].mlp.gate_proj, peft.tuners.lora.LoraLayer)
    with torch.no_grad():
        torch.testing.assert_close(pm(input_ids=ids).logits, want, rtol=1e-5, atol=1e-5)


def test_loss_only_recipe_matches():
    """The narrow recipe: norms and rotary through kite, kite's CrossEntropyLoss on logits."""
    def run(patched):
        m = _model("llama")
        if patched:
            kite.torch.patch(m, mlp=False, attention=False, moe=False, loss=False)
            loss_fn = knn.CrossEntropyLoss()
        else:
            loss_fn = torch.nn.CrossEntropyLoss()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        ids, _ = _batch()
        losses = []
        for _ in range(6):
            logits = m(input_ids=ids).logits
            loss = loss_fn(logits[:, :-1].reshape(-1, 256), ids[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses
    for i, (a, b) in enumerate(zip(run(False), run(True))):
        assert abs(a - b) / abs(a) <= TOL, f"step {i}: loss {b} (kite) vs {a} (torch)"


def test_torch_compile_of_the_patched_model_trains_like_torch():
    def one_layer():
        torch.manual_seed(0)
        cfg = FAMILIES["llama"]()
        cfg.num_hidden_layers = 1
        cfg._attn_implementation = "eager"
        return transformers.AutoModelForCausalLM.from_config(cfg).float().train()
    torch._dynamo.reset()
    plain, patched = one_layer(), one_layer()
    kite.torch.patch(patched)
    compiled = torch.compile(patched)
    ids, labels = _batch()
    want = plain(input_ids=ids, labels=labels).loss
    got = compiled(input_ids=ids, labels=labels).loss
    want.backward()
    got.backward()
    assert abs(got.item() - want.item()) <= TOL * abs(want.item())
    for (n, p), (_, q) in zip(plain.named_parameters(), patched.named_parameters()):
        assert _rel(q.grad, p.grad) <= TOL, f"{n}: {_rel(q.grad, p.grad):.3g}"


@pytest.mark.parametrize("family", ["llama", "gemma2"])
def test_autocast_bf16_step_close_to_torch(family):
    """Under torch.autocast(bf16) (f32 parameters): the patched model's loss and step-1 gradients
    stay within bf16 rounding of the plain model's (Gemma 2's norms of bf16 activations with f32
    weights run promoted to f32)."""
    plain, patched = _model(family), _model(family)
    kite.torch.patch(patched)
    ids, labels = _batch()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = plain(input_ids=ids, labels=labels).loss
        got = patched(input_ids=ids, labels=labels).loss
    assert got.dtype == want.dtype == torch.float32
    want.backward()
    got.backward()
    assert abs(got.item() - want.item()) <= 1e-3 * abs(want.item())
    for (n, p), (_, q) in zip(plain.named_parameters(), patched.named_parameters()):
        assert q.grad.dtype == torch.float32
        assert _rel(q.grad, p.grad) <= 5e-2, f"{n}: {_rel(q.grad, p.grad):.3g}"


@pytest.mark.parametrize("opts", [dict(), dict(softcap=20.0), dict(window=3), dict(causal=False),
                                  dict(mask="bool"), dict(mask="bool", softcap=20.0),
                                  dict(mask="float", window=4)])
def test_torch_attention_is_kites_sdpa(opts):
    """The attention a patched eval model runs where a gradient is wanted computes what kite's
    sdpa computes (GQA, causal alignment, masks with fully masked rows, softcap, window)."""
    g = torch.Generator().manual_seed(2)
    q = torch.randn(2, 4, 5, 16, generator=g)
    k, v = torch.randn(2, 2, 7, 16, generator=g), torch.randn(2, 2, 7, 16, generator=g)
    mask = None
    if opts.get("mask") == "bool":
        mask = torch.rand(2, 1, 5, 7, generator=g) > 0.3
        mask[1, :, 0] = False  # a row that sees nothing
    elif opts.get("mask") == "float":
        mask = torch.randn(2, 1, 5, 7, generator=g)
    causal, window, cap = opts.get("causal", True), opts.get("window", -1), opts.get("softcap", 0.0)
    want = torch.ops.kite.sdpa(q, k, v, mask, 0.25, cap, window, 0, int(causal and mask is None))
    got = kite.torch.patch_module._torch_attention(q, k, v, mask, 0.25, cap, window, causal, 0.0)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_packed_sequences_run_sdpa_varlen():
    """A packed batch (one row of two sequences, position_ids restarting, transformers'
    cu_seq_lens_* kwargs as its flattening collator passes them) through the patched model:
    kite's sdpa_varlen, the same logits and parameter gradients as the plain model run on each
    sequence alone."""
    plain, patched = _model("llama"), _model("llama")
    kite.torch.patch(patched)
    g = torch.Generator().manual_seed(5)
    lens = [10, 14]
    seqs = [torch.randint(0, 256, (1, n), generator=g) for n in lens]
    ids = torch.cat(seqs, 1)
    pos = torch.cat([torch.arange(n) for n in lens])[None]
    cu = torch.tensor([0, lens[0], sum(lens)], dtype=torch.int32)
    kw = dict(position_ids=pos, cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=max(lens),
              max_length_k=max(lens))
    calls = []
    varlen = torch.ops.kite.sdpa_varlen
    try:
        kite.torch.patch_module._ops = types.SimpleNamespace(
            sdpa=torch.ops.kite.sdpa, sdpa_varlen=lambda *a: calls.append(1) or varlen(*a))
        got = patched(input_ids=ids, **kw).logits
    finally:
        kite.torch.patch_module._ops = torch.ops.kite
    assert calls, "the packed batch did not reach sdpa_varlen"
    want = torch.cat([plain(input_ids=s).logits for s in seqs], 1)
    assert _rel(got, want) <= TOL
    got.float().square().mean().backward()
    torch.cat([plain(input_ids=s).logits for s in seqs], 1).float().square().mean().backward()
    for (n, p), (_, q) in zip(plain.named_parameters(), patched.named_parameters()):
        assert _rel(q.grad, p.grad) <= TOL, f"{n}: {_rel(q.grad, p.grad):.3g}"


class _LiveStorage(TorchDispatchMode):
    """The most bytes of tensor storage alive at once among the outputs of the ops run under it
    (aten's and kite's): each new storage counted when an op returns it, uncounted when freed."""

    def __init__(self):
        super().__init__()
        self.live, self.peak, self.seen = 0, 0, set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            st = t.untyped_storage()
            key, n = st.data_ptr(), st.nbytes()
            if n == 0 or key in self.seen:
                continue
            self.seen.add(key)
            self.live += n
            self.peak = max(self.peak, self.live)
            weakref.finalize(st, self._gone, key, n)
        return out

    def _gone(self, key, n):
        self.live -= n
        self.seen.discard(key)


def test_gated_mlp_training_holds_less_than_torch():
    """GatedMLP's training step (forward + backward) keeps fewer [T, I] buffers alive at once
    than the model's own MLP and than a concatenation of gate and up: gate's output goes into the
    [T, 2I] buffer before up_proj runs, and the backward writes its gradient over that buffer."""
    torch.manual_seed(0)
    T, H, I = 256, 64, 512
    gate, up, down = (torch.nn.Linear(H, I, bias=False), torch.nn.Linear(H, I, bias=False),
                      torch.nn.Linear(I, H, bias=False))
    mlp = knn.GatedMLP(gate, up, down, "silu")
    x0 = torch.randn(T, H)
    ways = {"kite": mlp,
            "torch": lambda x: down(F.silu(gate(x)) * up(x)),
            "cat": lambda x: down(torch.ops.kite.silu_and_mul(torch.cat((gate(x), up(x)), -1)))}
    peak, grads = {}, {}
    for name, fn in ways.items():
        for p in (gate.weight, up.weight, down.weight):
            p.grad = None
        x = x0.clone().requires_grad_(True)
        with _LiveStorage() as live:
            fn(x).sum().backward()
        peak[name] = live.peak
        grads[name] = (x.grad, gate.weight.grad, up.weight.grad, down.weight.grad)
    unit = T * I * 4
    assert peak["kite"] <= peak["cat"] - unit, peak
    assert peak["kite"] < peak["torch"], peak
    for g, w in zip(grads["kite"], grads["torch"]):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
