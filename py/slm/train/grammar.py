"""The corpus grammar as a rule set with features in the nonterminal names, the vocabulary it makes, and the
held-out (subject, verb) split (see corpus.py)."""

from __future__ import annotations

import random
from collections.abc import Iterable
from functools import lru_cache
from typing import NamedTuple

from .lexicon import (
    BRACKETS,
    CLASSES,
    COPULA,
    DETERMINERS,
    GENERAL_ADJECTIVES,
    HELD_OUT_FRACTION,
    INTRANSITIVE,
    LOCATIVE_PREPOSITIONS,
    MODIFIER_PREPOSITIONS,
    NOUNS,
    NUMBERS,
    PLACE,
    POSSESSIVE,
    PREDICATE_ADJECTIVES,
    PRONOUN,
    PRONOUN_VERB_WEIGHT,
    SPECIALS,
    SPLIT_SEED,
    TENSES,
    TRANSITIVE,
    UNK,
    _classes,
    _other,
    _verb_form,
)

# ---------------------------------------------------------------------------------------------------
# The grammar
# ---------------------------------------------------------------------------------------------------


class Rule(NamedTuple):
    lhs: str
    rhs: tuple[str, ...]
    tags: tuple[str, ...]  # role of each rhs symbol for the generator's annotations ("" = none)
    weight: float
    template: str  # name of the sentence template, for the productions of S only


START_SYMBOL = "S"


def _is_nonterminal(symbol: str) -> bool:
    return symbol[:1].isupper()


def _grammar_rules() -> list[Rule]:
    rules: list[Rule] = []

    def add(lhs: str, rhs: str, weight: float = 1.0, template: str = "") -> None:
        symbols, tags = [], []
        for part in rhs.split():
            symbol, _, tag = part.partition("@")
            symbols.append(symbol)
            tags.append(tag)
        rules.append(Rule(lhs, tuple(symbols), tuple(tags), weight, template))

    all_classes = (*CLASSES, PLACE)
    # --- lexical rules
    for cls in all_classes:
        for sg, pl in NOUNS[cls].items():
            add(f"N.sg.{cls}", sg)
            add(f"N.pl.{cls}", pl)
    for n in NUMBERS:
        for word, weight in DETERMINERS[n]:
            add(f"DET.{n}", word, weight)
        add(f"PRON.{n}", PRONOUN[n])
        add(f"POSS.{n}", POSSESSIVE[n])
        for t in TENSES:
            add(f"COP.{t}.{n}", COPULA[t, n])
            for *forms, subj, obj in TRANSITIVE.values():
                for c in _classes(subj):
                    for c2 in _classes(obj):
                        add(f"TV.{t}.{n}.{c}.{c2}", _verb_form(forms, t, n))
            for *forms, subj in INTRANSITIVE.values():
                for c in _classes(subj):
                    add(f"IV.{t}.{n}.{c}", _verb_form(forms, t, n))
    for adj in GENERAL_ADJECTIVES:
        add("ADJ", adj)
    for cls, adjs in PREDICATE_ADJECTIVES.items():
        for adj in adjs:
            add(f"PADJ.{cls}", adj)
    for p in MODIFIER_PREPOSITIONS:
        add("P", p)
    for p in LOCATIVE_PREPOSITIONS:
        add("LP", p)
    add("CONJ", "and", 2.0)
    add("CONJ", "but")
    add("CONJ", ", and")
    add("CONJ", ", but")
    add("BECAUSE", "because", 3.0)
    add("BECAUSE", ", because")

    # --- phrases
    for n in NUMBERS:
        for c in all_classes:
            add(f"NBAR.{n}.{c}", f"N.{n}.{c}@head", 2.0)
            add(f"NBAR.{n}.{c}", f"ADJ N.{n}.{c}@head")
            add(f"NPS.{n}.{c}", f"DET.{n} NBAR.{n}.{c}@head")  # simple NP: exactly one noun
    for m in NUMBERS:
        for c in all_classes:
            add("PP", f"P NPS.{m}.{c}@attr")  # a noun between subject and verb: an attractor
        add("LOC", f"LP NPS.{m}.{PLACE}")
    for n in NUMBERS:
        for c in CLASSES:
            add(f"NP.{n}.{c}", f"NPS.{n}.{c}@head", 2.0)
            add(f"NP.{n}.{c}", f"NPS.{n}.{c}@head PP")
            add(f"NP.{n}.{c}", f"NPS.{n}.{c}@head RC.{n}.{c}")
            for t in TENSES:  # a relative clause's verb agrees with the noun it modifies, in any tense
                for m in NUMBERS:
                    for c2 in CLASSES:
                        add(f"RC.{n}.{c}", f"that TV.{t}.{n}.{c}.{c2}@rcverb NPS.{m}.{c2}@attr")
    for c in CLASSES:
        add(f"PRED.{c}", f"PADJ.{c}", 2.0)
        add(f"PRED.{c}", "ADJ")
    for t in TENSES:
        for n in NUMBERS:
            for c in CLASSES:
                vp = f"VP.{t}.{n}.{c}"
                for m in NUMBERS:
                    for c2 in CLASSES:
                        add(vp, f"TV.{t}.{n}.{c}.{c2}@verb NPS.{m}.{c2}@obj", 0.5)
                add(vp, f"IV.{t}.{n}.{c}@verb")
                add(vp, f"IV.{t}.{n}.{c}@verb LOC")
                add(vp, f"COP.{t}.{n}@verb PRED.{c}", 2.0)
                add(vp, f"COP.{t}.{n}@verb LOC")
                add(f"CL.{t}", f"NP.{n}.{c}@subj {vp}")
        # pronoun clause: subject and object differ in number, so the pronoun has exactly one referent,
        # and either the adjective after the copula or the intransitive verb right after the pronoun has to
        # suit that referent's class
        # (subject class, object class) weights: mostly animal/thing mixes, where the adjective tells
        # the two nouns apart; only "strike"/"bump" take a thing as subject, so those are rarer
        class_pairs = {("animal", "thing"): 4.0, ("animal", "animal"): 2.0, ("thing", "animal"): 2.0,
                       ("thing", "thing"): 0.5}
        for a in NUMBERS:
            b = _other(a)
            for (c1, c2), weight in class_pairs.items():
                for x in NUMBERS:
                    referent_class = c1 if x == a else c2
                    clause = f"NPS.{a}.{c1}@subj TV.{t}.{a}.{c1}.{c2}@verb NPS.{b}.{c2}@obj BECAUSE PRON.{x}@pron"
                    add(f"PRONCL.{t}", f"{clause} COP.{t}.{x}@pcop PADJ.{referent_class}@radj", weight)
                    # the word right after the pronoun depends on the referent: "because it rolled / slept"
                    add(f"PRONCL.{t}", f"{clause} IV.{t}.{x}.{referent_class}@rverb",
                        weight * PRONOUN_VERB_WEIGHT)
        for n in NUMBERS:
            for m in NUMBERS:
                add(f"POSSCL.{t}", f"NP.{n}.animal@subj TV.{t}.{n}.animal.thing@verb POSS.{n}@poss "
                                   f"NBAR.{m}.thing@obj")
        add(START_SYMBOL, f"CL.{t} .", 1.5, "simple")
        add(START_SYMBOL, f"CL.{t} CONJ CL.{t} .", 1.0, "coordination")
        add(START_SYMBOL, f"PRONCL.{t} .", 4.0, "pronoun")
        add(START_SYMBOL, f"POSSCL.{t} .", 1.0, "possessive")
        # an aside after the subject, the verb agreeing across it: "the dog ( near the barn [ the old one ] )
        # was hungry ." The inner aside has no aside of its own, so asides nest to depth 2 at most.
        for n in NUMBERS:
            for c in CLASSES:
                add(f"ACL.{t}", f"NP.{n}.{c}@subj ASIDE1 VP.{t}.{n}.{c}")
        add(START_SYMBOL, f"ACL.{t} .", 1.0, "aside")
    for m in NUMBERS:
        add("PART", "LOC", 1.0)
        for c in CLASSES:
            add("PART", f"NPS.{m}.{c}", 1.0 / len(CLASSES))
    for open_, close in BRACKETS.items():
        add("ASIDE1", f"{open_}@open BODY1 {close}@close")
        add("ASIDE2", f"{open_}@open PART {close}@close")
    add("BODY1", "PART")
    add("BODY1", "PART ASIDE2")
    add("BODY1", "PART ASIDE2 PART")
    return rules


def _prune(rules: list[Rule]) -> list[Rule]:
    """Drop rules that use a nonterminal without any derivation (e.g. TV.past.sg.thing.person has no
    verb), so that every Earley item can be completed: then 'the chart is non-empty' means 'valid prefix'.
    """
    productive: set[str] = set()
    changed = True
    while changed:
        changed = False
        for r in rules:
            if r.lhs not in productive and all(
                    not _is_nonterminal(s) or s in productive for s in r.rhs):
                productive.add(r.lhs)
                changed = True
    return [r for r in rules if all(not _is_nonterminal(s) or s in productive for s in r.rhs)]


RULES: tuple[Rule, ...] = tuple(_prune(_grammar_rules()))
_BY_LHS: dict[str, list[int]] = {}
for _i, _r in enumerate(RULES):
    _BY_LHS.setdefault(_r.lhs, []).append(_i)
_CUMULATIVE: dict[str, list[float]] = {}
for _lhs, _ids in _BY_LHS.items():
    _acc, _cum = 0.0, []
    for _i in _ids:
        _acc += RULES[_i].weight
        _cum.append(_acc)
    _CUMULATIVE[_lhs] = _cum
_TERMINALS = sorted({s for r in RULES for s in r.rhs if not _is_nonterminal(s)})

# specials first (<pad> = 0), then punctuation, then words alphabetically
VOCAB: tuple[str, ...] = (*SPECIALS, ".", ",", *sorted(t for t in _TERMINALS if t not in (".", ",")))
TOKEN_ID: dict[str, int] = {t: i for i, t in enumerate(VOCAB)}

# Lists: "R R ." with R a run of distinct words drawn at random, so that the second copy can only be predicted by
# copying the first (the one rule outside the context-free grammar: a copy is not context-free). The generator
# (`_list_item`) and the recogniser (`_list_ok`, `_list_prefix_ok`) read these same facts. Every sentence starts
# with a determiner and no list has one, so the first word tells a list from a sentence.
_DETERMINER_WORDS = {word for n in NUMBERS for word, _ in DETERMINERS[n]}
LIST_WORDS: tuple[str, ...] = tuple(t for t in VOCAB if t not in (*SPECIALS, ".", ",", *BRACKETS, *BRACKETS.values())
                                    and t not in _DETERMINER_WORDS)
LIST_LENGTHS = (3, 12)  # the length of R, inclusive
_LIST_WORD_SET = frozenset(LIST_WORDS)
# How a document is made of items: each item is a list with LIST_FRACTION, else a repeat of an earlier item of
# the same document with REPEAT_FRACTION (if there is one), else a new sentence.
LIST_FRACTION = 0.15
REPEAT_FRACTION = 0.1


def vocabulary() -> list[str]:
    """All tokens: `<pad>` (id 0), `<start>`, `<unk>`, ".", ",", then the words alphabetically."""
    return list(VOCAB)


def encode(tokens: Iterable[str]) -> list[int]:
    """Token ids in `VOCAB`; tokens outside it become the id of `<unk>`."""
    unk = TOKEN_ID[UNK]
    return [TOKEN_ID.get(t, unk) for t in tokens]


def to_text(tokens: Iterable[str]) -> str:
    """Tokens joined by single spaces; a lowercase word/punctuation tokenizer gives the tokens back."""
    return " ".join(tokens)


# ---------------------------------------------------------------------------------------------------
# The split
# ---------------------------------------------------------------------------------------------------


def _compatible_subjects(verb: str) -> list[str]:
    if verb == "be":
        classes = list(CLASSES)
    elif verb in TRANSITIVE:
        classes = _classes(TRANSITIVE[verb][3])
    else:
        classes = _classes(INTRANSITIVE[verb][3])
    return [lemma for c in classes for lemma in NOUNS[c]]


@lru_cache(maxsize=8)
def held_out_pairs(split_seed: int = SPLIT_SEED,
                   fraction: float = HELD_OUT_FRACTION) -> frozenset[tuple[str, str]]:
    """The (subject noun lemma, verb lemma) combinations reserved for validation; "be" is the copula.

    For every verb, `fraction` of the nouns that can be its subject (at least one), chosen with
    `split_seed`. Only combinations the grammar allows are listed.
    """
    rng = random.Random(split_seed)
    held: list[tuple[str, str]] = []
    for verb in ("be", *TRANSITIVE, *INTRANSITIVE):
        nouns = _compatible_subjects(verb)
        k = max(1, round(fraction * len(nouns)))
        held.extend((noun, verb) for noun in rng.sample(nouns, k))
    return frozenset(held)
