"""Every view that a 12 × 12-head model (GPT-2 small's shape, random weights, 50,257 words; big_app.py) changes, in
Chromium, at 1280 px and then 360 px on the same page: it fits the screen, axe-core finds nothing critical or
serious in the views whose content depends on the model's size (AXE), and the Attention view's summary drills down
to a head.
Screenshots land in artifacts/big/ (look at them)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import quote

import pytest
from big_models import prompt
from test_browser import FIND_VIEW, OVERFLOW, axe_violations, open_app, settle, show, snapshot
from test_browser_circuits import CELL_CENTRE

from conftest import serve

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "big"
# Where axe runs (2-3 s a view): at 1280 px every view that draws the model's layers, heads or vocabulary (the
# others, Generate, Train, Your models and Lessons, look the same for every model: test_browser.py's axe test
# checks them); at 360 px the three whose layout changes most on a phone.
SIZED = ("map", "attention", "residual", "next", "block", "heads", "patching")
AXE = {"laptop": SIZED, "phone": ("map", "attention", "heads")}
# The views whose content is the same whatever the model shown (the lab trains a model of its own; the lessons are a
# list): test_browser.py's sweeps check their fit and axe on a laptop and a phone.
SAME_FOR_EVERY_MODEL = ("train", "lessons")
WIDTHS = {"laptop": (1280, 800), "phone": (360, 740)}


@pytest.fixture(scope="module")
def big_url(worker_id: str):
    yield from serve(Path(__file__).with_name("big_app.py"), f"panel_serve_big-{worker_id}.log")


def drill_down(page) -> None:
    """Click head 6 of layer 9 in the summary: that layer's heads and the head large are drawn."""
    page.get_by_text("Every head at a glance").wait_for(timeout=30_000)
    page.evaluate(f"() => ({FIND_VIEW})('attention-summary').el.scrollIntoView({{block: 'center'}})")
    settle(page)
    x, y = page.evaluate(CELL_CENTRE, ["attention-summary", 6, 9])
    page.mouse.click(x, y)
    page.get_by_text("layer 9 · head 6, large").wait_for(timeout=30_000)
    page.get_by_text("Layer 9: its 12 heads").wait_for(timeout=30_000)
    page.mouse.move(0, 0)  # no tooltip left open: axe would judge Bokeh's tooltip, not the view


def test_a_12_by_12_model_is_readable_in_every_view_it_changes(browser, big_url):
    from playground.app import VIEW_CLASSES

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    problems, serious, report = [], [], {}
    # a prompt with a repeated half; the Patching view changes position 2 ("ab") to "ba", metric aa − ab
    open_app(page, big_url, f"view=map&prompt={quote(prompt(23))}&patch_pos=2&patch_token=ba&good=aa&bad=ab")
    try:
        for screen, (width, height) in WIDTHS.items():
            page.set_viewport_size({"width": width, "height": height})
            for view, (_, label) in VIEW_CLASSES.items():
                if view in SAME_FOR_EVERY_MODEL:
                    continue
                if (screen, view) != ("laptop", "map"):  # the page opens on the map
                    show(page, view, label)
                if view == "attention" and screen == "laptop":
                    drill_down(page)
                if view == "patching":  # the grid's first drawing: its progress, or the summary once complete
                    page.get_by_text(re.compile("Running the patches|Patched run: ")).first.wait_for(timeout=30_000)
                overflow = page.evaluate(OVERFLOW)
                if overflow > 0:
                    problems.append((screen, view, overflow))
                if view in AXE[screen]:
                    found = report[f"{screen}/{view}"] = axe_violations(page)
                    serious += [(screen, view, v["id"], v["nodes"]) for v in found
                                if v["impact"] in ("critical", "serious")]
                snapshot(page, ARTIFACTS / f"{screen}-{view}.jpg")
    finally:
        (ARTIFACTS / "axe.json").write_text(json.dumps(report, indent=1))
        context.close()
    assert problems == [] and serious == [] and errors == [], (problems, serious, errors)
