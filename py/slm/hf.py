"""Hugging Face checkpoints as slm Models: `GPT2LMHeadModel`, `LlamaForCausalLM` and `GPTNeoXForCausalLM` (Pythia)
from `config.json`, safetensors weights (one file or shards with their index) and `tokenizer.json` (or GPT-2's
`vocab.json` + `merges.txt`).

The files come from a folder, a zip (its path or bytes) or a mapping {file name: bytes} (what a web page hands
over); file names are matched by their last path part, so a zipped or dropped folder works too. Weights are read
as float32 whatever they are stored in. A config that asks for something slm does not compute (another
architecture, ALiBi, sliding-window attention, a rope scaling kind slm lacks, ...) is a ValueError naming the
field, so a checkpoint never loads silently wrong.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from . import bpe
from .config import Config
from .model import Model
from .npz_views import BufferFile
from .params import MAX_PARAMS, all_finite, count_params
from .safetensors_reader import SafetensorsFile

DTYPE_NAMES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}


class CheckpointFiles:
    """A checkpoint's files by base name, from a folder, a zip (path or bytes) or a mapping {name: bytes}."""

    def __init__(self, source: Any, label: str | None = None) -> None:
        self._zip: zipfile.ZipFile | None = None
        self._folder: Path | None = None
        self._mapping: Mapping[str, bytes] | None = None
        if isinstance(source, Mapping):
            self._mapping = source
            full = list(source)
            self.label = label or _common_folder(full)  # loose files: no name of their own
        elif isinstance(source, bytes | bytearray | memoryview):
            self._zip = _open_zip(BufferFile(source), label or "the zip")  # io.BytesIO would copy a bytearray
            full = [i.filename for i in self._zip.infolist() if not i.is_dir()]
            self.label = label or _common_folder(full)
        elif isinstance(source, str | os.PathLike) and Path(source).is_dir():
            self._folder = Path(source)
            full = [p.name for p in self._folder.iterdir() if p.is_file()]
            self.label = label or self._folder.resolve().name
        elif isinstance(source, str | os.PathLike) and Path(source).is_file():
            self._zip = _open_zip(source, Path(source).name)
            full = [i.filename for i in self._zip.infolist() if not i.is_dir()]
            self.label = label or Path(source).stem
        else:
            raise ValueError(f"no checkpoint at {source!r}: slm.load reads a folder, a .zip, a .npz, or a mapping of "
                             "file names to bytes")
        self.names: dict[str, str] = {}
        for name in full:
            base = PurePosixPath(name.replace("\\", "/")).name
            if base.startswith(".") or "__MACOSX" in name:
                continue  # a zip made on a Mac carries resource forks beside the files
            if base in self.names:
                raise ValueError(f"two files named {base} ({self.names[base]} and {name}): give one checkpoint at a "
                                 "time")
            self.names[base] = name

    def __contains__(self, base: str) -> bool:
        return base in self.names

    def read(self, base: str) -> bytes:
        name = self.names[base]
        if self._mapping is not None:
            return bytes(self._mapping[name])
        if self._zip is not None:
            return self._zip.read(name)
        return (self._folder / name).read_bytes()

    def text(self, base: str) -> str:
        try:
            return self.read(base).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{base} is not UTF-8 text ({exc})") from None

    def json(self, base: str) -> Any:
        try:
            return json.loads(self.text(base))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{base} is not valid JSON ({exc})") from None

    def safetensors(self, base: str) -> SafetensorsFile:
        """The file opened lazily: a folder's or a zip's file is read tensor by tensor, never whole."""
        name = self.names[base]
        if self._mapping is not None:
            return SafetensorsFile(self._mapping[name], base)
        if self._zip is not None:
            return SafetensorsFile(self._zip.open(name), base, self._zip.getinfo(name).file_size)
        return SafetensorsFile(self._folder / name, base)


def _open_zip(source: Any, label: str) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(source)
    except zipfile.BadZipFile as exc:
        raise ValueError(f"{label}: not a zip file ({exc})") from None


def _common_folder(names: list[str]) -> str | None:
    parents = {PurePosixPath(n.replace("\\", "/")).parts[0] for n in names if "/" in n.replace("\\", "/")}
    return parents.pop() if len(parents) == 1 and all("/" in n.replace("\\", "/") for n in names) else None


# ---- config.json -> Config ----

ARCHITECTURES = {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM", "gpt_neox": "GPTNeoXForCausalLM"}
# HF's activation names -> slm's: "gelu_new" is the tanh approximation (slm's "gelu"), "gelu" the exact one
ACTIVATIONS = {"gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "gelu": "gelu_erf", "gelu_fast": None, "relu": "relu"}


def _field(config: dict[str, Any], key: str, allowed: Any, why: str) -> None:
    """A config field that must hold one of `allowed` values (absent counts as allowed)."""
    if key in config and config[key] not in (allowed if isinstance(allowed, tuple) else (allowed,)):
        raise ValueError(f"config.json: {key}={config[key]!r} is not supported ({why})")


def _int(config: dict[str, Any], key: str, default: Any = None) -> int:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"config.json: {key} must be a positive integer, got {value!r}")
    return value


def config_from_hf(config: dict[str, Any]) -> Config:
    """The slm Config of a GPT2LMHeadModel, LlamaForCausalLM or GPTNeoXForCausalLM config.json."""
    if not isinstance(config, dict):
        raise ValueError("config.json: not a JSON object")
    model_type = config.get("model_type")
    if model_type not in ARCHITECTURES:
        raise ValueError(f"config.json: model_type {model_type!r} is not supported (slm loads "
                         f"{', '.join(repr(t) for t in ARCHITECTURES)})")
    architectures = config.get("architectures") or [ARCHITECTURES[model_type]]
    if architectures != [ARCHITECTURES[model_type]]:
        raise ValueError(f"config.json: architectures {architectures} is not supported (slm loads "
                         f"{ARCHITECTURES[model_type]} for model_type {model_type!r})")
    for key in ("alibi", "use_alibi", "position_embedding_type"):
        _field(config, key, (False, None, "absolute", "rope"), "slm has no ALiBi or relative positions")
    for key in ("sliding_window", "use_sliding_window", "attention_chunk_size"):
        _field(config, key, (None, False), "slm attends to every earlier position")
    _field(config, "is_encoder_decoder", False, "slm is a decoder only")
    _field(config, "add_cross_attention", False, "slm has no cross-attention")
    try:
        return {"gpt2": _gpt2_config, "llama": _llama_config, "gpt_neox": _neox_config}[model_type](config)
    except ValueError as exc:
        if str(exc).startswith("config.json"):
            raise
        raise ValueError(f"config.json: {exc}") from None


def _activation(config: dict[str, Any], key: str, default: str) -> str:
    act = config.get(key, default)
    if ACTIVATIONS.get(act) is None:
        raise ValueError(f"config.json: {key}={act!r} is not supported (slm computes "
                         f"{', '.join(k for k, v in ACTIVATIONS.items() if v)})")
    return ACTIVATIONS[act]


def _gpt2_config(config: dict[str, Any]) -> Config:
    activation = _activation(config, "activation_function", "gelu_new")
    _field(config, "scale_attn_weights", True, "slm divides attention scores by sqrt(head size)")
    _field(config, "scale_attn_by_inverse_layer_idx", False, "slm scales every layer's scores alike")
    d = _int(config, "n_embd", 768)
    return Config(
        n_vocab=_int(config, "vocab_size", 50257), n_ctx=_int(config, "n_positions", config.get("n_ctx", 1024)),
        n_model=d, n_heads=_int(config, "n_head", 12), n_layers=_int(config, "n_layer", 12),
        d_ff=_int(config, "n_inner") if config.get("n_inner") is not None else 4 * d,
        activation=activation, norm="layer", norm_placement="pre", positions="learned", bias=True,
        tied=bool(config.get("tie_word_embeddings", True)), eps=float(config.get("layer_norm_epsilon", 1e-5)),
    )


def _llama_config(config: dict[str, Any]) -> Config:
    _field(config, "hidden_act", "silu", "slm's SwiGLU gates with SiLU")
    _field(config, "mlp_bias", False, "slm's SwiGLU gate has no bias")
    _field(config, "partial_rotary_factor", (1, 1.0), "slm rotates whole heads")
    d, h = _int(config, "hidden_size", 4096), _int(config, "num_attention_heads", 32)
    if "head_dim" in config and config["head_dim"] is not None and config["head_dim"] * h != d:
        raise ValueError(f"config.json: head_dim={config['head_dim']} is not supported (slm's head size is "
                         f"hidden_size / num_attention_heads = {d // h})")
    rope = dict(config.get("rope_scaling") or {})
    rope.update(config.get("rope_parameters") or {})  # transformers 5 keeps theta and scaling together here
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind not in ("default", "linear"):
        raise ValueError(f"config.json: rope scaling of type {kind!r} is not supported (slm has default and "
                         "linear RoPE)")
    theta = rope.get("rope_theta", config.get("rope_theta", 10000.0))
    return Config(
        n_vocab=_int(config, "vocab_size", 32000), n_ctx=_int(config, "max_position_embeddings", 2048), n_model=d,
        n_heads=h, n_layers=_int(config, "num_hidden_layers", 32), d_ff=_int(config, "intermediate_size", 11008),
        n_kv_heads=_int(config, "num_key_value_heads", h), activation="swiglu", norm="rms", norm_placement="pre",
        positions="rope", rope_base=float(theta),
        rope_scale=float(rope.get("factor", 1.0)) if kind == "linear" else 1.0,
        bias=bool(config.get("attention_bias", False)), tied=bool(config.get("tie_word_embeddings", False)),
        eps=float(config.get("rms_norm_eps", 1e-6)),
    )


def _neox_config(config: dict[str, Any]) -> Config:
    """Pythia's config.json names its rotary settings rotary_pct and rotary_emb_base; transformers 5 writes them
    into rope_parameters (partial_rotary_factor, rope_theta), which win when both are there, as transformers reads
    them. Absent, rotary_pct is 0.25 there too."""
    d, h = _int(config, "hidden_size", 6144), _int(config, "num_attention_heads", 64)
    if d % h:
        raise ValueError(f"config.json: hidden_size={d} is not divisible by num_attention_heads={h}")
    rope = dict(config.get("rope_scaling") or {})
    rope.update(config.get("rope_parameters") or {})
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind != "default":
        raise ValueError(f"config.json: rope scaling of type {kind!r} is not supported for GPT-NeoX (slm computes "
                         "its default RoPE)")
    theta = rope.get("rope_theta", config.get("rotary_emb_base", 10000.0))
    pct = rope.get("partial_rotary_factor", config.get("rotary_pct", 0.25))
    if isinstance(pct, bool) or not isinstance(pct, int | float) or not 0 < pct <= 1:
        raise ValueError(f"config.json: rotary_pct={pct!r} is not supported (slm turns a fraction in (0, 1] of each "
                         "head)")
    rotary = int(d // h * pct)  # transformers' rotary_ndims: rounded down
    if rotary < 2 or rotary % 2:
        raise ValueError(f"config.json: rotary_pct={pct} gives {rotary} rotary coordinates per head of {d // h}; "
                         "slm turns an even number of them (at least 2)")
    return Config(
        n_vocab=_int(config, "vocab_size", 50432), n_ctx=_int(config, "max_position_embeddings", 2048), n_model=d,
        n_heads=h, n_layers=_int(config, "num_hidden_layers", 44), d_ff=_int(config, "intermediate_size", 4 * d),
        activation=_activation(config, "hidden_act", "gelu"), norm="layer", norm_placement="pre", positions="rope",
        rope_base=float(theta), rotary_dim=None if rotary == d // h else rotary,
        parallel_residual=bool(config.get("use_parallel_residual", True)), bias=True,
        tied=bool(config.get("tie_word_embeddings", False)), eps=float(config.get("layer_norm_eps", 1e-5)),
    )


# ---- weights: HF names and layouts -> slm's ----

def _gpt2_weights(cfg: Config, keys: set[str]) -> tuple[dict[str, Any], list[str]]:
    """slm name -> (how to build it from HF tensors), and the HF names to read. Conv1D weights are (in, out)."""
    p = "transformer." if "transformer.wte.weight" in keys else ""
    d = cfg.n_model
    plan: dict[str, Any] = {"tok_emb": (f"{p}wte.weight", None), "pos_emb": (f"{p}wpe.weight", None),
                            "norm_f.weight": (f"{p}ln_f.weight", None), "norm_f.bias": (f"{p}ln_f.bias", None)}
    for i in range(cfg.n_layers):
        h, b = f"{p}h.{i}", f"blocks.{i}"
        for j, x in enumerate("qkv"):
            plan[f"{b}.attn.w_{x}"] = (f"{h}.attn.c_attn.weight", lambda w, j=j: w[:, j * d:(j + 1) * d].T)
            plan[f"{b}.attn.b_{x}"] = (f"{h}.attn.c_attn.bias", lambda w, j=j: w[j * d:(j + 1) * d])
        plan.update({
            f"{b}.attn.w_o": (f"{h}.attn.c_proj.weight", np.transpose),
            f"{b}.attn.b_o": (f"{h}.attn.c_proj.bias", None),
            f"{b}.norm1.weight": (f"{h}.ln_1.weight", None), f"{b}.norm1.bias": (f"{h}.ln_1.bias", None),
            f"{b}.norm2.weight": (f"{h}.ln_2.weight", None), f"{b}.norm2.bias": (f"{h}.ln_2.bias", None),
            f"{b}.ffn.w_in": (f"{h}.mlp.c_fc.weight", None), f"{b}.ffn.b_in": (f"{h}.mlp.c_fc.bias", None),
            f"{b}.ffn.w_out": (f"{h}.mlp.c_proj.weight", None), f"{b}.ffn.b_out": (f"{h}.mlp.c_proj.bias", None),
        })
    if not cfg.tied:
        plan["unembed"] = ("lm_head.weight", np.transpose)
    buffers = (".attn.bias", ".attn.masked_bias")  # the causal mask, saved by older transformers versions
    ignored = [k for k in keys if k.endswith(buffers) or (cfg.tied and k == "lm_head.weight")]
    return plan, ignored


def _rope_rows(n_heads: int, k: int, r: int | None = None) -> np.ndarray:
    """Row order turning HF's RoPE layout (coordinate i pairs with i + r/2) into slm's (2i pairs with 2i + 1):
    per head, rows 0, r/2, 1, r/2 + 1, ..., then r ... k - 1 as they are (the coordinates partial rotary leaves;
    r = k unless given). Queries and keys get the same order, so q·k is unchanged."""
    r = k if r is None else r
    half = np.arange(r // 2)
    per_head = np.concatenate([np.stack([half, half + r // 2], axis=1).reshape(-1), np.arange(r, k)])
    return (np.arange(n_heads)[:, None] * k + per_head[None, :]).reshape(-1)


def _llama_weights(cfg: Config, keys: set[str]) -> tuple[dict[str, Any], list[str]]:
    """slm name -> (HF name, transform). Linear weights are (out, in); slm's feed-forward stores (in, out)."""
    p = "model." if "model.embed_tokens.weight" in keys else ""
    q_rows, kv_rows = _rope_rows(cfg.n_heads, cfg.head_size), _rope_rows(cfg.n_kv_heads, cfg.head_size)
    plan: dict[str, Any] = {"tok_emb": (f"{p}embed_tokens.weight", None), "norm_f.weight": (f"{p}norm.weight", None)}
    for i in range(cfg.n_layers):
        h, b = f"{p}layers.{i}", f"blocks.{i}"
        plan.update({
            f"{b}.norm1.weight": (f"{h}.input_layernorm.weight", None),
            f"{b}.norm2.weight": (f"{h}.post_attention_layernorm.weight", None),
            f"{b}.attn.w_q": (f"{h}.self_attn.q_proj.weight", lambda w: w[q_rows]),
            f"{b}.attn.w_k": (f"{h}.self_attn.k_proj.weight", lambda w: w[kv_rows]),
            f"{b}.attn.w_v": (f"{h}.self_attn.v_proj.weight", None),
            f"{b}.attn.w_o": (f"{h}.self_attn.o_proj.weight", None),
            f"{b}.ffn.w_in": (f"{h}.mlp.up_proj.weight", np.transpose),
            f"{b}.ffn.w_gate": (f"{h}.mlp.gate_proj.weight", np.transpose),
            f"{b}.ffn.w_out": (f"{h}.mlp.down_proj.weight", np.transpose),
        })
        if cfg.bias:  # attention_bias: q, k, v and o; slm's feed-forward biases stay zero (mlp_bias is refused)
            plan.update({
                f"{b}.attn.b_q": (f"{h}.self_attn.q_proj.bias", lambda w: w[q_rows]),
                f"{b}.attn.b_k": (f"{h}.self_attn.k_proj.bias", lambda w: w[kv_rows]),
                f"{b}.attn.b_v": (f"{h}.self_attn.v_proj.bias", None),
                f"{b}.attn.b_o": (f"{h}.self_attn.o_proj.bias", None),
                f"{b}.ffn.b_in": (None, np.zeros(cfg.d_ff, np.float32)),
                f"{b}.ffn.b_out": (None, np.zeros(cfg.n_model, np.float32)),
            })
    if not cfg.tied:
        plan["unembed"] = ("lm_head.weight", np.transpose)
    ignored = [k for k in keys if k.endswith("rotary_emb.inv_freq") or (cfg.tied and k == "lm_head.weight")]
    return plan, ignored


def _neox_weights(cfg: Config, keys: set[str]) -> tuple[dict[str, Any], list[str]]:
    """slm name -> (HF name, transform). query_key_value's output rows are per head [q, k, v], k rows each (the
    view (..., h, 3k) then chunk into three in transformers' GPTNeoXAttention); its RoPE pairs i with i + r/2."""
    p = "gpt_neox." if "gpt_neox.embed_in.weight" in keys else ""
    h, k, d = cfg.n_heads, cfg.head_size, cfg.n_model
    rope_rows = _rope_rows(h, k, cfg.rope_dims)
    # Rows of query_key_value for q, k and v in slm's order: head j's q rows start at j·3k, its k rows k later.
    heads = np.arange(h)[:, None] * 3 * k
    rows = {x: (heads + j * k + np.arange(k)[None, :]).reshape(-1) for j, x in enumerate("qkv")}
    rows["q"], rows["k"] = rows["q"][rope_rows], rows["k"][rope_rows]
    plan: dict[str, Any] = {"tok_emb": (f"{p}embed_in.weight", None),
                            "norm_f.weight": (f"{p}final_layer_norm.weight", None),
                            "norm_f.bias": (f"{p}final_layer_norm.bias", None)}
    attention_bias = f"{p}layers.0.attention.query_key_value.bias" in keys  # config.json's attention_bias
    for i in range(cfg.n_layers):
        t, b = f"{p}layers.{i}", f"blocks.{i}"
        for x in "qkv":
            plan[f"{b}.attn.w_{x}"] = (f"{t}.attention.query_key_value.weight", lambda w, x=x: w[rows[x]])
            plan[f"{b}.attn.b_{x}"] = ((f"{t}.attention.query_key_value.bias", lambda w, x=x: w[rows[x]])
                                       if attention_bias else (None, np.zeros(h * k, np.float32)))
        plan.update({
            f"{b}.attn.w_o": (f"{t}.attention.dense.weight", None),
            f"{b}.attn.b_o": (f"{t}.attention.dense.bias", None) if attention_bias else (None, np.zeros(d, np.float32)),
            f"{b}.norm1.weight": (f"{t}.input_layernorm.weight", None),
            f"{b}.norm1.bias": (f"{t}.input_layernorm.bias", None),
            f"{b}.norm2.weight": (f"{t}.post_attention_layernorm.weight", None),
            f"{b}.norm2.bias": (f"{t}.post_attention_layernorm.bias", None),
            f"{b}.ffn.w_in": (f"{t}.mlp.dense_h_to_4h.weight", np.transpose),
            f"{b}.ffn.b_in": (f"{t}.mlp.dense_h_to_4h.bias", None),
            f"{b}.ffn.w_out": (f"{t}.mlp.dense_4h_to_h.weight", np.transpose),
            f"{b}.ffn.b_out": (f"{t}.mlp.dense_4h_to_h.bias", None),
        })
    head = "lm_head.weight" if "lm_head.weight" in keys else "embed_out.weight"  # Pythia's files: embed_out
    if not cfg.tied:
        plan["unembed"] = (head, np.transpose)
    # Buffers older transformers versions saved: the causal mask and RoPE's frequencies.
    buffers = (".attention.bias", ".attention.masked_bias", "rotary_emb.inv_freq")
    ignored = [key for key in keys if key.endswith(buffers) or (cfg.tied and key in ("lm_head.weight",
                                                                                        "embed_out.weight"))]
    return plan, ignored


def _hf_shapes(cfg: Config, model_type: str) -> dict[str, tuple[int, ...]]:
    """The shape each HF tensor must have under this config (checked from the headers, before any data)."""
    d, f, V, k = cfg.n_model, cfg.d_ff, cfg.n_vocab, cfg.head_size
    shapes: dict[str, tuple[int, ...]] = {}
    if model_type == "gpt2":
        for p in ("", "transformer."):
            shapes.update({f"{p}wte.weight": (V, d), f"{p}wpe.weight": (cfg.n_ctx, d), f"{p}ln_f.weight": (d,),
                           f"{p}ln_f.bias": (d,)})
            for i in range(cfg.n_layers):
                h = f"{p}h.{i}"
                shapes.update({f"{h}.attn.c_attn.weight": (d, 3 * d), f"{h}.attn.c_attn.bias": (3 * d,),
                               f"{h}.attn.c_proj.weight": (d, d), f"{h}.attn.c_proj.bias": (d,),
                               f"{h}.ln_1.weight": (d,), f"{h}.ln_1.bias": (d,), f"{h}.ln_2.weight": (d,),
                               f"{h}.ln_2.bias": (d,), f"{h}.mlp.c_fc.weight": (d, f), f"{h}.mlp.c_fc.bias": (f,),
                               f"{h}.mlp.c_proj.weight": (f, d), f"{h}.mlp.c_proj.bias": (d,)})
    elif model_type == "gpt_neox":
        for p in ("", "gpt_neox."):
            shapes.update({f"{p}embed_in.weight": (V, d), f"{p}final_layer_norm.weight": (d,),
                           f"{p}final_layer_norm.bias": (d,)})
            for i in range(cfg.n_layers):
                t = f"{p}layers.{i}"
                shapes.update({f"{t}.attention.query_key_value.weight": (3 * d, d),
                               f"{t}.attention.query_key_value.bias": (3 * d,), f"{t}.attention.dense.weight": (d, d),
                               f"{t}.attention.dense.bias": (d,), f"{t}.mlp.dense_h_to_4h.weight": (f, d),
                               f"{t}.mlp.dense_h_to_4h.bias": (f,), f"{t}.mlp.dense_4h_to_h.weight": (d, f),
                               f"{t}.mlp.dense_4h_to_h.bias": (d,)})
                for norm in ("input_layernorm", "post_attention_layernorm"):
                    shapes.update({f"{t}.{norm}.weight": (d,), f"{t}.{norm}.bias": (d,)})
        shapes["embed_out.weight"] = (V, d)
    else:
        hq, hkv = cfg.n_heads * k, cfg.n_kv_heads * k
        for p in ("", "model."):
            shapes.update({f"{p}embed_tokens.weight": (V, d), f"{p}norm.weight": (d,)})
            for i in range(cfg.n_layers):
                h = f"{p}layers.{i}"
                shapes.update({f"{h}.input_layernorm.weight": (d,), f"{h}.post_attention_layernorm.weight": (d,),
                               f"{h}.self_attn.q_proj.weight": (hq, d), f"{h}.self_attn.k_proj.weight": (hkv, d),
                               f"{h}.self_attn.v_proj.weight": (hkv, d), f"{h}.self_attn.o_proj.weight": (d, hq),
                               f"{h}.self_attn.q_proj.bias": (hq,), f"{h}.self_attn.k_proj.bias": (hkv,),
                               f"{h}.self_attn.v_proj.bias": (hkv,), f"{h}.self_attn.o_proj.bias": (d,),
                               f"{h}.mlp.up_proj.weight": (f, d), f"{h}.mlp.gate_proj.weight": (f, d),
                               f"{h}.mlp.down_proj.weight": (d, f)})
    shapes["lm_head.weight"] = (V, d)
    return shapes


def _weight_files(files: CheckpointFiles) -> list[str]:
    if "model.safetensors" in files:
        return ["model.safetensors"]
    if "model.safetensors.index.json" in files:
        index = files.json("model.safetensors.index.json")
        shards = sorted(set((index.get("weight_map") or {}).values())) if isinstance(index, dict) else []
        missing = [s for s in shards if s not in files]
        if not shards or missing:
            raise ValueError(f"model.safetensors.index.json names shard(s) that are missing: {', '.join(missing)}"
                             if missing else "model.safetensors.index.json has no weight_map")
        return shards
    others = [n for n in files.names if n.endswith(".safetensors")]
    if len(others) == 1:
        return others
    if any(n.endswith((".bin", ".pt", ".pth", ".ckpt")) for n in files.names):
        raise ValueError("only PyTorch pickles (.bin/.pt) were given: slm reads safetensors (save_pretrained "
                         "writes model.safetensors; a nanoGPT ckpt.pt converts with python -m slm.convert)")
    raise ValueError("no weights: expected model.safetensors (or model.safetensors.index.json and its shards)")


# ---- tokenizer ----

def _tokenizer(files: CheckpointFiles) -> bpe.BPETokenizer:
    if "tokenizer.json" in files:
        try:
            return bpe.from_tokenizer_json(files.read("tokenizer.json"))
        except ValueError as exc:
            raise ValueError(f"tokenizer.json: {str(exc).removeprefix('tokenizer.json: ')}") from None
    if "vocab.json" in files and "merges.txt" in files:
        return bpe.from_gpt2_files(files.read("vocab.json"), files.read("merges.txt"))
    if "tokenizer.model" in files:
        raise ValueError("tokenizer.model (a SentencePiece model) is not read: give tokenizer.json (transformers' "
                         "save_pretrained of the fast tokenizer writes it)")
    raise ValueError("no tokenizer: expected tokenizer.json, or vocab.json and merges.txt")


# ---- the whole checkpoint ----

def load_checkpoint(source: Any, name: str | None = None, in_place: bool = False) -> Model:
    """A Model (float32) with its tokenizer from a Hugging Face checkpoint: a folder, a zip (path or bytes) or a
    mapping {file name: bytes}. ValueError names the file and the reason for anything it cannot load.

    `in_place=True` hands a mapping's bytearrays over to the model: float32 weights stay in them (rearranged there
    where slm's layout differs) rather than being copied, so the load needs about one copy of the weights, not two.
    The caller must not use those buffers afterwards."""
    files = CheckpointFiles(source)
    if "config.json" not in files:
        raise ValueError("no config.json: a Hugging Face checkpoint has config.json, model.safetensors and "
                         "tokenizer.json (or vocab.json and merges.txt)")
    hf_config = files.json("config.json")
    cfg = config_from_hf(hf_config)
    n = count_params(cfg)
    if n > MAX_PARAMS:
        raise ValueError(f"config.json: the model has {n / 1e6:.1f}M parameters; slm loads up to "
                         f"{MAX_PARAMS // 1_000_000}M (a browser tab's memory)")
    tokenizer = _tokenizer(files)
    if len(tokenizer.vocab) > cfg.n_vocab:
        raise ValueError(f"the tokenizer has {len(tokenizer.vocab)} tokens but the model's vocab_size is "
                         f"{cfg.n_vocab}: they are not from the same checkpoint")
    params, dtypes = _read_weights(files, cfg, hf_config["model_type"], in_place)
    architecture = ARCHITECTURES[hf_config["model_type"]]
    meta = {"name": name or files.label or _default_name(hf_config, cfg),
            "source": f"Hugging Face {architecture} ({', '.join(DTYPE_NAMES[d] for d in sorted(dtypes))} safetensors)"}
    for key in ("bos_token_id", "eos_token_id"):
        if hf_config.get(key) is not None:
            meta[key] = hf_config[key]
    return Model(cfg, params, meta, tokenizer)


def _default_name(hf_config: dict[str, Any], cfg: Config) -> str:
    """A name for loose files: the hub name the checkpoint was saved from, else its architecture and size."""
    saved_from = str(hf_config.get("_name_or_path") or "").rstrip("/").rsplit("/", 1)[-1]
    return saved_from or f"{hf_config['model_type']} {cfg.n_layers}x{cfg.n_heads} d{cfg.n_model}"


def _read_weights(files: CheckpointFiles, cfg: Config, model_type: str, in_place: bool = False
                  ) -> tuple[dict[str, np.ndarray], set[str]]:
    shards = [files.safetensors(s) for s in _weight_files(files)]
    try:
        where = {key: shard for shard in shards for key in shard.tensors}
        keys = set(where)
        plan, ignored = {"gpt2": _gpt2_weights, "llama": _llama_weights, "gpt_neox": _neox_weights}[model_type](
            cfg, keys)
        needed = {hf for hf, _ in plan.values() if hf is not None}
        missing = sorted(needed - keys)
        if missing:
            raise ValueError(f"{shards[0].name}: missing tensor(s) {', '.join(missing[:5])}"
                             f"{' …' if len(missing) > 5 else ''} (does config.json belong to these weights?)")
        extra = sorted(keys - needed - set(ignored))
        if extra:
            raise ValueError(f"{where[extra[0]].name}: unexpected tensor(s) {', '.join(extra[:5])}"
                             f"{' …' if len(extra) > 5 else ''} for this config.json")
        shapes = _hf_shapes(cfg, model_type)
        for key in sorted(needed):
            actual = where[key].tensors[key].shape
            if actual != shapes[key]:
                raise ValueError(f"{where[key].name}: tensor {key} has shape {list(actual)}, config.json says "
                                 f"{list(shapes[key])}")
        n = sum(where[key].n_values([key]) for key in needed)
        if n > MAX_PARAMS:
            raise ValueError(f"{shards[0].name}: {n / 1e6:.1f}M parameters; slm loads up to "
                             f"{MAX_PARAMS // 1_000_000}M")
        uses: dict[str, list[tuple[str, Any]]] = {}
        params: dict[str, np.ndarray] = {}
        for slm_name, (hf_name, how) in plan.items():
            if hf_name is None:
                params[slm_name] = how
            else:
                uses.setdefault(hf_name, []).append((slm_name, how))
        # Views of the caller's buffer only where the weights fill it: a view keeps the whole buffer alive. Each
        # tensor is read once, in file order (a zip member then streams forward only), and turned into slm's
        # layout within its own bytes, so that little beyond the weights is held at once.
        reuse = {shard.name for shard in shards if in_place and shard.size and 10 * sum(
            info.end - info.begin for key, info in shard.tensors.items() if key in needed) >= 9 * shard.size}
        for key in sorted(needed, key=lambda k: (where[k].name, where[k].tensors[k].begin)):
            value = where[key].tensor(key, in_place=where[key].name in reuse)  # the caller's or its own: writable
            if not all_finite(value):
                raise ValueError(f"{where[key].name}: tensor {key} holds NaN or infinite values")
            made = [(slm_name, value if how is None else how(value)) for slm_name, how in uses[key]]
            if not all(out.flags.c_contiguous and np.may_share_memory(out, value) for _, out in made):
                made = _rearranged(value, uses[key]) or made
            for slm_name, out in made:
                params[slm_name] = np.ascontiguousarray(out)
        dtypes = {where[key].tensors[key].dtype for key in needed}
    finally:
        for shard in shards:
            shard.close()
    return params, dtypes


def _rearranged(value: np.ndarray, uses: list[tuple[str, Any]]) -> list[tuple[str, np.ndarray]] | None:
    """slm's arrays made from one file tensor, written one after another over that tensor's own bytes (through a
    copy of it, or of a block of it for a transpose); None when they need more room than it has."""
    if len(uses) == 1 and uses[0][1] is np.transpose and value.ndim == 2:
        done = _transpose_in_place(value)
        if done is not None:
            return [(uses[0][0], done)]
    source = value.copy()
    made = [(slm_name, source if how is None else how(source)) for slm_name, how in uses]
    if sum(out.size for _, out in made) > value.size or any(out.dtype != value.dtype for _, out in made):
        return None
    flat, at, placed = value.reshape(-1), 0, []
    for slm_name, out in made:
        slot = flat[at:at + out.size].reshape(out.shape)
        slot[...] = out
        placed.append((slm_name, slot))
        at += out.size
    return placed


def _transpose_in_place(value: np.ndarray, block: int = 1 << 22) -> np.ndarray | None:
    """value.T over value's own bytes (value: (m, n), C-contiguous), with extra memory of one block of its rows
    (about `block` bytes) rather than a whole copy (an unembedding's 37 MB); None when m has no divisor that makes
    small blocks in a few thousand steps.

    Each block of r rows is transposed within its own bytes; the k x n runs of r values are then in the order
    (block, column) and go to (column, block) by following the permutation's cycles, one run held at a time."""
    m, n = value.shape
    k = next((k for k in range(max(1, -(-value.nbytes // block)), m + 1) if m % k == 0), m)
    if value.size == 0:
        return value.reshape(n, m)
    if k * n > 50_000:
        return None
    r, flat = m // k, value.reshape(-1)
    for rows in flat.reshape(k, r * n):
        rows[:] = rows.reshape(r, n).T.reshape(-1)  # a copy of the block (reshape of a transpose), then written
    runs, moved = flat.reshape(k * n, r), bytearray(k * n)
    for start in range(k * n):
        if moved[start]:
            continue
        held, at = runs[start].copy(), start
        while True:  # run p = b·n + j belongs at j·k + b: position `at` takes run (at % k)·n + at // k
            moved[at] = 1
            source = (at % k) * n + at // k
            if source == start:
                runs[at] = held
                break
            runs[at] = runs[source]
            at = source
    return flat.reshape(n, m)
