"""The corpus recogniser: an Earley parser over the generator's own rules (see corpus.py)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import NamedTuple

from .grammar import _BY_LHS, _LIST_WORD_SET, LIST_LENGTHS, RULES, START_SYMBOL
from .lexicon import START

# ---------------------------------------------------------------------------------------------------
# Recognition
# ---------------------------------------------------------------------------------------------------


@lru_cache(maxsize=1 << 16)
def _earley(tokens: tuple[str, ...]) -> tuple[bool, bool]:
    """(is a sentence of S, is a prefix of a sentence of S) by Earley's algorithm over `RULES`.

    The grammar has no empty rules, so a completed item always started at an earlier position and the
    completer only looks at finished chart sets.
    """
    n = len(tokens)
    # waiting[k][symbol]: items of set k whose next symbol is the nonterminal `symbol`
    waiting: list[dict[str, list[tuple[int, int, int]]]] = [{} for _ in range(n + 1)]
    agenda: list[tuple[int, int, int]] = [(r, 0, 0) for r in _BY_LHS[START_SYMBOL]]
    for k in range(n + 1):
        if not agenda:  # nothing scanned the previous token: not even a prefix
            return False, False
        seen = set(agenda)
        scanned: list[tuple[int, int, int]] = []
        word = tokens[k] if k < n else None
        i = 0
        while i < len(agenda):
            rule_id, dot, origin = item = agenda[i]
            i += 1
            rhs = RULES[rule_id].rhs
            if dot == len(rhs):  # complete: advance the items that were waiting for this lhs
                for r2, d2, o2 in waiting[origin].get(RULES[rule_id].lhs, ()):
                    new = (r2, d2 + 1, o2)
                    if new not in seen:
                        seen.add(new)
                        agenda.append(new)
                continue
            symbol = rhs[dot]
            if symbol in _BY_LHS:  # predict
                waits = waiting[k].setdefault(symbol, [])
                if not waits:
                    for r in _BY_LHS[symbol]:
                        new = (r, 0, k)
                        if new not in seen:
                            seen.add(new)
                            agenda.append(new)
                waits.append(item)
            elif symbol == word:  # scan
                scanned.append((rule_id, dot + 1, origin))
        if k == n:
            accepted = any(d == len(RULES[r].rhs) and o == 0 and RULES[r].lhs == START_SYMBOL
                           for r, d, o in agenda)
            return accepted, True
        agenda = scanned
    raise AssertionError("unreachable")  # pragma: no cover


def split_sentences(tokens: Sequence[str]) -> tuple[list[list[str]], list[str]] | None:
    """(complete sentences, trailing fragment): the tokens cut after every "."; `<start>` may stand only
    at sentence boundaries and is dropped. None if a `<start>` stands inside a sentence."""
    sentences: list[list[str]] = []
    current: list[str] = []
    for tok in tokens:
        if tok == START:
            if current:
                return None
            continue
        current.append(tok)
        if tok == ".":
            sentences.append(current)
            current = []
    return sentences, current


def _list_ok(sentence: Sequence[str]) -> bool:
    """Whether `sentence` is a list "R R ." (see LIST_WORDS)."""
    body = sentence[:-1]
    k = len(body) // 2
    return list(sentence[-1:]) == ["."] and len(body) == 2 * k and LIST_LENGTHS[0] <= k <= LIST_LENGTHS[1] \
        and _list_prefix_fits(body, k)


def _list_prefix_fits(tokens: Sequence[str], k: int) -> bool:
    """Whether `tokens` (no ".") can start a list whose run R has length k."""
    first = tokens[:k]
    return (len(tokens) <= 2 * k and all(t in _LIST_WORD_SET for t in first) and len(set(first)) == len(first)
            and all(tokens[i] == tokens[i - k] for i in range(k, len(tokens))))


def _list_prefix_ok(fragment: Sequence[str]) -> bool:
    return any(_list_prefix_fits(fragment, k) for k in range(LIST_LENGTHS[0], LIST_LENGTHS[1] + 1))


def _sentence_ok(sentence: Sequence[str]) -> bool:
    return _earley(tuple(sentence))[0] or _list_ok(sentence)


def _fragment_ok(fragment: Sequence[str]) -> bool:
    return not fragment or _earley(tuple(fragment))[1] or _list_prefix_ok(fragment)


def parses(tokens: Sequence[str]) -> bool:
    """Whether `tokens` is one or more complete sentences of the grammar.

    Exactly: after dropping `<start>` tokens that stand at sentence boundaries (at the very start or
    right after a "."), the tokens are non-empty, end with ".", and every stretch up to and including a
    "." is derivable from S — the same rules the generator uses, so with number agreement (subject–verb
    including across attractors, determiner–noun, pronoun–copula, possessive–subject), one tense per
    sentence, the verbs' and predicate adjectives' class restrictions, and in pronoun sentences nouns of
    different number with the adjective after the copula, or the verb after the pronoun, suiting the
    class of the noun whose number the pronoun has. Any other token
    (`<pad>`, `<unk>`, an unknown word, `<start>` inside a sentence) makes it a non-parse. The split
    is not part of the grammar: held-out combinations parse.
    """
    parts = split_sentences(tokens)
    if parts is None:
        return False
    sentences, fragment = parts
    return bool(sentences) and not fragment and all(_sentence_ok(s) for s in sentences)


def is_valid_prefix(tokens: Sequence[str]) -> bool:
    """Whether `tokens` can be continued into something that `parses`: every complete sentence (up to a
    ".") parses and the trailing tokens after the last "." are a prefix of some sentence (possibly empty,
    so `[]` and `["<start>"]` are valid prefixes). Use it for a sampled continuation cut off anywhere."""
    parts = split_sentences(tokens)
    if parts is None:
        return False
    sentences, fragment = parts
    return all(_sentence_ok(s) for s in sentences) and _fragment_ok(fragment)


class ParseReport(NamedTuple):
    sentences: int  # complete sentences (ending in ".")
    grammatical: int  # of those, how many parse
    fragment_ok: bool  # the trailing incomplete sentence, if any, is a valid prefix


def parse_report(tokens: Sequence[str]) -> ParseReport:
    """Per-sentence grammaticality of a sampled text, for scoring generations (a `<start>` inside a
    sentence counts as a break: the text before it is judged as a fragment that must be a prefix)."""
    sentences: list[list[str]] = []
    fragment_ok = True
    current: list[str] = []
    for tok in tokens:
        if tok == START:
            if current:
                fragment_ok = fragment_ok and _fragment_ok(current)
                current = []
            continue
        current.append(tok)
        if tok == ".":
            sentences.append(current)
            current = []
    fragment_ok = fragment_ok and _fragment_ok(current)
    good = sum(_sentence_ok(s) for s in sentences)
    return ParseReport(len(sentences), good, fragment_ok)
