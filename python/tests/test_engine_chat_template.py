"""`kite run --chat-render` (the model's tokenizer.chat_template through kite's Jinja subset)
against transformers' rendering of the same template (render_jinja_template, what
apply_chat_template(..., add_generation_prompt=True, tokenize=False) runs), on conversations
with and without a system message, several turns, and the texts templates trim or search."""
import json
import os
import subprocess

import pytest
from transformers.utils.chat_template_utils import render_jinja_template

import chat_templates as ct
import engine_vocab as ev

pytestmark = pytest.mark.skipif(not os.path.exists(ev.kite_binary()),
                                reason="the kite command is not built")

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse.  "},
     {"role": "user", "content": "  What is 2+2?\n"}],
    [{"role": "system", "content": "Sys"}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello, how can I help?"},
     {"role": "user", "content": "Tell me a joke about caf\u00e9s \U0001f600 and \"quotes\"."}],
    [{"role": "user", "content": "first"},
     {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nanswer one"},
     {"role": "user", "content": "stop here"}, {"role": "assistant", "content": "ok"},
     {"role": "user", "content": "again a banana\r\nwith\ttabs"}],
]


@pytest.fixture(scope="module")
def vocab():
    return ev.train("qwen2")


def kite_render(tmp_path, model, conv, *flags):
    path = tmp_path / "conv.json"
    path.write_text(json.dumps(conv), encoding="utf-8")
    return subprocess.run([ev.kite_binary(), "run", "--model", model, "--chat-render", str(path),
                           *flags], capture_output=True)


def reference(template, conv, **kw):
    try:
        return render_jinja_template([conv], chat_template=template, add_generation_prompt=True,
                                     bos_token="<s>", eos_token="</s>", **kw)[0][0], None
    except Exception as e:  # the template's raise_exception
        return None, str(e)


@pytest.mark.parametrize("family", sorted(ct.TEMPLATES))
def test_render_matches_transformers(family, vocab, tmp_path):
    model = str(tmp_path / "model.gguf")
    ev.write_gguf(vocab, "qwen2", model, chat_template=ct.TEMPLATES[family])
    cases = 0
    for i, conv in enumerate(CONVERSATIONS):
        # kite passes enable_thinking only as false (--no-think), or not at all
        for think in ([None, False] if family == "qwen3" else [None]):
            want, why = reference(ct.TEMPLATES[family], conv,
                                  **({} if think is None else {"enable_thinking": think}))
            r = kite_render(tmp_path, model, conv, *(["--no-think"] if think is False else []))
            if why is not None:
                # a conversation the template refuses: kite refuses it with the template's text
                assert r.returncode != 0 and why in r.stderr.decode(), (family, i, r.stderr)
                continue
            assert r.returncode == 0, (family, i, r.stderr.decode())
            assert r.stdout.decode() == want, (family, i)
            cases += 1
    assert cases >= 2


def test_no_template_is_chatml(vocab, tmp_path):
    model = str(tmp_path / "plain.gguf")
    ev.write_gguf(vocab, "qwen2", model)
    r = kite_render(tmp_path, model, CONVERSATIONS[2])
    assert r.returncode == 0
    assert "no tokenizer.chat_template in the file" in r.stderr.decode()
    want = "".join("<|im_start|>%s\n%s<|im_end|>\n" % (m["role"], m["content"])
                   for m in CONVERSATIONS[2]) + "<|im_start|>assistant\n"
    assert r.stdout.decode() == want


@pytest.mark.parametrize("template, message", [
    ("{% for m in messages %}{{ m.content | nosuchfilter }}{% endfor %}",
     "filter 'nosuchfilter' not supported"),
    ("{% if messages %}never closed", "missing {% endif %}"),
    ("{{ 1 / 0 }}", "division by zero"),
    ("{{ raise_exception('no ' ~ messages[0].role ~ ' here') }}", "no user here"),
    ("{% set m = messages[0] %}{% set m.role = 'x' %}", "only of a namespace"),
])
def test_template_errors_are_named(template, message, vocab, tmp_path):
    model = str(tmp_path / "bad.gguf")
    ev.write_gguf(vocab, "qwen2", model, chat_template=template)
    r = kite_render(tmp_path, model, CONVERSATIONS[0])
    assert r.returncode != 0
    assert message in r.stderr.decode()


def test_chat_stops_on_the_templates_error(vocab, tmp_path):
    # --chat renders before the model loads: the template's own message, and nothing after it
    model = str(tmp_path / "raise.gguf")
    ev.write_gguf(vocab, "qwen2", model, chat_template="{{ raise_exception('no chat here') }}")
    r = subprocess.run([ev.kite_binary(), "run", "--model", model, "--chat", "hi"],
                       capture_output=True, text=True)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == ["kite run: chat template: no chat here"]
