"""The Block view and its settings without a browser: the architecture switches, the change-one-token
comparison, the tables."""

from __future__ import annotations

import numpy as np
import pytest

import slm
from playground import analysis
from playground.app import Playground
from playground.state import PlaygroundState
from playground.views.block import BlockSettings, lesson_tables


@pytest.fixture
def state() -> PlaygroundState:
    return PlaygroundState(model_name="lesson", prompt="the cat was tired")


def test_architecture_toggles_rebuild_and_impossible_ones_explain(state):
    lesson = BlockSettings(state)
    lesson.n_heads = 4
    assert state.model.cfg.n_heads == 4
    lesson.positions = "rope"  # head size 1 cannot be rotated in pairs
    assert "cannot be built" in state.model_note and state.model.cfg.positions != "rope"
    lesson.n_heads = 1
    lesson.n_kv_heads = 4  # more key/value heads than heads: clamped to one per head
    assert state.model.cfg.n_kv_heads == 1


def test_causal_mask_keeps_earlier_rows_bit_identical(state):
    lesson = BlockSettings(state, compare=True, compare_position=2, compare_token="dog")
    _, other, position = lesson.comparison()
    assert not analysis.changed_rows(state.trace.layers[0].y[:position], other.layers[0].y[:position]).any()
    assert analysis.changed_rows(state.trace.layers[0].y[position:], other.layers[0].y[position:]).all()
    lesson.causal = False
    _, other, position = lesson.comparison()
    assert analysis.changed_rows(state.trace.layers[0].y[:position], other.layers[0].y[:position]).any()


def test_lesson_tables_have_four_decimals_and_seven_steps(state):
    tables = lesson_tables(state.trace, state.tokens.labels, model=state.model)
    assert len(tables) == 7
    assert f"{state.trace.x[1, 0]:.4f}" in tables[0]
    assert "FFN hidden (ReLU)" in tables[5] and "ReLU(norm(h) W_in + b_in)" in tables[5]


def test_a_parallel_block_has_no_h_and_its_ffn_reads_x():
    """GPT-NeoX's block: attention and FFN both read x, so there is no h between them to show."""
    model = slm.CausalLanguageModel(positions="rope", parallel_residual=True, rotary_dim=2)
    trace = model.respond_to(np.array([0, 1, 2]))
    tables = lesson_tables(trace, ["<start>", "the", "cat"], model=model)
    assert len(tables) == 6 and not any("5 · h" in t for t in tables)
    assert "ReLU(norm(x) W_in + b_in)" in tables[4] and "x + attention + FFN" in tables[5]
    assert [name for name, _ in analysis.coordinate_steps(trace, 2)] == ["x", "+attention", "+FFN", "y"]


@pytest.mark.parametrize(("activation", "label"), [
    ("relu", "ReLU(norm(h) W_in + b_in)"), ("gelu", "GELU(norm(h) W_in + b_in)"),
    ("swiglu", "SiLU(gate) ⊙ (norm(h) W_in + b_in)")])
def test_activation_toggle_rebuilds_the_ffn_and_its_label(state, activation, label):
    app = Playground(state)
    lesson = app.settings["block"]
    state.view = "block"  # a view redraws while it is shown
    lesson.activation = activation
    assert state.model.cfg.activation == activation
    assert ("blocks.0.ffn.w_gate" in state.model.params) == (activation == "swiglu")
    tables = app.views["block"].tables.object
    assert label in tables
    assert ("6 · FFN gate" in tables) == (activation == "swiglu")
    if activation == "swiglu":  # the gate table holds silu(norm(h) W_gate), and hidden = gate * (norm(h) W_in + b)
        layer = state.trace.layers[0]
        gate = slm.layers.silu(layer.ffn_in @ state.model.params["blocks.0.ffn.w_gate"])
        np.testing.assert_allclose(layer.ff_act, gate * layer.ff_pre)
        assert f"{gate[1, 0]:.4f}" in tables
    lesson.norm_placement = "post"
    assert label.replace("norm(h)", "h") in app.views["block"].tables.object


def test_lesson_shows_q_k_v_split_by_head_and_gqa_sharing(state):
    app = Playground(state)
    settings = app.settings["block"]
    state.view = "block"  # a view redraws while it is shown
    lesson = app.views["block"]
    tables = lesson.tables.object
    # two heads of size 2: q's columns 0-1 are head 0, columns 2-3 head 1 (a reshape of the (T, d) table)
    assert "<th colspan='2' class='pg-group'>head 0</th><th colspan='2' class='pg-group'>head 1</th>" in tables
    layer = state.trace.layers[0]
    assert f"{layer.q[1, 2, 0]:.4f}" in tables  # head 1's first column at position 2
    assert "head 0 → columns 0–1, head 1 → columns 2–3" in lesson.heads_note.object
    settings.n_kv_heads = 1  # multi-query: one k/v head for both query heads
    assert "<th colspan='2' class='pg-group'>heads 0–1</th>" in lesson.tables.object
    assert "Multi-query" in lesson.heads_note.object
    settings.param.update(n_heads=4, n_kv_heads=2)
    assert "GQA" in lesson.heads_note.object and "0–1, 2–3 share one each" in lesson.heads_note.object
    assert lesson.tables.object.count("class='pg-group'>head ") >= 4
