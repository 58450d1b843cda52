"""A synthetic English corpus from a small feature grammar, for training a tiny transformer.

Everything here is generated from the grammar below (no copied text), seeded and deterministic.

One grammar, two uses
---------------------
The grammar is a plain context-free grammar whose nonterminals carry their features in their names
(``NP.sg.animal``, ``VP.past.pl.thing``): the number, tense and semantic-class constraints are expanded
into the rule set once, at import. The *generator* expands that rule set at random and the *recogniser*
(`parses`, `is_valid_prefix`) is an Earley parser over the very same rules, so the two cannot drift.
Rules carry role tags (``@subj``, ``@verb``, ...) that only the generator reads, to annotate sentences.

What the language contains (templates, i.e. the productions of ``S``)
-------------------------------------------------------------------
* ``simple``       "the dog near the cats was hungry ." / "the girls that feed the dog wash the cups ." /
                   "some foxes slept in the garden ." — subject NPs may carry a PP or a relative clause
                   whose noun is an *attractor*; the verb agrees with the head noun.
* ``coordination`` two simple clauses joined by "and", "but", ", and", ", but" (same tense).
* ``pronoun``      "the cat chased the balls because it was hungry ." / "the cat chased the balls because
                   they rolled ." — two nouns of DIFFERENT number, so the pronoun ("it"/"they") has exactly
                   one possible referent; the copula or verb agrees with the pronoun, and the adjective
                   after the copula, or the intransitive verb right after the pronoun, must fit the
                   referent's semantic class.
* ``possessive``   "the dog near the cats lost its bone ." — "its"/"their" agrees with the subject.

Agreement everywhere: was/were, is/are, present-tense verbs (chases/chase), determiners (this/these,
one/two...), possessives. Selection: verbs restrict the class (animal, person, thing) of subject and
object, predicate adjectives are class-specific (animals and people are hungry or happy, things are
broken or wet), and so are intransitive verbs (animals and people sleep or run, things roll or fall);
a few general adjectives (big, red, ...) fit everything.

Why the pronoun task is built this way
--------------------------------------
"the cat chased the dogs because ___" is genuinely open: both "it" and "they" are grammatical, so the
pronoun choice is not a test item. What *is* forced after the pronoun:
  1. the copula or present-tense verb ("because they ___" → were / roll), a local agreement with the
     pronoun (kind ``pronoun_verb``);
  2. the class of what follows: in "the dog chased the balls because they ___" the next word is either
     the copula or an intransitive verb, and the verb must suit the referent (rolled/fell/..., not
     slept: kind ``referent_verb``); after the copula, the adjective must ("... because they were ___" →
     broken/heavy/..., not hungry: kind ``referent``). Which noun the pronoun refers to is found by
     matching number. When the two nouns have different classes these are decisions the model can only
     get right by resolving the pronoun — the verb one *at the pronoun's own position*, which is what
     makes an attention pattern from the pronoun to its referent useful to it (without the verb
     sentences the word after a pronoun would always be the copula, which the pronoun alone decides).
     `Sentence.pronoun_index`, `referent_index` and `other_index` let a trainer measure attention from
     the pronoun (or the word after it) to the referent versus the other noun.
Pronoun sentences use animals and things only, since "it" would be wrong for a singular person.

Train/validation split
----------------------
The split is by held-out (subject noun, verb) combinations, with the copula counting as the verb "be".
`held_out_pairs()` picks, with a fixed seed (`SPLIT_SEED`, independent of the sampling seed so that
train and valid sets drawn with any seeds never leak), about a fifth of the compatible subject nouns of
every verb. In a training sentence no subject–verb pair (main clauses, relative clauses, whose subject
is the modified noun; not the clause after "because", whose subject is the pronoun) is held out; in a
validation sentence every one is.

What `parses` accepts
---------------------
See `parses` and `is_valid_prefix`.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal, NamedTuple

__all__ = [
    "PAD", "START", "UNK", "SPECIALS", "SPLIT_SEED", "TEMPLATES", "VOCAB", "DECISION_KINDS",
    "AgreementCase", "Decision", "ParseReport", "Sentence",
    "agreement_cases", "documents", "encode", "generate_sentences", "held_out_pairs", "is_valid_prefix",
    "parse_report", "parses", "split_sentences", "stream", "to_text", "vocabulary",
]

Split = Literal["train", "valid"]

PAD, START, UNK = "<pad>", "<start>", "<unk>"
SPECIALS = (PAD, START, UNK)
SPLIT_SEED = 1234  # fixed so that the held-out combinations do not depend on the sampling seed
HELD_OUT_FRACTION = 0.2

# ---------------------------------------------------------------------------------------------------
# Lexicon
# ---------------------------------------------------------------------------------------------------

NUMBERS = ("sg", "pl")
TENSES = ("past", "pres")
CLASSES = ("animal", "person", "thing")  # classes that can be subjects
PLACE = "place"  # nouns that only occur inside prepositional phrases

# lemma -> plural; irregular plurals are there so that number is a property of the word, not of a final -s
NOUNS: dict[str, dict[str, str]] = {
    "animal": {"cat": "cats", "dog": "dogs", "bird": "birds", "fox": "foxes", "horse": "horses",
               "rabbit": "rabbits", "mouse": "mice", "duck": "ducks", "goat": "goats", "frog": "frogs",
               "wolf": "wolves", "cow": "cows"},
    "person": {"boy": "boys", "girl": "girls", "man": "men", "woman": "women", "child": "children",
               "farmer": "farmers", "teacher": "teachers", "baker": "bakers", "king": "kings",
               "doctor": "doctors"},
    "thing": {"ball": "balls", "box": "boxes", "cup": "cups", "hat": "hats", "book": "books",
              "shoe": "shoes", "bone": "bones", "apple": "apples", "car": "cars", "key": "keys",
              "stick": "sticks", "cake": "cakes"},
    PLACE: {"house": "houses", "garden": "gardens", "river": "rivers", "park": "parks", "tree": "trees",
            "barn": "barns", "road": "roads", "hill": "hills", "field": "fields", "school": "schools"},
}

_CLASS_CODE = {"a": "animal", "p": "person", "t": "thing"}

# lemma -> (past, present 3rd singular, present plural, subject classes, object classes); all three forms
# differ (no "hit"), so that a present-tense verb is always a forced choice between two forms
TRANSITIVE: dict[str, tuple[str, str, str, str, str]] = {
    "chase": ("chased", "chases", "chase", "ap", "apt"),
    "see": ("saw", "sees", "see", "ap", "apt"),
    "like": ("liked", "likes", "like", "ap", "apt"),
    "follow": ("followed", "follows", "follow", "ap", "ap"),
    "bite": ("bit", "bites", "bite", "a", "apt"),
    "find": ("found", "finds", "find", "ap", "apt"),
    "carry": ("carried", "carries", "carry", "ap", "at"),
    "drop": ("dropped", "drops", "drop", "ap", "t"),
    "push": ("pushed", "pushes", "push", "ap", "apt"),
    "want": ("wanted", "wants", "want", "ap", "at"),
    "lose": ("lost", "loses", "lose", "ap", "t"),
    "watch": ("watched", "watches", "watch", "ap", "apt"),
    "feed": ("fed", "feeds", "feed", "p", "ap"),
    "help": ("helped", "helps", "help", "p", "ap"),
    "wash": ("washed", "washes", "wash", "p", "at"),
    "strike": ("struck", "strikes", "strike", "apt", "apt"),
    "bump": ("bumped", "bumps", "bump", "apt", "ap"),
}
# lemma -> (past, present 3rd singular, present plural, subject classes)
INTRANSITIVE: dict[str, tuple[str, str, str, str]] = {
    "sleep": ("slept", "sleeps", "sleep", "ap"),
    "run": ("ran", "runs", "run", "ap"),
    "sing": ("sang", "sings", "sing", "ap"),
    "play": ("played", "plays", "play", "ap"),
    "wait": ("waited", "waits", "wait", "ap"),
    "jump": ("jumped", "jumps", "jump", "ap"),
    "eat": ("ate", "eats", "eat", "ap"),
    "fall": ("fell", "falls", "fall", "t"),
    "roll": ("rolled", "rolls", "roll", "t"),
    "break": ("broke", "breaks", "break", "t"),
    "sink": ("sank", "sinks", "sink", "t"),
    "spin": ("spun", "spins", "spin", "t"),
}
# Intransitive verbs are either for living things or for things, never both, so that after "because it" the
# verb tells which noun the pronoun refers to (see `_annotate_pronoun`).
assert all(subj in ("ap", "t") for *_, subj in INTRANSITIVE.values())
COPULA = {("past", "sg"): "was", ("past", "pl"): "were", ("pres", "sg"): "is", ("pres", "pl"): "are"}

GENERAL_ADJECTIVES = ("big", "small", "old", "little", "black", "white", "brown", "red")
# Predicate adjectives by class: living things and things have disjoint sets, so after "because it was"
# the adjective reveals which noun the pronoun refers to. The two lists have equal length so that
# position i of one has a fixed counterpart in the other (the wrong answer of a `referent` decision).
ANIMATE_ADJECTIVES = ("hungry", "tired", "happy", "sad", "sleepy", "scared")
THING_ADJECTIVES = ("broken", "heavy", "wet", "empty", "shiny", "clean")
PREDICATE_ADJECTIVES: dict[str, tuple[str, ...]] = {
    "animal": ANIMATE_ADJECTIVES, "person": ANIMATE_ADJECTIVES, "thing": THING_ADJECTIVES}
# (word, weight): "the" dominates so that number has to be read off the noun most of the time
DETERMINERS = {"sg": (("the", 4.0), ("this", 1.0), ("one", 0.5)),
               "pl": (("the", 4.0), ("these", 1.0), ("some", 1.0), ("two", 0.5), ("many", 0.5))}
MODIFIER_PREPOSITIONS = ("near", "behind", "under", "beside", "with")
LOCATIVE_PREPOSITIONS = ("in", "near", "behind", "under", "beside")
PRONOUN = {"sg": "it", "pl": "they"}
POSSESSIVE = {"sg": "its", "pl": "their"}

TEMPLATES = ("simple", "coordination", "pronoun", "possessive", "aside")
DECISION_KINDS = ("verb", "rc_verb", "pronoun_verb", "referent", "referent_verb", "possessive", "bracket")
BRACKETS = {"(": ")", "[": "]"}  # two kinds, so that a closing bracket has to match its opening one
PRONOUN_VERB_WEIGHT = 2.0  # "because it rolled ." relative to "because it was wet ." (weight 1)


def _other(number: str) -> str:
    return "pl" if number == "sg" else "sg"


def _classes(codes: str) -> list[str]:
    return [_CLASS_CODE[c] for c in codes]


NOUN_LEMMA: dict[str, str] = {}
NOUN_INFO: dict[str, tuple[str, str]] = {}  # form -> (number, class)
for _cls, _nouns in NOUNS.items():
    for _sg, _pl in _nouns.items():
        NOUN_LEMMA[_sg] = NOUN_LEMMA[_pl] = _sg
        NOUN_INFO[_sg], NOUN_INFO[_pl] = ("sg", _cls), ("pl", _cls)

VERB_LEMMA: dict[str, str] = {w: "be" for w in COPULA.values()}
for _lemma, _forms in (*TRANSITIVE.items(), *INTRANSITIVE.items()):
    for _w in _forms[:3]:
        assert VERB_LEMMA.get(_w, _lemma) == _lemma, f"verb form {_w} is shared by two lemmas"
        assert _forms[:3].count(_w) == 1, f"verb form {_w} is ambiguous between tenses"
        VERB_LEMMA[_w] = _lemma

# the other-number form of every agreeing word (present tense verbs, copula, pronouns, possessives)
FLIP: dict[str, str] = {"was": "were", "were": "was", "is": "are", "are": "is",
                        "it": "they", "they": "it", "its": "their", "their": "its"}
for _forms in (*TRANSITIVE.values(), *INTRANSITIVE.values()):
    FLIP[_forms[1]], FLIP[_forms[2]] = _forms[2], _forms[1]


def _verb_form(forms: Sequence[str], tense: str, number: str) -> str:
    if tense == "past":
        return forms[0]
    return forms[1] if number == "sg" else forms[2]


# class -> the intransitive verbs (lemmas) it can be the subject of; disjoint for living things and things
CLASS_INTRANSITIVES: dict[str, tuple[str, ...]] = {
    cls: tuple(lemma for lemma, (*_, subj) in INTRANSITIVE.items() if code in subj)
    for code, cls in _CLASS_CODE.items()}


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
