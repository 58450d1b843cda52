"""The training lab's settings: what a learner chooses (layers, heads, d_model, context, steps, batch, learning
rate, seed), their limits with messages meant for the learner, each task's preset, and the URL keys the page uses.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config import Config
from ..params import count_params

TASKS = ("repeat", "grammar", "text")
MAX_TEXT_BYTES = 1_000_000
MAX_WORD_VOCAB = 2_000  # a text with more distinct words than this trains on characters
MAX_PARAMS = 1_000_000
# batch x context x parameters: about 6 times this many multiply-adds a step. 5e8 is ~0.3 s a step in CPython
# and a few times that in the browser, where larger models would train too slowly to watch.
MAX_STEP_WORK = 500_000_000

# The 32 words the repeat task draws from: short, alphabetic (so the playground's probes use them) and distinct.
REPEAT_WORDS = (
    "ant", "bee", "cat", "dog", "elk", "fox", "gnu", "hen", "ibis", "jay", "koi", "lark", "mole", "newt", "owl",
    "pig", "quail", "rat", "seal", "toad", "urchin", "vole", "wasp", "yak", "zebra", "crab", "deer", "frog",
    "goat", "hare", "lion", "mouse",
)


@dataclass(frozen=True)
class Limit:
    low: float
    high: float
    what: str


# The ranges a learner can choose (the page's inputs use the same numbers).
LIMITS = {
    "layers": Limit(1, 4, "layers"),
    "heads": Limit(1, 8, "heads per layer"),
    "d_model": Limit(8, 128, "the model width d_model"),
    "ctx": Limit(4, 128, "the context length"),
    "steps": Limit(1, 20_000, "steps"),
    "batch": Limit(1, 64, "the batch size"),
    "lr": Limit(1e-5, 1.0, "the learning rate"),
    "seed": Limit(0, 2**31 - 1, "the seed"),
}

# The URL keys of the Train view, one per setting (the page reads and writes them).
QUERY_KEYS = {"layers": "train_layers", "heads": "train_heads", "d_model": "train_d_model", "ctx": "train_ctx",
              "steps": "train_steps", "batch": "train_batch", "lr": "train_lr", "seed": "train_seed"}


@dataclass(frozen=True)
class Settings:
    """What the learner sets. The optimiser's other choices are fixed (AdamW, betas 0.9/0.98, weight decay 0.1,
    clipping at 1, linear warm-up then cosine to a tenth of the peak: as for the shipped model)."""

    layers: int = 2
    heads: int = 4
    d_model: int = 32
    ctx: int = 24
    steps: int = 400
    batch: int = 16
    lr: float = 3e-3
    seed: int = 0

    @property
    def warmup(self) -> int:
        return min(50, max(1, self.steps // 10))

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_query(self) -> dict[str, str]:
        """The settings under the Train view's URL keys (train_layers=2&...)."""
        return {QUERY_KEYS[name]: repr(value) if isinstance(value, float) else str(value)
                for name, value in self.to_dict().items()}

    @classmethod
    def from_query(cls, query: Mapping[str, Any], base: Settings | None = None) -> Settings:
        """Settings from URL keys (train_layers, ...), the missing ones from `base`; a value that is not a number
        is a ValueError naming the key."""
        values = (base or cls()).to_dict()
        for name, key in QUERY_KEYS.items():
            if key in query:
                raw = query[key]
                raw = raw[0] if isinstance(raw, list | tuple) and raw else raw
                try:
                    values[name] = float(raw) if name == "lr" else int(str(raw).strip())
                except ValueError:
                    raise ValueError(f"{key}={raw!r} is not a number") from None
        return cls(**values)

    def check(self, n_vocab: int | None = None) -> None:
        """A ValueError saying what to change when a setting is out of range or (given the vocabulary size) the
        model is too large."""
        for name, limit in LIMITS.items():
            value = getattr(self, name)
            if name != "lr" and (isinstance(value, bool) or not isinstance(value, int | np.integer)):
                raise ValueError(f"{limit.what} must be a whole number, got {value!r}")
            if not (isinstance(value, int | float | np.number) and math.isfinite(value)):
                raise ValueError(f"{limit.what} must be a number, got {value!r}")
            if not limit.low <= value <= limit.high:
                raise ValueError(f"{limit.what} must be between {limit.low:g} and {limit.high:g}, got {value:g}")
        if self.d_model % self.heads:
            raise ValueError(f"d_model ({self.d_model}) must be a multiple of the number of heads ({self.heads}), "
                             f"so that each head gets d_model / heads dimensions")
        if (self.d_model // self.heads) % 2:
            raise ValueError(f"each head needs an even number of dimensions for RoPE: d_model / heads = "
                             f"{self.d_model // self.heads}; change d_model or heads")
        n = 0 if n_vocab is None else count_params(self.model_config(n_vocab))
        if n > MAX_PARAMS:
            raise ValueError(f"this model is too large for the lab: {n:,} parameters, at most {MAX_PARAMS:,}. "
                             f"Lower d_model or the number of layers")
        if n * self.batch * self.ctx > MAX_STEP_WORK:
            raise ValueError(f"this model is too large for the lab: {n:,} parameters x batch {self.batch} x context "
                             f"{self.ctx} is more work a step than the lab allows ({MAX_STEP_WORK:.0e}). Lower the "
                             f"batch, the context, d_model or the number of layers")

    def model_config(self, n_vocab: int) -> Config:
        return Config(n_vocab=n_vocab, n_ctx=self.ctx, n_model=self.d_model, n_heads=self.heads,
                      n_layers=self.layers, positions="rope")


PRESETS = {
    # R of 4 to 8 words out of 32 in a context of 16: accuracy 0.9 at step 270-310 for seeds 0-4 (a context of 24
    # took 720, at a higher cost a step); by step 1,000 it copies R of every length. Two heads of 16 dimensions:
    # with RoPE, a head of 8 has one fast-turning frequency and finds "the previous position" hard to single out.
    "repeat": Settings(layers=2, heads=2, d_model=32, ctx=16, steps=1000, batch=16, lr=1e-2, seed=0),
    # Smaller than the shipped model (2 x 8, d = 64): agreement appears within 1,000 steps.
    "grammar": Settings(layers=2, heads=4, d_model=32, ctx=32, steps=1000, batch=16, lr=3e-3, seed=0),
    # On 100 KB of characters d = 48, ctx = 48 got 20 % below the unigram loss as soon (step 120) as d = ctx = 64
    # did, at half the cost a step.
    "text": Settings(layers=2, heads=4, d_model=48, ctx=48, steps=1500, batch=16, lr=3e-3, seed=0),
}
