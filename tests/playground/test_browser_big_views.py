"""Every view of a 12 × 12-head model (GPT-2 small's shape, random weights; big_app.py) in Chromium, at 1280 and
360 px: it fits the screen, axe-core finds nothing serious, the Attention view's summary drills down to a head.
Screenshots land in artifacts/big/ (look at them)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from urllib.parse import quote

import pytest
from big_models import prompt
from test_browser import FIND_VIEW, OVERFLOW, axe_violations, each_view, screen_context
from test_browser_circuits import CELL_CENTRE

from conftest import serve

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "big"


@pytest.fixture(scope="module")
def big_url(worker_id: str):
    yield from serve(Path(__file__).with_name("big_app.py"), f"panel_serve_big-{worker_id}.log")


@pytest.mark.parametrize("screen", ["laptop", "phone"])
def test_every_view_of_a_12_by_12_model_is_readable(browser, big_url, screen):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    context = screen_context(browser, screen)
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    problems, serious, report = [], [], {}
    start = time.monotonic()
    try:
        # a prompt with a repeated half; the Patching view changes position 2 ("ab") to "ba", metric aa − ab
        query = f"prompt={quote(prompt(23))}&patch_pos=2&patch_token=ba&good=aa&bad=ab"
        for view in each_view(page, big_url, query):
            if view == "attention":
                page.get_by_text("Every head at a glance").wait_for(timeout=30_000)
                page.evaluate(f"() => ({FIND_VIEW})('attention-summary').el.scrollIntoView({{block: 'center'}})")
                page.wait_for_timeout(200)
                x, y = page.evaluate(CELL_CENTRE, ["attention-summary", 6, 9])  # head 6 of layer 9
                page.mouse.click(x, y)
                page.get_by_text("layer 9 · head 6, large").wait_for(timeout=30_000)
                page.get_by_text("Layer 9: its 12 heads").wait_for(timeout=30_000)
                page.mouse.move(0, 0)  # no tooltip left open (Bokeh's own tooltip is not what axe should judge)
            if view == "patching":
                # the grid's first drawing: its progress, or the summary once it is complete
                page.get_by_text(re.compile("Running the patches|Patched run: ")).first.wait_for(timeout=30_000)
            print(f"{time.monotonic() - start:6.1f} s {view}")
            overflow = page.evaluate(OVERFLOW)
            if overflow > 0:
                problems.append((view, overflow))
            found = axe_violations(page)
            report[view] = found
            serious += [(view, v["id"], v["nodes"]) for v in found if v["impact"] in ("critical", "serious")]
            page.screenshot(path=ARTIFACTS / f"{screen}-{view}.png", full_page=True)
    finally:
        (ARTIFACTS / f"axe-{screen}.json").write_text(json.dumps(report, indent=1))
        context.close()
    assert problems == [] and serious == [] and errors == [], (problems, serious, errors)
