"""`kite run --tokenize` against PyPI's `tokenizers` and `sentencepiece`, token for token: for
each pre-tokenizer family a byte-level BPE vocabulary is trained here (engine_vocab.py) and
written into a GGUF with its tokenizer.ggml.pre name, and SentencePiece vocabularies with and
without the space prefix; the texts cover scripts, CJK, emoji, code, whitespace runs with CR LF,
digit runs and contractions."""
import os

import pytest

import engine_vocab as ev

TEXTS = ev.FIXED + ev.corpus(200, 2024)


def _have_cli():
    return os.path.exists(ev.kite_binary())


pytestmark = pytest.mark.skipif(not _have_cli(), reason="the kite command is not built")


@pytest.fixture(scope="module", params=sorted(ev.FAMILIES))
def family(request, tmp_path_factory):
    pre = request.param
    tok = ev.train(pre)
    path = str(tmp_path_factory.mktemp("vocab") / (pre + ".gguf"))
    ev.write_gguf(tok, pre, path)
    return pre, tok, path


def test_tokens_match(family):
    pre, tok, path = family
    bad = []
    for text in TEXTS:
        want = tok.encode(text, add_special_tokens=False).ids
        got = ev.kite_tokenize(path, text)
        if got != want:
            bad.append((text, want, got))
    assert not bad, "%s: %d of %d texts differ, first %r:\n want %s\n got  %s" % (
        pre, len(bad), len(TEXTS), bad[0][0], bad[0][1], bad[0][2])


def test_vocabulary_is_exercised(family):
    # the merges matter: most words of the corpus become fewer tokens than bytes
    pre, tok, path = family
    text = ev.FIXED[1]
    assert len(ev.kite_tokenize(path, text)) < len(text.encode()) * 2 // 3


@pytest.mark.parametrize("space_prefix", [True, False], ids=["llama2-phi3", "gemma"])
def test_sentencepiece_tokens_match(space_prefix, tmp_path):
    sp = ev.train_spm(space_prefix)
    path = str(tmp_path / "spm.gguf")
    ev.write_spm_gguf(sp, space_prefix, path)
    # texts without special tokens: after one, kite (as llama.cpp) starts the next text with the
    # space prefix again, where sentencepiece, which knows no special tokens, does not
    texts = [t for t in TEXTS if "<|" not in t]
    bad = [(t, sp.encode(t), ev.kite_tokenize(path, t)) for t in texts]
    bad = [b for b in bad if b[1] != b[2]]
    assert not bad, "%d of %d texts differ, first %r:\n want %s\n got  %s" % (
        len(bad), len(texts), bad[0][0], bad[0][1], bad[0][2])


def test_unknown_pre_is_an_error(tmp_path):
    tok = ev.train("gpt-2")
    path = str(tmp_path / "unknown.gguf")
    ev.write_gguf(tok, "no-such-split", path)
    r = __import__("subprocess").run([ev.kite_binary(), "run", "--model", path, "--tokenize", "a"],
                                     capture_output=True, text=True)
    assert r.returncode != 0
    assert "pre-tokenizer 'no-such-split'" in r.stderr
