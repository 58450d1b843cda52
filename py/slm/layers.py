"""The transformer's building blocks as plain functions of NumPy arrays.

Conventions: the last axis is the feature axis; attention arrays are (..., heads, T, head_size); a boolean mask
is True where attending is allowed.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from . import matmul

Point = Callable[[str, np.ndarray], np.ndarray]  # a hook point inside a building block: (name, value) -> value


def _no_point(name: str, value: np.ndarray) -> np.ndarray:
    return value

GELU_C = math.sqrt(2.0 / math.pi)  # a Python float, so float32 arrays stay float32


def layer_norm(
    x: np.ndarray, weight: np.ndarray | None = None, bias: np.ndarray | None = None, eps: float = 1e-5,
    point: Point | None = None,
) -> np.ndarray:
    """Per row: subtract the mean, divide by the (population) standard deviation, then scale and shift.
    `point("hook_normalized", value)`, when given, sees the row before the scale and shift (as TransformerLens)."""
    n = x.shape[-1]  # sum / n rather than .mean(): the same value, a third of the overhead on small rows
    centred = x - x.sum(axis=-1, keepdims=True) / n
    out = centred / np.sqrt((centred * centred).sum(axis=-1, keepdims=True) / n + eps)
    if point is not None:
        out = point("hook_normalized", out)
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out


def rms_norm(x: np.ndarray, weight: np.ndarray | None = None, eps: float = 1e-5, point: Point | None = None
             ) -> np.ndarray:
    """Per row: divide by the root mean square (no centring), then scale. `point` as in layer_norm."""
    out = x / np.sqrt((x * x).sum(axis=-1, keepdims=True) / x.shape[-1] + eps)
    if point is not None:
        out = point("hook_normalized", out)
    return out if weight is None else out * weight


def softmax(x: np.ndarray, axis: int = -1, mask: np.ndarray | None = None) -> np.ndarray:
    """Numerically stable softmax. Entries that are masked out (mask False, or score -inf) get exactly 0;
    a row with nothing allowed is all zeros rather than NaN."""
    if mask is not None:
        x = np.where(mask, x, -np.inf)
    peak = x.max(axis=axis, keepdims=True)
    peak = np.where(np.isfinite(peak), peak, 0.0)  # an all -inf row: avoid inf - inf
    e = np.exp(x - peak)  # exp(-inf) is exactly 0
    total = e.sum(axis=axis, keepdims=True)  # >= 1 (the peak's own exp(0)) unless the whole row is masked
    return e / np.maximum(total, 1.0)


def relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0)


def gelu(x: np.ndarray) -> np.ndarray:
    """GELU, tanh approximation (as in GPT-2)."""
    return 0.5 * x * (1.0 + np.tanh(GELU_C * (x + 0.044715 * (x * x * x))))  # x * x * x: x**3 is ~100x slower


def silu(x: np.ndarray) -> np.ndarray:
    """x * sigmoid(x), with sigmoid written through tanh so that no exp overflows for large |x|."""
    return 0.5 * x * (1.0 + np.tanh(0.5 * x))


SQRT_HALF = math.sqrt(0.5)
# Chebyshev fit of erfc (Numerical Recipes' erfcc): erfc(z) = t exp(-z² + P(t)), t = 1 / (1 + z/2), z >= 0
ERFC_COEFFS = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398, 1.48851587,
               -0.82215223, 0.17087277)


def gelu_erf(x: np.ndarray) -> np.ndarray:
    """GELU as defined, x·Φ(x) with Φ the normal CDF (PyTorch's nn.GELU(), so nanoGPT's; "gelu" in HF configs).
    NumPy has no erf, so erfc is the fitted formula above: relative error below 1.2e-7, float32's rounding size."""
    z = np.abs(x) * SQRT_HALF
    t = 1.0 / (1.0 + 0.5 * z)
    poly = ERFC_COEFFS[-1]
    for c in ERFC_COEFFS[-2::-1]:
        poly = c + t * poly
    tail = t * np.exp(poly - z * z)  # erfc(|x|/√2) = 2·(1 - Φ(|x|))
    return 0.5 * x * np.where(x >= 0, 2.0 - tail, tail)


ACTIVATION_FUNCTIONS = {"relu": relu, "gelu": gelu, "gelu_erf": gelu_erf}


# Pyodide's NumPy (no BLAS) gains from folding every stack of matrices into one product. CPython folds only
# stacks of single rows: a stack of (T > 1, n) matrices as one gemm rounds differently from one gemm per matrix
# (OpenBLAS picks its kernels by size), which changed training's forward pass and so shipped.npz's weights.
FOLD_EVERY_STACK = sys.platform == "emscripten"


def linear(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x @ w for x (..., n) and w (n, m), the leading axes folded into one for a stack of single rows: NumPy would
    run one small product per batch row (a batch of single rows, as patching runs, is ~2.7x slower that way)."""
    if FOLD_EVERY_STACK and w.ndim == 2:
        return matmul.matmul(x.reshape(-1, x.shape[-1]), w).reshape(*x.shape[:-1], w.shape[-1])
    if x.ndim <= 2 or not (FOLD_EVERY_STACK or x.shape[-2] == 1):
        return x @ w
    return (x.reshape(-1, x.shape[-1]) @ w).reshape(*x.shape[:-1], w.shape[-1])


def heads_out(z: np.ndarray, w_o: np.ndarray) -> np.ndarray:
    """Each head's write into the residual stream, (..., H, T, d): head j's z (..., T, k) through its own k columns
    of w_o (d, H k)."""
    out = matmul.heads_out(z, w_o)  # the SIMD kernel, reading w_o in place, when the page has one
    if out is None:
        n_heads, k = z.shape[-3], z.shape[-1]
        out = z @ w_o.reshape(w_o.shape[0], n_heads, k).transpose(1, 2, 0)
    return out


class FeedForward(NamedTuple):
    """The feed-forward network's intermediate values: pre-activation, activation (the hidden layer), output."""

    pre: np.ndarray
    act: np.ndarray
    out: np.ndarray
    gate: np.ndarray | None = None  # SwiGLU only: x @ w_gate (+ no bias), before silu


def feed_forward(
    x: np.ndarray,
    w_in: np.ndarray,
    w_out: np.ndarray,
    activation: str = "relu",
    b_in: np.ndarray | None = None,
    b_out: np.ndarray | None = None,
    w_gate: np.ndarray | None = None,
    point: Point | None = None,
) -> FeedForward:
    """FFN(x) = act(x W_in + b_in) W_out + b_out; weights store input coordinates as rows.

    SwiGLU: act = silu(x W_gate) * (x W_in + b_in), the gate deciding how much of each hidden unit passes.
    `point(name, value)`, when given, sees each hidden value and returns the one to go on with (the model's hooks):
    "hook_pre" the pre-activation (SwiGLU: the gate's), "hook_pre_linear" SwiGLU's other branch, "hook_post" act.
    """
    point = point or _no_point
    pre = linear(x, w_in)
    if b_in is not None:
        pre = pre + b_in
    gate = None
    if activation == "swiglu":
        if w_gate is None:
            raise ValueError("feed_forward: activation 'swiglu' needs w_gate")
        gate = point("hook_pre", linear(x, w_gate))
        pre = point("hook_pre_linear", pre)
        act = silu(gate) * pre
    elif activation in ACTIVATION_FUNCTIONS:
        pre = point("hook_pre", pre)
        act = ACTIVATION_FUNCTIONS[activation](pre)
    else:
        raise ValueError(f"feed_forward: unknown activation {activation!r}")
    act = point("hook_post", act)
    out = linear(act, w_out)
    if b_out is not None:
        out = out + b_out
    return FeedForward(pre, act, out, gate)


def split_heads(x: np.ndarray, n_heads: int) -> np.ndarray:
    """(..., T, n_heads * k) -> (..., n_heads, T, k): head j owns columns j*k:(j+1)*k. A reshape, no copy of
    values between heads."""
    *lead, t, width = x.shape
    if width % n_heads:
        raise ValueError(f"split_heads: width {width} is not divisible by n_heads={n_heads}")
    # The method rather than np.swapaxes, whose dispatch costs more than the view (a few per block, every pass).
    return x.reshape(*lead, t, n_heads, width // n_heads).swapaxes(-3, -2)


def merge_heads(x: np.ndarray) -> np.ndarray:
    """(..., n_heads, T, k) -> (..., T, n_heads * k), the inverse of split_heads."""
    *lead, n_heads, t, k = x.shape
    return np.swapaxes(x, -3, -2).reshape(*lead, t, n_heads * k)


def causal_mask(n_queries: int, n_keys: int | None = None) -> np.ndarray:
    """(n_queries, n_keys) booleans, True where query i may attend to key j. The queries are the last
    n_queries positions of the n_keys (they follow a cache of n_keys - n_queries earlier positions)."""
    n_keys = n_queries if n_keys is None else n_keys
    offset = n_keys - n_queries
    return np.arange(n_keys)[None, :] <= np.arange(n_queries)[:, None] + offset


def padding_mask(lengths: np.ndarray, n_keys: int) -> np.ndarray:
    """(B, n_keys) booleans, True for real tokens (position < length), False for padding."""
    return np.arange(n_keys)[None, :] < np.asarray(lengths)[:, None]


def sinusoidal_positions(n_positions: int, n_model: int) -> np.ndarray:
    """The sin/cos table: row p, columns 2i and 2i+1 are sin and cos of p / 10000^(2i / n_model)."""
    angles = np.arange(n_positions)[:, None] / 10000.0 ** (np.arange(0, n_model, 2) / n_model)
    table = np.empty((n_positions, n_model))
    table[:, 0::2] = np.sin(angles)
    table[:, 1::2] = np.cos(angles)
    return table


def rope_angles(positions: np.ndarray, head_size: int, base: float = 10000.0, scale: float = 1.0) -> np.ndarray:
    """(T, head_size/2) rotation angles: position * base^(-2i/k) / scale for pair i."""
    freqs = base ** (-np.arange(0, head_size, 2) / head_size)
    return np.asarray(positions, dtype=np.float64)[:, None] * freqs[None, :] / scale


def rope_table(positions: np.ndarray, head_size: int, base: float = 10000.0, scale: float = 1.0
               ) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of rope_angles, (T, head_size) each: pair i's value at both of its coordinates 2i and 2i+1."""
    angles = np.repeat(rope_angles(positions, head_size, base, scale), 2, axis=-1)
    return np.cos(angles), np.sin(angles)


def rope(
    x: np.ndarray, positions: np.ndarray, base: float = 10000.0, scale: float = 1.0,
    table: tuple[np.ndarray, np.ndarray] | None = None, dims: int | None = None,
) -> np.ndarray:
    """Rotary position embedding: rotate each pair of coordinates (2i, 2i+1) of every row of x (..., T, k) by
    its position's angle. Dot products of rotated rows then depend only on the gap between positions.
    `table` (rope_table of positions 0..n-1 with this base and scale, as a model keeps it) is read at `positions`
    rather than computed again: the same numbers, elementwise. `dims` (even, below k: GPT-NeoX's partial rotary)
    turns only the first `dims` coordinates, with the angles of a head of that size; the others pass unchanged."""
    if dims is not None and dims < x.shape[-1]:
        out = x.copy(order="K")  # the same memory order as x (a pass's heads are a view inside positions)
        out[..., :dims] = rope(x[..., :dims], positions, base, scale, table)
        return out
    cos, sin = (rope_table(positions, x.shape[-1], base, scale) if table is None
                else (table[0][positions], table[1][positions]))
    cos, sin = cos.astype(x.dtype, copy=False), sin.astype(x.dtype, copy=False)
    if x.ndim >= 3 and x.size and x.shape[-2] > 1:
        # cos and sin repeated over the axis before T and laid out in memory as x is: NumPy then runs each product
        # below as a few long loops rather than one short loop per head (heads sit inside positions in a pass).
        # One position (a generation step, a patching run's metric row) gains less than the copies cost.
        cos, sin = _laid_out_like(x, cos), _laid_out_like(x, sin)
    # Per element the same operations as even·cos − odd·sin and even·sin + odd·cos, but the products run over
    # whole rows and only the subtraction and the addition read every other coordinate: 1.7x faster on a pass's
    # (B, H, T, k) view at T = 6, 2x at T = 32.
    p, q = x * cos, x * sin  # p = (even·cos, odd·cos) and q = (even·sin, odd·sin), pair by pair
    out = np.empty_like(x)
    np.subtract(p[..., 0::2], q[..., 1::2], out=out[..., 0::2])
    np.add(q[..., 0::2], p[..., 1::2], out=out[..., 1::2])
    return out


def _laid_out_like(x: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """`rows` (T, k) repeated along x's axis -3: an array shaped like x's last three axes, in their memory order."""
    out = np.empty_like(x[(0,) * (x.ndim - 3)])
    out[...] = rows
    return out


class Attention(NamedTuple):
    """Scaled dot-product attention's values: pre-softmax scores (masked = -inf), weights, output."""

    scores: np.ndarray
    weights: np.ndarray
    out: np.ndarray


def attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None, point: Point | None = None
) -> Attention:
    """softmax(q k^T / sqrt(head_size)) v over (..., heads, T, head_size) arrays.

    k and v may have fewer heads than q (grouped-query attention): query head j reads key/value head
    j // (q_heads / kv_heads). `point(name, value)`, when given, sees "hook_attn_scores" and "hook_pattern"
    (..., heads, T, S) and returns the value to go on with.
    """
    point = point or _no_point
    group = q.shape[-3] // k.shape[-3]
    if group > 1:
        k, v = np.repeat(k, group, axis=-3), np.repeat(v, group, axis=-3)
    scores = (q @ k.swapaxes(-1, -2)) / math.sqrt(q.shape[-1])  # a Python float keeps q's dtype
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    scores = point("hook_attn_scores", scores)
    weights = point("hook_pattern", softmax(scores))
    return Attention(scores, weights, weights @ v)
