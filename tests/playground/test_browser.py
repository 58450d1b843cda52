"""End to end in a real browser: Debian's Chromium driven by Playwright against `panel serve` of the app.

Screenshots land in artifacts/ (look at them: a passing test on a broken-looking page is a failed test)."""

from __future__ import annotations

import asyncio
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlsplit

import pytest
from playwright.sync_api import expect

from playground.state import PlaygroundState
from playground.views import attention

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"

# How long a wait may last: each ends as soon as the page shows what it waits for, and two test workers, each with a
# server and a browser, on a 2-core machine that others share can take many seconds to redraw a view.
WAIT = 30_000
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


# Resolves true once nothing in the page's Bokeh documents has changed (a patch from the server, or the browser's
# layout writing a figure's size back) for `quiet` ms and the page's scroll size has held as long; false after `limit`
# ms. A view just shown, or a page just loaded, has then had its patches and its layout: waiting on the page itself
# instead of a fixed time, which was too short on a loaded machine and too long on an idle one.
SETTLE = """
async ([quiet, limit]) => {
  const start = performance.now();
  if (window.__pgChanged === undefined) {
    window.__pgChanged = start;
    for (const doc of Bokeh.documents) doc.on_change(() => { window.__pgChanged = performance.now(); }, true);
  }
  const size = () => `${document.scrollingElement.scrollWidth}x${document.scrollingElement.scrollHeight}`;
  let shape = size(), since = start;
  for (;;) {
    await new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 20)));
    const now = performance.now(), current = size();
    if (current !== shape) [shape, since] = [current, now];
    if (now - Math.max(since, window.__pgChanged) >= quiet) return true;
    if (now - start > limit) return false;
  }
}
"""
# The non-empty <h2> headings on screen, through every shadow root: the shown view's title(s), and the page's own.
SHOWN_HEADINGS = """
() => { const out = []; const walk = (root) => { for (const el of root.querySelectorAll('*')) {
  if (el.tagName === 'H2' && el.getClientRects().length && el.innerText.trim()) out.push(el.innerText.trim());
  if (el.shadowRoot) walk(el.shadowRoot); } }; walk(document); return out; }
"""


def settle(page, quiet: int = 200) -> None:
    assert page.evaluate(SETTLE, [quiet, 60_000]), "the page was still changing after 60 s"


def open_app(page, app_url: str, query: str = "") -> None:
    """Open the page and wait until it has settled: with every view built, unless the link says embed=1 (one view)
    or prebuild=0 (each view built when first shown: for tests that show a few views, as the page's background
    building of all twelve costs seconds of each test's page load)."""
    page.goto(f"{app_url}{'?' + query if query else ''}")
    page.wait_for_selector(".pg-title", state="attached", timeout=WAIT)
    page.wait_for_function("() => window.Bokeh && Bokeh.index && Bokeh.index.roots.length > 0")
    if "embed=1" not in query and "prebuild=0" not in query:
        wait_for_every_view(page)  # the views built after the first render have reached the page
    settle(page)


def tab(page, name: str):
    """The view switcher's choice `name` (a radio button; its label is what a learner clicks)."""
    return page.get_by_role("radio", name=name, exact=True)


def show(page, view: str, label: str) -> None:
    """Choose `view` with the view switcher and wait until it is the one on screen (a title of the view shown
    before hidden, one of this view's shown: the server sends these after the address's view=) and its layout has
    settled."""
    before = page.evaluate(SHOWN_HEADINGS)
    tab(page, label).check()
    page.wait_for_function(f"() => new URLSearchParams(location.search).get('view') === '{view}'", timeout=WAIT)
    page.wait_for_function(f"([before]) => {{ const now = ({SHOWN_HEADINGS})(); "  # the page's own stay
                           "return now.some((t) => !before.includes(t)) && before.some((t) => !now.includes(t)); }",
                           arg=[before], timeout=WAIT)
    settle(page)


def snapshot(page, path: Path) -> None:
    """A full-page screenshot as JPEG, for the loops over every view: a tall page encodes several times faster
    than as PNG, and these are for looking at."""
    page.screenshot(path=path.with_suffix(".jpg"), full_page=True, type="jpeg", quality=80)


def token_labels(page) -> list[str]:
    """The token strip's tokens as shown (without the invisible characters that keep repeated words apart)."""
    return [text.replace("\u200b", "") for text in page.locator(".pg-tokens label").all_inner_texts()]


def choose_token(page, position: int) -> None:
    page.locator(".pg-tokens label").nth(position).click()


def wait_for_tokens(page, n: int) -> None:
    # Panel panes render inside shadow roots: Playwright locators pierce them, document.querySelector does not.
    page.locator("#pg-stream .pg-tok").nth(n - 1).wait_for(timeout=WAIT)


def stream_tokens(page) -> list[str]:
    return page.locator("#pg-stream .pg-tok").all_inner_texts()


def expected_continuation(prompt: str, **settings) -> list[str]:
    state = PlaygroundState(model_name="lesson", prompt=prompt, **settings)
    # Playwright's sync API keeps an event loop running in this thread: run the state's loop in another one.
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, state.generate()).result()
    return [token for token, _ in state.generated]


def new_prompt(page, prompt: str) -> None:
    """Type `prompt` and wait until the Generate view shows it with the last continuation cleared."""
    page.fill(PROMPT_INPUT, prompt)
    expect(page.locator("#pg-stream .pg-prompt")).to_have_text(prompt, timeout=WAIT)
    expect(page.locator("#pg-stream .pg-tok")).to_have_count(0, timeout=WAIT)


def generation_ended(page) -> None:
    """The stream has ended when its cursor is gone and Generate can be pressed again."""
    page.locator("#pg-stream .pg-cursor").wait_for(state="detached", timeout=WAIT)
    expect(page.get_by_role("button", name="Generate")).to_be_enabled(timeout=WAIT)


def test_generate_escapes_streams_and_stops(page, app_url):
    """One page of the Generate view: a prompt with an XSS payload (from the link, then typed) runs nothing and is
    shown as text; the streamed text equals slm.generate's with the link's settings; a double click starts one
    generation and Stop ends it."""
    open_app(page, app_url,
             f"prebuild=0&model=lesson&view=generate&max_new_tokens=8&temperature=0.8&seed=3&prompt={quote(XSS)}")
    # the payload, typed and generated from: text on the page, never markup
    page.fill(PROMPT_INPUT, XSS + " the cat")
    page.get_by_role("button", name="Generate").click()
    wait_for_tokens(page, 3)
    stream = page.locator("#pg-stream")
    assert "<img src=x" in stream.inner_text() and "<script>" in stream.inner_text()  # shown as text
    assert stream.locator("img, script").count() == 0
    page.get_by_text("Not in this model's vocabulary").first.wait_for()
    generation_ended(page)  # the payload has been on the page since the first token: time for it to have run
    assert page.evaluate("() => window.__xss") is None
    assert page.dialogs == []
    page.screenshot(path=ARTIFACTS / "xss.png", full_page=True)
    # the continuation streamed is the one slm.generate gives with the link's settings
    new_prompt(page, "the cat was")
    page.press(PROMPT_INPUT, "Enter")
    wait_for_tokens(page, 8)
    generation_ended(page)
    assert stream_tokens(page) == expected_continuation("the cat was", max_new_tokens=8, temperature=0.8, seed=3)
    titles = page.locator("#pg-stream .pg-tok").evaluate_all("els => els.map(e => e.title)")
    assert all(re.fullmatch(r"p = [01]\.\d{4}", t) for t in titles)
    page.screenshot(path=ARTIFACTS / "generate.png", full_page=True)
    # Stop, and a second click while generating
    page.get_by_label("max new tokens").fill("64")
    page.get_by_label("max new tokens").press("Enter")
    page.wait_for_function("() => location.search.includes('max_new_tokens=64')", timeout=WAIT)
    new_prompt(page, "the dog")
    button = page.get_by_role("button", name="Generate")
    # Two clicks in one task, before the server can hide the button: the second must not start a second generation.
    # (Two Playwright clicks raced the button's hiding: the second found it hidden on a quick machine.)
    button.evaluate("(b) => { b.click(); b.click(); }")
    wait_for_tokens(page, 3)
    page.get_by_role("button", name="Stop").click()
    generation_ended(page)
    stopped = len(stream_tokens(page))
    page.wait_for_timeout(600)  # the window in which a token sent after Stop would arrive
    assert 3 <= stopped < 64
    assert len(stream_tokens(page)) == stopped  # nothing arrives after Stop
    assert page.get_by_role("button", name="Generate").is_enabled()
    assert not page.errors


def test_clicks_on_tokens_and_heads_reach_the_residual_next_token_and_attention_views(page, app_url):
    """One page of the lesson model: clicking a token moves the residual view's title and the heatmap's outlined
    row; the attribution bars are analysis.attribution's and the next-token bars a distribution; the heatmap's axes
    carry the tokens, and its hover tooltip gives the trace's weight (or says a future cell is masked)."""
    prompt = "the cat was tired"
    open_app(page, app_url, f"prebuild=0&model=lesson&view=residual&prompt={quote(prompt)}")
    page.get_by_text("Position 4 (“tired”) predicts next").wait_for(timeout=WAIT)  # the last token at first
    choose_token(page, 2)
    page.get_by_text("Position 2 (“cat”) predicts next").wait_for(timeout=WAIT)
    page.wait_for_function("() => location.search.includes('pos=2')", timeout=WAIT)
    page.screenshot(path=ARTIFACTS / "token_click_residual.png", full_page=True)
    # the bars at position 2 are the attribution computed in Python
    from playground import analysis

    state = PlaygroundState(model_name="lesson", prompt=prompt, position=2)
    result = analysis.attribution(state.model, state.trace, 2)
    expected = dict(zip(result.names, result.values, strict=True))
    settle(page)
    data = page.evaluate(SOURCE_DATA, "residual-attribution")
    assert {"embed", "pos", "L0.H0", "L0.H1", "L0.ffn"} <= set(data["name"])
    assert dict(zip(data["name"], data["value"], strict=True))["L0.H1"] == pytest.approx(expected["L0.H1"])
    page.screenshot(path=ARTIFACTS / "residual.png", full_page=True)
    show(page, "next", "Next token")
    data = page.evaluate(SOURCE_DATA, "next-token")
    assert len(data["token"]) == 7 and sum(data["prob"]) == pytest.approx(1.0)
    page.screenshot(path=ARTIFACTS / "next_token.png", full_page=True)
    show(page, "attention", "Attention")
    page.wait_for_function(f"() => ({SELECTED_ROW})('attention-large') === 2", timeout=WAIT)
    # Another token: the heatmap's outlined row follows without a new forward pass.
    choose_token(page, 1)
    page.wait_for_function(f"() => ({SELECTED_ROW})('attention-large') === 1", timeout=WAIT)
    page.screenshot(path=ARTIFACTS / "token_click_attention.png", full_page=True)
    # A head's button draws it large: its axes carry the tokens, and a hover gives a cell's weight.
    page.get_by_role("button", name="layer 0 · head 1", exact=True).click()
    page.get_by_text("layer 0 · head 1, large").wait_for(timeout=WAIT)
    settle(page)
    labels = page.evaluate(AXIS_LABELS, "attention-large")
    assert [labels[str(i)] for i in range(5)] == ["<start>", "the", "cat", "was", "tired"]
    page.get_by_text("layer 0 · head 1, large").scroll_into_view_if_needed()
    x, y = page.evaluate(CELL_CENTRE, ["attention-large", 1, 2])  # query "cat" (row 2) reading key "the"
    page.mouse.move(x - 40, y - 40)
    page.mouse.move(x, y, steps=4)
    page.wait_for_function(f"() => ({TOOLTIP_TEXT})().length > 0", timeout=WAIT)
    tooltip = " ".join(page.evaluate(TOOLTIP_TEXT))
    weight = state.trace.layers[0].attention[1, 2, 1]
    assert "cat" in tooltip and "the" in tooltip
    assert f"{weight:.4f}" in tooltip
    page.screenshot(path=ARTIFACTS / "attention_hover.png", full_page=True)
    # A masked (future) cell says so instead of showing a weight of 0.
    x, y = page.evaluate(CELL_CENTRE, ["attention-large", 3, 0])
    page.mouse.move(x, y, steps=4)
    page.wait_for_function(f"() => ({TOOLTIP_TEXT})().join(' ').includes('masked')", timeout=WAIT)
    assert not page.errors


def test_block_view_architecture_switches_and_change_one_token(page, app_url):
    """One page of the Block view, its switches set by the link (SwiGLU, 4 heads sharing 2 key/value heads, change
    one token at position 2): the tables follow the switches, and the causal mask keeps every earlier row
    bit-identical until it is switched off."""
    open_app(page, app_url, "prebuild=0&model=lesson&view=lesson&prompt=the+cat+was+tired&activation=swiglu&heads=4"
             "&kv_heads=2&compare=true&compare_pos=2")
    page.get_by_text("FFN hidden (SwiGLU)").wait_for(timeout=WAIT)
    assert page.get_by_text("6 · FFN gate").is_visible()
    assert page.get_by_text("Grouped-query attention (GQA)").is_visible()
    page.get_by_text("is bit-identical in every table").wait_for(timeout=WAIT)
    assert page.locator("tr.pg-changed").count() > 0 and page.locator("tr.pg-same").count() > 0
    page.screenshot(path=ARTIFACTS / "lesson_swiglu_gqa_causal.png", full_page=True)
    page.get_by_role("button", name="GELU", exact=True).click()
    page.get_by_text("FFN hidden (GELU)").wait_for(timeout=WAIT)
    assert page.get_by_text("6 · FFN gate").count() == 0
    page.wait_for_function("() => location.search.includes('activation=gelu')", timeout=WAIT)
    page.get_by_text("is bit-identical in every table").wait_for(timeout=WAIT)  # the new model's tables compared
    page.screenshot(path=ARTIFACTS / "lesson_gelu.png", full_page=True)
    causal = page.get_by_role("checkbox", name="causal mask")  # found by its label
    assert causal.is_checked()
    causal.click()
    page.get_by_text("earlier row(s) changed").wait_for(timeout=WAIT)
    page.screenshot(path=ARTIFACTS / "lesson_not_causal.png", full_page=True)
    assert not page.errors


def test_embed_shows_one_view_in_800px(page, app_url):
    page.set_viewport_size({"width": 800, "height": 900})
    open_app(page, app_url, "model=lesson&embed=1&view=attention&prompt=the+cat+was+tired")
    assert page.locator(".pg-switcher").count() == 0
    assert page.get_by_text("Transformer playground").count() == 0
    assert page.get_by_text("Attention: who reads from whom").is_visible()
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 800
    page.screenshot(path=ARTIFACTS / "embed_attention.png", full_page=True)


# ---- the trained model (the app's default once its weights exist) ----

TRAINED_PROMPT = "the cat chased the dogs because they were"
LONG_PROMPT = ("the brown cow chased the little cars because they were wet . the dog that struck this key struck its "
               "cup . some goats struck the old hat because they were")  # 31 words: 32 tokens, the whole context
SELECTED_ROW = f"""
(name) => {{
  const view = ({FIND_VIEW})(name);
  const row = view.model.center.find(r => r.bottom !== undefined && r.top !== undefined);
  return (row.bottom + row.top) / 2;
}}
"""
KEY_LABEL_ORIENTATION = f"(name) => ({FIND_VIEW})(name).model.below[0].major_label_orientation"
BAR_OFFSETS = f"""
(name) => ({FIND_VIEW})(name).model.renderers.filter(r => r.glyph.type === 'HBar' || r.glyph.right !== undefined)
  .map(r => [r.visible, r.glyph.y.transform ? r.glyph.y.transform.value : 0])
"""


def trained_model_available() -> bool:
    from playground.models import shipped_available

    return shipped_available()


needs_trained = pytest.mark.skipif(not trained_model_available(), reason="py/slm/weights/shipped.npz not there yet")


@needs_trained
def test_trained_model_next_token_residual_generate_analyse_and_attention(page, app_url):
    """One page of the trained model (the default once its weights exist): the next-token bars sit on their labels,
    then pair up under an ablation; the residual view titles the selected token; Generate then "Analyse" makes the
    views describe the whole text; a 32-token prompt gets vertical key labels and the hint to the pronoun head,
    whose button selects it at the last pronoun; a longer prompt keeps the last 32 tokens with a note."""
    open_app(page, app_url, f"prebuild=0&view=next&max_new_tokens=6&temperature=0&prompt={quote(TRAINED_PROMPT)}")
    state = PlaygroundState(prompt=TRAINED_PROMPT)
    assert state.model_name == "shipped"  # no model= in the link: the default
    offsets = page.evaluate(BAR_OFFSETS, "next-token")
    assert offsets[0] == [True, 0] and offsets[1][0] is False  # one bar set, centred on its token
    page.screenshot(path=ARTIFACTS / "trained_next_token.png", full_page=True)
    layer, head = attention.pronoun_head(state.model)
    ablate = page.locator("select:visible").filter(has=page.locator("option", has_text=f"L{layer}.H{head}"))
    ablate.first.select_option(label=f"L{layer}.H{head}")
    page.get_by_text(f"Without L{layer}.H{head} the distribution moves").wait_for(timeout=WAIT)
    page.wait_for_function(f"() => ({BAR_OFFSETS})('next-token')[1][0] === true", timeout=WAIT)
    offsets = page.evaluate(BAR_OFFSETS, "next-token")
    assert offsets[0][1] > 0 and offsets[1] == [True, -offsets[0][1]]  # now a pair, one either side
    page.screenshot(path=ARTIFACTS / "trained_next_token_ablation.png", full_page=True)
    ablate.first.select_option(label="none")
    expect(page.get_by_text(f"Without L{layer}.H{head} the distribution moves")).to_have_count(0, timeout=WAIT)
    show(page, "residual", "Residual stream")
    page.get_by_text("Position 8 (“were”) predicts next").wait_for(timeout=WAIT)
    page.screenshot(path=ARTIFACTS / "trained_residual.png", full_page=True)
    # Generate, then "Analyse prompt + continuation"
    show(page, "generate", "Generate")
    analyse = page.get_by_role("button", name="Analyse prompt + continuation")
    assert analyse.is_disabled()
    page.get_by_role("button", name="Generate").click()
    wait_for_tokens(page, 1)
    generation_ended(page)
    generated = stream_tokens(page)
    assert analyse.is_enabled()
    page.screenshot(path=ARTIFACTS / "trained_generate.png", full_page=True)
    analyse.click()
    tokenizer = state.tokenizer
    expected = f"{TRAINED_PROMPT} {tokenizer.decode([tokenizer.index[t] for t in generated])}"
    expect(page.locator(PROMPT_INPUT)).to_have_value(expected, timeout=WAIT)
    # The views now describe the whole text: the token strip ends with the last generated token.
    page.locator(".pg-tokens label").nth(8 + len(generated)).wait_for(timeout=WAIT)
    assert len(token_labels(page)) == 9 + len(generated) and token_labels(page)[-1] == generated[-1]
    # 32 tokens, the whole context, in the Attention view
    show(page, "attention", "Attention")
    long = PlaygroundState(prompt=LONG_PROMPT)
    assert len(long.tokens.ids) == 32
    page.fill(PROMPT_INPUT, LONG_PROMPT)
    page.get_by_text(f"A head to look at: layer {layer} · head {head}").wait_for(timeout=WAIT)
    page.wait_for_function(f"() => ({AXIS_LABELS})('attention-large')['31'] === 'were'", timeout=WAIT)
    assert page.evaluate(KEY_LABEL_ORIENTATION, "attention-large") == "vertical"  # 32 key labels, none overlap
    labels = page.evaluate(AXIS_LABELS, "attention-large")
    assert len(labels) == 32 and labels["31"] == "were"
    page.screenshot(path=ARTIFACTS / "trained_attention_32.png", full_page=True)
    # The hint's button selects the named head and the row it reads from (the last pronoun, "they").
    query = attention.referent_query_position(long.model, long.tokens.labels)
    page.get_by_role("button", name=re.compile(f"Show layer {layer} · head {head}")).click()
    page.get_by_text(f"layer {layer} · head {head}, large").wait_for(timeout=WAIT)
    page.wait_for_function(f"() => ({SELECTED_ROW})('attention-large') === {query}", timeout=WAIT)
    page.screenshot(path=ARTIFACTS / "trained_attention_hint.png", full_page=True)
    # Longer than the context: the last 32 tokens stay, and the note says how many went from the start.
    longer = "the cat ran . " * 3 + LONG_PROMPT
    assert PlaygroundState(prompt=longer).tokens.truncated == 12  # <start> and "the cat ran ." three times
    page.fill(PROMPT_INPUT, longer)
    page.get_by_text("the first 12 token(s)").wait_for(timeout=WAIT)
    settle(page)
    assert page.evaluate(AXIS_LABELS, "attention-large")["31"] == "were"
    page.screenshot(path=ARTIFACTS / "trained_truncated.png", full_page=True)
    assert not page.errors


# ---- every screen: phones to projectors ----

SCREENS = {  # name: (width, height, touch)
    "phone": (360, 740, True), "tablet": (768, 1024, False), "laptop": (1280, 800, False), "wide": (1920, 1080, False),
}
# The controls a learner presses, through every shadow root; returns the visible ones' boxes and names.
CONTROLS = """
() => {
  const out = [];
  const walk = (root) => {
    for (const el of root.querySelectorAll('*')) {
      if (el.shadowRoot) walk(el.shadowRoot);
      const control = el.matches('button, select, input:not([type=radio]):not([type=checkbox]), textarea, summary')
        || (el.matches('label') && el.querySelector('input[type=radio]'));
      if (!control) continue;
      const r = el.getBoundingClientRect();
      if (r.width === 0 || r.height === 0 || getComputedStyle(el).visibility === 'hidden') continue;
      out.push({name: (el.innerText || el.getAttribute('aria-label') || el.tagName).trim().slice(0, 40),
                left: r.left + scrollX, top: r.top + scrollY, right: r.right + scrollX, bottom: r.bottom + scrollY});
    }
  };
  walk(document);
  return out;
}
"""
# Against the screen's width (the root's clientWidth), not innerWidth: a phone's browser (is_mobile) widens its
# layout viewport to a page that is too wide, so innerWidth grows with the overflow and would hide it (measured:
# a 420-px page on a 360-px phone had innerWidth 420).
OVERFLOW = "() => document.scrollingElement.scrollWidth - document.documentElement.clientWidth"


def screen_context(browser, screen: str):
    width, height, touch = SCREENS[screen]
    return browser.new_context(viewport={"width": width, "height": height}, has_touch=touch, is_mobile=touch)


def new_page(context):
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    return page


def overlapping(controls: list[dict]) -> list[tuple[str, str]]:
    """Pairs of controls whose boxes overlap by more than a pixel each way. A box wholly inside another is a part
    of it (a number input's up/down buttons), not an overlap."""
    def inside(a: dict, b: dict) -> bool:
        return (a["left"] >= b["left"] - 1 and a["right"] <= b["right"] + 1 and a["top"] >= b["top"] - 1
                and a["bottom"] <= b["bottom"] + 1)

    pairs = []
    for i, a in enumerate(controls):
        for b in controls[i + 1:]:
            if (min(a["right"], b["right"]) - max(a["left"], b["left"]) > 1
                    and min(a["bottom"], b["bottom"]) - max(a["top"], b["top"]) > 1
                    and not inside(a, b) and not inside(b, a)):
                pairs.append((a["name"], b["name"]))
    return pairs


def show_view(page, app_url: str, view: str, query: str) -> None:
    open_app(page, app_url, f"view={view}&{query}")


def each_view(page, app_url: str, query: str):
    """Open the page once with `query`, then show every view in turn with the view switcher, as a learner does;
    yields each view's name once it is the one on screen and its layout has settled. (Every view is on the page
    once open_app returns, so switching only shows one and hides the others: one page load per state instead of
    one per view, each several seconds on a loaded 2-core machine.)"""
    from playground.app import VIEW_CLASSES
    from playground.state import VIEWS

    assert list(VIEW_CLASSES) == list(VIEWS)  # the switcher offers every view
    show_view(page, app_url, "map", query)
    for view, (_, label) in VIEW_CLASSES.items():
        if view != "map":
            show(page, view, label)
        yield view


def fit_problems(page, screen: str, model: str, view: str) -> list[tuple]:
    """The shown view's horizontal overflow and overlapping controls (none: []), its screenshot saved in
    artifacts/screens/ for looking at."""
    (ARTIFACTS / "screens").mkdir(exist_ok=True)
    overflow = page.evaluate(OVERFLOW)
    overlaps = overlapping(page.evaluate(CONTROLS))
    snapshot(page, ARTIFACTS / "screens" / f"{screen}-{model}-{view}.jpg")
    return [(model, view, overflow, overlaps[:3])] if overflow > 0 or overlaps else []


@pytest.mark.parametrize("width", [360, 800])
def test_embedded_views_fit_their_frame(browser, app_url, width):
    from playground.state import VIEWS

    (ARTIFACTS / "screens").mkdir(exist_ok=True)
    context = browser.new_context(viewport={"width": width, "height": 640}, has_touch=width < 400,
                                  is_mobile=width < 400)
    page = context.new_page()
    problems = []
    for view in VIEWS:
        show_view(page, app_url, view, "embed=1")
        overflow = page.evaluate(OVERFLOW)
        snapshot(page, ARTIFACTS / "screens" / f"embed-{width}-{view}.jpg")
        if overflow > 0:
            problems.append((view, overflow))
    context.close()
    assert problems == [], problems


# ---- accessibility: axe-core in every view ----

AXE = Path(__file__).resolve().parents[2] / "node_modules" / "axe-core" / "axe.min.js"  # package.json
AXE_RUN = """
async (preload) => {
  // Open every "show the numbers" disclosure first, so that the tables are checked too (laid out by the next frame).
  const walk = (root) => { for (const el of root.querySelectorAll('*')) {
    if (el.tagName === 'DETAILS') el.open = true;
    if (el.shadowRoot) walk(el.shadowRoot);
  } };
  walk(document);
  await new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve)));
  // resultTypes: every violation in full, the passing and inapplicable checks only counted (faster, same verdict)
  const result = await axe.run(document, {runOnly: {type: 'tag',
    values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'wcag22a', 'wcag22aa', 'best-practice']},
    resultTypes: ['violations'], preload});
  return result.violations.map((v) => ({id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.slice(0, 5).map((n) => n.target.join(' '))}));
}
"""


def axe_violations(page) -> list[dict]:
    """axe-core's findings on the whole page. Its preload (every stylesheet of the page and its shadow roots, and
    its media) runs on the first check of a page load only: ~2 of each run's ~3 s, for the two rules that read
    them (css-orientation-lock, no-autoplay-audio). Every view is built by then (open_app), so that check has read
    every view's stylesheets; later ones skip those two rules."""
    if not AXE.exists():
        pytest.fail(f"{AXE} is missing: `npm ci` in the repository (tests/run.sh does it)")
    first = not page.evaluate("() => 'axe' in window")
    if first:  # once per page load: the views share it
        page.add_script_tag(content=AXE.read_text())
    return page.evaluate(AXE_RUN, first)


@pytest.mark.parametrize("screen", ["laptop", "phone"])
@pytest.mark.parametrize("model, experiment", [
    pytest.param("shipped", "ablate=L1.H2", id="shipped"),
    pytest.param("lesson", "ablate=L0.H1&compare=1&compare_pos=2", id="lesson")])
def test_every_view_fits_and_axe_finds_nothing_serious(browser, app_url, screen, model, experiment):
    """Every view, both models, on a 360-px phone and a laptop, with an experiment on (a head removed; for the
    lesson model also "change one token"): no horizontal scrolling and no overlapping controls (screenshots in
    artifacts/screens/), then, with every table open, zero critical or serious axe-core violations (WCAG 2.2 A/AA
    and best practices). The full axe report, moderate and minor findings included, is saved in
    artifacts/axe-<screen>-<model>.json. The shipped model's laptop also checks each view's fit on a tablet and at
    1920 px, the window resized (one page load for three screens)."""
    import json

    context = screen_context(browser, screen)
    page = context.new_page()
    report, serious, problems = {}, [], []
    resized = ("tablet", "wide") if (model, screen) == ("shipped", "laptop") else ()
    for view in each_view(page, app_url, f"model={model}&{experiment}"):
        problems += fit_problems(page, screen, model, view)  # before axe opens the tables
        for other in (*resized, screen) if resized else ():
            width, height, _ = SCREENS[other]
            page.set_viewport_size({"width": width, "height": height})
            settle(page)
            if other != screen:
                problems += fit_problems(page, other, model, view)
        found = axe_violations(page)
        report[f"{model}/{view}"] = found
        serious += [(model, view, v["id"], v["nodes"]) for v in found if v["impact"] in ("critical", "serious")]
    (ARTIFACTS / f"axe-{screen}-{model}.json").write_text(json.dumps(report, indent=1))
    context.close()
    assert problems == [], problems
    assert serious == [], serious


# ---- keyboard only; touch ----

FOCUSED = """
() => {
  let el = document.activeElement;
  while (el && el.shadowRoot && el.shadowRoot.activeElement) el = el.shadowRoot.activeElement;
  if (!el) return null;
  const label = el.closest('label');
  const style = getComputedStyle(label && el.type === 'radio' ? label : el);
  return {tag: el.tagName, type: el.type || '', checked: !!el.checked,
          text: ((label ? label.innerText : el.innerText) || el.value || '').replaceAll('\\u200b', '').trim(),
          outline: style.outlineStyle !== 'none' && parseFloat(style.outlineWidth) >= 2};
}
"""
COUNT_H2 = """
() => { let n = 0; const walk = (root) => { for (const el of root.querySelectorAll('*')) {
  if (el.tagName === 'H2') n += 1; if (el.shadowRoot) walk(el.shadowRoot); } }; walk(document); return n; }
"""
# Every pointer event the page sees, counted (captured on window, so those inside shadow roots count too).
COUNT_POINTER = """
() => { window.__pointer = 0;
  for (const type of ['mousedown', 'mouseup', 'mousemove', 'pointerdown', 'pointermove', 'touchstart', 'wheel'])
    window.addEventListener(type, () => { window.__pointer += 1; }, true); }
"""


def wait_for_every_view(page) -> None:
    from playground.state import VIEWS

    # generous: two test workers, each with a server and a browser, share the cores, and a loaded machine took
    # over 60 s to build the twelve views
    page.wait_for_function(f"() => ({COUNT_H2})() >= {len(VIEWS)}", timeout=120_000)


def tab_to(page, matches, shift: bool = False, limit: int = 80) -> dict:
    """Press Tab (or Shift+Tab) until the focused element satisfies `matches`; returns it."""
    for _ in range(limit):
        page.keyboard.press("Shift+Tab" if shift else "Tab")
        focused = page.evaluate(FOCUSED)
        if focused and matches(focused):
            return focused
    raise AssertionError(f"Tab never reached the element (last focus: {page.evaluate(FOCUSED)})")


def test_keyboard_alone_selects_a_token_a_view_a_head_and_generates(browser, app_url):
    """Page load → token 3 selected → attention view → layer 1 head 2 enlarged → 5 tokens generated, with the
    keyboard only (no pointer event reaches the page), and every focused control shows a focus outline."""
    context = screen_context(browser, "laptop")
    page = new_page(context)
    open_app(page, app_url, "model=shipped&max_new_tokens=5&temperature=0")
    wait_for_every_view(page)  # the views built after the first render have arrived: the page is settled
    page.evaluate(COUNT_POINTER)
    # The token strip: one Tab stop (the chosen token, the last one), then the arrow keys.
    focused = tab_to(page, lambda f: f["type"] == "radio" and f["text"].startswith("were"))
    assert focused["checked"] and focused["outline"]
    for _ in range(5):
        page.keyboard.press("ArrowLeft")
    page.wait_for_function("() => location.search.includes('pos=3')", timeout=WAIT)
    assert page.evaluate(FOCUSED)["text"].startswith("chased")
    # The view switcher: the next Tab stop; arrows move between views.
    focused = tab_to(page, lambda f: f["type"] == "radio" and f["text"] == "Model map")
    while page.evaluate(FOCUSED)["text"] != "Attention":
        page.keyboard.press("ArrowRight")
    page.wait_for_function("() => location.search.includes('view=attention')", timeout=WAIT)
    # A head of the grid: its name is a button.
    focused = tab_to(page, lambda f: f["tag"] == "BUTTON" and f["text"] == "layer 1 · head 2")
    assert focused["outline"]
    page.keyboard.press("Enter")
    page.get_by_text("layer 1 · head 2, large").wait_for(timeout=WAIT)
    page.wait_for_function("() => location.search.includes('layer=1') && location.search.includes('head=2')",
                           timeout=WAIT)
    page.wait_for_function(f"() => ({SELECTED_ROW})('attention-large') === 3", timeout=WAIT)
    # Back up to Generate, and press it.
    focused = tab_to(page, lambda f: f["tag"] == "BUTTON" and f["text"] == "Generate", shift=True)
    assert focused["outline"]
    page.keyboard.press("Enter")
    # The live region announces the end of the generation.
    page.get_by_role("status").filter(has_text="Generated 5 tokens").wait_for(state="attached", timeout=WAIT)
    page.screenshot(path=ARTIFACTS / "keyboard_only.png", full_page=True)
    assert page.evaluate("() => window.__pointer") == 0
    assert not page.errors
    context.close()


def tap_point(page, name: str, x: float, y: float) -> tuple[float, float]:
    return page.evaluate(f"""([name, x, y]) => {{
      const view = ({FIND_VIEW})(name);
      const box = view.el.getBoundingClientRect();
      return [box.left + view.frame.x_scale.compute(x), box.top + view.frame.y_scale.compute(y)];
    }}""", [name, x, y])


def test_touch_taps_a_map_node_and_reads_a_heatmap_cell(browser, app_url):
    """On a phone: the landing view is the model map; tapping a head's node opens it in the attention view;
    tapping a cell of the large heatmap writes its weight under it (there is no hover on a touch screen)."""
    context = screen_context(browser, "phone")
    page = new_page(context)
    open_app(page, app_url, "prebuild=0&model=lesson&prompt=the+dog+lay")
    assert tab(page, "Model map").is_checked()
    data = page.evaluate(f"""() => {{
      const data = ({FIND_VIEW})('model-map').model.renderers.find((r) => r.name === 'nodes').data_source.data;
      const get = (k) => Array.from(data instanceof Map ? data.get(k) : data[k]);
      return {{name: get('name'), x: get('x'), y: get('y')}};
    }}""")
    i = data["name"].index("L0.H1")
    page.evaluate(f"() => ({FIND_VIEW})('model-map').el.scrollIntoView({{block: 'center'}})")
    x, y = tap_point(page, "model-map", data["x"][i], data["y"][i])
    page.screenshot(path=ARTIFACTS / "touch_map.png")
    page.touchscreen.tap(x, y)
    page.get_by_text("layer 0 · head 1, large").wait_for(timeout=WAIT)
    assert tab(page, "Attention").is_checked()
    page.evaluate(f"() => ({FIND_VIEW})('attention-large').el.scrollIntoView({{block: 'center'}})")
    x, y = tap_point(page, "attention-large", 1, 2)  # key "the" (column 1), query "dog" (row 2)
    page.touchscreen.tap(x, y)
    weight = PlaygroundState(model_name="lesson", prompt="the dog lay").trace.layers[0].attention[1, 2, 1]
    page.get_by_text(f"Query “dog” (position 2) → key “the” (position 1): weight {weight:.4f}").wait_for(
        timeout=WAIT)
    page.screenshot(path=ARTIFACTS / "touch_cell.png", full_page=True)
    assert not page.errors
    context.close()


# ---- for instructors ----

def test_a_link_restores_the_page_and_copy_link_embed_code_csv_and_chart_files(browser, app_url):
    """The URL follows the page (prompt, view) and keeps what the link set; "Copy link" puts that URL on the
    clipboard and it restores the page; "Copy embed code" an iframe of the view; the CSV button downloads the
    numbers; the save button writes a PNG, or an SVG with charts=svg."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True,
                                  permissions=["clipboard-read", "clipboard-write"])
    page = new_page(context)
    open_app(page, app_url, "prebuild=0&model=lesson&prompt=the+cat+lay&view=attention&head=1&pos=2&temperature=0.5")
    assert page.input_value(PROMPT_INPUT) == "the cat lay"
    assert tab(page, "Attention").is_checked()
    assert page.get_by_text("layer 0 · head 1, large").is_visible()
    page.fill(PROMPT_INPUT, "the dog was tired")
    page.wait_for_function("() => location.search.includes('prompt=the+dog+was+tired')", timeout=WAIT)
    show(page, "residual", "Residual stream")
    choose_token(page, 2)
    page.wait_for_function("() => location.search.includes('pos=2')", timeout=WAIT)
    assert "temperature=0.5" in page.url and "head=1" in page.url
    page.get_by_role("button", name="Copy link").click()
    page.wait_for_function("() => navigator.clipboard.readText().then((t) => t.includes('view=residual'))",
                           timeout=WAIT)
    link = page.evaluate("navigator.clipboard.readText()")
    assert link.startswith(app_url + "?") and "pos=2" in link and "prompt=the+dog+was+tired" in link
    assert "temperature=0.5" in link and "head=1" in link
    # the address bar says the same, less the page option prebuild= (not the page's state): opening the link below
    # is reopening the page's own URL
    assert sorted(parse_qsl(urlsplit(link).query)) == sorted(
        (key, value) for key, value in parse_qsl(urlsplit(page.url).query) if key != "prebuild")
    page.get_by_role("button", name="Copy embed code").click()
    page.wait_for_function("() => navigator.clipboard.readText().then((t) => t.startsWith('<iframe'))",
                           timeout=WAIT)
    assert "embed=1" in page.evaluate("navigator.clipboard.readText()")
    with page.expect_download() as download:
        page.get_by_role("button", name="Download the numbers (CSV)").click()
    csv_text = Path(download.value.path()).read_text()
    expected = PlaygroundState(model_name="lesson", prompt="the dog was tired", position=2)
    from playground import analysis

    result = analysis.attribution(expected.model, expected.trace, 2)
    assert f"L0.H1,{result.values[result.names.index('L0.H1')]:.6g}" in csv_text
    with page.expect_download() as download:
        page.get_by_title("Save").first.click()
    assert download.value.suggested_filename.endswith(".png")
    assert Path(download.value.path()).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The link restores the page; its "charts that save as SVG" link makes the save button write SVG.
    open_app(page, link.split("?")[0], link.split("?")[1])
    assert page.input_value(PROMPT_INPUT) == "the dog was tired"
    assert tab(page, "Residual stream").is_checked()
    page.get_by_role("link", name="Reload with charts that save as SVG").click()
    page.wait_for_function("() => location.search.includes('charts=svg')", timeout=WAIT)
    page.wait_for_selector(".pg-title", state="attached", timeout=WAIT)
    page.wait_for_function("() => window.Bokeh && Bokeh.index && Bokeh.index.roots.length > 0")
    settle(page)  # the view on screen drawn (the others arrive later and change nothing of it)
    with page.expect_download() as download:
        page.get_by_title("Save").first.click()
    assert download.value.suggested_filename.endswith(".svg")
    assert b"<svg" in Path(download.value.path()).read_bytes()[:400]
    assert not page.errors
    context.close()
