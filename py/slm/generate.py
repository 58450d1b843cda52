"""Token-by-token generation with a key/value cache, streamed as an iterator so a UI can show and stop it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from .layers import softmax
from .model import KVCache, Model


@dataclass(frozen=True)
class Step:
    """One generated token."""

    token: int
    prob: float  # the model's probability of this token (temperature 1, before any filtering)
    probs: np.ndarray  # (V,) the model's next-token distribution
    sampled_from: np.ndarray  # (V,) the distribution actually sampled (after temperature, top-k, top-p)


def sampling_distribution(
    logits: np.ndarray, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None
) -> np.ndarray:
    """The distribution to sample from. temperature 0 puts all mass on the most likely token; top_k keeps the k
    most likely tokens; top_p keeps the smallest set of most likely tokens whose mass reaches p."""
    if temperature == 0:
        dist = np.zeros_like(logits, dtype=np.float64)
        dist[int(np.argmax(logits))] = 1.0
        return dist
    scaled = logits.astype(np.float64) / temperature
    if top_k is not None and top_k < scaled.size:
        kth = np.partition(scaled, -top_k)[-top_k]
        scaled = np.where(scaled >= kth, scaled, -np.inf)
    dist = softmax(scaled)
    if top_p is not None and top_p < 1.0:
        order = np.argsort(-dist, kind="stable")
        before = np.cumsum(dist[order]) - dist[order]  # mass of the tokens ranked above each one
        keep = np.zeros(dist.size, dtype=bool)
        keep[order[before < top_p]] = True
        dist = np.where(keep, dist, 0.0)
        dist /= dist.sum()
    return dist


def _check_settings(max_new_tokens: int, temperature: float, top_k: int | None, top_p: float | None) -> None:
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int | np.integer) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be a whole number >= 0, got {max_new_tokens!r}")
    if not np.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}")
    if top_k is not None and (not isinstance(top_k, int | np.integer) or top_k < 1):
        raise ValueError(f"top_k must be None or a whole number >= 1, got {top_k!r}")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p must be None or in (0, 1], got {top_p!r}")


def generate(
    model: Model,
    ids: Sequence[int],
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    stop_ids: Sequence[int] = (),
    use_cache: bool = True,
    fwd_hooks: Sequence = (),
) -> Iterator[Step]:
    """Yield up to max_new_tokens Steps continuing `ids` (stopping after a token in stop_ids).

    Only the new token runs through the model at each step; earlier keys and values come from a KVCache, so the
    logits equal a full recomputation of the sequence. Past n_ctx the window slides: the model sees the last
    n_ctx tokens, and since every position's absolute index then changes, the cache is refilled from that window
    at each step (a full forward of n_ctx tokens) instead of failing. use_cache=False recomputes every step (for
    comparison); so does a non-causal model, whose earlier rows change with every new token.

    `fwd_hooks` (as Model.run_with_hooks takes them) act on every row run, the cached prompt's included: e.g. a
    steering hook adding a direction at one hook point (slm.sae.steering_hook)."""
    _check_settings(max_new_tokens, temperature, top_k, top_p)
    sequence = [int(i) for i in ids]
    if not sequence:
        raise ValueError("generate needs at least one token id to continue (e.g. the <start> token)")
    n_ctx = model.cfg.n_ctx
    rng = np.random.default_rng(seed)
    stop = {int(i) for i in stop_ids}

    # Only the last row's logits are read: the unembedding of every prompt row (d x V each) is skipped.
    use_cache = use_cache and model.cfg.causal
    cache = KVCache(model.cfg.n_layers) if use_cache else None
    logits = model.forward(sequence[-n_ctx:], cache=cache, output_positions=-1, fwd_hooks=fwd_hooks).logits[-1]
    for step in range(max_new_tokens):
        probs = softmax(logits.astype(np.float64))
        dist = sampling_distribution(logits, temperature, top_k, top_p)
        # Inverse-CDF sampling with one uniform draw per step: the same seed gives the same tokens everywhere.
        token = int(min(np.searchsorted(np.cumsum(dist), rng.random() * dist.sum(), side="right"), dist.size - 1))
        yield Step(token, float(probs[token]), probs, dist)
        if token in stop or step == max_new_tokens - 1:
            return  # no forward pass for a token that will not be asked for
        sequence.append(token)
        if cache is not None and cache.length < n_ctx:
            logits = model.forward([token], cache=cache, output_positions=-1, fwd_hooks=fwd_hooks).logits[-1]
        else:
            cache = KVCache(model.cfg.n_layers) if use_cache else None
            logits = model.forward(sequence[-n_ctx:], cache=cache, output_positions=-1, fwd_hooks=fwd_hooks).logits[-1]
