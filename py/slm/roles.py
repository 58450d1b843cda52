"""Head role scores: how much of each head's attention goes where a role says it should, read off a Trace.

In the spirit of TransformerLens's head detector: a role names, for some query rows of a prompt, the key
positions a head playing that role would attend to; a head's score is its attention mass on those keys,
averaged over the rows that have any (rows sum to 1, so a score is between 0 and 1).

| role | query row t | keys |
|---|---|---|
| previous token | every t ≥ 1 | t − 1 |
| duplicate token | a token seen before | its earlier occurrences |
| induction | a token seen before at s < t − 1 | s + 1, the token that followed it |
| pronoun → referent | "it" / "they" | the earlier noun of the same number |
| bracket | the position where a closing bracket is predicted (the one before it) | the matching opening bracket |

Induction is measured on `<start>` + R + R with R a run of distinct random words (`repeated_tokens`): in the
second copy, the keys are exactly the first copy's next tokens. A score says where a head looks, not what it
does with it; slm.interventions tests that by ablation and patching.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from .model import Trace

ROLES = ("previous_token", "duplicate_token", "induction", "pronoun", "bracket")
ROLE_TITLES = {
    "previous_token": "previous token", "duplicate_token": "duplicate token", "induction": "induction",
    "pronoun": "pronoun → referent", "bracket": "bracket matching",
}
PRONOUN_NUMBER = {"it": "sg", "they": "pl"}
BRACKETS = {"(": ")", "[": "]"}

Targets = list[tuple[int, list[int]]]  # (query row, key positions it should attend to)


class RoleScore(NamedTuple):
    scores: np.ndarray  # (L, H) mean attention mass on the role's keys
    n: int  # query rows averaged over (0: the prompt has no instance of the role, scores are NaN)


def _check(trace: Trace) -> None:
    if trace.tokens.ndim != 1:
        raise ValueError("role scores read one sequence: pass an unbatched trace")


def score_targets(trace: Trace, targets: Targets) -> RoleScore:
    """(L, H) attention mass from each query row on its keys, averaged over the rows."""
    _check(trace)
    att = trace.attention  # (L, H, T, S)
    rows = [att[:, :, q, keys].sum(axis=-1) for q, keys in targets if keys]
    if not rows:
        return RoleScore(np.full(att.shape[:2], np.nan), 0)
    return RoleScore(np.mean(rows, axis=0), len(rows))


# ---- where each role says to look ----

def previous_token_targets(tokens: Sequence) -> Targets:
    return [(t, [t - 1]) for t in range(1, len(tokens))]


def duplicate_token_targets(tokens: Sequence) -> Targets:
    return [(t, [s for s in range(t) if tokens[s] == tokens[t]]) for t in range(len(tokens))]


def induction_targets(tokens: Sequence) -> Targets:
    return [(t, [s + 1 for s in range(t - 1) if tokens[s] == tokens[t]]) for t in range(len(tokens))]


def pronoun_targets(words: Sequence[str], noun_number: Mapping[str, str]) -> Targets:
    """From each "it"/"they" to the nouns before it (after the previous ".") of the pronoun's number, when the
    sentence has a noun of the other number too (otherwise the referent is not decided by number)."""
    targets, start = [], 0
    for t, word in enumerate(words):
        if word == ".":
            start = t + 1
        number = PRONOUN_NUMBER.get(word)
        if number is None:
            continue
        nouns = [s for s in range(start, t) if words[s] in noun_number]
        same = [s for s in nouns if noun_number[words[s]] == number]
        if same and len(same) < len(nouns):
            targets.append((t, same))
    return targets


def bracket_targets(words: Sequence[str]) -> Targets:
    """From the position just before each closing bracket (where it is predicted) to its opening bracket."""
    targets, stack = [], []
    for t, word in enumerate(words):
        if word in BRACKETS:
            stack.append(t)
        elif word in BRACKETS.values():
            if stack and BRACKETS[words[stack[-1]]] == word and stack[-1] < t - 1:
                targets.append((t - 1, [stack[-1]]))
            if stack:
                stack.pop()
    return targets


def role_targets(role: str, words: Sequence[str], noun_number: Mapping[str, str] | None = None) -> Targets:
    """The (query, keys) pairs of `role` in a prompt of `words` (pronoun needs `noun_number`: noun → "sg"/"pl")."""
    makers: dict[str, Callable[[], Targets]] = {
        "previous_token": lambda: previous_token_targets(words),
        "duplicate_token": lambda: duplicate_token_targets(words),
        "induction": lambda: induction_targets(words),
        "pronoun": lambda: pronoun_targets(words, noun_number or {}),
        "bracket": lambda: bracket_targets(words),
    }
    if role not in makers:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    return makers[role]()


def role_scores(trace: Trace, words: Sequence[str],
                noun_number: Mapping[str, str] | None = None) -> dict[str, RoleScore]:
    """Every role's (L, H) scores on one prompt (`words`: its tokens as strings, as the trace ran them)."""
    _check(trace)
    if len(words) != trace.tokens.shape[0]:
        raise ValueError(f"words: {len(words)} tokens for a trace of {trace.tokens.shape[0]}")
    return {role: score_targets(trace, role_targets(role, words, noun_number)) for role in ROLES}


def mean_scores(per_prompt: Sequence[RoleScore]) -> RoleScore:
    """Scores pooled over prompts, each query row counting once."""
    used = [s for s in per_prompt if s.n]
    if not used:
        return per_prompt[0] if per_prompt else RoleScore(np.zeros((0, 0)), 0)
    total = sum(s.n for s in used)
    return RoleScore(sum(s.scores * s.n for s in used) / total, total)


def strongest(score: RoleScore) -> tuple[int, int] | None:
    """(layer, head) with the highest score, or None when the role has no instance."""
    if not score.n:
        return None
    layer, head = np.unravel_index(int(np.nanargmax(score.scores)), score.scores.shape)
    return int(layer), int(head)


def repeated_tokens(word_ids: Sequence[int], length: int, rng: np.random.Generator,
                    start_id: int | None = None) -> np.ndarray:
    """`<start>` (when given) + R + R: R is `length` distinct ids drawn from `word_ids`."""
    run = rng.choice(np.asarray(word_ids), size=length, replace=False)
    head = [] if start_id is None else [start_id]
    return np.array([*head, *run, *run], dtype=np.int64)


def copy_positions(length: int, with_start: bool = True) -> np.ndarray:
    """The rows of `repeated_tokens` whose next token is predictable by copying: in the second copy, every row
    but its last predicts the token that followed the same token in the first copy."""
    offset = 1 if with_start else 0
    return np.arange(offset + length, offset + 2 * length - 1)
