"""Hook points and the activation cache, named as TransformerLens names them (see docs/slm.md for the table).

A hook is `fn(value, hook)`: `hook.name` is the point's name, `hook.layer()` its block. Returning None keeps the
value (an in-place edit of it still counts); returning an array replaces it for everything downstream.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any, Union

import numpy as np

HookFn = Callable[[np.ndarray, "HookPoint"], Union[np.ndarray, None]]  # noqa: UP007 (a runtime alias on 3.11)
NameFilter = Union[str, Sequence[str], Callable[[str], bool], None]  # noqa: UP007

# Short names as used in cache["pattern", 0]: where each lives inside block i.
_IN_ATTN = ("q", "k", "v", "rot_q", "rot_k", "attn_scores", "pattern", "z", "result")
_IN_MLP = ("pre", "pre_linear", "post")
_IN_BLOCK = ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out")
_ALIASES = {"attn": "pattern", "attn_logits": "attn_scores", "query": "q", "key": "k", "value": "v",
            "mlp_pre": "pre", "mlp_post": "post", "mlp_pre_linear": "pre_linear"}


def act_name(name: str, layer: int | None = None, layer_type: str | None = None) -> str:
    """The full hook name of a short one: ("pattern", 0) -> "blocks.0.attn.hook_pattern", ("normalized", 1, "ln2")
    -> "blocks.1.ln2.hook_normalized", ("normalized", None, "ln_final") -> "ln_final.hook_normalized"."""
    if "." in name or name.startswith("hook_"):
        return name  # already a full name
    name = _ALIASES.get(name, name)
    if name in ("embed", "pos_embed"):
        return f"hook_{name}"
    if name == "normalized":
        if layer_type == "ln_final" or (layer is None and layer_type is None):
            return "ln_final.hook_normalized"
        if layer_type not in ("ln1", "ln2") or layer is None:
            raise KeyError("'normalized' needs a layer and layer_type 'ln1' or 'ln2' (or layer_type 'ln_final')")
        return f"blocks.{layer}.{layer_type}.hook_normalized"
    if layer is None:
        raise KeyError(f"{name!r} lives in a block: give its layer, e.g. cache[{name!r}, 0]")
    for where, names in (("attn.", _IN_ATTN), ("mlp.", _IN_MLP), ("", _IN_BLOCK)):
        if name in names:
            return f"blocks.{layer}.{where}hook_{name}"
    raise KeyError(f"no hook point is called {name!r}")


def name_filter(names: NameFilter) -> Callable[[str], bool]:
    """A predicate from None (every name), one name, a list of names, or a predicate."""
    if names is None:
        return lambda name: True
    if callable(names):
        return names
    wanted = {names} if isinstance(names, str) else set(names)
    return wanted.__contains__


class HookPoint:
    """What a hook gets as its second argument."""

    __slots__ = ("name", "positions")

    def __init__(self, name: str, positions: np.ndarray | None = None) -> None:
        self.name = name
        self.positions = positions  # the positions the value's pos axis holds: None = all (see output_positions)

    def layer(self) -> int:
        """The block the point belongs to ("blocks.3.attn.hook_q" -> 3)."""
        parts = self.name.split(".")
        if parts[0] != "blocks":
            raise ValueError(f"{self.name} is not inside a block")
        return int(parts[1])

    def __repr__(self) -> str:
        return f"HookPoint({self.name!r})"


_UNRESOLVED = object()  # a name whose hooks have not been looked up yet in this run


class HookRun:
    """The hooks of one forward pass, and the cache it fills. `point(name, value)` is called at every hook point
    in order and returns the value the pass goes on with."""

    def __init__(self, fwd_hooks: Iterable[tuple[str | Callable[[str], bool], HookFn]] = (),
                 cache: dict[str, np.ndarray] | None = None, cache_filter: Callable[[str], bool] | None = None,
                 ) -> None:
        self.fwd_hooks = list(fwd_hooks)
        self.cache, self.cache_filter = cache, cache_filter
        self.idle = not self.fwd_hooks and cache is None  # nothing reads any point: the pass may skip them all
        # Per name: (its hooks, whether the cache keeps it), or None when nothing reads it. Hooks given by name
        # alone are all known now, and a name missing from _at then has nothing; a predicate or a cache is asked
        # once per name, when the pass first reaches it (patching makes a run per layer: ~40 points each).
        self._at: dict[str, tuple[list[HookFn], bool] | None] = {}
        self._missing: object = _UNRESOLVED
        if cache is None and all(isinstance(key, str) for key, _ in self.fwd_hooks):
            for key, fn in self.fwd_hooks:
                self._at.setdefault(key, ([], False))[0].append(fn)
            self._missing = None

    def __bool__(self) -> bool:
        return not self.idle

    def check_names(self, known: Collection[str]) -> None:
        """A string that names no point of this model is a typo: say so rather than never calling the hook."""
        for name, _ in self.fwd_hooks:
            if isinstance(name, str) and name not in known:
                raise ValueError(f"no hook point named {name!r} in this model (see Model.hook_names())")

    def quiet(self, prefix: str) -> bool:
        """Whether surely nothing reads a point whose name starts with `prefix` (e.g. a whole block): only hooks
        given by name can say so in advance."""
        return self.idle or (self._missing is None and not any(name.startswith(prefix) for name in self._at))

    def _resolve(self, name: str) -> tuple[list[HookFn], bool] | None:
        fns = [fn for key, fn in self.fwd_hooks if (key == name if isinstance(key, str) else key(name))]
        keep = self.cache is not None and (self.cache_filter is None or self.cache_filter(name))
        entry = self._at[name] = (fns, keep) if fns or keep else None
        return entry

    def wants(self, name: str) -> bool:
        """Whether a hook or the cache reads `name`: the pass need not lay out a value (e.g. swap its head axis)
        that nothing reads."""
        if self.idle:
            return False
        entry = self._at.get(name, self._missing)
        return (self._resolve(name) if entry is _UNRESOLVED else entry) is not None

    def point(self, name: str, value: np.ndarray, positions: np.ndarray | None = None) -> np.ndarray:
        if self.idle:
            return value
        entry = self._at.get(name, self._missing)
        if entry is _UNRESOLVED:
            entry = self._resolve(name)
        if entry is None:
            return value
        fns, keep = entry
        for fn in fns:
            new = fn(value, HookPoint(name, positions))
            if new is not None:
                new = np.asarray(new, dtype=value.dtype)
                if new.shape != value.shape:
                    raise ValueError(f"the hook at {name} returned shape {new.shape}, expected {value.shape}")
                value = new
        if keep:
            self.cache[name] = value  # type: ignore[index]
        return value


class ActivationCache(Mapping[str, np.ndarray]):
    """Every cached value of one run, by hook name; `cache["pattern", 0]` is short for
    `cache["blocks.0.attn.hook_pattern"]`. Arrays keep the batch axis (remove_batch_dim() takes it off)."""

    def __init__(self, values: dict[str, np.ndarray], n_layers: int, pre_norm: bool, has_batch_dim: bool = True,
                 has_mid: bool = True):
        self._values = values
        self.n_layers, self.pre_norm, self.has_batch_dim = n_layers, pre_norm, has_batch_dim
        self.has_mid = has_mid  # blocks have a hook_resid_mid (False: parallel attention and MLP)

    def __getitem__(self, key: str | tuple) -> np.ndarray:
        name = act_name(*key) if isinstance(key, tuple) else act_name(key)
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"ActivationCache({len(self)} values: {', '.join(list(self._values)[:4])}, ...)"

    def remove_batch_dim(self) -> ActivationCache:
        """The same cache for a batch of one, without its batch axis."""
        if not self.has_batch_dim:
            return self
        first = next(iter(self._values.values()), None)
        if first is not None and first.shape[0] != 1:
            raise ValueError(f"remove_batch_dim needs a batch of one, got {first.shape[0]}")
        return ActivationCache({k: v[0] for k, v in self._values.items()}, self.n_layers, self.pre_norm, False,
                               self.has_mid)

    def _layers(self, layer: int | None) -> int:
        """How many blocks a stack covers: blocks before `layer` (None or -1: all of them)."""
        return self.n_layers if layer is None or layer == -1 else (layer % (self.n_layers + 1))

    def stack_head_results(self, layer: int = -1, return_labels: bool = False) -> Any:
        """(L·H, batch, pos, d): every head's write into the residual, of the blocks before `layer` (-1: all),
        labelled "L{l}H{h}". Needs the hook_result values in the cache."""
        parts, labels = [], []
        for i in range(self._layers(layer)):
            result = self[f"blocks.{i}.attn.hook_result"]  # (..., pos, head, d)
            parts.append(np.moveaxis(result, -2, 0))
            labels += [f"L{i}H{h}" for h in range(result.shape[-2])]
        stack = np.concatenate(parts) if parts else np.zeros((0,))
        return (stack, labels) if return_labels else stack

    def decompose_resid(self, layer: int | None = None, mode: str = "all", incl_embeds: bool = True,
                        return_labels: bool = False) -> Any:
        """(N, batch, pos, d): what each sublayer wrote into the residual stream before block `layer` (None: after
        the last), embeddings first, then attn_out and mlp_out of each block (mode "attn" or "mlp": only those).
        They sum to that residual. Pre-norm only: a post-norm block normalises the stream, so no sum exists."""
        if not self.pre_norm:
            raise ValueError("a post-norm model's residual stream is not a sum of its sublayers' writes")
        if mode not in ("all", "attn", "mlp"):
            raise ValueError(f"mode must be 'all', 'attn' or 'mlp', got {mode!r}")
        parts, labels = [], []
        if incl_embeds:
            for name in ("hook_embed", "hook_pos_embed"):
                if name in self._values:  # RoPE and no positions add no position rows
                    parts.append(self._values[name])
                    labels.append(name[5:])
        for i in range(self._layers(layer)):
            for sub in ("attn", "mlp"):
                if mode in ("all", sub):
                    parts.append(self[f"blocks.{i}.hook_{sub}_out"])
                    labels.append(f"{i}_{sub}_out")
        stack = np.stack(parts)
        return (stack, labels) if return_labels else stack

    def accumulated_resid(self, layer: int | None = None, incl_mid: bool = False, return_labels: bool = False
                          ) -> Any:
        """(n, batch, pos, d): the residual stream entering blocks 0..`layer` (None or -1: every block, then
        the last block's output), for the logit lens; with incl_mid also between attention and MLP (where a block
        has that stage: a parallel one has not). Labels
        "0_pre", "0_mid", ..., "final_post"."""
        last = self.n_layers if layer is None or layer == -1 else layer
        parts, labels = [], []
        for i in range(last + 1):
            if i == self.n_layers:
                parts.append(self[f"blocks.{i - 1}.hook_resid_post"])
                labels.append("final_post")
                break
            parts.append(self[f"blocks.{i}.hook_resid_pre"])
            labels.append(f"{i}_pre")
            if incl_mid and i < last and self.has_mid:
                parts.append(self[f"blocks.{i}.hook_resid_mid"])
                labels.append(f"{i}_mid")
        stack = np.stack(parts)
        return (stack, labels) if return_labels else stack
