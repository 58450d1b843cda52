"""End to end in Chromium with a real wasm NumPy: set PYODIDE_PACKAGES=DIR (a folder of pyodide_2025_0 wheels,
e.g. .cache/pyodide-packages). Without it these tests are skipped, with the reason printed (CI has no such folder).
Screenshots go to artifacts/site/.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from conftest import ALL_SOURCES_JS, ARTIFACTS, MAP_BOX_JS, Visit, built, pyodide_packages_dir, serve, token_box_height

PACKAGES = pyodide_packages_dir()
pytestmark = pytest.mark.skipif(
    PACKAGES is None, reason="set PYODIDE_PACKAGES=DIR (folder with the pyodide_2025_0 NumPy wheel) to run")

SOURCES_JS = """(column) => [...Bokeh.documents[0].all_models]
  .filter((m) => m.constructor.__name__ === "ColumnDataSource" && column in m.data)
  .map((m) => m.data[column].length)"""
# The values of that column in every such source, each source's list as JSON, sorted (the order of a document's
# models is not part of what is compared).
VALUES_JS = """(column) => [...Bokeh.documents[0].all_models]
  .filter((m) => m.constructor.__name__ === "ColumnDataSource" && column in m.data)
  .map((m) => JSON.stringify(Array.from(m.data[column]))).sort()"""


def attention_values(visit: Visit) -> list[str]:
    """Open the Attention tab and read every attention weight it shows (once they are there)."""
    visit.page.get_by_role("radio", name="Attention", exact=True).check()
    visit.wait_js("document.body.dataset.worker === 'idle'", timeout_s=30)  # a hidden view catches up when shown
    visit.wait_js(f"({SOURCES_JS})('weight').some((n) => n > 0)", timeout_s=30)
    visit.page.wait_for_timeout(500)
    return visit.page.evaluate(VALUES_JS, "weight")


# Records, once per animation frame, how many generated tokens the page shows (they live in shadow roots), until
# the stream ends (tokens shown and no cursor) or 20 s pass.
RECORD_TOKENS_JS = """() => {
  const find = (root, cls, out = []) => {
    for (const el of root.querySelectorAll("*")) {
      if (el.classList.contains(cls)) out.push(el);
      if (el.shadowRoot) find(el.shadowRoot, cls, out);
    }
    return out;
  };
  const rec = (window.tokenFrames = { frames: [], done: false });
  const t0 = performance.now();
  let last = -1;
  let started = false;
  const tick = () => {
    const n = find(document, "pg-tok").length;
    const streaming = find(document, "pg-cursor").length > 0;
    started ||= streaming || n === 0;
    if (n !== last) rec.frames.push([Math.round(performance.now() - t0), n]);
    last = n;
    if ((started && n > 0 && !streaming) || performance.now() - t0 > 20000) rec.done = true;
    else requestAnimationFrame(tick);
  };
  requestAnimationFrame(tick);
}"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not PACKAGES.is_dir():
        pytest.fail(f"PYODIDE_PACKAGES={PACKAGES} is not a folder")
    return built(tmp_path_factory.mktemp("e2e") / "site", "--pyodide-packages", str(PACKAGES))[0]


def test_app_runs_generates_and_renders_with_no_external_request(browser: object, site: Path) -> None:
    with serve(site) as url, Visit(browser, url) as visit:
        page = visit.page
        visit.open("index.html?view=generate&prompt=the%20cat")
        visit.screenshot("e2e-01-ready")
        assert page.evaluate("document.body.dataset.ready") == "1", (
            page.text_content("#error"), visit.console)
        info = visit.info()
        assert info["heapBytes"] > 0
        # The query string reached pn.state.location before the app was built.
        prompt = page.locator("input[placeholder='the cat chased the dog']")
        assert prompt.input_value() == "the cat"

        # Prompt -> generate: the page paints the tokens as they arrive, one patch each. Recorded in the page,
        # once per frame (Playwright round trips are too coarse at ~50 tokens/s), after the hidden tabs'
        # views have arrived and been drawn, as they have by the time a learner clicks.
        visit.wait_js("document.body.dataset.views === 'built'", timeout_s=60)
        # Every package is installed, the "app" stage's (Markdown and PyYAML with the app's wheel) included.
        manifest = json.loads((site / "build" / "manifest.json").read_text())
        assert sorted(visit.info()["loadedPackages"]) == sorted(manifest["packages"])
        page.wait_for_timeout(1000)
        prompt.fill("the dog")
        page.wait_for_timeout(300)
        page.evaluate(RECORD_TOKENS_JS)
        page.get_by_role("button", name="Generate").click()
        visit.wait_js("window.tokenFrames.done", timeout_s=60)
        frames = page.evaluate("window.tokenFrames.frames")  # [ms since the click, tokens shown]
        visit.screenshot("e2e-02-generated")
        final = frames[-1][1]
        assert final > 1, frames
        partial = [n for _, n in frames if 0 < n < final]
        assert len(partial) >= 3, f"tokens did not stream (counts painted: {frames})"
        first = next(t for t, n in frames if n > 0)
        rate = (final - 1) / max(frames[-1][0] - first, 1) * 1000
        print(f"[e2e] {final} tokens painted in {len(partial) + 1} steps, {rate:.0f} tokens/s after the first")

        # Heatmaps (attention weights) and bars (next-token probabilities) have data and canvases.
        for tab, column, shot in (("Attention", "weight", "e2e-03-attention"),
                                  ("Next token", "prob", "e2e-04-next-token"),
                                  ("Residual stream", "value", "e2e-05-residual")):
            page.get_by_role("radio", name=tab, exact=True).check()
            page.wait_for_timeout(500)
            visit.screenshot(shot)
            lengths = page.evaluate(SOURCES_JS, column)
            assert lengths and max(lengths) > 0, (tab, lengths)
            assert page.locator("canvas").count() > 0
        # What the build drops (sitebuild/slim.py: VENDORED_SLIM_RULES, STDLIB_DROP) was not needed by any view.
        modules = visit.page.workers[0].evaluate(
            "self.sitePyodide.runPython('import sys, json; json.dumps(sorted(sys.modules))')")
        (ARTIFACTS / "worker-modules.json").write_text(modules)
        assert "numpy.random" in modules and "numpy.fft" not in modules and "xml" not in json.loads(modules)
        # Nor what Panel imports only for what the app does not do (sitebuild/patches/panel-*; tqdm is not
        # shipped).
        assert not {"panel.chat", "unittest.mock", "unittest", "tqdm"} & set(json.loads(modules)), modules
        # numpy.linalg without its LAPACK module (sitebuild/stubs/): norm works, inv names what is missing.
        linalg = visit.page.workers[0].evaluate("""self.sitePyodide.runPython(`
import numpy as np
try:
    np.linalg.inv(np.eye(2))
    outcome = "inv ran"
except AttributeError as e:
    outcome = str(e)
f"{np.linalg.norm([3.0, 4.0])}|{outcome}"`)""")
        assert linalg.startswith("5.0|") and "LAPACK routines" in linalg, linalg
        # Every template Panel and Bokeh have loaded came with bytecode that fits this Python and that
        # template's source (sitebuild.packages.template_bytecode): Jinja had nothing to compile.
        templates = visit.page.workers[0].evaluate("""self.sitePyodide.runPython(`
import json, bokeh.core.templates, panel.io.resources
rows = []
for env in (panel.io.resources._env, bokeh.core.templates.get_env()):
    for (_, name), template in list(env.cache.items()):
        source, filename, _ = env.loader.get_source(env, name)
        bucket = env.bytecode_cache.get_bucket(env, name, filename, source)
        rows.append([name, bucket.code is not None])
json.dumps(rows)`)""")
        rows = json.loads(templates)
        assert len(rows) >= 21 and all(ok for _, ok in rows), rows
        assert visit.external == [], visit.external
        assert not [c for c in visit.console if "Content Security Policy" in c or "pageerror" in c], visit.console


# Every Bokeh plot that should be on screen (it and every layout around it visible), with its box as BokehJS laid it
# out and as the browser shows it.
SHOWN_PLOTS_JS = """() => {
  const plots = [];
  const walk = (v, visible) => {
    visible = visible && v.model?.visible !== false;
    if (visible && v.model?.constructor.__name__ === "Figure") {
      const {width, height} = v.el.getBoundingClientRect();
      plots.push({name: v.model.title?.text ?? "", displayed: v.el.getClientRects().length > 0,
                  laid_out: [v.bbox.width, v.bbox.height], shown: [Math.floor(width), Math.floor(height)]});
    }
    for (const c of v.child_views ?? []) walk(c, visible);
  };
  for (const root of Bokeh.index.roots) walk(root, true);
  return plots;
}"""
OVERFLOW_JS = "document.scrollingElement.scrollWidth - document.documentElement.clientWidth"


def laid_out(plot: dict) -> bool:
    return plot["displayed"] and min(plot["laid_out"]) > 0 and plot["laid_out"] == plot["shown"]


def settled_plots(visit: Visit, timeout_s: float = 15) -> list[dict]:
    """SHOWN_PLOTS_JS once the page has settled: the view's patches applied and drawn (the same plots, each laid
    out, in two reads 0.3 s apart), or what it shows when `timeout_s` is up."""
    deadline = time.monotonic() + timeout_s
    last = None
    while True:
        plots = visit.page.evaluate(SHOWN_PLOTS_JS)
        if (plots == last and all(laid_out(p) for p in plots)) or time.monotonic() > deadline:
            return plots
        last = plots
        time.sleep(0.3)


def test_each_view_chosen_on_a_phone_is_laid_out_and_fits(browser: object, site: Path) -> None:
    """The site's BokehJS lays out only what is shown (sitebuild/patches/bokehjs-*): on a 360-px touch screen,
    every view chosen with the switcher after all were built hidden gets its plots laid out to the size they are
    shown at, and no view scrolls sideways. (The layout tests of tests/playground run `panel serve`, whose BokehJS
    is the installed, unpatched one.) Screenshots: artifacts/site/e2e-phone-<view>.png."""
    from playground.app import VIEW_CLASSES

    with serve(site) as url, Visit(browser, url, screen=(360, 740, True)) as visit:
        visit.open("index.html")
        assert visit.page.evaluate("document.body.dataset.ready") == "1", visit.page.text_content("#error")
        visit.wait_js("document.body.dataset.views === 'built'", timeout_s=60)
        problems, plotted = [], 0
        for view, (_, label) in VIEW_CLASSES.items():
            if view != "map":  # the first view
                visit.page.get_by_role("radio", name=label, exact=True).check()
                visit.wait_js(f"new URLSearchParams(location.search).get('view') === '{view}'", timeout_s=10)
                visit.wait_js("document.body.dataset.worker === 'idle'", timeout_s=30)
            plots = settled_plots(visit)
            visit.page.screenshot(path=str(ARTIFACTS / f"e2e-phone-{view}.png"), full_page=True)
            plotted += len(plots)
            overflow = visit.page.evaluate(OVERFLOW_JS)
            unlaid = [p for p in plots if not laid_out(p)]
            if overflow > 0 or unlaid:
                problems.append((view, overflow, unlaid[:3]))
        assert plotted >= len(VIEW_CLASSES), plotted  # charts were on screen to check
        assert problems == [], problems
        assert not [c for c in visit.console if "pageerror" in c], visit.console


def generate(visit: Visit, prompt: str) -> list[str]:
    """Type a prompt, press Generate, wait until the stream ends; the generated tokens' text."""
    page = visit.page
    page.locator("input[placeholder='the cat chased the dog']").fill(prompt)
    page.get_by_role("button", name="Generate").click()
    deadline = time.monotonic() + 60
    # Locators, not document.querySelector: Bokeh renders the views inside shadow roots.
    while page.locator(".pg-tok").count() == 0 or page.locator(".pg-cursor").count():
        assert time.monotonic() < deadline, f"generation did not finish; console: {visit.console}"
        time.sleep(0.05)
    return page.locator(".pg-tok").all_text_contents()


def test_second_visit_starts_from_the_memory_snapshot(browser: object, site: Path) -> None:
    """The first visit leaves a memory snapshot behind (site/snapshot.js); the next one starts from it, with
    Panel and the app already imported, and behaves exactly as a start from the packages."""
    with serve(site) as url, Visit(browser, url) as visit:
        visit.open("index.html?view=generate&prompt=the%20cat")
        assert visit.page.evaluate("document.body.dataset.ready") == "1", visit.page.text_content("#error")
        assert visit.info()["snapshot"] == "none"
        assert visit.snapshot_outcome() == "saved", visit.console
        first = generate(visit, "the dogs")
        first_attention = attention_values(visit)
        assert any(max((w for w in json.loads(weights) if w is not None), default=0) > 0
                   for weights in first_attention), first_attention

        visit.reload()
        visit.screenshot("e2e-08-from-snapshot")
        assert visit.page.evaluate("document.body.dataset.ready") == "1", visit.page.text_content("#error")
        info = visit.info()
        assert visit.page.evaluate("document.body.dataset.snapshot") == "restored", visit.console
        assert info["worker"]["imports"]["import_panel"] < 0.05, info["worker"]  # done before the snapshot
        # The worker does not keep the ~50 MB snapshot once it is in the wasm memory.
        assert visit.page.workers[0].evaluate("self.sitePyodide._api.config._loadSnapshot") is None
        assert sorted(info["loadedPackages"]) == sorted(visit.page.evaluate(
            "fetch('build/manifest.json').then((r) => r.json()).then((m) => m.packages)"))
        # NumPy's extension modules work (the model runs) and give the same tokens as before.
        assert generate(visit, "the dogs") == first and len(first) > 1
        visit.screenshot("e2e-09-from-snapshot-generated")
        # The same attention weights, value for value, as the start from the packages showed.
        assert attention_values(visit) == first_attention
        assert visit.external == []
        assert not [c for c in visit.console if "pageerror" in c or c.startswith("error")], visit.console


def test_the_first_reload_reads_the_compiled_wasm(browser: object, site: Path, tmp_path: Path) -> None:
    """The first visit (which compiles the wasm's gzip copy) leaves V8's compiled code of the wasm beside the cached
    file, written while the snapshot worker compiles it (worker.js, "the wasm's compiled code"): the first reload
    reads it (Chromium's `v8.wasm.moduleCacheHit` trace event) and finds it valid. Without that, the first reload
    compiled the wasm from scratch and only the second read code."""
    events = ("v8.wasm.moduleCacheHit", "v8.wasm.moduleCacheInvalid", "v8.wasm.moduleCacheInvalidDigest")
    with serve(site) as url, Visit(browser, url) as visit:
        visit.open()
        assert visit.snapshot_outcome() == "saved", visit.console
        trace = tmp_path / "reload.json"
        browser.start_tracing(page=visit.page, path=str(trace), categories=["disabled-by-default-devtools.timeline"])
        visit.reload()
        assert visit.page.evaluate("document.body.dataset.snapshot") == "restored", visit.console
        browser.stop_tracing()
    recorded = json.loads(trace.read_text())
    seen = [e["name"] for e in recorded.get("traceEvents", recorded) if e.get("name") in events]
    assert seen == ["v8.wasm.moduleCacheHit"], seen


# Two ways a stored snapshot can be wrong: a recorded layout that does not match (a function-table base off by
# one) and parts from two different saves (e.g. two tabs saving at once). Each: JS run in the page, and what the
# worker's warning names.
BREAK_SNAPSHOT = {
    "layout": ("""async (key) => {
        const cache = await caches.open((await caches.keys()).find((k) => k.startsWith('slm-site-')));
        const resp = await cache.match(key);
        const meta = await resp.json();
        meta.libs[0].tableBase += 1;
        await cache.put(key, new Response(JSON.stringify(meta), { headers: resp.headers }));
    }""", "function table"),
    "mixed": ("""async (key) => {
        const cache = await caches.open((await caches.keys()).find((k) => k.startsWith('slm-site-')));
        const text = await (await cache.match(key)).text();
        await cache.put(key, new Response(text, { headers: { 'x-snapshot': 'another-save' } }));
    }""", "different saves"),
}


@pytest.mark.parametrize("breakage", sorted(BREAK_SNAPSHOT))
def test_a_snapshot_that_does_not_fit_is_dropped(browser: object, site: Path, breakage: str) -> None:
    """A stored snapshot that does not fit is deleted; the app starts from the packages, then saves a new one."""
    script, reason = BREAK_SNAPSHOT[breakage]
    with serve(site) as url, Visit(browser, url) as visit:
        visit.open()
        assert visit.snapshot_outcome() == "saved"
        visit.page.evaluate(script, url + "build/snapshot/meta.json")
        visit.reload()
        assert visit.page.evaluate("document.body.dataset.ready") == "1", visit.page.text_content("#error")
        assert visit.info()["snapshot"] == "none"
        assert [c for c in visit.console if "memory snapshot not usable" in c and reason in c], visit.console
        assert visit.snapshot_outcome() == "saved"


def test_second_visit_works_offline(browser: object, site: Path) -> None:
    with serve(site) as url, Visit(browser, url) as visit:
        visit.open()
        assert visit.page.evaluate("document.body.dataset.ready") == "1"
        visit.wait_js("navigator.serviceWorker.controller !== null")
        visit.context.set_offline(True)
        visit.reload()
        visit.screenshot("e2e-06-offline-second-visit")
        assert visit.page.evaluate("document.body.dataset.ready") == "1", visit.page.text_content("#error")


def test_embed_page(browser: object, site: Path) -> None:
    with serve(site) as url, Visit(browser, url) as visit:
        visit.open("embed.html?view=attention")
        visit.screenshot("e2e-07-embed")
        assert visit.page.evaluate("document.body.dataset.ready") == "1"
        assert visit.external == []


@pytest.mark.parametrize(("view", "column"), [("heads", "score"), ("patching", "metric")])
def test_circuit_views_open_first(browser: object, site: Path, view: str, column: str) -> None:
    """The Heads and Patching views as the first view of a visit, in the worker: ready, and their heatmaps have
    data (a view that imports something the site does not ship would stop the start-up here)."""
    with serve(site) as url, Visit(browser, url) as visit:
        visit.open(f"index.html?view={view}")
        assert visit.page.evaluate("document.body.dataset.ready") == "1", (visit.page.text_content("#error"),
                                                                          visit.console)
        visit.wait_js(f"({SOURCES_JS})('{column}').some((n) => n > 0)", timeout_s=60)
        visit.page.wait_for_timeout(500)
        visit.screenshot(f"e2e-10-{view}")
        assert visit.external == []
        assert not [c for c in visit.console if "pageerror" in c], visit.console


def close(a: object, b: object) -> bool:
    """JSON values equal, strings exactly, numbers to a relative 1e-12."""
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(b, int | float) and isinstance(a, int | float) and math.isclose(a, b, rel_tol=1e-12,
                                                                                         abs_tol=1e-15)
    return a == b


def test_first_view_is_the_live_app_until_it_is_replaced(browser: object, site: Path) -> None:
    """The pre-rendered first view (rendered by the build in CPython) holds the same data, to the bit, as the live
    app computes in the worker for the same default state, and the live app takes its place without moving it."""
    with serve(site) as url, Visit(browser, url) as visit:
        page = visit.page
        page.goto(url + "index.html")
        page.wait_for_selector("body[data-first-view='shown']", state="attached", timeout=60_000)
        # Drawn (BokehJS has laid it out), and its linked stylesheets applied: both take a moment after 'shown'.
        visit.wait_js("window.siteInfo.timings.firstView !== undefined", timeout_s=60)
        deadline = time.monotonic() + 15
        while (first_tokens := token_box_height(page)) < 44 and time.monotonic() < deadline:
            time.sleep(0.1)
        first = page.evaluate(ALL_SOURCES_JS)
        first_box = page.evaluate(MAP_BOX_JS)
        visit.screenshot("e2e-first-view")
        assert page.evaluate("document.body.dataset.ready") is None, "too late: the live app came first"
        page.wait_for_selector("body[data-ready='1']", state="attached", timeout=180_000)
        live = page.evaluate(ALL_SOURCES_JS)  # right at ready: the map (the hidden views arrive later)
        visit.screenshot("e2e-first-view-replaced")
        assert first and len(first) <= len(live)
        # The numbers: strings (the labels on the page) to the letter, floats to 1e-12: the build's CPython NumPy
        # multiplies matrices with OpenBLAS, the wasm one without, and the sums differ in their last bit or two.
        live_sources = [json.loads(x) for x in live]
        missing = [x for x in first if not any(close(json.loads(x), y) for y in live_sources)]
        if missing:
            (ARTIFACTS / "first-view-diff.json").write_text(json.dumps([missing, live]))
        assert not missing, "a source of the first view differs from the live app's: first-view-diff.json"
        assert page.evaluate("Bokeh.documents.length") == 1  # the first view's document went with it
        assert page.evaluate("document.querySelector('#app').inert") is False
        # No longer dimmed: the picture's style (data-first-view) goes with it.
        assert page.evaluate("getComputedStyle(document.querySelector('#app')).opacity") == "1"
        live_box = page.evaluate(MAP_BOX_JS)
        assert first_tokens >= 44 and token_box_height(page) >= 44  # both styled by the app's linked stylesheet
        assert len(first_box) == len(live_box) == 1, (first_box, live_box)
        assert all(abs(first_box[0][k] - live_box[0][k]) < 1 for k in ("x", "y", "width", "height")), (
            first_box, live_box)
        # Its stylesheets are the live document's, under the same URLs: none is downloaded twice.
        urls_by_file: dict[str, set[str]] = {}
        for request in visit.requests:
            if request.split("?")[0].endswith(".css"):
                urls_by_file.setdefault(request.split("?")[0], set()).add(request)
        assert urls_by_file and all(len(u) == 1 for u in urls_by_file.values()), urls_by_file
