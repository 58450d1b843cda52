"""Tokenizers: text to token ids and back.

Every tokenizer has `vocab` (the token strings), `encode(text) -> Encoding`, `decode(ids) -> str`,
`token_text(id)` (the token as a reader should see it) and `to_json()`, a dict with a "kind" key that
`from_json` turns back into the tokenizer. Saved models keep that dict as their `__tokenizer__` entry.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

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

    def token_text(self, i: int) -> str:
        return self.vocab[int(i)]

    def to_json(self) -> dict[str, Any]:
        return {"kind": "word", "vocab": list(self.vocab)}

    def decode(self, ids: Sequence[int]) -> str:
        """Readable text: words separated by spaces, punctuation attached to the word before it."""
        text = ""
        for i in ids:
            word = self.vocab[int(i)]
            if text and word not in NO_SPACE_BEFORE:
                text += " "
            text += word
        return text


class CharTokenizer:
    """One token per character of a fixed alphabet (a model trained on a text's characters). A character outside
    the alphabet is left out and reported in `Encoding.unknown`."""

    def __init__(self, vocab: Sequence[str]) -> None:
        vocab = list(vocab)
        if len(set(vocab)) != len(vocab) or any(len(c) != 1 for c in vocab):
            raise ValueError("CharTokenizer: the vocabulary must be distinct single characters")
        self.vocab = vocab
        self.index = {c: i for i, c in enumerate(vocab)}

    def __len__(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> Encoding:
        ids, unknown = [], []
        for c in text:
            i = self.index.get(c)
            if i is None:
                unknown.append(c)
            else:
                ids.append(i)
        return Encoding(ids, unknown)

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(self.vocab[int(i)] for i in ids)

    def token_text(self, i: int) -> str:
        c = self.vocab[int(i)]
        return {"\n": "\\n", "\t": "\\t", " ": "␣"}.get(c, c)  # visible whitespace

    def to_json(self) -> dict[str, Any]:
        return {"kind": "char", "vocab": list(self.vocab)}


class Tokenizer(Protocol):
    vocab: list[str]

    def encode(self, text: str) -> Encoding: ...
    def decode(self, ids: Sequence[int]) -> str: ...
    def token_text(self, i: int) -> str: ...
    def to_json(self) -> dict[str, Any]: ...


# kind -> a function building the tokenizer from its to_json() dict; other modules add their kinds here.
KINDS: dict[str, Any] = {
    "word": lambda data: WordTokenizer(data["vocab"]),
    "char": lambda data: CharTokenizer(data["vocab"]),
}


def from_json(data: Any) -> Tokenizer:
    """The tokenizer a to_json() dict describes; ValueError names what is wrong."""
    if not isinstance(data, dict) or data.get("kind") not in KINDS:
        kind = data.get("kind") if isinstance(data, dict) else type(data).__name__
        raise ValueError(f"unknown tokenizer {kind!r}: slm reads {', '.join(sorted(KINDS))}")
    try:
        return KINDS[data["kind"]](data)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"a {data['kind']} tokenizer with a missing or wrong field: {exc}") from None
