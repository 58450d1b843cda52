"""One training step, the same for a seeded run (loop.train) and the lab (lab.Lab): forward, backward, clip, AdamW."""

from __future__ import annotations

import math

import numpy as np

from ..model import Model
from .backward import loss_and_grads
from .optim import AdamW, clip_gradients


def train_step(model: Model, optimizer: AdamW, batch: np.ndarray, lr: float, clip: float | None = 1.0
               ) -> tuple[float, float]:
    """One step on `batch` (B, T): the mean next-token cross-entropy and its gradients, the gradients clipped to a
    global norm of `clip`, then an AdamW update of model.params at learning rate `lr`.

    Returns (loss, gradient norm before clipping). When either is not finite (a diverging run) the weights are
    left as they were, so the caller can stop at weights that still compute."""
    with np.errstate(over="ignore", invalid="ignore"):  # a diverging run overflows; the result says so
        loss, grads, _ = loss_and_grads(model, batch)
        norm = clip_gradients(grads, clip)
    if math.isfinite(loss) and math.isfinite(norm):
        optimizer.step(grads, lr)
    return loss, norm
