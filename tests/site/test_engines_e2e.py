"""End to end in Chromium, Firefox and WebKit (engines.py) with a real wasm NumPy: set PYODIDE_PACKAGES=DIR.
Without it these tests are skipped (the vendored_site fixture prints why) (CI has no such folder).
Screenshots: artifacts/site/<engine>-e2e-*.png.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_site_e2e import RECORD_TOKENS_JS, SOURCES_JS, VALUES_JS

from testkit.engines import ENGINES, FIND_JS, Engines, Page
from testkit.hosts import HOSTS, Offline, hosted

PROMPT = "input[placeholder='the cat chased the dog']"


def generate(page: Page, prompt: str) -> tuple[list[list[int]], list[str]]:
    """Type a prompt and press Generate; the painted token counts ([ms since the click, tokens shown], once per
    animation frame, recorded in the page) and the generated tokens' text."""
    page.fill(PROMPT, prompt)
    # Typed at machine speed, every key a prompt change: the views of the last one are drawn before the click, as
    # they are when a learner reaches for Generate (the page lays out each change for ~0.1 s).
    page.wait_js("document.body.dataset.worker !== 'busy'", timeout_s=30)
    # ... and the page has painted them: a click while it still lays them out (0.8 s in WebKit on a loaded machine)
    # would paint every token of the answer at once.
    page.evaluate("() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))")
    page.evaluate(RECORD_TOKENS_JS)
    page.click("button", "Generate")
    page.wait_js("window.tokenFrames.done", timeout_s=60)
    frames = page.evaluate("window.tokenFrames.frames")
    tokens = page.evaluate("""() => {
      const out = [];
      const walk = (root) => {
        for (const el of root.querySelectorAll("*")) {
          if (el.classList.contains("pg-tok")) out.push(el.textContent);
          if (el.shadowRoot) walk(el.shadowRoot);
        }
      };
      walk(document);
      return out;
    }""")
    return frames, tokens


def show_tab(page: Page, tab: str, column: str) -> list[str]:
    """Open a tab and wait until the worker has answered (a hidden view catches up when shown) and a data source
    of its views has a non-empty `column`; every such column's values."""
    page.click("label", tab)  # the view switcher: a radio group, its labels are clicked
    page.wait_js("document.body.dataset.worker === 'idle'", timeout_s=30)
    page.wait_js(f"({SOURCES_JS})('{column}').some((n) => n > 0)", timeout_s=30)
    return page.evaluate(VALUES_JS, column)


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("engine", ENGINES)
def test_hosted_site_runs_streams_and_restores_its_snapshot(engines: Engines, engine: str, host: str,
                                                           vendored_site: Path) -> None:
    """Ready with the prompt from the query string; Generate streams tokens; the attention and residual views have
    data; the memory snapshot is saved, and the reload starts from it and generates the same tokens; offline, the
    next visit is ready from the service worker's cache."""
    offline = Offline()
    with hosted(vendored_site, host, offline=offline) as url, engines.page(engine) as page:
        page.open(url + "index.html?view=generate&prompt=the%20cat")
        page.screenshot(f"e2e-{host}-01-ready")
        assert page.evaluate("document.body.dataset.ready") == "1", (page.text("#error"), page.console)
        timings = page.evaluate("window.siteInfo.timings")
        print(f"[{engine} {host}] cold start: ready at {timings['ready']:.0f} ms ({json.dumps(timings)})")
        assert page.evaluate("window.siteInfo.snapshot") == "none"
        # slm's products run the SIMD kernel (a failure to load it would say so here: worker/kernels.js).
        assert page.evaluate("window.siteInfo.paths['simd-products']") == "on", page.console
        assert page.evaluate(f"(s) => ({FIND_JS})(s).value", PROMPT) == "the cat"
        # The first visit leaves a memory snapshot for the next one.
        page.wait_js("['saved', 'failed'].includes(document.body.dataset.snapshot)", timeout_s=120)
        assert page.evaluate("document.body.dataset.snapshot") == "saved", page.console
        # The hidden tabs' views have arrived, as they have by the time a learner clicks.
        page.wait_js("document.body.dataset.views === 'built'", timeout_s=60)

        frames, first = generate(page, "the dogs")
        page.screenshot(f"e2e-{host}-02-generated")
        final = frames[-1][1]
        assert final > 1 and len(first) == final, (frames, first)
        partial = [n for _, n in frames if 0 < n < final]
        print(f"[{engine} {host}] tokens shown per painted frame after the click: {frames}")
        assert len(partial) >= 3, f"tokens did not stream (counts painted: {frames})"

        attention = show_tab(page, "Attention", "weight")
        assert any(max((w for w in json.loads(weights) if w is not None), default=0) > 0 for weights in attention)
        page.screenshot(f"e2e-{host}-03-attention")
        residual = show_tab(page, "Residual stream", "value")
        assert any(json.loads(values) for values in residual), residual
        page.screenshot(f"e2e-{host}-04-residual")
        assert page.count("canvas") > 0

        page.reload()
        page.wait_ready()
        page.screenshot(f"e2e-{host}-05-from-snapshot")
        assert page.evaluate("document.body.dataset.ready") == "1", (page.text("#error"), page.console)
        assert page.evaluate("document.body.dataset.snapshot") == "restored", page.console
        assert page.evaluate("window.siteInfo.paths['simd-products']") == "on", page.console  # loaded after a restore
        timings = page.evaluate("window.siteInfo.timings")
        print(f"[{engine} {host}] from the snapshot: ready at {timings['ready']:.0f} ms after navigation")
        page.wait_js("document.body.dataset.views === 'built'", timeout_s=60)
        # NumPy's extension modules work after the restore: the same tokens and attention weights as before.
        assert generate(page, "the dogs")[1] == first
        page.click("label", "Generate")  # the reload kept the tab in the URL: Residual stream
        page.screenshot(f"e2e-{host}-06-from-snapshot-generated")
        assert show_tab(page, "Attention", "weight") == attention

        # Offline: the host answers nothing; the service worker serves every file and the snapshot is restored.
        page.wait_js("navigator.serviceWorker.controller !== null", timeout_s=60)
        offline.go()
        page.reload()
        page.wait_ready()
        page.screenshot(f"e2e-{host}-07-offline")
        assert page.evaluate("document.body.dataset.ready") == "1", (page.text("#error"), page.console)
        assert page.evaluate("document.body.dataset.snapshot") == "restored", page.console
        assert page.external == [], page.external
        assert not page.errors(), page.console


@pytest.mark.parametrize("engine", ENGINES)
def test_every_optimisation_off_the_app_runs(engines: Engines, engine: str, vendored_site: Path) -> None:
    """?fallback=all: the plain path of every optimisation (test_engines.py shows which); ready, and Generate gives
    tokens."""
    with hosted(vendored_site, "plain") as url, engines.page(engine) as page:
        page.open(url + "index.html?fallback=all&view=generate")
        page.screenshot("e2e-every-fallback-ready")
        assert page.evaluate("document.body.dataset.ready") == "1", (page.text("#error"), page.console)
        paths = page.evaluate("window.siteInfo.paths")
        # No first view for a URL that sets the app's state, forced or not; every other one forced off.
        assert paths.pop("first-view") == "off: the URL sets the app's state", paths
        assert len(paths) == 7 and set(paths.values()) == {"off: forced"}, paths
        _, tokens = generate(page, "the dogs")
        page.screenshot("e2e-every-fallback-generated")
        assert len(tokens) > 1
        assert not page.errors(), page.console
