"""slm.bpe against the `tokenizers` library: tokenizers trained here (GPT-2's byte-level kind, Llama's byte-fallback
kind in its two tokenizer.json spellings, Llama 3's, Qwen2's and SmolLM's split rules, from
testkit.trained_tokenizers) encode and decode thousands of strings exactly as `tokenizers` does; the Split and Digits
pre-tokenizers and the rules of the GGUF names cut text as `tokenizers` does."""

from __future__ import annotations

import json
import random

import pytest
import tokenizers
from tokenizers import Tokenizer

from slm import bpe
from slm.tokenizer import from_json
from testkit.trained_tokenizers import byte_level_split, gpt2_style, llama_style
from testkit.tricky_text import sample_strings


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
    (lambda d: d.update(pre_tokenizer={"type": "Split", "pattern": {"Regex": "x"}, "behavior": "Sideways"}),
     "Split behavior 'Sideways'"),
    (lambda d: d.update(pre_tokenizer={"type": "Split", "pattern": {"Glob": "x*"}, "behavior": "Isolated"}),
     'Split pattern \'{"Glob": "x*"}\''),
    (lambda d: d.update(pre_tokenizer={"type": "Split", "pattern": {"Regex": "\\p{Han}+"}, "behavior": "Isolated"}),
     "the Unicode property \\p{Han} is not supported"),
    (lambda d: d.update(pre_tokenizer={"type": "Split", "pattern": {"Regex": "\\w+"}, "behavior": "Isolated"}),
     "\\w is not supported"),
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


# ---- Split, Digits, and the split rules of Llama 3, Qwen2, SmolLM and the GGUF names ----

# The pre-tokenizers as the models' tokenizer.json files spell them.
LLAMA3_PRE = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                                           "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     "behavior": "Isolated", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
QWEN2_PRE = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                                           "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     "behavior": "Isolated", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
SMOLLM_PRE = {"type": "Sequence", "pretokenizers": [
    {"type": "Digits", "individual_digits": True},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}
GPT2_PRE = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
SPLIT_EXTRA = ("I'LL", "we'Re", "x'ſ", "\r\n\r\n  a", "1234567890", "Ⅻ½²", " 3.14159 ", "a\r\n\r\n")


@pytest.mark.parametrize("pre, normalizer, ignore_merges", [
    (LLAMA3_PRE, None, True), (QWEN2_PRE, {"type": "NFC"}, False), (SMOLLM_PRE, None, False),
    ({"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": False}, GPT2_PRE]}, None, False),
], ids=["llama3", "qwen2", "smollm", "digit-runs"])
def test_split_and_digits_tokenizers_match_tokenizers(pre, normalizer, ignore_merges):
    reference = byte_level_split(pre, normalizer, ignore_merges)
    mine = ours(reference)
    assert mine.encode("hi")[0][0] == reference.token_to_id("<|begin_of_text|>")
    assert_same(reference, mine, sample_strings(2000, seed=20, extra=SPLIT_EXTRA + ("<|end_of_text|>",)))


def tokenizers_pre_tokenizer(normalizer, pre) -> Tokenizer:
    data = json.loads(Tokenizer(tokenizers.models.BPE()).to_str())
    data.update(normalizer=normalizer, pre_tokenizer=pre)
    return Tokenizer.from_str(json.dumps(data))


def assert_same_pieces(normalizer, pre, strings: list[str]) -> None:
    """slm's normalizer and pre-tokenizer give the pieces `tokenizers` gives, each already in bytes as characters."""
    reference = tokenizers_pre_tokenizer(normalizer, pre)
    normalize, pre_tokenize = bpe._normalizer(normalizer), bpe._pre_tokenizer(pre)
    for text in strings:
        if reference.normalizer is not None:
            text = reference.normalizer.normalize_str(text)
            assert normalize(text) == text
        expected = [piece for piece, _ in reference.pre_tokenizer.pre_tokenize_str(text)]
        assert [piece for piece, _ in pre_tokenize([(text, True)])] == expected, text


BEHAVIORS = ("Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous")


@pytest.mark.parametrize("pattern", [{"Regex": "\\s+"}, {"Regex": "\\p{N}"}, {"Regex": "a*"}, {"Regex": "\\p{L}+|\\s"},
                                     {"String": " "}, {"String": "ab"}, {"String": ""}],
                         ids=["spaces", "numbers", "empty-matches", "letters-or-space", "space", "ab", "empty"])
def test_split_behaviors_cut_like_tokenizers(pattern):
    strings = sample_strings(300, seed=21, extra=("ab ab  aab", "  ", "aaa"))
    for behavior in BEHAVIORS:
        for invert in (False, True):
            pre = {"type": "Split", "pattern": pattern, "behavior": behavior, "invert": invert}
            assert_same_pieces(None, pre, strings)


@pytest.mark.parametrize("individual", [True, False])
def test_digits_cut_like_tokenizers(individual):
    assert_same_pieces(None, {"type": "Digits", "individual_digits": individual}, sample_strings(500, seed=22))


def test_the_table_holds_the_models_rules():
    def without_trim(rule):  # trim_offsets moves offsets, never a token
        return json.loads(json.dumps(rule).replace(', "trim_offsets": true', "").replace(', "trim_offsets": false', ""))
    for name, pre, normalizer, ignore_merges in [("llama-bpe", LLAMA3_PRE, None, True),
                                                 ("qwen2", QWEN2_PRE, {"type": "NFC"}, False),
                                                 ("smollm", SMOLLM_PRE, None, False),
                                                 ("gpt-2", GPT2_PRE, None, False)]:
        rule = bpe.pre_tokenizer_for_gguf(name)
        assert without_trim(rule["pre_tokenizer"]) == without_trim(pre), name
        assert rule["normalizer"] == normalizer and rule["ignore_merges"] == ignore_merges, name
    assert bpe.pre_tokenizer_for_gguf("llama-bpe")["add_bos"] and not bpe.pre_tokenizer_for_gguf("gpt-2")["add_bos"]
    rule = bpe.pre_tokenizer_for_gguf("llama3")
    rule["pre_tokenizer"]["pretokenizers"].clear()  # a copy: the table stays as it was
    assert bpe.pre_tokenizer_for_gguf("llama3")["pre_tokenizer"]["pretokenizers"]


def test_every_gguf_name_cuts_like_tokenizers():
    strings = sample_strings(400, seed=23, extra=SPLIT_EXTRA + ("Hello, y'all! 我想在apple工作1314151天～", "  end \n"))
    rules = {json.dumps(rule, sort_keys=True): rule for rule in bpe.GGUF_PRE_TOKENIZERS.values()}
    assert len(rules) >= 12
    for rule in rules.values():
        assert_same_pieces(rule["normalizer"], rule["pre_tokenizer"], strings)


def test_unknown_gguf_name_is_named():
    with pytest.raises(ValueError, match=r"GGUF: the pre-tokenizer 'nonesuch' \(tokenizer.ggml.pre\) is not supported"):
        bpe.pre_tokenizer_for_gguf("nonesuch")


def test_gpt2_split_is_gpt2s_pattern():
    # the hand-written scanner against the pattern it stands for, read by the regex translation
    pattern = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
    split = bpe._pre_tokenizer({"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated",
                                "invert": False})
    for text in sample_strings(1000, seed=24, extra=SPLIT_EXTRA):
        assert [piece for piece, _ in split([(text, True)])] == bpe.gpt2_split(text), text
