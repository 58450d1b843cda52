"""The Heads and Patching views in Chromium (`panel serve` fixture from conftest.py): what the page draws equals
what the Python side computes, "show me" and a patching cell's click work, no page errors. Screenshots (desktop and
a 360-px phone) land in artifacts/."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest
from test_browser import FIND_VIEW, SOURCE_DATA, settle  # the same lookups of a Bokeh view and its data

from playground import circuits
from playground.state import PlaygroundState

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
# How long a wait may last: each ends as soon as the page shows what it waits for, and a shared 2-core machine that
# is also building or running browsers can take more than 10 s to redraw every view of the trained model.
WAIT = 60_000

CELL_CENTRE = f"""
([name, x, y]) => {{
  const view = ({FIND_VIEW})(name);
  const box = view.el.getBoundingClientRect();
  return [box.left + view.frame.x_scale.compute(x), box.top + view.frame.y_scale.compute(y)];
}}
"""


def open_app(page, app_url: str, query: str) -> None:
    """The page with each view built when first shown (prebuild=0: these tests show one or two), settled."""
    page.goto(f"{app_url}?prebuild=0&{query}")
    page.wait_for_selector(".pg-title", state="attached", timeout=20_000)
    page.wait_for_function("() => window.Bokeh && Bokeh.index && Bokeh.index.roots.length > 0")
    settle(page)


def wait_for_data(page, name: str, timeout: float = WAIT) -> dict:
    page.wait_for_function(f"() => {{ const v = ({FIND_VIEW})('{name}'); return v && "
                           f"({SOURCE_DATA})('{name}').x.length > 0; }}", timeout=timeout)
    return page.evaluate(SOURCE_DATA, name)


@pytest.mark.parametrize("model", ["lesson", "shipped"])
def test_heads_view_draws_the_scores_and_show_me_selects_the_head(page, app_url, model):
    prompt = "the cat was tired the cat was" if model == "lesson" else "the cat chased the dogs because they were"
    open_app(page, app_url, f"model={model}&view=heads&prompt={quote(prompt)}")
    page.get_by_text("Heads: what does each one do?").wait_for(timeout=WAIT)
    state = PlaygroundState(model_name=model, prompt=prompt)
    drawn = wait_for_data(page, "heads-probes")
    expected = circuits.probe_scores(state.model, state.tokenizer)
    for role, layer, head, score in zip(drawn["role"], drawn["layer"], drawn["x"], drawn["score"], strict=True):
        want = expected[role].scores[layer, head] if expected[role].n else np.nan
        assert (np.isnan(want) and (score is None or np.isnan(score))) or score == pytest.approx(want, abs=1e-9)
    page.screenshot(path=ARTIFACTS / f"heads_{model}.png", full_page=True)
    best = circuits.show_me(state.model, state.tokenizer, "induction")
    page.get_by_role("button", name=f"show me: induction (layer {best.layer} · head {best.head})").click()
    page.get_by_text(f"layer {best.layer} · head {best.head}, large").wait_for(timeout=WAIT)
    page.screenshot(path=ARTIFACTS / f"heads_{model}_show_me.png", full_page=True)
    if model == "shipped":  # the roles that need the held-out sentences saved with the trained model's weights
        for role, title in (("pronoun", "pronoun → referent"), ("bracket", "bracket matching")):
            page.get_by_role("radio", name="Heads", exact=True).check()
            best = circuits.show_me(state.model, state.tokenizer, role)
            page.get_by_role("button", name=f"show me: {title} (layer {best.layer} · head {best.head})").click()
            page.get_by_text(f"layer {best.layer} · head {best.head}, large").wait_for(timeout=WAIT)
            page.screenshot(path=ARTIFACTS / f"heads_shipped_show_me_{role}.png", full_page=True)
    assert not page.errors and not page.dialogs


def test_patching_view_draws_the_experiment_and_a_click_shows_the_patched_run(page, app_url):
    query = "model=shipped&view=patching&prompt=the+cat+near+the+dogs&patch_pos=2&patch_token=cats&good=was&bad=were"
    open_app(page, app_url, query)
    page.get_by_text("Patching: where does one token's difference travel?").wait_for(timeout=WAIT)
    state = PlaygroundState(model_name="shipped", prompt="the cat near the dogs")
    run = circuits.patch_run(state.model, state.tokenizer, state.tokens.ids, state.tokens.labels, 2, "cats", "was",
                             "were", "clean")
    run.job.run_for(float("inf"))
    heads = wait_for_data(page, "patching-heads")
    for x, y, metric in zip(heads["x"], heads["y"], heads["metric"], strict=True):
        assert metric == pytest.approx(run.result.heads[y, x], abs=1e-9)
    resid = wait_for_data(page, "patching-residual")
    for x, y, metric in zip(resid["x"], resid["y"], resid["metric"], strict=True):
        assert metric == pytest.approx(run.result.residual[y, x], abs=1e-9)
    page.screenshot(path=ARTIFACTS / "patching_shipped.png", full_page=True)
    layer, head = np.unravel_index(int(np.argmax(run.result.heads)), run.result.heads.shape)
    page.locator(".bk-Figure").filter(has=page.locator("canvas")).first.scroll_into_view_if_needed()
    x, y = page.evaluate(CELL_CENTRE, ["patching-heads", int(head), int(layer)])
    page.mouse.click(x, y)
    page.get_by_text(f"the output of layer {layer} · head {head}").wait_for(timeout=WAIT)
    page.get_by_role("button", name="Show this patched run in the other views").click()
    page.get_by_text("Showing a patched run").first.wait_for(timeout=WAIT)
    page.screenshot(path=ARTIFACTS / "patching_shipped_clicked.png", full_page=True)
    assert not page.errors and not page.dialogs


def test_patching_on_the_lesson_model_and_on_a_phone(browser, app_url):
    context = browser.new_context(viewport={"width": 360, "height": 800})
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        open_app(page, app_url, "model=lesson&view=patching&prompt=the+cat+was")
        page.get_by_text("is not in this model").wait_for(timeout=WAIT)  # the default tokens are not the lesson's
        page.get_by_role("button", name="Load the example").click()
        data = wait_for_data(page, "patching-residual")
        assert len(data["x"]) == len(PlaygroundState(model_name="lesson", prompt="the cat was").tokens.ids)
        page.screenshot(path=ARTIFACTS / "patching_lesson_phone.png", full_page=True)
        open_app(page, app_url, "model=lesson&view=heads&prompt=the+cat+was+tired+the+cat")
        wait_for_data(page, "heads-prompt")
        page.screenshot(path=ARTIFACTS / "heads_lesson_phone.png", full_page=True)
        assert not errors
    finally:
        context.close()
