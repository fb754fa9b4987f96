"""Training through kite: a tiny random-init transformers Llama (built from a config, no
downloads) trained a few AdamW steps in f32, once plain and once kite.torch.patch'ed (norms and
rope through kite's forward and backward ops; attention and the MLP stay torch's, as kite has no
backward for sdpa) with kite's cross-entropy as the loss: the two loss curves agree to 1e-4."""
import pytest
import torch

import kite.torch
import kite.torch.nn as knn

transformers = pytest.importorskip("transformers")


def _train(patched, steps=6):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=64)
    cfg._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(cfg).float().train()
    if patched:
        done = kite.torch.patch(model, mlp=False, attention=False, moe=False)
        assert any("RMSNorm" in d for d in done) and any("rope" in d for d in done)
        loss_fn = knn.CrossEntropyLoss()
    else:
        loss_fn = torch.nn.CrossEntropyLoss()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 128, (2, 24), generator=g)
    losses = []
    for _ in range(steps):
        logits = model(input_ids=ids).logits
        loss = loss_fn(logits[:, :-1].reshape(-1, 128), ids[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_llama_loss_curve_matches():
    try:
        plain = _train(False)
        kite_run = _train(True)
    finally:
        kite.torch.patch_module.unpatch_rotary("llama")
    assert plain[-1] < plain[0]  # it trains
    for i, (a, b) in enumerate(zip(plain, kite_run)):
        assert abs(a - b) / abs(a) <= 1e-4, f"step {i}: loss {b} (kite) vs {a} (torch)"
