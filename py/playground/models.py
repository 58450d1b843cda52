"""Which model the playground shows, and how a prompt becomes the token ids it reads.

The shipped model is loaded once per process (it does not change while the app runs); the lesson model is
re-created from its seed whenever an architecture toggle changes, which is cheap (a few hundred numbers).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, NamedTuple

import slm
from slm.bpe import BPETokenizer

START = "<start>"
END = "<end>"
UNKNOWN = "<unk>"

# The lesson's architecture switches and their allowed values (the first is the lesson's own choice).
LESSON_CHOICES: dict[str, tuple[Any, ...]] = {
    "norm_placement": ("pre", "post"),
    "norm": ("layer", "rms"),
    "positions": ("sinusoidal", "learned", "rope", "none"),
    "causal": (True, False),
    "n_heads": (2, 1, 4),
    "n_kv_heads": (2, 1, 4),
    "activation": ("relu", "gelu", "swiglu"),
}


@lru_cache(maxsize=1)
def _shipped() -> slm.Model:
    return slm.load_pretrained()


def shipped_available() -> bool:
    """True once the trained weights exist (someone may still be training them)."""
    try:
        _shipped()
    except (FileNotFoundError, ValueError):
        _shipped.cache_clear()  # look again next time: the file may land while the app runs
        return False
    return True


def default_model_name() -> str:
    return "shipped" if shipped_available() else "lesson"


# Models a learner trained in the lab or loaded from files, by their selector name ("trained: …", "loaded: …").
# One registry per process: in the browser that is one page; the selector of every session lists them.
REGISTRY: dict[str, slm.Model] = {}


def register(model: slm.Model, kind: str) -> str:
    """Add a model under "<kind>: <its meta name>" (a number appended if taken by another model); its name."""
    base = f"{kind}: {model.meta.get('name') or 'model'}"
    name, n = base, 2
    while name in REGISTRY and REGISTRY[name] is not model:
        name, n = f"{base} ({n})", n + 1
    REGISTRY[name] = model
    return name


def model_names() -> list[str]:
    return ["shipped", "lesson", *REGISTRY]


def load_model(name: str, **lesson_options: Any) -> slm.Model:
    """The shipped model, a registered one, or the lesson model with the given architecture toggles.

    Raises ValueError (with a readable message) for an impossible lesson architecture, e.g. RoPE with a head
    size of 1."""
    if name == "shipped":
        return _shipped()
    if name in REGISTRY:
        return REGISTRY[name]
    options = dict(lesson_options)
    # n_kv_heads must divide n_heads: a larger request means "one key/value head per query head".
    if "n_heads" in options and options.get("n_kv_heads", 0) > options["n_heads"]:
        options["n_kv_heads"] = options["n_heads"]
    return slm.CausalLanguageModel(**options)


class Vocabulary:
    """Any slm tokenizer as the views read one: `vocab` (each id's text as shown on the page), `index` (shown
    text -> id, for tokens a learner types), encode/decode, and `bos` (the id a prompt starts with, if any).

    The shipped and lesson models' word tokenizers show their words as they are. A character or BPE tokenizer
    shows each token readably (a BPE token's leading-space mark as a space, a byte token as its character)."""

    def __init__(self, tokenizer: Any, n_vocab: int | None = None) -> None:
        self.tokenizer = tokenizer
        self.words = isinstance(tokenizer, slm.WordTokenizer)
        self.vocab = list(tokenizer.vocab) if self.words else [tokenizer.token_text(i)
                                                                for i in range(len(tokenizer.vocab))]
        # A checkpoint may have more embedding rows than its tokenizer has tokens (nanoGPT pads GPT-2's 50,257
        # to 50,304): those ids have no text, but the model can still predict them.
        self.n_text = len(self.vocab)
        self.vocab += [f"<unused {i}>" for i in range(self.n_text, n_vocab or 0)]
        self.index: dict[str, int] = {}
        for i, text in enumerate(self.vocab):
            self.index.setdefault(text, i)  # two ids may look alike (e.g. a byte and a merged token): first wins
        self.unk_id = self.index.get(UNKNOWN) if self.words else None
        bos = getattr(tokenizer, "bos_id", None)
        self.bos = self.index.get(START) if self.words else bos

    def __len__(self) -> int:
        return len(self.vocab)

    def split(self, text: str) -> list[str]:
        return self.tokenizer.split(text) if self.words else [self.vocab[i] for i in self.tokenizer.encode(text).ids]

    def encode(self, text: str) -> slm.Encoding:
        return self.tokenizer.encode(text)

    def decode(self, ids: Any) -> str:
        return self.tokenizer.decode([int(i) for i in ids if int(i) < self.n_text])  # an unused id has no text

    def lookup(self, text: str, spaced: bool = False) -> int | None:
        """The id of a token a learner typed: its shown text, or else the text as one token of the tokenizer
        (so "cat" finds a BPE model's " cat"). `spaced`: the word stands where a BPE model's words carry their
        space (mid-sentence in GPT-2), so " Mary" is taken before a token "Mary" when both exist."""
        if spaced and not text.startswith(" ") and " " + text in self.index:
            return self.index[" " + text]
        if text in self.index:
            return self.index[text]
        # without the tokens a tokenizer adds around a text (a Llama's <s>): they are not part of the word
        plain = {"add_special_tokens": False} if isinstance(self.tokenizer, BPETokenizer) else {}
        for candidate in (" " + text, text) if spaced else (text, " " + text):
            ids = self.tokenizer.encode(candidate, **plain).ids
            if len(ids) == 1:
                return ids[0]
        return None


def vocabulary_for(model: slm.Model) -> Vocabulary:
    if model.tokenizer is None and isinstance(model.meta.get("vocab"), list):
        model.tokenizer = slm.WordTokenizer(model.meta["vocab"])  # its vocabulary was set after it was built
    if model.tokenizer is None:
        raise ValueError("this model was saved without a tokenizer, so the playground cannot read a prompt with it")
    cached = getattr(model, "_playground_vocabulary", None)
    if cached is None:
        cached = model._playground_vocabulary = Vocabulary(model.tokenizer, model.cfg.n_vocab)  # 32k: build once
    return cached


class PromptTokens(NamedTuple):
    """A prompt as the model reads it."""

    ids: list[int]  # token ids, <start> first (unless truncated), at most n_ctx of them
    labels: list[str]  # what each position shows: the vocabulary word, or <unk>
    unknown: list[bool]  # per position: the word was not in the vocabulary
    unknown_words: list[str]  # the original unknown words, in order (for a note)
    dropped_unknown: bool  # the vocabulary has no <unk>, so unknown words were left out
    truncated: int  # how many tokens at the start did not fit the context and were left out


def encode_prompt(tokenizer: Vocabulary | slm.WordTokenizer, text: str, n_ctx: int) -> PromptTokens:
    """<start> followed by the prompt's words; never raises for any text.

    A prompt longer than the context keeps its LAST n_ctx tokens: the text right before where generation
    continues (slm.generate slides its window the same way, so <start> is the first token to go)."""
    if isinstance(tokenizer, Vocabulary) and not tokenizer.words:
        return _encode_other(tokenizer, text, n_ctx)
    start = tokenizer.index.get(START, 0)
    ids, labels, unknown, unknown_words = [start], [tokenizer.vocab[start]], [False], []
    dropped = False
    for word in tokenizer.split(text or ""):
        i = tokenizer.index.get(word)
        if i is None:
            unknown_words.append(word)
            if tokenizer.unk_id is None:
                dropped = True
                continue
            ids.append(tokenizer.unk_id)
            labels.append(UNKNOWN)
            unknown.append(True)
        else:
            ids.append(i)
            labels.append(word)
            unknown.append(False)
    truncated = max(0, len(ids) - n_ctx)
    if truncated:
        ids, labels, unknown = ids[-n_ctx:], labels[-n_ctx:], unknown[-n_ctx:]
    return PromptTokens(ids, labels, unknown, unknown_words, dropped, truncated)


def _encode_other(vocabulary: Vocabulary, text: str, n_ctx: int) -> PromptTokens:
    """A character or BPE model's prompt: its tokenizer's ids, after the start-of-text token if it has one."""
    encoding = vocabulary.encode(text or "")
    ids = ([] if vocabulary.bos is None else [vocabulary.bos]) + list(encoding.ids)
    if not ids:  # an empty prompt of a model without a start token: begin from its first token
        ids = [0]
    truncated = max(0, len(ids) - n_ctx)
    ids = ids[-n_ctx:]
    labels = [vocabulary.vocab[i] for i in ids]
    return PromptTokens(ids, labels, [False] * len(ids), list(encoding.unknown), bool(encoding.unknown), truncated)
