"""GGUF files (llama.cpp's and ollama's format) as slm Models: the Config from the file's metadata, the weights
dequantized to float32, and the tokenizer its metadata describes. The file is read by `gguf`, llama.cpp's own Python
package, imported only here and only when a file is read (a page that never opens a .gguf never imports it).

Architectures: `gpt2`, `llama` and `gptneox`, with the tensor names and layouts llama.cpp's converter
(convert_hf_to_gguf.py) writes. Its `llama` q and k rows are reordered per head so that coordinates 2i and 2i + 1
are a RoPE pair, which is slm's own layout, so they are taken as they are; `gptneox` keeps transformers' layout
(i pairs with i + r/2) and is reordered as slm.hf reorders a checkpoint. Weight types: TYPES, each dequantized on
load by `gguf.quants.dequantize`. Tokenizers: `gpt2` (byte-level BPE with its merges, split by the rules its
`tokenizer.ggml.pre` names) and `llama` (SentencePiece BPE: the pieces and their scores; a pair of pieces merges
when their concatenation is a piece, the highest score first; byte fallback to `<0xNN>` pieces), built as the
tokenizer.json object slm.bpe reads. Anything else is a ValueError naming the key, tensor or type.

A file given as bytes is written to a temporary file (Pyodide's is in memory, outside the wasm heap) and mapped
from there, which is what the reader takes; with in_place=True the caller's bytearray is emptied once written, so
the file is held once in the wasm heap while its weights are read.
"""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from . import bpe
from .config import Config
from .model import Model
from .params import MAX_PARAMS, all_finite, count_params

MAGIC = b"GGUF"
ARCHITECTURES = ("gpt2", "llama", "gptneox")
# The weight types read (dequantized to float32 by gguf.quants); what small-model files hold: the float types, the
# legacy block types and the K types llama-quantize writes (a Q4_K_M file holds Q4_K and Q6_K tensors, and Q5_0 or
# IQ4_NL where a row is not a multiple of 256 values), and IQ4_XS.
TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
         "IQ4_NL", "IQ4_XS")
# tokenizer.ggml.token_type values (llama.cpp's llama_token_type)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
METASPACE = "▁"


def is_gguf(source: Any) -> bool:
    """Whether bytes or a file start with GGUF's magic."""
    if isinstance(source, bytes | bytearray | memoryview):
        return bytes(source[:4]) == MAGIC
    try:
        with open(source, "rb") as f:
            return f.read(4) == MAGIC
    except (OSError, TypeError):
        return False


def load_gguf(source: Any, file_name: str | None = None, in_place: bool = False) -> Model:
    """A Model (float32) with its tokenizer from a GGUF file: its path, or its bytes (`file_name` names them in
    messages, and the model when its metadata has no general.name). ValueError names the file and the reason for
    anything it cannot load. `in_place=True` lets a given bytearray be emptied once it is written to the temporary
    file the reader maps (the caller must not use it afterwards)."""
    if isinstance(source, str | os.PathLike):
        file_name = file_name or Path(source).name
    label = file_name or "the GGUF file"
    with _reader(source, label, in_place) as reader:
        meta = _metadata(reader, label)
        arch = meta.get("general.architecture")
        if arch not in ARCHITECTURES:
            raise ValueError(f"{label}: general.architecture {arch!r} is not supported (slm reads "
                             f"{', '.join(repr(a) for a in ARCHITECTURES)})")
        tensors = {t.name: t for t in reader.tensors}
        cfg = _config(meta, arch, tensors, label)
        n = count_params(cfg)
        if n > MAX_PARAMS:
            raise ValueError(f"{label}: the model has {n / 1e6:.1f}M parameters; slm loads up to "
                             f"{MAX_PARAMS // 1_000_000}M (a browser tab's memory)")
        tokenizer = _tokenizer(meta, label)
        if len(tokenizer.vocab) > cfg.n_vocab:
            raise ValueError(f"{label}: the tokenizer has {len(tokenizer.vocab)} tokens but token_embd has "
                             f"{cfg.n_vocab} rows")
        params, types = _weights(cfg, arch, tensors, label)
    stem = Path(file_name).stem if file_name else None
    info = {"name": meta.get("general.name") or stem or f"{arch} {cfg.n_layers}x{cfg.n_heads} d{cfg.n_model}",
            "source": f"GGUF {arch} ({', '.join(sorted(types, key=TYPES.index))})"}
    for key in ("bos_token_id", "eos_token_id"):
        if isinstance(meta.get(f"tokenizer.ggml.{key}"), int):
            info[key] = meta[f"tokenizer.ggml.{key}"]
    return Model(cfg, params, info, tokenizer)


@contextlib.contextmanager
def _reader(source: Any, label: str, in_place: bool) -> Iterator[Any]:
    """gguf's GGUFReader over the file (a path is mapped as it is; bytes are written to a temporary file first)."""
    reader_class = _reader_class()
    path, made = source, None
    if isinstance(source, bytes | bytearray | memoryview):
        fd, made = tempfile.mkstemp(suffix=".gguf")
        with os.fdopen(fd, "wb") as f:
            f.write(source)
        if in_place and isinstance(source, bytearray):
            with contextlib.suppress(BufferError):  # a view of it is alive: it stays, as without in_place
                del source[:]
        path = made
    try:
        try:
            reader = reader_class(path)
        except (ValueError, IndexError, KeyError, OverflowError, TypeError) as exc:
            raise ValueError(f"{label}: not a readable GGUF file ({exc})") from None
        yield reader
    finally:
        reader = None
        if made is not None:
            with contextlib.suppress(OSError):  # Windows keeps a mapped file: it goes with the process
                os.unlink(made)


@functools.cache
def _reader_class() -> type:
    try:
        from gguf import GGUFReader  # noqa: PLC0415 - only when a GGUF file is read (the site's start-up never does)
    except ImportError as exc:
        raise ImportError(f"reading a GGUF file needs llama.cpp's gguf package (pip install gguf): {exc}") from None

    class Reader(GGUFReader):
        """GGUFReader over a plain ndarray view of the mapped file: the same bytes, but its slices skip np.memmap's
        Python-level __getitem__ and __array_finalize__, which made reading a 50k-token vocabulary (a few slices
        per string) take seven times as long."""

        @property
        def data(self) -> np.ndarray:
            return self._plain

        @data.setter
        def data(self, value: np.ndarray) -> None:
            self._plain = value.view(np.ndarray)  # keeps the map alive through its base

    return Reader


def _metadata(reader: Any, label: str) -> dict[str, Any]:
    """Every key's value as Python values (strings, numbers, lists)."""
    out = {}
    for key, field in reader.fields.items():
        try:
            out[key] = field.contents()
        except UnicodeDecodeError as exc:
            raise ValueError(f"{label}: metadata {key} is not UTF-8 text ({exc})") from None
    return out


# ---- metadata -> Config ----

def _int(meta: dict[str, Any], key: str, label: str, default: Any = None) -> int:
    value = meta.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{label}: {key} must be a positive integer, got {value!r}")
    return int(value)


def _float(meta: dict[str, Any], key: str, label: str, default: float) -> float:
    value = meta.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"{label}: {key} must be a positive number, got {value!r}")
    return float(value)


def _shape(tensors: dict[str, Any], name: str) -> tuple[int, ...]:
    """A tensor's logical shape in NumPy's order (GGUF lists dimensions innermost first)."""
    return tuple(int(n) for n in reversed(tensors[name].shape.tolist()))


def _config(meta: dict[str, Any], arch: str, tensors: dict[str, Any], label: str) -> Config:
    if "token_embd.weight" not in tensors:
        raise ValueError(f"{label}: no token_embd.weight tensor")
    vocab_size, d_embd = _shape(tensors, "token_embd.weight")
    d = _int(meta, f"{arch}.embedding_length", label)
    if d_embd != d:
        raise ValueError(f"{label}: token_embd.weight has {d_embd} columns, {arch}.embedding_length says {d}")
    h = _int(meta, f"{arch}.attention.head_count", label)
    if d % h:
        raise ValueError(f"{label}: {arch}.embedding_length={d} is not divisible by the head count {h}")
    k = d // h
    for key in (f"{arch}.attention.key_length", f"{arch}.attention.value_length"):
        if key in meta and meta[key] != k:
            raise ValueError(f"{label}: {key}={meta[key]} is not supported (slm's head size is embedding_length / "
                             f"head_count = {k})")
    for key in (f"{arch}.attention.sliding_window", f"{arch}.attention.max_alibi_bias"):
        if meta.get(key):
            raise ValueError(f"{label}: {key}={meta[key]} is not supported (slm attends to every earlier position "
                             "with no ALiBi)")
    common = {"n_vocab": vocab_size, "n_ctx": _int(meta, f"{arch}.context_length", label), "n_model": d,
              "n_heads": h, "n_layers": _int(meta, f"{arch}.block_count", label),
              "d_ff": _int(meta, f"{arch}.feed_forward_length", label, 4 * d), "norm_placement": "pre",
              "tied": "output.weight" not in tensors}
    if arch == "gpt2":
        # GELU as llama.cpp computes it for GPT-2: the tanh approximation (GPT-2's "gelu_new")
        return Config(**common, activation="gelu", norm="layer", positions="learned", bias=True,
                      eps=_float(meta, "gpt2.attention.layer_norm_epsilon", label, 1e-5))
    rope_dims = _int(meta, f"{arch}.rope.dimension_count", label, k)
    base = _float(meta, f"{arch}.rope.freq_base", label, 10000.0)
    if arch == "llama":
        if rope_dims != k:
            raise ValueError(f"{label}: llama.rope.dimension_count={rope_dims} is not supported (slm turns whole "
                             f"heads of {k})")
        kind = meta.get("llama.rope.scaling.type", "none")
        if kind not in ("none", "linear") or "rope_freqs.weight" in tensors:
            raise ValueError(f"{label}: rope scaling {'llama3 (rope_freqs)' if kind in ('none', 'linear') else kind!r}"
                             " is not supported (slm has default and linear RoPE)")
        scale = _float(meta, "llama.rope.scaling.factor", label, 1.0) if kind == "linear" else 1.0
        n_kv = _int(meta, "llama.attention.head_count_kv", label, h)
        return Config(**common, n_kv_heads=n_kv, activation="swiglu", norm="rms", positions="rope", rope_base=base,
                      rope_scale=scale, bias="blk.0.attn_q.bias" in tensors,
                      eps=_float(meta, "llama.attention.layer_norm_rms_epsilon", label, 1e-6))
    if rope_dims > k or rope_dims % 2:
        raise ValueError(f"{label}: gptneox.rope.dimension_count={rope_dims} is not supported (an even number up "
                         f"to the head size {k})")
    # The exact (erf) GELU, as transformers computes Pythia's "gelu" (llama.cpp computes the tanh approximation).
    return Config(**common, activation="gelu_erf", norm="layer", positions="rope", rope_base=base,
                  rotary_dim=None if rope_dims == k else rope_dims,
                  parallel_residual=bool(meta.get("gptneox.use_parallel_residual", True)), bias=True,
                  eps=_float(meta, "gptneox.attention.layer_norm_epsilon", label, 1e-5))


# ---- tensors -> slm's parameters ----

def _plan(cfg: Config, arch: str) -> dict[str, tuple[str, Any]]:
    """slm name -> (GGUF tensor, transform of its float32 NumPy array). GGUF matrices are (out, in), as
    torch.nn.Linear's; slm's feed-forward and unembedding matrices are (in, out)."""
    d, h, k = cfg.n_model, cfg.n_heads, cfg.head_size
    plan: dict[str, tuple[str, Any]] = {"tok_emb": ("token_embd.weight", None),
                                        "norm_f.weight": ("output_norm.weight", None)}
    if cfg.norm == "layer":
        plan["norm_f.bias"] = ("output_norm.bias", None)
    if cfg.positions == "learned":
        plan["pos_emb"] = ("position_embd.weight", None)
    if not cfg.tied:
        plan["unembed"] = ("output.weight", np.transpose)
    if arch == "gptneox":  # the fused rows are [all q; all k; all v] (the converter regroups them so), HF's RoPE layout
        from .hf import _rope_rows  # noqa: PLC0415 - the same reordering as a checkpoint's

        rope = _rope_rows(h, k, cfg.rope_dims)
        rows = {"q": rope, "k": d + rope, "v": 2 * d + np.arange(d)}
    for i in range(cfg.n_layers):
        t, b = f"blk.{i}", f"blocks.{i}"
        plan.update({f"{b}.norm1.weight": (f"{t}.attn_norm.weight", None),
                     f"{b}.norm2.weight": (f"{t}.ffn_norm.weight", None),
                     f"{b}.attn.w_o": (f"{t}.attn_output.weight", None),
                     f"{b}.ffn.w_in": (f"{t}.ffn_up.weight", np.transpose),
                     f"{b}.ffn.w_out": (f"{t}.ffn_down.weight", np.transpose)})
        if arch == "llama":
            plan.update({f"{b}.attn.w_q": (f"{t}.attn_q.weight", None), f"{b}.attn.w_k": (f"{t}.attn_k.weight", None),
                         f"{b}.attn.w_v": (f"{t}.attn_v.weight", None),
                         f"{b}.ffn.w_gate": (f"{t}.ffn_gate.weight", np.transpose)})
            if cfg.bias:  # attention biases; slm's feed-forward biases stay zero, as in a Llama checkpoint
                plan.update({f"{b}.attn.b_{x}": (f"{t}.attn_{x}.bias", None) for x in "qkv"})
                plan.update({f"{b}.attn.b_o": (f"{t}.attn_output.bias", None),
                             f"{b}.ffn.b_in": ("", np.zeros(cfg.d_ff, np.float32)),
                             f"{b}.ffn.b_out": ("", np.zeros(d, np.float32))})
            continue
        for x in ("weight", "bias"):
            plan.update({f"{b}.norm1.{x}": (f"{t}.attn_norm.{x}", None), f"{b}.norm2.{x}": (f"{t}.ffn_norm.{x}", None)})
        plan.update({f"{b}.attn.b_o": (f"{t}.attn_output.bias", None),
                     f"{b}.ffn.b_in": (f"{t}.ffn_up.bias", None), f"{b}.ffn.b_out": (f"{t}.ffn_down.bias", None)})
        for j, x in enumerate("qkv"):
            if arch == "gpt2":
                plan[f"{b}.attn.w_{x}"] = (f"{t}.attn_qkv.weight", lambda w, j=j: w[j * d:(j + 1) * d])
                plan[f"{b}.attn.b_{x}"] = (f"{t}.attn_qkv.bias", lambda w, j=j: w[j * d:(j + 1) * d])
            else:
                plan[f"{b}.attn.w_{x}"] = (f"{t}.attn_qkv.weight", lambda w, x=x: w[rows[x]])
                plan[f"{b}.attn.b_{x}"] = (f"{t}.attn_qkv.bias", lambda w, x=x: w[rows[x]])
    return plan


def _shapes(cfg: Config, arch: str) -> dict[str, tuple[int, ...]]:
    """The NumPy shape each GGUF tensor must have under this config (checked before any data is read)."""
    d, f, V, k = cfg.n_model, cfg.d_ff, cfg.n_vocab, cfg.head_size
    hq, hkv = cfg.n_heads * k, cfg.n_kv_heads * k
    shapes = {"token_embd.weight": (V, d), "position_embd.weight": (cfg.n_ctx, d), "output.weight": (V, d),
              "output_norm.weight": (d,), "output_norm.bias": (d,)}
    for i in range(cfg.n_layers):
        t = f"blk.{i}"
        shapes.update({f"{t}.attn_norm.weight": (d,), f"{t}.attn_norm.bias": (d,), f"{t}.ffn_norm.weight": (d,),
                       f"{t}.ffn_norm.bias": (d,), f"{t}.attn_qkv.weight": (3 * d, d), f"{t}.attn_qkv.bias": (3 * d,),
                       f"{t}.attn_q.weight": (hq, d), f"{t}.attn_k.weight": (hkv, d), f"{t}.attn_v.weight": (hkv, d),
                       f"{t}.attn_q.bias": (hq,), f"{t}.attn_k.bias": (hkv,), f"{t}.attn_v.bias": (hkv,),
                       f"{t}.attn_output.weight": (d, hq), f"{t}.attn_output.bias": (d,),
                       f"{t}.ffn_up.weight": (f, d), f"{t}.ffn_gate.weight": (f, d), f"{t}.ffn_up.bias": (f,),
                       f"{t}.ffn_down.weight": (d, f), f"{t}.ffn_down.bias": (d,)})
    return shapes


def _weights(cfg: Config, arch: str, tensors: dict[str, Any], label: str) -> tuple[dict[str, np.ndarray], set[str]]:
    from gguf import GGMLQuantizationType  # noqa: PLC0415
    from gguf.quants import dequantize  # noqa: PLC0415

    plan = _plan(cfg, arch)
    needed = {name for name, _ in plan.values() if name}
    missing = sorted(needed - set(tensors))
    if missing:
        raise ValueError(f"{label}: missing tensor(s) {', '.join(missing[:5])}{' …' if len(missing) > 5 else ''}")
    extra = sorted(set(tensors) - needed)
    if extra:
        raise ValueError(f"{label}: unexpected tensor(s) {', '.join(extra[:5])}{' …' if len(extra) > 5 else ''} for "
                         f"a {arch} model of this shape")
    shapes = _shapes(cfg, arch)
    for key in sorted(needed):
        kind = GGMLQuantizationType(tensors[key].tensor_type).name
        if kind not in TYPES:
            raise ValueError(f"{label}: tensor {key} has the weight type {kind}, which slm does not read (it reads "
                             f"{', '.join(TYPES)})")
        if _shape(tensors, key) != shapes[key]:
            raise ValueError(f"{label}: tensor {key} has shape {list(_shape(tensors, key))}, the metadata says "
                             f"{list(shapes[key])}")
    uses: dict[str, list[tuple[str, Any]]] = {}
    params: dict[str, np.ndarray] = {}
    for slm_name, (key, how) in plan.items():
        if key:
            uses.setdefault(key, []).append((slm_name, how))
        else:
            params[slm_name] = how
    for key in sorted(needed, key=lambda name: tensors[name].data_offset):  # in file order
        tensor = tensors[key]
        value = np.asarray(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32).reshape(_shape(tensors, key))
        if not all_finite(value):
            raise ValueError(f"{label}: tensor {key} holds NaN or infinite values")
        for slm_name, how in uses[key]:
            # always a copy: nothing may keep a view of the mapped file
            params[slm_name] = np.array(value if how is None else how(value), dtype=np.float32, order="C")
    types = {GGMLQuantizationType(tensors[key].tensor_type).name for key in needed}
    return params, types


# ---- metadata -> tokenizer ----

def _tokenizer(meta: dict[str, Any], label: str) -> bpe.BPETokenizer:
    kind = meta.get("tokenizer.ggml.model")
    if kind is None:
        raise ValueError(f"{label}: no tokenizer in its metadata (tokenizer.ggml.model)")
    if kind not in ("gpt2", "llama"):
        raise ValueError(f"{label}: tokenizer.ggml.model {kind!r} is not supported (slm reads 'gpt2', byte-level "
                         "BPE, and 'llama', SentencePiece BPE)")
    tokens = meta.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list) or not tokens:
        raise ValueError(f"{label}: tokenizer.ggml.tokens is missing or empty")
    types = meta.get("tokenizer.ggml.token_type") or [NORMAL] * len(tokens)
    if len(types) != len(tokens):
        raise ValueError(f"{label}: tokenizer.ggml.token_type has {len(types)} entries for {len(tokens)} tokens")
    try:
        data = (_gpt2_tokenizer if kind == "gpt2" else _spm_tokenizer)(meta, tokens, types)
        return bpe.BPETokenizer(data)
    except ValueError as exc:
        raise ValueError(f"{label}: the tokenizer in its metadata: {str(exc).removeprefix('tokenizer.json: ')}"
                         ) from None


def _vocab(tokens: list[str], types: list[int], first: tuple[int, ...]) -> dict[str, int]:
    """Token text -> id; when two ids share a text, one of the `first` types wins, else the lower id."""
    vocab: dict[str, int] = {}
    for i, (token, kind) in enumerate(zip(tokens, types, strict=True)):
        if kind in first:
            vocab.setdefault(token, i)
    for i, token in enumerate(tokens):
        vocab.setdefault(token, i)
    return vocab


def _added(tokens: list[str], types: list[int], special: tuple[int, ...]) -> list[dict[str, Any]]:
    """Control and user-defined tokens, matched in the raw text before anything else (as llama.cpp does)."""
    return [{"id": i, "content": token, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
             "special": kind in special}
            for i, (token, kind) in enumerate(zip(tokens, types, strict=True)) if kind in (*special, USER_DEFINED)]


def _post_processor(meta: dict[str, Any], tokens: list[str], add_bos: bool) -> dict[str, Any] | None:
    """BOS (and EOS) around each encoded text, as tokenizer.ggml.add_bos_token / add_eos_token say."""
    before: list[dict[str, Any]] = []
    after: list[dict[str, Any]] = []
    specials = {}
    for which, default, side in (("bos", add_bos, before), ("eos", False, after)):
        i = meta.get(f"tokenizer.ggml.{which}_token_id")
        if not meta.get(f"tokenizer.ggml.add_{which}_token", default) or not isinstance(i, int) \
                or not 0 <= i < len(tokens):
            continue
        specials[tokens[i]] = {"id": tokens[i], "ids": [i], "tokens": [tokens[i]]}
        side.append({"SpecialToken": {"id": tokens[i], "type_id": 0}})
    if not specials:
        return None
    return {"type": "TemplateProcessing", "single": [*before, {"Sequence": {"id": "A", "type_id": 0}}, *after],
            "special_tokens": specials}


def _gpt2_tokenizer(meta: dict[str, Any], tokens: list[str], types: list[int]) -> dict[str, Any]:
    merges = meta.get("tokenizer.ggml.merges")
    if not isinstance(merges, list):
        raise ValueError("tokenizer.ggml.merges is missing (a 'gpt2' tokenizer lists its merges)")
    rules = _split_rules(meta.get("tokenizer.ggml.pre", "default"))
    return {
        "version": "1.0", "added_tokens": _added(tokens, types, (CONTROL,)), "normalizer": rules["normalizer"],
        "pre_tokenizer": rules["pre_tokenizer"],
        "post_processor": _post_processor(meta, tokens, rules["add_bos"]),
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": rules["ignore_merges"], "vocab": _vocab(tokens, types, (NORMAL,)),
                  "merges": [m.split(" ", 1) for m in merges]},
    }


def _split_rules(name: str) -> dict[str, Any]:
    """What a `tokenizer.ggml.pre` name stands for (normalizer, pre_tokenizer, ignore_merges, add_bos): slm.bpe's
    table of llama.cpp's names when it has one, else GPT-2's rules for "gpt-2"."""
    table = getattr(bpe, "pre_tokenizer_for_gguf", None)
    if table is not None:
        return table(name)
    if name == "gpt-2":
        return {"normalizer": None, "ignore_merges": False, "add_bos": False,
                "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                  "use_regex": True}}
    raise ValueError(f"tokenizer.ggml.pre {name!r} is not supported (slm reads 'gpt-2')")


def _spm_tokenizer(meta: dict[str, Any], tokens: list[str], types: list[int]) -> dict[str, Any]:
    """SentencePiece BPE as a BPE with merges: every split of a normal piece into two normal pieces is a merge,
    ranked by the piece's score (highest first; equal scores by id, as the pieces were made)."""
    scores = meta.get("tokenizer.ggml.scores") or [0.0] * len(tokens)
    if len(scores) != len(tokens):
        raise ValueError(f"tokenizer.ggml.scores has {len(scores)} entries for {len(tokens)} tokens")
    normal = {token: i for i, (token, kind) in enumerate(zip(tokens, types, strict=True)) if kind == NORMAL}
    merges = []
    for token, i in normal.items():
        for cut in range(1, len(token)):
            if token[:cut] in normal and token[cut:] in normal:
                merges.append((-scores[i], i, cut, token[:cut], token[cut:]))
    merges.sort()
    unk = meta.get("tokenizer.ggml.unknown_token_id")
    unk_token = tokens[unk] if isinstance(unk, int) and 0 <= unk < len(tokens) else None
    prefix = bool(meta.get("tokenizer.ggml.add_space_prefix", True))
    spaces = {"type": "Replace", "pattern": {"String": " "}, "content": METASPACE}
    decoders = [{"type": "Replace", "pattern": {"String": METASPACE}, "content": " "}, {"type": "ByteFallback"},
                {"type": "Fuse"}]
    return {
        "version": "1.0", "added_tokens": _added(tokens, types, (CONTROL, UNKNOWN)),
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": METASPACE}, spaces]}
        if prefix else spaces,
        "pre_tokenizer": None,
        "post_processor": _post_processor(meta, tokens, True),
        "decoder": {"type": "Sequence", "decoders": [*decoders, {"type": "Strip", "content": " ", "start": 1,
                                                                  "stop": 0}] if prefix else decoders},
        "model": {"type": "BPE", "dropout": None, "unk_token": unk_token, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": BYTE in types,
                  "ignore_merges": False, "vocab": _vocab(tokens, types, (NORMAL, BYTE, UNKNOWN)),
                  "merges": [[left, right] for *_, left, right in merges]},
    }
