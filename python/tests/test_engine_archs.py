"""`kite run` on tiny random-init models of each architecture it runs (tiny_gguf.py: written from
transformers configs to GGUF, no download): its greedy tokens (f32 weights, CPU) against the
same transformers model run in float64, step by step (argmax of the full sequence's last logits).

Near-ties: a random-init model can have two logits within f32 rounding of each other, where
kite's f32 forward may pick either. The float64 reference records each step's top-2 margin;
the tokens must agree up to the first step whose margin is below MARGIN (past it the sequences
may part legitimately), and the seeds and prompts below keep that point at or past MIN_CHECKED
tokens, so each test checks at least that many.
"""
import os
import shutil
import subprocess

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")

import kite  # noqa: E402
import tiny_gguf  # noqa: E402

N_NEW = 16
MARGIN = 1e-4
MIN_CHECKED = 12
PROMPT = "hello world, hello kite"


def _kite_cli():
    here = os.path.dirname(kite.__file__)  # <build>/python/kite
    path = os.path.join(here, "..", "..", "bin", "kite")
    if not os.path.exists(path):
        path = shutil.which("kite")
    if not path:
        pytest.skip("the kite command is not built next to kite._C")
    return path


def _run(cli, *args):
    r = subprocess.run([cli, "run", *args], capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout, r.stderr


def _reference(m, ids, n_new):
    """float64 greedy tokens and each step's top-2 logit margin."""
    m = m.double()
    seq, out, margins = list(ids), [], []
    with torch.no_grad():
        for _ in range(n_new):
            logits = m(torch.tensor([seq])).logits[0, -1]
            top = torch.topk(logits, 2).values
            tok = int(torch.argmax(logits))
            out.append(tok)
            margins.append(float(top[0] - top[1]))
            seq.append(tok)
    return out, margins


def _written(name, tmp_path):
    """The kite command, config name's file written under tmp_path, its transformers model and
    PROMPT's ids as `kite run --tokenize` gives them."""
    cli = _kite_cli()
    path = str(tmp_path / f"{name}.gguf")
    m = tiny_gguf.write(name, path, seed=0)
    rc, out, err = _run(cli, "--model", path, "--tokenize", PROMPT)
    assert rc == 0, err
    return cli, path, m, [int(x) for x in out.split()]


_CASES = {}
# mixtures of experts: one rank only (refused under tensor parallelism)
MOE = {n for n in tiny_gguf.CONFIGS if n.startswith(("qwen3moe", "llama-mixtral"))}
# seeds other than 0 where seed 0's model repeats one token (its greedy run would check little)
SEEDS = {"qwen3moe": 1, "qwen3moe-q8": 1}


def _case(cli, name, tmp_path_factory):
    """The model file of `name`, the prompt's ids and the float64 tokens and margins, made once
    for every tp count."""
    if name not in _CASES:
        path = str(tmp_path_factory.mktemp(name) / f"{name}.gguf")
        m = tiny_gguf.write(name, path, seed=SEEDS.get(name, 0))
        rc, out, err = _run(cli, "--model", path, "--tokenize", PROMPT)
        assert rc == 0, err
        ids = [int(x) for x in out.split()]
        assert len(ids) > 4
        _CASES[name] = (path, *_reference(m, ids, N_NEW))
    return _CASES[name]


# tp 2: the model split over 2 tensor-parallel ranks (engine/tp.h), CPU ctxs in one process
@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("name", sorted(tiny_gguf.CONFIGS))
def test_greedy_tokens_match_float64(name, tp, tmp_path_factory):
    cli = _kite_cli()
    path, want, margins = _case(cli, name, tmp_path_factory)
    rc, out, err = _run(cli, "--model", path, "--prompt", PROMPT, "-n", str(N_NEW), "--tokens",
                        "--ignore-eos", "--weights", "f32", "--threads", "1", "--tp", str(tp))
    if tp > 1 and name in MOE:
        assert rc != 0 and "experts runs on one rank only" in err, err
        return
    assert rc == 0, err
    got = [int(x) for x in out.split()]
    assert len(got) == N_NEW
    clear = next((i for i, d in enumerate(margins) if d < MARGIN), N_NEW)
    assert clear >= MIN_CHECKED, f"{name}: float64 near-tie at step {clear}: {margins}"
    assert got[:clear] == want[:clear], \
        f"{name} tp {tp}: kite {got} float64 {want} margins {margins}"


def _sample_reference(m, ids, n_new, temperature, seed, repetition=1.0):
    """Tokens drawn from float64 logits: each step's logits (Gemma 2's final softcap applied by
    transformers unless the config drops it), then the repetition penalty over the prompt and
    the output (vLLM's, as kite_apply_penalties), go to kite_sample's float64 ref kernel with
    the seed and step `kite run` gives a sequence (the run's seed, the count of tokens so far)."""
    m = m.double()
    seq, out = list(ids), []
    with torch.no_grad():
        for step in range(n_new):
            logits = m(torch.tensor([seq])).logits[0, -1].clone()
            seen = torch.tensor(sorted(set(seq)))
            l = logits[seen]
            logits[seen] = torch.where(l > 0, l / repetition, l * repetition)
            with kite.kernels("sample=ref"):
                tok = kite.ops.sample(logits.float()[None], temperature=temperature,
                                      seeds=torch.tensor([seed]), steps=torch.tensor([step]))
            out.append(int(tok[0]))
            seq.append(out[-1])
    return out


@pytest.mark.parametrize("repetition", [1.0, 1.5])
def test_gemma2_sampling_applies_the_final_softcap(repetition, tmp_path):
    """Gemma 2's final logit softcap changes the sampled distribution (not the argmax): kite's
    sampled tokens with a fixed seed are those drawn from the float64 capped logits, and not
    those drawn from the uncapped ones. With a repetition penalty the reference caps first and
    penalizes the capped logits (transformers' and llama.cpp's order)."""
    cli, path, m, ids = _written("gemma2", tmp_path)
    seed, temperature = 7, 1.0
    rc, out, err = _run(cli, "--model", path, "--prompt", PROMPT, "-n", str(N_NEW), "--tokens",
                        "--ignore-eos", "--weights", "f32", "--threads", "1", "--temperature",
                        str(temperature), "--seed", str(seed), "--repeat-penalty",
                        str(repetition))
    assert rc == 0, err
    got = [int(x) for x in out.split()]
    want = _sample_reference(m, ids, N_NEW, temperature, seed, repetition)
    assert got == want, f"kite {got} float64 {want}"
    m.config.final_logit_softcapping = None
    uncapped = _sample_reference(m, ids, N_NEW, temperature, seed, repetition)
    assert uncapped != want, "the cap does not change this draw: the test would not see it"


S, F32, U32 = gguf.GGUFValueType.STRING, gguf.GGUFValueType.FLOAT32, gguf.GGUFValueType.UINT32


@pytest.mark.parametrize("arch,meta,extra,message", [
    # each required key missing, or present with another type, is named with the type wanted
    ("gemma2", {"gemma2.attention.sliding_window": None}, None,
     "gemma2.attention.sliding_window missing"),
    ("gemma2", {"gemma2.attention.sliding_window": ("6", S)}, None,
     "gemma2.attention.sliding_window is a string, expected an integer"),
    ("gemma2", {"gemma2.final_logit_softcapping": ("30", S)}, None,
     "gemma2.final_logit_softcapping is a string, expected a number"),
    ("gemma2", {"gemma2.attn_logit_softcapping": (-1.0, F32)}, None,
     "gemma2.attn_logit_softcapping -1"),
    ("gemma3", {"gemma3.rope.freq_base_swa": ("1e4", S)}, None,
     "gemma3.rope.freq_base_swa is a string, expected a number"),
    ("gemma3", {"gemma3.rope.scaling.type": ("yarn", S)}, None,
     "gemma3.rope.scaling.type 'yarn' not supported"),
    ("gemma3", {"gemma3.rope.scaling.type": (3, U32)}, None,
     "gemma3.rope.scaling.type is a u32, expected a string"),
    ("qwen3", {"qwen3.attention.key_length": ("32", S)}, None,
     "qwen3.attention.key_length is a string, expected an integer"),
    ("qwen3", {"qwen3.attention.value_length": (16, U32)}, None,
     "value_length 16 differs from key_length 32"),
    ("llama", {"llama.embedding_length": (64.0, F32)}, None,
     "llama.embedding_length is a f32, expected an integer"),
    ("phi3", None, {"rope_factors_long.weight": [1.0] * 4}, "LongRoPE"),
    # experts: how many a token uses is required and at most their count
    ("qwen3moe", {"qwen3moe.expert_used_count": None}, None,
     "metadata qwen3moe.expert_used_count missing"),
    ("qwen3moe", {"qwen3moe.expert_used_count": (5, U32)}, None,
     "qwen3moe.expert_used_count = 5 outside [1, 4]"),
    ("qwen3moe", {"qwen3moe.expert_feed_forward_length": (16, U32)}, None,
     "blk.0.ffn_gate_exps.weight is [64, 32, 4], expected [64, 16, 4]"),
    # a Mixtral file without its experts' tensors (the dense FFN's are not read)
    ("llama", {"llama.expert_count": (4, U32), "llama.expert_used_count": (2, U32)}, None,
     "tensor blk.0.ffn_gate_exps.weight missing"),
    ("qwen3", None, {"rope_freqs.weight": [1.0] * 3}, "rope_freqs.weight is not f32 [16]"),
])
def test_bad_metadata_is_refused(arch, meta, extra, message, tmp_path):
    cli = _kite_cli()
    path = str(tmp_path / f"{arch}.gguf")
    extra = {k: np.array(v, dtype=np.float32) for k, v in (extra or {}).items()}
    tiny_gguf.write(arch, path, seed=0, meta=meta, extra_tensors=extra)
    rc, _, err = _run(cli, "--model", path, "--prompt", PROMPT, "-n", "2")
    assert rc != 0
    assert message in err, err
