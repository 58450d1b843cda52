"""SAEs in SAELens's file layout: a folder (or {file name: bytes}) with `cfg.json` and `sae_weights.safetensors`.

What slm writes is SAELens 6's inference layout: cfg.json holds d_in, d_sae, dtype, device, apply_b_dec_to_input,
normalize_activations ("none": the trainer's input scaling is folded into the weights, which read raw activations),
reshape_activations, architecture ("standard" = ReLU, "topk" with k and rescale_acts_by_decoder_norm), and
"metadata" {model_name, hook_name, hook_layer, hook_head_index, context_size, prepend_bos, sae_lens_version, ...};
the safetensors file holds W_enc, b_enc, W_dec, b_dec as float32.

What slm reads besides: files written before SAELens 6, with the metadata at the top level ("hook_name", or
"hook_point"), "activation_fn" / "activation_fn_str" ("relu", or "topk" with "activation_fn_kwargs": {"k": ...}) and
a boolean "normalize_activations"; "metadata" spelled "meta" (early 6.0 previews); JumpReLU SAEs ("threshold", or
"log_threshold"). An SAE whose activations are normalised at run time (constant_norm_rescale, layer_norm, or an
expected_average_only_in factor not folded in) is refused with the reason: its weights do not read raw activations.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping
from pathlib import Path, PurePath
from typing import Any

import numpy as np

from ..safetensors_reader import SafetensorsFile
from .core import ARCHITECTURE, SAE

CFG_FILE = "cfg.json"
WEIGHTS_FILE = "sae_weights.safetensors"
FORMAT_VERSION = "6.0.0"  # the SAELens release whose layout these files follow (SAELens reads older ones otherwise)
_DTYPES = {np.dtype("<f4"): "F32", np.dtype("<f8"): "F64", np.dtype("<f2"): "F16"}


def safetensors_bytes(tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None) -> bytes:
    """A `.safetensors` file: an 8-byte little-endian header length, the JSON header (padded with spaces to a
    multiple of 8 so every tensor starts aligned), then each tensor's little-endian bytes in the header's order."""
    header: dict[str, Any] = {"__metadata__": dict(metadata)} if metadata else {}
    blobs, at = [], 0
    for name, value in tensors.items():
        array = np.ascontiguousarray(value)
        array = array.astype(array.dtype.newbyteorder("<"), copy=False)
        if array.dtype not in _DTYPES:
            raise ValueError(f"{name}: cannot write dtype {array.dtype} to safetensors here (F32, F64, F16)")
        blob = array.tobytes()
        header[name] = {"dtype": _DTYPES[array.dtype], "shape": list(array.shape), "data_offsets": [at, at + len(blob)]}
        blobs.append(blob)
        at += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def sae_config(sae: SAE) -> dict[str, Any]:
    """cfg.json as SAELens 6 writes it for an inference SAE."""
    hook_name = sae.hook_name or sae.metadata.get("hook_name")
    metadata = {"model_name": None, "hook_name": hook_name, "hook_head_index": None, "prepend_bos": True,
                "context_size": None, "sae_lens_version": FORMAT_VERSION,
                "sae_lens_training_version": FORMAT_VERSION} | {
        k: v for k, v in sae.metadata.items() if k != "hook_name"}
    if hook_name and hook_name.startswith("blocks."):
        metadata.setdefault("hook_layer", int(hook_name.split(".")[1]))
    cfg: dict[str, Any] = {
        "d_in": sae.d_in, "d_sae": sae.d_sae, "dtype": "float32", "device": "cpu",
        "apply_b_dec_to_input": sae.apply_b_dec_to_input, "normalize_activations": "none",
        "reshape_activations": "none", "metadata": metadata, "architecture": ARCHITECTURE[sae.activation],
    }
    if sae.activation == "topk":
        cfg |= {"k": sae.k, "rescale_acts_by_decoder_norm": False}
    return cfg


def to_files(sae: SAE) -> dict[str, bytes]:
    """{"cfg.json": ..., "sae_weights.safetensors": ...}: what `save` writes, for a page to download."""
    tensors = {n: np.asarray(sae.params[n], dtype=np.float32) for n in ("W_enc", "b_enc", "W_dec", "b_dec")}
    if sae.activation == "jumprelu":
        tensors["threshold"] = np.asarray(sae.params["threshold"], dtype=np.float32)
    return {CFG_FILE: json.dumps(sae_config(sae), indent=2).encode(), WEIGHTS_FILE: safetensors_bytes(tensors)}


def save(sae: SAE, folder: str | os.PathLike) -> Path:
    """Write cfg.json and sae_weights.safetensors into `folder` (created if needed); return the folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in to_files(sae).items():
        (folder / name).write_bytes(data)
    return folder


def _read_cfg(source: Any) -> tuple[dict[str, Any], Any]:
    if isinstance(source, Mapping):
        names = {PurePath(n).name: n for n in source}  # a zip's members may sit in a folder
        if CFG_FILE not in names or WEIGHTS_FILE not in names:
            raise ValueError(f"an SAE needs {CFG_FILE} and {WEIGHTS_FILE}; got {sorted(source)}")
        raw = source[names[CFG_FILE]]
        cfg = raw if isinstance(raw, dict) else json.loads(raw)
        return cfg, bytes(source[names[WEIGHTS_FILE]])
    folder = Path(source)
    return json.loads((folder / CFG_FILE).read_text()), folder / WEIGHTS_FILE


def load(source: Any, dtype: Any = np.float32) -> SAE:
    """An SAE from a folder or {file name: bytes} in SAELens's layout (6.x, or older: see the module's notes)."""
    cfg, weights = _read_cfg(source)
    meta = cfg.get("metadata", cfg.get("meta"))
    if not isinstance(meta, dict):  # before SAELens 6: the metadata sat at the top level
        meta = {k: cfg[k] for k in ("model_name", "hook_layer", "hook_head_index", "context_size", "prepend_bos",
                                    "dataset_path", "sae_lens_training_version", "neuronpedia_id") if k in cfg}
        meta["hook_name"] = cfg.get("hook_name", cfg.get("hook_point"))
    arch = cfg.get("architecture", "standard")
    act_fn = cfg.get("activation_fn", cfg.get("activation_fn_str", "relu"))
    k = cfg.get("k")
    if act_fn == "topk" or arch == "topk":
        arch, k = "topk", k if k is not None else (cfg.get("activation_fn_kwargs") or {}).get("k")
    activation = {v: a for a, v in ARCHITECTURE.items()}.get(arch)
    if activation is None:
        raise ValueError(f"{CFG_FILE}: architecture {arch!r} is not one slm reads ({sorted(ARCHITECTURE.values())})")
    norm = cfg.get("normalize_activations", "none")
    if norm not in ("none", False, None):
        raise ValueError(f"{CFG_FILE}: normalize_activations={norm!r}: this SAE normalises its input at run time or "
                         "keeps an unfolded scaling factor, so its weights do not read raw activations")
    if cfg.get("reshape_activations", "none") != "none":
        raise ValueError(f"{CFG_FILE}: reshape_activations={cfg['reshape_activations']!r} is not supported")
    if cfg.get("rescale_acts_by_decoder_norm"):
        raise ValueError(f"{CFG_FILE}: rescale_acts_by_decoder_norm=true is not supported (fold the norms first)")
    with SafetensorsFile(weights, WEIGHTS_FILE) as f:
        params = {name: f.tensor(name).astype(dtype) for name in f.tensors}
    if "log_threshold" in params:
        params["threshold"] = np.exp(params.pop("log_threshold"))
    if params.get("scaling_factor") is not None and not np.allclose(params.pop("scaling_factor"), 1.0):
        raise ValueError(f"{WEIGHTS_FILE}: a finetuning scaling_factor other than 1 is not supported")
    for key in ("d_in", "d_sae"):
        got = params["W_enc"].shape[0 if key == "d_in" else 1] if "W_enc" in params else None
        if key in cfg and got is not None and int(cfg[key]) != got:
            raise ValueError(f"{CFG_FILE} says {key}={cfg[key]} but W_enc has shape {params['W_enc'].shape}")
    hook_name = meta.get("hook_name")
    return SAE(params, activation, k, hook_name, bool(cfg.get("apply_b_dec_to_input", True)),
               {k: v for k, v in meta.items() if k != "hook_name"})

