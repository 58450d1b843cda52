"""Parameter names and shapes (the documented contract), seeded initialisation and counting.

d = n_model, h = n_heads, g = n_kv_heads, k = d / h, f = d_ff, V = n_vocab, C = n_ctx.
Attention matrices store output units as rows (q = x @ w_q.T); feed-forward matrices store input coordinates
as rows (hidden = x @ w_in).
"""

from __future__ import annotations

import math

import numpy as np

from .config import Config

# The largest model slm.load reads: 200M parameters are 800 MB in float32, what a browser tab's 4 GiB of wasm memory
# holds beside a second copy of the largest tensors and the page. The one place this limit is written.
MAX_PARAMS = 200_000_000


def _norm_shapes(cfg: Config, name: str) -> dict[str, tuple[int, ...]]:
    shapes = {f"{name}.weight": (cfg.n_model,)}
    if cfg.norm == "layer":
        shapes[f"{name}.bias"] = (cfg.n_model,)
    return shapes


def param_shapes(cfg: Config) -> dict[str, tuple[int, ...]]:
    """Every parameter's name and shape, in a fixed order (the order of initialisation)."""
    d, k, f = cfg.n_model, cfg.head_size, cfg.d_ff
    h, g = cfg.n_heads, cfg.n_kv_heads
    shapes: dict[str, tuple[int, ...]] = {"tok_emb": (cfg.n_vocab, d)}
    if cfg.positions == "learned":
        shapes["pos_emb"] = (cfg.n_ctx, d)
    for i in range(cfg.n_layers):
        b = f"blocks.{i}"
        shapes.update(_norm_shapes(cfg, f"{b}.norm1"))
        shapes[f"{b}.attn.w_q"] = (h * k, d)
        shapes[f"{b}.attn.w_k"] = (g * k, d)
        shapes[f"{b}.attn.w_v"] = (g * k, d)
        shapes[f"{b}.attn.w_o"] = (d, h * k)
        if cfg.bias:
            shapes[f"{b}.attn.b_q"] = (h * k,)
            shapes[f"{b}.attn.b_k"] = (g * k,)
            shapes[f"{b}.attn.b_v"] = (g * k,)
            shapes[f"{b}.attn.b_o"] = (d,)
        shapes.update(_norm_shapes(cfg, f"{b}.norm2"))
        shapes[f"{b}.ffn.w_in"] = (d, f)
        if cfg.activation == "swiglu":
            shapes[f"{b}.ffn.w_gate"] = (d, f)
        shapes[f"{b}.ffn.w_out"] = (f, d)
        if cfg.bias:
            shapes[f"{b}.ffn.b_in"] = (f,)
            shapes[f"{b}.ffn.b_out"] = (d,)
    if cfg.norm_placement == "pre":
        shapes.update(_norm_shapes(cfg, "norm_f"))
    if not cfg.tied:
        shapes["unembed"] = (d, cfg.n_vocab)
    return shapes


def count_params(cfg: Config) -> int:
    """The exact number of scalar parameters of a model with this config."""
    return sum(math.prod(shape) for shape in param_shapes(cfg).values())


def init_params(cfg: Config, seed: int = 0, dtype: type = np.float64) -> dict[str, np.ndarray]:
    """Seeded initial weights: embeddings ~ N(0, 1) (the same scale as the sinusoidal table they are added to),
    matrices ~ N(0, 1/fan_in), with the two projections that write into the residual stream (w_o, w_out) further
    shrunk by 1/sqrt(2 * n_layers) so the stream does not grow with depth. Norm scales 1, biases 0."""
    rng = np.random.default_rng(seed)
    depth_scale = 1.0 / math.sqrt(2 * cfg.n_layers)
    params = {}
    for name, shape in param_shapes(cfg).items():
        leaf = name.rsplit(".", 1)[-1]
        if name.endswith("norm1.weight") or name.endswith("norm2.weight") or name == "norm_f.weight":
            value = np.ones(shape)
        elif leaf.startswith("b_") or leaf == "bias":
            value = np.zeros(shape)
        elif name in ("tok_emb", "pos_emb"):
            value = rng.standard_normal(shape)
        else:
            # attention matrices keep input coordinates on their last axis, feed-forward ones on their first
            fan_in = shape[1] if ".attn." in name else shape[0]
            std = 1.0 / math.sqrt(fan_in)
            if leaf in ("w_o", "w_out"):
                std *= depth_scale
            value = rng.standard_normal(shape) * std
        params[name] = value.astype(dtype)
    return params


def check_params(cfg: Config, params: dict[str, np.ndarray]) -> None:
    """Raise a ValueError naming the first missing, unexpected or mis-shaped array."""
    expected = param_shapes(cfg)
    missing = [n for n in expected if n not in params]
    if missing:
        raise ValueError(f"missing parameter(s): {', '.join(missing)}")
    extra = [n for n in params if n not in expected]
    if extra:
        raise ValueError(f"unexpected parameter(s) for this config: {', '.join(extra)}")
    for name, shape in expected.items():
        actual = np.shape(params[name])
        if actual != shape:
            raise ValueError(f"parameter {name} has shape {actual}, expected {shape}")
        if not np.issubdtype(np.asarray(params[name]).dtype, np.floating):
            raise ValueError(f"parameter {name} must be floating point, got {np.asarray(params[name]).dtype}")


def all_finite(value: np.ndarray, step: int = 1 << 20) -> bool:
    """No NaN or infinity in `value`, checked a million values at a time: np.isfinite of a whole unembedding
    would allocate a mask of its size (the page's wasm heap never gives memory back)."""
    flat = value.reshape(-1)
    return all(np.isfinite(flat[i:i + step]).all() for i in range(0, flat.size, step))
