"""Which model the playground shows, and how a prompt becomes the token ids it reads.

The shipped model is loaded once per process (it does not change while the app runs); the lesson model is
re-created from its seed whenever an architecture toggle changes, which is cheap (a few hundred numbers).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, NamedTuple

import slm

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


def load_model(name: str, **lesson_options: Any) -> slm.Model:
    """The shipped model, or the lesson model with the given architecture toggles.

    Raises ValueError (with a readable message) for an impossible lesson architecture, e.g. RoPE with a head
    size of 1."""
    if name == "shipped":
        return _shipped()
    options = dict(lesson_options)
    # n_kv_heads must divide n_heads: a larger request means "one key/value head per query head".
    if "n_heads" in options and options.get("n_kv_heads", 0) > options["n_heads"]:
        options["n_kv_heads"] = options["n_heads"]
    return slm.CausalLanguageModel(**options)


class PromptTokens(NamedTuple):
    """A prompt as the model reads it."""

    ids: list[int]  # token ids, <start> first (unless truncated), at most n_ctx of them
    labels: list[str]  # what each position shows: the vocabulary word, or <unk>
    unknown: list[bool]  # per position: the word was not in the vocabulary
    unknown_words: list[str]  # the original unknown words, in order (for a note)
    dropped_unknown: bool  # the vocabulary has no <unk>, so unknown words were left out
    truncated: int  # how many tokens at the start did not fit the context and were left out


def encode_prompt(tokenizer: slm.WordTokenizer, text: str, n_ctx: int) -> PromptTokens:
    """<start> followed by the prompt's words; never raises for any text.

    A prompt longer than the context keeps its LAST n_ctx tokens: the text right before where generation
    continues (slm.generate slides its window the same way, so <start> is the first token to go)."""
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
