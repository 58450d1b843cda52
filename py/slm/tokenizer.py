"""A word-level tokenizer: lowercase, words and punctuation marks as tokens."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

# A word is a run of letters, digits and apostrophes; any other visible character is a token of its own.
TOKEN_PATTERN = re.compile(r"[^\W_]+(?:'[^\W_]+)*|[^\w\s]|_")
UNKNOWN = "<unk>"
NO_SPACE_BEFORE = frozenset(".,;:!?)'")


class Encoding(NamedTuple):
    ids: list[int]
    unknown: list[str]  # the words not in the vocabulary, in order of appearance


class WordTokenizer:
    """Maps text to ids of a fixed vocabulary. Unknown words never raise: they become `<unk>` (or, for a
    vocabulary without `<unk>`, are left out) and are reported in `Encoding.unknown`."""

    def __init__(self, vocab: Sequence[str]) -> None:
        vocab = list(vocab)
        if len(set(vocab)) != len(vocab):
            raise ValueError("WordTokenizer: the vocabulary has duplicate entries")
        self.vocab = vocab
        self.index = {word: i for i, word in enumerate(vocab)}
        self.unk_id = self.index.get(UNKNOWN)

    def __len__(self) -> int:
        return len(self.vocab)

    def split(self, text: str) -> list[str]:
        """The text's tokens as strings, before the vocabulary look-up."""
        return TOKEN_PATTERN.findall(text.lower())

    def encode(self, text: str) -> Encoding:
        ids, unknown = [], []
        for word in self.split(text):
            i = self.index.get(word)
            if i is None:
                unknown.append(word)
                i = self.unk_id
            if i is not None:
                ids.append(i)
        return Encoding(ids, unknown)

    def decode(self, ids: Sequence[int]) -> str:
        """Readable text: words separated by spaces, punctuation attached to the word before it."""
        text = ""
        for i in ids:
            word = self.vocab[int(i)]
            if text and word not in NO_SPACE_BEFORE:
                text += " "
            text += word
        return text
