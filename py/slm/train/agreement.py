"""Agreement probes: forced choices between two tokens at the grammar's decision points (see corpus.py)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from .lexicon import DECISION_KINDS, START, TEMPLATES, Split
from .sentences import Sentence, _Generator


@dataclass
class AgreementCase:
    """A forced choice: after `prefix` the grammar allows `correct` and not `wrong`.

    Indices are positions in `prefix` (which starts with `<start>` when asked for).
    """

    kind: str
    prefix: list[str]
    correct: str
    wrong: str
    cue_index: int
    attractor_index: int | None
    sentence: Sentence


def agreement_cases(split: Split, n: int, seed: int = 0, kinds: Sequence[str] | None = None,
                    with_start: bool = True) -> list[AgreementCase]:
    """`n` decision points (see `Decision`) of the given `kinds` (default all `DECISION_KINDS`) from
    sentences of `split`, in the order they occur. `with_start` puts `<start>` in front of each prefix,
    as at the start of a training document.

    Kinds: "verb" (was/were, is/are or a present verb after the subject, possibly across an attractor),
    "rc_verb" (present verb in a relative clause agreeing with the modified noun), "pronoun_verb"
    ("because they" → were, "because it" → rolls), "referent" (the adjective after "because it was" must
    suit the noun the pronoun refers to; `wrong` is an adjective of the other noun's class),
    "referent_verb" (the intransitive verb right after the pronoun, "because it" → rolled, must suit the
    referent's class; `wrong` is a verb of the other noun's class in the same form) and "possessive"
    (its/their).
    """
    wanted = tuple(kinds) if kinds is not None else DECISION_KINDS
    if not wanted or any(k not in DECISION_KINDS for k in wanted):
        raise ValueError(f"kinds must be a non-empty subset of {DECISION_KINDS}, got {kinds!r}")
    # only templates that can produce the wanted kinds, so that rare kinds do not take long to collect
    templates = {"pronoun_verb": ("pronoun",), "referent": ("pronoun",), "referent_verb": ("pronoun",),
                 "possessive": ("possessive",), "bracket": ("aside",),
                 "verb": ("simple", "coordination"), "rc_verb": ("simple", "coordination", "possessive")}
    chosen = sorted({t for k in wanted for t in templates[k]}, key=TEMPLATES.index)
    gen = _Generator(random.Random(seed), split)
    shift = 1 if with_start else 0
    cases: list[AgreementCase] = []
    while len(cases) < n:
        sent = gen.sentence(chosen)
        for d in sent.decisions:
            if d.kind in wanted and len(cases) < n:
                prefix = ([START] if with_start else []) + sent.tokens[:d.index]
                attractor = None if d.attractor_index is None else d.attractor_index + shift
                cases.append(AgreementCase(d.kind, prefix, d.correct, d.wrong, d.cue_index + shift,
                                           attractor, sent))
    return cases
