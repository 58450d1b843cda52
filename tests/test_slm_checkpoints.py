"""slm.load on Hugging Face checkpoints made here by `transformers` (GPT2LMHeadModel, LlamaForCausalLM), against the
same models run by `transformers`: logits within 1e-4 in float32 and greedy generation token for token; the
safetensors reader against the `safetensors` library; and every bad input named in its error."""

from __future__ import annotations

import io
import json
import math
import pickle
import struct
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

import slm
from slm import convert, hf, layers
from slm.safetensors_reader import SafetensorsFile
from testkit.torch_reference import spread
from testkit.trained_tokenizers import gpt2_style, llama_style

torch.set_num_threads(1)
VOCAB = 400  # the tokenizers trained for these models have at most this many tokens


@pytest.fixture(scope="module")
def gpt2_tokenizer():
    return gpt2_style(vocab_size=VOCAB)


@pytest.fixture(scope="module")
def llama_tokenizer():
    return llama_style(legacy=True, vocab_size=VOCAB)


GPT2_CONFIGS = {
    "tied": dict(n_embd=32, n_layer=2, n_head=4, n_positions=48),
    "exact-gelu": dict(n_embd=32, n_layer=2, n_head=2, n_positions=32, activation_function="gelu"),
    "untied-inner-eps-relu": dict(n_embd=24, n_layer=3, n_head=2, n_positions=40, n_inner=40, layer_norm_epsilon=1e-6,
                                  activation_function="relu", tie_word_embeddings=False),
}
LLAMA_CONFIGS = {
    "mha-tied": dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=4, tie_word_embeddings=True),
    "gqa-untied-theta": dict(hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=6,
                             num_key_value_heads=2, rope_theta=500.0, rms_norm_eps=1e-5),
    "mqa-attention-bias": dict(hidden_size=32, intermediate_size=40, num_hidden_layers=3, num_attention_heads=4,
                               num_key_value_heads=1, attention_bias=True, rope_theta=20000.0),
    "linear-rope-scaling": dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2,
                                num_key_value_heads=2, rope_scaling={"rope_type": "linear", "factor": 2.0}),
}


def make_gpt2(name: str, seed: int = 0) -> GPT2LMHeadModel:
    cfg = GPT2Config(vocab_size=VOCAB, bos_token_id=0, eos_token_id=0, **GPT2_CONFIGS[name])
    return spread(GPT2LMHeadModel(cfg), seed)


def make_llama(name: str, seed: int = 0) -> LlamaForCausalLM:
    cfg = LlamaConfig(vocab_size=VOCAB, max_position_embeddings=64, bos_token_id=1, eos_token_id=2,
                      **LLAMA_CONFIGS[name])
    return spread(LlamaForCausalLM(cfg), seed)


def save(model: torch.nn.Module, tokenizer, folder, dtype: torch.dtype = torch.float32, **kwargs) -> torch.nn.Module:
    """save_pretrained in `dtype` plus tokenizer.json; returns the reference to compare with: the saved weights
    (rounded to `dtype`) loaded back into a float32 model. (Casting the model back would not do: its RoPE frequency
    buffer would stay rounded too.)"""
    model.to(dtype).save_pretrained(folder, **kwargs)
    tokenizer.save(str(folder / "tokenizer.json"))
    if dtype == torch.float32:
        return model
    return type(model).from_pretrained(folder, dtype=torch.float32).eval()


def hf_logits(model: torch.nn.Module, ids: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor(ids)[None]).logits[0].numpy()


def assert_matches(model: torch.nn.Module, ours: slm.Model, tokenizer, prompt: str = "Once upon a time, Lily") -> None:
    ids = np.array(tokenizer.encode(prompt).ids)
    assert ids.tolist() == ours.tokenizer.encode(prompt).ids
    rng = np.random.default_rng(0)
    for tokens in (ids, rng.integers(0, VOCAB, ours.cfg.n_ctx)):  # also the full context, random ids
        expected = hf_logits(model, tokens)
        actual = ours.forward(tokens).logits
        assert actual.dtype == np.float32
        np.testing.assert_allclose(actual, expected, atol=1e-4, rtol=0)
    with torch.no_grad():
        out = model.generate(torch.tensor(ids)[None], max_new_tokens=20, do_sample=False, pad_token_id=0,
                             eos_token_id=None)
    expected = out[0, len(ids):].tolist()
    ours_tokens = [step.token for step in slm.generate(ours, ids, 20, temperature=0)]
    assert ours_tokens == expected
    assert len(set(expected)) > 1  # a real sequence, not one token repeated


@pytest.mark.parametrize("name", GPT2_CONFIGS)
def test_gpt2_matches_transformers(name, tmp_path, gpt2_tokenizer):
    model = save(make_gpt2(name), gpt2_tokenizer, tmp_path)
    ours = slm.load(tmp_path)
    assert ours.cfg.tied == GPT2_CONFIGS[name].get("tie_word_embeddings", True)
    assert ours.meta["name"] == tmp_path.name and "GPT2LMHeadModel" in ours.meta["source"]
    assert_matches(model, ours, gpt2_tokenizer)


@pytest.mark.parametrize("name", LLAMA_CONFIGS)
def test_llama_matches_transformers(name, tmp_path, llama_tokenizer):
    model = save(make_llama(name), llama_tokenizer, tmp_path)
    ours = slm.load(tmp_path)
    spec = LLAMA_CONFIGS[name]
    assert (ours.cfg.n_kv_heads, ours.cfg.tied, ours.cfg.bias) == (
        spec["num_key_value_heads"], spec.get("tie_word_embeddings", False),
        spec.get("attention_bias", False))
    assert ours.tokenizer.encode("hi").ids[0] == 1  # BOS, as Llama's template adds it
    assert_matches(model, ours, llama_tokenizer)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_half_precision_checkpoints_compute_in_float32(kind, dtype, tmp_path, gpt2_tokenizer, llama_tokenizer):
    tokenizer = gpt2_tokenizer if kind == "gpt2" else llama_tokenizer
    original = make_gpt2("tied", seed=1) if kind == "gpt2" else make_llama("gqa-untied-theta", seed=1)
    model = save(original, tokenizer, tmp_path, dtype)
    with safetensors.safe_open(tmp_path / "model.safetensors", "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {dtype}  # noqa: SIM118 (safe_open has no __iter__)
    ours = slm.load(tmp_path)
    assert ours.dtype == np.float32 and str(dtype).split(".")[1] in ours.meta["source"]
    assert_matches(model, ours, tokenizer)


def test_sharded_zip_and_mapping_sources(tmp_path, llama_tokenizer):
    folder = tmp_path / "tiny-llama"
    model = save(make_llama("gqa-untied-theta", seed=2), llama_tokenizer, folder, max_shard_size="40KB")
    assert (folder / "model.safetensors.index.json").exists()
    reference = slm.load(folder)
    files = {f"tiny-llama/{p.name}": p.read_bytes() for p in folder.iterdir()}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
    (tmp_path / "tiny.zip").write_bytes(buffer.getvalue())
    tokens = np.array(llama_tokenizer.encode("a big red ball").ids)
    expected = hf_logits(model, tokens)
    # a zip's path names the model; its bytes, alone or as the one file of a mapping (as the page hands a dropped
    # zip over), carry no name of their own: the folder inside names it
    for source, name in ((files, "tiny-llama"), (buffer.getvalue(), "tiny-llama"), (tmp_path / "tiny.zip", "tiny"),
                         ({"tiny.zip": buffer.getvalue()}, "tiny-llama")):
        ours = slm.load(source)
        assert ours.meta["name"] == name
        np.testing.assert_allclose(ours.forward(tokens).logits, expected, atol=1e-4, rtol=0)
        assert all(np.array_equal(ours.params[k], v) for k, v in reference.params.items())
    # loose files (a picker's selection) carry no folder name: the architecture and size name the model
    loose = slm.load({name.split("/")[-1]: data for name, data in files.items()})
    cfg = loose.cfg
    assert loose.meta["name"] == f"llama {cfg.n_layers}x{cfg.n_heads} d{cfg.n_model}"


def test_gpt2_vocab_and_merges_instead_of_tokenizer_json(tmp_path, gpt2_tokenizer):
    model = save(make_gpt2("tied"), gpt2_tokenizer, tmp_path)
    (tmp_path / "tokenizer.json").unlink()
    gpt2_tokenizer.model.save(str(tmp_path))
    ours = slm.load(tmp_path)
    assert_matches(model, ours, gpt2_tokenizer)


def test_npz_round_trip_keeps_the_tokenizer_and_dtype(tmp_path, llama_tokenizer):
    save(make_llama("mha-tied"), llama_tokenizer, tmp_path)
    ours = slm.load(tmp_path, name="my llama")
    assert ours.meta["name"] == "my llama"
    buffer, plain = io.BytesIO(), io.BytesIO()
    ours.save(buffer)
    ours.save(plain, compress=False)  # as the page keeps models: the same file, without zlib
    assert zipfile.ZipFile(plain).infolist()[0].compress_type == zipfile.ZIP_STORED
    (tmp_path / "mine.npz").write_bytes(buffer.getvalue())
    text = "Lily's ball 😀\n"
    for source in (buffer.getvalue(), tmp_path / "mine.npz", {"mine.npz": buffer.getvalue()}, plain.getvalue()):
        again = slm.load(source)
        assert again.meta["name"] == "my llama" and again.dtype == np.float32
        assert again.tokenizer.encode(text) == ours.tokenizer.encode(text)
        assert np.array_equal(again.forward(np.arange(10)).logits, ours.forward(np.arange(10)).logits)
    wide = slm.Model(ours.cfg, {k: v.astype(np.float64) for k, v in ours.params.items()}, ours.meta, ours.tokenizer)
    wide.save(tmp_path / "wide.npz")
    assert slm.load(tmp_path / "wide.npz").dtype == np.float64  # a file keeps its dtype
    assert slm.load(tmp_path / "wide.npz", dtype=np.float32).dtype == np.float32


def test_shipped_still_loads():
    model = slm.load("shipped")
    assert model.dtype == np.float64 and model.tokenizer is not None and model.meta["name"]
    assert slm.load("shipped", dtype=None).dtype == np.float32


# ---- in place: the weights stay in the caller's bytearrays (the page's one copy of a dropped file) ----

@pytest.mark.parametrize("kind, name", [("gpt2", "tied"), ("gpt2", "untied-inner-eps-relu"),
                                        ("llama", "gqa-untied-theta"), ("llama", "mqa-attention-bias")])
def test_in_place_loading_keeps_the_weights_in_the_given_buffers(kind, name, tmp_path, gpt2_tokenizer,
                                                                 llama_tokenizer):
    tokenizer = gpt2_tokenizer if kind == "gpt2" else llama_tokenizer
    model = save(make_gpt2(name) if kind == "gpt2" else make_llama(name), tokenizer, tmp_path)
    files = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    reference = slm.load(files)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == files  # without in_place nothing is written
    handed = {key: bytearray(data) for key, data in files.items()}
    ours = slm.load(handed, in_place=True)
    weights = np.frombuffer(handed["model.safetensors"], np.uint8)
    for key, value in reference.params.items():
        np.testing.assert_array_equal(ours.params[key], value, err_msg=key)
        assert ours.params[key].flags.c_contiguous and ours.params[key].flags.writeable, key
    shared = [key for key, value in ours.params.items() if np.shares_memory(value, weights)]
    made = ("ffn.b_in", "ffn.b_out") if kind == "llama" else ()  # Llama's zero feed-forward biases: not in the file
    assert sorted(shared) == sorted(k for k in ours.params if not k.endswith(made))
    assert_matches(model, ours, tokenizer)
    # read-only bytes, or half precision: copies, the same numbers
    assert all(not np.shares_memory(v, weights) for v in slm.load(files, in_place=True).params.values())


def test_in_place_loading_leaves_a_file_mostly_not_weights_alone(tmp_path, llama_tokenizer):
    """Views would keep the whole buffer alive: a file holding more than the weights (here a big unused tensor is
    ignored as rotary_emb.inv_freq) is copied from, and its bytes can go."""
    save(make_llama("mha-tied"), llama_tokenizer, tmp_path)
    tensors = safetensors.numpy.load_file(tmp_path / "model.safetensors")
    tensors["model.layers.0.self_attn.rotary_emb.inv_freq"] = np.ones(10 ** 6, np.float32)
    safetensors.numpy.save_file(tensors, tmp_path / "model.safetensors")
    handed = {p.name: bytearray(p.read_bytes()) for p in tmp_path.iterdir()}
    ours = slm.load(handed, in_place=True)
    weights = np.frombuffer(handed["model.safetensors"], np.uint8)
    assert not any(np.shares_memory(value, weights) for value in ours.params.values())


def test_transpose_in_place_by_blocks_and_cycles():
    rng = np.random.default_rng(0)
    for m, n, block in [(32000, 8, 1 << 16), (6, 4, 16), (7, 5, 16), (12, 1, 8), (1, 9, 4), (100, 37, 400), (0, 3, 8)]:
        value = rng.standard_normal((m, n)).astype(np.float32)
        held = value.copy()
        out = hf._transpose_in_place(held, block)
        assert out is not None and out.flags.c_contiguous and (m == 0 or np.shares_memory(out, held))
        np.testing.assert_array_equal(out, value.T)
    assert hf._transpose_in_place(np.zeros((100_003, 4), np.float32), 64) is None  # a prime: too many steps


def test_npz_in_place_keeps_the_arrays_in_the_buffer(tmp_path, llama_tokenizer):
    save(make_llama("gqa-untied-theta"), llama_tokenizer, tmp_path)
    model = slm.load(tmp_path)
    plain, packed = io.BytesIO(), io.BytesIO()
    model.save(plain, compress=False)
    model.save(packed)
    for data, kept in ((plain.getvalue(), True), (packed.getvalue(), False)):
        buffer = bytearray(data)
        again = slm.Model.load(buffer, in_place=True)
        whole = np.frombuffer(buffer, np.uint8)
        assert all(np.shares_memory(v, whole) == kept for v in again.params.values())
        assert all(v.flags.aligned and v.flags.writeable for v in again.params.values())
        for key, value in model.params.items():
            np.testing.assert_array_equal(again.params[key], value)
        assert again.tokenizer.encode("Lily") == model.tokenizer.encode("Lily") and again.meta == model.meta
        assert slm.load({"m.npz": bytearray(data)}, in_place=True).cfg == model.cfg
    # a damaged member fails its CRC: read the usual way, which names the damage
    damaged = bytearray(plain.getvalue())
    damaged[len(damaged) // 2] ^= 0xFF
    with pytest.raises(ValueError, match="not a saved slm model"):
        slm.Model.load(damaged, in_place=True)


# ---- the safetensors reader against the safetensors library ----

def test_safetensors_reader_matches_the_library(tmp_path):
    rng = np.random.default_rng(0)
    tensors = {"a": torch.tensor(rng.standard_normal((3, 5)), dtype=torch.float32),
               "b": torch.tensor(rng.standard_normal(7) * 1000, dtype=torch.float16),
               "c": torch.tensor(rng.standard_normal((2, 3, 4)) * 1e-3, dtype=torch.bfloat16),
               "scalar": torch.tensor(1.5, dtype=torch.bfloat16), "empty": torch.zeros((0, 4))}
    safetensors.torch.save_file(tensors, tmp_path / "t.safetensors", metadata={"format": "pt"})
    data = (tmp_path / "t.safetensors").read_bytes()
    for source in (data, tmp_path / "t.safetensors", io.BytesIO(data)):
        with SafetensorsFile(source) as f:
            assert f.metadata == {"format": "pt"} and sorted(f.keys()) == sorted(tensors)
            for key, value in tensors.items():
                ours = f.tensor(key)
                assert ours.dtype == np.float32 and ours.shape == tuple(value.shape)
                assert np.array_equal(ours, value.to(torch.float32).numpy())  # widening is exact


def test_safetensors_reader_reads_only_the_header_on_opening(tmp_path):
    safetensors.numpy.save_file({"w": np.ones((1000, 100), np.float32)}, tmp_path / "big.safetensors")

    class Counting(io.BytesIO):
        read_bytes = 0

        def read(self, n=-1):
            out = super().read(n)
            Counting.read_bytes += len(out)
            return out

    f = SafetensorsFile(Counting((tmp_path / "big.safetensors").read_bytes()))
    assert f.n_values() == 100_000 and Counting.read_bytes < 200


def st_bytes(header: dict, data: bytes = b"") -> bytes:
    head = json.dumps(header).encode()
    return struct.pack("<Q", len(head)) + head + data


@pytest.mark.parametrize("data, message", [
    (b"abc", "not a safetensors file (only 3 bytes)"),
    (struct.pack("<Q", 10 ** 6) + b"{}", "a header of 1000000 bytes in a file of 10"),
    (st_bytes({"x": 1})[:8] + b"[" + st_bytes({"x": 1})[9:], "not valid JSON"),
    (st_bytes({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 4), "the file is truncated"),
    (st_bytes({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 8), "do not hold its 8 bytes"),
    (st_bytes({"w": {"dtype": "Q9", "shape": [1], "data_offsets": [0, 1]}}, b"\0"), "unknown dtype 'Q9'"),
    (st_bytes({"w": {"dtype": "F32"}}), "tensor w has a malformed header entry"),
])
def test_safetensors_reader_names_bad_files(data, message):
    with pytest.raises(ValueError) as info:
        SafetensorsFile(data, "m.safetensors")
    assert message in str(info.value) and "m.safetensors" in str(info.value)


def test_safetensors_reader_refuses_other_dtypes_naming_the_tensor():
    f = SafetensorsFile(st_bytes({"step": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}}, b"\0" * 8))
    with pytest.raises(ValueError, match="tensor step has dtype I64; slm reads F32, F16 and BF16"):
        f.tensor("step")


# ---- bad checkpoints: each error names the file or field and the reason ----

@pytest.fixture
def tiny_gpt2(tmp_path, gpt2_tokenizer):
    save(make_gpt2("tied"), gpt2_tokenizer, tmp_path)
    return {p.name: p.read_bytes() for p in tmp_path.iterdir()}


@pytest.fixture
def tiny_llama(tmp_path, llama_tokenizer):
    save(make_llama("gqa-untied-theta"), llama_tokenizer, tmp_path)
    return {p.name: p.read_bytes() for p in tmp_path.iterdir()}


def with_config(files: dict, **changes) -> dict:
    config = json.loads(files["config.json"])
    for key, value in changes.items():
        if value is ...:
            config.pop(key, None)
        else:
            config[key] = value
    return {**files, "config.json": json.dumps(config).encode()}


@pytest.mark.parametrize("changes, message", [
    (dict(model_type="bert"), "model_type 'bert' is not supported"),
    (dict(architectures=["LlamaForSequenceClassification"]), "architectures ['LlamaForSequenceClassification']"),
    (dict(sliding_window=128), "sliding_window=128 is not supported"),
    (dict(use_alibi=True), "use_alibi=True is not supported"),
    (dict(rope_parameters={"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4}), "rope scaling of type 'yarn'"),
    (dict(rope_parameters=..., rope_scaling={"type": "dynamic", "factor": 2.0}), "rope scaling of type 'dynamic'"),
    (dict(mlp_bias=True), "mlp_bias=True is not supported"),
    (dict(hidden_act="gelu"), "hidden_act='gelu' is not supported"),
    (dict(head_dim=16), "head_dim=16 is not supported"),
    (dict(num_attention_heads=0), "num_attention_heads must be a positive integer"),
    (dict(hidden_size=4096, head_dim=..., num_attention_heads=32, intermediate_size=11008, num_hidden_layers=32),
     # 32 x (2 x 4096² + 2 x 4096 x 256 (2 kv heads) + 3 x 4096 x 11008 + 2 x 4096) + 2 x 400 x 4096 + 4096
     "config.json: the model has 5472.9M parameters; slm loads up to 200M"),
    (dict(num_key_value_heads=4), "config.json: Config.n_kv_heads (4) must divide Config.n_heads (6)"),
    # GPT-2 small's size (~124M with its 50k vocabulary; here 12 layers of d = 768 with 400 tokens: 85M) passes the
    # count and reaches the weights; 12 layers of d = 1024, d_ff = 4096 do not:
    # 12 x (4 x 1024² + 3 x 1024 x 4096 + 2 x 1024) + 2 x 400 x 1024 + 1024 = 202,171,392.
    (dict(hidden_size=768, head_dim=..., num_attention_heads=12, num_key_value_heads=12, intermediate_size=3072,
          num_hidden_layers=12), "model.safetensors: missing tensor(s)"),
    (dict(hidden_size=1024, head_dim=..., num_attention_heads=16, num_key_value_heads=16, intermediate_size=4096,
          num_hidden_layers=12), "config.json: the model has 202.2M parameters; slm loads up to 200M"),
])
def test_unsupported_llama_config_fields_are_named(tiny_llama, changes, message):
    with pytest.raises(ValueError) as info:
        slm.load(with_config(tiny_llama, **changes))
    assert message in str(info.value)


@pytest.mark.parametrize("changes, message", [
    (dict(activation_function="gelu_fast"), "activation_function='gelu_fast' is not supported"),
    (dict(scale_attn_by_inverse_layer_idx=True), "scale_attn_by_inverse_layer_idx=True is not supported"),
    (dict(add_cross_attention=True), "add_cross_attention=True is not supported"),
    (dict(n_embd=64), "tensor transformer.h.0.attn.c_attn.bias has shape [96], config.json says [192]"),
    (dict(n_layer=3), "missing tensor(s) transformer.h.2."),
    (dict(n_layer=1), "unexpected tensor(s) transformer.h.1."),
    (dict(vocab_size=100), "the tokenizer has 400 tokens but the model's vocab_size is 100"),
])
def test_unsupported_or_mismatched_gpt2_config_is_named(tiny_gpt2, changes, message):
    with pytest.raises(ValueError) as info:
        slm.load(with_config(tiny_gpt2, **changes))
    assert message in str(info.value)


def replace_tensor(files: dict, key: str, value: np.ndarray) -> dict:
    tensors = safetensors.numpy.load(files["model.safetensors"])
    tensors[key] = value
    return {**files, "model.safetensors": safetensors.numpy.save(tensors)}


def test_bad_weights_are_named(tiny_gpt2):
    nan = np.ones((32,), np.float32)
    nan[3] = np.nan
    with pytest.raises(ValueError, match=r"model.safetensors: tensor transformer.ln_f.weight holds NaN"):
        slm.load(replace_tensor(tiny_gpt2, "transformer.ln_f.weight", nan))
    with pytest.raises(ValueError, match="tensor transformer.ln_f.weight has dtype I32"):
        slm.load(replace_tensor(tiny_gpt2, "transformer.ln_f.weight", np.ones(32, np.int32)))
    truncated = {**tiny_gpt2, "model.safetensors": tiny_gpt2["model.safetensors"][:-100]}
    with pytest.raises(ValueError, match="model.safetensors: the file is truncated"):
        slm.load(truncated)


@pytest.mark.parametrize("drop, add, message", [
    (["config.json"], {}, "no config.json"),
    (["model.safetensors"], {}, "no weights: expected model.safetensors"),
    (["model.safetensors"], {"pytorch_model.bin": b"x"}, "only PyTorch pickles (.bin/.pt) were given"),
    (["tokenizer.json"], {}, "no tokenizer: expected tokenizer.json, or vocab.json and merges.txt"),
    (["tokenizer.json"], {"tokenizer.model": b"x"}, "tokenizer.model (a SentencePiece model) is not read"),
    ([], {"config.json": b"{nope"}, "config.json is not valid JSON"),
    ([], {"tokenizer.json": b'{"model": {"type": "Unigram", "vocab": []}}'}, "tokenizer.json: model type 'Unigram'"),
    ([], {"model.safetensors.index.json": b'{"weight_map": {"a": "s-1.safetensors"}}'}, None),
    (["model.safetensors"], {"model.safetensors.index.json": b'{"weight_map": {"a": "s-1.safetensors"}}'},
     "names shard(s) that are missing: s-1.safetensors"),
    ([], {"sub/config.json": b"{}"}, "two files named config.json"),
])
def test_bad_file_sets_are_named(tiny_gpt2, drop, add, message):
    files = {k: v for k, v in tiny_gpt2.items() if k not in drop}
    files.update(add)
    if message is None:  # an index beside model.safetensors is not needed: model.safetensors wins
        slm.load(files)
        return
    with pytest.raises(ValueError) as info:
        slm.load(files)
    assert message in str(info.value)


def test_bad_sources_are_named(tmp_path):
    with pytest.raises(ValueError, match="not a zip file"):
        slm.load(b"these bytes are neither an .npz nor a .zip")
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        slm.load(tmp_path / "missing")
    (tmp_path / "ckpt.pt").write_bytes(b"x")
    with pytest.raises(ValueError, match="python -m slm.convert ckpt.pt"):
        slm.load(tmp_path / "ckpt.pt")
    with pytest.raises(ValueError, match="not int"):
        slm.load(3)
    model = slm.Model.init(slm.Config(n_vocab=5, n_ctx=4, n_model=4, n_heads=2), dtype=np.float32)
    model.params["tok_emb"][2, 1] = np.nan
    model.save(tmp_path / "nan.npz")
    with pytest.raises(ValueError, match="the weight tok_emb holds NaN"):
        slm.load(tmp_path / "nan.npz")


def test_rope_rows_by_hand():
    # head size 4: HF pairs coordinates (0, 2) and (1, 3); slm pairs (0, 1) and (2, 3)
    assert hf._rope_rows(2, 4).tolist() == [0, 2, 1, 3, 4, 6, 5, 7]


def test_gelu_erf_by_hand():
    x = np.array([-6.0, -3.0, -1.0, -0.1, 0.0, 0.5, 1.0, 2.5, 8.0])
    exact = np.array([v / 2 * math.erfc(-v / math.sqrt(2)) for v in x])  # x·Φ(x), Φ through the standard library
    np.testing.assert_allclose(layers.gelu_erf(x), exact, rtol=2e-7, atol=1e-12)
    assert layers.gelu_erf(x.astype(np.float32)).dtype == np.float32
    assert abs(layers.gelu(np.array([1.0]))[0] - exact[6]) > 1e-4  # the tanh approximation is a different function


# ---- nanoGPT checkpoints through python -m slm.convert ----

def nanogpt_checkpoint(folder, *, bias: bool, vocab: int, compiled: bool = False, seed: int = 0):
    """A nanoGPT-style ckpt.pt and the GPT2LMHeadModel (exact GELU) with the same weights, to compare with.

    nanoGPT's names are GPT-2's, but its Linear weights are (out, in) where GPT-2's Conv1D stores (in, out); with
    bias=False it has no biases at all (nor LayerNorm biases), so the reference's biases are zeroed."""
    args = dict(n_layer=2, n_head=4, n_embd=32, block_size=48, bias=bias, vocab_size=vocab, dropout=0.0)
    reference = spread(GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_positions=48, n_embd=32, n_layer=2, n_head=4,
                                                  activation_function="gelu")), seed)
    state = {}
    with torch.no_grad():
        for key, value in reference.state_dict().items():
            if key.endswith(".attn.bias") or key == "lm_head.weight":
                continue
            if key.endswith(".bias") and not bias:
                value.zero_()
                continue
            conv1d = key.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight"))
            state[key] = value.T.clone() if conv1d else value.clone()
    state["lm_head.weight"] = state["transformer.wte.weight"]  # tied, as nanoGPT's
    if compiled:  # torch.compile's wrapper prefixes every name
        state = {f"_orig_mod.{k}": v for k, v in state.items()}
    torch.save({"model": state, "model_args": args, "iter_num": 250, "best_val_loss": torch.tensor(1.25),
                "config": {"dataset": "test"}}, folder / "ckpt.pt")
    return reference.eval()


def test_convert_char_model_matches(tmp_path):
    chars = sorted(set(CHAR_TEXT))
    with open(tmp_path / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": len(chars), "itos": dict(enumerate(chars)),
                     "stoi": {c: i for i, c in enumerate(chars)}}, f)
    reference = nanogpt_checkpoint(tmp_path, bias=True, vocab=len(chars), compiled=True)
    argv = [str(tmp_path / "ckpt.pt"), str(tmp_path / "out.npz"), "--meta", str(tmp_path / "meta.pkl")]
    assert convert.main(argv) == 0
    model = slm.load(tmp_path / "out.npz")
    assert model.meta == {"name": "ckpt", "source": "nanoGPT checkpoint ckpt.pt (iteration 250)"}
    assert model.cfg.activation == "gelu_erf" and model.cfg.tied and model.dtype == np.float32
    ids = np.array(model.tokenizer.encode("First Citizen:").ids)
    assert model.tokenizer.decode(ids) == "First Citizen:"
    np.testing.assert_allclose(model.forward(ids).logits, hf_logits(reference, ids), atol=1e-4, rtol=0)
    with torch.no_grad():
        out = reference.generate(torch.tensor(ids)[None], max_new_tokens=10, do_sample=False, pad_token_id=0)
    assert [s.token for s in slm.generate(model, ids, 10, temperature=0)] == out[0, len(ids):].tolist()


CHAR_TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\nAll: Speak, speak!"


def test_convert_gpt2_bpe_model_without_bias_matches(tmp_path, gpt2_tokenizer):
    gpt2_tokenizer.model.save(str(tmp_path))
    reference = nanogpt_checkpoint(tmp_path, bias=False, vocab=VOCAB + 4)  # nanoGPT pads its vocabulary
    # the module's entry point, as a user runs it
    done = subprocess.run([sys.executable, "-m", "slm.convert", str(tmp_path / "ckpt.pt"), str(tmp_path / "g.npz"),
                           "--vocab", str(tmp_path / "vocab.json"), "--merges", str(tmp_path / "merges.txt"),
                           "--name", "tiny gpt"], capture_output=True, text=True, env={"PYTHONPATH": "py"}, check=False)
    assert done.returncode == 0, done.stderr
    assert "wrote" in done.stdout and "2 layers" in done.stdout
    model = slm.load(tmp_path / "g.npz")
    assert model.meta["name"] == "tiny gpt" and not model.cfg.bias
    assert_matches(reference, model, gpt2_tokenizer)


def test_convert_errors_name_what(tmp_path, capsys):
    chars = list("abc")
    with open(tmp_path / "meta.pkl", "wb") as f:
        pickle.dump({"itos": dict(enumerate(chars))}, f)
    nanogpt_checkpoint(tmp_path, bias=True, vocab=8)
    ckpt, out, meta = str(tmp_path / "ckpt.pt"), str(tmp_path / "o.npz"), str(tmp_path / "meta.pkl")
    cases = [
        ([ckpt, out], "give the tokenizer: either meta.pkl, or both vocab.json and merges.txt"),
        ([ckpt, out, "--meta", meta, "--vocab", "v.json"], "give the tokenizer"),
        ([str(tmp_path / "meta.pkl"), out, "--meta", meta], "meta.pkl: not a PyTorch checkpoint"),
        ([str(tmp_path / "nope.pt"), out, "--meta", meta], "nope.pt"),
    ]
    for argv, message in cases:
        assert convert.main(argv) == 1
        assert message in capsys.readouterr().err
    state = torch.load(ckpt, weights_only=True)
    for change, message in [
        (lambda c: c["model_args"].pop("n_head"), "model_args lacks n_head"),
        (lambda c: c["model_args"].update(n_head=5), "model_args: Config.n_model (32) must be divisible"),
        (lambda c: c["model"].pop("transformer.h.1.mlp.c_fc.weight"), "has no transformer.h.1.mlp.c_fc.weight"),
        (lambda c: c["model"].update(extra=torch.zeros(2)), "tensors nanoGPT's model does not: extra"),
        (lambda c: c["model"]["transformer.ln_f.weight"].fill_(float("nan")), "transformer.ln_f.weight holds NaN"),
        (lambda c: c["model_args"].update(vocab_size=2), "the tokenizer has 3 tokens, the model's vocab_size is 2"),
        (lambda c: c.pop("model_args"), "not a nanoGPT checkpoint (expected the keys 'model' and 'model_args')"),
    ]:
        broken = {**state, "model": dict(state["model"]), "model_args": dict(state["model_args"])}
        broken["model"] = {k: v.clone() for k, v in state["model"].items()}
        change(broken)
        torch.save(broken, tmp_path / "bad.pt")
        with pytest.raises(ValueError) as info:
            convert.convert(tmp_path / "bad.pt", meta_pkl=meta)
        assert message in str(info.value)
    (tmp_path / "m2.pkl").write_bytes(pickle.dumps({"vocab": 3}))
    with pytest.raises(ValueError, match="m2.pkl: not nanoGPT's meta.pkl"):
        convert.convert(ckpt, meta_pkl=tmp_path / "m2.pkl")
