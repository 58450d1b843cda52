"""What an SAE reads: the hook point, the token windows of a corpus, and the activations gathered there with
run_with_cache (every position, row-major)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..generate import generate
from ..model import Model


def default_hook(model: Model) -> str:
    """The residual stream after the middle block: blocks.0.hook_resid_post for 2 blocks, blocks.5 for 12."""
    return f"blocks.{(model.cfg.n_layers - 1) // 2}.hook_resid_post"


def _stop_layer(model: Model, hook_name: str) -> int | None:
    """The first block the hook's value does not depend on (run_with_cache can stop there)."""
    if hook_name.startswith("blocks."):
        return min(int(hook_name.split(".")[1]) + 1, model.cfg.n_layers)
    return 0 if hook_name in ("hook_embed", "hook_pos_embed") else None


def corpus_windows(model: Model, n_windows: int, seq_len: int | None = None, seed: int = 0,
                   text: str | None = None, split: str = "train") -> np.ndarray:
    """(n_windows, seq_len) token ids to gather activations from (seq_len defaults to the model's n_ctx, at most 128):

    - `text`: the tokenizer's ids of it, cut into windows (repeated when short);
    - else, for a model whose vocabulary is the grammar's (the shipped model and the lab's): the grammar's
      documents, as the model was trained on (half the windows start at a document's <start>);
    - else text the model generates from its first token (temperature 1, seeded)."""
    seq_len = min(model.cfg.n_ctx, 128) if seq_len is None else seq_len
    if seq_len > model.cfg.n_ctx:
        raise ValueError(f"seq_len {seq_len} exceeds the model's n_ctx {model.cfg.n_ctx}")
    rng = np.random.default_rng(seed)
    if text is not None:
        if model.tokenizer is None:
            raise ValueError("this model has no tokenizer to read text with")
        ids = np.asarray(model.tokenizer.encode(text).ids, dtype=np.int64)
        if ids.size == 0:
            raise ValueError("the text has no tokens")
        ids = np.tile(ids, math.ceil((seq_len + n_windows) / ids.size) + 1)
        starts = rng.integers(0, ids.size - seq_len + 1, size=n_windows)
        return ids[starts[:, None] + np.arange(seq_len)]
    if speaks_grammar(model):
        from ..train.data import TokenStream  # the grammar is big: loaded only for the models that speak it

        stream = TokenStream.generate(split, (n_windows + 4) * seq_len, seed)
        return stream.windows(rng, n_windows, seq_len, 0.5).astype(np.int64)
    out = np.empty((n_windows, seq_len), dtype=np.int64)
    first = 1 if model.cfg.n_vocab > 1 else 0  # the shipped family's <start>; a BPE model's id 1 is as good as any
    for i in range(n_windows):
        steps = generate(model, [first], seq_len - 1, seed=int(rng.integers(2**31)))
        out[i] = [first, *(s.token for s in steps)]
    return out


def speaks_grammar(model: Model) -> bool:
    """Whether the model's words are the grammar's: the shipped model (its files name them in meta["vocab"]) and the
    lab's grammar runs (their tokenizer has them)."""
    vocab = model.meta.get("vocab")
    if not isinstance(vocab, list):
        vocab = getattr(model.tokenizer, "vocab", None)
    if not isinstance(vocab, list):
        return False
    from ..train import corpus

    return vocab == list(corpus.VOCAB)


def gather(model: Model, tokens: np.ndarray, hook_name: str, batch: int = 64, dtype: Any = np.float32
           ) -> np.ndarray:
    """(N·T, d) activations at `hook_name` of token windows (N, T), every position, row-major (window, position)."""
    tokens = np.asarray(tokens)
    stop = _stop_layer(model, hook_name)
    rows = []
    for start in range(0, tokens.shape[0], batch):
        _, cache = model.run_with_cache(tokens[start:start + batch], names=hook_name, stop_at_layer=stop)
        if hook_name not in cache:
            raise ValueError(f"no hook point named {hook_name!r} in this model (see Model.hook_names())")
        value = cache[hook_name]
        if value.ndim != 3:  # (B, T, d) only: a head axis (hook_z, hook_pattern, ...) has no one row per position
            raise ValueError(f"{hook_name} holds {value.ndim - 1}-axis values per sequence; an SAE reads a point of "
                             "shape (batch, position, d) such as hook_resid_post, hook_mlp_out or hook_attn_out")
        rows.append(value.reshape(-1, value.shape[-1]).astype(dtype))
    return np.concatenate(rows)


def metadata_for(model: Model, tokens: np.ndarray) -> dict[str, Any]:
    """SAELens's metadata for an SAE on this model: its name and the context size trained on."""
    return {"model_name": model.meta.get("name", "slm"), "context_size": int(np.shape(tokens)[-1]),
            "prepend_bos": False}
