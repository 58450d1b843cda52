"""slm.load on GGUF files written the way llama.cpp's converter writes them (testkit.gguf_files: gguf.GGUFWriter, its
tensor names and layouts, Llama's q/k rows permuted, the tokenizer metadata) from random-weight `transformers`
models. Checked: the F32 file's logits within 1e-4 of transformers' and its greedy generation token for token; each
quantized file's logits within 1e-4 of transformers run with the weights the file holds (dequantized by gguf), and
near the unquantized model within a bound per type; the tokenizers against the libraries they were written from
(`tokenizers`, `sentencepiece`); the K types through gguf's dequantize; every bad file named in its error."""

from __future__ import annotations

import os
import random
import unicodedata

import gguf
import numpy as np
import pytest
import sentencepiece as spm
import torch
from gguf import GGMLQuantizationType as Q

import slm
from slm import gguf_file
from testkit import gguf_files
from testkit.gguf_files import (
    VOCAB,
    gguf_tensors,
    gpt2_vocab,
    llama_hf_vocab,
    logits,
    make_gpt2,
    make_llama,
    make_neox,
    prompt_ids,
    sentencepiece_vocab,
    with_weights,
    write_gguf,
)
from testkit.trained_tokenizers import CORPUS, byte_level_split, gpt2_style, llama_style

torch.set_num_threads(1)
# How far each type's logits may be from the unquantized model's: the RMS difference over the logits' standard
# deviation. Measured here: F16 0.05-0.2 %, BF16 0.4-1.3 %, Q8_0 1.3-4 %, Q5_x 9-34 %, Q4_x 18-63 %. These
# random models (weights about ten times the usual scale, so that greedy choices are clear) magnify rounding.
NEAR = {Q.F32: 1e-5, Q.F16: 5e-3, Q.BF16: 0.03, Q.Q8_0: 0.08, Q.Q5_0: 0.5, Q.Q5_1: 0.5, Q.Q4_0: 0.8, Q.Q4_1: 0.8}


# ---- the references ----

@pytest.fixture(scope="module")
def gpt2_tokenizer():
    return gpt2_style(vocab_size=VOCAB)


@pytest.fixture(scope="module")
def sentencepiece_model() -> spm.SentencePieceProcessor:
    return gguf_files.sentencepiece_model()


# ---- parity ----

GPT2_TYPES = (Q.F32, Q.F16, Q.Q8_0, Q.Q4_1, Q.Q5_0)
LLAMA_TYPES = (Q.F32, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q5_1)


@pytest.mark.parametrize("qtype", GPT2_TYPES, ids=lambda q: q.name)
def test_gpt2_file_matches_transformers(qtype, tmp_path, gpt2_tokenizer):
    model = make_gpt2()
    held = write_gguf(tmp_path / "m.gguf", model, gpt2_vocab(gpt2_tokenizer, tmp_path), qtype)
    ours = slm.load(tmp_path / "m.gguf")
    assert ours.cfg.tied and ours.cfg.positions == "learned" and ours.meta["name"] == "tiny-gpt2"
    assert_quantized_matches(model, ours, held, qtype)


@pytest.mark.parametrize("qtype", LLAMA_TYPES, ids=lambda q: q.name)
def test_llama_file_matches_transformers(qtype, tmp_path, sentencepiece_model):
    model = make_llama()
    held = write_gguf(tmp_path / "m.gguf", model, sentencepiece_vocab(sentencepiece_model), qtype)
    ours = slm.load(tmp_path / "m.gguf")
    assert (ours.cfg.n_kv_heads, ours.cfg.tied, ours.cfg.rope_base, ours.cfg.d_ff) == (2, False, 5000.0, 96)
    assert_quantized_matches(model, ours, held, qtype)


@pytest.mark.parametrize("qtype", (Q.F32, Q.Q8_0), ids=lambda q: q.name)
@pytest.mark.parametrize("rotary_pct,parallel", [(0.25, True), (1.0, False)])
def test_gptneox_file_matches_transformers(qtype, rotary_pct, parallel, tmp_path, gpt2_tokenizer):
    model = make_neox(rotary_pct=rotary_pct, use_parallel_residual=parallel)
    held = write_gguf(tmp_path / "m.gguf", model, gpt2_vocab(gpt2_tokenizer, tmp_path), qtype)
    ours = slm.load(tmp_path / "m.gguf")
    assert (ours.cfg.rope_dims, ours.cfg.parallel_residual, ours.cfg.tied) == (16 * rotary_pct, parallel, False)
    assert_quantized_matches(model, ours, held, qtype)


def assert_quantized_matches(model, ours: slm.Model, held: dict, qtype: Q) -> None:
    types = {kind.name for kind, _ in held.values()}
    assert ours.meta["source"].startswith(f"GGUF {model.config.model_type.replace('_', '')} (")
    assert set(ours.meta["source"].split("(")[1].rstrip(")").split(", ")) == types and qtype.name in types
    dequantized = with_weights(model, held)
    for ids in prompt_ids(ours.cfg.n_ctx):
        actual = ours.forward(ids).logits
        assert actual.dtype == np.float32
        np.testing.assert_allclose(actual, logits(dequantized, ids), atol=1e-4, rtol=0)
        original = logits(model, ids)
        error = np.sqrt(np.mean((actual - original) ** 2)) / original.std()
        assert error <= NEAR[qtype], (qtype, error)
        assert qtype == Q.F32 or error > NEAR[qtype] / 1000  # the weights really are rounded
    if qtype == Q.F32:
        ids = prompt_ids(ours.cfg.n_ctx)[0]
        with torch.no_grad():
            out = model.generate(torch.tensor(ids)[None], max_new_tokens=20, do_sample=False, pad_token_id=0,
                                 eos_token_id=None)
        expected = out[0, len(ids):].tolist()
        assert [step.token for step in slm.generate(ours, ids, 20, temperature=0)] == expected
        assert len(set(expected)) > 1


def test_bytes_mapping_and_in_place_give_the_same_model(tmp_path, gpt2_tokenizer):
    model = make_gpt2(seed=1)
    write_gguf(tmp_path / "m.gguf", model, gpt2_vocab(gpt2_tokenizer, tmp_path), Q.Q8_0)
    data = (tmp_path / "m.gguf").read_bytes()
    from_path = slm.load(tmp_path / "m.gguf")
    from_bytes = slm.load(data)
    given = bytearray(data)
    from_mapping = slm.load({"folder/tiny.gguf": given}, in_place=True)
    assert len(given) == 0  # written to the reader's file, then let go
    for other in (from_bytes, from_mapping):
        assert other.cfg == from_path.cfg
        for key, value in from_path.params.items():
            np.testing.assert_array_equal(other.params[key], value)
            assert other.params[key].flags.writeable and other.params[key].flags.c_contiguous
    assert from_mapping.meta["name"] == "tiny-gpt2"  # general.name before the file's name


def test_gguf_is_imported_only_when_a_file_is_read(tmp_path, gpt2_tokenizer):
    """The site's start-up imports slm and the app's loader; gguf (0.5 MB of bytecode) waits for a .gguf."""
    import subprocess
    import sys

    write_gguf(tmp_path / "m.gguf", make_gpt2(), gpt2_vocab(gpt2_tokenizer, tmp_path))
    script = ("import sys, slm, playground.library; before = 'gguf' in sys.modules; "
              f"slm.load({str(tmp_path / 'm.gguf')!r}); print(before, 'gguf' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.stdout.split() == ["False", "True"]


# ---- tokenizers ----

def sample_strings(n: int, seed: int) -> list[str]:
    """Corpus slices, random Unicode, emoji, whitespace runs, digits and apostrophes mixed."""
    rng = random.Random(seed)
    pieces = [" ", "  ", "\n", "\t", "\r\n", "\u00a0", "   \n ", "'s", "'ll", "don't", "▁", "Ġ", "😀", "👨‍👩‍👧",
              "é", "e\u0301", "ß", "123", "4.5", "½", "…", "—", "<", "|", "__init__", "İ", "日本語"]
    words = CORPUS.split()
    out = ["", " ", "a", "  ", "\n", " a", "a ", "  a  b  ", CORPUS]
    while len(out) < n:
        kind = rng.randrange(5)
        if kind == 0:
            a = rng.randrange(len(CORPUS))
            out.append(CORPUS[a:a + rng.randrange(1, 80)])
        elif kind == 1:
            chars = [chr(rng.randrange(32, 0x2FFFF)) for _ in range(rng.randrange(1, 12))]
            out.append("".join(c for c in chars if unicodedata.category(c) not in ("Cn", "Cs", "Co")))
        else:
            out.append("".join(rng.choice([rng.choice(pieces), rng.choice(words), str(rng.randrange(10 ** 6))])
                               for _ in range(rng.randrange(1, 10))))
    return out


def test_gpt2_tokenizer_from_metadata_matches_tokenizers(tmp_path, gpt2_tokenizer):
    write_gguf(tmp_path / "m.gguf", make_gpt2(), gpt2_vocab(gpt2_tokenizer, tmp_path))
    ours = slm.load(tmp_path / "m.gguf").tokenizer
    strings = sample_strings(1500, 1) + ["<|endoftext|>", "a<|endoftext|>b"]
    for text in strings:
        expected = gpt2_tokenizer.encode(text).ids
        assert ours.encode(text).ids == expected, text
        assert ours.decode(expected) == gpt2_tokenizer.decode(expected, skip_special_tokens=False), text
    assert ours.token_text(gpt2_tokenizer.token_to_id("<|endoftext|>")) == "<|endoftext|>"


# Pre-tokenizers as the models' tokenizer.json files spell them: the tokenizers the GGUF `pre` names were made from.
LLAMA3_PRE = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                                           "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     "behavior": "Isolated", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
SMOLLM_PRE = {"type": "Sequence", "pretokenizers": [
    {"type": "Digits", "individual_digits": True},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}


@pytest.mark.parametrize("pre, spec, ignore_merges", [("llama-bpe", LLAMA3_PRE, True), ("smollm", SMOLLM_PRE, False)])
def test_split_rules_named_by_pre_match_tokenizers(pre, spec, ignore_merges, tmp_path):
    reference = byte_level_split(spec, None, ignore_merges, vocab_size=VOCAB)
    meta = gpt2_vocab(reference, tmp_path, pre=pre, bos="<|begin_of_text|>", eos="<|end_of_text|>")
    write_gguf(tmp_path / "m.gguf", make_gpt2(), meta)
    ours = slm.load(tmp_path / "m.gguf").tokenizer
    for text in sample_strings(1000, 3) + ["1234567890", "I'LL we'Re", "\r\n\r\n  a"]:
        expected = reference.encode(text, add_special_tokens=False).ids
        assert ours.encode(text, add_special_tokens=False).ids == expected, text
        assert ours.decode(expected) == reference.decode(expected, skip_special_tokens=False), text
    # gguf.SpecialVocab wrote add_bos_token from the tokenizer.json's post-processor, which puts BOS first
    assert ours.encode("hi there").ids == reference.encode("hi there").ids
    assert ours.encode("hi").ids[0] == reference.token_to_id("<|begin_of_text|>")


def test_sentencepiece_tokenizer_from_metadata_matches_sentencepiece(tmp_path, sentencepiece_model):
    sp = sentencepiece_model
    write_gguf(tmp_path / "m.gguf", make_llama(), sentencepiece_vocab(sp))
    loaded = slm.load(tmp_path / "m.gguf")
    ours = loaded.tokenizer
    assert (loaded.meta["bos_token_id"], loaded.meta["eos_token_id"]) == (1, 2)
    strings = sample_strings(1500, 2)
    merged = 0
    for text in strings:
        expected = sp.encode(text)
        assert ours.encode(text, add_special_tokens=False).ids == expected, text
        assert ours.encode(text).ids == [sp.bos_id(), *expected], text  # llama adds BOS by default
        assert ours.decode(expected) == sp.decode(expected), text
        merged += sum(len(sp.id_to_piece(i)) > 1 and not sp.is_byte(i) for i in expected)
    assert merged > 1000  # the merges by score were exercised, not just single characters
    fallback = sp.encode("\U0001f9d1")  # "▁", then the character's four bytes
    assert sum(map(sp.is_byte, fallback)) == 4 and ours.encode("\U0001f9d1", add_special_tokens=False).ids == fallback


def test_llama_vocabulary_without_scores_merges_by_id_as_tokenizers_does(tmp_path):
    """A Llama converted from tokenizer.json alone (gguf.LlamaHfVocab: every score -1000): merges ranked by the merged
    piece's id, the order a BPE trainer made them in, encode as `tokenizers` does."""
    reference = llama_style(legacy=True, vocab_size=VOCAB)
    write_gguf(tmp_path / "m.gguf", make_llama(), llama_hf_vocab(reference, tmp_path))
    ours = slm.load(tmp_path / "m.gguf").tokenizer
    for text in sample_strings(1500, 5):
        expected = reference.encode(text).ids  # with BOS, as SpecialVocab's add_bos_token says
        assert ours.encode(text).ids == expected, text
        assert ours.decode(expected, skip_special_tokens=True) == reference.decode(expected), text


# ---- the K and IQ4 types, which gguf.quants cannot write ----

# Per type: the bytes of one block and the offsets of its float16 scales (d, and dmin where it has one), from ggml's
# block layouts; the rest of a block is random, so the scales are set to small finite values.
BLOCKS = {Q.Q2_K: (84, (80, 82)), Q.Q3_K: (110, (108,)), Q.Q4_K: (144, (0, 2)), Q.Q5_K: (176, (0, 2)),
          Q.Q6_K: (210, (208,)), Q.IQ4_NL: (18, (0,)), Q.IQ4_XS: (136, (0,))}


@pytest.mark.parametrize("qtype", list(BLOCKS), ids=lambda q: q.name)
def test_block_types_go_through_gguf_dequantize(qtype, tmp_path, sentencepiece_model):
    model = make_llama(intermediate_size=256)  # ffn_down's rows are 256 long: one K block, eight IQ4_NL blocks
    size, scales = BLOCKS[qtype]
    block, type_size = gguf.GGML_QUANT_SIZES[qtype]
    assert type_size == size
    rng = np.random.default_rng(3)
    raw = rng.integers(0, 256, (64, 256 // block, size), dtype=np.uint8)
    for at in scales:
        raw[:, :, at:at + 2] = np.full((64, 256 // block, 1), 0.002, np.float16).view(np.uint8)
    raw = raw.reshape(64, -1)
    held = write_gguf(tmp_path / "m.gguf", model, sentencepiece_vocab(sentencepiece_model), Q.F32,
                      replace={"blk.1.ffn_down.weight": (qtype, raw)})
    ours = slm.load(tmp_path / "m.gguf")
    expected = gguf.quants.dequantize(raw, qtype)
    assert expected.shape == (64, 256) and np.abs(expected).max() > 0
    np.testing.assert_array_equal(ours.params["blocks.1.ffn.w_out"], expected.T)
    assert qtype.name in ours.meta["source"]
    ids = prompt_ids(ours.cfg.n_ctx)[0]
    np.testing.assert_allclose(ours.forward(ids).logits, logits(with_weights(model, held), ids), atol=1e-4, rtol=0)


# ---- bad files ----

def test_bad_files_are_named(tmp_path, gpt2_tokenizer, monkeypatch):
    meta = gpt2_vocab(gpt2_tokenizer, tmp_path)
    write_gguf(tmp_path / "good.gguf", make_gpt2(), meta)
    data = (tmp_path / "good.gguf").read_bytes()
    for cut in (10, 200, len(data) // 2, len(data) - 1000):
        with pytest.raises(ValueError, match="not a readable GGUF file"):
            slm.load(data[:cut])
    with pytest.raises(ValueError, match="not a readable GGUF file"):
        slm.load({"x.gguf": b"GGUF" + bytes(3)})

    write_gguf(tmp_path / "arch.gguf", make_gpt2(), meta, arch_name="mamba")
    with pytest.raises(ValueError, match="arch.gguf: general.architecture 'mamba' is not supported"):
        slm.load(tmp_path / "arch.gguf")

    w = gguf_tensors(make_gpt2())["blk.0.ffn_up.weight"]  # (256, 64): rows of two 32-value blocks
    mx = np.zeros((256, 2 * gguf.GGML_QUANT_SIZES[Q.MXFP4][1]), np.uint8)
    assert w.shape == (256, 64) and gguf.GGML_QUANT_SIZES[Q.MXFP4][0] == 32
    write_gguf(tmp_path / "type.gguf", make_gpt2(), meta, replace={"blk.0.ffn_up.weight": (Q.MXFP4, mx)})
    with pytest.raises(ValueError, match="tensor blk.0.ffn_up.weight has the weight type MXFP4, which slm does "
                                         "not read"):
        slm.load(tmp_path / "type.gguf")

    write_gguf(tmp_path / "pre.gguf", make_gpt2(), gpt2_vocab(gpt2_tokenizer, tmp_path, pre="no-such-pre"))
    with pytest.raises(ValueError, match="pre.gguf: the tokenizer in its metadata: .*'no-such-pre'"):
        slm.load(tmp_path / "pre.gguf")

    def bert_vocab(writer):
        writer.add_tokenizer_model("bert")
    write_gguf(tmp_path / "tok.gguf", make_gpt2(), bert_vocab)
    with pytest.raises(ValueError, match="tokenizer.ggml.model 'bert' is not supported"):
        slm.load(tmp_path / "tok.gguf")

    nan = gguf_tensors(make_gpt2())["blk.1.attn_output.weight"]
    nan[3, 4] = np.nan
    write_gguf(tmp_path / "nan.gguf", make_gpt2(), meta, replace={"blk.1.attn_output.weight": (Q.F32, nan)})
    with pytest.raises(ValueError, match="tensor blk.1.attn_output.weight holds NaN"):
        slm.load(tmp_path / "nan.gguf")

    monkeypatch.setattr(gguf_file, "MAX_PARAMS", 1000)
    with pytest.raises(ValueError, match=r"good.gguf: the model has 0\.\dM parameters; slm loads up to 0M"):
        slm.load(tmp_path / "good.gguf")


def test_unread_llama_metadata_is_named(tmp_path, sentencepiece_model):
    meta = sentencepiece_vocab(sentencepiece_model)

    def with_key(add):
        def write(writer):
            meta(writer)
            add(writer)
        return write
    cases = {
        "yarn": (lambda w: w.add_rope_scaling_type(gguf.RopeScalingType.YARN), "rope scaling 'yarn'"),
        "window": (lambda w: w.add_sliding_window(16), "llama.attention.sliding_window=16"),
        "key": (lambda w: w.add_key_length(8), "llama.attention.key_length=8"),
    }
    for name, (add, message) in cases.items():
        write_gguf(tmp_path / f"{name}.gguf", make_llama(), with_key(add))
        with pytest.raises(ValueError, match=message):
            slm.load(tmp_path / f"{name}.gguf")
