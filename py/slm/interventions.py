"""Interventions: run the model with a head's output ablated, or with activations patched in from another run.

Everything is a hook of the one forward pass (Model.run_with_hooks, Model.forward(fwd_hooks=...)), at the hook
points named as in TransformerLens (see docs/slm.md).

* Ablation: head j of layer i writes zeros ("zero"), or its mean write over reference prompts ("mean"), at
  blocks.{i}.attn.hook_result.
* Activation patching: two prompts of the same length, a clean one and a corrupted one (e.g. one token
  changed). Run the target prompt, replace one activation by its value in the source run, and read a metric:
  the logit difference of two chosen tokens at one position. Patching clean activations into the corrupted run
  shows which (layer, position) or head carries what restores the clean answer ("recovered"); patching the
  other way shows what breaks it. The patches of one layer run as one batch, from that layer on
  (start_at_layer), and stop at the residual the metric reads (stop_at_layer, output_positions): nothing before
  the layer is patched, so nothing before it needs running again, and the last block computes only the metric's
  row after its keys and values.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from .hooks import ActivationCache, HookFn, act_name
from .model import Model, Trace

ABLATIONS = ("zero", "mean")


def logit_diff(trace: Trace | np.ndarray, position: int, good: int, bad: int) -> np.ndarray | float:
    """logit(good) − logit(bad) at `position` of a Trace or of logits (a float for one sequence, (B,) for a batch)."""
    # A trace may hold a few rows (output_positions): logit_row finds the one asked for.
    logits = trace.logits[..., trace.logit_row(position), :] if isinstance(trace, Trace) else trace[..., position, :]
    diff = logits[..., good] - logits[..., bad]
    return float(diff) if np.ndim(diff) == 0 else diff


# ---- ablation ----

def head_means(model: Model, prompts: Sequence[Sequence[int]]) -> np.ndarray:
    """(L, H, d): each head's write into the residual averaged over every position of the prompts."""
    total = np.zeros((model.cfg.n_layers, model.cfg.n_heads, model.cfg.n_model))
    count = 0
    for ids in prompts:
        _, cache = model.run_with_cache(np.asarray(ids), names=lambda name: name.endswith("hook_result"))
        total += np.stack([cache["result", i][0].sum(axis=0) for i in range(model.cfg.n_layers)])
        count += len(ids)
    if not count:
        raise ValueError("head_means needs at least one non-empty prompt")
    return total / count


def ablation_hooks(model: Model, heads: Sequence[tuple[int, int]], how: str = "zero",
                   means: np.ndarray | None = None) -> list[tuple[str, HookFn]]:
    """fwd_hooks that replace the write of each (layer, head) in `heads` (hook_result, (..., pos, head, d)):
    zeros, or its row of `means` (L, H, d)."""
    if how not in ABLATIONS:
        raise ValueError(f"how must be one of {ABLATIONS}, got {how!r}")
    if how == "mean" and means is None:
        raise ValueError("mean ablation needs means: see head_means")
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        if not (0 <= layer < model.cfg.n_layers and 0 <= head < model.cfg.n_heads):
            raise ValueError(f"no head {head} in layer {layer}: the model has {model.cfg.n_layers} layers of "
                             f"{model.cfg.n_heads} heads")
        by_layer.setdefault(layer, []).append(head)

    def replace(layer: int, chosen: list[int]) -> HookFn:
        def hook(result: np.ndarray, hook: Any) -> np.ndarray:
            # A copy (the unablated value may be cached or traced: leave it as it was) in the value's own memory
            # order: hook_result is a head-swapped view, and a C-order copy would transpose it twice.
            result = result.copy(order="K")
            for head in chosen:
                result[..., head, :] = 0.0 if how == "zero" else means[layer, head]  # type: ignore[index]
            return result
        return hook

    return [(f"blocks.{layer}.attn.hook_result", replace(layer, chosen)) for layer, chosen in by_layer.items()]


def run_ablated(model: Model, tokens: Any, heads: Sequence[tuple[int, int]], how: str = "zero",
                means: np.ndarray | None = None) -> Trace:
    """The forward pass with the given heads ablated."""
    return model.forward(tokens, fwd_hooks=ablation_hooks(model, heads, how, means))


# ---- activation patching ----

class Site(NamedTuple):
    """One patch. kind "resid": the rows entering block `layer` at position `index`; "head": head `index` of block
    `layer` at every position (its hook_result). Any other kind is a hook point's short name ("z", "resid_mid",
    "mlp_out", "pattern", "ln1", ...) in block `layer`, patched at position `index` (None: every position) and,
    for values with a head axis, at `head` (None: every head)."""

    kind: str
    layer: int
    index: int | None
    head: int | None = None


def hook_name(site: Site) -> str:
    """The full hook name a site patches."""
    if site.kind == "resid":
        return f"blocks.{site.layer}.hook_resid_pre"
    if site.kind == "head":
        return f"blocks.{site.layer}.attn.hook_result"
    if site.kind in ("ln1", "ln2"):
        return act_name("normalized", site.layer, site.kind)
    return act_name(site.kind, site.layer)


def _site_index(name: str, site: Site) -> tuple:
    """Where a site sits in its hook's value (without the batch axis): patterns and scores are (head, query, key);
    q, k, v, z and result (pos, head, ...); every other value (pos, ...)."""
    pos = slice(None) if site.index is None else site.index
    head = slice(None) if site.head is None else site.head
    if name.endswith(("hook_pattern", "hook_attn_scores")):
        return (head, pos)
    if name.endswith(("hook_q", "hook_k", "hook_v", "hook_rot_q", "hook_rot_k", "hook_z", "hook_result")):
        return (pos, head)
    return (pos,)


def block_inputs(trace: Trace) -> list[np.ndarray]:
    """The rows entering each block, (T, d) each: x, then every block's y but the last."""
    return [trace.x, *[layer.y for layer in trace.layers[:-1]]]


def patch_hooks(source: Trace | None, sites: Sequence[Site], source_cache: ActivationCache | None = None
                ) -> list[tuple[str, HookFn]]:
    """fwd_hooks for a batch of len(sites) copies of the target prompt: copy b gets `sites[b]` from the source run
    (kinds "resid" and "head" read its Trace, every other kind `source_cache`, a run_with_cache of the source)."""
    inputs = block_inputs(source) if any(s.kind == "resid" for s in sites) else []
    by_name: dict[str, list[tuple[int, Site]]] = {}
    for b, site in enumerate(sites):
        by_name.setdefault(hook_name(site), []).append((b, site))
    fwd_hooks: list[tuple[str, HookFn]] = []
    for name, chosen in by_name.items():
        rows = np.array([b for b, _ in chosen])
        idx = np.array([s.index for _, s in chosen])
        kind, layer = chosen[0][1].kind, chosen[0][1].layer
        if kind == "resid":
            def patch_resid(x, hook, rows=rows, pos=idx, layer=layer):
                x = x.copy()
                x[rows, pos] = inputs[layer][pos]
                return x
            fwd_hooks.append((name, patch_resid))
        elif kind == "head":
            def patch_head(result, hook, rows=rows, heads=idx, layer=layer):  # result (B, pos, head, d)
                result = result.copy(order="K")  # as in ablation_hooks: no transposing copy
                written = source.layers[layer].head_out[heads]  # (n, T, d)
                result[rows, :, heads] = written if hook.positions is None else written[:, hook.positions]
                return result
            fwd_hooks.append((name, patch_head))
        else:
            if source_cache is None:
                raise ValueError(f"patching {name} needs the source run's cache (run_with_cache)")
            value = source_cache[name]
            value = value[0] if source_cache.has_batch_dim else value

            def patch_any(x, hook, chosen=chosen, value=value):
                if hook.positions is not None:
                    raise ValueError("patch_hooks: a run with output_positions cannot patch " + hook.name)
                x = x.copy()
                for b, site in chosen:
                    where = _site_index(hook.name, site)
                    x[(b, *where)] = value[where]
                return x
            fwd_hooks.append((name, patch_any))
    return fwd_hooks


def _check_sites(model: Model, n_pos: int, sites: Sequence[Site]) -> None:
    for s in sites:
        size = n_pos if s.kind != "head" else model.cfg.n_heads
        if not 0 <= s.layer < model.cfg.n_layers or not (s.index is None or 0 <= s.index < size):
            raise ValueError(f"not a patch site of this model and prompt: {s}")
        try:
            name = hook_name(s)
        except KeyError as exc:
            raise ValueError(f"not a patch site of this model and prompt: {s} ({exc})") from None
        if name not in model.hook_names():
            raise ValueError(f"not a patch site of this model: {s} ({name} is not one of its hook points)")


def run_patched(model: Model, tokens: Any, source: Trace, sites: Sequence[Site],
                source_cache: ActivationCache | None = None) -> Trace:
    """A batched trace: row b is the target prompt run with `sites[b]` patched in from `source`."""
    ids = np.asarray(tokens)
    if ids.ndim != 1 or source.tokens.shape != ids.shape:
        raise ValueError(f"patching needs two prompts of the same length: {ids.shape} and {source.tokens.shape}")
    _check_sites(model, ids.shape[0], sites)
    batch = np.broadcast_to(ids, (len(sites), ids.shape[0]))
    return model.forward(batch, fwd_hooks=patch_hooks(source, sites, source_cache))


def _metric_from_layer(model: Model, rows: np.ndarray, layer: int, fwd_hooks: list, batch: int, position: int,
                       good: int, bad: int, one_row: bool = True) -> np.ndarray:
    """The metric for a batch of patches inside block `layer` and after it: the batch starts from the target's
    rows entering that block and stops at the residual the final norm reads; with `one_row` the last block
    computes only the metric's row after its keys and values (output_positions), and only that row goes through
    the final norm and the two unembedding columns."""
    resid = model.run_with_hooks(np.broadcast_to(rows, (batch, *rows.shape)), fwd_hooks, start_at_layer=layer,
                                 stop_at_layer=model.cfg.n_layers, output_positions=[position] if one_row else None)
    resid = resid[:, 0] if one_row else resid[:, position]
    final = model.norm("norm_f", resid) if model.cfg.norm_placement == "pre" else resid
    logits = final @ model.unembedding()[:, [good, bad]]
    return logits[:, 0] - logits[:, 1]


class Patching(NamedTuple):
    residual: np.ndarray  # (L, T) metric with the rows entering block l at position p patched
    heads: np.ndarray  # (L, H) metric with head h of layer l patched (every position)
    target: float  # the metric of the unpatched target run
    source: float  # the metric of the source run

    def recovered(self, values: np.ndarray) -> np.ndarray:
        """How far each patch moved the metric from the target's value to the source's: 0 = not at all, 1 =
        all the way (NaN when the two runs give the same metric)."""
        span = self.source - self.target
        return (values - self.target) / span if span != 0 else np.full_like(values, np.nan)


def _check_prompts(target: Any, source: Any) -> None:
    if np.shape(target) != np.shape(source) or np.ndim(target) != 1:
        raise ValueError(f"patching needs two prompts of the same length: {np.shape(target)} and {np.shape(source)}")


def activation_patching(model: Model, target: Any, source: Any, position: int, good: int, bad: int,
                        target_trace: Trace | None = None, source_trace: Trace | None = None) -> Patching:
    """The metric logit(good) − logit(bad) at `position` of the target prompt, for every patch from the source
    prompt: the residual entering each block at each position, and each head's output. A patch that changes
    nothing (the source's rows equal the target's there, e.g. before the first changed token) is not run: it
    gives the target's metric. PatchingJob computes the same grid in steps."""
    job = PatchingJob(model, target, source, position, good, bad, target_trace, source_trace)
    job.run_for(float("inf"))
    return job.result


class PatchingJob:
    """activation_patching in steps, for a caller that must stay responsive (a page's one Python thread):
    `run_for(seconds)` runs batches of patches until about that much time has passed, `done` of `total` (in
    patched blocks, proportional to the work) tells the progress, and `result` holds the grid so far, NaN where a
    patch has not run yet. Each layer's patches run as batches from that layer on; a batch is sized from the time
    the last one took."""

    def __init__(self, model: Model, target: Any, source: Any, position: int, good: int, bad: int,
                 target_trace: Trace | None = None, source_trace: Trace | None = None) -> None:
        _check_prompts(target, source)
        self.model, self.good, self.bad = model, good, bad
        self.target_trace = target_trace = model.forward(target) if target_trace is None else target_trace
        self.source_trace = source_trace = model.forward(source) if source_trace is None else source_trace
        n_layers, n_heads, n_pos = model.cfg.n_layers, model.cfg.n_heads, target_trace.tokens.shape[0]
        if not -n_pos <= position < n_pos:
            raise ValueError(f"position {position} is outside the prompt's {n_pos} tokens")
        self.position = position
        base = logit_diff(target_trace, position, good, bad)
        self.result = Patching(np.full((n_layers, n_pos), np.nan), np.full((n_layers, n_heads), np.nan), base,
                               logit_diff(source_trace, position, good, bad))
        self._inputs = block_inputs(target_trace)
        s_in = block_inputs(source_trace)
        self._queue: list[tuple[int, Site]] = []  # (layer, site), in the order they run
        for layer in range(n_layers):
            # The rows and heads that differ, in one comparison each (an np.array_equal per row and per head added
            # a few per cent to the grid at T = 6); a NaN counts as a difference, as in array_equal.
            rows = (self._inputs[layer] != s_in[layer]).any(axis=-1).nonzero()[0]
            written = target_trace.layers[layer].head_out, source_trace.layers[layer].head_out  # (H, T, d) each
            changed = (written[0] != written[1]).any(axis=(-2, -1)).nonzero()[0]
            self.result.residual[layer, np.setdiff1d(np.arange(n_pos), rows)] = base
            self.result.heads[layer, np.setdiff1d(np.arange(n_heads), changed)] = base
            self._queue += [(layer, Site("resid", layer, p)) for p in rows.tolist()]
            self._queue += [(layer, Site("head", layer, h)) for h in changed.tolist()]
        self.total = sum(n_layers - layer for layer, _ in self._queue)
        self.done = 0
        self._batch = 1  # patches per batch: grows or shrinks with the time a batch takes

    @property
    def finished(self) -> bool:
        return not self._queue

    def run_for(self, seconds: float) -> None:
        """Run batches of patches until the grid is complete or about `seconds` have passed (at least one patch).
        With no deadline (inf), each layer's patches run as one batch; with one, a batch is sized from the time the
        last one took to fill about the whole time (wasm NumPy gains from large batches), or what is left of it."""
        n_layers, start, size = self.model.cfg.n_layers, time.perf_counter(), self._batch
        while self._queue:
            layer = self._queue[0][0]
            in_layer = next((i for i, (at, _) in enumerate(self._queue) if at != layer), len(self._queue))
            n = in_layer if seconds == float("inf") else min(size, in_layer)
            chosen = [site for _, site in self._queue[:n]]
            began = time.perf_counter()
            values = _metric_from_layer(self.model, self._inputs[layer], layer, patch_hooks(self.source_trace, chosen),
                                        n, self.position, self.good, self.bad)
            for site, value in zip(chosen, values, strict=True):
                (self.result.residual if site.kind == "resid" else self.result.heads)[layer, site.index] = value
            del self._queue[:n]
            self.done += n * (n_layers - layer)
            now = time.perf_counter()
            if not self._queue or now - start >= seconds:
                return
            if seconds == float("inf"):
                continue
            per_patch = max(now - began, 1e-6) / (n * (n_layers - layer)) * (n_layers - self._queue[0][0])
            self._batch = max(1, int(seconds / per_patch))
            size = int((seconds - (now - start)) / per_patch)
            if size < 1:
                return


def patch_hook_point(model: Model, target: Any, source: Any, kind: str, position: int, good: int, bad: int,
                     per_head: bool = False) -> np.ndarray:
    """The metric logit(good) − logit(bad) at `position` of the target prompt with the value at one kind of hook
    point (a short name: "resid_pre", "resid_mid", "attn_out", "mlp_out", "z", "q", "pattern", "post", "ln1", ...)
    patched in from the source run, one patch per layer and position: (L, T); with per_head, per layer, position
    and head: (L, T, H) (H the value's head axis: n_kv_heads for k and v). Patterns and scores are patched by query
    position. Each layer's patches run as one batch, from that layer on."""
    _check_prompts(target, source)
    target, source = np.asarray(target), np.asarray(source)
    n_layers, n_pos = model.cfg.n_layers, target.shape[0]
    names = {hook_name(Site(kind, layer, 0)) for layer in range(n_layers)}
    wanted = names | {f"blocks.{layer}.hook_resid_pre" for layer in range(n_layers)}
    _check_sites(model, n_pos, [Site(kind, layer, 0) for layer in range(n_layers)])
    t_logits, t_cache = model.run_with_cache(target, names=wanted)
    _, s_cache = model.run_with_cache(source, names=wanted)
    first = t_cache[hook_name(Site(kind, 0, 0))]
    n_heads = 1 if not per_head else first.shape[1 if kind in ("pattern", "attn_scores") else 2]
    base = logit_diff(t_logits[0], position, good, bad)
    grid = np.full((n_layers, n_pos, n_heads), base)
    for layer in range(n_layers):
        name = hook_name(Site(kind, layer, 0))
        sites, cells = [], []
        for p in range(n_pos):
            for h in range(n_heads):
                site = Site(kind, layer, p, h if per_head else None)
                where = _site_index(name, site)
                if not np.array_equal(t_cache[name][0][where], s_cache[name][0][where]):
                    sites.append(site)
                    cells.append((p, h))
        if sites:
            values = _metric_from_layer(model, t_cache["resid_pre", layer][0], layer,
                                        patch_hooks(None, sites, s_cache), len(sites), position, good, bad,
                                        one_row=False)
            for (p, h), value in zip(cells, values, strict=True):
                grid[layer, p, h] = value
    return grid if per_head else grid[..., 0]
