"""Interventions: run the model with a head's output ablated, or with activations patched in from another run.

Everything goes through the forward pass's hooks (Model.forward(hooks=...)): "blocks.{i}.x", the rows entering
block i, and "blocks.{i}.head_out", each head's write into the residual.

* Ablation: head j of layer i writes zeros ("zero"), or its mean write over reference prompts ("mean").
* Activation patching: two prompts of the same length, a clean one and a corrupted one (e.g. one token
  changed). Run the target prompt, replace one activation by its value in the source run, and read a metric:
  the logit difference of two chosen tokens at one position. Patching clean activations into the corrupted run
  shows which (layer, position) or head carries what restores the clean answer ("recovered"); patching the
  other way shows what breaks it. Every patch of a grid runs in one batched forward pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from . import layers
from .model import Hooks, Model, Trace

ABLATIONS = ("zero", "mean")


def logit_diff(trace: Trace, position: int, good: int, bad: int) -> np.ndarray | float:
    """logit(good) − logit(bad) at `position` (a float for one sequence, (B,) for a batch)."""
    logits = trace.logits[..., position, :]
    diff = logits[..., good] - logits[..., bad]
    return float(diff) if np.ndim(diff) == 0 else diff


# ---- ablation ----

def head_means(model: Model, prompts: Sequence[Sequence[int]]) -> np.ndarray:
    """(L, H, d): each head's write into the residual averaged over every position of the prompts."""
    total = np.zeros((model.cfg.n_layers, model.cfg.n_heads, model.cfg.n_model))
    count = 0
    for ids in prompts:
        trace = model.forward(np.asarray(ids))
        total += np.stack([layer.head_out.sum(axis=-2) for layer in trace.layers])
        count += len(ids)
    if not count:
        raise ValueError("head_means needs at least one non-empty prompt")
    return total / count


def ablation_hooks(model: Model, heads: Sequence[tuple[int, int]], how: str = "zero",
                   means: np.ndarray | None = None) -> dict[str, Any]:
    """Hooks that replace the output of each (layer, head) in `heads`: zeros, or its row of `means` (L, H, d)."""
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

    def replace(layer: int, chosen: list[int]):
        def hook(head_out: np.ndarray) -> np.ndarray:
            out = head_out.copy()
            for head in chosen:
                out[..., head, :, :] = 0.0 if how == "zero" else means[layer, head]  # type: ignore[index]
            return out
        return hook

    return {f"blocks.{layer}.head_out": replace(layer, chosen) for layer, chosen in by_layer.items()}


def run_ablated(model: Model, tokens: Any, heads: Sequence[tuple[int, int]], how: str = "zero",
                means: np.ndarray | None = None) -> Trace:
    """The forward pass with the given heads ablated."""
    return model.forward(tokens, hooks=ablation_hooks(model, heads, how, means))


# ---- activation patching ----

class Site(NamedTuple):
    """One patch: kind "resid" (the rows entering block `layer`, at position `index`) or "head" (head `index` of
    block `layer`, at every position)."""

    kind: str
    layer: int
    index: int


def block_inputs(trace: Trace) -> list[np.ndarray]:
    """The rows entering each block, (T, d) each: x, then every block's y but the last."""
    return [trace.x, *[layer.y for layer in trace.layers[:-1]]]


def patch_hooks(source: Trace, sites: Sequence[Site]) -> Hooks:
    """Hooks for a batch of len(sites) copies of the target prompt: copy b gets `sites[b]` from `source`."""
    inputs = block_inputs(source)
    hooks: dict[str, Any] = {}
    for layer in {s.layer for s in sites}:
        resid = [(b, s.index) for b, s in enumerate(sites) if s.kind == "resid" and s.layer == layer]
        heads = [(b, s.index) for b, s in enumerate(sites) if s.kind == "head" and s.layer == layer]
        if resid:
            rows, pos = (np.array(v) for v in zip(*resid, strict=True))

            def patch_resid(x, rows=rows, pos=pos, layer=layer):
                x = x.copy()
                x[rows, pos] = inputs[layer][pos]
                return x
            hooks[f"blocks.{layer}.x"] = patch_resid
        if heads:
            rows, idx = (np.array(v) for v in zip(*heads, strict=True))

            def patch_head(out, rows=rows, idx=idx, layer=layer):
                out = out.copy()
                out[rows, idx] = source.layers[layer].head_out[idx]
                return out
            hooks[f"blocks.{layer}.head_out"] = patch_head
    return hooks


def run_patched(model: Model, tokens: Any, source: Trace, sites: Sequence[Site]) -> Trace:
    """A batched trace: row b is the target prompt run with `sites[b]` patched in from `source`."""
    ids = np.asarray(tokens)
    if ids.ndim != 1 or source.tokens.shape != ids.shape:
        raise ValueError(f"patching needs two prompts of the same length: {ids.shape} and {source.tokens.shape}")
    for s in sites:
        size = ids.shape[0] if s.kind == "resid" else model.cfg.n_heads
        if s.kind not in ("resid", "head") or not 0 <= s.layer < model.cfg.n_layers or not 0 <= s.index < size:
            raise ValueError(f"not a patch site of this model and prompt: {s}")
    batch = np.broadcast_to(ids, (len(sites), ids.shape[0]))
    return model.forward(batch, hooks=patch_hooks(source, sites))


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


def activation_patching(model: Model, target: Any, source: Any, position: int, good: int, bad: int,
                        target_trace: Trace | None = None, source_trace: Trace | None = None) -> Patching:
    """The metric logit(good) − logit(bad) at `position` of the target prompt, for every patch from the source
    prompt: the residual entering each block at each position, and each head's output. A patch that changes
    nothing (the source's rows equal the target's there, e.g. before the first changed token) is not run: it
    gives the target's metric."""
    if np.shape(target) != np.shape(source) or np.ndim(target) != 1:
        raise ValueError(f"patching needs two prompts of the same length: {np.shape(target)} and {np.shape(source)}")
    target_trace = model.forward(target) if target_trace is None else target_trace
    source_trace = model.forward(source) if source_trace is None else source_trace
    n_layers, n_heads, n_pos = model.cfg.n_layers, model.cfg.n_heads, target_trace.tokens.shape[0]
    if not -n_pos <= position < n_pos:
        raise ValueError(f"position {position} is outside the prompt's {n_pos} tokens")
    base = logit_diff(target_trace, position, good, bad)
    residual = np.full((n_layers, n_pos), base)
    heads = np.full((n_layers, n_heads), base)
    t_in, s_in = block_inputs(target_trace), block_inputs(source_trace)
    sites = [Site("resid", layer, p) for layer in range(n_layers) for p in range(n_pos)
             if not np.array_equal(t_in[layer][p], s_in[layer][p])]
    sites += [Site("head", layer, h) for layer in range(n_layers) for h in range(n_heads)
              if not np.array_equal(target_trace.layers[layer].head_out[h], source_trace.layers[layer].head_out[h])]
    for layer in range(n_layers):
        chosen = [s for s in sites if s.layer == layer]
        if chosen:
            values = _patched_logit_diffs(model, t_in[layer], layer, patch_hooks(source_trace, chosen), len(chosen),
                                          position, good, bad)
            for site, value in zip(chosen, values, strict=True):
                (residual if site.kind == "resid" else heads)[site.layer, site.index] = value
    return Patching(residual, heads, base, logit_diff(source_trace, position, good, bad))


def _patched_logit_diffs(model: Model, rows: np.ndarray, layer: int, hooks: Hooks, batch: int, position: int,
                         good: int, bad: int) -> np.ndarray:
    """The metric for a batch of patches of one layer, computed from that layer on: the blocks before it see
    nothing patched, so the batch starts from the target run's rows entering block `layer` (what `run_patched`
    computes, without re-running the earlier blocks, the probabilities, or the unembedding of other rows)."""
    cfg, n_pos = model.cfg, rows.shape[0]
    positions = np.arange(n_pos)
    mask = layers.causal_mask(n_pos, n_pos) if cfg.causal else np.ones((n_pos, n_pos), bool)
    hook = hooks.get(f"blocks.{layer}.x")
    x = np.broadcast_to(rows, (batch, *rows.shape))
    x = hook(x) if hook is not None else x
    for i in range(layer, cfg.n_layers - 1):
        x = model._block(i, x, positions, mask, None, hooks).y
    final = _last_block_row(model, x, position % n_pos, hooks.get(f"blocks.{cfg.n_layers - 1}.head_out"))
    if cfg.norm_placement == "pre":
        final = model.norm("norm_f", final)
    logits = final @ model.unembedding()[:, [good, bad]]
    return logits[:, 0] - logits[:, 1]


def _last_block_row(model: Model, x: np.ndarray, row: int, head_hook=None) -> np.ndarray:
    """The last block's output (B, d) at one row, from the rows entering it (B, T, d): keys and values of every
    row it may read, but the query, attention output and feed-forward of that row only — the same arithmetic as
    Model._block restricted to one query row. `head_hook` (a "blocks.{i}.head_out" hook) sees that row's head
    outputs repeated at every position and only the row is read back."""
    cfg, i = model.cfg, model.cfg.n_layers - 1
    a, pre = f"blocks.{i}.attn", cfg.norm_placement == "pre"
    n_keys = row + 1 if cfg.causal else x.shape[-2]
    attn_in = model.norm(f"blocks.{i}.norm1", x[:, :n_keys]) if pre else x[:, :n_keys]
    q = layers.split_heads(model._linear(attn_in[:, row:row + 1], a, "q"), cfg.n_heads)
    k = layers.split_heads(model._linear(attn_in, a, "k"), cfg.n_kv_heads)
    v = layers.split_heads(model._linear(attn_in, a, "v"), cfg.n_kv_heads)
    if cfg.positions == "rope":
        q = layers.rope(q, np.array([row]), cfg.rope_base, cfg.rope_scale)
        k = layers.rope(k, np.arange(n_keys), cfg.rope_base, cfg.rope_scale)
    w_o = model.params[f"{a}.w_o"].reshape(cfg.n_model, cfg.n_heads, cfg.head_size).transpose(1, 2, 0)
    head_out = layers.attention(q, k, v).out @ w_o  # (B, H, 1, d)
    if head_hook is not None:
        full = np.broadcast_to(head_out, (*head_out.shape[:2], x.shape[-2], head_out.shape[-1]))
        head_out = np.asarray(head_hook(full))[:, :, row:row + 1]
    attn_out = head_out.sum(axis=-3)[:, 0]
    if cfg.bias:
        attn_out = attn_out + model.params[f"{a}.b_o"]
    h = x[:, row] + attn_out if pre else model.norm(f"blocks.{i}.norm1", x[:, row] + attn_out)
    ffn = model._feed_forward(i, model.norm(f"blocks.{i}.norm2", h) if pre else h)
    return h + ffn.out if pre else model.norm(f"blocks.{i}.norm2", h + ffn.out)
