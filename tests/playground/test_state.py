"""The playground's state and analysis logic, without a browser."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import slm
from playground import analysis
from playground.models import encode_prompt
from playground.state import PlaygroundState
from playground.views.generate import stream_html
from playground.views.lesson import lesson_tables
from playground.views.tokens import notes_html

def run(coroutine) -> None:
    """asyncio.run in a fresh thread: the browser tests' Playwright keeps an event loop in the main thread."""
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, coroutine).result()


XSS = ["<img src=x onerror=alert(1)>", "<script>alert(1)</script>", "\"'><svg onload=alert(1)>"]


@pytest.fixture
def state() -> PlaygroundState:
    return PlaygroundState(model_name="lesson", prompt="the cat was tired")


def test_falls_back_to_the_lesson_model_until_the_shipped_one_exists(monkeypatch):
    def missing():
        raise FileNotFoundError("not yet")

    from playground import models

    monkeypatch.setattr(slm, "load_pretrained", missing)
    models._shipped.cache_clear()
    state = PlaygroundState(model_name="shipped")
    models._shipped.cache_clear()
    assert state.model_name == "lesson"
    assert "not available yet" in state.model_note


def test_one_forward_pass_per_prompt_change(state, monkeypatch):
    calls = []
    forward = state.model.forward
    monkeypatch.setattr(state.model, "forward", lambda *a, **k: calls.append(1) or forward(*a, **k))
    seen = []
    state.param.watch(lambda e: seen.append(e.name), ["trace"])
    state.prompt = "the dog lay"
    assert len(calls) == 1 and seen == ["trace"]
    state.position, state.layer, state.head = 1, 0, 1  # selection changes never re-run the model
    assert len(calls) == 1


def test_prompt_encoding_marks_unknowns_and_truncates():
    tok = slm.WordTokenizer(["<start>", "<unk>", "the", "cat"])
    enc = encode_prompt(tok, "the zebra cat 🙂", n_ctx=16)
    assert enc.labels == ["<start>", "the", "<unk>", "cat", "<unk>"]
    assert enc.unknown == [False, False, True, False, True] and enc.unknown_words == ["zebra", "🙂"]
    long = encode_prompt(tok, "the cat " * 20, n_ctx=8)
    assert len(long.ids) == 8 and long.truncated == 33
    assert encode_prompt(tok, "", 8).ids == [0]


def test_lesson_vocabulary_without_unk_leaves_unknown_words_out(state):
    state.prompt = "the zebra was"
    assert state.tokens.labels == ["<start>", "the", "was"] and state.tokens.dropped_unknown
    assert "zebra" in notes_html(state)


@pytest.mark.parametrize("payload", XSS)
def test_user_text_is_always_escaped(state, payload):
    state.prompt = payload
    html = notes_html(state) + stream_html(state.prompt, [("the", 0.5)], False)
    assert "<img" not in html and "<script" not in html and "<svg" not in html
    assert "&lt;" in html


def test_empty_prompt_generates_from_start(state):
    state.prompt = ""
    assert state.tokens.ids == [0]
    run(state.generate())
    assert len(state.generated) == state.max_new_tokens


def test_generation_matches_slm_generate_and_runs_once_at_a_time(state):
    state.param.update(max_new_tokens=5, temperature=0.7, seed=4)

    async def twice():
        await asyncio.gather(state.generate(), state.generate())

    run(twice())
    expected = [int(s.token) for s in slm.generate(state.model, state.tokens.ids, 5, 0.7, seed=4)]
    assert [state.tokenizer.index[t] for t, _ in state.generated] == expected  # not 10 tokens: one run only
    assert not state.generating


def test_stop_mid_generation(state):
    state.max_new_tokens = 64

    async def run_and_stop():
        task = asyncio.create_task(state.generate())
        while len(state.generated) < 2:
            await asyncio.sleep(0.01)
        state.stop()
        await task

    run(run_and_stop())
    assert 2 <= len(state.generated) < 64 and not state.generating


def test_url_values_are_coerced_and_clamped(state):
    state.apply_url_values({"embed": "1", "temperature": "99", "top_k": "-5", "view": "Attention",
                            "model_name": "nonsense", "max_new_tokens": "1e9", "head": "1", "prompt": 123})
    assert state.embed is True and state.temperature == 2.0 and state.top_k == 0 and state.view == "attention"
    assert state.model_name == "lesson" and state.max_new_tokens == 64 and state.head == 1 and state.prompt == "123"


def test_architecture_toggles_rebuild_and_impossible_ones_explain(state):
    state.n_heads = 4
    assert state.model.cfg.n_heads == 4
    state.positions = "rope"  # head size 1 cannot be rotated in pairs
    assert "cannot be built" in state.model_note and state.model.cfg.positions != "rope"
    state.n_heads = 1
    state.n_kv_heads = 4  # more key/value heads than heads: clamped to one per head
    assert state.model.cfg.n_kv_heads == 1


def test_causal_mask_keeps_earlier_rows_bit_identical(state):
    state.param.update(compare=True, compare_position=2, compare_token="dog")
    _, other, position = state.comparison()
    assert not analysis.changed_rows(state.trace.layers[0].y[:position], other.layers[0].y[:position]).any()
    assert analysis.changed_rows(state.trace.layers[0].y[position:], other.layers[0].y[position:]).all()
    state.causal = False
    _, other, position = state.comparison()
    assert analysis.changed_rows(state.trace.layers[0].y[:position], other.layers[0].y[:position]).any()


def test_ablation_zeroes_exactly_one_head(state):
    model = analysis.ablate_heads(state.model, [(0, 1)])
    trace = model.forward(np.asarray(state.tokens.ids))
    assert np.all(trace.layers[0].head_out[1] == 0)
    np.testing.assert_array_equal(trace.layers[0].head_out[0], state.trace.layers[0].head_out[0])
    state.ablate = "L0.H1"
    np.testing.assert_allclose(state.ablated_probs(), trace.probs)


def test_attribution_sums_to_the_logit_and_is_none_for_post_norm(state):
    result = analysis.attribution(state.model, state.trace, 3)
    assert result.values.sum() == pytest.approx(state.trace.logits[3, result.target])
    state.norm_placement = "post"
    assert analysis.attribution(state.model, state.trace, 3) is None


def test_attention_columns_split_masked_cells(state):
    allowed, hidden = analysis.attention_columns(state.trace, 0, 0, state.tokens.labels)
    n = len(state.tokens.ids)
    assert len(allowed["weight"]) == n * (n + 1) // 2 and len(hidden["weight"]) == n * (n - 1) // 2
    assert np.all(hidden["key"] > hidden["query"])
    assert allowed["query_token"][-1] == "tired"


def test_lesson_tables_have_four_decimals_and_six_steps(state):
    tables = lesson_tables(state.trace, state.tokens.labels)
    assert len(tables) == 6
    assert f"{state.trace.x[1, 0]:.4f}" in tables[0]


@settings(max_examples=40, deadline=None)
@given(st.text(max_size=80))
def test_any_text_gives_a_trace(text):
    state = _STATE
    state.prompt = text
    assert state.trace.probs.shape == (len(state.tokens.ids), len(state.vocab))
    assert 0 <= state.selected_position < len(state.tokens.ids)


_STATE = PlaygroundState(model_name="lesson")


def test_app_builds_and_views_follow_the_state():
    from playground.app import Playground, create_app

    assert create_app() is not None
    app = Playground(PlaygroundState(model_name="lesson", prompt="the cat"))
    app.state.prompt = "the cat was tired"
    attention = app.views["attention"]
    assert set(attention.large.cells.data["query_token"]) == {"<start>", "the", "cat", "was", "tired"}
    app.state.param.update(embed=True, view="residual")
    assert app.views["residual"].panel in app.root.objects and app.tabs not in app.root.objects


def test_views_follow_a_two_layer_model_of_the_shipped_shape():
    from playground.app import Playground

    vocab = ["<pad>", "<start>", "<unk>", ".", "the", "cat", "dogs", "chased", "they", "were", "hungry", "because"]
    cfg = slm.Config(n_vocab=len(vocab), n_ctx=32, n_model=16, n_heads=4, n_layers=2)
    model = slm.Model.init(cfg, seed=1)
    model.meta.update(vocab=vocab, pronoun_head=[1, 2])
    app = Playground(PlaygroundState(model_name="lesson"))
    app.state.use_model(model)
    app.state.prompt = "the cat chased the dogs because they were hungry zebra ."
    attention = app.views["attention"]
    assert len(attention.small) == 8 and "layer 1 head 2" in attention.hint.object
    assert "<unk>" in app.state.tokens.labels
    assert not app.views["lesson"].body.visible and app.views["lesson"].not_lesson.visible
    names = app.views["residual"].attr_source.data["name"]
    assert "L1.H3" in names and "L1.ffn" in names
    assert app.views["residual"].coord_pane.visible is False  # d = 16: too wide for per-coordinate bars
