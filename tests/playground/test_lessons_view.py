"""The app's side of a lesson (playground.lesson_host) and the Lessons view, without a browser: opening built-in
and broken files, a step's state reaching the state and the views' settings, answers graded (a select answer
against the page's state), the course page's events, the model a check receives, the Block view's old name."""

from __future__ import annotations

import json

import numpy as np
import pytest

import lessons
import slm
from playground.app import Playground
from playground.lesson_host import LessonHost, builtin_summaries, items, page_state
from playground.state import PlaygroundState

SMALL = """---
title: A small lesson
model: lesson
---

## Look

[Open head 1](?view=attention&model=lesson&layer=0&head=1).

Two plus two?

- [ ] 3
  - One short.
- [x] 4
  - Right.

Pick head 1 of layer 0.

answer: layer=0 head=1
right: That one.
wrong: Not that one.

## Write

```python starter
def two():
    return 1
```

```python check
assert two() == 2, f"two() gave {two()}"
```
"""


@pytest.fixture
def app() -> Playground:
    return Playground(PlaygroundState(model_name="lesson", prompt="the cat was tired"))


def call(host: LessonHost, **request: object) -> dict:
    return json.loads(host.handle(json.dumps(request)))


def test_a_builtin_opens_with_every_step_and_its_checks(app):
    host = LessonHost(app.state)
    answer = call(host, op="open", name="1-the-block")
    assert answer["ok"] and answer["builtin"] and answer["key"] == "builtin:1-the-block"
    lesson = answer["lesson"]
    assert lesson["title"] == lessons.load_builtin("1-the-block").title
    assert len(lesson["steps"]) == 6
    challenge = next(b for s in lesson["steps"] for b in s["blocks"] if b["kind"] == "challenge")
    # Choose one (radio buttons) or choose all that apply (check boxes): several right options.
    multiple = [b["multiple"] for s in lesson["steps"] for b in s["blocks"] if b["kind"] == "choice"]
    assert multiple == [sum(o["correct"] for o in b["options"]) > 1
                        for s in lesson["steps"] for b in s["blocks"] if b["kind"] == "choice"]
    assert True in multiple and False in multiple
    assert "def layer_norm" in challenge["starter"]["text"] and challenge["check"]["text"]
    # The list in the Lessons view: the three built-ins with their sizes (docs/lessons.md's table).
    sizes = {s["name"]: (s["steps"], s["questions"], s["challenges"]) for s in builtin_summaries()}
    assert sizes == {"1-the-block": (6, 6, 2), "2-causal-attention": (5, 5, 2), "3-circuits": (5, 5, 2)}


def test_a_broken_file_gives_its_problems_with_lines_and_never_raises(app):
    host = LessonHost(app.state)
    broken = "---\ntitle: x\n---\n\n## One\n\nQ?\n\n- [ ] a\n- [ ] b\n"
    answer = call(host, op="open", text=broken, source="broken.md")
    assert not answer["ok"]
    assert any(p["line"] == 9 and "right option" in p["message"] for p in answer["problems"]), answer
    assert call(host, op="open", text="\x00\xff not a lesson", source="junk.md")["ok"] is False
    assert call(host, op="open", name="no-such-lesson")["ok"] is False
    assert "error" in call(host, op="grade", key="nothing-open", step=1, item=0, chosen=[0])


def test_a_steps_state_reaches_the_state_and_the_views_settings(app):
    host = LessonHost(app.state)
    state = call(host, op="apply", state={"view": "block", "model": "lesson", "heads": "2", "compare": "1",
                                          "layer": "9"})["state"]
    assert app.state.view == "block" and app.settings["block"].n_heads == 2 and app.settings["block"].compare
    assert app.state.model.cfg.n_heads == 2
    assert app.state.layer == 9 or app.state.layer <= app.state.model.cfg.n_layers  # clamped as any link is
    assert state["view"] == "block" and state["heads"] == 2 and state["compare"] == 1
    # The Block view's old name, which links and lessons written before the rename carry.
    call(host, op="apply", state={"view": "map"})
    call(host, op="apply", state={"view": "lesson"})
    assert app.state.view == "block"


def test_answers_are_graded_and_give_the_course_pages_event(app):
    host = LessonHost(app.state)
    key = call(host, op="open", text=SMALL, source="https://example.org/small.md")["key"]
    assert key == "https://example.org/small.md"
    wrong = call(host, op="grade", key=key, step=1, item=0, chosen=[0])
    right = call(host, op="grade", key=key, step=1, item=0, chosen=[1])
    assert (wrong["correct"], right["correct"]) == (False, True)
    assert (wrong["feedback_html"], right["feedback_html"]) == (["One short."], ["Right."])  # the chosen one's
    assert right["event"] == {"type": "slm-lesson-question", "lesson": "small", "step": 1, "step_id": "look",
                              "item": 0, "kind": "choice", "correct": True}
    # The select question is graded against what the page shows now.
    call(host, op="apply", state={"view": "attention", "layer": "0", "head": "0"})
    assert call(host, op="grade", key=key, step=1, item=1)["correct"] is False
    app.state.head = 1  # the learner clicks head 1
    select = call(host, op="grade", key=key, step=1, item=1)
    assert select["correct"] and select["feedback_html"] == ["That one."] and select["event"]["kind"] == "select"
    passed = call(host, op="checked", key=key, step=2, item=0, passed=True)["event"]
    assert passed == {"type": "slm-lesson-challenge", "lesson": "small", "step": 2, "step_id": "write", "item": 0,
                      "kind": "challenge", "correct": True}
    assert "error" in call(host, op="checked", key=key, step=1, item=0, passed=True)  # a question, not a challenge


def test_the_page_state_has_every_key_a_select_answer_may_name(app):
    state = page_state(app.state)
    assert set(lessons.states.STATE_KEYS) <= set(state)
    assert state["model"] == "lesson" and state["view"] == app.state.view and "embed" not in state
    json.dumps(state)  # JSON-able: it goes to the page


def test_a_check_model_receives_the_model_shown(app):
    host = LessonHost(app.state)
    data = host.model_npz()
    model = slm.load(data)
    ids = np.array([0, 1, 2])
    assert np.allclose(model.forward(ids).logits, app.state.model.forward(ids).logits)
    verdict = lessons.run_challenge("x = model.cfg.n_model", "assert x == 4, x", model=data)
    assert verdict.passed, verdict


def test_the_lessons_view_lists_the_builtins_as_links(app):
    app.state.view = "lessons"
    html = app.views["lessons"].list.object
    for name in lessons.builtin_names():
        assert f"href='?lesson={name}'" in html
    assert html.count("<li>") == len(lessons.builtin_names())
    assert [b.kind for b in items(lessons.parse(SMALL).steps[0])] == ["choice", "select"]


def test_a_link_to_a_builtin_lesson_opens_on_its_steps_view():
    """?lesson=NAME&step=N: the step's state is applied before the first view is built (the page's panel then
    finds it drawn); a name that is no lesson changes nothing."""
    import panel as pn
    from bokeh.document import Document

    from playground.app import create_app

    lesson = lessons.load_builtin("1-the-block")
    pn.state.curdoc = Document()
    try:
        pn.state.location.search = "?lesson=1-the-block&step=2"
        app = create_app(build_hidden_on_load=False)
        assert lesson.steps[1].state == {"view": "block", "norm": "rms"}
        assert app.state.view == "block" and app.settings["block"].norm == "rms"
        assert app.views.built("block") and not app.views.built("map")
    finally:
        pn.state.curdoc = None
    pn.state.curdoc = Document()
    try:
        pn.state.location.search = "?lesson=no-such-lesson&view=attention"
        assert create_app(build_hidden_on_load=False).state.view == "attention"
    finally:
        pn.state.curdoc = None


def test_a_steps_state_is_shown_in_the_pages_address_even_when_it_was_already_so():
    import panel as pn
    from bokeh.document import Document

    from playground.app import create_app

    pn.state.curdoc = Document()
    try:
        pn.state.location.search = "?lesson=1-the-block"
        app = create_app(build_hidden_on_load=False)
        assert app.state.view == "block"  # applied before the page was drawn
        pn.state.location.search = "?lesson=1-the-block"  # the page's own address, sent after it is drawn
        call(LessonHost(app.state), op="apply", state={"view": "block", "model": "lesson"})
        query = pn.state.location.query_params
        assert (query["view"], query["model"], query["lesson"]) == ("block", "lesson", "1-the-block")
    finally:
        pn.state.curdoc = None


def test_with_a_lesson_open_the_background_builds_only_the_views_its_steps_show():
    """A Next must not wait for a view the lesson never opens: with a lesson open (from the link, or opened later by
    the page), start_building_hidden() builds the views its steps show, in step order, and no other."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    import panel as pn
    from bokeh.document import Document

    from playground import lesson_host
    from playground.app import create_app

    async def built_in_background(app: Playground) -> set[str]:
        app.start_building_hidden()
        while app.hidden_views_pending:
            await asyncio.sleep(0.01)
        return {name for name in app.views if app.views.built(name)}

    async def check() -> None:
        pn.state.curdoc = Document()
        try:
            pn.state.location.search = "?lesson=1-the-block"
            app = create_app(build_hidden_on_load=False)
            assert app.lesson_views == ["block"]  # every step of the lesson shows the Block view
            assert await built_in_background(app) == {"block"}
            # Another lesson opened by the page: its views, Attention first, are built in turn.
            lesson_host.handle(app, json.dumps({"op": "open", "name": "2-causal-attention"}))
            assert app.lesson_views == ["attention", "block"]
            while app.hidden_views_pending:
                await asyncio.sleep(0.01)
            assert {name for name in app.views if app.views.built(name)} == {"block", "attention"}
        finally:
            pn.state.curdoc = None
        pn.state.curdoc = Document()
        try:  # a lesson file the page fetches: nothing in the background until it is open, then its view
            pn.state.location.search = "?lesson=https://lessons.example.org/small.md"
            app = create_app(build_hidden_on_load=False)
            assert app.lesson_views == [] and await built_in_background(app) == {"map"}
            lesson_host.handle(app, json.dumps({"op": "open", "text": SMALL, "source": "https://x.example/s.md"}))
            while app.hidden_views_pending:
                await asyncio.sleep(0.01)
            assert {name for name in app.views if app.views.built(name)} == {"map", "attention"}
        finally:
            pn.state.curdoc = None

    with ThreadPoolExecutor(1) as pool:  # a fresh thread: the browser tests' Playwright keeps a loop in this one
        pool.submit(asyncio.run, check()).result()
