"""The shipped model's metrics, on held-out (validation-split) data drawn with fixed seeds.

* validation cross-entropy vs. the unigram baseline;
* agreement: at a decision point the grammar's form gets a higher probability than its other-number twin;
* grammaticality of sampled continuations (corpus.parses);
* the pronoun head: attention from "it"/"they" (and from the word after it) to the noun it refers to, per
  (layer, head);
* head roles (slm.roles) on held-out probes, copying of repeated random words, closing brackets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .. import interventions, roles
from ..generate import generate
from ..model import Model
from . import corpus
from .backward import cross_entropy, next_token_targets

AGREEMENT_KINDS = ("verb", "rc_verb", "pronoun_verb", "possessive")  # the number agreements
REFERENT_KINDS = ("referent", "referent_verb")  # the semantic class of the pronoun's referent
EVAL_SEED = 20240  # a seed for every held-out sample below; not used for training data


def _pad(rows: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.array([len(r) for r in rows])
    ids = np.full((len(rows), lengths.max()), corpus.TOKEN_ID[corpus.PAD], dtype=np.int64)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = r
    return ids, lengths


def _batches(n: int, size: int):
    for lo in range(0, n, size):
        yield slice(lo, min(lo + size, n))


def window_loss(model: Model, windows: np.ndarray, batch_size: int = 64) -> float:
    """Mean next-token cross-entropy over (N, T) windows (every position but the last predicts)."""
    total, count = 0.0, 0
    for sl in _batches(len(windows), batch_size):
        ids = windows[sl]
        targets, valid = next_token_targets(ids)
        loss, _ = cross_entropy(model.forward(ids).logits, targets, valid)
        total += loss * valid.sum()
        count += valid.sum()
    return float(total / count)


def unigram_loss(train_ids: np.ndarray, windows: np.ndarray, smoothing: float = 1.0) -> float:
    """The same targets as window_loss, predicted by add-`smoothing` unigram frequencies of the training ids."""
    counts = np.bincount(train_ids, minlength=len(corpus.VOCAB)) + smoothing
    log_p = np.log(counts / counts.sum())
    return float(-log_p[windows[:, 1:]].mean())


@dataclass
class Agreement:
    accuracy: float  # over all AGREEMENT_KINDS cases
    by_kind: dict[str, float]
    n: dict[str, int]
    failures: list[str] = field(default_factory=list)  # a few failed cases, as text


def agreement(model: Model, n_per_kind: int = 200, seed: int = EVAL_SEED,
              kinds: Sequence[str] = (*AGREEMENT_KINDS, *REFERENT_KINDS)) -> Agreement:
    """For held-out decision points of each kind: does the correct form get more probability than the wrong
    one? `accuracy` pools the number-agreement kinds (AGREEMENT_KINDS); the REFERENT_KINDS (the adjective
    after the pronoun's copula, or the verb right after the pronoun, must suit the referent noun's class)
    are reported on their own."""
    by_kind, n, failures = {}, {}, []
    pooled_right = pooled_total = 0
    for k, kind in enumerate(kinds):
        cases = corpus.agreement_cases("valid", n_per_kind, seed=seed + k, kinds=[kind])
        # a prefix longer than the context keeps its last n_ctx tokens (never the case for the shipped model)
        ids, lengths = _pad([corpus.encode(c.prefix)[-model.cfg.n_ctx:] for c in cases])
        right = 0
        for sl in _batches(len(cases), 128):
            logits = model.forward(ids[sl], lengths=lengths[sl]).logits
            last = logits[np.arange(len(logits)), lengths[sl] - 1]
            for row, case in zip(last, cases[sl], strict=True):
                good = row[corpus.TOKEN_ID[case.correct]] > row[corpus.TOKEN_ID[case.wrong]]
                right += bool(good)
                if not good and len(failures) < 10:
                    failures.append(f"{' '.join(case.prefix)} -> {case.correct} (not {case.wrong})")
        by_kind[kind], n[kind] = right / len(cases), len(cases)
        if kind in AGREEMENT_KINDS:
            pooled_right += right
            pooled_total += len(cases)
    return Agreement(pooled_right / max(pooled_total, 1), by_kind, n, failures)


@dataclass
class Samples:
    rate: float  # fraction of continuations that parse
    n: int
    examples: list[str]
    bad: list[str]


def held_out_prompts(n: int, seed: int = EVAL_SEED) -> list[list[str]]:
    """`<start>` plus the first one to three tokens of held-out sentences (the subject's determiner, maybe an
    adjective and the noun): the model has to finish the sentence."""
    rng = np.random.default_rng(seed)
    prompts = []
    for sent in corpus.generate_sentences(n, "valid", seed=seed):
        cut = int(rng.integers(1, min(sent.subject_index, 2) + 2))
        prompts.append([corpus.START, *sent.tokens[:cut]])
    return prompts


def sample_parse_rate(model: Model, n: int = 100, temperature: float = 0.8, seed: int = EVAL_SEED,
                      max_new_tokens: int = 40) -> Samples:
    """Sample one sentence (up to its ".") from each of n held-out prompts; the rate of samples that parse
    under the grammar (a sample cut off by max_new_tokens counts if it is still a valid prefix)."""
    stop = [corpus.TOKEN_ID["."]]
    ok, examples, bad = 0, [], []
    for i, prompt in enumerate(held_out_prompts(n, seed)):
        steps = generate(model, corpus.encode(prompt), max_new_tokens, temperature=temperature, seed=seed + i,
                         stop_ids=stop)
        tokens = prompt + [corpus.VOCAB[s.token] for s in steps]
        good = corpus.parses(tokens) if tokens[-1] == "." else corpus.is_valid_prefix(tokens)
        ok += good
        text = " ".join(tokens[1:])
        if len(examples) < 8:
            examples.append(text)
        if not good and len(bad) < 10:
            bad.append(text)
    return Samples(ok / n, n, examples, bad)


@dataclass
class PronounHeads:
    to_referent: np.ndarray  # (L, H) mean attention from the pronoun to its referent noun
    to_other: np.ndarray  # (L, H) ... to the other noun
    copula_to_referent: np.ndarray  # (L, H) from the word after the pronoun (copula or verb) to the referent
    copula_to_other: np.ndarray  # (L, H) ... to the other noun
    n: int

    @property
    def best(self) -> tuple[int, int]:
        """The head attending most from the pronoun itself to the referent."""
        layer, head = np.unravel_index(int(np.argmax(self.to_referent)), self.to_referent.shape)
        return int(layer), int(head)

    @property
    def best_copula(self) -> tuple[int, int]:
        """The head attending most from the word after the pronoun ("because it was", "because it rolled") to
        the referent."""
        layer, head = np.unravel_index(int(np.argmax(self.copula_to_referent)), self.copula_to_referent.shape)
        return int(layer), int(head)

    def choice(self, threshold: float = 0.5) -> tuple[int, int, str]:
        """(layer, head, query) to show a learner: the best head from the pronoun if it reaches `threshold`,
        else whichever of the two query positions ("pronoun" or "copula", i.e. the word after the pronoun) has
        the stronger head."""
        (pl, ph), (cl, ch) = self.best, self.best_copula
        pronoun, copula = self.to_referent[pl, ph], self.copula_to_referent[cl, ch]
        if pronoun >= threshold or pronoun >= copula:
            return pl, ph, "pronoun"
        return cl, ch, "copula"


def pronoun_heads(model: Model, n: int = 200, seed: int = EVAL_SEED) -> PronounHeads:
    """Average attention weights, over n held-out pronoun sentences (each run after `<start>`), from the
    pronoun ("it"/"they") to its referent (the noun of the same number) and to the other noun."""
    sents = [s for s in corpus.generate_sentences(n, "valid", seed=seed, templates=["pronoun"])
             if len(s.tokens) < model.cfg.n_ctx]
    n = len(sents)
    ids, lengths = _pad([corpus.encode([corpus.START, *s.tokens]) for s in sents])
    ref, other, cop, cop_other = [], [], [], []
    for sl in _batches(n, 128):
        att = model.forward(ids[sl], lengths=lengths[sl]).attention  # (B, L, H, T, S)
        for b, s in zip(range(len(att)), sents[sl], strict=True):
            p, r, o = s.pronoun_index + 1, s.referent_index + 1, s.other_index + 1
            ref.append(att[b, :, :, p, r])
            other.append(att[b, :, :, p, o])
            cop.append(att[b, :, :, p + 1, r])
            cop_other.append(att[b, :, :, p + 1, o])
    mean = [np.mean(values, axis=0) for values in (ref, other, cop, cop_other)]
    return PronounHeads(*mean, n)


# ---- head roles (slm.roles) on held-out probes, and what ablating the heads does ----

REPEAT_LENGTH = 10  # |R| in the induction probes <start> + R + R
ROLE_TARGETS = {"previous_token": 0.9, "induction": 0.5, "pronoun": 0.8, "bracket": 0.5}


def noun_numbers() -> dict[str, str]:
    """noun -> "sg"/"pl" for every noun of the grammar (what slm.roles' pronoun role needs)."""
    return {word: number for word, (number, _) in corpus.NOUN_INFO.items()}


def repeat_length(n_ctx: int) -> int:
    """|R| of the induction probes: REPEAT_LENGTH, or less when `<start>` + R + R would not fit the context."""
    return min(REPEAT_LENGTH, (n_ctx - 1) // 2)


def repeated_probes(n: int, length: int = REPEAT_LENGTH, seed: int = EVAL_SEED) -> np.ndarray:
    """(n, 2 * length + 1): `<start>` + R + R with R `length` distinct list words (corpus.LIST_WORDS) drawn with a
    seed no training run uses."""
    rng = np.random.default_rng([seed, length])
    word_ids = corpus.encode(corpus.LIST_WORDS)
    return np.stack([roles.repeated_tokens(word_ids, length, rng, corpus.TOKEN_ID[corpus.START]) for _ in range(n)])


def copying_accuracy(model: Model, probes: np.ndarray, length: int = REPEAT_LENGTH,
                     ablate: Sequence[tuple[int, int]] = (), how: str = "zero", means: np.ndarray | None = None
                     ) -> float:
    """Top-1 accuracy on the second copy of R (every token the first copy predicts), optionally with heads ablated."""
    rows = roles.copy_positions(length)
    trace = interventions.run_ablated(model, probes, ablate, how, means) if ablate else model.forward(probes)
    return float((trace.logits[:, rows].argmax(-1) == probes[:, rows + 1]).mean())


def role_probe_words(n: int = 100, seed: int = EVAL_SEED, n_ctx: int = 32) -> dict[str, list[list[str]]]:
    """Held-out probes per role, as token strings: documents of the validation split (previous token), repeated
    random words (duplicate token, induction), pronoun sentences and sentences with asides."""
    start = [corpus.START]
    docs = [d[:n_ctx] for d in corpus.documents("valid", n, seed=seed)]
    repeats = [[corpus.VOCAB[i] for i in row] for row in repeated_probes(n, repeat_length(n_ctx), seed=seed)]
    pronoun = [start + s.tokens for s in corpus.generate_sentences(n, "valid", seed=seed, templates=["pronoun"])]
    aside = [start + s.tokens for s in corpus.generate_sentences(n, "valid", seed=seed, templates=["aside"])]
    return {"previous_token": docs, "duplicate_token": repeats, "induction": repeats,
            "pronoun": [p for p in pronoun if len(p) <= n_ctx], "bracket": [a for a in aside if len(a) <= n_ctx],
            "previous_token_on_repeats": repeats}


def role_probe_scores(model: Model, probes: dict[str, list[list[str]]] | None = None) -> dict[str, roles.RoleScore]:
    """Each role's (L, H) scores pooled over its held-out probes."""
    probes = role_probe_words(n_ctx=model.cfg.n_ctx) if probes is None else probes
    nouns = noun_numbers()
    out = {}
    for key, prompts in probes.items():
        role = "previous_token" if key == "previous_token_on_repeats" else key
        per = [roles.score_targets(model.forward(np.array(corpus.encode(words))),
                                   roles.role_targets(role, words, nouns)) for words in prompts]
        out[key] = roles.mean_scores(per)
    return out


def bracket_accuracy(model: Model, n: int = 400, seed: int = EVAL_SEED) -> dict[str, float]:
    """At held-out closing brackets: the matching closing bracket more likely than the other one (forced choice),
    and the top-1 prediction, by depth (1: the outer aside, 2: one nested inside it)."""
    cases = corpus.agreement_cases("valid", n, seed=seed, kinds=["bracket"])
    ids, lengths = _pad([corpus.encode(c.prefix)[-model.cfg.n_ctx:] for c in cases])
    logits = model.forward(ids, lengths=lengths).logits
    last = logits[np.arange(len(cases)), lengths - 1]
    result: dict[str, list[bool]] = {}
    for row, case in zip(last, cases, strict=True):
        depth = sum(1 if t in corpus.BRACKETS else -1 if t in corpus.BRACKETS.values() else 0 for t in case.prefix)
        chosen = row[corpus.TOKEN_ID[case.correct]] > row[corpus.TOKEN_ID[case.wrong]]
        top1 = int(np.argmax(row)) == corpus.TOKEN_ID[case.correct]
        for key, value in ((f"choice_depth{depth}", chosen), ("choice", chosen), (f"top1_depth{depth}", top1),
                           ("top1", top1)):
            result.setdefault(key, []).append(bool(value))
    return {key: float(np.mean(values)) for key, values in sorted(result.items())}


def role_report(model: Model, n: int = 100, seed: int = EVAL_SEED) -> dict:
    """The model card's head-role numbers: every role's (L, H) scores on held-out probes and its strongest head,
    copying on `<start>` + R + R with and without the induction heads (every head scoring >= 0.5, else the
    strongest), closing brackets by depth, and what zero-ablating each role's strongest head does."""
    scores = role_probe_scores(model, role_probe_words(n, seed, model.cfg.n_ctx))
    best = {key: roles.strongest(score) for key, score in scores.items()}
    induction = scores["induction"].scores
    heads = [(int(i), int(j)) for i, j in zip(*np.nonzero(induction >= ROLE_TARGETS["induction"]), strict=True)]
    heads = heads or [best["induction"]]
    length = repeat_length(model.cfg.n_ctx)
    probes = repeated_probes(n, length, seed=seed)
    copying = copying_accuracy(model, probes, length)
    agree_kinds = (*AGREEMENT_KINDS, *REFERENT_KINDS)
    ablations = {}
    for key in ("previous_token", "induction", "pronoun", "bracket"):
        layer, head = best[key]
        ablated = interventions.ablation_hooks(model, [(layer, head)])
        ablated_model = _HookedModel(model, ablated)
        ablations[key] = {
            "head": [layer, head],
            "copying": copying_accuracy(model, probes, length, ablate=[(layer, head)]),
            "bracket_choice": bracket_accuracy(ablated_model, seed=seed)["choice"],
            "referent": agreement(ablated_model, n_per_kind=100, seed=seed, kinds=REFERENT_KINDS).by_kind,
        }
    return {
        "role_scores": {key: score.scores.round(4).tolist() for key, score in scores.items()},
        "role_n": {key: score.n for key, score in scores.items()},
        "role_best": {key: list(head) for key, head in best.items() if head is not None},
        "role_best_score": {key: float(scores[key].scores[head]) for key, head in best.items() if head is not None},
        "copying": copying,
        "induction_heads": [list(h) for h in heads],
        "copying_without_induction_heads": copying_accuracy(model, probes, length, ablate=heads),
        "brackets": bracket_accuracy(model, seed=seed),
        "ablations": ablations,
        "agreement_kinds": list(agree_kinds),
    }


class _HookedModel(Model):
    """A model whose every forward pass runs with fixed hooks (to reuse the metrics above under an ablation)."""

    def __init__(self, model: Model, hooks: list) -> None:
        super().__init__(model.cfg, model.params, model.meta)
        self._fixed_hooks = hooks

    def forward(self, tokens, lengths=None, cache=None, fwd_hooks=(), output_positions=None):  # type: ignore[override]
        return super().forward(tokens, lengths, cache, [*self._fixed_hooks, *fwd_hooks], output_positions)
