"""Every view on models of real models' shapes (random weights, big_models.py): GPT-2 small's 12 layers × 12 heads
and SmolLM2-135M's 30 × 9. Each view builds and summarises first (a layer × head chart, a bar per layer's attention
and FFN, a row per block on the map), drilling down draws one layer's or one head's detail, and no view builds a
figure per head. Figures are counted, never timed (bench/view_bench.py times them)."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import numpy as np
import panel as pn
import pytest
from big_models import GPT2_VOCAB, big_model, prompt, words

import slm
from playground.app import VIEW_CLASSES, Playground
from playground.state import PlaygroundState
from playground.views.common import many_heads

SHAPES = {"gpt2-small": (12, 12), "smollm2-135m": (30, 9)}


def figures(app: Playground) -> int:
    """Bokeh figures on the page: every built view's."""
    return len(app.content.select(pn.pane.Bokeh))


def open_app(shape: str, n_vocab: int = 512, view: str = "map", tokens: int = 31) -> Playground:
    app = Playground(PlaygroundState(model_name="lesson", view=view))
    app.state.add_model(big_model(shape, n_vocab), "loaded")
    app.state.prompt = prompt(tokens)
    return app


# The loop of the thread that builds the fixture's pages: never run, as the main thread's is without a browser test.
IDLE_LOOP = asyncio.new_event_loop()


def every_view_built(shape: str) -> Playground:
    asyncio.set_event_loop(IDLE_LOOP)  # the views schedule tasks on it (they never run: no loop runs here)
    app = open_app(shape, tokens=15)  # the patching grid runs whole here (no event loop): ~T × layers passes
    app.settings["patching"].param.update(patch_position=2, patch_token=words(512)[40], good_token="aa",
                                          bad_token="ab")
    for view in VIEW_CLASSES:
        app.state.view = view
    app.state.view = "map"
    app.shape = SHAPES[shape]
    return app


@pytest.fixture(scope="module", params=list(SHAPES))
def app(request):
    """One page per shape with every view built (the tests below read it, and change only the selection). Built in
    a thread of its own: after a browser test this thread has Playwright's event loop running, and with a loop the
    Patching view runs its grid in the background instead of at once."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(every_view_built, request.param).result()


def test_every_view_builds_without_a_figure_per_head(app):
    n_layers, n_heads = app.shape
    assert many_heads(n_layers, n_heads) and app.state.model.cfg.n_layers == n_layers
    assert all(app.views.built(view) for view in VIEW_CLASSES)
    # The Attention view: the layer × head summary, one layer's heads in one figure, the selected head large.
    assert len(app.views["attention"].panel.select(pn.pane.Bokeh)) == 3
    assert figures(app) < 25, figures(app)  # the old grid alone was n_layers × n_heads + 1 (145 and 271)


def test_the_attention_summary_is_each_heads_measure(app):
    attention, trace = app.views["attention"], app.state.trace
    n_layers, n_heads = app.shape
    attention.measure.value = "previous"
    data = attention.summary_source.data
    assert len(data["value"]) == n_layers * n_heads
    for k in (0, n_heads + 3, n_layers * n_heads - 1):  # by hand: the mean weight on the previous token
        i, j = data["layer"][k], data["head"][k]
        pattern = trace.layers[i].attention[j]
        expected = np.mean([pattern[q, q - 1] for q in range(1, pattern.shape[0])])
        assert data["value"][k] == pytest.approx(expected, abs=1e-6)
    attention.measure.value = "first"
    k = 5
    pattern = trace.layers[data["layer"][k]].attention[data["head"][k]]
    assert attention.summary_source.data["value"][k] == pytest.approx(np.mean(pattern[1:, 0]), abs=1e-6)
    assert "every head's measure" in attention.numbers.tables
    assert len(attention.numbers.tables["every head's measure"][1]) == n_layers  # a row per layer


def test_a_summary_click_draws_that_layer_and_head(app):
    state, attention = app.state, app.views["attention"]
    state.view = "attention"
    before = figures(app)
    n_layers, n_heads = app.shape
    layer, head = n_layers - 2, n_heads - 1
    attention._on_summary_tap(SimpleNamespace(x=head + 0.3, y=layer - 0.2))
    assert (state.layer, state.head) == (layer, head)
    grid = attention.layer_grid.cells.data
    n = len(state.tokens.ids)
    for j in (0, head):  # the layer's heads, each in its block: its allowed cells hold its weights
        mine = grid["head"] == j
        expected = state.trace.layers[layer].attention[j]
        np.testing.assert_allclose(grid["weight"][mine], expected[grid["query"][mine], grid["key"][mine]])
    assert sum(grid["head"] == 0) == n * (n + 1) // 2  # causal: the lower triangle
    large = attention.large.cells.data
    np.testing.assert_allclose(large["weight"], state.trace.layers[layer].attention[head][large["query"],
                                                                                        large["key"]])
    assert f"Layer {layer}: its {n_heads} heads" in attention.layers_title.object
    # a click on head 2's block of the layer figure selects it
    columns, _ = attention.layer_grid.layout(n_heads)
    step = n + attention.layer_grid.gap(n)
    attention._on_layer_tap(SimpleNamespace(x=(2 % columns) * step + 1, y=(2 // columns) * step + 1))
    assert (state.layer, state.head) == (layer, 2)
    attention.head_select.value = (1, 3)  # the keyboard's way: the head list
    assert (state.layer, state.head) == (1, 3)
    assert (attention.layer_grid.cells.data["head"] == 3).any() and figures(app) == before  # refilled, not rebuilt
    state.view = "map"


def test_heads_view_shows_one_role_at_a_time(app):
    from slm import roles

    state, heads = app.state, app.views["heads"]
    state.view = "heads"
    n_layers, n_heads = app.shape
    assert heads.role.visible
    heads.role.value = "previous_token"
    data = heads.prompt_source.data
    assert len(data["x"]) == n_layers * n_heads and set(data["role"]) == {"previous_token"}
    expected = roles.role_scores(state.trace, state.tokens.labels)["previous_token"].scores
    for k in (0, 17, len(data["x"]) - 1):
        assert data["score"][k] == pytest.approx(expected[data["layer"][k], data["x"][k]], abs=1e-9)
    heads._on_tap(SimpleNamespace(x=3, y=n_layers - 1))  # a cell of the single block: that layer's head 3
    assert (state.layer, state.head) == (n_layers - 1, 3)
    assert heads.probe_fig.y_range.start == n_layers - 0.5  # one block of n_layers rows
    state.view = "map"


def test_residual_bars_are_per_layer_and_add_up(app):
    state, residual = app.state, app.views["residual"]
    state.view = "residual"
    n_layers, _ = app.shape
    model, trace, position = state.model, state.trace, state.selected_position
    target = int(np.argmax(trace.probs[trace.logit_row(position)]))
    parts = slm.attribution.direct_logit_attribution(model, trace, position, target)
    data = residual.attr_source.data
    names = list(data["name"])
    assert f"L{n_layers - 1} attention" in names and f"L{n_layers - 1} FFN" in names
    assert not any(".H" in name for name in names) and len(names) <= 2 * n_layers + 3
    assert sum(data["value"]) == pytest.approx(sum(parts.values()), abs=1e-4)
    layer_heads = sum(v for k, v in parts.items() if k.startswith("L3.H") or k == "L3.attn.b_o")
    assert data["value"][names.index("L3 attention")] == pytest.approx(layer_heads, abs=1e-5)
    assert len(residual.numbers.tables["direct contributions"][1]) == len(parts)  # the table: every head
    assert len(residual.lens_source.data["stage"]) == n_layers + 1  # x and each block's output
    assert list(residual.lens_fig.y_range.factors) == list(residual.lens_source.data["stage"])[::-1]  # x on top
    state.view = "map"


def test_the_map_draws_a_row_per_block_and_opens_the_strongest_head(app):
    state, view = app.state, app.views["map"]
    n_layers, n_heads = app.shape
    data = view.source.data
    parts = list(data["part"])
    assert parts.count("attn") == n_layers and parts.count("ffn") == n_layers and "head" not in parts
    trace, position = state.trace, state.selected_position
    target = int(np.argmax(trace.probs[trace.logit_row(position)]))
    logit = trace.logits[trace.logit_row(position), target]
    values = [v for v, part in zip(data["value"], parts, strict=True) if part != "unembed"]
    assert sum(values) == pytest.approx(logit, abs=1e-4)
    k = parts.index("attn")  # layer 0's attention: named after its strongest head
    contributions = slm.attribution.direct_logit_attribution(state.model, trace, position, target)
    strongest = max((f"L0.H{j}" for j in range(n_heads)), key=lambda name: abs(contributions[name]))
    assert data["name"][k] == strongest
    view.open_detail(data["name"][k])
    assert state.view == "attention" and f"L{state.layer}.H{state.head}" == strongest
    assert len(view.part.options) > n_layers * n_heads  # the keyboard's list still names every head
    state.view = "map"


def test_patching_grid_and_its_size(app):
    state, patching = app.state, app.views["patching"]
    state.view = "patching"
    n_layers, n_heads = app.shape
    result = patching.run.result
    assert patching.run.job.finished  # no event loop here: the view finishes the grid at once
    assert result.heads.shape == (n_layers, n_heads) and result.residual.shape == (n_layers, len(state.tokens.ids))
    assert len(patching.head_source.data["x"]) == n_layers * n_heads
    assert patching.head_fig.height <= 700
    state.view = "map"


def test_next_token_over_gpt2s_vocabulary():
    app = open_app("gpt2-small", GPT2_VOCAB, view="next", tokens=20)
    state = app.state
    full = state.model.forward(np.asarray(state.tokens.ids))  # every row, every logit: the reference
    probs = full.probs[-1]
    top = np.argsort(-probs, kind="stable")[:10]
    data = app.views["next"].source.data
    assert list(data["token"]) == [state.vocab[i] for i in top[::-1]]
    np.testing.assert_allclose(data["prob"], probs[top[::-1]], rtol=1e-4, atol=1e-7)
    assert figures(app) == 1


def test_the_shipped_size_keeps_every_head_on_screen():
    """Below the threshold the grid of every head stays (16 heads: the shipped model's 2 × 8)."""
    vocab = words(64)
    cfg = slm.Config(n_vocab=len(vocab), n_ctx=32, n_model=32, n_heads=8, n_layers=2)
    model = slm.Model(cfg, slm.init_params(cfg, seed=0), {"name": "small", "vocab": vocab}, slm.WordTokenizer(vocab))
    app = Playground(PlaygroundState(model_name="lesson", view="attention"))
    app.state.add_model(model, "loaded")
    attention = app.views["attention"]
    assert not attention.summary.visible and len(attention.small) == 16
    assert not app.views["attention"].many
    app.state.view = "heads"
    assert not app.views["heads"].role.visible and len(app.views["heads"].prompt_source.data["x"]) == 5 * 16
