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

The code is split by job, and this module gathers it under one name (`corpus.X`, as before):
`lexicon` (words and their features), `grammar` (the rule set, the vocabulary, the held-out split),
`sentences` (the generator: sentences, documents, streams), `agreement` (forced-choice probes) and
`recognise` (the Earley recogniser).
"""

from __future__ import annotations

from .agreement import (  # noqa: F401 (re-exported)
    AgreementCase,
    agreement_cases,
)
from .grammar import (  # noqa: F401 (re-exported)
    LIST_FRACTION,
    LIST_LENGTHS,
    LIST_WORDS,
    REPEAT_FRACTION,
    RULES,
    START_SYMBOL,
    TOKEN_ID,
    VOCAB,
    Rule,
    encode,
    held_out_pairs,
    to_text,
    vocabulary,
)
from .lexicon import (  # noqa: F401 (re-exported)
    ANIMATE_ADJECTIVES,
    BRACKETS,
    CLASS_INTRANSITIVES,
    CLASSES,
    COPULA,
    DECISION_KINDS,
    DETERMINERS,
    FLIP,
    GENERAL_ADJECTIVES,
    HELD_OUT_FRACTION,
    INTRANSITIVE,
    LOCATIVE_PREPOSITIONS,
    MODIFIER_PREPOSITIONS,
    NOUN_INFO,
    NOUN_LEMMA,
    NOUNS,
    NUMBERS,
    PAD,
    PLACE,
    POSSESSIVE,
    PREDICATE_ADJECTIVES,
    PRONOUN,
    PRONOUN_VERB_WEIGHT,
    SPECIALS,
    SPLIT_SEED,
    START,
    TEMPLATES,
    TENSES,
    THING_ADJECTIVES,
    TRANSITIVE,
    UNK,
    VERB_LEMMA,
    Split,
)
from .recognise import (  # noqa: F401 (re-exported)
    ParseReport,
    is_valid_prefix,
    parse_report,
    parses,
    split_sentences,
)
from .sentences import (  # noqa: F401 (re-exported)
    Decision,
    Sentence,
    documents,
    generate_sentences,
    stream,
)

__all__ = [
    "PAD", "START", "UNK", "SPECIALS", "SPLIT_SEED", "TEMPLATES", "VOCAB", "DECISION_KINDS",
    "AgreementCase", "Decision", "ParseReport", "Sentence",
    "agreement_cases", "documents", "encode", "generate_sentences", "held_out_pairs", "is_valid_prefix",
    "parse_report", "parses", "split_sentences", "stream", "to_text", "vocabulary",
]
