#!/usr/bin/env python3
"""Find the interpretable features docs/features.md names, in an SAE on the shipped model, by what they do:

    OPENBLAS_NUM_THREADS=1 python bench/sae_features.py [--sae DIR] [--save DIR] [--windows 1500]

Trains the bench's preset (slm.sae.PRESETS["shipped-topk"], seed 0, blocks.0.hook_resid_post) unless --sae gives a
saved one, encodes held-out windows of the grammar's validation split, and for each property below picks the
feature whose firing matches it best (precision × √recall), printing its precision and recall, its top contexts and
its logit effect. A feature's number depends on the run (seed, BLAS): the properties are what stays.

- plural subject: the head noun of a sentence's (or clause's) first noun phrase, outside brackets, plural;
- adjective after a determiner: the word right after "the" / "this" / "some" ... when it is not a noun;
- inside an aside: a token inside "( ... )" or "[ ... ]" other than the brackets, where the feature fires at more
  than half its largest activation (a weak firing may be anywhere);
- opening bracket and closing bracket: the token itself.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "py"))

import slm  # noqa: E402
from slm import sae as S  # noqa: E402
from slm.train import corpus  # noqa: E402

HOOK = "blocks.0.hook_resid_post"
V, T = corpus.VOCAB, corpus.TOKEN_ID
CLAUSE_STARTS = {T[t] for t in ("<start>", ".", "and", "but", "because", ",")}
DETERMINERS = {T[w] for forms in corpus.DETERMINERS.values() for w, _ in forms}


def properties(held: np.ndarray) -> dict[str, np.ndarray]:
    """Boolean masks (N, T) of the positions with each property (brackets counted from each window's start)."""
    words = np.vectorize(V.__getitem__)(held)
    noun = np.vectorize(corpus.NOUN_INFO.__contains__)(words)
    plural = np.vectorize(lambda w: corpus.NOUN_INFO.get(w, ("",))[0] == "pl")(words)
    opening, closing = np.isin(words, ["(", "["]), np.isin(words, [")", "]"])
    depth = np.cumsum(opening, axis=1) - np.cumsum(closing, axis=1) + closing  # a closing bracket is still inside
    inside = (depth > 0) & ~opening & ~closing
    subject = np.zeros_like(noun)
    for w in range(held.shape[0]):
        waiting = False
        for p in range(held.shape[1]):
            if held[w, p] in CLAUSE_STARTS:
                waiting = True
            elif waiting and noun[w, p] and depth[w, p] == 0:
                subject[w, p], waiting = True, False
    after_det = np.zeros_like(noun)
    after_det[:, 1:] = np.isin(held[:, :-1], list(DETERMINERS))
    return {"plural subject": subject & plural, "adjective after a determiner": after_det & ~noun & ~opening,
            "inside an aside": inside, "opening bracket": opening, "closing bracket": closing,
            "_plural other": plural & ~subject, "_singular subject": subject & ~plural}


def best(f: np.ndarray, mask: np.ndarray, strong: bool = False) -> tuple[int, float, float]:
    """The feature whose firing (above half its largest value when `strong`) best matches the mask."""
    flat, m = f.reshape(-1, f.shape[-1]), mask.reshape(-1)
    on = flat > (0.5 * flat.max(axis=0) if strong else 0)
    hits = (on & m[:, None]).sum(axis=0)
    precision = hits / np.maximum(on.sum(axis=0), 1)
    recall = hits / max(m.sum(), 1)
    j = int(np.argmax(precision * np.sqrt(recall)))
    return j, float(precision[j]), float(recall[j])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sae", type=Path, help="a saved SAE (cfg.json + sae_weights.safetensors) to read")
    parser.add_argument("--save", type=Path, help="save the trained SAE here")
    parser.add_argument("--windows", type=int, default=1500, help="held-out windows to encode")
    args = parser.parse_args()
    model = slm.load("shipped", dtype=np.float32)
    if args.sae:
        sae = S.load(args.sae)
    else:
        trainer = S.train(model, HOOK, S.PRESETS["shipped-topk"])
        sae = trainer.sae()
    if args.save:
        S.save(sae, args.save)
    held = S.corpus_windows(model, args.windows, seed=1, split="valid")
    index = S.FeatureIndex(sae, model, n_top=8)
    for start in range(0, held.shape[0], 250):
        index.add(held[start:start + 250])
    f = sae.encode(S.gather(model, held, sae.hook_name)).reshape(*held.shape, -1)
    masks = properties(held)
    for name, mask in masks.items():
        if name.startswith("_"):
            continue
        j, precision, recall = best(f, mask, strong=name == "inside an aside")
        print(f"\n## {name}: feature {j} (precision {precision:.2f}, recall {recall:.2f}; {mask.mean():.3f} of "
              f"positions have the property; density {index.density[j]:.3f})")
        if name == "plural subject":
            rate = {k: float((f[..., j] > 0)[masks[k]].mean()) for k in ("plural subject", "_plural other",
                                                                         "_singular subject")}
            print("fires on {:.0%} of plural subjects, {:.0%} of other plural nouns, {:.0%} of singular subjects"
                  .format(*rate.values()))
        for c in index.top_contexts(j, 5, before=7, after=1):
            words = [V[t] for t in c.tokens]
            words[c.at] = f"[{words[c.at]}]"
            print(f"  {c.activation:5.2f}  {' '.join(words)}")
        up, down = S.logit_effect(sae, model, j, k=8)
        print("  promotes  : " + " ".join(f"{V[i]} {v:+.2f}" for i, v in up))
        print("  suppresses: " + " ".join(f"{V[i]} {v:+.2f}" for i, v in down))
    return 0


if __name__ == "__main__":
    sys.exit(main())
