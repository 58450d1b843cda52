"""The model this project trained and ships (see weights/MODEL_CARD.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .model import Model
from .tokenizer import WordTokenizer

WEIGHTS_FILE = Path(__file__).with_name("weights") / "shipped.npz"


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


def load(name: str = "shipped", dtype: type | None = np.float64) -> Model:
    """A model by name, for notebooks: "shipped" is the model this project trained (as load_pretrained(), float64
    by default)."""
    if name == "shipped":
        return load_pretrained(dtype)
    raise ValueError(f"unknown model {name!r}: slm.load knows 'shipped'")
