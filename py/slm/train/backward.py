"""The backward pass: gradients of the next-token cross-entropy with respect to every parameter.

`backward(model, trace, ...)` walks the Trace that `Model.forward` recorded from the logits back to the
embeddings and returns a dict of gradients with the same names and shapes as `model.params`. It reuses the
forward pass's values; the only things it recomputes are two cheap products the trace does not keep (each
attention layer's per-head output before W_o, and the SwiGLU gate).

Every switch of `Config` is covered: layer / RMS norm, pre / post norm, sinusoidal / learned / RoPE / no
positions, ReLU / GELU / SwiGLU, grouped-query attention, biases, tied / untied unembedding, causal or not,
batches (B, T) with `lengths` (padding ignored in the loss and never attended).
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

from .. import layers, matmul
from ..model import Model, Trace

# ---- the loss ----


def next_token_targets(tokens: np.ndarray, lengths: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Targets (B, T) (row t predicts token t + 1) and a boolean (B, T) mask of the positions that count: a
    position counts if it and the token after it are real (not padding). The last position never counts."""
    tokens = np.atleast_2d(tokens)
    n_batch, n_time = tokens.shape
    targets = np.zeros_like(tokens)
    targets[:, :-1] = tokens[:, 1:]
    lengths = np.full(n_batch, n_time) if lengths is None else np.asarray(lengths)
    valid = np.arange(n_time)[None, :] < (lengths[:, None] - 1)
    return targets, valid


def cross_entropy(logits: np.ndarray, targets: np.ndarray, valid: np.ndarray | None = None) -> tuple[float, np.ndarray]:
    """Mean cross-entropy (nats) of `targets` (..., ) under `logits` (..., V) over the positions where `valid`
    is True, and its gradient with respect to the logits (zero at the ignored positions)."""
    valid = np.ones(targets.shape, dtype=bool) if valid is None else np.asarray(valid, dtype=bool)
    count = int(valid.sum())
    if count == 0:
        raise ValueError("cross_entropy: no valid positions")
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_total = np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    log_probs = shifted - log_total
    picked = np.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
    loss = -float(picked[valid].sum()) / count
    dlogits = np.exp(log_probs)
    np.put_along_axis(dlogits, targets[..., None], np.take_along_axis(dlogits, targets[..., None], -1) - 1.0, -1)
    dlogits *= (valid / count)[..., None]
    return loss, dlogits.astype(logits.dtype, copy=False)


def loss_and_grads(
    model: Model, tokens: Any, lengths: Any = None
) -> tuple[float, dict[str, np.ndarray], Trace]:
    """Forward (B, T) token ids, the mean next-token cross-entropy over real positions, and its gradients."""
    ids = np.atleast_2d(np.asarray(tokens))
    trace = model.forward(ids, lengths=lengths)
    targets, valid = next_token_targets(ids, trace.lengths)
    loss, dlogits = cross_entropy(trace.logits, targets, valid)
    return loss, backward(model, trace, dlogits=dlogits), trace


# ---- the pieces, each: given the upstream gradient, return the input gradient and add to the parameter grads ----


def _sum_rows(a: np.ndarray) -> np.ndarray:
    """Sum over every axis but the last."""
    return a.reshape(-1, a.shape[-1]).sum(axis=0)


# Pyodide's NumPy has no BLAS: there the products run as matmul.py chooses, over operands laid out for it, and
# the q, k and v projections' gradients as one product. The same layout slows CPython's BLAS down, and a fused
# product rounds differently, so CPython (and shipped.npz) keeps the plain path.
WASM_LAYOUT = sys.platform == "emscripten"


def _outer(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """sum over rows of a[r]^T b[r]: (.., m), (.., n) -> (m, n)."""
    a2, b2 = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
    if WASM_LAYOUT:
        return matmul.matmul_tn(a2, b2)
    return a2.T @ b2


def _mm(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """a (.., m) @ w (m, n)."""
    if WASM_LAYOUT:
        return matmul.matmul(a.reshape(-1, a.shape[-1]), w).reshape(*a.shape[:-1], w.shape[-1])
    return a @ w


def _norm_backward(model: Model, name: str, x: np.ndarray, dout: np.ndarray, grads: dict) -> np.ndarray:
    """Backward of the named layer / RMS norm applied to x."""
    cfg, weight = model.cfg, model.params[f"{name}.weight"]
    if cfg.norm == "layer":
        centred = x - x.mean(axis=-1, keepdims=True)
        inv = 1.0 / np.sqrt((centred * centred).mean(axis=-1, keepdims=True) + cfg.eps)
        xhat = centred * inv
        grads[f"{name}.bias"] += _sum_rows(dout)
    else:
        inv = 1.0 / np.sqrt((x * x).mean(axis=-1, keepdims=True) + cfg.eps)
        xhat = x * inv
    grads[f"{name}.weight"] += _sum_rows(dout * xhat)
    dxhat = dout * weight
    dx = dxhat - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True)
    if cfg.norm == "layer":
        dx -= dxhat.mean(axis=-1, keepdims=True)
    return dx * inv


def gelu_grad(x: np.ndarray) -> np.ndarray:
    """d/dx of layers.gelu (the tanh approximation)."""
    inner = layers.GELU_C * (x + 0.044715 * x**3)
    t = np.tanh(inner)
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * layers.GELU_C * (1.0 + 3 * 0.044715 * x * x)


def _ffn_backward(model: Model, i: int, x: np.ndarray, lt: Any, dout: np.ndarray, grads: dict) -> np.ndarray:
    cfg, p, f = model.cfg, model.params, f"blocks.{i}.ffn"
    grads[f"{f}.w_out"] += _outer(lt.ff_act, dout)
    if cfg.bias:
        grads[f"{f}.b_out"] += _sum_rows(dout)
    dact = _mm(dout, p[f"{f}.w_out"].T)
    if cfg.activation == "relu":
        dpre = dact * (lt.ff_pre > 0)
    elif cfg.activation == "gelu":
        dpre = dact * gelu_grad(lt.ff_pre)
    else:  # swiglu: act = silu(gate) * pre; the trace keeps pre and act, the gate is recomputed
        gate = x @ p[f"{f}.w_gate"]
        sig = 1.0 / (1.0 + np.exp(-gate))
        dpre = dact * gate * sig
        dgate = dact * lt.ff_pre * sig * (1.0 + gate * (1.0 - sig))
        grads[f"{f}.w_gate"] += _outer(x, dgate)
    grads[f"{f}.w_in"] += _outer(x, dpre)
    if cfg.bias:
        grads[f"{f}.b_in"] += _sum_rows(dpre)
    dx = _mm(dpre, p[f"{f}.w_in"].T)
    if cfg.activation == "swiglu":
        dx += _mm(dgate, p[f"{f}.w_gate"].T)
    return dx


def _attention_backward(
    model: Model, i: int, x: np.ndarray, lt: Any, positions: np.ndarray, dout: np.ndarray, grads: dict
) -> np.ndarray:
    """Backward of one attention sublayer reading x (B, T, d); dout is the gradient of attn_out."""
    cfg, p, a = model.cfg, model.params, f"blocks.{i}.attn"
    group = cfg.group_size
    # An np.float64 scale makes float32 gradients float64 from here on, as CPython's training (and shipped.npz) has
    # it; Pyodide's products keep float32, which halves their memory traffic and which the SIMD kernel needs.
    scale = 1.0 / math.sqrt(cfg.head_size) if WASM_LAYOUT else 1.0 / np.sqrt(cfg.head_size)
    k_rep = np.repeat(lt.k, group, axis=-3) if group > 1 else lt.k  # (B, H, S, k)
    v_rep = np.repeat(lt.v, group, axis=-3) if group > 1 else lt.v
    heads = lt.attention @ v_rep  # (B, H, T, k): what W_o reads (not kept in the trace)

    # attn_out = merge_heads(heads) @ w_o.T + b_o
    merged = layers.merge_heads(heads)
    grads[f"{a}.w_o"] += _outer(dout, merged)
    if cfg.bias:
        grads[f"{a}.b_o"] += _sum_rows(dout)
    dheads = layers.split_heads(_mm(dout, p[f"{a}.w_o"]), cfg.n_heads)

    # heads = A @ v;  A = softmax(scores);  scores = q k^T * scale (masked entries have A = 0 and get no gradient)
    weights = lt.attention
    dweights = dheads @ np.swapaxes(v_rep, -1, -2)
    dv_rep = np.swapaxes(weights, -1, -2) @ dheads
    dscores = weights * (dweights - (dweights * weights).sum(axis=-1, keepdims=True))
    dq = (dscores @ k_rep) * scale
    dk_rep = (np.swapaxes(dscores, -1, -2) @ lt.q) * scale
    if group > 1:
        shape = dk_rep.shape
        dk = dk_rep.reshape(*shape[:-3], cfg.n_kv_heads, group, *shape[-2:]).sum(axis=-3)
        dv = dv_rep.reshape(*shape[:-3], cfg.n_kv_heads, group, *shape[-2:]).sum(axis=-3)
    else:
        dk, dv = dk_rep, dv_rep
    if cfg.positions == "rope":  # RoPE is a rotation; its transpose rotates back by the same angle
        dq = layers.rope(dq, -positions, cfg.rope_base, cfg.rope_scale, dims=cfg.rotary_dim)
        dk = layers.rope(dk, -positions, cfg.rope_base, cfg.rope_scale, dims=cfg.rotary_dim)

    if WASM_LAYOUT:  # one product for q, k and v together: fewer, larger loops
        dlin = np.concatenate([layers.merge_heads(dq), layers.merge_heads(dk), layers.merge_heads(dv)], axis=-1)
        names = [f"{a}.w_{which}" for which in "qkv"]
        bounds = np.cumsum([p[n].shape[0] for n in names])[:-1]
        for name, g in zip(names, np.split(_outer(dlin, x), bounds, axis=0), strict=True):
            grads[name] += g
        if cfg.bias:
            for which, g in zip("qkv", np.split(_sum_rows(dlin), bounds), strict=True):
                grads[f"{a}.b_{which}"] += g
        return _mm(dlin, np.concatenate([p[n] for n in names], axis=0))
    dx = np.zeros_like(x)
    for which, dproj in (("q", dq), ("k", dk), ("v", dv)):
        dlin = layers.merge_heads(dproj)  # (B, T, width)
        grads[f"{a}.w_{which}"] += _outer(dlin, x)
        if cfg.bias:
            grads[f"{a}.b_{which}"] += _sum_rows(dlin)
        dx += dlin @ p[f"{a}.w_{which}"]
    return dx


# ---- the whole model ----


def backward(
    model: Model,
    trace: Trace,
    targets: Any = None,
    dlogits: Any = None,
) -> dict[str, np.ndarray]:
    """Gradients of a loss with respect to every parameter, named as in model.params.

    Give either `dlogits` (the loss's gradient with respect to trace.logits, same shape) or `targets`: then the
    loss is the mean next-token cross-entropy of the traced tokens over real positions (padding from
    trace.lengths ignored) — `targets` True means exactly that; an integer array of next tokens (same shape as
    trace.tokens, with -1 marking positions to ignore) gives other targets.

    The trace must come from model.forward without a KVCache (the whole sequence, from position 0)."""
    cfg, p = model.cfg, model.params
    batched = trace.tokens.ndim == 2
    if not batched:
        trace = _add_batch_axis(trace)
    if trace.positions.size != trace.tokens.shape[1] or (trace.positions.size and trace.positions[0] != 0):
        raise ValueError("backward needs a trace of whole sequences (run without a KVCache)")

    if dlogits is None:
        if targets is None:
            raise ValueError("backward needs dlogits or targets")
        if isinstance(targets, bool) and targets:
            tgt, valid = next_token_targets(trace.tokens, trace.lengths)
        else:
            tgt = np.atleast_2d(np.asarray(targets))
            if tgt.shape != trace.tokens.shape:
                raise ValueError(f"targets must have the tokens' shape {trace.tokens.shape}, got {tgt.shape}")
            valid = tgt >= 0
            if trace.lengths is not None:
                valid &= layers.padding_mask(trace.lengths, tgt.shape[1])
            tgt = np.where(valid, tgt, 0)
        _, dlogits = cross_entropy(trace.logits, tgt, valid)
    else:
        dlogits = np.asarray(dlogits)
        if dlogits.shape != np.shape(trace.logits) and not batched:
            dlogits = dlogits[None]
        if dlogits.shape != trace.logits.shape:
            raise ValueError(f"dlogits must have the logits' shape {trace.logits.shape}, got {dlogits.shape}")

    grads = {name: np.zeros_like(value) for name, value in p.items()}

    # logits = final @ U, U = unembed or tok_emb.T
    if cfg.tied:
        grads["tok_emb"] += _outer(dlogits, trace.final)
    else:
        grads["unembed"] += _outer(trace.final, dlogits)
    d = _mm(dlogits, model.unembedding().T)  # gradient of `final`

    last = trace.layers[-1].y if trace.layers else trace.x
    if cfg.norm_placement == "pre":
        d = _norm_backward(model, "norm_f", last, d, grads)

    pre = cfg.norm_placement == "pre"
    for i in range(cfg.n_layers - 1, -1, -1):
        lt = trace.layers[i]
        x = trace.layers[i - 1].y if i else trace.x
        if cfg.parallel_residual:  # y = x + Attn(N1(x)) + FFN(N2(x))
            dffn_in = _ffn_backward(model, i, lt.ffn_in, lt, d, grads)
            dattn_in = _attention_backward(model, i, lt.attn_in, lt, trace.positions, d, grads)
            d = (d + _norm_backward(model, f"blocks.{i}.norm2", x, dffn_in, grads)
                 + _norm_backward(model, f"blocks.{i}.norm1", x, dattn_in, grads))
        elif pre:  # h = x + Attn(N1(x)); y = h + FFN(N2(h))
            dffn_in = _ffn_backward(model, i, lt.ffn_in, lt, d, grads)
            dh = d + _norm_backward(model, f"blocks.{i}.norm2", lt.h, dffn_in, grads)
            dattn_in = _attention_backward(model, i, lt.attn_in, lt, trace.positions, dh, grads)
            d = dh + _norm_backward(model, f"blocks.{i}.norm1", x, dattn_in, grads)
        else:  # h = N1(x + Attn(x)); y = N2(h + FFN(h))
            dz2 = _norm_backward(model, f"blocks.{i}.norm2", lt.h + lt.ff_out, d, grads)
            dh = dz2 + _ffn_backward(model, i, lt.h, lt, dz2, grads)
            dz1 = _norm_backward(model, f"blocks.{i}.norm1", x + lt.attn_out, dh, grads)
            d = dz1 + _attention_backward(model, i, x, lt, trace.positions, dz1, grads)

    # x = tok_emb[tokens] + pos
    tokens, rows = trace.tokens.reshape(-1), d.reshape(-1, cfg.n_model)
    if WASM_LAYOUT:  # the rows summed per token after a sort: np.add.at's per-row loop is slower there
        order = np.argsort(tokens, kind="stable")
        ordered = tokens[order]
        starts = np.flatnonzero(np.concatenate([[True], ordered[1:] != ordered[:-1]]))
        grads["tok_emb"][ordered[starts]] += np.add.reduceat(rows[order], starts, axis=0)
    else:
        np.add.at(grads["tok_emb"], tokens, rows)
    if cfg.positions == "learned":
        grads["pos_emb"][trace.positions] += d.sum(axis=0)
    return grads


def _add_batch_axis(trace: Trace) -> Trace:
    from ..model import LayerTrace

    def lead(value: Any) -> Any:
        return value[None] if isinstance(value, np.ndarray) else value

    layer_traces = [LayerTrace(**{n: lead(v) for n, v in vars(lt).items()}) for lt in trace.layers]
    fields = {n: lead(v) for n, v in vars(trace).items() if n not in ("layers", "positions", "lengths")}
    return Trace(**fields, layers=layer_traces, positions=trace.positions, lengths=None)
