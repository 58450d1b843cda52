"""The corpus's words and their features: nouns, verbs, adjectives, agreement forms (see corpus.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

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
