"""Models opened from the Hub by name, end to end in Chromium (`PYODIDE_PACKAGES`): a local mirror with the Hub's URL
layout (`/{repo}/resolve/{revision}/{file}`, the weights behind a redirect) holds a GPT-2 checkpoint made here with
`transformers` (random weights, ~3 MB); `?hf=…&hub=…` opens it into the selector and the views; a reload opens it
from Cache Storage (the mirror sees no second request); a gated repository typed into the box is named; and with
`memory=` below what the page holds, the same model is refused with the size it needs while the model shown stays.
The real Hub is never reached (every other host is refused)."""

from __future__ import annotations

import time
import urllib.parse
from pathlib import Path

import pytest

from conftest import Visit, serve

pytest.importorskip("transformers")
from testkit.hub_mirror import Mirror, gpt2_checkpoint, serving  # noqa: E402

REPO = "school/tiny-gpt2"


def app_worker(visit: Visit) -> object:
    for worker in visit.page.workers:
        if worker.url.endswith("/worker.js"):
            return worker
    raise AssertionError(f"no app worker: {[w.url for w in visit.page.workers]}")


def python(visit: Visit, code: str) -> object:
    """The value of a Python expression in the app worker (its last line)."""
    return app_worker(visit).evaluate("(code) => sitePyodide.runPython(code)", code)


def wait_python(visit: Visit, code: str, timeout_s: float = 90) -> object:
    deadline = time.monotonic() + timeout_s
    while True:
        value = python(visit, code)
        if value:
            return value
        assert time.monotonic() < deadline, (code, visit.console[-10:])
        time.sleep(0.2)


SHOWN = "playground.state.model_name"
STATUS = "playground.shelf.status"


def in_page(code: str) -> str:
    """Code reading boot.py's `playground` (the worker's namespace) as its last expression."""
    return f"import js\nplayground = js.siteNamespace.get('playground')\n{code}"


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    files = gpt2_checkpoint(tmp_path_factory.mktemp("hub"), n_layer=4, n_embd=128, vocab_size=500)
    with serving(Mirror({REPO: {"main": files}}, gated=("school/gated",))) as running:
        yield running


def test_a_model_opens_by_name_from_a_mirror_and_from_the_cache_after_a_reload(browser: object, vendored_site: Path,
                                                                               mirror: Mirror) -> None:
    query = urllib.parse.urlencode({"hf": REPO, "hub": mirror.url, "view": "models"})
    with serve(vendored_site) as url, Visit(browser, url) as visit:
        visit.open(f"index.html?{query}")
        assert visit.page.evaluate("document.body.dataset.ready") == "1", visit.console
        shown = wait_python(visit, in_page(f"{SHOWN} if {SHOWN}.startswith('hub: ') else ''"))
        assert shown == f"hub: {REPO}", python(visit, in_page(STATUS))
        status = python(visit, in_page(STATUS))
        assert "is now the model of every view, opened from " in status and "files are kept in this browser" in status
        # In the selector, chosen; the Models view's status says so; the view drawn from the model's pass.
        visit.wait_js("document.body.dataset.worker === 'idle'")
        values = visit.page.locator("select").evaluate_all("els => els.map((e) => e.value)")
        assert f"hub: {REPO}" in values, values
        assert visit.page.get_by_text("is now the model of every view").count() >= 1
        assert python(visit, in_page("playground.state.trace is not None and playground.state.model.cfg.n_model"))\
            == 128
        weights = mirror.weight_requests()
        assert weights == [f"/{REPO}/resolve/main/model.safetensors", weights[1]] and weights[1].startswith("/cdn/")
        assert not [u for u in visit.requests if u.endswith((".bin", ".pt"))] and not visit.external, visit.external
        visit.screenshot("hub-opened")

        # A gated repository typed into the box: named, and the model shown stays.
        visit.page.get_by_label("Hugging Face model (owner/name)").fill("school/gated")
        visit.page.get_by_role("button", name="Open from the Hub").click()
        gated = wait_python(visit, in_page(f"{STATUS} if 'Not opened' in {STATUS} else ''"))
        assert "this page asks for no tokens" in gated and python(visit, in_page(SHOWN)) == f"hub: {REPO}"

        # The single file keeps no model from the Hub: the line under "Save for offline use" names it instead.
        with visit.page.expect_download(timeout=120_000):
            visit.page.get_by_role("button", name="Save for offline use").click()
        saved = visit.wait_js("document.querySelector('#save-offline-status').textContent.startsWith('Saved') && "
                              "document.querySelector('#save-offline-status').textContent")
        assert f"Not in it: {REPO}@main (from the Hugging Face Hub" in saved, saved

        before = len(mirror.requests)
        visit.reload()
        assert visit.page.evaluate("document.body.dataset.ready") == "1", visit.console
        assert wait_python(visit, in_page(f"{SHOWN} if {SHOWN}.startswith('hub: ') else ''")) == f"hub: {REPO}"
        assert "opened from this browser's cache" in python(visit, in_page(STATUS))
        assert mirror.requests[before:] == [], mirror.requests[before:]  # not even config.json

        # The same model where the page may not grow its memory past what it holds: refused with the size.
        visit.open(f"index.html?{query}&memory=1")
        refused = wait_python(visit, in_page(f"{STATUS} if 'Not opened' in {STATUS} else ''"))
        assert "needs" in refused and "MB of memory to load" in refused and "grows to at most 1 MB" in refused
        assert "The model shown before is still loaded." in refused
        assert python(visit, in_page(SHOWN)) == "shipped"
        assert visit.page.get_by_text("MB of memory to load").count() >= 1
        visit.screenshot("hub-refused")


@pytest.mark.parametrize("engine", ["firefox", "webkit"])
def test_firefox_and_webkit_open_a_model_by_name_and_again_from_the_cache(engines: object, engine: str,
                                                                         vendored_site: Path, mirror: Mirror) -> None:
    """The same in the two other engines, read from the page (the Your models view's status line)."""
    from testkit.engines import FIND_JS

    status = f"(({FIND_JS})('.pg-models-status') || {{}}).textContent || ''"
    query = urllib.parse.urlencode({"hf": REPO, "hub": mirror.url, "view": "models"})
    with serve(vendored_site) as url, engines.page(engine) as page:
        page.open(f"{url}index.html?{query}")
        assert page.evaluate("document.body.dataset.ready") == "1", (page.text("#error"), page.console)
        said = page.wait_js(f"() => {{ const t = {status}; return t.includes('now the model') && t; }}", timeout_s=90)
        assert f"hub: {REPO}" in said and "its files are kept in this browser's cache" in said, said
        page.screenshot(f"{engine}-hub-opened")
        before = len(mirror.requests)
        page.reload()
        page.wait_ready()
        said = page.wait_js(f"() => {{ const t = {status}; return t.includes('now the model') && t; }}", timeout_s=90)
        assert "opened from this browser's cache" in said, said
        assert mirror.requests[before:] == [], mirror.requests[before:]
