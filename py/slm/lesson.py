"""The lesson's model: four numbers per token, two heads, one block, fixed random weights.

Small enough to print every table of a forward pass; the architecture switches of the playground's lesson mode
re-create it with the same seed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .config import Config
from .model import Model, Trace
from .params import init_params
from .tokenizer import WordTokenizer

LESSON_VOCAB = ("<start>", "the", "cat", "dog", "lay", "was", "tired")
LESSON_SEED = 0


class CausalLanguageModel(Model):
    """One pre-norm block, d_ff=8, ReLU, biases present but zero, sinusoidal positions, seeded weights.

    Keyword arguments override the architecture (e.g. norm="rms", positions="rope", causal=False,
    n_kv_heads=1, or GPT-NeoX's parallel_residual=True and rotary_dim=2 with RoPE); the weights are re-drawn from
    the same seed for the new shapes."""

    def __init__(self, n_vocab: int = 7, n_model: int = 4, n_heads: int = 2, seed: int = LESSON_SEED,
                 **overrides: Any) -> None:
        fields: dict[str, Any] = dict(
            n_vocab=n_vocab, n_ctx=16, n_model=n_model, n_heads=n_heads, n_layers=1, d_ff=8,
            activation="relu", norm="layer", norm_placement="pre", positions="sinusoidal", bias=True,
        )
        fields.update(overrides)
        cfg = Config(**fields)
        vocab = list(LESSON_VOCAB) if n_vocab == len(LESSON_VOCAB) else [f"t{i}" for i in range(n_vocab)]
        super().__init__(cfg, init_params(cfg, seed), meta={"vocab": vocab})
        self.tokenizer = WordTokenizer(vocab)

    def respond_to(self, token_ids: Any) -> Trace:
        """The full forward trace for a sequence of token ids, e.g. np.array([0, 1, 2]) for '<start> the cat'."""
        return self.forward(np.asarray(token_ids))
