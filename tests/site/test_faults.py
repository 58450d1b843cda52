"""Storage faults (issue 30): Cache Storage refused (a private window, a third-party frame) or silent, and the
storage quota exceeded while the memory snapshot is saved. The site's own scripts are served with the fault put in
front of them (Cache Storage's methods made to fail as those browsers fail them), so the handling under test is the
site's."""

from __future__ import annotations

import time
from pathlib import Path

from conftest import Visit, serve

# Cache Storage as a private window or a third-party frame has it: every call fails with SecurityError; and no
# service worker.
REFUSED = """
for (const name of ["open", "match", "has", "keys", "delete"]) {
  CacheStorage.prototype[name] = function () {
    return Promise.reject(new DOMException("The operation is insecure.", "SecurityError"));
  };
}
if (self.navigator?.serviceWorker) {
  navigator.serviceWorker.register = () =>
    Promise.reject(new DOMException("The operation is insecure.", "SecurityError"));
}
"""
# Cache Storage that never answers (Firefox's can keep a lookup waiting while it clears another container's storage).
SILENT = """
for (const name of ["open", "match", "has", "keys", "delete"]) {
  CacheStorage.prototype[name] = () => new Promise(() => {});
}
"""
# A full disk or a small quota: storing anything fails.
QUOTA = """
Cache.prototype.put = function () {
  return Promise.reject(new DOMException("The quota has been exceeded.", "QuotaExceededError"));
};
"""


def with_fault(visit: Visit, fault: str, page_too: bool) -> None:
    """Serves worker.js with `fault` in front of it (and runs it in the page first when `page_too`)."""
    def prefixed(route: object) -> None:
        response = route.fetch()  # type: ignore[attr-defined]
        route.fulfill(response=response, body=fault + response.text())  # type: ignore[attr-defined]

    visit.context.route("**/worker.js", prefixed)
    if page_too:
        visit.context.add_init_script(script=fault)


def wait_console(visit: Visit, text: str, timeout_s: float = 30) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while not (found := [c for c in visit.console if text in c]):
        assert time.monotonic() < deadline, (text, visit.console)
        visit.page.wait_for_timeout(100)  # Playwright delivers console events while it waits
    return found


def test_cache_storage_refused_starts_without_a_warm_start_and_says_so(browser: object,
                                                                     fake_vendored_site: tuple[Path, str]) -> None:
    """No Cache Storage, no service worker: the page starts as a first visit does and gets exactly as far (the fake
    NumPy's import, every other wheel installed), with no error of its own; the console says what is not kept."""
    with serve(fake_vendored_site[0]) as url, Visit(browser, url) as visit:
        with_fault(visit, REFUSED, page_too=True)
        visit.open()
        visit.screenshot("ci-cache-storage-refused")
        assert "No module named 'numpy'" in visit.page.text_content("#error-detail"), visit.console
        assert visit.page.evaluate("document.body.dataset.errorStage") == "app"
        assert visit.page.text_content("#error-stage") == "Stage: App code"  # the stage as the progress names it
        assert {"bokeh", "panel"} <= set(visit.info()["loadedPackages"])
        wait_console(visit, "Cache Storage refused")
        assert visit.page.evaluate("navigator.serviceWorker.controller") is None
        errors = [c for c in visit.console if c.startswith(("error", "pageerror"))]
        assert all("numpy" in c for c in errors), errors  # the fake NumPy's error, nothing else


def test_cache_storage_that_never_answers_delays_the_start_but_does_not_stop_it(
        browser: object, fake_vendored_site: tuple[Path, str]) -> None:
    """Every Cache Storage call left unanswered: each lookup of a start is given up after a few seconds, and the
    page gets exactly as far as a first visit does (the fake NumPy's import), not to a stalled bar."""
    with serve(fake_vendored_site[0]) as url, Visit(browser, url) as visit:
        with_fault(visit, SILENT, page_too=True)
        visit.open()
        visit.screenshot("ci-cache-storage-silent")
        assert "No module named 'numpy'" in visit.page.text_content("#error-detail"), visit.console
        assert {"bokeh", "panel"} <= set(visit.info()["loadedPackages"])
        said = wait_console(visit, "Cache Storage did not answer")
        assert "the memory snapshot" in " ".join(said) and "the wasm" in " ".join(said), said
        assert visit.info()["paths"]["memory-snapshot"].startswith("off: Cache Storage did not answer"), visit.info()


def test_cache_storage_refused_the_app_is_ready(browser: object, vendored_site: Path) -> None:
    """The same with the real NumPy: ready, no error, no snapshot."""
    with serve(vendored_site) as url, Visit(browser, url) as visit:
        with_fault(visit, REFUSED, page_too=True)
        visit.open()
        visit.screenshot("cache-storage-refused-ready")
        assert visit.page.evaluate("document.body.dataset.ready") == "1", (visit.page.text_content("#error"),
                                                                           visit.console)
        wait_console(visit, "Cache Storage refused")
        assert visit.snapshot_outcome() == "failed"
        assert not [c for c in visit.console if c.startswith("pageerror")], visit.console


def test_quota_exceeded_while_the_snapshot_is_saved(browser: object, vendored_site: Path) -> None:
    """Storing the memory snapshot fails with QuotaExceededError: it is skipped, the console says why, the app
    runs on, and the next visit starts without a snapshot (ready, from the packages)."""
    with serve(vendored_site) as url, Visit(browser, url) as visit:
        with_fault(visit, QUOTA, page_too=False)
        visit.open("index.html?snapshot=1")
        assert visit.page.evaluate("document.body.dataset.ready") == "1", visit.console
        assert visit.snapshot_outcome() == "failed"
        said = wait_console(visit, "no memory snapshot for the next visit")
        assert "QuotaExceededError" in said[0] and "not saved" in said[0], said
        assert visit.page.evaluate("document.body.dataset.error") is None
        visit.context.unroute("**/worker.js")
        visit.reload()
        assert visit.page.evaluate("document.body.dataset.ready") == "1", visit.console
        assert visit.info()["snapshot"] == "none"
