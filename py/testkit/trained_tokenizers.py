"""BPE tokenizers trained here by the `tokenizers` library, as GPT-2's and Llama's tokenizer.json have them: the
references of tests/test_slm_bpe.py, and the tokenizers of the checkpoints the tests and bench/lab_bench.py make."""

from __future__ import annotations

import json
import random

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

CORPUS = """\
Once upon a time, there was a little girl named Lily. She loved to play outside in the sunshine. One day, she saw
a big, red ball in the park. "Can I play with it?" she asked her mom. Her mom said, "Yes, but don't lose it!"
Lily's friend Tom came too; they'd played 3 games by 4:30pm. It's 2024-01-15, and we've got 1,234.56 reasons.
Numbers: 0 1 2 3 42 1000000 3.14159 ½ ² Ⅻ. Code: def f(x): return x**2 + 1  # comment\n\ttab\r\nwindows
Zürich, São Paulo, Kraków, Ελληνικά, русский язык, 日本語のテキスト, 中文文本, 한국어, עברית, العربية, हिन्दी.
Emoji: 😀 👍🏽 👨‍👩‍👧 🇫🇷 ❤️ — “quotes” ‘single’ … «guillemets» and a   run   of spaces.
"""


def training_text() -> list[str]:
    rng = random.Random(0)
    words = CORPUS.split()
    lines = CORPUS.splitlines()
    return lines * 20 + [" ".join(rng.choice(words) for _ in range(12)) for _ in range(400)]


def gpt2_style(add_prefix_space: bool = False, vocab_size: int = 600) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(training_text(), trainer)
    return tok


def llama_style(legacy: bool, vocab_size: int = 700) -> Tokenizer:
    """A byte-fallback BPE as Llama's tokenizer.json has it: `legacy` spells the space handling as a normalizer
    (Prepend + Replace, no pre-tokenizer, decoder Replace/ByteFallback/Fuse/Strip), otherwise as a Metaspace
    pre-tokenizer and decoder (prepend_scheme "first", no split). Byte tokens <0x00>..<0xFF> are vocabulary
    entries, not added tokens; the alphabet is limited so that rarer characters fall back to bytes."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>", *byte_tokens],
                                  limit_alphabet=60, show_progress=False)
    tok.train_from_iterator(training_text(), trainer)
    data = json.loads(tok.to_str())
    data["added_tokens"] = [t for t in data["added_tokens"] if t["content"] in ("<unk>", "<s>", "</s>")]
    if legacy:
        data["normalizer"] = {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
        data["pre_tokenizer"] = None
        data["decoder"] = {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    else:
        data["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
        data["decoder"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
    data["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [data["model"]["vocab"]["<s>"]], "tokens": ["<s>"]}},
    }
    return Tokenizer.from_str(json.dumps(data))


def byte_level_split(pre_tokenizer: dict, normalizer: dict | None = None, ignore_merges: bool = False,
                     vocab_size: int = 600) -> Tokenizer:
    """A byte-level BPE whose text is cut by `pre_tokenizer` (a tokenizer.json object) before training and encoding,
    as Llama 3's (a regex Split, then bytes), Qwen2's (the same after NFC) and SmolLM's (digits apart, then GPT-2's
    split) are, with a BOS token that the post-processor puts first, as Llama 3's does."""
    base = json.loads(Tokenizer(models.BPE()).to_str())
    base.update(normalizer=normalizer, pre_tokenizer=pre_tokenizer)
    tok = Tokenizer.from_str(json.dumps(base))
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(training_text(), trainer)
    data = json.loads(tok.to_str())
    data["model"]["ignore_merges"] = ignore_merges
    bos = "<|begin_of_text|>"
    first = {"SpecialToken": {"id": bos, "type_id": 0}}
    data["post_processor"] = {"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        {"type": "TemplateProcessing", "single": [first, {"Sequence": {"id": "A", "type_id": 0}}],
         "pair": [first, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": bos, "type_id": 1}},
                  {"Sequence": {"id": "B", "type_id": 1}}],
         "special_tokens": {bos: {"id": bos, "ids": [data["model"]["vocab"][bos]], "tokens": [bos]}}}]}
    return Tokenizer.from_str(json.dumps(data))
