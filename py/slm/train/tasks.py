"""The training lab's tasks: what a small model learns in the Train view and in `python -m slm.train --task`.

Every task has one interface (`Task`): a batch sampler drawing from a seeded numpy Generator, a fixed validation
batch, a tokenizer built for it, its own measure (higher is better), a probe prompt whose attention the lab
draws and scores with slm.roles, and a prompt for sample generations.

    repeat    sequences R + R, R a run of ctx/2 distinct random words: the induction head forms (accuracy on
              the second copy)
    grammar   the playground's synthetic grammar (slm.train.corpus): number agreement appears
    text      a learner's own text, as words (at most 2,000 distinct) or characters: loss below the unigram
              baseline

`Settings` holds what the learner sets (layers, heads, d_model, context, steps, batch, learning rate, seed);
`PRESETS` has each task's defaults and `Settings.check` the limits, with messages meant for the learner.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import roles
from ..model import Model
from ..tokenizer import CharTokenizer, WordTokenizer
from .backward import cross_entropy, next_token_targets
from .settings import (  # noqa: F401 - re-exported: the page and the CLI read them from here
    LIMITS,
    MAX_PARAMS,
    MAX_STEP_WORK,
    MAX_TEXT_BYTES,
    MAX_WORD_VOCAB,
    PRESETS,
    QUERY_KEYS,
    REPEAT_WORDS,
    TASKS,
    Limit,
    Settings,
)


def _windows(ids: np.ndarray, rng: np.random.Generator, n: int, length: int) -> np.ndarray:
    starts = rng.integers(0, ids.size - length + 1, size=n)
    return ids[starts[:, None] + np.arange(length)[None, :]]


class Task:
    """One training task. Subclasses set the attributes below and implement `batch` and `measure`."""

    name = ""
    measure_name = ""  # what `measure` reports, for the learner ("accuracy on the repeated half")
    tokenizer: Any
    probe: np.ndarray  # (T,) token ids: the attention grid and the role scores
    sample_prompt: list[int]  # ids the sample generations continue

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @property
    def n_vocab(self) -> int:
        return len(self.tokenizer.vocab)

    def batch(self, rng: np.random.Generator) -> np.ndarray:
        """(batch, ctx) token ids for one training step."""
        raise NotImplementedError

    def validation(self) -> np.ndarray:
        """The fixed (N, ctx) validation windows (the same for every run of these settings)."""
        raise NotImplementedError

    def evaluate(self, model: Model) -> tuple[float, float]:
        """(validation loss, task measure) of a model."""
        raise NotImplementedError

    def probe_words(self) -> list[str]:
        return [self.tokenizer.token_text(i) for i in self.probe]

    def role_scores(self, model: Model) -> dict[str, np.ndarray]:
        """(L, H) previous-token, induction and duplicate-token scores on the probe (NaN where the probe has no
        instance of the role)."""
        trace = model.forward(self.probe)
        ids = self.probe.tolist()
        return {role: roles.score_targets(trace, roles.role_targets(role, ids)).scores
                for role in ("previous_token", "induction", "duplicate_token")}

    def describe(self) -> dict[str, Any]:
        """The task as saved in meta["task"] (with the settings)."""
        return {"name": self.name, "measure_name": self.measure_name, **self.settings.to_dict()}


def _window_loss(model: Model, windows: np.ndarray) -> tuple[float, np.ndarray]:
    logits = model.forward(windows).logits
    targets, valid = next_token_targets(windows)
    loss, _ = cross_entropy(logits, targets, valid)
    return loss, logits


class RepeatTask(Task):
    """A run R of n distinct words out of 32, repeated to fill the context (R, R, then R's start again). n is
    drawn anew for every sequence, from ctx/4 to ctx/2. Every word after the first R is predictable, but only by
    copying: find where the current word came before and read the word after it, which is what an induction
    head does (with a previous-token head in the layer below).

    Why n varies: with one fixed n (as in the issue's first measurement, R of 12 in a context of 24) the word to
    copy is always n - 1 positions back, and a head learns that offset (RoPE makes it easy) instead of matching
    content. It scores as an induction head on R + R of that length, forms in ~250 steps, and copies nothing
    at any other length; no previous-token head forms. `fixed_length=True` gives that task, for comparison
    (docs/induction.md)."""

    name = "repeat"
    measure_name = "accuracy on the repeats"
    PROBE_SEED = 2024  # the probe and validation batch use seeds no training batch uses
    VALID_SEED = 7717
    VALID_N = 64

    def __init__(self, settings: Settings, fixed_length: bool = False) -> None:
        super().__init__(settings)
        ctx = settings.ctx
        self.longest = ctx // 2
        if self.longest > len(REPEAT_WORDS):
            raise ValueError(f"the repeat task draws at most {len(REPEAT_WORDS)} distinct words, so the context "
                             f"can be at most {2 * len(REPEAT_WORDS) + 1}, got {ctx}")
        if ctx < 8:
            raise ValueError(f"the repeat task needs a context of at least 8, got {ctx}")
        self.shortest = self.longest if fixed_length else max(2, ctx // 4)
        self.tokenizer = WordTokenizer(REPEAT_WORDS)
        probe, _ = self._sequences(np.random.default_rng(self.PROBE_SEED), 1, fixed=self.longest)
        self.probe = probe[0]  # R + R of the longest R: the clearest picture
        self.sample_prompt = self.probe[: self.longest + 1].tolist()  # R and its repeat's first word
        self._valid, self._valid_mask = self._sequences(np.random.default_rng([self.VALID_SEED, ctx]),
                                                        self.VALID_N)

    def _sequences(self, rng: np.random.Generator, n: int, fixed: int | None = None
                   ) -> tuple[np.ndarray, np.ndarray]:
        """(n, ctx) sequences and a (n, ctx) mask of the rows whose next word is a repeat."""
        ctx, vocab = self.settings.ctx, len(REPEAT_WORDS)
        fixed = fixed or (self.longest if self.shortest == self.longest else None)
        lengths = np.full(n, fixed) if fixed else rng.integers(self.shortest, self.longest + 1, size=n)
        runs = np.argsort(rng.random((n, vocab)), axis=1)  # one random key per word, sorted: n draws at once
        cols = np.arange(ctx)[None, :]
        seqs = np.take_along_axis(runs, cols % lengths[:, None], axis=1)  # R, R, R, ... cut at ctx
        # rows t >= n predict t + 1 by copying: token t came at t - n, followed by token t - n + 1
        mask = (cols >= lengths[:, None]) & (cols < ctx - 1)
        return seqs, mask

    def batch(self, rng: np.random.Generator) -> np.ndarray:
        return self._sequences(rng, self.settings.batch)[0]

    def validation(self) -> np.ndarray:
        return self._valid

    def _accuracy(self, logits: np.ndarray, seqs: np.ndarray, mask: np.ndarray) -> float:
        right = logits[:, :-1].argmax(-1) == seqs[:, 1:]
        return float(right[mask[:, :-1]].mean())

    def evaluate(self, model: Model) -> tuple[float, float]:
        loss, logits = _window_loss(model, self._valid)
        return loss, self._accuracy(logits, self._valid, self._valid_mask)

    def copying_accuracy(self, model: Model, n: int = 200, seed: int = 99) -> float:
        """Top-1 accuracy on the second copy of n fresh sequences."""
        seqs, mask = self._sequences(np.random.default_rng(seed), n)
        return self._accuracy(model.forward(seqs).logits, seqs, mask)


class GrammarTask(Task):
    """The playground's grammar corpus; the measure is number agreement on held-out decision points."""

    name = "grammar"
    measure_name = "number agreement"
    TRAIN_TOKENS = 200_000  # generated in about 0.5 s; a 1,000-step run at batch 16 x 32 reads 512,000
    VALID_TOKENS = 20_000
    VALID_N = 64
    AGREEMENT_PER_KIND = 50  # 200 decision points per measurement

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        from . import corpus  # the grammar is only imported for this task
        from .data import TokenStream

        self.corpus = corpus
        seed = settings.seed
        self.tokenizer = WordTokenizer(corpus.VOCAB)
        self.stream = TokenStream.generate("train", self.TRAIN_TOKENS, seed=seed * 2 + 1)
        valid = TokenStream.generate("valid", self.VALID_TOKENS, seed=seed * 2 + 2)
        self._valid = valid.windows(np.random.default_rng([seed, 8]), self.VALID_N, settings.ctx, 0.5)
        start = corpus.TOKEN_ID[corpus.START]
        length = max(2, min(8, (settings.ctx - 1) // 2))
        words = corpus.encode(corpus.LIST_WORDS)
        self.probe = roles.repeated_tokens(words, length, np.random.default_rng(2024), start)
        self.sample_prompt = [start, corpus.TOKEN_ID["the"]]

    def batch(self, rng: np.random.Generator) -> np.ndarray:
        return self.stream.windows(rng, self.settings.batch, self.settings.ctx, 0.5)

    def validation(self) -> np.ndarray:
        return self._valid

    def evaluate(self, model: Model) -> tuple[float, float]:
        from .evaluate import AGREEMENT_KINDS, agreement

        loss, _ = _window_loss(model, self._valid)
        return loss, agreement(model, n_per_kind=self.AGREEMENT_PER_KIND, kinds=AGREEMENT_KINDS).accuracy


def decode_text(data: str | bytes | bytearray | memoryview) -> str:
    """The learner's text, or a ValueError saying why it cannot be trained on (too large, not text)."""
    if isinstance(data, bytes | bytearray | memoryview):
        raw = bytes(data)
        if len(raw) > MAX_TEXT_BYTES:
            raise ValueError(f"the file is {len(raw) / 1e6:.1f} MB; the lab trains on at most 1 MB of text")
        if b"\x00" in raw:
            raise ValueError("this file is not text (it contains NUL bytes): open a plain .txt file")
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise ValueError(f"this file is not UTF-8 text (byte {exc.start} cannot be read): save it as "
                             "plain UTF-8 text (.txt)") from None
    elif isinstance(data, str):
        text = data
        if len(text.encode("utf-8", "surrogatepass")) > MAX_TEXT_BYTES:
            raise ValueError(f"the text is {len(text.encode('utf-8', 'surrogatepass')) / 1e6:.1f} MB; "
                             "the lab trains on at most 1 MB of text")
        if "\x00" in text:
            raise ValueError("this is not text (it contains NUL characters): paste or open plain text")
    else:
        raise ValueError(f"the text must be a string or bytes, got {type(data).__name__}")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        raise ValueError("the text is empty: paste some text or open a .txt file")
    return text


def text_tokenizer(text: str) -> WordTokenizer | CharTokenizer:
    """Words when the text has at most MAX_WORD_VOCAB distinct words, else characters."""
    words = WordTokenizer([]).split(text)
    distinct = sorted(set(words))
    if words and len(distinct) <= MAX_WORD_VOCAB:
        return WordTokenizer(distinct)
    return CharTokenizer(sorted(set(text)))


class TextTask(Task):
    """A learner's text: the last tenth validates (when it holds enough windows), the rest trains. The measure
    is how far the validation loss is below the unigram baseline: 1 - loss / unigram (0 = no better than word
    or character frequencies)."""

    name = "text"
    measure_name = "loss below the unigram baseline"
    VALID_N = 64

    def __init__(self, settings: Settings, text: str | bytes) -> None:
        super().__init__(settings)
        text = decode_text(text)
        self.tokenizer = text_tokenizer(text)
        self.kind = "word" if isinstance(self.tokenizer, WordTokenizer) else "char"
        ids = np.array(self.tokenizer.encode(text).ids, dtype=np.int64)
        unit = "words" if self.kind == "word" else "characters"
        if ids.size < settings.ctx + 1:
            raise ValueError(f"the text is too short: {ids.size} {unit}, and the context needs at least "
                             f"{settings.ctx + 1} ({settings.ctx} + 1). Add text or lower the context")
        self.n_tokens = int(ids.size)
        split = int(ids.size * 0.9)
        if ids.size - split >= settings.ctx + 1 and split >= settings.ctx + 1:
            self.train_ids, self.valid_ids = ids[:split], ids[split:]
        else:  # too short to hold out a tenth: validate on the training text (the measure then shows fitting)
            self.train_ids = self.valid_ids = ids
        self._valid = _windows(self.valid_ids, np.random.default_rng([settings.seed, 8]), self.VALID_N,
                               settings.ctx)
        counts = np.bincount(self.train_ids, minlength=self.n_vocab) + 1.0
        log_p = np.log(counts / counts.sum())
        self.unigram_loss = float(-log_p[self._valid[:, 1:]].mean())
        self.probe = ids[: settings.ctx]
        self.sample_prompt = ids[: min(8, settings.ctx // 2)].tolist()

    def batch(self, rng: np.random.Generator) -> np.ndarray:
        return _windows(self.train_ids, rng, self.settings.batch, self.settings.ctx)

    def validation(self) -> np.ndarray:
        return self._valid

    def evaluate(self, model: Model) -> tuple[float, float]:
        loss, _ = _window_loss(model, self._valid)
        return loss, 1.0 - loss / self.unigram_loss

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "tokens": self.kind, "n_tokens": self.n_tokens, "n_vocab": self.n_vocab,
                "unigram_loss": self.unigram_loss}


def make_task(name: str, settings: Settings | Mapping[str, Any] | None = None, text: str | bytes | None = None
              ) -> Task:
    """The task `name` ("repeat", "grammar" or "text" with `text`) with `settings` (missing ones from its
    preset), checked against the limits."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}: choose one of {', '.join(TASKS)}")
    if settings is None:
        settings = PRESETS[name]
    elif not isinstance(settings, Settings):
        unknown = set(settings) - set(QUERY_KEYS)
        if unknown:
            raise ValueError(f"unknown settings {sorted(unknown)}: the settings are {', '.join(QUERY_KEYS)}")
        settings = PRESETS[name].replace(**settings)
    settings.check()
    if name == "repeat":
        task: Task = RepeatTask(settings)
    elif name == "grammar":
        task = GrammarTask(settings)
    else:
        if text is None:
            raise ValueError("the text task needs a text: paste some or open a .txt file")
        task = TextTask(settings, text)
    settings.check(task.n_vocab)
    return task
