"""Token streams from the synthetic corpus, cut into context windows for training and validation."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import numpy as np

from . import corpus


@dataclass
class TokenStream:
    """A long run of token ids (documents, each starting with `<start>`, concatenated)."""

    ids: np.ndarray  # (N,) int32
    doc_starts: np.ndarray  # positions of the `<start>` tokens

    @classmethod
    def generate(cls, split: str, n_tokens: int, seed: int) -> TokenStream:
        ids = np.array(corpus.encode(corpus.stream(split, n_tokens, seed=seed)), dtype=np.int32)
        starts = np.flatnonzero(ids == corpus.TOKEN_ID[corpus.START])
        return cls(ids, starts)

    def windows(self, rng: np.random.Generator, n: int, length: int, doc_start_fraction: float) -> np.ndarray:
        """(n, length) windows: a fraction begin at a document's `<start>` (position 0 is then `<start>`, as
        when the app generates), the rest at any token (so every position sees every kind of context)."""
        last = self.ids.size - length
        starts = rng.integers(0, last + 1, size=n)
        at_doc = rng.random(n) < doc_start_fraction
        usable = self.doc_starts[self.doc_starts <= last]
        if at_doc.any() and usable.size:
            starts[at_doc] = usable[rng.integers(0, usable.size, size=int(at_doc.sum()))]
        return self.ids[starts[:, None] + np.arange(length)[None, :]]

    def unigram_cross_entropy(self, other: TokenStream, smoothing: float = 1.0) -> float:
        """Cross-entropy (nats per token) of the other stream's tokens (all but the very first, as a language
        model would predict them) under this stream's add-`smoothing` unigram frequencies."""
        n_vocab = len(corpus.VOCAB)
        counts = np.bincount(self.ids, minlength=n_vocab) + smoothing
        log_p = np.log(counts / counts.sum())
        return float(-log_p[other.ids[1:]].mean())


def corpus_fingerprint() -> str:
    """A hash of what the corpus generates: its rules (with weights), vocabulary and held-out combinations. A
    model trained on one corpus records it, so a later change of the grammar is noticed."""
    content = {
        "rules": [[r.lhs, list(r.rhs), list(r.tags), r.weight, r.template] for r in corpus.RULES],
        "vocab": list(corpus.VOCAB),
        "held_out": sorted(map(list, corpus.held_out_pairs())),
        "documents": [corpus.LIST_FRACTION, corpus.REPEAT_FRACTION, list(corpus.LIST_LENGTHS)],
    }
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]
