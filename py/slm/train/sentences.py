"""The corpus generator: sentences, documents and token streams, expanded at random from the grammar's
rules (see corpus.py)."""

from __future__ import annotations

import bisect
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from .grammar import (
    _BY_LHS,
    _CUMULATIVE,
    LIST_FRACTION,
    LIST_LENGTHS,
    LIST_WORDS,
    REPEAT_FRACTION,
    RULES,
    START_SYMBOL,
    _is_nonterminal,
    held_out_pairs,
)
from .lexicon import (
    BRACKETS,
    CLASS_INTRANSITIVES,
    FLIP,
    INTRANSITIVE,
    NOUN_INFO,
    NOUN_LEMMA,
    PREDICATE_ADJECTIVES,
    START,
    TEMPLATES,
    VERB_LEMMA,
    Split,
    _verb_form,
)

# ---------------------------------------------------------------------------------------------------
# Generation
# ---------------------------------------------------------------------------------------------------


@dataclass
class Decision:
    """A position where the grammar forces one of two tokens, given the tokens before it."""

    kind: str  # one of DECISION_KINDS
    index: int  # position of the decided token in the sentence
    correct: str
    wrong: str  # the minimal alternative that would make the sentence a non-parse
    cue_index: int  # the token the answer depends on: subject head noun, pronoun, or referent noun
    attractor_index: int | None = None  # a noun of the other number between cue and decision, if any


@dataclass
class Sentence:
    """A generated sentence (ending in ".") with the annotations an evaluation needs.

    `subject_index` is the head noun of the first clause's subject. For `pronoun` sentences,
    `pronoun_index` is the "it"/"they", `referent_index` the noun of the same number it refers to and
    `other_index` the other noun. `pairs` are the (subject noun lemma, verb lemma) combinations that
    decide the split.
    """

    tokens: list[str]
    template: str
    subject_index: int
    decisions: list[Decision] = field(default_factory=list)
    pairs: list[tuple[str, str]] = field(default_factory=list)
    pronoun_index: int | None = None
    referent_index: int | None = None
    other_index: int | None = None
    pronoun: str | None = None
    wrong_pronoun: str | None = None


class _DeadEnd(Exception):
    """No verb allowed by the split for the chosen subject: the sentence is restarted."""


class _Generator:
    def __init__(self, rng: random.Random, split: Split) -> None:
        if split not in ("train", "valid"):
            raise ValueError(f"split must be 'train' or 'valid', not {split!r}")
        self.rng = rng
        self.want_held = split == "valid"
        self.held = held_out_pairs()

    def sentence(self, templates: Sequence[str]) -> Sentence:
        start_rules = [i for i in _BY_LHS[START_SYMBOL] if RULES[i].template in templates]
        rule_id = self._choose(start_rules)
        # Retry within the chosen production so that the template mix is the same in both splits.
        for _ in range(1000):
            self.tokens: list[str] = []
            self.decisions: list[Decision] = []
            self.pairs: list[tuple[str, str]] = []
            self.first_subject: int | None = None
            self.pronoun_info: tuple[int, int, int] | None = None
            try:
                self._expand_rule(rule_id, None, ())
            except _DeadEnd:
                continue
            assert self.first_subject is not None
            sent = Sentence(list(self.tokens), RULES[rule_id].template, self.first_subject,
                            self.decisions, self.pairs)
            if self.pronoun_info is not None:
                p, ref, oth = self.pronoun_info
                sent.pronoun_index, sent.referent_index, sent.other_index = p, ref, oth
                sent.pronoun, sent.wrong_pronoun = self.tokens[p], FLIP[self.tokens[p]]
            return sent
        raise RuntimeError("corpus: could not generate a sentence for this split")  # pragma: no cover

    def _choose(self, rule_ids: list[int]) -> int:
        weights = [RULES[i].weight for i in rule_ids]
        cum, acc = [], 0.0
        for w in weights:
            acc += w
            cum.append(acc)
        return rule_ids[bisect.bisect_right(cum, self.rng.random() * acc)]

    def _expand(self, symbol: str, subj: int | None, attrs: tuple[int, ...],
                check_pair: bool = False) -> tuple[int | None, list[int]]:
        """Expand `symbol`; returns (head noun index, attractor noun indices inside it)."""
        ids = _BY_LHS[symbol]
        if check_pair:  # a verb: restrict it to the combinations this split allows
            assert subj is not None
            noun = NOUN_LEMMA[self.tokens[subj]]
            ids = [i for i in ids
                   if ((noun, VERB_LEMMA[RULES[i].rhs[0]]) in self.held) == self.want_held]
            if not ids:
                raise _DeadEnd
            rule_id = ids[int(self.rng.random() * len(ids))]
        else:
            cum = _CUMULATIVE[symbol]
            rule_id = ids[bisect.bisect_right(cum, self.rng.random() * cum[-1])]
        return self._expand_rule(rule_id, subj, attrs)

    def _attractor(self, subj: int, attrs: Sequence[int]) -> int | None:
        number = NOUN_INFO[self.tokens[subj]][0]
        return next((a for a in attrs if NOUN_INFO[self.tokens[a]][0] != number), None)

    def _expand_rule(self, rule_id: int, subj: int | None,
                     attrs: tuple[int, ...]) -> tuple[int | None, list[int]]:
        rule = RULES[rule_id]
        if rule.lhs.startswith("N."):
            self.tokens.append(rule.rhs[0])
            return len(self.tokens) - 1, []
        head: int | None = None
        found: list[int] = []
        at: dict[str, int | None] = {}  # tag -> head (for phrases) or position (for words) of that child
        for symbol, tag in zip(rule.rhs, rule.tags, strict=True):
            pos = len(self.tokens)
            if not _is_nonterminal(symbol):
                self.tokens.append(symbol)
                if tag == "open":
                    at["open"] = pos
                elif tag == "close":  # the closing bracket must match the opening one
                    wrong = next(c for c in BRACKETS.values() if c != symbol)
                    self.decisions.append(Decision("bracket", pos, symbol, wrong, at["open"]))  # type: ignore[arg-type]
                continue
            h, inner = self._expand(symbol, subj, attrs, check_pair=tag in ("verb", "rcverb"))
            found.extend(inner)
            if tag == "attr":
                found.append(h)  # type: ignore[arg-type]
            if tag in ("subj", "head"):  # later siblings (VP, relative clause) agree with this noun
                subj, attrs = h, tuple(inner)
                if tag == "subj" and self.first_subject is None:
                    self.first_subject = h
            if tag == "head":
                head = h
            at[tag] = h if h is not None else pos
            if tag in ("verb", "rcverb"):
                assert subj is not None
                word = self.tokens[pos]
                self.pairs.append((NOUN_LEMMA[self.tokens[subj]], VERB_LEMMA[word]))
                if symbol.startswith("COP.") or ".pres." in symbol:  # past lexical verbs do not agree
                    kind = "verb" if tag == "verb" else "rc_verb"
                    attractor = self._attractor(subj, attrs) if tag == "verb" else None
                    self.decisions.append(Decision(kind, pos, word, FLIP[word], subj, attractor))
            elif tag == "poss":
                assert subj is not None
                word = self.tokens[pos]
                self.decisions.append(
                    Decision("possessive", pos, word, FLIP[word], subj, self._attractor(subj, attrs)))
            elif tag == "pcop" or (tag == "rverb" and ".pres." in symbol):  # past verbs do not agree
                word, pron = self.tokens[pos], at["pron"]
                assert pron is not None
                self.decisions.append(Decision("pronoun_verb", pos, word, FLIP[word], pron))
        if "pron" in at:
            self._annotate_pronoun(at)
        return head, found

    def _annotate_pronoun(self, at: dict[str, int | None]) -> None:
        pron, s, o = at["pron"], at["subj"], at["obj"]
        assert pron is not None and s is not None and o is not None
        number = "sg" if self.tokens[pron] == "it" else "pl"
        referent, other = (s, o) if NOUN_INFO[self.tokens[s]][0] == number else (o, s)
        self.pronoun_info = (pron, referent, other)
        ref_cls, other_cls = NOUN_INFO[self.tokens[referent]][1], NOUN_INFO[self.tokens[other]][1]
        if "radj" in at:  # "because it was wet"
            adj = at["radj"]
            assert adj is not None
            ref_adjs, other_adjs = PREDICATE_ADJECTIVES[ref_cls], PREDICATE_ADJECTIVES[other_cls]
            if ref_adjs != other_adjs:  # otherwise the adjective does not tell the nouns apart
                word = self.tokens[adj]
                wrong = other_adjs[ref_adjs.index(word)]
                self.decisions.append(Decision("referent", adj, word, wrong, referent))
        else:  # "because it rolled"
            verb = at["rverb"]
            assert verb is not None
            ref_verbs, other_verbs = CLASS_INTRANSITIVES[ref_cls], CLASS_INTRANSITIVES[other_cls]
            if ref_verbs != other_verbs:  # otherwise the verb does not tell the nouns apart
                word = self.tokens[verb]
                lemma = VERB_LEMMA[word]
                counterpart = other_verbs[ref_verbs.index(lemma) % len(other_verbs)]
                tense = "past" if word == INTRANSITIVE[lemma][0] else "pres"
                wrong = _verb_form(INTRANSITIVE[counterpart], tense, number)
                self.decisions.append(Decision("referent_verb", verb, word, wrong, referent))


def _list_item(rng: random.Random) -> list[str]:
    run = rng.sample(LIST_WORDS, rng.randint(*LIST_LENGTHS))
    return [*run, *run, "."]


def _document(rng: random.Random, gen: _Generator, templates: Sequence[str], n_items: int,
              list_fraction: float, repeat_fraction: float) -> list[str]:
    """`<start>` and `n_items` items: sentences, lists, and repeats of an earlier item (see LIST_FRACTION)."""
    doc, items = [START], []
    for _ in range(n_items):
        draw = rng.random()
        if draw < list_fraction:
            item = _list_item(rng)
        elif items and draw < list_fraction + repeat_fraction:
            item = items[rng.randrange(len(items))]
        else:
            item = gen.sentence(templates).tokens
        items.append(item)
        doc.extend(item)
    return doc


def _check_templates(templates: Sequence[str] | None) -> tuple[str, ...]:
    if templates is None:
        return TEMPLATES
    unknown = [t for t in templates if t not in TEMPLATES]
    if unknown or not templates:
        raise ValueError(f"templates must be a non-empty subset of {TEMPLATES}, got {templates!r}")
    return tuple(templates)


def generate_sentences(n: int, split: Split = "train", seed: int = 0,
                       templates: Sequence[str] | None = None) -> list[Sentence]:
    """`n` annotated sentences of `split`, the same for the same arguments; `templates` restricts the
    sentence templates (default: all of `TEMPLATES`, mixed by the grammar's weights)."""
    chosen = _check_templates(templates)
    gen = _Generator(random.Random(seed), split)
    return [gen.sentence(chosen) for _ in range(n)]


def documents(split: Split, n_docs: int, seed: int = 0, sentences_per_doc: tuple[int, int] = (2, 6),
              templates: Sequence[str] | None = None, list_fraction: float = LIST_FRACTION,
              repeat_fraction: float = REPEAT_FRACTION) -> list[list[str]]:
    """`n_docs` documents, each `<start>` followed by a random number (inclusive range) of items: sentences,
    lists ("R R .") and repeats of an earlier item (set both fractions to 0 for sentences only)."""
    lo, hi = sentences_per_doc
    if not 1 <= lo <= hi:
        raise ValueError(f"sentences_per_doc must be 1 <= lo <= hi, got {sentences_per_doc}")
    chosen = _check_templates(templates)
    rng = random.Random(seed)
    gen = _Generator(rng, split)
    return [_document(rng, gen, chosen, rng.randint(lo, hi), list_fraction, repeat_fraction)
            for _ in range(n_docs)]


def stream(split: Split, n_tokens: int, seed: int = 0, sentences_per_doc: tuple[int, int] = (2, 6),
           templates: Sequence[str] | None = None, list_fraction: float = LIST_FRACTION,
           repeat_fraction: float = REPEAT_FRACTION) -> list[str]:
    """Exactly `n_tokens` tokens of concatenated `documents` (the last one cut off), for a trainer to
    cut into context windows."""
    lo, hi = sentences_per_doc
    if not 1 <= lo <= hi:
        raise ValueError(f"sentences_per_doc must be 1 <= lo <= hi, got {sentences_per_doc}")
    chosen = _check_templates(templates)
    rng = random.Random(seed)
    gen = _Generator(rng, split)
    out: list[str] = []
    while len(out) < n_tokens:
        out.extend(_document(rng, gen, chosen, rng.randint(lo, hi), list_fraction, repeat_fraction))
    return out[:n_tokens]
