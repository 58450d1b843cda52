"""Reading the residual stream: which component wrote what, and what each stage would predict.

Pre-norm only: there the residual reaching the final norm is a plain sum of everything written into it
(token embedding, positions, every head, every feed-forward, their biases). Post-norm normalises the stream
inside every block, so no such sum exists.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .layers import linear, softmax
from .model import Model, Trace


class Components(NamedTuple):
    names: list[str]
    vectors: np.ndarray  # (N, T, d): component n's write at every position; sums to the final residual


def _require_pre_norm(model: Model, trace: Trace) -> None:
    if model.cfg.norm_placement != "pre":
        raise ValueError("the residual stream decomposes into a sum only for pre-norm models")
    if trace.tokens.ndim != 1:
        raise ValueError("attribution reads one sequence: pass an unbatched trace")


def residual_components(model: Model, trace: Trace) -> Components:
    """The final residual (the last block's y) split into the components that wrote it."""
    _require_pre_norm(model, trace)
    cfg, p = model.cfg, model.params
    names, vectors = ["embed"], [trace.tok]
    if cfg.positions in ("sinusoidal", "learned"):
        names.append("pos")
        vectors.append(trace.pos)
    for i, layer in enumerate(trace.layers):
        for j in range(cfg.n_heads):
            names.append(f"L{i}.H{j}")
            vectors.append(layer.head_out[j])
        ff = layer.ff_out
        if cfg.bias:
            names.append(f"L{i}.attn.b_o")
            vectors.append(np.broadcast_to(p[f"blocks.{i}.attn.b_o"], ff.shape))
            ff = ff - p[f"blocks.{i}.ffn.b_out"]
        names.append(f"L{i}.ffn")
        vectors.append(ff)
        if cfg.bias:
            names.append(f"L{i}.ffn.b_out")
            vectors.append(np.broadcast_to(p[f"blocks.{i}.ffn.b_out"], ff.shape))
    return Components(names, np.stack(vectors))


def direct_logit_attribution(model: Model, trace: Trace, position: int, token: int) -> dict[str, float]:
    """Each component's direct contribution to `token`'s logit at `position`.

    The final norm is linear once its scale (the standard deviation or RMS of the whole residual) is frozen at
    the value it actually had; each component then passes through it alone. The contributions, plus the final
    norm's bias term (`norm_f.bias`, layer norm only), sum to the logit."""
    comps = residual_components(model, trace)
    cfg, p = model.cfg, model.params
    residual = trace.layers[-1].y[position] if trace.layers else trace.x[position]
    vectors = comps.vectors[:, position]  # (N, d)
    if cfg.norm == "layer":
        vectors = vectors - vectors.mean(axis=-1, keepdims=True)
        scale = np.sqrt(residual.var() + cfg.eps)
    else:
        scale = np.sqrt((residual * residual).mean() + cfg.eps)
    direction = model.unembedding()[:, token]
    contributions = (vectors / scale * p["norm_f.weight"]) @ direction
    result = dict(zip(comps.names, contributions.tolist(), strict=True))
    if cfg.norm == "layer":
        result["norm_f.bias"] = float(p["norm_f.bias"] @ direction)
    return result


def residual_stages(trace: Trace) -> list[tuple[str, np.ndarray]]:
    """The residual stream after each step: x, then h and y of every block (y only for a parallel block, which
    has no h)."""
    stages = [("x", trace.x)]
    for i, layer in enumerate(trace.layers):
        stages += ([] if layer.h is None else [(f"L{i}.h", layer.h)]) + [(f"L{i}.y", layer.y)]
    return stages


def residual_norms(trace: Trace) -> list[tuple[str, np.ndarray]]:
    """The residual's length at every position after each step (x, each h where there is one, each y)."""
    return [(name, np.linalg.norm(rows, axis=-1)) for name, rows in residual_stages(trace)]


class LensRow(NamedTuple):
    stage: str
    probs: np.ndarray  # (T, V)


def logit_lens(model: Model, trace: Trace, position: int | None = None) -> list[LensRow]:
    """What the model would predict if the residual stopped at each stage: the final norm (pre-norm models) and
    the unembedding applied early. The last row equals the model's own prediction. `position`: that row only
    (probs of shape (1, V)), which a large vocabulary needs (one unembedding per stage instead of T)."""
    stages = residual_stages(trace)
    pre = model.cfg.norm_placement == "pre"
    if position is None:
        return [LensRow(name, softmax(linear(model.norm("norm_f", r) if pre else r, model.unembedding())))
                for name, r in stages]
    # Every stage's row in one product (in the page, the SIMD kernel's, as the model's own logits): a (d, V)
    # unembedding of 50k columns is then read once, not once a stage.
    rows = np.concatenate([r[..., [position], :] for _, r in stages], axis=-2)
    probs = softmax(linear(model.norm("norm_f", rows) if pre else rows, model.unembedding()))
    return [LensRow(name, probs[..., [k], :]) for k, (name, _) in enumerate(stages)]
