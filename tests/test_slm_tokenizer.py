"""slm.WordTokenizer: lowercase, words and punctuation marks, unknown words never raise."""

from __future__ import annotations

import pytest

import slm

VOCAB = ["<unk>", "the", "cat", "sat", ".", ",", "it's", "!", "on", "mat", "?"]


def test_split_lowercases_and_separates_punctuation():
    tok = slm.WordTokenizer(VOCAB)
    assert tok.split("The CAT sat, on the mat.") == ["the", "cat", "sat", ",", "on", "the", "mat", "."]
    assert tok.split("It's  here!?") == ["it's", "here", "!", "?"]
    assert tok.split("  ") == []


def test_encode_known_words():
    tok = slm.WordTokenizer(VOCAB)
    enc = tok.encode("The cat sat on the mat.")
    assert enc.ids == [1, 2, 3, 8, 1, 9, 4] and enc.unknown == []
    assert isinstance(enc, slm.Encoding)


def test_unknown_words_become_unk_and_are_reported():
    tok = slm.WordTokenizer(VOCAB)
    enc = tok.encode("The dog sat on the sofa!")
    assert enc.ids == [1, 0, 3, 8, 1, 0, 7]
    assert enc.unknown == ["dog", "sofa"]


def test_without_unk_unknown_words_are_dropped_not_raised():
    tok = slm.WordTokenizer(["the", "cat"])
    enc = tok.encode("the zebra cat")
    assert enc.ids == [0, 1] and enc.unknown == ["zebra"]


def test_decode_is_readable():
    tok = slm.WordTokenizer(VOCAB)
    assert tok.decode([1, 2, 3, 5, 8, 1, 9, 4]) == "the cat sat, on the mat."
    assert tok.decode([2, 7, 10]) == "cat!?"
    assert tok.decode([]) == ""
    text = "the cat sat, on the mat."
    assert tok.decode(tok.encode(text).ids) == text


def test_vocabulary_checks_and_length():
    assert len(slm.WordTokenizer(VOCAB)) == len(VOCAB)
    with pytest.raises(ValueError, match="duplicate"):
        slm.WordTokenizer(["a", "b", "a"])


def test_tokenizer_for_model_meta():
    cfg = slm.Config(n_vocab=len(VOCAB), n_ctx=4, n_model=4, n_heads=1)
    model = slm.Model(cfg, slm.init_params(cfg), meta={"vocab": VOCAB})
    assert slm.tokenizer_for(model).encode("the mat").ids == [1, 9]
    with pytest.raises(ValueError, match="vocab"):
        slm.tokenizer_for(slm.Model(cfg, slm.init_params(cfg)))
