"""AdamW, global-norm gradient clipping and a warmup + cosine learning-rate schedule."""

from __future__ import annotations

import math

import numpy as np


def global_norm(grads: dict[str, np.ndarray]) -> float:
    """The Euclidean norm of all gradients taken together (summed in the dict's order: deterministic)."""
    return math.sqrt(sum(float(np.vdot(g, g)) for g in grads.values()))


def clip_gradients(grads: dict[str, np.ndarray], max_norm: float | None) -> float:
    """Scale all gradients in place so their global norm is at most max_norm; return the norm before clipping."""
    norm = global_norm(grads)
    if max_norm is not None and norm > max_norm:
        scale = max_norm / (norm + 1e-12)
        for g in grads.values():
            g *= scale
    return norm


def lr_at(step: int, peak: float, warmup: int, total: int, floor: float = 0.1) -> float:
    """Learning rate at step (0-based): linear warmup from peak/warmup to peak over `warmup` steps, then a
    cosine decay to floor * peak at step `total`."""
    if warmup > 0 and step < warmup:
        return peak * (step + 1) / warmup
    span = max(total - warmup, 1)
    progress = min(max(step - warmup, 0) / span, 1.0)
    return peak * (floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress)))


def decays(name: str, value: np.ndarray) -> bool:
    """Weight decay applies to matrices (including the embeddings), not to norm scales or biases."""
    return value.ndim >= 2


class AdamW:
    """Adam with decoupled weight decay (Loshchilov & Hutter), updating a dict of arrays in place."""

    def __init__(
        self,
        params: dict[str, np.ndarray],
        betas: tuple[float, float] = (0.9, 0.98),
        eps: float = 1e-8,
        weight_decay: float = 0.01,
    ) -> None:
        self.params = params
        self.beta1, self.beta2 = betas
        self.eps = eps
        self.weight_decay = weight_decay
        self.m = {n: np.zeros_like(v) for n, v in params.items()}
        self.v = {n: np.zeros_like(v) for n, v in params.items()}
        self.t = 0

    def step(self, grads: dict[str, np.ndarray], lr: float) -> None:
        self.t += 1
        c1 = 1.0 - self.beta1**self.t
        c2 = 1.0 - self.beta2**self.t
        for name, p in self.params.items():
            g = grads[name]
            m, v = self.m[name], self.v[name]
            m *= self.beta1
            m += (1.0 - self.beta1) * g
            v *= self.beta2
            v += (1.0 - self.beta2) * (g * g)
            if self.weight_decay and decays(name, p):
                p *= 1.0 - lr * self.weight_decay
            p -= (lr / c1) * m / (np.sqrt(v / c2) + self.eps)

    def state(self) -> dict[str, np.ndarray]:
        """The optimizer's moments as arrays (for checkpoints)."""
        out = {f"m/{n}": a for n, a in self.m.items()} | {f"v/{n}": a for n, a in self.v.items()}
        out["t"] = np.array(self.t)
        return out
