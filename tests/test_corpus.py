"""Tests for the synthetic training corpus: its grammar, recogniser, split and evaluation cases."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slm.train import corpus

# the word-level tokenizer the rest of the project uses: lowercase, words and punctuation marks
WORD_PATTERN = re.compile(r"[a-z0-9']+|[^\sa-z0-9]")


def toks(text: str) -> list[str]:
    return text.split()


@pytest.fixture(scope="module")
def train() -> list[corpus.Sentence]:
    return corpus.generate_sentences(3000, "train", seed=1)


@pytest.fixture(scope="module")
def valid() -> list[corpus.Sentence]:
    return corpus.generate_sentences(3000, "valid", seed=1)


# --- vocabulary -----------------------------------------------------------------------------------


def test_vocabulary_layout_and_size() -> None:
    vocab = corpus.vocabulary()
    assert vocab[:5] == ["<pad>", "<start>", "<unk>", ".", ","]
    assert vocab == list(corpus.VOCAB)
    assert len(set(vocab)) == len(vocab)
    assert 150 <= len(vocab) <= 300
    for word in vocab[3:]:
        assert WORD_PATTERN.findall(word) == [word], word  # the tokenizer gives every token back whole
        assert word == word.lower()


def test_encode_uses_vocab_ids() -> None:
    assert corpus.encode(["<pad>", "the", "zebra"]) == [0, corpus.TOKEN_ID["the"], corpus.TOKEN_ID["<unk>"]]


# --- generation -----------------------------------------------------------------------------------


def test_generation_is_deterministic() -> None:
    a = corpus.generate_sentences(200, "train", seed=7)
    b = corpus.generate_sentences(200, "train", seed=7)
    c = corpus.generate_sentences(200, "train", seed=8)
    assert [s.tokens for s in a] == [s.tokens for s in b]
    assert a == b  # annotations too
    assert [s.tokens for s in a] != [s.tokens for s in c]
    assert corpus.stream("valid", 500, seed=3) == corpus.stream("valid", 500, seed=3)
    assert corpus.agreement_cases("valid", 50, seed=3) == corpus.agreement_cases("valid", 50, seed=3)


def test_every_generated_sentence_parses(train: list[corpus.Sentence], valid: list[corpus.Sentence]) -> None:
    vocab = set(corpus.VOCAB)
    for sent in train + valid:
        assert sent.tokens[-1] == "." and "." not in sent.tokens[:-1]
        assert set(sent.tokens) <= vocab
        assert corpus.parses(sent.tokens), corpus.to_text(sent.tokens)
        assert WORD_PATTERN.findall(corpus.to_text(sent.tokens)) == sent.tokens


def test_all_templates_and_decision_kinds_occur(train: list[corpus.Sentence]) -> None:
    templates = Counter(s.template for s in train)
    assert set(templates) == set(corpus.TEMPLATES)
    assert min(templates.values()) > 0.1 * len(train)
    kinds = Counter(d.kind for s in train for d in s.decisions)
    assert set(kinds) == set(corpus.DECISION_KINDS)
    attractors = [d for s in train for d in s.decisions if d.attractor_index is not None]
    assert len(attractors) > 100


def test_variety() -> None:
    sentences = corpus.generate_sentences(5000, "train", seed=0)
    distinct = len({tuple(s.tokens) for s in sentences})
    assert distinct >= 0.9 * len(sentences)
    assert sum(len(s.tokens) for s in sentences) / len(sentences) < 16  # fits a 32–64 token context


def test_template_filter() -> None:
    sentences = corpus.generate_sentences(100, "valid", seed=0, templates=("pronoun",))
    assert {s.template for s in sentences} == {"pronoun"}
    with pytest.raises(ValueError):
        corpus.generate_sentences(1, "train", templates=("limerick",))
    with pytest.raises(ValueError):
        corpus.generate_sentences(1, "test")  # type: ignore[arg-type]


# --- annotations ----------------------------------------------------------------------------------


def test_pronoun_annotations(train: list[corpus.Sentence]) -> None:
    pronoun_sentences = [s for s in train if s.template == "pronoun"]
    assert pronoun_sentences
    for s in pronoun_sentences:
        assert s.pronoun_index is not None and s.referent_index is not None and s.other_index is not None
        assert s.tokens[s.pronoun_index] == s.pronoun in ("it", "they")
        assert s.wrong_pronoun == {"it": "they", "they": "it"}[s.pronoun]
        number = "sg" if s.pronoun == "it" else "pl"
        assert corpus.NOUN_INFO[s.tokens[s.referent_index]][0] == number
        assert corpus.NOUN_INFO[s.tokens[s.other_index]][0] != number
        assert s.subject_index in (s.referent_index, s.other_index)
        after = s.tokens[s.pronoun_index + 1]  # the copula, or an intransitive verb agreeing with the pronoun
        assert after in ("was", "were", "is", "are") or corpus.VERB_LEMMA.get(after) in corpus.INTRANSITIVE
        # the noun tokens of the sentence are exactly the two candidates
        nouns = [i for i, t in enumerate(s.tokens) if t in corpus.NOUN_INFO]
        assert sorted(nouns) == sorted([s.referent_index, s.other_index])
    for s in train:
        if s.template != "pronoun":
            assert s.pronoun_index is None and s.referent_index is None


def test_decisions_are_forced(train: list[corpus.Sentence]) -> None:
    """At every decision, the correct token continues a valid prefix and the wrong one does not, and
    flipping it in the full sentence makes a non-parse."""
    for s in train[:1500]:
        for d in s.decisions:
            assert s.tokens[d.index] == d.correct
            assert d.wrong != d.correct
            prefix = s.tokens[:d.index]
            assert corpus.is_valid_prefix(prefix + [d.correct])
            assert not corpus.is_valid_prefix(prefix + [d.wrong]), (corpus.to_text(s.tokens), d)
            flipped = list(s.tokens)
            flipped[d.index] = d.wrong
            assert not corpus.parses(flipped)
            assert d.cue_index < d.index
            if d.kind in ("verb", "rc_verb", "possessive"):
                assert s.tokens[d.cue_index] in corpus.NOUN_INFO
            if d.attractor_index is not None:
                cue_number = corpus.NOUN_INFO[s.tokens[d.cue_index]][0]
                assert corpus.NOUN_INFO[s.tokens[d.attractor_index]][0] != cue_number
                assert d.cue_index < d.attractor_index < d.index


def test_agreement_cases() -> None:
    cases = corpus.agreement_cases("valid", 400, seed=2)
    assert len(cases) == 400
    assert {c.kind for c in cases} == set(corpus.DECISION_KINDS)
    for c in cases:
        assert c.prefix[0] == "<start>"
        assert c.sentence.tokens[: len(c.prefix) - 1] == c.prefix[1:]
        assert corpus.is_valid_prefix(c.prefix + [c.correct])
        assert not corpus.is_valid_prefix(c.prefix + [c.wrong])
        if c.kind == "pronoun_verb":
            assert c.prefix[c.cue_index] in ("it", "they") and c.prefix[-1] == c.prefix[c.cue_index]
        if c.kind in ("referent", "referent_verb"):
            assert c.cue_index - 1 == c.sentence.referent_index
        if c.kind == "referent_verb":  # decided right after the pronoun
            assert c.prefix[-1] in ("it", "they") and len(c.prefix) - 1 == c.sentence.pronoun_index + 1
            assert corpus.VERB_LEMMA[c.correct] in corpus.INTRANSITIVE
            assert corpus.VERB_LEMMA[c.wrong] in corpus.INTRANSITIVE
    only = corpus.agreement_cases("train", 50, seed=2, kinds=["verb"], with_start=False)
    assert {c.kind for c in only} == {"verb"}
    assert all(c.prefix[c.cue_index] in corpus.NOUN_INFO for c in only)
    with pytest.raises(ValueError):
        corpus.agreement_cases("train", 1, kinds=["gender"])


def test_the_verb_after_a_pronoun_depends_on_the_referents_class(train: list[corpus.Sentence]) -> None:
    """In "... because it rolled ." every intransitive verb of the other noun's class (same form) after the
    pronoun is a non-parse when the two nouns differ in class, so the referent decides the next word."""
    animate, things = set(corpus.CLASS_INTRANSITIVES["animal"]), set(corpus.CLASS_INTRANSITIVES["thing"])
    assert animate and things and not animate & things
    assert corpus.CLASS_INTRANSITIVES["person"] == corpus.CLASS_INTRANSITIVES["animal"]
    verb_sentences = 0
    for s in [s for s in train if s.template == "pronoun"][:300]:
        assert s.pronoun_index is not None and s.referent_index is not None and s.other_index is not None
        word = s.tokens[s.pronoun_index + 1]
        if word in ("was", "were", "is", "are"):
            continue
        verb_sentences += 1
        lemma = corpus.VERB_LEMMA[word]
        ref_cls = corpus.NOUN_INFO[s.tokens[s.referent_index]][1]
        other_cls = corpus.NOUN_INFO[s.tokens[s.other_index]][1]
        assert lemma in corpus.CLASS_INTRANSITIVES[ref_cls]
        form = corpus.INTRANSITIVE[lemma][:3].index(word)
        prefix = s.tokens[: s.pronoun_index + 1]
        kinds = [d.kind for d in s.decisions if d.index == s.pronoun_index + 1]
        for other_lemma in corpus.CLASS_INTRANSITIVES[other_cls]:
            other_word = corpus.INTRANSITIVE[other_lemma][form]
            decided = corpus.is_valid_prefix(prefix + [other_word])
            assert decided == (ref_cls == other_cls), corpus.to_text(s.tokens)
        assert ("referent_verb" in kinds) == (ref_cls != other_cls)
        assert ("pronoun_verb" in kinds) == (word != corpus.INTRANSITIVE[lemma][0])  # present tense agrees
    # weighted above the copula sentences, which cannot make the pronoun position depend on the referent
    assert verb_sentences > 0.5 * 300


# --- split ----------------------------------------------------------------------------------------


def test_held_out_pairs_shape() -> None:
    held = corpus.held_out_pairs()
    assert held == corpus.held_out_pairs()  # fixed, whatever the sampling seed
    verbs = {v for _, v in held}
    assert verbs == {"be", *corpus.TRANSITIVE, *corpus.INTRANSITIVE}
    # every subject noun keeps most of its verbs for training
    for noun in corpus.NOUN_LEMMA.values():
        assert sum(n == noun for n, _ in held) <= 10


def test_split_by_held_out_noun_verb_pairs(train: list[corpus.Sentence],
                                           valid: list[corpus.Sentence]) -> None:
    held = corpus.held_out_pairs()
    for s in train:
        assert s.pairs and not any(p in held for p in s.pairs), s.tokens
    for s in valid:
        assert s.pairs and all(p in held for p in s.pairs), s.tokens
    seen_in_valid = {p for s in valid for p in s.pairs}
    assert len(seen_in_valid) >= 0.9 * len(held)
    # an independent check on the surface: "<det> <noun> <copula>" never has a held-out (noun, be) in train
    for s in train:
        if s.tokens[2] in ("was", "were", "is", "are") and s.tokens[1] in corpus.NOUN_LEMMA:
            assert (corpus.NOUN_LEMMA[s.tokens[1]], "be") not in held


def test_split_mix_is_the_same() -> None:
    a = Counter(s.template for s in corpus.generate_sentences(2000, "train", seed=4))
    b = Counter(s.template for s in corpus.generate_sentences(2000, "valid", seed=4))
    for t in corpus.TEMPLATES:
        assert abs(a[t] - b[t]) < 150


# --- streams --------------------------------------------------------------------------------------


def test_stream_and_documents() -> None:
    tokens = corpus.stream("train", 3000, seed=5)
    assert len(tokens) == 3000
    assert tokens[0] == "<start>"
    assert corpus.is_valid_prefix(tokens)
    last_stop = max(i for i, t in enumerate(tokens) if t == ".")
    assert corpus.parses(tokens[: last_stop + 1])
    docs = corpus.documents("valid", 20, seed=5, sentences_per_doc=(3, 3))
    for doc in docs:
        assert doc[0] == "<start>" and doc.count("<start>") == 1 and doc.count(".") == 3
        assert corpus.parses(doc)


# --- the recogniser -------------------------------------------------------------------------------

GRAMMATICAL = [
    "the cat chased the dogs because it was hungry .",
    "the cat chased the dogs because they were hungry .",
    "the dogs near the house were tired .",
    "the bird is small and the cats are happy .",
    "the dog near the cats was tired .",
    "the dogs near the cat were tired .",
    "the dog that chases the cats is hungry .",
    "the dogs that chased the cat were sad .",
    "the dog lost its bone .",
    "the dogs near the cat lost their old bone .",
    "the mice sleep in the barn , but the children are sad .",
    "the ball struck the dogs because it was heavy .",
    "the dog carried the balls , because they were wet .",
    "the cat chased the balls because they rolled .",
    "the cats chased the ball because they slept .",
    "the cats chase the ball because it rolls .",
    "the dog pushes the cups because it runs .",
    "the ball struck the dogs , because it fell .",
    "the balls bump the cow because it sings .",
    "these men pushed the boy .",
    "one girl feeds two cows .",
    "the cups fell .",
    "<start> the cat was hungry . the dogs ran . <start> the men are happy .",
    "the dog ( near the barn [ the old hat ] ) was hungry .",  # asides, nested to depth 2
    "the dogs [ some cats ] were hungry .",
    "the dog ( the cat [ in the barn ] near the hill ) slept .",
    "cat dog ran cat dog ran .",  # a list: a run of distinct words, then the same run again
    "<start> hungry cups under broke were it hungry cups under broke were it . the cat slept .",
]

UNGRAMMATICAL = [
    "the cat were hungry .",
    "the cats was hungry .",
    "the dog near the cats were tired .",  # agreement with the attractor, not the head
    "the dogs near the cat was tired .",
    "the dogs chases the cat .",
    "the dog chase the cat .",
    "the dog that chase the cats is hungry .",
    "these dog was hungry .",
    "one dogs ran .",
    "the dog lost their bone .",
    "the dogs lost its bone .",
    "the cup was hungry .",  # things are not hungry
    "the ball slept .",
    "the cat rolled .",  # intransitive verbs are for living things or for things, not both
    "the dog fell .",
    "the cat chased the balls because they slept .",  # the balls do not sleep
    "the cat chased the balls because it rolled .",  # "it" is the cat, which does not roll
    "the cats chase the ball because it roll .",  # the verb agrees with the pronoun
    "the cats chase the ball because it rolled .",  # one tense per sentence
    "the cat chased the balls because they rolled hungry .",
    "the cat chased the dog because it slept .",  # same number: ambiguous
    "the cat chased the dog because it was hungry .",  # same number: the pronoun would be ambiguous
    "the cat chased the dogs because they was hungry .",
    "the cat chased the dogs because they were broken .",  # the dogs are not broken
    "the cat chased the balls because it was heavy .",  # the cat is not heavy
    "the cat chased the dogs because it is hungry .",  # one tense per sentence
    "the cats slept and the dog is happy .",
    "the boy chased the dogs because it was hungry .",  # "it" cannot refer to a person
    "cat the chased dogs .",
    "the cat sleeps the dog .",
    "the cat saw .",
    "the cat is .",
    "the cat was hungry",  # no full stop
    "the cat was hungry . .",
    "the cat was very hungry .",  # unknown word
    "the cat <start> was hungry .",
    "the cat was hungry . <pad>",
    "",
    "the dog ( near the barn ] was hungry .",  # a closing bracket must match its opening one
    "the dog ( near the barn [ the hat ( the cup ) ] ) was hungry .",  # depth 3
    "the dog ( near the barn was hungry .",
    "the dogs ( the cat ) was hungry .",  # the verb agrees with the subject across the aside
    "cat cat ran cat cat ran .",  # the run's words are distinct
    "cat ran cat ran .",  # at least three words
    "cat dog ran cat ran dog .",
    "the cat ran the cat ran .",  # no determiner in a list: the first word tells a list from a sentence
]


@pytest.mark.parametrize("text", GRAMMATICAL)
def test_grammatical_sentences_parse(text: str) -> None:
    assert corpus.parses(toks(text))
    assert corpus.is_valid_prefix(toks(text))


@pytest.mark.parametrize("text", UNGRAMMATICAL)
def test_ungrammatical_sentences_do_not_parse(text: str) -> None:
    assert not corpus.parses(toks(text))


def test_prefixes() -> None:
    assert corpus.is_valid_prefix([])
    assert corpus.is_valid_prefix(["<start>"])
    assert corpus.is_valid_prefix(toks("the cat was hungry . the dogs near the"))
    assert corpus.is_valid_prefix(toks("the cat chased the dogs because"))
    assert not corpus.is_valid_prefix(toks("the cat was hungry . the dogs near the was"))
    assert not corpus.is_valid_prefix(toks("the cat were hungry . the"))  # a bad complete sentence
    assert not corpus.is_valid_prefix(toks("the cat <start>"))
    assert not corpus.parses(toks("the cat was hungry . the dogs"))  # trailing fragment


def test_parse_report() -> None:
    report = corpus.parse_report(toks("<start> the cat was hungry . the cat were hungry . the dogs near"))
    assert report == corpus.ParseReport(sentences=2, grammatical=1, fragment_ok=True)
    assert corpus.parse_report(toks("the dogs was")).fragment_ok is False


def test_every_prefix_of_a_stream_is_valid() -> None:
    tokens = corpus.stream("valid", 200, seed=9)
    for k in range(len(tokens) + 1):
        assert corpus.is_valid_prefix(tokens[:k])


# --- properties -----------------------------------------------------------------------------------

WORDS = st.sampled_from(corpus.VOCAB[1:])


@settings(max_examples=300, deadline=None)
@given(st.lists(WORDS, max_size=12))
def test_valid_prefixes_are_prefix_closed(tokens: list[str]) -> None:
    if corpus.is_valid_prefix(tokens):
        assert all(corpus.is_valid_prefix(tokens[:k]) for k in range(len(tokens)))
    if corpus.parses(tokens):
        assert corpus.is_valid_prefix(tokens)


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), split=st.sampled_from(["train", "valid"]), data=st.data())
def test_flipping_any_agreeing_word_breaks_the_sentence(seed: int, split: str, data: st.DataObject) -> None:
    (sent,) = corpus.generate_sentences(1, split, seed=seed)  # type: ignore[arg-type]
    assert corpus.parses(sent.tokens)
    positions = [i for i, t in enumerate(sent.tokens) if t in ("was", "were", "is", "are", "its", "their")]
    if positions:
        i = data.draw(st.sampled_from(positions))
        flipped = list(sent.tokens)
        flipped[i] = corpus.FLIP[flipped[i]]
        assert not corpus.parses(flipped)


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), data=st.data())
def test_dropping_a_word_breaks_a_pronoun_sentence(seed: int, data: st.DataObject) -> None:
    (sent,) = corpus.generate_sentences(1, "train", seed=seed, templates=["pronoun"])
    i = data.draw(st.integers(0, len(sent.tokens) - 2))
    if sent.tokens[i] == ",":  # ", because" and "because" are both allowed
        return
    if i > 0 and sent.tokens[i - 1] in ("the", "this", "these", "one", "some", "two", "many") and \
            sent.tokens[i] in corpus.GENERAL_ADJECTIVES:  # attributive adjectives are optional
        return
    assert not corpus.parses(sent.tokens[:i] + sent.tokens[i + 1:])


# --- brackets, lists and repeats ------------------------------------------------------------------


def test_bracket_decisions_point_at_their_opening_bracket(train: list[corpus.Sentence]) -> None:
    asides = [s for s in train if s.template == "aside"]
    assert len(asides) > 100
    depth2 = 0
    for s in asides:
        brackets = [d for d in s.decisions if d.kind == "bracket"]
        assert brackets and {s.tokens[d.index] for d in brackets} <= set(corpus.BRACKETS.values())
        for d in brackets:
            assert corpus.BRACKETS[s.tokens[d.cue_index]] == d.correct
            between = s.tokens[d.cue_index + 1:d.index]
            opens = sum(t in corpus.BRACKETS for t in between)
            assert opens == sum(t in corpus.BRACKETS.values() for t in between)  # the brackets inside are closed
            depth2 += opens > 0
        assert s.tokens[0] in ("the", "this", "one", "these", "some", "two", "many")
    assert depth2 > 30


def test_documents_hold_lists_and_repeats() -> None:
    docs = corpus.documents("train", 300, seed=3)
    items = []
    for doc in docs:
        assert corpus.parses(doc)
        sentences, fragment = corpus.split_sentences(doc)
        assert not fragment
        items.append(sentences)
    lists = [s for doc in items for s in doc if s[0] not in ("the", "this", "one", "these", "some", "two", "many")]
    assert 0.1 < len(lists) / sum(map(len, items)) < 0.3
    for s in lists:
        k = (len(s) - 1) // 2
        assert s[:k] == s[k:2 * k] and len(set(s[:k])) == k and corpus.LIST_LENGTHS[0] <= k <= corpus.LIST_LENGTHS[1]
    repeats = sum(len(doc) - len({tuple(s) for s in doc}) for doc in items)
    assert repeats > 30
    plain = corpus.documents("train", 50, seed=3, list_fraction=0, repeat_fraction=0)
    assert all(s[0] == "the" or s[0] in ("this", "one", "these", "some", "two", "many")
               for doc in plain for s in corpus.split_sentences(doc)[0])


def test_a_list_prefix_is_valid_only_while_it_copies() -> None:
    assert corpus.is_valid_prefix(toks("cat dog ran"))
    assert corpus.is_valid_prefix(toks("cat dog ran cat dog"))
    assert not corpus.is_valid_prefix(toks("cat dog ran cat dog ran cat"))  # after the copy comes "."
    assert corpus.is_valid_prefix(toks("cat dog ran hungry cat dog"))  # R may be 4 words: still copying
    assert not corpus.is_valid_prefix(toks("cat dog ran cat ran"))
