"""The Features view end to end with a real wasm NumPy (set PYODIDE_PACKAGES=DIR; skipped without it, as in CI), one
journey per engine: a link opens the view on the shipped model, which says how long Start will take; Start trains a
short run of the quick preset (its live metrics, then the held-out ones), a feature is chosen in the list (its
contexts and logit effect drawn), a token of the prompt lists its features, Steer writes the steered text beside
the unsteered one; axe finds nothing, also at 360 px with no sideways scrolling; a reload
finds the SAE kept with its model. Screenshots: artifacts/site/<engine>-features-*.png.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from test_lab_e2e import STATUS_JS

from testkit.engines import ENGINES, FIND_JS, Engines, Page
from testkit.hosts import hosted

STEPS = 60
AXE = Path(__file__).resolve().parents[2] / "node_modules" / "axe-core" / "axe.min.js"  # package.json
# axe-core run in the page: loaded from a blob (the site's CSP takes scripts from itself and blob: URLs only).
AXE_JS = """async (source) => {
  if (!window.axe) {
    const s = document.createElement("script");
    s.src = URL.createObjectURL(new Blob([source], {type: "text/javascript"}));
    await new Promise((resolve, reject) => { s.onload = resolve; s.onerror = reject; document.head.append(s); });
  }
  const result = await axe.run(document, {runOnly: {type: "tag",
    values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22a", "wcag22aa", "best-practice"]}});
  return result.violations.map((v) => ({id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.slice(0, 5).map((n) => n.target.join(" "))}));
}"""
# A native list box of the view (found by its first option's text, matched by a regular expression), given a value as
# a learner's choice would.
CHOOSE_JS = """([pattern, index]) => {
  let found = null;
  const walk = (root) => {
    for (const el of root.querySelectorAll("select")) {
      if (el.size > 1 && el.options.length && new RegExp(pattern).test(el.options[0].textContent)) found = el;
    }
    for (const el of root.querySelectorAll("*")) if (el.shadowRoot) walk(el.shadowRoot);
  };
  walk(document);
  if (!found || found.options.length <= index) return null;
  found.focus();
  found.value = found.options[index].value;
  found.dispatchEvent(new Event("input", {bubbles: true}));
  found.dispatchEvent(new Event("change", {bubbles: true}));
  return found.options[index].textContent;
}"""
# Every summary line of the page (status lines and notes), joined.
SUMMARIES_JS = """() => {
  const out = [];
  const walk = (root) => {
    for (const el of root.querySelectorAll(".pg-summary")) out.push(el.textContent.trim());
    for (const el of root.querySelectorAll("*")) if (el.shadowRoot) walk(el.shadowRoot);
  };
  walk(document);
  return out.join(" | ");
}"""
HTML_JS = f"""(selector) => {{ const el = ({FIND_JS})(selector); return el ? el.textContent : ""; }}"""
# The space between the feature list box's bottom edge and the "Feature number" label below it, in px.
LIST_GAP_JS = """() => {
  let list = null, number = null;
  const walk = (root) => {
    for (const el of root.querySelectorAll("select")) {
      if (el.size > 1 && / · fires on /.test(el.options[0]?.textContent ?? "")) list = el;
    }
    for (const el of root.querySelectorAll("label")) if (el.textContent.trim() === "Feature number") number = el;
    for (const el of root.querySelectorAll("*")) if (el.shadowRoot) walk(el.shadowRoot);
  };
  walk(document);
  return list && number ? number.getBoundingClientRect().top - list.getBoundingClientRect().bottom : null;
}"""


def axe(page: Page) -> list[dict]:
    """axe-core's violations on the page (WCAG 2.2 A/AA and best practices), every impact."""
    if not AXE.exists():
        pytest.fail(f"{AXE} is missing: `npm ci` in the repository (tests/run.sh does it)")
    return page.evaluate(AXE_JS, AXE.read_text())


def status(page: Page) -> str:
    return page.evaluate(STATUS_JS)


def scroll_to(page: Page, selector: str, text: str | None = None) -> None:
    page.evaluate(f"([s, t]) => ({FIND_JS})(s, t)?.scrollIntoView({{block: 'start'}})", [selector, text])
    time.sleep(0.3)


# Firefox 140 passed alone (28 s) but once, in a full run under load, the kept SAE was not back 60 s after the
# reload; not found yet, so it is left out, as before (Firefox 153 runs it).
@pytest.mark.parametrize("engine", [e for e in ENGINES if e != "firefox140"])
def test_train_browse_and_steer(engines: Engines, engine: str, vendored_site: Path) -> None:
    with hosted(vendored_site, "plain") as url, engines.page(engine) as page:
        page.open(url + f"index.html?view=features&model=shipped&sae_steps={STEPS}&alpha=12")
        assert page.evaluate("document.body.dataset.ready") == "1", (page.text("#error"), page.console)
        estimate = page.wait_js(f"() => {{ const s = ({STATUS_JS})(); return s.includes('Start will take about') "
                                "&& s; }", timeout_s=60)
        page.click("button", "Start")
        t0 = time.monotonic()
        try:
            line = page.wait_js(f"() => {{ const s = ({STATUS_JS})(); return s.includes('Done:') && s; }}",
                                timeout_s=240)
        except AssertionError:
            page.screenshot("features-stuck")
            raise AssertionError(f"{engine}: training did not end: {status(page)!r}") from None
        print(f"[{engine}] {estimate} | {line} ({time.monotonic() - t0:.1f} s from the click)")
        assert f"Done: {STEPS} steps" in line and "FVE" in line
        page.wait_js(f"() => ({SUMMARIES_JS})().includes('Where it fires most')", timeout_s=30)
        scroll_to(page, "h3", "The features")
        page.screenshot("features-1-trained")
        gap = page.evaluate(LIST_GAP_JS)
        assert gap is not None and 0 <= gap <= 24, gap  # the number box right below the list, in every engine

        # a feature from the list: its page (top contexts with the token marked, the logit effect)
        chosen = page.wait_js("(a) => (" + CHOOSE_JS + ")(a)", ["^#\\d+ · fires on", 2], timeout_s=30)
        number = chosen.split(" ")[0][1:]
        page.wait_js(f"() => ({FIND_JS})('h4', 'Feature #{number}') !== null", timeout_s=30)
        page.wait_js(f"() => !!({FIND_JS})('mark')", timeout_s=10)
        summaries = page.evaluate(SUMMARIES_JS)
        assert "Where it fires most" in summaries and "promotes" in summaries and "suppresses" in summaries
        # a token of the prompt: its features are listed
        page.click("label", "cat" + "\u200b" * 2)  # the token strip's third box (views/tokens.py: unique labels)
        page.wait_js(f"() => ({SUMMARIES_JS})().includes('“cat” (position 2)')", timeout_s=30)
        picked = page.wait_js("(a) => (" + CHOOSE_JS + ")(a)", ["^#\\d+ · [\\d.]+$", 0], timeout_s=30)
        number = picked.split(" ")[0][1:]
        page.wait_js(f"() => ({FIND_JS})('h4', 'Feature #{number}') !== null", timeout_s=30)

        # steering beside the unsteered text
        page.click("button", "Steer")
        page.wait_js(f"() => ({HTML_JS})('.pg-unsteered').trim().split(' ').length >= 3 && "
                     f"!({FIND_JS})('button', 'Steer').disabled", timeout_s=60)
        steered, plain = page.evaluate(HTML_JS, ".pg-steered"), page.evaluate(HTML_JS, ".pg-unsteered")
        print(f"[{engine}] feature #{number}, α 12: steered {steered!r} | not steered {plain!r}")
        scroll_to(page, "h3", "Steering")
        page.screenshot("features-2-steered")

        found = axe(page)
        assert not found, json.dumps(found, indent=1)
        # A phone: 360 px (WebKit's narrowest window is ~450 px), no sideways scrolling, axe again.
        page.resize(360, 800)
        time.sleep(1)
        scroll_to(page, "h3", "The features")
        page.screenshot("features-3-phone")
        width = page.evaluate("innerWidth")
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        found = axe(page)
        assert not found, json.dumps(found, indent=1)
        page.resize(1280, 1000)

        # a reload: the SAE kept with the shipped model comes back (indexed again), no training
        page.reload()
        page.wait_ready()
        page.wait_js(f"() => ({STATUS_JS})().includes('indexed on')", timeout_s=60)
        assert "This model's SAE, kept in this browser." in page.evaluate(SUMMARIES_JS)
        assert page.evaluate("document.body.dataset.error") is None, page.text("#error")
        assert page.errors() == [], page.errors()
