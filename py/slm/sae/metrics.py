"""The numbers researchers report for an SAE, on held-out activations and token windows.

- fve: fraction of variance explained, 1 − Σ‖x − x̂‖² / Σ‖x − mean(x)‖² over the rows;
- l0: the mean number of features firing (f > 0) per row;
- dead: features that fire on none of the rows; dense: features that fire on more than DENSE of them;
- ce_recovered: (CE_zero − CE_spliced) / (CE_zero − CE_clean), the model's next-token cross-entropy with the SAE's
  reconstruction in place of the activation (run_with_hooks), against the same activation set to zero.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..model import Model
from .activations import gather
from .core import SAE

DENSE = 0.1  # a feature firing on more than a tenth of the rows is "dense"


def reconstruction_metrics(sae: SAE, x: np.ndarray, batch: int = 8192) -> dict[str, Any]:
    """fve, l0, dead and dense (fractions of d_sae), and density (d_sae,) = each feature's firing frequency."""
    x = np.asarray(x, dtype=sae.dtype)
    mean = x.mean(axis=0)
    err = total = l0 = 0.0
    fired = np.zeros(sae.d_sae, dtype=np.int64)
    for start in range(0, x.shape[0], batch):
        rows = x[start:start + batch]
        f = sae.encode(rows)
        on = f > 0
        fired += on.sum(axis=0)
        l0 += float(on.sum())
        diff = sae.decode(f) - rows
        err += float(np.einsum("ij,ij->", diff, diff))
        centred = rows - mean
        total += float(np.einsum("ij,ij->", centred, centred))
    density = fired / x.shape[0]
    return {"fve": 1.0 - err / total, "l0": l0 / x.shape[0], "dead": float((fired == 0).mean()),
            "dense": float((density > DENSE).mean()), "density": density}


def cross_entropy(logits: np.ndarray, tokens: np.ndarray) -> float:
    """Mean next-token cross-entropy (nats) of logits (B, T, V) predicting tokens[:, 1:]."""
    logits = logits[:, :-1].astype(np.float64)
    top = logits.max(axis=-1, keepdims=True)
    log_z = np.log(np.exp(logits - top).sum(axis=-1)) + top[..., 0]
    target = np.take_along_axis(logits, tokens[:, 1:, None], axis=-1)[..., 0]
    return float((log_z - target).mean())


def splice_hook(sae: SAE, hook_name: str | None = None) -> tuple[str, Any]:
    """A run_with_hooks hook that puts decode(encode(x)) in place of the activation the SAE reads."""
    return (hook_name or sae.hook_name, lambda value, hook: sae(value))


def ce_metrics(model: Model, sae: SAE, tokens: np.ndarray, batch: int = 64) -> dict[str, float]:
    """ce_clean, ce_spliced, ce_zero and ce_recovered over token windows (N, T)."""
    name = sae.hook_name
    if name is None:
        raise ValueError("the SAE names no hook point (hook_name)")
    runs = {"clean": [], "spliced": [splice_hook(sae)], "zero": [(name, lambda value, hook: np.zeros_like(value))]}
    totals = dict.fromkeys(runs, 0.0)
    tokens = np.asarray(tokens)
    for start in range(0, tokens.shape[0], batch):
        chunk = tokens[start:start + batch]
        for key, hooks in runs.items():
            totals[key] += cross_entropy(model.run_with_hooks(chunk, fwd_hooks=hooks), chunk) * chunk.shape[0]
    ce = {f"ce_{k}": v / tokens.shape[0] for k, v in totals.items()}
    ce["ce_recovered"] = (ce["ce_zero"] - ce["ce_spliced"]) / (ce["ce_zero"] - ce["ce_clean"])
    return ce


def evaluate(model: Model, sae: SAE, tokens: np.ndarray, activations: np.ndarray | None = None) -> dict[str, Any]:
    """Every metric above on held-out windows (N, T) (their activations gathered unless given)."""

    x = gather(model, tokens, sae.hook_name, dtype=sae.dtype) if activations is None else activations
    return reconstruction_metrics(sae, x) | ce_metrics(model, sae, tokens)
