"""Pure functions from a model and its Trace to the columns the views draw. No Panel or Bokeh here, so the
numbers the app shows can be tested directly."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

import slm


def attention_columns(trace: slm.Trace, layer: int, head: int, labels: Sequence[str]) -> tuple[dict, dict]:
    """Two ColumnDataSource dicts for one head's heatmap: the allowed cells (with their weight) and the masked
    cells (a future key the query may not see). Rows are query positions, columns key positions."""
    scores = trace.layers[layer].scores[head]  # masked cells hold -inf, a weight of 0 is still a real weight
    weights = trace.layers[layer].attention[head]
    n_q, n_k = weights.shape
    query, key = np.divmod(np.arange(n_q * n_k), n_k)
    masked = np.isneginf(scores).ravel()
    names = np.asarray(labels, dtype=object)
    cells = {
        "query": query, "key": key, "weight": weights.ravel(),
        "query_token": names[query], "key_token": names[key],
    }
    allowed = {name: column[~masked] for name, column in cells.items()}
    hidden = {name: column[masked] for name, column in cells.items()}
    return allowed, hidden


# The layer × head summary's measures (key -> the words the view shows): each a number from 0 to 1 per head,
# averaged over the query rows that have a choice (every row but the first).
HEAD_MEASURES = {
    "previous": "reads the previous token",
    "first": "reads the first token",
    "spread": "spreads its attention (entropy ÷ its maximum)",
    "distance": "reads far back (distance ÷ position)",
}


def head_summary(trace: slm.Trace, measure: str) -> np.ndarray:
    """(n_layers, n_heads): one HEAD_MEASURES number per head, from every layer's attention at once."""
    attention = np.stack([layer.attention for layer in trace.layers])  # (L, H, T, T)
    n = attention.shape[-1]
    if n < 2:
        return np.zeros(attention.shape[:2])
    rows = attention[:, :, 1:, :]  # query rows 1..T-1
    query = np.arange(1, n)
    if measure == "previous":
        values = attention[:, :, query, query - 1]
    elif measure == "first":
        values = rows[..., 0]
    elif measure == "spread":
        entropy = -np.sum(np.where(rows > 0, rows * np.log(np.where(rows > 0, rows, 1.0)), 0.0), axis=-1)
        values = entropy / np.log(query + 1)  # a causal row q may spread over q + 1 keys
    elif measure == "distance":
        back = (query[:, None] - np.arange(n)[None, :]).clip(min=0)  # q - k for the keys it may read
        values = np.sum(rows * back, axis=-1) / query
    else:
        raise ValueError(f"unknown measure {measure!r}: one of {', '.join(HEAD_MEASURES)}")
    return values.mean(axis=-1)


def top_tokens(probs: np.ndarray, vocab: Sequence[str], k: int = 10) -> tuple[list[str], np.ndarray]:
    """The k most likely tokens (most likely first) and their probabilities. Labels are unique (a chart's
    categories must be): a token that looks like an earlier one gets its id appended."""
    order = top_ids(probs, k)
    labels: list[str] = []
    for i in order:
        label = vocab[i]
        labels.append(f"{label} #{i}" if label in labels else label)
    return labels, probs[order]


def top_ids(probs: np.ndarray, k: int = 10) -> np.ndarray:
    """The ids top_tokens() lists, in its order."""
    k = min(k, probs.size)
    # a 32k vocabulary: partition first, sort only the k (ties keep the lower id first, as a stable sort would)
    order = np.sort(np.argpartition(-probs, k - 1)[:k]) if probs.size > 4 * k else np.arange(probs.size)
    return order[np.argsort(-probs[order], kind="stable")][:k]


class Attribution(NamedTuple):
    target: int  # the token whose logit is explained (the model's top prediction at the position)
    names: list[str]
    values: np.ndarray


def attribution(model: slm.Model, trace: slm.Trace, position: int) -> Attribution | None:
    """Each component's direct contribution to the predicted token's logit, or None for post-norm models
    (whose residual stream is re-normalised inside every block, so it is no longer a plain sum)."""
    if model.cfg.norm_placement != "pre":
        return None
    target = int(np.argmax(trace.probs[trace.logit_row(position)]))
    contributions = slm.attribution.direct_logit_attribution(model, trace, position, target)
    return Attribution(target, list(contributions), np.array(list(contributions.values())))


def layer_totals(names: Sequence[str], values: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Direct contributions summed per layer's attention (its heads and output bias: "L3 attention") and per
    layer's FFN (with its bias: "L3 FFN"); the embedding, positions and final norm's bias stay as they are. The
    sums keep the total: a model with many heads shows 2 bars a layer instead of one per head."""
    totals: dict[str, float] = {}
    for name, value in zip(names, values, strict=True):
        layer, _, part = name.partition(".")
        if layer.startswith("L") and layer[1:].isdigit() and part:
            name = f"{layer} {'FFN' if part.startswith('ffn') else 'attention'}"
        totals[name] = totals.get(name, 0.0) + float(value)
    return list(totals), np.array(list(totals.values()))


def block_outputs(stages: Sequence[str]) -> list[int]:
    """The indices of the stages a model with many layers shows: x and each block's output y (not each h)."""
    return [k for k, name in enumerate(stages) if k == 0 or name.endswith(".y")]


def residual_norms(trace: slm.Trace, position: int) -> tuple[list[str], np.ndarray]:
    """The residual's length at `position` after each step: x, then h and y of every block."""
    stages = slm.attribution.residual_stages(trace)
    return [name for name, _ in stages], np.array([np.linalg.norm(rows[position]) for _, rows in stages])


def lens(model: slm.Model, trace: slm.Trace, position: int, vocab: Sequence[str]) -> tuple[list[str], list[str],
                                                                                          np.ndarray]:
    """Logit lens at `position`: after each step, the token the model would predict if it stopped there."""
    stages, tokens, probs = [], [], []
    for row in slm.attribution.logit_lens(model, trace, position):
        best = int(np.argmax(row.probs[0]))
        stages.append(row.stage)
        tokens.append(vocab[best])
        probs.append(row.probs[0, best])
    return stages, tokens, np.array(probs)


def coordinate_steps(trace: slm.Trace, position: int) -> list[tuple[str, np.ndarray]]:
    """The residual row at `position` through every block, step by step: x, + attention, h, + FFN, y (no h in a
    parallel block, whose FFN reads x too)."""
    steps = [("x", trace.x[position])]
    many = len(trace.layers) > 1
    for i, layer in enumerate(trace.layers):
        tag = f"L{i}." if many else ""
        steps += [
            (f"{tag}+attention", layer.attn_out[position]),
            *([] if layer.h is None else [(f"{tag}h", layer.h[position])]),
            (f"{tag}+FFN", layer.ff_out[position]),
            (f"{tag}y", layer.y[position]),
        ]
    return steps


def ablated_probs(model: slm.Model, ids: Sequence[int], ablate: str) -> np.ndarray | None:
    """Next-token probabilities (T, V) with the head `ablate` names ("L0.H1") removed from the residual stream;
    None for "none"."""
    if ablate == "none":
        return None
    layer, head = (int(part[1:]) for part in ablate.split("."))
    return slm.interventions.run_ablated(model, np.asarray(ids), [(layer, head)]).probs


def changed_rows(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """Per row (position): True when any value differs at all; False only when bit-identical."""
    axes = tuple(range(1, before.ndim))
    return ~np.all(before == after, axis=axes) if axes else before != after


class MapNode(NamedTuple):
    """One part of the forward pass on the model map, at one position."""

    name: str  # as in the attribution: "embed", "pos", "L0.H1", "L0.ffn", "L0.attn.b_o", "norm_f.bias"
    kind: str  # "embed", "pos", "head", "ffn", "bias", "norm"
    layer: int  # the block it belongs to (-1 before the first block, n_layers after the last)
    index: int  # its place in its row (the head's number; 0 for one-node rows)
    contribution: float  # direct contribution to the predicted token's logit (nan when there is none: post-norm)
    write: float  # the length of what it adds to the residual stream at the position (nan for norm_f.bias)
    reads: int  # heads: the position it attends to most (-1 for other parts)
    weight: float  # heads: that attention weight (nan for other parts)


def model_map(model: slm.Model, trace: slm.Trace, position: int) -> tuple[int, list[MapNode]]:
    """The predicted token at `position` and every part of the forward pass that writes into the residual stream
    there, in order, with its direct contribution to that token's logit: the same numbers as attribution() (the
    residual view), taken from it. Post-norm models have no such decomposition: contributions are nan, and what
    stays exact is each part's write and each head's attention."""
    result = attribution(model, trace, position)
    target = int(np.argmax(trace.probs[trace.logit_row(position)])) if result is None else result.target
    contributions = {} if result is None else dict(zip(result.names, result.values.tolist(), strict=True))
    nan = float("nan")

    def node(name: str, kind: str, layer: int, index: int, write: np.ndarray | None, reads: int = -1,
             weight: float = nan) -> MapNode:
        return MapNode(name, kind, layer, index, contributions.get(name, nan),
                       nan if write is None else float(np.linalg.norm(write)), reads, weight)

    nodes = [node("embed", "embed", -1, 0, trace.tok[position])]
    if model.cfg.positions in ("sinusoidal", "learned"):
        nodes.append(node("pos", "pos", -1, 1, trace.pos[position]))
    for i, layer in enumerate(trace.layers):
        for j in range(layer.head_out.shape[0]):
            weights = layer.attention[j, position]
            key = int(np.argmax(weights))
            nodes.append(node(f"L{i}.H{j}", "head", i, j, layer.head_out[j, position], key, float(weights[key])))
        if f"L{i}.attn.b_o" in contributions:
            b_o = model.params[f"blocks.{i}.attn.b_o"]
            nodes.append(node(f"L{i}.attn.b_o", "bias", i, layer.head_out.shape[0], b_o))
        b_out = model.params.get(f"blocks.{i}.ffn.b_out") if f"L{i}.ffn.b_out" in contributions else None
        ffn_write = layer.ff_out[position] if b_out is None else layer.ff_out[position] - b_out
        nodes.append(node(f"L{i}.ffn", "ffn", i, 0, ffn_write))
        if b_out is not None:
            nodes.append(node(f"L{i}.ffn.b_out", "bias", i, 1, b_out))
    if "norm_f.bias" in contributions or result is None:
        nodes.append(node("norm_f.bias" if result is not None else "norm_f", "norm", len(trace.layers), 0, None))
    return target, nodes
