"""The training loop: seeded data, AdamW with warmup + cosine, clipping, periodic validation, a loss curve."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..config import Config
from ..model import Model
from ..params import count_params
from . import corpus
from .data import TokenStream, corpus_fingerprint
from .evaluate import unigram_loss, window_loss
from .optim import AdamW, lr_at
from .step import train_step


@dataclass(frozen=True)
class TrainConfig:
    """Everything that determines a training run (with the machine's arithmetic: see weights/MODEL_CARD.md).
    The defaults are the shipped model's settings."""

    # the model
    n_layers: int = 2
    n_heads: int = 8
    n_model: int = 64
    n_ctx: int = 32
    d_ff: int | None = None
    activation: str = "relu"
    positions: str = "rope"
    tied: bool = False
    # optimisation
    steps: int = 12000
    batch_size: int = 32
    lr: float = 3e-3
    warmup: int = 100
    min_lr_fraction: float = 0.1
    weight_decay: float = 0.1
    clip: float = 1.0
    beta2: float = 0.98
    dtype: str = "float32"  # float64 gives the same curves within noise, ~1.7x slower
    # data
    seed: int = 0
    train_tokens: int = 1_000_000
    valid_tokens: int = 100_000
    doc_start_fraction: float = 0.5
    # validation
    eval_every: int = 100
    eval_windows: int = 256

    def model_config(self) -> Config:
        return Config(
            n_vocab=len(corpus.VOCAB), n_ctx=self.n_ctx, n_model=self.n_model, n_heads=self.n_heads,
            n_layers=self.n_layers, d_ff=self.d_ff, activation=self.activation, positions=self.positions,
            tied=self.tied,
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class Curve:
    """The loss curve: training loss at every step, validation loss every eval_every steps."""

    step: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    grad_norm: list[float] = field(default_factory=list)
    valid_step: list[int] = field(default_factory=list)
    valid_loss: list[float] = field(default_factory=list)
    unigram_loss: float = float("nan")
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def training_stream(tc: TrainConfig) -> TokenStream:
    """The training text (its own seed, independent of the validation text's and the batch sampler's)."""
    return TokenStream.generate("train", tc.train_tokens, seed=tc.seed * 2 + 1)


def validation_windows(tc: TrainConfig) -> np.ndarray:
    """The fixed (eval_windows, n_ctx) held-out windows the validation loss is measured on."""
    valid_stream = TokenStream.generate("valid", tc.valid_tokens, seed=tc.seed * 2 + 2)
    return valid_stream.windows(np.random.default_rng([tc.seed, 8]), tc.eval_windows, tc.n_ctx,
                                tc.doc_start_fraction)


def train(
    tc: TrainConfig,
    progress: Callable[[int, float, float | None], None] | None = None,
) -> tuple[Model, Curve]:
    """Train a model from scratch; deterministic for a TrainConfig (and the machine's BLAS thread count).

    `progress(step, train_loss, valid_loss_or_None)` is called after every step (e.g. to move a tqdm bar). A step
    whose loss or gradient norm is not finite records it and leaves the weights unchanged (train_step)."""
    dtype = np.dtype(tc.dtype).type
    cfg = tc.model_config()
    model = Model.init(cfg, seed=tc.seed, dtype=dtype)
    model.meta = {"vocab": list(corpus.VOCAB)}
    train_stream = training_stream(tc)
    valid_windows = validation_windows(tc)
    rng = np.random.default_rng([tc.seed, 7])  # the batch sampler
    optimizer = AdamW(model.params, betas=(0.9, tc.beta2), weight_decay=tc.weight_decay)
    curve = Curve(unigram_loss=unigram_loss(train_stream.ids, valid_windows))
    start = time.perf_counter()
    for step in range(tc.steps):
        batch = train_stream.windows(rng, tc.batch_size, tc.n_ctx, tc.doc_start_fraction)
        lr = lr_at(step, tc.lr, tc.warmup, tc.steps, tc.min_lr_fraction)
        loss, norm = train_step(model, optimizer, batch, lr, tc.clip)
        curve.step.append(step + 1)
        curve.train_loss.append(loss)
        curve.lr.append(lr)
        curve.grad_norm.append(norm)
        valid = None
        if (step + 1) % tc.eval_every == 0 or step + 1 == tc.steps:
            valid = window_loss(model, valid_windows)
            curve.valid_step.append(step + 1)
            curve.valid_loss.append(valid)
        if progress is not None:
            progress(step + 1, loss, valid)
    curve.seconds = time.perf_counter() - start
    model.meta["training"] = {
        "config": tc.to_dict(),
        "n_params": count_params(cfg),
        "final_train_loss": float(np.mean(curve.train_loss[-50:])),
        "valid_loss": curve.valid_loss[-1],
        "unigram_loss": curve.unigram_loss,
        "corpus": corpus_fingerprint(),
        "seconds": round(curve.seconds, 1),
    }
    return model, curve
