"""Models from files by one call, `load`, and the model this project trained and ships (weights/MODEL_CARD.md).

`load` decides once what a source holds: an slm `.npz` (Model.save's format, docs/slm.md), a GGUF file (slm.gguf_file)
or a Hugging Face checkpoint (slm.hf: config.json, safetensors weights, tokenizer.json) as a folder, a .zip or
{file name: bytes}.
Each weight is checked finite once: an .npz's here, a checkpoint's by slm.hf as it reads each tensor (before
rearranging it in place). Shapes are checked by Model itself, a checkpoint's also from its headers before any data.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from . import gguf_file, hf
from .model import Model
from .npz_views import BufferFile
from .params import all_finite
from .tokenizer import WordTokenizer

WEIGHTS_FILE = Path(__file__).with_name("weights") / "shipped.npz"
PICKLES = (".pt", ".pth", ".bin", ".ckpt")


def load_pretrained(dtype: type | None = np.float64) -> Model:
    """The shipped model. Its meta data holds the vocabulary ("vocab") and notes from training (e.g. which head
    attends from a pronoun to its referent).

    The file stores float32 arrays (half the download); they are cast to `dtype` (float64 by default, so that
    every comparison in the app is exact to float64 rounding). dtype=None keeps the stored float32."""
    if not WEIGHTS_FILE.exists():
        raise FileNotFoundError(f"the shipped weights are missing: {WEIGHTS_FILE}")
    model = Model.load(WEIGHTS_FILE.read_bytes())
    if dtype is None or model.dtype == np.dtype(dtype):
        return model
    return Model(model.cfg, {name: value.astype(dtype) for name, value in model.params.items()}, model.meta)


def tokenizer_for(model: Model) -> WordTokenizer:
    """The word tokenizer matching a model's saved vocabulary."""
    if "vocab" not in model.meta:
        raise ValueError("this model was saved without a vocabulary (meta['vocab'])")
    return WordTokenizer(model.meta["vocab"])


def load(source: Any = "shipped", dtype: Any = "auto", name: str | None = None, in_place: bool = False) -> Model:
    """A model with its tokenizer, from any of:

    - "shipped": the model this project trained (as load_pretrained(): float64 unless `dtype` says otherwise);
    - an slm `.npz`: its path or bytes, or a mapping holding one .npz file; its arrays keep their dtype;
    - a Hugging Face GPT2LMHeadModel or LlamaForCausalLM checkpoint (slm.hf): a folder, a .zip (path or bytes, or
      the one file of a mapping), or a mapping {file name: bytes}; computed in float32;
    - a GGUF file (slm.gguf_file: gpt2, llama, gptneox; quantized weights dequantized): its path or bytes, or the
      one file of a mapping; computed in float32.

    `dtype` casts the weights when given (None keeps the stored dtype). meta["name"] is what a model selector
    shows (`name` overrides it), meta["source"] where the model came from. ValueError names the file and the reason
    for anything that is not such a model (a NaN weight included). `in_place=True` lets the weights stay in the
    bytearrays given (a mapping's values, or an .npz's) rather than be copied: the caller must not use them after."""
    if isinstance(source, str) and source == "shipped":
        model = load_pretrained(np.float64 if dtype == "auto" else dtype)
        model.meta.setdefault("name", "shipped")
        model.meta.setdefault("source", "trained by this project (py/slm/weights/MODEL_CARD.md)")
    else:
        kind, data, label = kind_of(source)
        if kind == "npz":
            model = _from_npz(data, label, in_place)
        elif kind == "gguf":
            model = gguf_file.load_gguf(data, label, in_place=in_place)
        else:
            model = hf.load_checkpoint(data, in_place=in_place)
        if dtype not in ("auto", None) and model.dtype != np.dtype(dtype):
            model = Model(model.cfg, {k: v.astype(dtype) for k, v in model.params.items()}, model.meta,
                          model.tokenizer)
    if name:
        model.meta["name"] = name
    return model


def kind_of(source: Any) -> tuple[str, Any, str | None]:
    """What a source holds, "npz", "gguf" or "checkpoint"; what to read it from; and the name an .npz without one
    gets, or a GGUF file's name (None for a checkpoint: slm.hf names it by its folder or zip file, else by its
    config.json)."""
    if isinstance(source, Mapping) and len(source) == 1:
        (key, data), = source.items()
        key = str(key).replace("\\", "/")
        if key.lower().endswith(".zip"):
            # Read as the zip's bytes: the folder inside it (or config.json) names the model, as the page has
            # always named a dropped zip ("loaded: NAME" in kept models and links).
            source = data
        elif key.lower().endswith(".npz") or _is_npz(data):
            return "npz", data, PurePosixPath(key).stem or "model"
        elif key.lower().endswith(".gguf") or gguf_file.is_gguf(data):
            return "gguf", data, PurePosixPath(key).name
    if isinstance(source, Mapping):
        return "checkpoint", source, None
    if isinstance(source, bytes | bytearray | memoryview):  # read where they are: no copy of a bytearray
        if gguf_file.is_gguf(source):
            return "gguf", source, None
        return ("npz", source, "model") if _is_npz(source) else ("checkpoint", source, None)
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        if path.is_file() and path.suffix.lower() in PICKLES:
            raise ValueError(f"{path.name}: a PyTorch pickle is not read; a nanoGPT checkpoint converts with "
                             f"python -m slm.convert {path.name} model.npz")
        if path.is_file() and (path.suffix.lower() == ".npz" or _is_npz(path)):
            return "npz", path, path.stem
        if path.is_file() and (path.suffix.lower() == ".gguf" or gguf_file.is_gguf(path)):
            return "gguf", path, path.name
        if not path.exists():
            raise FileNotFoundError(f"no such file or folder: {path}")
        return "checkpoint", path, None
    raise ValueError(f"slm.load reads 'shipped', a path, bytes or a mapping of file names to bytes, not "
                     f"{type(source).__name__}")


def _is_npz(data: bytes | str | os.PathLike) -> bool:
    """An slm model file: a zip whose members include __config__.npy (a checkpoint zip has config.json)."""
    try:
        with zipfile.ZipFile(BufferFile(data) if isinstance(data, bytes | bytearray | memoryview) else data) as z:
            return "__config__.npy" in z.namelist()
    except (zipfile.BadZipFile, OSError):
        return False


def _from_npz(data: Any, label: str, in_place: bool = False) -> Model:
    model = Model.load(data, in_place=in_place)
    for key, value in model.params.items():
        if not all_finite(value):
            raise ValueError(f"the weight {key} holds NaN or infinite values")
    if not model.meta.get("name"):
        model.meta["name"] = label
    model.meta.setdefault("source", "slm model file (.npz)")
    return model
