"""slm.bpe against the `tokenizers` library: tokenizers trained here (GPT-2's byte-level kind, Llama's byte-fallback
kind in its two tokenizer.json spellings, from testkit.trained_tokenizers) encode and decode thousands of strings
exactly as `tokenizers` does."""

from __future__ import annotations

import json
import random
import unicodedata

import pytest
import tokenizers
from tokenizers import Tokenizer

from slm import bpe
from slm.tokenizer import from_json
from testkit.trained_tokenizers import CORPUS, gpt2_style, llama_style


def sample_strings(n: int, seed: int, extra: tuple[str, ...] = ()) -> list[str]:
    """Strings that stress a tokenizer: corpus slices, random Unicode (letters, marks, digits, symbols, astral),
    emoji sequences, whitespace runs of every kind, apostrophes, and the added tokens in odd places."""
    rng = random.Random(seed)
    spaces = [" ", "  ", "\n", "\n\n", "\t", "\r\n", "\u00a0", "\u3000", "\u2009", "\x0b", "\x0c", "\x1c", "\x85",
              "\u200b", "   \n  ", " \t "]
    pieces = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "''", "'", "don't", "it's", "x'y", "▁", "▁▁", "Ġ",
              "<0x41>", "😀", "👍🏽", "👨‍👩‍👧", "🇫🇷", "❤️", "é", "e\u0301", "ﬁ", "İ", "ß", "123", "4.5", "½", "٣",
              "…", "—", "<", ">", "|", "#", "_", "__init__", "A", "Z", "ǅ", "\ufffd", "\U0001f9d1\u200d\U0001f4bb",
              *extra]
    corpus = CORPUS
    out = ["", " ", "a", "  ", "\n", " a", "a ", "  a  b  ", "\n\nx\n\n", CORPUS, *extra]
    while len(out) < n:
        kind = rng.randrange(6)
        if kind == 0:
            a = rng.randrange(len(corpus))
            out.append(corpus[a:a + rng.randrange(1, 80)])
        elif kind == 1:  # random code points, mostly assigned ones
            chars = []
            while len(chars) < rng.randrange(1, 20):
                c = chr(rng.choice([rng.randrange(32, 0x3000), rng.randrange(0x3000, 0xD800),
                                    rng.randrange(0xE000, 0x10000), rng.randrange(0x10000, 0x2FFFF)]))
                if unicodedata.category(c) not in ("Cn", "Cs", "Co"):
                    chars.append(c)
            out.append("".join(chars))
        else:  # a mix of pieces, words and spaces
            parts = []
            for _ in range(rng.randrange(1, 12)):
                parts.append(rng.choice([rng.choice(spaces), rng.choice(pieces), rng.choice(corpus.split()),
                                         str(rng.randrange(10 ** rng.randrange(1, 8)))]))
            out.append("".join(parts))
    return out


def ours(tok: Tokenizer) -> bpe.BPETokenizer:
    return bpe.BPETokenizer(json.loads(tok.to_str()))


def assert_same(reference: Tokenizer, mine: bpe.BPETokenizer, strings: list[str]) -> None:
    rng = random.Random(len(strings))
    n = reference.get_vocab_size()
    for text in strings:
        # random ids too: pieces of characters (lone bytes) decode with replacement characters, as `tokenizers` does
        ids = [rng.randrange(n) for _ in range(rng.randrange(1, 8))]
        assert mine.decode(ids) == reference.decode(ids, skip_special_tokens=False), ids
        expected = reference.encode(text).ids
        assert mine.encode(text).ids == expected, text
        assert mine.encode(text, add_special_tokens=False).ids == reference.encode(
            text, add_special_tokens=False).ids, text
        for skip in (False, True):
            assert mine.decode(expected, skip_special_tokens=skip) == reference.decode(
                expected, skip_special_tokens=skip), (text, skip)


SPECIAL = ("<|endoftext|>", "a<|endoftext|>b", " <|endoftext|> ", "<|endoftext|><|endoftext|>")


@pytest.mark.parametrize("add_prefix_space", [False, True])
def test_byte_level_bpe_matches_tokenizers(add_prefix_space):
    reference = gpt2_style(add_prefix_space)
    mine = ours(reference)
    assert_same(reference, mine, sample_strings(2500, seed=1 + add_prefix_space, extra=SPECIAL))


def test_gpt2_vocab_and_merges_files_match_tokenizers(tmp_path):
    reference = gpt2_style()
    reference.model.save(str(tmp_path))
    mine = bpe.from_gpt2_files((tmp_path / "vocab.json").read_text(), (tmp_path / "merges.txt").read_bytes())
    assert_same(reference, mine, sample_strings(800, seed=3, extra=SPECIAL))


@pytest.mark.parametrize("legacy", [True, False], ids=["normalizer", "metaspace"])
def test_byte_fallback_bpe_matches_tokenizers(legacy):
    reference = llama_style(legacy)
    mine = ours(reference)
    assert mine.encode("hello")[0][0] == reference.token_to_id("<s>")  # BOS first, as Llama's template says
    assert_same(reference, mine, sample_strings(2500, seed=4 + legacy, extra=("<s>", "a</s>b", " <unk> ")))


def test_byte_fallback_really_falls_back_and_unknown_is_reported():
    reference = llama_style(legacy=True)
    mine = ours(reference)
    encoding = mine.encode("ᚠᛇ", add_special_tokens=False)  # runes: not in the training text
    byte_ids = [reference.token_to_id(f"<0x{b:02X}>") for b in "ᚠᛇ".encode()]
    assert encoding.ids[-6:] == byte_ids
    assert mine.decode(encoding.ids) == "ᚠᛇ"
    data = json.loads(reference.to_str())
    data["model"]["byte_fallback"] = False  # without byte fallback a missing character becomes <unk>
    no_fallback = Tokenizer.from_str(json.dumps(data))
    mine = bpe.BPETokenizer(data)
    encoding = mine.encode("x ᚠᛇ y")
    assert encoding.ids == no_fallback.encode("x ᚠᛇ y").ids
    assert reference.token_to_id("<unk>") in encoding.ids and encoding.unknown == ["ᚠᛇ"]


def test_added_tokens_strip_and_normalized():
    reference = gpt2_style()
    reference.add_tokens([tokenizers.AddedToken("[SEP]", lstrip=True, rstrip=True, special=True, normalized=False),
                          tokenizers.AddedToken("zap", normalized=True)])
    mine = ours(reference)
    assert_same(reference, mine, ["a [SEP] b", "[SEP]", "  [SEP]  ", "zapzap zap", "x[SEP]y zap[SEP]zap",
                                  *sample_strings(300, seed=7, extra=(" [SEP] ", "zap"))])


def test_nfc_normalizer_and_ignore_merges():
    reference = gpt2_style()
    data = json.loads(reference.to_str())
    data["normalizer"] = {"type": "NFC"}
    data["model"]["ignore_merges"] = True
    reference = Tokenizer.from_str(json.dumps(data))
    assert_same(reference, bpe.BPETokenizer(data), sample_strings(500, seed=8))


def test_gpt2_split_by_hand():
    # the pattern's pieces, worked out by hand from its alternatives
    assert bpe.gpt2_split("Hello world") == ["Hello", " world"]
    assert bpe.gpt2_split("I'm here's") == ["I", "'m", " here", "'s"]
    assert bpe.gpt2_split("a   b") == ["a", "  ", " b"]  # the last space of a run goes with the word after it
    assert bpe.gpt2_split("a \n b") == ["a", " \n", " b"]
    assert bpe.gpt2_split("x\n\ny") == ["x", "\n", "\n", "y"]  # `\s+(?!\S)` leaves the last \n; `\s+` takes it
    assert bpe.gpt2_split("end  ") == ["end", "  "]
    assert bpe.gpt2_split("3.14 é!?") == ["3", ".", "14", " é", "!?"]
    assert bpe.gpt2_split("a\x1cb") == ["a", "\x1c", "b"]  # U+001C: isspace() in Python, not White_Space


def test_token_text_is_readable():
    gpt2 = ours(gpt2_style())
    llama = ours(llama_style(legacy=True))
    space_the = gpt2.encode(" the").ids
    assert [gpt2.token_text(i) for i in space_the] == [" the"]
    assert gpt2.token_text(gpt2.encode("\n").ids[0]) == "\\n"
    assert gpt2.token_text(gpt2.vocab.index("Ġ")) == "␣"
    assert gpt2.token_text(gpt2.vocab.index("â")) == "<0xE2>"  # the first byte of a three-byte character
    assert llama.token_text(llama.vocab.index("<0x0A>")) == "\\n"
    assert llama.token_text(llama.vocab.index("<0xE2>")) == "<0xE2>"
    assert llama.token_text(llama.vocab.index("<s>")) == "<s>"
    assert llama.token_text(llama.vocab.index("▁the")) == " the"
    assert llama.token_text(10 ** 6) == "<id 1000000>"


def test_to_json_round_trip_through_the_kinds_registry():
    mine = ours(llama_style(legacy=False))
    again = from_json(json.loads(json.dumps(mine.to_json())))
    assert isinstance(again, bpe.BPETokenizer)
    text = "A round trip: Zürich 😀\n"
    assert again.encode(text) == mine.encode(text)


@pytest.mark.parametrize("change, message", [
    (lambda d: d["model"].update(type="WordPiece"), "model type 'WordPiece'"),
    (lambda d: d.update(normalizer={"type": "Lowercase"}), "normalizer 'Lowercase'"),
    (lambda d: d.update(normalizer={"type": "Replace", "pattern": {"Regex": "a+"}, "content": "b"}),
     'normalizer Replace with the pattern \'{"Regex": "a+"}\''),
    (lambda d: d.update(pre_tokenizer={"type": "Whitespace"}), "pre-tokenizer 'Whitespace'"),
    (lambda d: d.update(pre_tokenizer={"type": "Split", "pattern": {"Regex": "x"}, "behavior": "Isolated"}),
     "pre-tokenizer 'Split'"),
    (lambda d: d.update(decoder={"type": "WordPiece"}), "decoder 'WordPiece'"),
    (lambda d: d.update(post_processor={"type": "BertProcessing"}), "post-processor 'BertProcessing'"),
    (lambda d: d["model"].update(continuing_subword_prefix="##"), "continuing_subword_prefix '##'"),
    (lambda d: d["model"].update(dropout=0.1), "dropout 0.1"),
    (lambda d: d["model"].update(merges=[["q", "zzz"]]), "the merge 'q' + 'zzz'"),
    (lambda d: d["model"].update(unk_token="<nope>"), "unk_token '<nope>'"),
    (lambda d: d.pop("model"), "no 'model' object"),
    (lambda d: d["model"].pop("vocab"), "missing or malformed field"),
])
def test_unsupported_or_broken_tokenizer_json_names_what(change, message):
    data = json.loads(gpt2_style(vocab_size=300).to_str())
    change(data)
    with pytest.raises(ValueError) as info:
        bpe.BPETokenizer(data)
    assert message in str(info.value)


def test_bad_files_name_what():
    with pytest.raises(ValueError, match="tokenizer.json is not valid JSON"):
        bpe.from_tokenizer_json("{oops")
    with pytest.raises(ValueError, match="vocab.json is not valid JSON"):
        bpe.from_gpt2_files("nope", "#version: 0.2\n")
    with pytest.raises(ValueError, match="merges.txt line 2"):
        bpe.from_gpt2_files('{"a": 0, "b": 1, "ab": 2}', "#version: 0.2\na b c\n")
    with pytest.raises(ValueError, match="unknown tokenizer 'bpe2'"):
        from_json({"kind": "bpe2"})
