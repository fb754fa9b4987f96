"""Small vocabularies for the engine's tokenizer tests, built here without downloads: a byte-level
BPE trained with PyPI's `tokenizers` under each family's pre-tokenizer, or a SentencePiece BPE
model trained with PyPI's `sentencepiece` (Llama 2 / Phi-3 with a space prefix, Gemma without),
written into a GGUF file (PyPI's `gguf`) holding only the tokenizer.ggml.* metadata that
`kite run --tokenize` reads."""
import io
import json
import os
import random
import subprocess

import gguf
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

# The families' split expressions, as their tokenizer.json files write them
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<s>", "</s>"]


def _split(regex):
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


# tokenizer.ggml.pre -> (pre-tokenizer, whether the BPE model ignores merges for known words)
FAMILIES = {
    "qwen2": (lambda: _split(QWEN2_SPLIT), False),
    "llama-bpe": (lambda: _split(LLAMA3_SPLIT), True),
    "gpt-2": (lambda: pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), False),
    "smollm": (lambda: pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]), False),
}

_WORDS = ["hello", "World", "snake_case", "camelCase", "#include", "<stdio.h>", "int", "main()",
          "{", "}", "return", "0;", "café", "naïve", "über", "Straße", "你好", "世界",
          "こんにちは", "カタカナ", "한국어", "Δέλτα", "привет", "مرحبا", "😀", "🎉🎉", "👍🏽",
          "I'm", "you're", "they've", "we'll", "it's", "he'd", "DON'T", "'S", "'Re", "x=-42",
          "3.14159", "1234567", "2024-11-24", "0x1F", "a1b2c3", "١٢٣", "½", "²", "Ⅻ", "...",
          "!!!", "?!", "—", "«quoted»", "(paren)", "[1, 2]", "a.b.c", "path/to/file.py",
          "user@example.com", "$100", "50%", "#", "//", "/*", "*/", "->", "=>", "::", "&&"]
_SPACES = [" ", " ", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\n  ", "\r\n\r\n",
           "\u00a0", "\u3000", "\u2003", "    ", " \t "]


def corpus(n, seed):
    """n varied texts: words of many scripts, code, digit runs and contractions joined by runs of
    whitespace (CR LF among them); some start or end with spaces."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 12)):
            parts.append(rng.choice(_WORDS))
            parts.append(rng.choice(_SPACES))
        text = "".join(parts)
        if rng.random() < 0.5:
            text = text.rstrip()
        if rng.random() < 0.2:
            text = rng.choice(_SPACES) + text
        out.append(text)
    return out


FIXED = [
    "Hello world", "#include <stdio.h>\r\nint main() {\r\n    return 0;\r\n}\r\n",
    "snake_case_name = other_snake_case(42)", "def f(x):\n    return x**2  # square\n",
    "Numbers: 3.14159, 1234567, 2024-11-24, x=-42", "   leading and trailing   ",
    "I'm, you're, they've, we'll, it's, he'd; DON'T SHOUT, I'M", "a\r\n\r\n b \r\n\tc",
    "你好，世界！こんにちは 😀🎉 Δέλτα", "\u00a0non-breaking\u2003em-space\u3000ideographic",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n", "", " ", "\n",
    "12345678901234567890", "a  b   c    d", "x\n\n\ny", "'s 'S 'll 'LL 'x", "!!! ??? ...\n\n",
]


def train(pre, vocab_size=600):
    """A Tokenizer of the family `pre` (a FAMILIES key), trained on corpus texts."""
    make_pre, ignore_merges = FAMILIES[pre]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = make_pre()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus(400, 1) + FIXED, trainer=trainer)
    if ignore_merges:
        merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m)
                  for m in json.loads(tok.to_str())["model"]["merges"]]
        tok.model = models.BPE(tok.get_vocab(with_added_tokens=False), merges,
                               ignore_merges=True)
    return tok


def _hparams(w):
    """The llama.* keys every GGUF reader asks for before the vocabulary (llama.cpp's vocab-only
    load reads them too); no tensors follow."""
    w.add_context_length(256)
    w.add_embedding_length(64)
    w.add_block_count(1)
    w.add_feed_forward_length(128)
    w.add_head_count(4)
    w.add_layer_norm_rms_eps(1e-5)


def write_gguf(tok, pre, path, chat_template=None, bos="<s>", eos="</s>"):
    """tok's vocabulary, merges and special tokens as tokenizer.ggml.* metadata of a GGUF, with
    a tokenizer.chat_template when given."""
    spec = json.loads(tok.to_str())
    vocab = tok.get_vocab(with_added_tokens=True)
    tokens = [None] * len(vocab)
    for text, i in vocab.items():
        tokens[i] = text
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    special = {t["content"] for t in spec["added_tokens"]}
    w = gguf.GGUFWriter(path, "llama")
    _hparams(w)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL
                       for t in tokens])
    w.add_token_merges(merges)
    w.add_bos_token_id(vocab[bos])
    w.add_eos_token_id(vocab[eos])
    w.add_add_bos_token(False)
    if chat_template is not None:
        w.add_chat_template(chat_template)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def train_spm(space_prefix, vocab_size=700):
    """A SentencePiece BPE model (byte fallback, no normalization) trained on corpus texts."""
    import sentencepiece as spm
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([t for t in corpus(400, 1) + FIXED if t.strip()]),
        model_writer=buf, vocab_size=vocab_size, model_type="bpe", byte_fallback=True,
        normalization_rule_name="identity", add_dummy_prefix=space_prefix,
        remove_extra_whitespaces=False, split_digits=False, character_coverage=1.0,
        allow_whitespace_only_pieces=True, minloglevel=2)
    return spm.SentencePieceProcessor(model_proto=buf.getvalue())


def write_spm_gguf(sp, space_prefix, path):
    """sp's pieces, scores and piece types as a tokenizer.ggml.model "llama" vocabulary."""
    n = sp.get_piece_size()
    types = [gguf.TokenType.UNKNOWN if sp.is_unknown(i) else gguf.TokenType.CONTROL
             if sp.is_control(i) else gguf.TokenType.BYTE if sp.is_byte(i)
             else gguf.TokenType.NORMAL for i in range(n)]
    w = gguf.GGUFWriter(path, "llama")
    _hparams(w)
    w.add_tokenizer_model("llama")
    w.add_token_list([sp.id_to_piece(i) for i in range(n)])
    w.add_token_scores([sp.get_score(i) for i in range(n)])
    w.add_token_types(types)
    w.add_bos_token_id(sp.bos_id())
    w.add_eos_token_id(sp.eos_id())
    w.add_add_bos_token(False)
    w.add_add_space_prefix(space_prefix)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def kite_binary():
    """The `kite` command of the build whose Python package the tests import ($KITE_CLI first)."""
    if os.environ.get("KITE_CLI"):
        return os.environ["KITE_CLI"]
    import kite
    return os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(kite.__file__)))), "bin", "kite")


def kite_tokenize(model, text):
    out = subprocess.run([kite_binary(), "run", "--model", model, "--tokenize", text],
                         capture_output=True, text=True, check=True)
    return [int(x) for x in out.stdout.split()]
