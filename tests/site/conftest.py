"""Fixtures for the static-site tests: build into temporary folders, serve on 127.0.0.1, drive Debian Chromium.

Builds share the repository's .cache/ (pip/npm downloads, compiled wheels), so only the first build on a machine
pays for downloading and byte-compiling.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from filelock import FileLock

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts" / "site"
READY_TIMEOUT_MS = 180_000

sys.path.insert(0, str(ROOT / "py"))
from sitebuild.serve import serving  # noqa: E402
from testkit.engines import Engines, engines_session  # noqa: E402


def run_build(site: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    # Deflated by zlib (sitebuild/zips.py SITE_DEFLATE): zopfli would add ~100 s to a fresh clone's first build for
    # zips of the same format, only smaller; the benchmark builds with it.
    proc = subprocess.run([sys.executable, str(ROOT / "build.py"), "--site-dir", str(site), *extra],
                          capture_output=True, text=True, cwd=ROOT, timeout=1200,
                          env={**os.environ, "SITE_DEFLATE": "zlib"})
    return proc


def built(site: Path, *extra: str) -> tuple[Path, str]:
    proc = run_build(site, *extra)
    assert proc.returncode == 0, f"build failed:\n{proc.stdout}\n{proc.stderr}"
    return site, proc.stderr


def built_once(tmp_path_factory: pytest.TempPathFactory, worker_id: str, name: str, *extra: str) -> tuple[Path, str]:
    """built(), once per test run: under pytest-xdist the first worker to ask builds into the run's shared folder
    while the others wait on its lock, then all read that site (tests never change a built site)."""
    if worker_id == "master":  # one process: its own temporary folder
        return built(tmp_path_factory.mktemp(name) / "site", *extra)
    shared = tmp_path_factory.getbasetemp().parent  # this run's folder, above each worker's own
    site, log = shared / name / "site", shared / name / "build.log"
    with FileLock(str(shared / f"{name}.lock")):
        if not log.is_file():  # a failed build leaves no log: the next worker tries and reports it too
            site.parent.mkdir(exist_ok=True)
            log.write_text(built(site, *extra)[1])
    return site, log.read_text()


@pytest.fixture(scope="session")
def cdn_site(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """The default build: NumPy comes from the Pyodide CDN at run time."""
    return built_once(tmp_path_factory, worker_id, "cdn")[0]


@pytest.fixture(scope="session")
def fake_numpy_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder that looks like --pyodide-packages input but whose NumPy wheel holds no numpy module.

    CI has no wasm NumPy. This wheel is installable, so the site gets as far as importing numpy and fails
    there: enough to check where every request goes, not that NumPy works (the end-to-end test does that).
    """
    folder = tmp_path_factory.mktemp("fake-pyodide-packages")
    with zipfile.ZipFile(folder / "numpy-2.2.5-cp313-cp313-pyodide_2025_0_wasm32.whl", "w") as zf:
        zf.writestr("numpy-2.2.5.dist-info/METADATA", "Metadata-Version: 2.1\nName: numpy\nVersion: 2.2.5\n")
        zf.writestr("numpy-2.2.5.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: false\n")
        zf.writestr("numpy-2.2.5.dist-info/RECORD", "")
    return folder


@pytest.fixture(scope="session")
def fake_vendored_site(tmp_path_factory: pytest.TempPathFactory, worker_id: str,
                       fake_numpy_dir: Path) -> tuple[Path, str]:
    return built_once(tmp_path_factory, worker_id, "fake-vendored", "--pyodide-packages", str(fake_numpy_dir))


# The newest Bokeh document's model-map nodes (name and value of each part of the model), and every data source's
# columns as JSON (sorted: a document's model order is not part of what is compared); the model map's box on screen.
MAP_NODES_JS = """() => {
  const fig = [...Bokeh.documents.at(-1).all_models].find((m) => m.name === "model-map");
  const data = fig.renderers.find((r) => r.name === "nodes").data_source.data;
  const get = (k) => Array.from(data instanceof Map ? data.get(k) : data[k]);
  return { name: get("name"), value: get("value") };
}"""
ALL_SOURCES_JS = """() => [...Bokeh.documents.at(-1).all_models]
  .filter((m) => m.constructor.__name__ === "ColumnDataSource")
  .map((m) => {
    const entries = m.data instanceof Map ? [...m.data.entries()] : Object.entries(m.data);
    return JSON.stringify(entries.map(([k, v]) => [k, Array.from(v)]).sort());
  })
  .sort()"""
MAP_BOX_JS = """() => {
  const boxes = [];
  const walk = (v) => {
    if (v.model?.name === "model-map") boxes.push(v.el.getBoundingClientRect().toJSON());
    for (const c of v.child_views ?? []) walk(c);
  };
  for (const root of Bokeh.index.roots) walk(root);
  return boxes;
}"""



def token_box_height(page) -> float:  # noqa: ANN001 - a Playwright page
    """The height of the token strip's first box. The app's stylesheet (py/playground/views/styles.css) draws each
    token as a box a finger can press, at least 44 px tall; without it, a token is one line of text (~20 px)."""
    box = page.locator(".pg-tokens label").first.bounding_box()
    return box["height"] if box else 0.0


class Visit:
    """One browser context with every request recorded; requests to other hosts are aborted (no internet in
    tests). A context manager: ``with Visit(browser, url) as visit: visit.open()`` closes the context after."""

    def __init__(self, browser: object, url: str, service_workers: str = "allow",
                 allowed: tuple[str, ...] = ("http://127.0.0.1:",), screen: tuple[int, int, bool] = (1280, 1000, False),
                 intercept: bool = True) -> None:
        self.base = url
        self.allowed = allowed  # what may be requested: everything else is aborted and recorded
        width, height, touch = screen  # a phone: (360, 740, True)
        self.context = browser.new_context(  # type: ignore[attr-defined]
            viewport={"width": width, "height": height}, has_touch=touch, is_mobile=touch,
            service_workers=service_workers)
        self.page = self.context.new_page()
        self.requests: list[str] = []
        self.external: list[str] = []
        self.console: list[str] = []
        if intercept:  # False: nothing between the page and the host (Playwright's routes also bypass the HTTP cache)
            self.context.route("**/*", self._route)
        self.page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        self.page.on("pageerror", lambda e: self.console.append(f"pageerror: {e}"))
        # The worker's fetches also pass the context routes; record them for the assertions.
        self.page.on("request", lambda r: self.requests.append(r.url))
        # When each request was made and when its response had fully arrived (monotonic seconds), by URL: the
        # workers' too, which their own resource timing entries would split between threads.
        self.started: dict[str, float] = {}
        self.finished: dict[str, float] = {}
        self.page.on("request", lambda r: self.started.setdefault(r.url, time.monotonic()))
        self.page.on("requestfinished", lambda r: self.finished.setdefault(r.url, time.monotonic()))

    def _route(self, route: object) -> None:
        url = route.request.url  # type: ignore[attr-defined]
        if url.startswith(self.allowed):
            route.continue_()  # type: ignore[attr-defined]
        else:
            self.external.append(url)
            route.abort()  # type: ignore[attr-defined]

    def open(self, path: str = "index.html") -> None:
        self.page.goto(self.base + path)
        self._settle()

    def reload(self) -> None:
        self.page.reload()
        self._settle()

    def _settle(self) -> None:
        """Wait until the page is ready or shows its error panel."""
        self.page.wait_for_selector("body[data-ready='1'], body[data-error='1']", state="attached",
                                    timeout=READY_TIMEOUT_MS)

    def snapshot_outcome(self) -> str:
        """After a start without a memory snapshot: wait until the page has made one; "saved" or "failed"."""
        self.wait_js("['saved', 'failed'].includes(document.body.dataset.snapshot)", timeout_s=120)
        return self.page.evaluate("document.body.dataset.snapshot")

    def wait_js(self, expression: str, timeout_s: float = 60) -> object:
        """Poll a JS expression until truthy. (Playwright's wait_for_function evaluates a string inside the page,
        which the site's CSP rightly forbids; page.evaluate goes through DevTools and is not affected.)"""
        import time

        deadline = time.monotonic() + timeout_s
        while True:
            value = self.page.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {expression}")
            time.sleep(0.05)

    def info(self) -> dict:
        return self.page.evaluate("window.siteInfo")

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path))
        return path

    def close(self) -> None:
        self.context.close()

    def __enter__(self) -> Visit:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@pytest.fixture(scope="session")
def engines(browser: object) -> Iterator[Engines]:
    """Pages in Chromium, Firefox and WebKit through one interface (engines.py); each engine starts when first used."""
    with engines_session(browser) as started:
        yield started


def serve(site: Path):  # noqa: ANN201 - a context manager yielding the base URL
    return serving(site)


def pyodide_packages_dir() -> Path | None:
    value = os.environ.get("PYODIDE_PACKAGES")
    return Path(value) if value else None


# Lessons may be fetched from any port of 127.0.0.1 (build.py --lesson-origin): test_lessons_e2e.py serves one from
# another port, another origin.
LESSON_ORIGIN = "http://127.0.0.1:*"


@pytest.fixture(scope="session")
def vendored_site(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """The site built with PYODIDE_PACKAGES (a real wasm NumPy), for end-to-end tests; lessons allowed from
    LESSON_ORIGIN."""
    packages = pyodide_packages_dir()
    if packages is None:
        pytest.skip("set PYODIDE_PACKAGES=DIR (folder with the pyodide_2025_0 NumPy wheel) to run")
    if not packages.is_dir():
        pytest.fail(f"PYODIDE_PACKAGES={packages} is not a folder")
    return built_once(tmp_path_factory, worker_id, "vendored", "--pyodide-packages", str(packages),
                      "--lesson-origin", LESSON_ORIGIN)[0]
