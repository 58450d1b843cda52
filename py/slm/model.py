"""The decoder-only transformer: a forward pass that records every intermediate value in a Trace.

Pre-norm block:  h = x + Attn(N1(x));   y = h + FFN(N2(h));   after the last block: final = N_f(y)
Post-norm block: h = N1(x + Attn(x));   y = N2(h + FFN(h));   final = y
logits = final @ unembed  (or final @ tok_emb.T when tied)
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import layers
from .config import Config
from .params import check_params, init_params


@dataclass
class LayerTrace:
    """One block's intermediate values. Shapes for one sequence; a leading batch axis when batched.
    Rows are positions; H = n_heads, G = n_kv_heads, T = rows run now, S = all key positions (cache + T)."""

    attn_in: np.ndarray  # (T, d) what attention reads: N1(x) pre-norm, x post-norm
    q: np.ndarray  # (H, T, k) after RoPE
    k: np.ndarray  # (G, S, k) after RoPE, cached keys included
    v: np.ndarray  # (G, S, k)
    scores: np.ndarray  # (H, T, S) q·k/sqrt(k), masked = -inf
    attention: np.ndarray  # (H, T, S) softmax weights; masked exactly 0
    head_out: np.ndarray  # (H, T, d) each head's write into the residual
    attn_out: np.ndarray  # (T, d) = head_out.sum over heads + b_o
    h: np.ndarray  # (T, d) residual after the attention sublayer
    ffn_in: np.ndarray  # (T, d) N2(h) pre-norm, h post-norm
    ff_pre: np.ndarray  # (T, f) x W_in + b_in
    ff_act: np.ndarray  # (T, f) the hidden layer after the activation (SwiGLU: gated)
    ff_out: np.ndarray  # (T, d) the feed-forward's write into the residual
    y: np.ndarray  # (T, d) residual after the block


@dataclass
class Trace:
    """Everything the forward pass computed, named as in the lesson."""

    tokens: np.ndarray  # (T,) ids
    tok: np.ndarray  # (T, d) token embedding rows
    pos: np.ndarray  # (T, d) added position rows (zeros for rope / none)
    x: np.ndarray  # (T, d) rows entering block 0
    layers: list[LayerTrace]
    final: np.ndarray  # (T, d) what the unembedding reads
    logits: np.ndarray  # (T, V)
    probs: np.ndarray  # (T, V)
    positions: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))  # (T,) absolute positions
    lengths: np.ndarray | None = None  # (B,) when batched with padding

    @property
    def attention(self) -> np.ndarray:
        """(L, H, T, S) attention weights of every layer (B first when batched)."""
        return np.stack([layer.attention for layer in self.layers], axis=-4)


Hooks = Mapping[str, Callable[[np.ndarray], np.ndarray]]


def _hook(hooks: Hooks | None, point: str, value: np.ndarray) -> np.ndarray:
    """The value the forward pass goes on with at `point`: `value` itself, or what the hook there returns."""
    if hooks is None or point not in hooks:
        return value
    new = np.asarray(hooks[point](value), dtype=value.dtype)
    if new.shape != value.shape:
        raise ValueError(f"the hook at {point} returned shape {new.shape}, expected {value.shape}")
    return new


class KVCache:
    """Keys and values of the positions already run, per layer, so generation runs only the new token.

    One sequence at a time (batch axis of 1)."""

    def __init__(self, n_layers: int) -> None:
        self.keys: list[np.ndarray | None] = [None] * n_layers
        self.values: list[np.ndarray | None] = [None] * n_layers
        self.length = 0

    def extend(self, layer: int, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.keys[layer] is not None:
            k = np.concatenate([self.keys[layer], k], axis=-2)
            v = np.concatenate([self.values[layer], v], axis=-2)
        self.keys[layer], self.values[layer] = k, v
        return k, v


class Model:
    """A decoder-only transformer given by a Config and a dict of named parameters (see slm.params)."""

    def __init__(self, cfg: Config, params: dict[str, np.ndarray], meta: dict[str, Any] | None = None) -> None:
        check_params(cfg, params)
        self.cfg = cfg
        self.params = {name: np.asarray(value) for name, value in params.items()}
        self.meta = dict(meta or {})  # JSON-serialisable extras saved with the weights (e.g. the vocabulary)
        self.dtype = self.params["tok_emb"].dtype
        self._sinusoids = (
            layers.sinusoidal_positions(cfg.n_ctx, cfg.n_model).astype(self.dtype)
            if cfg.positions == "sinusoidal"
            else None
        )

    @classmethod
    def init(cls, cfg: Config, seed: int = 0, dtype: type = np.float64) -> Model:
        """A freshly initialised model; the same seed gives the same weights."""
        return cls(cfg, init_params(cfg, seed, dtype))

    # ---- the forward pass, top to bottom ----

    def forward(
        self, tokens: Any, lengths: Any = None, cache: KVCache | None = None, hooks: Hooks | None = None
    ) -> Trace:
        """Run token ids (T,) or (B, T). With `lengths` (B,), positions at or past a row's length are padding:
        never attended, and every valid row equals the unbatched run of that sequence. With a `cache`, the tokens
        continue the cached sequence (one sequence, no padding) and the cache is extended.

        `hooks` maps a hook point to a function that gets the value computed there and returns the value the
        pass goes on with (for ablation and patching, see slm.interventions). Hook points:
        "blocks.{i}.x" (T, d) the rows entering block i; "blocks.{i}.head_out" (H, T, d) each head's write."""
        ids, batched = self._check_tokens(tokens, cache)
        if cache is not None and not self.cfg.causal:
            raise ValueError("a KVCache needs a causal model: without the mask, cached rows would miss later tokens")
        n_new = ids.shape[-1]
        start = 0 if cache is None else cache.length
        positions = np.arange(start, start + n_new)
        mask = layers.causal_mask(n_new, start + n_new) if self.cfg.causal else np.ones((n_new, start + n_new), bool)
        if lengths is not None:
            lengths = self._check_lengths(lengths, ids, batched, cache)
            mask = mask & layers.padding_mask(lengths, n_new)[:, None, None, :]

        tok = self.params["tok_emb"][ids]
        pos = self._position_rows(positions, tok)
        x = x0 = _hook(hooks, "blocks.0.x", tok + pos)
        layer_traces = []
        for i in range(self.cfg.n_layers):
            if i > 0:
                x = _hook(hooks, f"blocks.{i}.x", x)
            layer_traces.append(self._block(i, x, positions, mask, cache, hooks))
            x = layer_traces[-1].y
        final = self.norm("norm_f", x) if self.cfg.norm_placement == "pre" else x
        logits = final @ self.unembedding()
        if cache is not None:
            cache.length += n_new

        trace = Trace(
            tokens=ids, tok=tok, pos=pos, x=x0, layers=layer_traces, final=final, logits=logits,
            probs=layers.softmax(logits), positions=positions, lengths=lengths,
        )
        return trace

    def _block(
        self, i: int, x: np.ndarray, positions: np.ndarray, mask: np.ndarray, cache: KVCache | None,
        hooks: Hooks | None,
    ) -> LayerTrace:
        pre = self.cfg.norm_placement == "pre"
        attn_in = self.norm(f"blocks.{i}.norm1", x) if pre else x
        q, k, v, scores, weights, head_out, attn_out = self._attention(i, attn_in, positions, mask, cache, hooks)
        h = x + attn_out if pre else self.norm(f"blocks.{i}.norm1", x + attn_out)
        ffn_in = self.norm(f"blocks.{i}.norm2", h) if pre else h
        ffn = self._feed_forward(i, ffn_in)
        y = h + ffn.out if pre else self.norm(f"blocks.{i}.norm2", h + ffn.out)
        return LayerTrace(
            attn_in=attn_in, q=q, k=k, v=v, scores=scores, attention=weights, head_out=head_out,
            attn_out=attn_out, h=h, ffn_in=ffn_in, ff_pre=ffn.pre, ff_act=ffn.act, ff_out=ffn.out, y=y,
        )

    def _attention(
        self, i: int, x: np.ndarray, positions: np.ndarray, mask: np.ndarray, cache: KVCache | None,
        hooks: Hooks | None,
    ) -> tuple[np.ndarray, ...]:
        cfg, p = self.cfg, self.params
        a = f"blocks.{i}.attn"
        q = layers.split_heads(self._linear(x, a, "q"), cfg.n_heads)
        k = layers.split_heads(self._linear(x, a, "k"), cfg.n_kv_heads)
        v = layers.split_heads(self._linear(x, a, "v"), cfg.n_kv_heads)
        if cfg.positions == "rope":
            q = layers.rope(q, positions, cfg.rope_base, cfg.rope_scale)
            k = layers.rope(k, positions, cfg.rope_base, cfg.rope_scale)
        if cache is not None:
            k, v = cache.extend(i, k, v)
        att = layers.attention(q, k, v, mask)
        # Head j's write into the residual: its k output coordinates through its own k columns of w_o.
        w_o = p[f"{a}.w_o"].reshape(cfg.n_model, cfg.n_heads, cfg.head_size).transpose(1, 2, 0)  # (H, k, d)
        head_out = _hook(hooks, f"blocks.{i}.head_out", att.out @ w_o)
        attn_out = head_out.sum(axis=-3)
        if cfg.bias:
            attn_out = attn_out + p[f"{a}.b_o"]
        return q, k, v, att.scores, att.weights, head_out, attn_out

    def _feed_forward(self, i: int, x: np.ndarray) -> layers.FeedForward:
        p, f = self.params, f"blocks.{i}.ffn"
        return layers.feed_forward(
            x, p[f"{f}.w_in"], p[f"{f}.w_out"], self.cfg.activation,
            p.get(f"{f}.b_in"), p.get(f"{f}.b_out"), p.get(f"{f}.w_gate"),
        )

    def _linear(self, x: np.ndarray, prefix: str, which: str) -> np.ndarray:
        out = x @ self.params[f"{prefix}.w_{which}"].T
        bias = self.params.get(f"{prefix}.b_{which}")
        return out if bias is None else out + bias

    def norm(self, name: str, x: np.ndarray) -> np.ndarray:
        """Apply the named norm (e.g. "norm_f", "blocks.0.norm1") with this model's weights."""
        weight = self.params[f"{name}.weight"]
        if self.cfg.norm == "rms":
            return layers.rms_norm(x, weight, self.cfg.eps)
        return layers.layer_norm(x, weight, self.params[f"{name}.bias"], self.cfg.eps)

    def _position_rows(self, positions: np.ndarray, like: np.ndarray) -> np.ndarray:
        if self.cfg.positions == "sinusoidal":
            return np.broadcast_to(self._sinusoids[positions], like.shape)
        if self.cfg.positions == "learned":
            return np.broadcast_to(self.params["pos_emb"][positions], like.shape)
        return np.zeros_like(like)  # rope acts inside attention; none adds nothing

    def unembedding(self) -> np.ndarray:
        """The (d, V) matrix that turns a final row into logits."""
        return self.params["tok_emb"].T if self.cfg.tied else self.params["unembed"]

    # ---- input checks: a clear ValueError naming the argument ----

    def _check_tokens(self, tokens: Any, cache: KVCache | None) -> tuple[np.ndarray, bool]:
        ids = np.asarray(tokens)
        if ids.ndim not in (1, 2) or ids.shape[-1] == 0:
            raise ValueError(f"tokens must be a non-empty (T,) or (B, T) array of ids, got shape {ids.shape}")
        if ids.dtype.kind not in "iu":
            if ids.dtype.kind == "f" and np.all(ids == np.round(ids)):
                ids = ids.astype(np.int64)
            else:
                raise ValueError(f"tokens must be integer ids, got dtype {ids.dtype}")
        if ids.min() < 0 or ids.max() >= self.cfg.n_vocab:
            raise ValueError(f"tokens must be ids in [0, {self.cfg.n_vocab}), got values {ids.min()}..{ids.max()}")
        batched = ids.ndim == 2  # unbatched ids run without a batch axis: every array is one sequence's
        total = ids.shape[-1] + (0 if cache is None else cache.length)
        if total > self.cfg.n_ctx:
            raise ValueError(f"tokens: {total} positions exceed the context length n_ctx={self.cfg.n_ctx}")
        if cache is not None and batched and ids.shape[0] != 1:
            raise ValueError("a KVCache holds one sequence: pass tokens of shape (T,)")
        return ids, batched

    @staticmethod
    def _check_lengths(lengths: Any, ids: np.ndarray, batched: bool, cache: KVCache | None) -> np.ndarray:
        if cache is not None:
            raise ValueError("lengths (padding) cannot be combined with a KVCache")
        lengths = np.asarray(lengths)
        if not batched or lengths.shape != (ids.shape[0],):
            raise ValueError(f"lengths must have shape (B,) = ({ids.shape[0]},) for (B, T) tokens")
        if lengths.min() < 1 or lengths.max() > ids.shape[1]:
            raise ValueError(f"lengths must be between 1 and T={ids.shape[1]}, got {lengths.tolist()}")
        return lengths

    # ---- saving and loading: one .npz of arrays, the config and the meta data as JSON ----

    def save(self, path: str | os.PathLike | io.IOBase) -> None:
        arrays = dict(self.params)
        arrays["__config__"] = np.array(self.cfg.to_json())
        arrays["__meta__"] = np.array(json.dumps(self.meta, sort_keys=True))
        np.savez_compressed(path, **arrays)

    @classmethod
    def load(cls, source: str | os.PathLike | bytes | io.IOBase) -> Model:
        """Load a model saved with save(), from a path, raw bytes or a binary file object."""
        if isinstance(source, bytes | bytearray | memoryview):
            source = io.BytesIO(bytes(source))
        try:
            with np.load(source, allow_pickle=False) as npz:
                arrays = {name: npz[name] for name in npz.files}
        except (OSError, ValueError, EOFError) as exc:
            raise ValueError(f"not a saved slm model (.npz): {exc}") from None
        if "__config__" not in arrays:
            raise ValueError("not a saved slm model: the file has no __config__ entry")
        cfg = Config.from_json(str(arrays.pop("__config__")))
        meta = json.loads(str(arrays.pop("__meta__"))) if "__meta__" in arrays else {}
        return Model(cfg, arrays, meta)  # a plain Model whatever subclass saved it
