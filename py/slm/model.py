"""The decoder-only transformer: a forward pass that records every intermediate value in a Trace.

Pre-norm block:  h = x + Attn(N1(x));   y = h + FFN(N2(h));   after the last block: final = N_f(y)
Post-norm block: h = N1(x + Attn(x));   y = N2(h + FFN(h));   final = y
Parallel block:  y = x + Attn(N1(x)) + FFN(N2(x))  (pre-norm, GPT-NeoX's use_parallel_residual: no h)
logits = final @ unembed  (or final @ tok_emb.T when tied)
RoPE turns the first r = rope_dims coordinates of each head's q and k (all k unless rotary_dim says fewer).
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from . import layers, npz_views
from .config import Config
from .hooks import ActivationCache, HookFn, HookRun, NameFilter, name_filter
from .params import check_params, init_params
from .tokenizer import WordTokenizer
from .tokenizer import from_json as tokenizer_from_json


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
    h: np.ndarray | None  # (T, d) residual after the attention sublayer; None in a parallel block (no such stage)
    ffn_in: np.ndarray  # (T, d) N2(h) pre-norm, h post-norm, N2(x) parallel
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
    logits: np.ndarray  # (T, V), or (P, V) at output_positions
    probs: np.ndarray  # (T, V), or (P, V) at output_positions
    positions: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))  # (T,) absolute positions
    lengths: np.ndarray | None = None  # (B,) when batched with padding
    output_positions: np.ndarray | None = None  # (P,) the rows (0..T-1) logits and probs hold; None = every row

    def logit_row(self, position: int) -> int:
        """The index into logits / probs of row `position` of the tokens (negative counts from the end)."""
        n = self.final.shape[-2]
        if not -n <= position < n:
            raise IndexError(f"position {position} is outside the {n} rows run")
        if self.output_positions is None:
            return position % n
        hits = np.flatnonzero(self.output_positions == position % n)
        if not hits.size:
            raise KeyError(f"no logits at position {position}: forward computed them at "
                           f"{self.output_positions.tolist()} only (output_positions)")
        return int(hits[0])

    @property
    def attention(self) -> np.ndarray:
        """(L, H, T, S) attention weights of every layer (B first when batched)."""
        return np.stack([layer.attention for layer in self.layers], axis=-4)


FwdHooks = Sequence[tuple["str | Callable[[str], bool]", HookFn]]
_IDLE = HookRun()  # the hooks of a block nothing reads: stateless, so one serves every pass
_NORM_HOOKS = {"norm1": "ln1", "norm2": "ln2", "norm_f": "ln_final"}  # slm's parameter names, TL's hook names


def _row_index(rows: np.ndarray | None) -> np.ndarray | slice | None:
    """How to take `rows` (output_positions) from a pos axis: one row as a slice, whose view costs a tenth of the
    copy an index array makes (a patching run's last block takes the metric's row from four arrays)."""
    if rows is None or rows.size != 1:
        return rows
    row = int(rows[0])
    return slice(row, row + 1)


class _Span(NamedTuple):
    """Where the rows of one pass sit: what attention needs besides the rows themselves."""

    positions: np.ndarray  # (T,) absolute positions of the rows run now (after the cached ones)
    mask: np.ndarray | None  # (..., T, S) True where a row may attend to a key; None: every key
    cache: KVCache | None  # the keys and values of earlier positions, extended by this pass


class KVCache:
    """Keys and values of the positions already run, per layer, so generation runs only the new token.

    One sequence, or a batch of sequences of one length (no padding), continued with the same batch."""

    def __init__(self, n_layers: int) -> None:
        self.keys: list[np.ndarray | None] = [None] * n_layers  # (..., positions held, k): views of the buffers
        self.values: list[np.ndarray | None] = [None] * n_layers
        self._buffers: list[tuple[np.ndarray, np.ndarray] | None] = [None] * n_layers
        self.length = 0
        self.batch: int | None = None  # the batch it holds; None: one sequence without a batch axis

    def extend(self, layer: int, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The layer's keys and values with `k` and `v` (new positions) appended. They go into buffers that double
        when full, so a generated token copies its own row only (a concatenation copies the whole cache, which is
        megabytes a token for a 124M model)."""
        held = 0 if self.keys[layer] is None else self.keys[layer].shape[-2]
        need = held + k.shape[-2]
        buffers = self._buffers[layer]
        dtype = k.dtype if buffers is None else np.result_type(buffers[0], k)
        if buffers is None or buffers[0].shape[-2] < need or buffers[0].dtype != dtype:
            size = max(need, 2 * held)
            grown = tuple(np.empty((*new.shape[:-2], size, new.shape[-1]), dtype) for new in (k, v))
            if held:
                grown[0][..., :held, :] = self.keys[layer]
                grown[1][..., :held, :] = self.values[layer]
            buffers = self._buffers[layer] = grown
        buffers[0][..., held:need, :] = k
        buffers[1][..., held:need, :] = v
        self.keys[layer], self.values[layer] = buffers[0][..., :need, :], buffers[1][..., :need, :]
        return self.keys[layer], self.values[layer]


class Model:
    """A decoder-only transformer given by a Config and a dict of named parameters (see slm.params)."""

    def __init__(self, cfg: Config, params: dict[str, np.ndarray], meta: dict[str, Any] | None = None,
                 tokenizer: Any = None) -> None:
        check_params(cfg, params)
        self.cfg = cfg
        self.params = {name: np.asarray(value) for name, value in params.items()}
        self.meta = dict(meta or {})  # JSON-serialisable extras saved with the weights (e.g. the vocabulary)
        if tokenizer is None and isinstance(self.meta.get("vocab"), list):
            tokenizer = WordTokenizer(self.meta["vocab"])  # the shipped model's files name their words this way
        self.tokenizer = tokenizer  # text <-> ids (slm.tokenizer), or None for a bare model
        self.dtype = self.params["tok_emb"].dtype
        self._sinusoids = (
            layers.sinusoidal_positions(cfg.n_ctx, cfg.n_model).astype(self.dtype)
            if cfg.positions == "sinusoidal"
            else None
        )
        # RoPE's cos and sin of every position, computed once: the same numbers rope() would compute per call.
        self._rope_table = (
            layers.rope_table(np.arange(cfg.n_ctx), cfg.rope_dims, cfg.rope_base, cfg.rope_scale)
            if cfg.positions == "rope"
            else None
        )

    @classmethod
    def init(cls, cfg: Config, seed: int = 0, dtype: type = np.float64) -> Model:
        """A freshly initialised model; the same seed gives the same weights."""
        return cls(cfg, init_params(cfg, seed, dtype))

    # ---- the forward pass, top to bottom ----
    #
    # One pass serves everything. forward() runs the equations of this file's header through every block and keeps
    # each value in a Trace; run_with_hooks / run_with_cache run the same stages from start_at_layer to
    # stop_at_layer and return only the output (and the cache). Every value goes through hooks.point(name, value),
    # named as TransformerLens names it; a hook that replaces a value changes everything after it.

    def forward(
        self, tokens: Any, lengths: Any = None, cache: KVCache | None = None, fwd_hooks: FwdHooks = (),
        output_positions: Any = None,
    ) -> Trace:
        """Run token ids (T,) or (B, T) and record every value in a Trace. With `lengths` (B,), positions at or
        past a row's length are padding: never attended, and every valid row equals the unbatched run of that
        sequence. With a `cache`, the tokens continue the cached sequence (one sequence, or a batch of one length:
        no padding) and the cache is extended.

        `fwd_hooks` are (name or predicate, fn(value, hook)) pairs as in run_with_hooks; their values have no batch
        axis when the tokens have none.

        `output_positions` (a row or a list of rows of these tokens, negative counting from the end; the same
        argument as run_with_hooks's) returns the output at those rows only: logits and probs are then (..., P, V),
        in that order, and trace.logit_row(p) finds a row. Everything else in the Trace is computed at every row as
        without it. For a large vocabulary the unembedding is most of the pass (d=288, V=32000: ~10x a block's
        matmuls per row)."""
        ids, batched = self._check_tokens(tokens, cache)
        if lengths is not None:
            lengths = self._check_lengths(lengths, ids.shape, batched, cache)
        rows = self._check_rows(output_positions, ids.shape[-1])
        hooks, span = self._hooks(fwd_hooks), self._span(ids.shape[-1], lengths, cache)

        tok, pos = self._embed(ids, span.positions, hooks)
        x, block_traces, y = self._blocks(tok + pos, span, hooks, keep=True)
        final = self.norm("norm_f", y, hooks) if self.cfg.norm_placement == "pre" else y  # post-norm: y is normed
        logits = layers.linear(final if rows is None else final[..., _row_index(rows), :], self.unembedding())

        if cache is not None:
            cache.length += ids.shape[-1]
            cache.batch = ids.shape[0] if batched else None
        return Trace(tokens=ids, tok=tok, pos=pos, x=x, layers=block_traces, final=final, logits=logits,
                     probs=layers.softmax(logits), positions=span.positions, lengths=lengths, output_positions=rows)

    def next_logits(self, tokens: Any, cache: KVCache | None = None, fwd_hooks: FwdHooks = ()) -> np.ndarray:
        """The next-token logits after the last of token ids (T,) or (B, T): (V,) or (B, V), what generation reads.
        With a `cache` the tokens continue it and extend it, as in forward(), whose Trace this does not keep: the
        last block computes its keys and values at every row and the rest at the last row only (as run_with_hooks
        does with output_positions), and the hooks there see that one row."""
        ids, batched = self._check_tokens(tokens, cache)
        hooks, span = self._hooks(fwd_hooks), self._span(ids.shape[-1], None, cache)
        last = np.array([ids.shape[-1] - 1])
        tok, pos = self._embed(ids, span.positions, hooks)
        # Generation: the heads' writes in one product (unless a hook reads them). Every other pass adds up the
        # heads' own, so that hooks that change nothing leave its logits bit for bit.
        _, _, y = self._blocks(tok + pos, span, hooks, rows=last, per_head=False)
        final = self.norm("norm_f", y, hooks, last) if self.cfg.norm_placement == "pre" else y
        if cache is not None:
            cache.length += ids.shape[-1]
            cache.batch = ids.shape[0] if batched else None
        return layers.linear(final[..., -1, :], self.unembedding())

    def run_with_hooks(
        self, input: Any, fwd_hooks: FwdHooks = (), lengths: Any = None, start_at_layer: int | None = None,
        stop_at_layer: int | None = None, output_positions: Any = None,
    ) -> np.ndarray:
        """The logits (B, T, V) of token ids (T,) or (B, T), run with `fwd_hooks`: (name or predicate, fn) pairs,
        fn(value, hook) returning None (keep the value) or the array to go on with.

        As in TransformerLens, `start_at_layer=l` makes `input` the residual stream (B, T, d) entering block l
        (the blocks before it and the embedding do not run), and `stop_at_layer=l` returns the residual stream
        entering block l (B, T, d) instead of the logits (no final norm, no unembedding).

        `output_positions` (not in TransformerLens: for metrics that read a few positions) returns the output at
        those positions only, (B, P, V or d) in the order given. With no Trace to fill, the last block run then
        computes keys and values at every position but everything from hook_q on at those positions only, and its
        hooks see that shorter pos axis (hook.positions says which)."""
        return self._run(input, self._hooks(fwd_hooks), lengths, start_at_layer, stop_at_layer, output_positions)

    def run_with_cache(
        self, input: Any, names: NameFilter = None, lengths: Any = None, start_at_layer: int | None = None,
        stop_at_layer: int | None = None, fwd_hooks: FwdHooks = (),
    ) -> tuple[np.ndarray, ActivationCache]:
        """(logits, cache) as run_with_hooks, the cache holding the value at every hook point (or at `names`: a
        name, a list of names or a predicate), each with its batch axis."""
        values: dict[str, np.ndarray] = {}
        run = self._hooks(fwd_hooks, values, name_filter(names))
        out = self._run(input, run, lengths, start_at_layer, stop_at_layer)
        return out, ActivationCache(values, self.cfg.n_layers, self.cfg.norm_placement == "pre",
                                    has_mid=not self.cfg.parallel_residual)

    def hook_names(self) -> list[str]:
        """Every hook point of this model, in the order the forward pass reaches them."""
        cfg, pre = self.cfg, self.cfg.norm_placement == "pre"
        names = ["hook_embed"] + (["hook_pos_embed"] if cfg.positions in ("sinusoidal", "learned") else [])
        for i in range(cfg.n_layers):
            b, a, m = f"blocks.{i}", f"blocks.{i}.attn", f"blocks.{i}.mlp"
            ln1, ln2 = [f"{b}.ln1.hook_normalized"], [f"{b}.ln2.hook_normalized"]
            rope = [f"{a}.hook_rot_q", f"{a}.hook_rot_k"] if cfg.positions == "rope" else []
            gated = [f"{m}.hook_pre_linear"] if cfg.activation == "swiglu" else []
            mid = [] if cfg.parallel_residual else [f"{b}.hook_resid_mid"]  # a parallel block has no residual between
            names += [f"{b}.hook_resid_pre", *(ln1 if pre else []), f"{a}.hook_q", f"{a}.hook_k", f"{a}.hook_v", *rope,
                      f"{a}.hook_attn_scores", f"{a}.hook_pattern", f"{a}.hook_z", f"{a}.hook_result",
                      f"{b}.hook_attn_out", *([] if pre else ln1), *mid, *(ln2 if pre else []),
                      f"{m}.hook_pre", *gated, f"{m}.hook_post", f"{b}.hook_mlp_out", *([] if pre else ln2),
                      f"{b}.hook_resid_post"]
        return names + (["ln_final.hook_normalized"] if pre else [])

    def _hooks(self, fwd_hooks: FwdHooks, cache: dict | None = None, cache_filter=None) -> HookRun:
        run = HookRun(fwd_hooks, cache, cache_filter)
        if run.fwd_hooks:
            if getattr(self, "_known_names", None) is None:  # the config is frozen: its names never change
                self._known_names = frozenset(self.hook_names())
            run.check_names(self._known_names)
        return run

    def _run(self, input: Any, hooks: HookRun, lengths: Any, start_at_layer: int | None, stop_at_layer: int | None,
             output_positions: Any = None) -> np.ndarray:
        """run_with_hooks and run_with_cache: always a batch axis, as in TransformerLens."""
        if start_at_layer is None:
            ids, batched = self._check_tokens(input, None)
            ids = ids if batched else ids[None]
            shape = ids.shape
        else:
            x = self._check_resid(input)
            shape = x.shape[:2]
        if lengths is not None:
            lengths = self._check_lengths(lengths, shape, True, None)
        rows = self._check_rows(output_positions, shape[1])
        span = self._span(shape[1], lengths, None)

        if start_at_layer is None:  # else x is the residual stream entering block start_at_layer
            tok, pos = self._embed(ids, span.positions, hooks)
            x = tok + pos
        blocks = range(self.cfg.n_layers)[start_at_layer:stop_at_layer]
        _, _, y = self._blocks(x, span, hooks, blocks, rows)
        if rows is not None and not blocks:
            y = y[..., rows, :]
        if stop_at_layer is not None:
            return y
        final = self.norm("norm_f", y, hooks, rows) if self.cfg.norm_placement == "pre" else y
        return layers.linear(final, self.unembedding())

    def _span(self, n_new: int, lengths: np.ndarray | None, cache: KVCache | None) -> _Span:
        """The positions of the n_new rows run now and the keys each may attend: earlier ones (all of them when
        not causal), never padding."""
        cfg = self.cfg
        if cache is not None and not cfg.causal:
            raise ValueError("a KVCache needs a causal model: without the mask, cached rows would miss later tokens")
        start = 0 if cache is None else cache.length
        positions = np.arange(start, start + n_new)
        mask = layers.causal_mask(n_new, start + n_new) if cfg.causal else np.ones((n_new, start + n_new), bool)
        if lengths is not None:
            mask = mask & layers.padding_mask(lengths, n_new)[:, None, None, :]
        elif n_new == 1 and cfg.causal:
            mask = None  # one new token sees every cached one: no masking in each generation step
        return _Span(positions, mask, cache)

    def _embed(self, ids: np.ndarray, positions: np.ndarray, hooks: HookRun) -> tuple[np.ndarray, np.ndarray]:
        """The two parts of x = tok + pos: token rows and position rows (zeros for RoPE and none)."""
        tok = hooks.point("hook_embed", self.params["tok_emb"][ids])
        pos = self._position_rows(positions, tok)
        if self.cfg.positions in ("sinusoidal", "learned"):  # RoPE and "none" add no position rows
            pos = hooks.point("hook_pos_embed", pos.copy())  # a copy: an in-place hook must not write into the table
        return tok, pos

    def _blocks(self, x: np.ndarray, span: _Span, hooks: HookRun, blocks: range | None = None,
                rows: np.ndarray | None = None, keep: bool = False, per_head: bool = True
                ) -> tuple[np.ndarray | None, list[LayerTrace], np.ndarray]:
        """y = Block_i(x) for every block (or `blocks`), in turn. Returns the rows entering the first block (after
        its hook_resid_pre), each block's LayerTrace if `keep`, and the rows leaving the last. With `rows` the last
        block computes only those rows after its keys and values; earlier ones run every row, which later keys
        read."""
        blocks = range(self.cfg.n_layers) if blocks is None else blocks
        first, block_traces = None, []
        for i in blocks:
            x = hooks.point(f"blocks.{i}.hook_resid_pre", x)
            first = x if first is None else first
            # A block nothing hooks runs without the per-point calls (most of a patching run's blocks).
            block_hooks = _IDLE if hooks.quiet(f"blocks.{i}.") else hooks
            block = self._block(i, x, span, block_hooks, rows if i == blocks[-1] else None, per_head)
            x = block.y
            if keep:
                block_traces.append(block)
            # Unless kept, a block's values go before the next block runs: holding them took a T = 6 patching grid
            # from 0.78 to 0.95 MB at its peak, past which glibc may return the heap and fault it back in each call.
            del block
        return first, block_traces, x

    def _block(self, i: int, x: np.ndarray, span: _Span, hooks: HookRun, rows: np.ndarray | None = None,
               per_head: bool = True) -> LayerTrace:
        """One block. Unless `per_head`, the heads' separate writes are computed only for a hook that reads them
        (head_out is then None)."""
        b = f"blocks.{i}"

        def at(name: str, value: np.ndarray) -> np.ndarray:
            return value if hooks.idle else hooks.point(f"{b}.{name}", value, rows)

        x_out = x if rows is None else x[..., _row_index(rows), :]  # the rows this block's output keeps
        if self.cfg.parallel_residual:  # y = x + Attn(N1(x)) + FFN(N2(x)): both sublayers read the block's input
            attn_in = self.norm(f"{b}.norm1", x, hooks)
            q, k, v, att, head_out, attn_out = self._attention(i, attn_in, span, hooks, rows, per_head)
            h = None
            ffn_in = self.norm(f"{b}.norm2", x_out, hooks, rows)
            ffn = self._feed_forward(i, ffn_in, hooks, rows)
            y = at("hook_resid_post", x_out + attn_out + ffn.out)
        elif self.cfg.norm_placement == "pre":  # h = x + Attn(N1(x));  y = h + FFN(N2(h))
            attn_in = self.norm(f"{b}.norm1", x, hooks)
            q, k, v, att, head_out, attn_out = self._attention(i, attn_in, span, hooks, rows, per_head)
            h = at("hook_resid_mid", x_out + attn_out)
            ffn_in = self.norm(f"{b}.norm2", h, hooks, rows)
            ffn = self._feed_forward(i, ffn_in, hooks, rows)
            y = at("hook_resid_post", h + ffn.out)
        else:  # h = N1(x + Attn(x));  y = N2(h + FFN(h)): the norms' outputs are the residual stream itself
            attn_in = x
            q, k, v, att, head_out, attn_out = self._attention(i, attn_in, span, hooks, rows, per_head)
            h = at("hook_resid_mid", self.norm(f"{b}.norm1", x_out + attn_out, hooks, rows))
            ffn_in = h
            ffn = self._feed_forward(i, ffn_in, hooks, rows)
            y = at("hook_resid_post", self.norm(f"{b}.norm2", h + ffn.out, hooks, rows))
        return LayerTrace(
            attn_in=attn_in, q=q, k=k, v=v, scores=att.scores, attention=att.weights, head_out=head_out,
            attn_out=attn_out, h=h, ffn_in=ffn_in, ff_pre=ffn.pre, ff_act=ffn.act, ff_out=ffn.out, y=y,
        )

    def _attention(self, i: int, x: np.ndarray, span: _Span, hooks: HookRun, rows: np.ndarray | None = None,
                   per_head: bool = True) -> tuple[Any, ...]:
        cfg, p, a = self.cfg, self.params, f"blocks.{i}.attn"
        positions, mask, cache = span

        def heads(name: str, value: np.ndarray, rows: np.ndarray | None = rows) -> np.ndarray:
            # slm keeps heads before positions (..., H, T, k); hooks see TransformerLens's (..., T, H, k). Both are
            # views of one array, so an in-place edit in a hook is seen by the pass. A point nothing reads is
            # skipped: the swaps cost more than the small model's matmuls.
            if hooks.idle:
                return value
            name = f"{a}.{name}"
            if not hooks.wants(name):
                return value
            return hooks.point(name, value.swapaxes(-3, -2), rows).swapaxes(-3, -2)

        # Keys and values at every position; queries (and all that follows) only at `rows` when given.
        take = _row_index(rows)
        x_q, q_positions = (x, positions) if rows is None else (x[..., take, :], positions[take])
        q = heads("hook_q", layers.split_heads(self._linear(x_q, a, "q"), cfg.n_heads))
        k = heads("hook_k", layers.split_heads(self._linear(x, a, "k"), cfg.n_kv_heads), None)  # GQA: g heads
        v = heads("hook_v", layers.split_heads(self._linear(x, a, "v"), cfg.n_kv_heads), None)
        if cfg.positions == "rope":
            turn = dict(base=cfg.rope_base, scale=cfg.rope_scale, table=self._rope_table, dims=cfg.rotary_dim)
            q = heads("hook_rot_q", layers.rope(q, q_positions, **turn))
            k = heads("hook_rot_k", layers.rope(k, positions, **turn), None)
        if cache is not None:
            k, v = cache.extend(i, k, v)
        if rows is not None and mask is not None:
            mask = mask[..., take, :]
            mask = None if mask.all() else mask  # e.g. the last row of a causal run: nothing to hide
        att = layers.attention(q, k, v, mask, None if hooks.idle else
                               lambda name, value: hooks.point(f"{a}.{name}", value, rows))
        z = heads("hook_z", att.out)
        if per_head or hooks.wants(f"{a}.hook_result"):
            # Head j's write into the residual: its k output coordinates through its own k columns of w_o.
            head_out = heads("hook_result", layers.heads_out(z, p[f"{a}.w_o"]))
            attn_out = head_out.sum(axis=-3)
        else:
            # Their sum in one product, as TransformerLens without use_attn_result: a pass per head over w_o made
            # a generated token of a 124M model ~7 % slower in wasm.
            head_out = None
            attn_out = layers.linear(layers.merge_heads(z), p[f"{a}.w_o"].T)
        if cfg.bias:
            attn_out = attn_out + p[f"{a}.b_o"]
        if not hooks.idle:
            attn_out = hooks.point(f"blocks.{i}.hook_attn_out", attn_out, rows)
        return q, k, v, att, head_out, attn_out

    def _feed_forward(self, i: int, x: np.ndarray, hooks: HookRun, rows: np.ndarray | None = None
                      ) -> layers.FeedForward:
        p, f, m = self.params, f"blocks.{i}.ffn", f"blocks.{i}.mlp"
        ffn = layers.feed_forward(
            x, p[f"{f}.w_in"], p[f"{f}.w_out"], self.cfg.activation,
            p.get(f"{f}.b_in"), p.get(f"{f}.b_out"), p.get(f"{f}.w_gate"),
            None if hooks.idle else lambda name, value: hooks.point(f"{m}.{name}", value, rows),
        )
        if hooks.idle:
            return ffn
        return ffn._replace(out=hooks.point(f"blocks.{i}.hook_mlp_out", ffn.out, rows))

    def _linear(self, x: np.ndarray, prefix: str, which: str) -> np.ndarray:
        out = layers.linear(x, self.params[f"{prefix}.w_{which}"].T)
        bias = self.params.get(f"{prefix}.b_{which}")
        return out if bias is None else out + bias

    def norm(self, name: str, x: np.ndarray, hooks: HookRun | None = None, rows: np.ndarray | None = None
             ) -> np.ndarray:
        """Apply the named norm (e.g. "norm_f", "blocks.0.norm1") with this model's weights. With `hooks`, its
        hook_normalized (ln1, ln2, ln_final) sees the normalised rows before the weights, as in TransformerLens."""
        weight = self.params[f"{name}.weight"]
        point = None
        if hooks:
            where = _NORM_HOOKS[name.rsplit(".", 1)[-1]]
            prefix = f"{name.rsplit('.', 1)[0]}.{where}" if "." in name else where
            point = lambda hook, value: hooks.point(f"{prefix}.{hook}", value, rows)  # noqa: E731
        if self.cfg.norm == "rms":
            return layers.rms_norm(x, weight, self.cfg.eps, point)
        return layers.layer_norm(x, weight, self.params[f"{name}.bias"], self.cfg.eps, point)

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
        if cache is not None and cache.length and cache.batch != (ids.shape[0] if batched else None):
            held = "one sequence, shape (T,)" if cache.batch is None else f"a batch of {cache.batch}, shape (B, T)"
            raise ValueError(f"this KVCache holds {held}: continue it with tokens of that shape")
        return ids, batched

    def _check_resid(self, resid: Any) -> np.ndarray:
        """The residual stream given to start_at_layer: (B, T, d) or (T, d), as a writable array of our dtype."""
        resid = np.asarray(resid, dtype=self.dtype)  # no copy: a read-only input (np.broadcast_to) stays read-only
        if resid.ndim == 2:
            resid = resid[None]
        if resid.ndim != 3 or resid.shape[-1] != self.cfg.n_model or not 0 < resid.shape[1] <= self.cfg.n_ctx:
            raise ValueError(f"with start_at_layer the input is the residual stream (B, T, d={self.cfg.n_model}), "
                             f"T at most n_ctx={self.cfg.n_ctx}; got shape {resid.shape}")
        return resid

    @staticmethod
    def _check_rows(positions: Any, n: int) -> np.ndarray | None:
        """output_positions as row indices (P,) in [0, n): from an int or a list of ints in [-n, n), negative
        counting from the end; None (every row) stays None."""
        if positions is None:
            return None
        listed = [positions] if type(positions) is int else positions
        if type(listed) is list and listed and all(type(p) is int for p in listed):
            # Python ints (a patching run passes one): checked without NumPy's reductions, the same result.
            if not all(-n <= p < n for p in listed):
                raise ValueError(f"output_positions: {listed} is outside the {n} positions run")
            return np.array([p % n for p in listed])
        wanted = np.atleast_1d(np.asarray(positions))
        if wanted.ndim != 1 or wanted.size == 0 or wanted.dtype.kind not in "iu":
            raise ValueError(f"output_positions must be a position or a non-empty list of positions, got {positions!r}")
        if wanted.min() < -n or wanted.max() >= n:
            raise ValueError(f"output_positions: {wanted.tolist()} is outside the {n} positions run")
        return wanted % n

    @staticmethod
    def _check_lengths(lengths: Any, shape: tuple[int, ...], batched: bool, cache: KVCache | None) -> np.ndarray:
        if cache is not None:
            raise ValueError("lengths (padding) cannot be combined with a KVCache")
        lengths = np.asarray(lengths)
        if not batched or lengths.shape != (shape[0],):
            raise ValueError(f"lengths must have shape (B,) = ({shape[0]},) for (B, T) tokens")
        if lengths.min() < 1 or lengths.max() > shape[1]:
            raise ValueError(f"lengths must be between 1 and T={shape[1]}, got {lengths.tolist()}")
        return lengths

    # ---- saving and loading: one .npz of arrays, the config, meta data and tokenizer as JSON (docs/slm.md) ----

    def save(self, path: str | os.PathLike | io.IOBase, compress: bool = True) -> None:
        """One .npz file; `compress=False` writes it faster (trained weights shrink by only ~10 %)."""
        arrays = dict(self.params)
        arrays["__config__"] = np.array(self.cfg.to_json())
        arrays["__meta__"] = np.array(json.dumps(self.meta, sort_keys=True))
        if self.tokenizer is not None and not (
                isinstance(self.tokenizer, WordTokenizer) and self.meta.get("vocab") == self.tokenizer.vocab):
            arrays["__tokenizer__"] = np.array(json.dumps(self.tokenizer.to_json(), sort_keys=True))
        (np.savez_compressed if compress else np.savez)(path, **arrays)

    @classmethod
    def load(cls, source: str | os.PathLike | bytes | io.IOBase, in_place: bool = False) -> Model:
        """Load a model saved with save(), from a path, raw bytes or a binary file object. `in_place=True` with a
        bytearray of an uncompressed file (compress=False) keeps the arrays in it rather than copying them: the
        caller hands the buffer over and must not use it afterwards."""
        arrays = npz_views.views(source) if in_place and isinstance(source, bytearray) else None
        if arrays is None:
            arrays = _read_npz(source)
        if "__config__" not in arrays:
            raise ValueError("not a saved slm model: the file has no __config__ entry")
        cfg = Config.from_json(str(arrays.pop("__config__")))
        try:
            meta = json.loads(str(arrays.pop("__meta__"))) if "__meta__" in arrays else {}
            tokenizer = (tokenizer_from_json(json.loads(str(arrays.pop("__tokenizer__"))))
                         if "__tokenizer__" in arrays else None)
        except json.JSONDecodeError as exc:
            raise ValueError(f"a saved slm model with damaged meta data: {exc}") from None
        return Model(cfg, arrays, meta, tokenizer)  # a plain Model whatever subclass saved it


def _read_npz(source: str | os.PathLike | bytes | io.IOBase) -> dict[str, np.ndarray]:
    """Every array of an .npz (copies, as np.load reads them)."""
    if isinstance(source, bytes | bytearray | memoryview):
        source = npz_views.BufferFile(source)  # io.BytesIO would copy a bytearray
    if isinstance(source, io.IOBase) and source.seekable():
        # np.load reads anything else as a pickle and says so in words about unsafe loading: name it plainly.
        head = source.read(4)
        source.seek(-len(head), io.SEEK_CUR)
        if not head.startswith(b"PK"):
            raise ValueError("not a saved slm model (.npz): the file is not a zip archive")
    try:
        with np.load(source, allow_pickle=False) as npz:
            return {name: npz[name] for name in npz.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:  # BadZipFile: a truncated file
        raise ValueError(f"not a saved slm model (.npz): {exc}") from None
