"""The training lab's tasks: batches, tokenizers, measures, settings limits and every bad-input message."""

from __future__ import annotations

import numpy as np
import pytest

from slm.tokenizer import CharTokenizer, WordTokenizer
from slm.train.tasks import (
    MAX_WORD_VOCAB,
    PRESETS,
    REPEAT_WORDS,
    RepeatTask,
    Settings,
    decode_text,
    make_task,
    text_tokenizer,
)

PROSE = "The cat sat on the mat. The dog sat on the log. A bird sang in the tree!\n" * 30


def test_repeat_batches_repeat_a_run_of_distinct_words_of_varying_length():
    task = make_task("repeat")
    s = PRESETS["repeat"]
    seqs, mask = task._sequences(np.random.default_rng(0), 50)
    assert seqs.shape == mask.shape == (50, s.ctx)
    periods = []
    for row, rows in zip(seqs, mask, strict=True):
        n = int(np.flatnonzero(rows)[0])  # the first row whose next word repeats: R's length
        periods.append(n)
        assert np.array_equal(row[n:], row[:-n])  # R, R, R's start
        assert len(set(row[:n])) == n  # R's words are distinct
        assert rows.sum() == s.ctx - 1 - n and not rows[-1]
    assert min(periods) >= s.ctx // 4 and max(periods) <= s.ctx // 2 and len(set(periods)) > 3
    assert seqs.max() < len(REPEAT_WORDS) and task.n_vocab == len(REPEAT_WORDS)
    batch = task.batch(np.random.default_rng(0))
    assert batch.shape == (s.batch, s.ctx)
    # the sampler is the generator: the same seed draws the same batch, another seed another
    assert np.array_equal(batch, task.batch(np.random.default_rng(0)))
    assert not np.array_equal(batch, task.batch(np.random.default_rng(1)))
    assert np.array_equal(task.probe[: s.ctx // 2], task.probe[s.ctx // 2:])
    # the first version: R always half the context
    fixed = RepeatTask(s, fixed_length=True)
    seqs, mask = fixed._sequences(np.random.default_rng(0), 20)
    assert np.array_equal(seqs[:, : s.ctx // 2], seqs[:, s.ctx // 2:])
    assert (mask.sum(axis=1) == s.ctx // 2 - 1).all()


def test_repeat_measure_is_one_for_a_model_that_copies():
    """A fake model whose logits put the next token on top scores 1; a blank one ~chance."""
    task = make_task("repeat", {"ctx": 12})

    class Copier:
        def __init__(self, right: bool) -> None:
            self.right = right

        def forward(self, ids):
            logits = np.zeros((*ids.shape, task.n_vocab))
            if self.right:
                nxt = np.roll(ids, -1, axis=1)
                np.put_along_axis(logits, nxt[..., None], 5.0, axis=-1)
            return type("T", (), {"logits": logits})

    loss, accuracy = task.evaluate(Copier(True))
    assert accuracy == 1.0
    _, blank = task.evaluate(Copier(False))
    assert blank < 0.2  # argmax of equal logits is token 0: right only when the word is token 0


def test_repeat_context_limits():
    with pytest.raises(ValueError, match="at least 8"):
        make_task("repeat", {"ctx": 6})
    with pytest.raises(ValueError, match="at most 32 distinct words"):
        make_task("repeat", {"ctx": 66})


def test_text_tokenizer_words_up_to_2000_distinct_else_characters():
    few = text_tokenizer(PROSE)
    assert isinstance(few, WordTokenizer) and "cat" in few.vocab and "." in few.vocab
    many_words = " ".join(f"w{i}x" for i in range(MAX_WORD_VOCAB + 1))
    assert isinstance(text_tokenizer(many_words), CharTokenizer)
    exactly = " ".join(f"w{i}x" for i in range(MAX_WORD_VOCAB))
    assert isinstance(text_tokenizer(exactly), WordTokenizer)
    task = make_task("text", {"ctx": 16}, text=many_words)
    assert task.kind == "char" and task.describe()["tokens"] == "char"
    assert make_task("text", {"ctx": 16}, text=PROSE).kind == "word"


def test_text_task_splits_and_measures_against_unigram():
    task = make_task("text", {"ctx": 16, "batch": 4}, text=PROSE)
    assert task.train_ids.size + task.valid_ids.size == task.n_tokens
    batch = task.batch(np.random.default_rng(3))
    assert batch.shape == (4, 16)
    assert task.unigram_loss > 0
    # the byte form decodes to the same task
    same = make_task("text", {"ctx": 16, "batch": 4}, text=PROSE.encode("utf-8"))
    assert np.array_equal(same.validation(), task.validation())


@pytest.mark.parametrize(("data", "message"), [
    (b"\x00\x01\x02binary", "not text .it contains NUL bytes"),
    ("text with a \x00 inside", "not text .it contains NUL characters"),
    (b"caf\xe9 latin-1", "not UTF-8 text"),
    (b"a" * 1_000_001, "at most 1 MB"),
    ("a" * 1_000_001, "at most 1 MB"),
    ("   \n ", "the text is empty"),
    (12, "must be a string or bytes"),
])
def test_bad_text_messages(data, message):
    with pytest.raises(ValueError, match=message):
        decode_text(data)
    with pytest.raises(ValueError, match=message):
        make_task("text", {"ctx": 8}, text=data)


def test_text_shorter_than_the_context_plus_one():
    with pytest.raises(ValueError, match=r"too short: 9 words, and the context needs at least 17"):
        make_task("text", {"ctx": 16}, text="one two three four five six seven eight nine")
    make_task("text", {"ctx": 8}, text="one two three four five six seven eight nine")  # 9 = 8 + 1 is enough
    with pytest.raises(ValueError, match="needs a text"):
        make_task("text")


@pytest.mark.parametrize(("changes", "message"), [
    ({"layers": 0}, "layers must be between 1 and 4"),
    ({"heads": 9}, "heads per layer must be between"),
    ({"lr": 0.0}, "learning rate must be between"),
    ({"lr": float("nan")}, "learning rate must be a number"),
    ({"steps": 2.5}, "steps must be a whole number"),
    ({"d_model": 30, "heads": 4}, "multiple of the number of heads"),
    ({"d_model": 12, "heads": 4}, "even number of dimensions"),
    ({"layers": 4, "d_model": 128, "ctx": 128, "batch": 64}, "more work a step than the lab allows"),
])
def test_settings_limits(changes, message):
    with pytest.raises(ValueError, match=message):
        make_task("text", changes, text=PROSE * 10)


def test_too_many_parameters():
    """2,000 distinct words make a 512,000-parameter embedding and unembedding at d = 128."""
    words = " ".join(f"w{i}x" for i in range(MAX_WORD_VOCAB))
    with pytest.raises(ValueError, match="too large for the lab: 1,3[0-9,]+ parameters, at most 1,000,000"):
        make_task("text", {"layers": 4, "d_model": 128, "ctx": 16, "batch": 1}, text=words)
    make_task("text", {"layers": 2, "d_model": 128, "ctx": 16, "batch": 1}, text=words)


def test_unknown_task_and_setting():
    with pytest.raises(ValueError, match="unknown task 'poems'"):
        make_task("poems")
    with pytest.raises(ValueError, match="unknown settings"):
        make_task("repeat", {"width": 3})


def test_query_keys_round_trip():
    s = Settings(layers=1, heads=2, d_model=16, ctx=12, steps=99, batch=8, lr=0.0015, seed=4)
    query = s.to_query()
    assert set(query) == {"train_layers", "train_heads", "train_d_model", "train_ctx", "train_steps",
                          "train_batch", "train_lr", "train_seed"}
    assert Settings.from_query(query) == s
    assert Settings.from_query({"train_heads": ["8"]}, PRESETS["repeat"]).heads == 8
    with pytest.raises(ValueError, match="train_lr='fast' is not a number"):
        Settings.from_query({"train_lr": "fast"})


def test_grammar_task_uses_the_corpus():
    task = make_task("grammar", {"batch": 4})
    from slm.train import corpus

    assert task.tokenizer.vocab == list(corpus.VOCAB)
    batch = task.batch(np.random.default_rng(0))
    assert batch.shape == (4, PRESETS["grammar"].ctx)
    words = task.probe_words()
    assert words[0] == corpus.START and words[1:9] == words[9:17]  # <start> + R + R
