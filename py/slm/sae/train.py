"""Training an SAE on activations (slm.sae.activations gathers them): a Trainer run in chunks.

Input scaling (stated, as SAELens's "expected_average_only_in"): the trainer multiplies every activation by
s = √d_in / mean‖x‖ (the mean over the gathered rows), so that the objective's λ and learning rate mean the same at
every layer and model; `Trainer.sae()` folds s into the weights (SAE.folded), so the SAE it returns, saves and
measures reads raw activations.

Dead features: a feature that has not fired on any of the last `dead_after` rows trained is dead. A TopK SAE pulls
its dead features back with the auxiliary loss (slm.sae.core, `aux`); either kind can also resample them every
`resample_every` steps (until 80 % of the run; the ReLU preset does): the decoder row becomes the normalised
reconstruction error of a row the SAE reconstructs badly (drawn with probability ∝ squared error), the encoder
column that direction at the mean norm of the live columns, b_enc 0, and the AdamW moments of all three 0.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..model import Model
from ..train.optim import AdamW, lr_at
from .activations import corpus_windows, default_hook, gather, metadata_for
from .core import SAE, loss_and_grads
from .metrics import reconstruction_metrics

DEFAULT_WINDOWS = 2000  # token windows gathered for a run: 64,000 rows at the shipped model's 32 positions


@dataclass(frozen=True)
class Settings:
    """Everything that decides a training run besides the activations."""

    d_sae: int = 512
    activation: str = "topk"  # "topk" or "relu"
    k: int = 8  # TopK's active features per row
    l1: float = 1.0  # ReLU's λ (on scaled activations: ‖x‖ ≈ √d_in)
    steps: int = 600
    batch_size: int = 1024  # rows per step
    lr: float = 1e-2
    warmup: int = 50
    lr_floor: float = 0.1
    l1_warmup: int = 200  # ReLU: λ rises linearly over these steps (SAELens's l1_warm_up_steps)
    aux: float = 1.0  # TopK: the auxiliary loss's coefficient on dead features (0: none; SAELens's default 1)
    resample_every: int = 0  # steps between resamplings of dead features (0: never)
    dead_after: int = 16_000  # rows without firing before a feature counts as dead (16 steps of 1024 rows)
    seed: int = 0


PRESETS = {
    # the bench's preset (bench/sae_bench.py, docs/benchmarks.md): the shipped model, d_sae = 8 × 64, TopK with AuxK
    "shipped-topk": Settings(),
    # L1 instead of TopK: dead features resampled rather than pulled back by AuxK
    "shipped-relu": Settings(activation="relu", l1=1.0, steps=1500, lr=1e-2, resample_every=250),
    "quick": Settings(d_sae=256, steps=200, batch_size=512),
}


class Trainer:
    """Trains an SAE on activations (N, d_in) in chunks: `step(n)` runs n steps and returns the last record; a UI
    calls it between frames, reads `history` (one record per step) and `metrics()` (on held-out rows), and stops
    by no longer calling it. `run(chunk)` is the same as a generator. `sae()` is the SAE for raw activations at
    any point."""

    def __init__(self, activations: np.ndarray, settings: Settings = Settings(), hook_name: str | None = None,
                 metadata: dict[str, Any] | None = None, dtype: Any = np.float32,
                 held_out: np.ndarray | None = None) -> None:
        acts = np.asarray(activations, dtype=dtype)
        self.held_out = None if held_out is None else np.asarray(held_out, dtype=dtype)
        if acts.ndim != 2 or acts.shape[0] < 2:
            raise ValueError(f"activations must be (rows, d_in) with at least 2 rows, got shape {acts.shape}")
        self.settings = s = settings
        if s.activation not in ("topk", "relu"):
            raise ValueError(f"activation must be 'topk' or 'relu', got {s.activation!r}")
        self.scale = float(math.sqrt(acts.shape[1]) / max(np.linalg.norm(acts, axis=1).mean(), 1e-12))
        self.x = acts * self.scale
        self.rng = np.random.default_rng(s.seed)
        self.model_sae = SAE.init(acts.shape[1], s.d_sae, s.activation, s.k, hook_name, s.seed, dtype,
                                  b_dec=self.x.mean(axis=0))
        self.model_sae.metadata.update(metadata or {})
        self.optimizer = AdamW(self.model_sae.params, betas=(0.9, 0.999), weight_decay=0.0)
        self.t = 0  # steps taken
        self.rows_seen = 0
        self.last_fired = np.zeros(s.d_sae, dtype=np.int64)  # rows_seen when each feature last fired
        self.history: list[dict[str, float]] = []
        self.resampled = 0
        self.seconds = 0.0
        self._order = self.rng.permutation(self.x.shape[0])
        self._at = 0

    @property
    def done(self) -> bool:
        return self.t >= self.settings.steps

    def _batch(self) -> np.ndarray:
        n = min(self.settings.batch_size, self.x.shape[0])
        if self._at + n > self._order.size:
            self._order, self._at = self.rng.permutation(self.x.shape[0]), 0
        rows = self._order[self._at:self._at + n]
        self._at += n
        return self.x[rows]

    def step(self, n: int = 1) -> dict[str, float]:
        """Run up to n steps (fewer at the end of the run); return the last step's record
        {step, loss, mse, l1, aux, fve, l0, lr, dead_fraction}."""
        s, sae = self.settings, self.model_sae
        start = time.perf_counter()
        record: dict[str, float] = self.history[-1] if self.history else {}
        for _ in range(n):
            if self.done:
                break
            x = self._batch()
            l1 = s.l1 * min(1.0, (self.t + 1) / max(s.l1_warmup, 1)) if s.activation == "relu" else 0.0
            dead = self.dead_mask() if s.activation == "topk" and s.aux else None
            loss, parts, grads, f = loss_and_grads(sae, x, l1, dead, s.aux)
            # Unit-norm decoder rows: move only along the sphere (drop each row gradient's radial part).
            w = sae.params["W_dec"]
            grads["W_dec"] -= np.einsum("ij,ij->i", grads["W_dec"], w)[:, None] * w
            lr = lr_at(self.t, s.lr, s.warmup, s.steps, s.lr_floor)
            self.optimizer.step(grads, lr)
            sae.normalize_decoder()
            self.rows_seen += x.shape[0]
            on = f > 0
            self.last_fired[on.any(axis=0)] = self.rows_seen
            self.t += 1
            var = float(((x - x.mean(axis=0)) ** 2).sum()) / x.shape[0]
            record = {"step": self.t, "loss": loss, "mse": parts["mse"], "l1": parts["l1"], "aux": parts["aux"],
                      "fve": 1.0 - parts["mse"] / var, "l0": np.count_nonzero(on) / x.shape[0], "lr": lr,
                      "dead_fraction": float(self.dead_mask().mean())}
            self.history.append(record)
            if (s.resample_every and self.t % s.resample_every == 0 and self.t < 0.8 * s.steps):
                self.resample()
        self.seconds += time.perf_counter() - start
        return record

    def run(self, chunk: int = 50) -> Iterator[dict[str, float]]:
        """Yield the last record after every `chunk` steps until the run's steps are done."""
        while not self.done:
            yield self.step(chunk)

    def metrics(self, rows: int = 8192) -> dict[str, Any]:
        """FVE, L0, dead, dense and density (slm.sae.metrics) of the SAE so far on the held-out activations given
        to the constructor, else on the first `rows` training rows."""
        x = self.held_out if self.held_out is not None else self.x[:rows] / self.scale
        return reconstruction_metrics(self.sae(), x)

    def dead_mask(self) -> np.ndarray:
        """Features that have not fired on any of the last `dead_after` rows (none before that many rows)."""
        if self.rows_seen < self.settings.dead_after:
            return np.zeros(self.settings.d_sae, dtype=bool)
        return self.last_fired <= self.rows_seen - self.settings.dead_after

    def resample(self) -> int:
        """Re-initialise the dead features (see the module's notes); return how many."""
        dead = np.flatnonzero(self.dead_mask())
        if dead.size == 0:
            return 0
        sae = self.model_sae
        x = self.x[self.rng.integers(0, self.x.shape[0], size=max(4 * dead.size, 1024))]
        err = x - sae(x)
        weight = np.einsum("ij,ij->i", err, err).astype(np.float64)
        chosen = self.rng.choice(x.shape[0], size=dead.size, replace=dead.size > x.shape[0], p=weight / weight.sum())
        direction = err[chosen] / np.maximum(np.linalg.norm(err[chosen], axis=1, keepdims=True), 1e-12)
        alive = np.setdiff1d(np.arange(sae.d_sae), dead)
        enc_norm = float(np.linalg.norm(sae.W_enc[:, alive], axis=0).mean()) if alive.size else 1.0
        sae.params["W_dec"][dead] = direction
        sae.params["W_enc"][:, dead] = direction.T * enc_norm
        sae.params["b_enc"][dead] = 0.0
        for moments in (self.optimizer.m, self.optimizer.v):
            moments["W_dec"][dead] = 0.0
            moments["W_enc"][:, dead] = 0.0
            moments["b_enc"][dead] = 0.0
        self.last_fired[dead] = self.rows_seen  # a fresh chance of `dead_after` rows
        self.resampled += dead.size
        return int(dead.size)

    def sae(self) -> SAE:
        """The SAE as trained so far, for raw activations (the input scaling folded in)."""
        return self.model_sae.folded(self.scale)


def train(model: Model, hook_name: str | None = None, settings: Settings = Settings(), tokens: np.ndarray | None = None,
          n_windows: int = DEFAULT_WINDOWS, seed: int = 0) -> Trainer:
    """Gather activations at `hook_name` (default: after the middle block) of `tokens` (default: corpus_windows) and
    train to the end; the Trainer holds the SAE (`.sae()`) and the history."""
    hook_name = hook_name or default_hook(model)
    if tokens is None:
        tokens = corpus_windows(model, n_windows, seed=seed)
    trainer = Trainer(gather(model, tokens, hook_name), settings, hook_name, metadata_for(model, tokens))
    for _ in trainer.run():
        pass
    return trainer


def settings_with(base: Settings, **changes: Any) -> Settings:
    """A preset with some fields changed (None values ignored: a CLI's unset options)."""
    return dataclasses.replace(base, **{k: v for k, v in changes.items() if v is not None})
