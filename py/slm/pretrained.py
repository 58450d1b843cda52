"""The model this project trained and ships (see weights/MODEL_CARD.md)."""

from __future__ import annotations

from pathlib import Path

from .model import Model
from .tokenizer import WordTokenizer

WEIGHTS_FILE = Path(__file__).with_name("weights") / "shipped.npz"


def load_pretrained() -> Model:
    """The shipped model. Its meta data holds the vocabulary ("vocab") and notes from training (e.g. which head
    attends from a pronoun to its referent)."""
    if not WEIGHTS_FILE.exists():
        raise FileNotFoundError(f"the shipped weights are missing: {WEIGHTS_FILE}")
    return Model.load(WEIGHTS_FILE.read_bytes())


def tokenizer_for(model: Model) -> WordTokenizer:
    """The word tokenizer matching a model's saved vocabulary."""
    if "vocab" not in model.meta:
        raise ValueError("this model was saved without a vocabulary (meta['vocab'])")
    return WordTokenizer(model.meta["vocab"])
