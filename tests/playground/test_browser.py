"""End to end in a real browser: Debian's Chromium driven by Playwright against `panel serve` of the app.

Screenshots land in artifacts/ (look at them: a passing test on a broken-looking page is a failed test)."""

from __future__ import annotations

import asyncio
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote

import pytest

from playground.state import PlaygroundState

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"

PROMPT_INPUT = "input[placeholder='the cat chased the dog']"
XSS = "<img src=x onerror=\"window.__xss=1;alert(1)\"><script>window.__xss=2;alert(2)</script>"

# Finds Bokeh views by model name through every root (Tabs render their hidden children too).
FIND_VIEW = """
(name) => {
  const found = [];
  const walk = (v) => {
    if (!v) return;
    if (v.model && v.model.name === name) found.push(v);
    for (const c of (v.child_views ?? [])) walk(c);
  };
  for (const root of Bokeh.index.roots) walk(root);
  return found[0];
}
"""
CELL_CENTRE = f"""
([name, key, query]) => {{
  const view = ({FIND_VIEW})(name);
  const box = view.el.getBoundingClientRect();
  return [box.left + view.frame.x_scale.compute(key), box.top + view.frame.y_scale.compute(query)];
}}
"""
SOURCE_DATA = f"""
(name) => {{
  const view = ({FIND_VIEW})(name);
  const data = view.model.renderers[0].data_source.data;
  const out = {{}};
  for (const [k, v] of (data instanceof Map ? data.entries() : Object.entries(data))) out[k] = Array.from(v);
  return out;
}}
"""
AXIS_LABELS = f"""
(name) => {{
  const view = ({FIND_VIEW})(name);
  const overrides = view.model.left[0].major_label_overrides;
  return Object.fromEntries(overrides instanceof Map ? overrides.entries() : Object.entries(overrides));
}}
"""
# Bokeh draws tooltips inside shadow roots: search them all.
TOOLTIP_TEXT = """
() => {
  const texts = [];
  const walk = (root) => {
    for (const el of root.querySelectorAll('*')) {
      if (el.classList && [...el.classList].some(c => c.toLowerCase().includes('tooltip')) && el.offsetParent
          && el.innerText && el.innerText.trim()) texts.push(el.innerText.trim());
      if (el.shadowRoot) walk(el.shadowRoot);
    }
  };
  walk(document);
  return texts;
}
"""


def open_app(page, app_url: str, query: str = "") -> None:
    page.goto(f"{app_url}{'?' + query if query else ''}")
    page.wait_for_selector(".pg-title", state="attached", timeout=20_000)
    page.wait_for_function("() => window.Bokeh && Bokeh.index && Bokeh.index.roots.length > 0")
    page.wait_for_timeout(500)


def tab(page, name: str):
    return page.locator(".bk-tab", has_text=name)


def wait_for_tokens(page, n: int) -> None:
    # Panel panes render inside shadow roots: Playwright locators pierce them, document.querySelector does not.
    page.locator("#pg-stream .pg-tok").nth(n - 1).wait_for(timeout=15_000)


def stream_tokens(page) -> list[str]:
    return page.locator("#pg-stream .pg-tok").all_inner_texts()


def expected_continuation(prompt: str, **settings) -> list[str]:
    state = PlaygroundState(model_name="lesson", prompt=prompt, **settings)
    # Playwright's sync API keeps an event loop running in this thread: run the state's loop in another one.
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, state.generate()).result()
    return [token for token, _ in state.generated]


def test_generate_streams_the_continuation(page, app_url):
    open_app(page, app_url, "model=lesson&view=generate&max_new_tokens=8&temperature=0.8&seed=3")
    page.fill(PROMPT_INPUT, "the cat was")
    page.press(PROMPT_INPUT, "Enter")
    wait_for_tokens(page, 8)
    page.wait_for_timeout(300)
    assert stream_tokens(page) == expected_continuation("the cat was", max_new_tokens=8, temperature=0.8, seed=3)
    titles = page.locator("#pg-stream .pg-tok").evaluate_all("els => els.map(e => e.title)")
    assert all(re.fullmatch(r"p = [01]\.\d{4}", t) for t in titles)
    page.screenshot(path=ARTIFACTS / "generate.png", full_page=True)
    assert not page.errors


def test_stop_and_repeated_clicks(page, app_url):
    open_app(page, app_url, "model=lesson&view=generate&max_new_tokens=64&prompt=the+dog")
    button = page.get_by_role("button", name="Generate")
    button.click()
    button.click(force=True)  # a second click while generating must not start a second generation
    wait_for_tokens(page, 3)
    page.get_by_role("button", name="Stop").click()
    page.wait_for_timeout(600)
    stopped = len(stream_tokens(page))
    page.wait_for_timeout(600)
    assert 3 <= stopped < 64
    assert len(stream_tokens(page)) == stopped  # nothing arrives after Stop
    assert page.get_by_role("button", name="Generate").is_enabled()


def test_attention_labels_and_hover_tooltip(page, app_url):
    open_app(page, app_url, "model=lesson&view=attention&prompt=the+dog+lay&layer=0&head=1")
    labels = page.evaluate(AXIS_LABELS, "attention-large")
    assert [labels[str(i)] for i in range(4)] == ["<start>", "the", "dog", "lay"]
    page.get_by_text("layer 0 · head 1, large").scroll_into_view_if_needed()
    x, y = page.evaluate(CELL_CENTRE, ["attention-large", 1, 2])  # query "dog" (row 2) reading key "the"
    page.mouse.move(x - 40, y - 40)
    page.mouse.move(x, y, steps=4)
    page.wait_for_function(f"() => ({TOOLTIP_TEXT})().length > 0", timeout=5_000)
    tooltip = " ".join(page.evaluate(TOOLTIP_TEXT))
    state = PlaygroundState(model_name="lesson", prompt="the dog lay")
    weight = state.trace.layers[0].attention[1, 2, 1]
    assert "dog" in tooltip and "the" in tooltip
    assert f"{weight:.4f}" in tooltip
    page.screenshot(path=ARTIFACTS / "attention_hover.png", full_page=True)
    # A masked (future) cell says so instead of showing a weight of 0.
    x, y = page.evaluate(CELL_CENTRE, ["attention-large", 3, 0])
    page.mouse.move(x, y, steps=4)
    page.wait_for_function(f"() => ({TOOLTIP_TEXT})().join(' ').includes('masked')", timeout=5_000)


def test_residual_and_next_token_bars(page, app_url):
    open_app(page, app_url, "model=lesson&view=residual&prompt=the+cat+was&pos=2")
    data = page.evaluate(SOURCE_DATA, "residual-attribution")
    assert {"embed", "pos", "L0.H0", "L0.H1", "L0.ffn"} <= set(data["name"])
    state = PlaygroundState(model_name="lesson", prompt="the cat was", position=2)
    from playground import analysis

    expected = analysis.attribution(state.model, state.trace, 2)
    assert dict(zip(data["name"], data["value"], strict=True))["L0.H1"] == pytest.approx(
        dict(zip(expected.names, expected.values, strict=True))["L0.H1"])
    page.screenshot(path=ARTIFACTS / "residual.png", full_page=True)
    tab(page, "Next token").click()
    data = page.evaluate(SOURCE_DATA, "next-token")
    assert len(data["token"]) == 7 and sum(data["prob"]) == pytest.approx(1.0)
    page.screenshot(path=ARTIFACTS / "next_token.png", full_page=True)


def test_url_round_trip(page, app_url):
    open_app(page, app_url, "model=lesson&prompt=the+cat+lay&view=attention&head=1&pos=2&temperature=0.5")
    assert page.input_value(PROMPT_INPUT) == "the cat lay"
    assert "bk-active" in tab(page, "Attention").get_attribute("class")
    assert page.get_by_text("layer 0 · head 1, large").is_visible()
    page.fill(PROMPT_INPUT, "the dog was tired")
    page.wait_for_function("() => location.search.includes('prompt=the+dog+was+tired')", timeout=5_000)
    tab(page, "Residual stream").click()
    page.wait_for_function("() => location.search.includes('view=residual')", timeout=5_000)
    url = page.url
    assert "temperature=0.5" in url and "head=1" in url
    # The link restores the same page.
    open_app(page, url.split("?")[0], url.split("?")[1])
    assert page.input_value(PROMPT_INPUT) == "the dog was tired"
    assert "bk-active" in tab(page, "Residual stream").get_attribute("class")


def test_xss_payload_runs_nothing(page, app_url):
    open_app(page, app_url, f"model=lesson&view=generate&max_new_tokens=3&prompt={quote(XSS)}")
    page.fill(PROMPT_INPUT, XSS + " the cat")
    page.get_by_role("button", name="Generate").click()
    wait_for_tokens(page, 3)
    stream = page.locator("#pg-stream")
    assert "<img src=x" in stream.inner_text() and "<script>" in stream.inner_text()  # shown as text
    assert stream.locator("img, script").count() == 0
    page.get_by_text("Not in this model's vocabulary").first.wait_for()
    page.wait_for_timeout(500)
    assert page.evaluate("() => window.__xss") is None
    assert page.dialogs == []
    page.screenshot(path=ARTIFACTS / "xss.png", full_page=True)


def test_embed_shows_one_view_in_800px(page, app_url):
    page.set_viewport_size({"width": 800, "height": 900})
    open_app(page, app_url, "model=lesson&embed=1&view=attention&prompt=the+cat+was+tired")
    assert page.locator(".bk-tab").count() == 0
    assert page.get_by_text("Transformer playground").count() == 0
    assert page.get_by_text("Attention: who reads from whom").is_visible()
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 800
    page.screenshot(path=ARTIFACTS / "embed_attention.png", full_page=True)


def test_lesson_change_one_token(page, app_url):
    open_app(page, app_url, "model=lesson&view=lesson&prompt=the+cat+was+tired&compare=true&compare_pos=2")
    page.get_by_text("is bit-identical in every table").wait_for(timeout=5_000)
    assert page.locator("tr.pg-changed").count() > 0 and page.locator("tr.pg-same").count() > 0
    page.screenshot(path=ARTIFACTS / "lesson_causal.png", full_page=True)
    # Bokeh checkboxes have no <label>: the first checkbox on the lesson page is "causal mask".
    causal = page.locator("input[type=checkbox]").first
    assert causal.is_checked()
    causal.click()
    page.get_by_text("earlier row(s) changed").wait_for(timeout=5_000)
    page.screenshot(path=ARTIFACTS / "lesson_not_causal.png", full_page=True)
