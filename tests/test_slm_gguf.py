"""slm.load on GGUF files written here with `gguf.GGUFWriter` the way llama.cpp's converter (convert_hf_to_gguf.py)
writes them, from random-weight `transformers` models: its tensor names (gguf's own TensorNameMap), GPT-2's Conv1D
weights transposed, Llama's q/k rows permuted per head, 1-D tensors, norms and position embeddings kept in F32, the
others quantized by `gguf.quants.quantize` (falling back to F16 where a row does not fill a block), and the
tokenizer's metadata as the converter fills it (GPT-2: tokens, types, merges, pre; Llama: SentencePiece pieces,
scores and types). Checked: logits against transformers (the F32 file within 1e-4, each quantized file within 1e-4
of transformers run with the dequantized weights and near the original within a bound per type), greedy
generation, the tokenizers against the libraries they were written from, the K types through gguf's dequantize,
and every bad file named in its error."""

from __future__ import annotations

import io
import json
import random
import unicodedata

import gguf
import numpy as np
import pytest
import sentencepiece as spm
import torch
from gguf import GGMLQuantizationType as Q
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

import slm
from slm import gguf_file
from testkit.trained_tokenizers import CORPUS, gpt2_style, training_text

torch.set_num_threads(1)
VOCAB = 400
FILE_TYPES = {Q.F32: gguf.LlamaFileType.ALL_F32, Q.F16: gguf.LlamaFileType.MOSTLY_F16,
              Q.BF16: gguf.LlamaFileType.MOSTLY_BF16, Q.Q8_0: gguf.LlamaFileType.MOSTLY_Q8_0,
              Q.Q4_0: gguf.LlamaFileType.MOSTLY_Q4_0, Q.Q4_1: gguf.LlamaFileType.MOSTLY_Q4_1,
              Q.Q5_0: gguf.LlamaFileType.MOSTLY_Q5_0, Q.Q5_1: gguf.LlamaFileType.MOSTLY_Q5_1}
# How far each type's logits may be from the unquantized model's: the RMS difference over the logits' standard
# deviation. Measured here: F16 0.05-0.2 %, BF16 0.4-1.3 %, Q8_0 1.3-4 %, Q5_x 9-34 %, Q4_x 18-63 %. These
# random models (weights about ten times the usual scale, so that greedy choices are clear) magnify rounding.
NEAR = {Q.F32: 1e-5, Q.F16: 5e-3, Q.BF16: 0.03, Q.Q8_0: 0.08, Q.Q5_0: 0.5, Q.Q5_1: 0.5, Q.Q4_0: 0.8, Q.Q4_1: 0.8}


# ---- the reference models and their tokenizers ----

def spread(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Weights far from the 0.02-std initialisation, so that greedy choices are not near-ties; norm scales near 1."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if "ln" in name or "norm" in name:
                p.copy_(1.0 + 0.2 * noise if name.endswith("weight") else 0.2 * noise)
            else:
                p.copy_(noise * (0.5 if p.ndim == 1 else 0.6 / p.shape[-1] ** 0.25))
    return model.eval()


@pytest.fixture(scope="module")
def gpt2_tokenizer():
    return gpt2_style(vocab_size=VOCAB)


@pytest.fixture(scope="module")
def sentencepiece_model() -> spm.SentencePieceProcessor:
    """A SentencePiece BPE as Llama's tokenizer.model is made: byte fallback, digits split, no normalization."""
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(training_text()), model_writer=out, model_type="bpe", vocab_size=VOCAB,
        byte_fallback=True, split_digits=True, character_coverage=0.98, normalization_rule_name="identity",
        remove_extra_whitespaces=False, add_dummy_prefix=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        minloglevel=2)
    return spm.SentencePieceProcessor(model_proto=out.getvalue())


def make_gpt2(seed: int = 0, **changes) -> GPT2LMHeadModel:
    spec = dict(n_embd=64, n_layer=2, n_head=4, n_positions=48) | changes
    return spread(GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, bos_token_id=0, eos_token_id=0, **spec)), seed)


def make_llama(seed: int = 0, **changes) -> LlamaForCausalLM:
    spec = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=64, rope_theta=5000.0, rms_norm_eps=1e-5,
                tie_word_embeddings=False) | changes
    return spread(LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, bos_token_id=1, eos_token_id=2, **spec)), seed)


# ---- writing GGUF as llama.cpp's converter does ----

def permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """The converter's Llama q/k reordering: per head, the rows (half 0, half 1) become interleaved pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def hf_tensors(model: torch.nn.Module) -> dict[str, np.ndarray]:
    """What save_pretrained writes: every parameter, without a tied head."""
    state = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    return state


def gguf_tensors(model: torch.nn.Module) -> dict[str, np.ndarray]:
    """The converter's modify_tensors: GGUF names and layouts, in float32."""
    arch = gguf.MODEL_ARCH.GPT2 if isinstance(model, GPT2LMHeadModel) else gguf.MODEL_ARCH.LLAMA
    names = gguf.get_tensor_name_map(arch, model.config.num_hidden_layers)
    out = {}
    for key, w in hf_tensors(model).items():
        if arch == gguf.MODEL_ARCH.GPT2 and key.endswith((".c_attn.weight", ".c_proj.weight", ".c_fc.weight")):
            w = w.T.copy()
        if key.endswith("q_proj.weight"):
            w = permute(w, model.config.num_attention_heads)
        if key.endswith("k_proj.weight"):
            w = permute(w, model.config.num_key_value_heads)
        out[names.get_name(key, try_suffixes=(".weight", ".bias"))] = w
    return out


def quantized(name: str, w: np.ndarray, want: Q) -> tuple[Q, np.ndarray]:
    """The converter's prepare_tensors choice: 1-D tensors, norms and position embeddings in F32, the others in the
    file's type, F16 where the type's blocks do not fit a row."""
    qtype = Q.F32 if w.ndim <= 1 or name.endswith("_norm.weight") or name == "position_embd.weight" else want
    try:
        return qtype, gguf.quants.quantize(w, qtype)
    except gguf.QuantError:
        return Q.F16, gguf.quants.quantize(w, Q.F16)


def write_gguf(path, model: torch.nn.Module, tokenizer_meta, qtype: Q = Q.F32,
               replace: dict[str, tuple[Q, np.ndarray]] | None = None, arch_name: str | None = None) -> dict:
    """The model's GGUF file; returns {tensor name: (type, the float32 weights the file holds)}."""
    c = model.config
    gpt2 = isinstance(model, GPT2LMHeadModel)
    writer = gguf.GGUFWriter(path, arch_name or ("gpt2" if gpt2 else "llama"))
    writer.add_name("tiny-" + ("gpt2" if gpt2 else "llama"))
    writer.add_block_count(c.num_hidden_layers)
    if gpt2:
        writer.add_context_length(c.n_positions)
        writer.add_embedding_length(c.n_embd)
        writer.add_feed_forward_length(4 * c.n_embd)
        writer.add_head_count(c.n_head)
        writer.add_layer_norm_eps(c.layer_norm_epsilon)
    else:
        writer.add_context_length(c.max_position_embeddings)
        writer.add_embedding_length(c.hidden_size)
        writer.add_feed_forward_length(c.intermediate_size)
        writer.add_head_count(c.num_attention_heads)
        writer.add_head_count_kv(c.num_key_value_heads)
        writer.add_rope_freq_base(c.rope_parameters["rope_theta"] if getattr(c, "rope_parameters", None)
                                  else c.rope_theta)
        writer.add_layer_norm_rms_eps(c.rms_norm_eps)
        writer.add_vocab_size(c.vocab_size)
        writer.add_rope_dimension_count(c.hidden_size // c.num_attention_heads)
    writer.add_file_type(FILE_TYPES[qtype])
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    tokenizer_meta(writer)
    held = {}
    for name, w in gguf_tensors(model).items():
        kind, raw = (replace or {}).get(name) or quantized(name, w, qtype)
        writer.add_tensor(name, raw, raw_dtype=kind)
        held[name] = (kind, gguf.quants.dequantize(raw, kind).reshape(w.shape).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return held


def gpt2_vocab(tokenizer, folder, pre: str = "gpt-2"):
    """_set_vocab_gpt2: tokens by id, NORMAL or CONTROL (special added tokens), the merges and special ids as
    gguf.SpecialVocab reads them from tokenizer.json and tokenizer_config.json."""
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<|endoftext|>",
                                                              "eos_token": "<|endoftext|>"}))
    reverse = {i: t for t, i in tokenizer.get_vocab().items()}
    special = {t.content for t in tokenizer.get_added_tokens_decoder().values() if t.special}

    def meta(writer):
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(pre)
        writer.add_token_list([reverse.get(i, f"[PAD{i}]") for i in range(VOCAB)])
        writer.add_token_types([gguf.TokenType.UNUSED if i not in reverse else gguf.TokenType.CONTROL
                                if reverse[i] in special else gguf.TokenType.NORMAL for i in range(VOCAB)])
        gguf.SpecialVocab(folder, load_merges=True).add_to_gguf(writer)
    return meta


def sentencepiece_vocab(sp: spm.SentencePieceProcessor):
    """_set_vocab_sentencepiece: each piece's text, score and type from the SentencePiece model."""
    def kind(i: int) -> int:
        if sp.is_unknown(i):
            return gguf.TokenType.UNKNOWN
        if sp.is_control(i):
            return gguf.TokenType.CONTROL
        if sp.is_unused(i):
            return gguf.TokenType.UNUSED
        return gguf.TokenType.BYTE if sp.is_byte(i) else gguf.TokenType.NORMAL

    def meta(writer):
        writer.add_tokenizer_model("llama")
        writer.add_tokenizer_pre("default")
        writer.add_token_list([sp.id_to_piece(i).encode("utf-8") for i in range(sp.vocab_size())])
        writer.add_token_scores([sp.get_score(i) for i in range(sp.vocab_size())])
        writer.add_token_types([kind(i) for i in range(sp.vocab_size())])
        writer.add_bos_token_id(sp.bos_id())
        writer.add_eos_token_id(sp.eos_id())
        writer.add_unk_token_id(sp.unk_id())
    return meta


def with_weights(model: torch.nn.Module, held: dict) -> torch.nn.Module:
    """The transformers model with the weights the file holds (the converter's layouts undone)."""
    arch = gguf.MODEL_ARCH.GPT2 if isinstance(model, GPT2LMHeadModel) else gguf.MODEL_ARCH.LLAMA
    names = gguf.get_tensor_name_map(arch, model.config.num_hidden_layers)
    state = {}
    for key in hf_tensors(model):
        v = held[names.get_name(key, try_suffixes=(".weight", ".bias"))][1]
        if key.endswith(("q_proj.weight", "k_proj.weight")):  # undo the permutation: rows back to halves
            n = model.config.num_attention_heads if "q_proj" in key else model.config.num_key_value_heads
            v = v.reshape(n, v.shape[0] // n // 2, 2, -1).swapaxes(1, 2).reshape(v.shape)
        conv1d = arch == gguf.MODEL_ARCH.GPT2 and key.endswith((".c_attn.weight", ".c_proj.weight", ".c_fc.weight"))
        state[key] = torch.tensor(v.T.copy() if conv1d else v)
    copy = type(model)(model.config).eval()
    copy.load_state_dict(state, strict=False)
    if model.config.tie_word_embeddings:
        copy.tie_weights()
    return copy


def logits(model: torch.nn.Module, ids) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor(np.asarray(ids))[None]).logits[0].numpy()


def prompt_ids(n_ctx: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [np.array([5, 17, 200, 31, 99, 3, 250]), rng.integers(0, VOCAB, n_ctx)]


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


def assert_quantized_matches(model, ours: slm.Model, held: dict, qtype: Q) -> None:
    types = {kind.name for kind, _ in held.values()}
    assert ours.meta["source"].startswith(f"GGUF {model.config.model_type} (")
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


# ---- the K types, which gguf.quants cannot write ----

# Per type: the bytes of one block of 256 values and the offsets of its float16 scales (d, and dmin where it has one),
# from ggml's block layouts; the rest of a block is random, so the scales are set to small finite values.
K_BLOCKS = {Q.Q2_K: (84, (80, 82)), Q.Q3_K: (110, (108,)), Q.Q4_K: (144, (0, 2)), Q.Q5_K: (176, (0, 2)),
            Q.Q6_K: (210, (208,))}


@pytest.mark.parametrize("qtype", list(K_BLOCKS), ids=lambda q: q.name)
def test_k_type_tensors_go_through_gguf_dequantize(qtype, tmp_path, sentencepiece_model):
    model = make_llama(intermediate_size=256)  # ffn_down's rows are 256 long: one K block each
    size, scales = K_BLOCKS[qtype]
    assert gguf.GGML_QUANT_SIZES[qtype] == (256, size)
    rng = np.random.default_rng(3)
    raw = rng.integers(0, 256, (64, size), dtype=np.uint8)
    for at in scales:
        raw[:, at:at + 2] = np.full((64, 1), 0.01, np.float16).view(np.uint8)
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
    iq = np.zeros((256, 2 * gguf.GGML_QUANT_SIZES[Q.IQ4_NL][1]), np.uint8)
    assert w.shape == (256, 64)
    write_gguf(tmp_path / "type.gguf", make_gpt2(), meta, replace={"blk.0.ffn_up.weight": (Q.IQ4_NL, iq)})
    with pytest.raises(ValueError, match="tensor blk.0.ffn_up.weight has the weight type IQ4_NL, which slm does "
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
