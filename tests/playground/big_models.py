"""Random-weight models of real models' shapes for the view tests and bench/view_bench.py: GPT-2 small's 12
layers × 12 heads and SmolLM2-135M's 30 layers × 9 heads (3 key/value heads), with a narrow residual stream so
that they build in milliseconds. The views' cost depends on the number of layers, heads, positions and (for the
next-token view) vocabulary entries, not on d."""

from __future__ import annotations

import itertools
import string

import numpy as np

import slm

SHAPES = {
    "gpt2-small": dict(n_layers=12, n_heads=12, n_model=192, activation="gelu", norm="layer", positions="learned",
                       bias=True, tied=True),
    "smollm2-135m": dict(n_layers=30, n_heads=9, n_kv_heads=3, n_model=144, activation="swiglu", norm="rms",
                         positions="rope"),
}
GPT2_VOCAB = 50_257


def words(n: int) -> list[str]:
    """`n` distinct lower-case words: <pad>, <start>, <unk>, then "aa", "ab", … (the probe prompts use words)."""
    made = ("".join(letters) for size in itertools.count(2)
            for letters in itertools.product(string.ascii_lowercase, repeat=size))
    return ["<pad>", "<start>", "<unk>", *itertools.islice(made, n - 3)]


def big_model(shape: str, n_vocab: int = 512, n_ctx: int = 64, seed: int = 0) -> slm.Model:
    """A random model of `shape` (SHAPES) with a word vocabulary of `n_vocab` entries, float32."""
    vocab = words(n_vocab)
    cfg = slm.Config(n_vocab=n_vocab, n_ctx=n_ctx, **SHAPES[shape])
    params = slm.init_params(cfg, seed=seed, dtype=np.float32)
    return slm.Model(cfg, params, {"name": f"{shape} random", "vocab": vocab}, slm.WordTokenizer(vocab))


def prompt(n_tokens: int) -> str:
    """A prompt of `n_tokens` tokens after <start>, with a repeated half (induction heads have something to do)."""
    half = words(3 + (n_tokens + 1) // 2)[3:]
    return " ".join((half + half)[:n_tokens])
