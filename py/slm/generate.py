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
        # The softmax of the kept logits only: over a real vocabulary (50k) the rest would be exp(-inf) = 0 each.
        kept = np.flatnonzero(scaled >= np.partition(scaled, -top_k)[-top_k])
        dist = np.zeros_like(scaled)
        dist[kept] = softmax(scaled[kept])
    else:
        dist = softmax(scaled)
    if top_p is not None and top_p < 1.0:
        order = np.argsort(-dist, kind="stable")
        before = np.cumsum(dist[order]) - dist[order]  # mass of the tokens ranked above each one
        keep = np.zeros(dist.size, dtype=bool)
        keep[order[before < top_p]] = True
        dist = np.where(keep, dist, 0.0)
        dist /= dist.sum()
    return dist


def _draw(dist: np.ndarray, u: float) -> int:
    """Inverse-CDF sampling with one uniform draw `u` per step (the same seed gives the same tokens everywhere),
    over the tokens `dist` gives any mass: after top-k or top-p, a few of a vocabulary's 50k."""
    support = np.flatnonzero(dist)
    cdf = np.cumsum(dist[support])
    return int(support[min(np.searchsorted(cdf, u * cdf[-1], side="right"), support.size - 1)])


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

    `fwd_hooks` (as Model.run_with_hooks takes them) act on every row run, the cached prompt's included (in the
    last block, on the last row only: Model.next_logits): e.g. a steering hook adding a direction at one hook point
    (slm.sae.steering_hook)."""
    for steps in _generate(model, [ids], max_new_tokens, temperature, top_k, top_p, seed, stop_ids, use_cache,
                           fwd_hooks, batched=False):
        yield steps[0]  # type: ignore[misc]  # one row: None only after it stopped, and then nothing is yielded


def generate_batch(
    model: Model,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    stop_ids: Sequence[int] = (),
    use_cache: bool = True,
    fwd_hooks: Sequence = (),
) -> Iterator[list[Step | None]]:
    """generate() for several prompts of one length at once: one forward pass per token for all of them, which
    costs about what one prompt's does on a small model (the pass is mostly per-call overhead). Yields a list per
    step, a Step for each prompt, None for one that has stopped. Each prompt samples with its own generator seeded
    `seed`, so its tokens are the ones generate() gives it alone. `fwd_hooks` see the batch axis first: a hook may
    change one row only (e.g. a steered and an unsteered continuation side by side)."""
    yield from _generate(model, prompts, max_new_tokens, temperature, top_k, top_p, seed, stop_ids, use_cache,
                         fwd_hooks, batched=True)


def _generate(model: Model, prompts: Sequence[Sequence[int]], max_new_tokens: int, temperature: float,
              top_k: int | None, top_p: float | None, seed: int | None, stop_ids: Sequence[int], use_cache: bool,
              fwd_hooks: Sequence, batched: bool) -> Iterator[list[Step | None]]:
    _check_settings(max_new_tokens, temperature, top_k, top_p)
    sequences = [[int(i) for i in ids] for ids in prompts]
    if not sequences or not all(sequences):
        raise ValueError("generate needs at least one token id to continue (e.g. the <start> token)")
    if len({len(s) for s in sequences}) > 1:
        raise ValueError("generate_batch needs prompts of one length (the key/value cache holds no padding)")
    n_ctx = model.cfg.n_ctx
    rngs = [np.random.default_rng(seed) for _ in sequences]
    stop = {int(i) for i in stop_ids}
    going = [True] * len(sequences)

    def last_logits(window: int, cache: KVCache | None) -> np.ndarray:
        """(rows, V): the next-token logits of every row, from its last `window` tokens."""
        tokens = [s[-window:] for s in sequences] if batched else sequences[0][-window:]
        logits = model.next_logits(tokens, cache, fwd_hooks)
        return logits if batched else logits[None]

    # Only the last row's logits are read: the last block and the unembedding run that row only (next_logits).
    use_cache = use_cache and model.cfg.causal
    cache = KVCache(model.cfg.n_layers) if use_cache else None
    logits = last_logits(n_ctx, cache)
    for step in range(max_new_tokens):
        steps: list[Step | None] = []
        for row, sequence in enumerate(sequences):
            if not going[row]:
                steps.append(None)
                sequence.append(sequence[-1])  # any token keeps the rows one length: its logits are not read
                continue
            probs = softmax(logits[row].astype(np.float64))
            plain = temperature == 1 and top_k is None and top_p is None
            dist = probs if plain else sampling_distribution(logits[row], temperature, top_k, top_p)
            token = _draw(dist, rngs[row].random())
            steps.append(Step(token, float(probs[token]), probs, dist))
            sequence.append(token)
            going[row] = token not in stop
        yield steps
        if not any(going) or step == max_new_tokens - 1:
            return  # no forward pass for a token that will not be asked for
        if cache is not None and cache.length < n_ctx:
            logits = last_logits(1, cache)
        else:
            cache = KVCache(model.cfg.n_layers) if use_cache else None
            logits = last_logits(n_ctx, cache)
