"""What a feature means: where it fires in a corpus, which tokens it pushes the logits toward, where it fires on a
prompt, and what generation does when its decoder direction is added at the hook point (steering)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..generate import Step, generate_batch
from ..model import Model
from .activations import gather
from .core import SAE


@dataclass(frozen=True)
class Context:
    """One place a feature fired: window `window`, position `position` of the corpus, with `tokens` around it."""

    window: int
    position: int
    activation: float
    tokens: list[int]  # a few ids before the position, the position's own, a few after
    at: int  # the index of the position's own token in `tokens`


class FeatureIndex:
    """Per feature, over a corpus of token windows added in chunks (`add`): how often it fires (`density`), its mean
    activation where it fires, its largest activation, and the `n_top` contexts where it fired most
    (`top_contexts`). A UI adds a chunk per frame; nothing here holds more than (chunk rows × d_sae) at once."""

    def __init__(self, sae: SAE, model: Model, n_top: int = 16) -> None:
        self.sae, self.model, self.n_top = sae, model, n_top
        self.windows: list[np.ndarray] = []  # the token windows added, in order
        self.rows = 0  # activations seen (windows × positions)
        self.fired = np.zeros(sae.d_sae, dtype=np.int64)
        self.total = np.zeros(sae.d_sae)
        self.max = np.zeros(sae.d_sae)
        self._top_value = np.full((sae.d_sae, n_top), -np.inf)
        self._top_row = np.full((sae.d_sae, n_top), -1, dtype=np.int64)  # flat (window, position) indices

    def add(self, tokens: np.ndarray, batch: int = 64) -> None:
        """Run token windows (N, T) through the model, encode their activations, and update every statistic."""
        tokens = np.atleast_2d(np.asarray(tokens))
        if self.windows and tokens.shape[1] != self.windows[0].shape[1]:
            raise ValueError(f"windows of {tokens.shape[1]} tokens cannot join windows of {self.windows[0].shape[1]}")
        first_row = self.rows
        f = self.sae.encode(gather(self.model, tokens, self.sae.hook_name, batch, dtype=self.sae.dtype))
        on = f > 0
        self.fired += on.sum(axis=0)
        self.total += f.sum(axis=0)
        self.max = np.maximum(self.max, f.max(axis=0))
        self.windows.append(tokens)
        self.rows += f.shape[0]
        # merge this chunk's best rows into the kept ones: (d_sae, n_top + chunk's n_top) then the top n_top again
        take = min(self.n_top, f.shape[0])
        best = np.argpartition(f, -take, axis=0)[-take:].T  # (d_sae, take) rows of this chunk
        values = np.concatenate([self._top_value, np.take_along_axis(f.T, best, axis=1)], axis=1)
        rows = np.concatenate([self._top_row, best + first_row], axis=1)
        keep = np.argsort(-values, axis=1, kind="stable")[:, :self.n_top]
        self._top_value = np.take_along_axis(values, keep, axis=1)
        self._top_row = np.take_along_axis(rows, keep, axis=1)

    @property
    def density(self) -> np.ndarray:
        """(d_sae,) the fraction of rows each feature fires on."""
        return self.fired / max(self.rows, 1)

    @property
    def mean_activation(self) -> np.ndarray:
        """(d_sae,) each feature's mean activation over the rows where it fires (0 for one that never does)."""
        return np.where(self.fired > 0, self.total / np.maximum(self.fired, 1), 0.0)

    def tokens(self) -> np.ndarray:
        """(N, T) every window added."""
        return np.concatenate(self.windows) if self.windows else np.zeros((0, 0), dtype=np.int64)

    def top_contexts(self, feature: int, n: int | None = None, before: int = 6, after: int = 2) -> list[Context]:
        """The feature's largest activations over the corpus, largest first (only where it fired)."""
        seq_len = self.windows[0].shape[1] if self.windows else 1
        out = []
        for value, row in zip(self._top_value[feature], self._top_row[feature], strict=True):
            if row < 0 or value <= 0:
                continue
            window, position = divmod(int(row), seq_len)
            ids = self._window(window)
            lo, hi = max(0, position - before), min(seq_len, position + after + 1)
            out.append(Context(window, position, float(value), ids[lo:hi].tolist(), position - lo))
            if n is not None and len(out) == n:
                break
        return out

    def _window(self, window: int) -> np.ndarray:
        for chunk in self.windows:
            if window < chunk.shape[0]:
                return chunk[window]
            window -= chunk.shape[0]
        raise IndexError(window)


def logit_effect(sae: SAE, model: Model, feature: int, k: int = 10) -> tuple[list[tuple[int, float]],
                                                                          list[tuple[int, float]]]:
    """(promoted, suppressed): the k tokens whose logits W_dec[f] raises most and lowers most, as (id, value).

    The direction goes straight to the unembedding ("direct" effect: later blocks are ignored) through the final
    norm as the norm treats a direction: its weight γ scales each coordinate, and a layer norm removes the mean
    first; the norm's division by the row's scale is one positive number per position, which changes no ranking,
    so it is left out. The unembedding is model.unembedding(): W_U, or tok_emb.T for a tied model. A post-norm
    model has no final norm: the direction is used as it is."""
    direction = np.asarray(sae.W_dec[feature], dtype=np.float64)
    if model.cfg.norm_placement == "pre":
        if model.cfg.norm == "layer":
            direction = direction - direction.mean()
        direction = direction * model.params["norm_f.weight"]
    effect = direction @ model.unembedding().astype(np.float64)
    order = np.argsort(-effect, kind="stable")
    return ([(int(i), float(effect[i])) for i in order[:k]],
            [(int(i), float(effect[i])) for i in order[::-1][:k]])


def prompt_features(sae: SAE, model: Model, ids: Sequence[int]) -> np.ndarray:
    """(T, d_sae) the feature activations at each position of one prompt."""
    return sae.encode(gather(model, np.asarray(ids)[None], sae.hook_name, dtype=sae.dtype))


def firing(acts: np.ndarray, k: int = 8) -> list[tuple[int, float]]:
    """The (feature, activation) pairs of one position's activations (d_sae,) that fire, largest first (at most k)."""
    on = np.flatnonzero(acts > 0)
    on = on[np.argsort(-acts[on], kind="stable")][:k]
    return [(int(i), float(acts[i])) for i in on]


def steering_hook(sae: SAE, feature: int, alpha: float, row: int | None = None) -> tuple[str, Any]:
    """A run_with_hooks hook adding α × W_dec[feature] to the activation the SAE reads, at every position: of every
    sequence, or with `row` of that batch row only (generate_batch's prompts)."""
    direction = alpha * np.asarray(sae.W_dec[feature])

    def add(value: np.ndarray, hook: Any) -> np.ndarray:
        if row is None:
            return value + direction.astype(value.dtype)
        value = value.copy()
        value[row] += direction.astype(value.dtype)
        return value

    return (sae.hook_name, add)


def steer(model: Model, sae: SAE, feature: int, alpha: float, ids: Sequence[int], max_new_tokens: int = 20,
          seed: int = 0, **sampling: Any) -> Iterator[tuple[Step | None, Step | None]]:
    """(steered, unsteered) Step pairs, one per new token: two generations from `ids` with the same seed and
    sampling settings (slm.generate's temperature, top_k, top_p, stop_ids), the first with the feature's direction
    added at the hook point, each what slm.generate gives it alone. Both run as one batch, one pass per token: the
    pair costs about one plain generation's pass. None for a text that has stopped. An iterator, so a UI can show
    them token by token and stop."""
    hook = steering_hook(sae, feature, alpha, row=0)
    pairs = generate_batch(model, [ids, ids], max_new_tokens, seed=seed, fwd_hooks=[hook], **sampling)
    return ((steered, plain) for steered, plain in pairs)
