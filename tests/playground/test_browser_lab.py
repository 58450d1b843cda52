"""The Train and Your models views in a browser (`panel serve` of the app, headless Chromium): a run trained by
a link, scrubbed back and opened in every view; a model file loaded through the picker, and a bad one refused."""

from __future__ import annotations

import re

import numpy as np
import pytest
from playwright.sync_api import expect
from test_browser import ARTIFACTS, axe_violations, open_app, screen_context, settle, show, wait_for_every_view

import slm
from slm.tokenizer import CharTokenizer

# A short run (the preset's learning is checked in CPython, tests/test_train_lab.py): the line, the charts, the step.
STEPS = 60
STATUS_DONE = re.compile(rf"step {STEPS} / {STEPS} · loss (\d+\.\d+) · accuracy on the repeats (\d\.\d\d) · done")


def status_text(page) -> str:
    return page.locator(".pg-summary[role=status]").filter(has_text="step").first.inner_text()


def model_choice(page) -> str:
    return page.get_by_label("Model", exact=True).input_value()


@pytest.mark.parametrize("screen", ["laptop", "phone"])
def test_a_link_trains_the_repeat_task_and_its_model_joins_every_view(browser, app_url, screen):
    context = screen_context(browser, screen)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    # training starts at once: not waiting for the hidden views as open_app does
    page.goto(f"{app_url}?view=train&task=repeat&autostart=1&train_steps={STEPS}")
    status = page.locator(".pg-summary[role=status]").filter(has_text=STATUS_DONE)
    status.wait_for(timeout=300_000)  # ~10 s on an idle machine; generous for a loaded one
    loss, accuracy = STATUS_DONE.search(status.inner_text()).groups()
    expect(page.get_by_role("button", name="Explore this model")).to_be_enabled(timeout=60_000)  # the last draw
    wait_for_every_view(page)  # the views not opened are built once the run is over, not while it trains
    assert 0 < float(loss) < 10 and 0 <= float(accuracy) <= 1, status.inner_text()
    settle(page)
    page.screenshot(path=str(ARTIFACTS / "screens" / f"{screen}-train-done.png"), full_page=True)
    # every role chart and the attention grid are drawn, with a text alternative of the numbers
    assert page.locator("details.pg-numbers summary", has_text="The training curve as numbers").count() == 1
    overflow = page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, overflow
    serious = [v for v in axe_violations(page) if v["impact"] in ("critical", "serious")]
    assert serious == [], serious
    # scrub back to the start, by the step box and by a click on the loss chart: the grid says which step it shows
    step = page.get_by_label("Step shown")
    step.fill("0")
    step.press("Enter")
    expect(page.get_by_text("Showing the heads at step 0:", exact=False)).to_be_visible(timeout=10_000)
    chart = page.locator(".bk-Figure").filter(visible=True).first  # the loss chart
    chart.scroll_into_view_if_needed()
    box = chart.bounding_box()
    x, y = box["x"] + box["width"] - 30, box["y"] + box["height"] / 2
    page.touchscreen.tap(x, y) if screen == "phone" else page.mouse.click(x, y)
    expect(page.get_by_text(re.compile(r"Showing the heads at step [1-9]\d:"))).to_be_visible(
        timeout=10_000)
    page.get_by_role("button", name="Explore this model").click()
    expect(page.get_by_role("radio", name="Model map", exact=True)).to_be_checked(timeout=20_000)
    assert model_choice(page).startswith("trained: repeat")
    page.screenshot(path=str(ARTIFACTS / "screens" / f"{screen}-train-explore-map.png"), full_page=True)
    assert errors == []
    context.close()


def test_your_models_loads_an_npz_and_refuses_a_broken_file(page, app_url, tmp_path):
    tokenizer = CharTokenizer(list("abcdefgh ."))
    cfg = slm.Config(n_vocab=len(tokenizer.vocab), n_ctx=16, n_model=16, n_heads=2, n_layers=2, positions="rope")
    model = slm.Model(cfg, slm.init_params(cfg, seed=3, dtype=np.float32), {"name": "tiny chars"}, tokenizer)
    good = tmp_path / "tiny.npz"
    model.save(good)
    broken = tmp_path / "broken.npz"
    broken.write_bytes(good.read_bytes()[: len(good.read_bytes()) // 2])
    open_app(page, app_url, "prebuild=0&view=models&model=lesson")
    picker = page.locator("input[type=file]").first
    picker.set_input_files(str(good))
    expect(page.get_by_text("loaded: tiny chars (", exact=False)).to_be_visible(timeout=20_000)
    assert model_choice(page) == "loaded: tiny chars"
    show(page, "attention", "Attention")
    page.screenshot(path=str(ARTIFACTS / "screens" / "models-loaded-attention.png"), full_page=True)
    page.get_by_role("radio", name="Your models", exact=True).check()
    picker.set_input_files(str(broken))
    expect(page.get_by_text("Not loaded: broken.npz", exact=False)).to_be_visible(timeout=20_000)
    assert model_choice(page) == "loaded: tiny chars"  # the model shown before stays
    assert "The model shown before is still loaded" in page.locator(".pg-summary[role=status]",
                                                                     has_text="Not loaded").inner_text()
    assert page.errors == []
