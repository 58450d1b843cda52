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
from playground.views.block import BlockSettings
from playground.views.generate import stream_html
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
    # Too long: the LAST n_ctx tokens stay (the text right before where generation continues), <start> goes first.
    long = encode_prompt(tok, "cat " + "the " * 20 + "cat", n_ctx=8)
    assert long.labels == ["the"] * 7 + ["cat"] and long.truncated == 15
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


def test_ablation_zeroes_exactly_one_head(state):
    trace = slm.interventions.run_ablated(state.model, np.asarray(state.tokens.ids), [(0, 1)])
    assert np.all(trace.layers[0].head_out[1] == 0)
    np.testing.assert_array_equal(trace.layers[0].head_out[0], state.trace.layers[0].head_out[0])
    state.ablate = "L0.H1"
    np.testing.assert_allclose(analysis.ablated_probs(state.model, state.tokens.ids, state.ablate), trace.probs)


def test_attribution_sums_to_the_logit_and_is_none_for_post_norm(state):
    result = analysis.attribution(state.model, state.trace, 3)
    assert result.values.sum() == pytest.approx(state.trace.logits[3, result.target])
    BlockSettings(state).norm_placement = "post"
    assert analysis.attribution(state.model, state.trace, 3) is None


def test_attention_columns_split_masked_cells(state):
    allowed, hidden = analysis.attention_columns(state.trace, 0, 0, state.tokens.labels)
    n = len(state.tokens.ids)
    assert len(allowed["weight"]) == n * (n + 1) // 2 and len(hidden["weight"]) == n * (n - 1) // 2
    assert np.all(hidden["key"] > hidden["query"])
    assert allowed["query_token"][-1] == "tired"


def test_truncation_note_names_what_was_left_out(state):
    state.prompt = "the cat was tired " * 5  # 20 words + <start> = 21 tokens, context 16
    assert state.tokens.truncated == 5 and len(state.tokens.ids) == 16
    assert state.tokens.labels[-1] == "tired" and "<start>" not in state.tokens.labels
    note = notes_html(state)
    assert "the first 5 token(s)" in note and "reads the last 16" in note


def test_next_token_bars_sit_on_their_labels_without_a_comparison(state):
    from playground.app import Playground

    state.view = "next"  # a view redraws while it is shown
    view = Playground(state).views["next"]
    full, ablated = view.dodges
    assert full.value == 0 and view.full_bars.glyph.height == pytest.approx(0.7) and not view.ablated_bars.visible
    state.ablate = "L0.H1"
    assert full.value > 0 > ablated.value and view.ablated_bars.visible
    assert view.full_bars.glyph.height + 2 * full.value <= 0.75  # the pair stays inside its category
    state.ablate = "none"
    assert full.value == 0 and view.full_bars.glyph.height == pytest.approx(0.7)


def test_analyse_button_is_a_button_that_says_what_it_does(state):
    from playground.app import Playground

    state.view = "generate"  # a view redraws while it is shown
    view = Playground(state).views["generate"]
    assert view.use.label == "Analyse prompt + continuation" and view.use.disabled
    assert view.use.color == "primary" and view.use.variant == "outline"
    state.generated = [("the", 0.5), ("cat", 0.25)]
    assert not view.use.disabled
    view.use.clicks += 1
    assert state.prompt == "the cat was tired the cat" and state.generated == []


@settings(max_examples=40, deadline=None)
@given(st.text(max_size=80))
def test_any_text_gives_a_trace(text):
    state = _STATE
    state.prompt = text
    assert state.trace.probs.shape == (len(state.tokens.ids), len(state.vocab))
    assert 0 <= state.selected_position < len(state.tokens.ids)


_STATE = PlaygroundState(model_name="lesson")


def test_app_builds_and_views_follow_the_state():
    from playground.app import VIEW_CLASSES, Playground, create_app
    from playground.state import VIEWS

    playground = create_app()  # no document here: nothing is built on load
    assert isinstance(playground, Playground) and playground.state.view == VIEWS[0]
    assert playground.prompt_bar in playground.root.objects and playground.content in playground.root.objects
    assert list(playground.switcher.options) == [label for _, label in VIEW_CLASSES.values()]
    assert len(playground.content.objects) == 1 and playground.content[0].visible  # lazily: the view on screen
    playground.build_hidden()
    assert len(playground.content.objects) == len(VIEW_CLASSES)
    assert [view.visible for view in playground.content] == [name == VIEWS[0] for name in VIEW_CLASSES]
    playground.switcher.value = "residual"  # the switcher chooses the view: only it is shown
    assert playground.state.view == "residual"
    assert [view.visible for view in playground.content] == [name == "residual" for name in VIEW_CLASSES]
    app = Playground(PlaygroundState(model_name="lesson", prompt="the cat"))
    app.state.prompt = "the cat was tired"
    attention = app.views["attention"]
    assert set(attention.large.cells.data["query_token"]) == {"<start>", "the", "cat", "was", "tired"}
    app.state.param.update(embed=True, view="residual")
    assert app.views["residual"].panel in app.root.objects and app.content not in app.root.objects


def shown(view) -> str:
    """Everything a view puts on the page: its HTML panes' text and its charts' data."""
    import json

    import panel as pn
    from bokeh.models import ColumnDataSource

    html = [pane.object for pane in view.panel.select(pn.pane.HTML)]
    data = sorted(json.dumps(source.data, default=lambda a: np.asarray(a).tolist())  # select() gives a set
                  for pane in view.panel.select(pn.pane.Bokeh) for source in pane.object.select(ColumnDataSource))
    return json.dumps([html, data])


def test_hidden_views_wait_and_then_show_what_a_fresh_view_shows():
    """A prompt or position change redraws only the view on the page; a hidden view is marked stale, unchanged,
    and when shown it shows what a view built from scratch for the new state shows."""
    from playground.app import VIEW_CLASSES, Playground

    app = Playground(PlaygroundState(model_name="lesson", prompt="the cat", view="map"))
    app.build_hidden()
    # generate: always up to date; train, models and lessons: they show their own run, the page's models and the
    # lesson's text, not the prompt; features: with no SAE trained yet, only a measured estimate of Start's time
    hidden = [name for name in VIEW_CLASSES
              if name not in ("map", "generate", "train", "models", "lessons", "features")]
    before = {name: shown(app.views[name]) for name in hidden}
    app.state.param.update(prompt="the cat was tired", position=3)
    assert not app.views["generate"].stale and "tired" in app.views["generate"].output.object
    assert shown(app.views["map"]) != shown(Playground(PlaygroundState(model_name="lesson", prompt="the cat",
                                                                       view="map")).views["map"])
    for name in hidden:
        assert app.views[name].stale and shown(app.views[name]) == before[name], name
    for name in hidden:
        app.switcher.value = name
        fresh = Playground(PlaygroundState(model_name="lesson", prompt="the cat was tired", position=3, view=name))
        assert not app.views[name].stale and shown(app.views[name]) == shown(fresh.views[name]), name


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
    assert len(attention.small) == 8 and "layer 1 · head 2" in attention.hint_text.object
    assert "“they” (position 7) reads" in attention.hint_text.object  # query "pronoun" is the default
    assert "<unk>" in app.state.tokens.labels
    assert not app.views["block"].body.visible and app.views["block"].not_lesson.visible
    names = app.views["residual"].attr_source.data["name"]
    assert "L1.H3" in names and "L1.ffn" in names
    assert app.views["residual"].coord_pane.visible is False  # d = 16: too wide for per-coordinate bars


def test_the_site_builds_hidden_views_when_it_says_so():
    """create_app(build_hidden_on_load=False) is what the static site calls: the hidden views wait for
    start_building_hidden(), which builds them in the background and then reports no pending work."""
    import asyncio

    from playground.app import create_app

    async def check() -> None:
        playground = create_app(build_hidden_on_load=False)
        assert playground.hidden_views_pending and len(playground.content.objects) == 1
        playground.start_building_hidden()
        while playground.hidden_views_pending:
            await asyncio.sleep(0.01)
        assert len(playground.content.objects) == len(playground.views)

    run(check())  # in its own thread: the browser tests' Playwright keeps a loop in this one


def test_with_prebuild_0_a_view_is_built_when_first_shown():
    """A link's prebuild=0: the background building ends with only the view on screen built; a view chosen later
    is built then, drawing the current prompt."""
    from playground.app import create_app, page_options

    async def check() -> None:
        playground = create_app(build_hidden_on_load=False)
        page_options(playground, {"prebuild": "0"})
        playground.state.prompt = "the cat was tired"
        await playground.start_building_hidden()
        assert [name for name in playground.views if playground.views.built(name)] == [playground.state.view]
        playground.state.view = "residual"
        built = [name for name in playground.views if playground.views.built(name)]
        assert built == ["map", "residual"] and len(playground.content.objects) == 2
        assert "tired" in playground.views["residual"].heading.object

    run(check())


def test_hidden_views_wait_while_a_model_is_being_opened():
    """While the shelf opens a model (a link's Hub model, files picked), the background building builds no view:
    each would be built for the model shown and then again for the new one. Once the shelf is done, it goes on."""
    import asyncio

    from playground.app import create_app

    async def check() -> None:
        playground = create_app(build_hidden_on_load=False)
        playground.shelf.busy = True
        task = playground.start_building_hidden()
        await asyncio.sleep(1.0)  # the building's own pauses (0.05 s) and quiet time (0.3 s) several times over
        assert len(playground.content.objects) == 1 and not task.done()
        playground.shelf.busy = False
        while playground.hidden_views_pending:
            await asyncio.sleep(0.01)
        assert len(playground.content.objects) == len(playground.views)

    run(check())  # in its own thread: the browser tests' Playwright keeps a loop in this one


@pytest.mark.parametrize("model_name, prompt", [("shipped", "the cat chased the dogs because they were"),
                                                ("lesson", "the cat was tired")])
def test_model_map_numbers_equal_the_residual_views(model_name, prompt):
    """The map's node values are the residual view's bars, name for name, at every position; they add up to the
    logit the forward pass computed for the predicted token (the model's own number, not the map's)."""
    from playground.app import Playground

    app = Playground(PlaygroundState(model_name=model_name, prompt=prompt))
    app.state.view = "map"
    model_map, residual = app.views["map"], app.views["residual"]
    for position in range(len(app.state.tokens.ids)):
        app.state.param.update(position=position, view="residual")  # a view redraws while it is shown
        bars = dict(zip(residual.attr_source.data["name"], residual.attr_source.data["value"], strict=True))
        app.state.view = "map"
        nodes = dict(zip(model_map.source.data["name"], model_map.source.data["value"], strict=True))
        logit = nodes.pop("unembed")
        assert nodes == bars  # exactly: the same numbers, every one of them, none left out
        trace = app.state.trace
        target = int(np.argmax(trace.probs[position]))
        assert logit == trace.logits[position, target]
        assert sum(nodes.values()) == pytest.approx(trace.logits[position, target], abs=1e-9)


def test_model_map_of_a_post_norm_model_says_what_is_exact():
    from playground.app import Playground

    state = PlaygroundState(model_name="lesson", prompt="the cat was tired")
    BlockSettings(state, norm_placement="post")
    app = Playground(state)
    model_map = app.views["map"]
    data = dict(zip(model_map.source.data["name"], model_map.source.data["write"], strict=True))
    assert all(np.isnan(v) for name, v in zip(model_map.source.data["name"], model_map.source.data["value"],
                                                strict=True) if name != "unembed")
    assert "post-norm" in model_map.note.object and "not a sum" in model_map.note.object
    layer = app.state.trace.layers[0]
    position = app.state.selected_position
    assert float(data["L0.H1"]) == pytest.approx(np.linalg.norm(layer.head_out[1, position]), abs=1e-4)
    assert float(data["L0.ffn"]) == pytest.approx(np.linalg.norm(layer.ff_out[position]), abs=1e-4)


def test_model_map_opens_a_parts_detail():
    from playground.app import Playground

    app = Playground(PlaygroundState(model_name="lesson", prompt="the cat was tired"))
    assert app.state.view == "map"  # the landing view
    model_map = app.views["map"]
    model_map.source.selected.indices = [model_map.source.data["name"].index("L0.H1")]  # a tap on the node
    assert (app.state.view, app.state.layer, app.state.head) == ("attention", 0, 1)
    model_map.part.value = "L0.ffn"
    model_map.open.clicks += 1
    assert app.state.view == "residual"
    model_map.open_detail("unembed")
    assert app.state.view == "next"


def test_share_query_restores_the_state():
    """The link carries the state and every view's settings: a new page given its values shows the same."""
    from urllib.parse import parse_qsl

    from playground.app import Playground

    app = Playground(PlaygroundState(model_name="lesson", prompt="the cat <b>was</b> & tired", layer=0, head=1,
                                     position=2, view="attention", temperature=0.35, ablate="L0.H1"))
    app.settings["block"].norm_placement = "post"
    app.settings["patching"].patch_token = "dog"
    app.settings["train"].param.update(task="grammar", steps=50, autostart=True)
    query = app.state.share_query()
    restored = Playground(PlaygroundState(model_name="shipped"))
    parts = list(zip((app.state, *app.state.view_settings), (restored.state, *restored.state.view_settings),
                     strict=True))
    for _, part in parts:  # each part takes its own keys, as Panel's location.sync hands them over
        by_key = {key: name for name, key in part.URL.items()}
        part.apply_url_values({by_key[k]: v for k, v in parse_qsl(query) if k in by_key})
    for shared, part in parts:
        for name in part.URL:
            assert getattr(part, name) == getattr(shared, name), name
    assert {"norm_placement", "patch_token", "task", "autostart", "train_steps"} <= dict(parse_qsl(query)).keys()
    assert dict(parse_qsl(app.state.share_query(embed=1)))["embed"] == "1"


def test_a_link_sets_the_state_and_the_views_settings_at_once():
    """A page opened from a link: each key reaches the state or its view's settings, and the lesson model's
    switches arrive together with the model, so that a head only the switched model has stays removed. The link
    names the Block view by its old name, `lesson`, which still opens it."""
    import panel as pn
    from bokeh.document import Document

    from playground.app import create_app
    from slm.train.tasks import PRESETS

    pn.state.curdoc = Document()
    try:
        pn.state.location.search = ("?model=lesson&heads=4&ablate=L0.H3&view=lesson&task=grammar&train_steps=50"
                                    "&patch_pos=3&compare=1")
        app = create_app(build_hidden_on_load=False)
        query = pn.state.location.search
    finally:
        pn.state.curdoc = None
    state, settings = app.state, app.settings
    assert state.model.cfg.n_heads == 4 and state.ablate == "L0.H3" and state.view == "block"
    assert settings["block"].n_heads == 4 and settings["block"].compare
    assert (settings["train"].task, settings["train"].steps) == ("grammar", 50)
    assert settings["train"].heads == PRESETS["grammar"].heads  # the task's preset, but for the link's steps
    assert settings["patching"].patch_position == 3
    assert "ablate=L0.H3" in query and "train_steps=50" in query and "patch_pos=3" in query


def test_csv_holds_the_numbers_the_charts_show():
    import csv
    import io

    from playground.app import Playground

    app = Playground(PlaygroundState(model_name="lesson", prompt="the cat was tired", position=2))
    app.state.view = "residual"
    rows = list(csv.reader(io.StringIO(app.views["residual"].numbers.csv().getvalue())))
    start = rows.index(["# direct contributions"])
    assert rows[start + 1] == ["component", "contribution"]
    table = {}
    for row in rows[start + 2:]:
        if not row:
            break
        table[row[0]] = float(row[1])
    expected = analysis.attribution(app.state.model, app.state.trace, 2)
    assert list(table) == expected.names
    assert np.allclose(list(table.values()), expected.values, atol=1e-5)
    assert "# after each step" in [r[0] for r in rows if r] and "# coordinates" in [r[0] for r in rows if r]


def test_share_fields_and_svg_charts():
    from playground.app import Playground

    app = Playground(PlaygroundState(model_name="lesson", prompt="the cat", view="residual", charts="svg"))
    assert app.share_link.value.endswith("?" + app.state.share_query())
    assert "embed=1" in app.share_embed.value and app.share_embed.value.startswith("<iframe ")
    assert "title=\"Transformer playground: Residual stream\"" in app.share_embed.value
    assert app.views["residual"].attr_fig.output_backend == "svg"
    assert "charts=png" in app.chart_format.object
    app.state.prompt = "the dog"  # the link follows the state
    assert "prompt=the+dog" in app.share_link.value


def test_a_model_with_more_rows_than_its_tokenizer_has_tokens_generates(state):
    """Checkpoints pad the embedding past the tokenizer (nanoGPT: 50,304 rows for GPT-2's 50,257 tokens). An id
    without text is shown as unused and left out of the text; it never stops the stream."""
    tokenizer = slm.tokenizer.CharTokenizer(list("abc "))
    cfg = slm.Config(n_vocab=40, n_ctx=16, n_model=8, n_heads=2, n_layers=1, positions="rope")
    model = slm.Model.init(cfg, seed=0)  # random: most of its 40 ids have no text
    model.tokenizer = tokenizer
    state.add_model(model, "loaded")
    state.param.update(prompt="abc", max_new_tokens=8, temperature=0.0)
    run(state.generate())
    assert state.generate_problem == "" and len(state.generated) == 8
    shown = [token for token, _ in state.generated]
    unused = [t for t in shown if t.startswith("<unused ")]
    assert unused and all(t in ("a", "b", "c", "␣") or 4 <= int(t[8:-1]) < 40 for t in shown), shown
    assert len(state.continuation_text()) == 8 - len(unused)


def test_a_failing_generation_says_why_in_the_generate_view(state, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("the weights are not finite")
        yield

    monkeypatch.setattr(slm, "generate", broken)
    run(state.generate())
    assert not state.generating and state.generate_problem == "Generation stopped: the weights are not finite"
    assert "Generation stopped: the weights are not finite" in stream_html("x", [], False, state.generate_problem)
