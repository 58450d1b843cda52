"""Fixtures for the playground's browser tests: a `panel serve` of the app and a headless Chromium page."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve(script: Path, log_name: str):
    """`panel serve` of `script` on a free port; yields its app's URL, and stops the server afterwards."""
    port = _free_port()
    # One BLAS thread, as in Pyodide: on a busy machine OpenBLAS's threads make a 32-token forward pass ~100x slower.
    env = dict(os.environ, PYTHONPATH=str(ROOT / "py"), OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    ARTIFACTS.mkdir(exist_ok=True)
    log_path = ARTIFACTS / log_name
    log = open(log_path, "w")  # noqa: SIM115 - closed below, after the server stops
    server = subprocess.Popen(
        [sys.executable, "-m", "panel", "serve", str(script), "--port", str(port),
         "--address", "127.0.0.1", "--allow-websocket-origin", f"127.0.0.1:{port}"],
        env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
    )
    url = f"http://127.0.0.1:{port}/{script.stem}"
    try:
        deadline = time.monotonic() + 120  # a loaded machine starts two servers and two browsers at once
        while time.monotonic() < deadline:
            try:
                # Refused at once until the server listens; then its first page builds an app, which takes seconds
                # on a loaded machine: a short timeout would only make it build one app per try.
                urllib.request.urlopen(url, timeout=60)
                break
            except OSError:
                if server.poll() is not None:
                    pytest.fail(f"panel serve exited: see {log_path}")
                time.sleep(0.25)
        else:
            pytest.fail(f"panel serve did not answer within 120 s: see {log_path}")
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


@pytest.fixture(scope="session")
def app_url(worker_id: str):
    yield from serve(ROOT / "py/playground/app.py", f"panel_serve-{worker_id}.log")  # one server per xdist worker


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1000, "height": 900})
    page = context.new_page()
    page.dialogs = []  # every alert/confirm the page tries to open: an XSS payload must never produce one
    page.on("dialog", lambda dialog: (page.dialogs.append(dialog.message), dialog.dismiss()))
    page.errors = []
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    yield page
    context.close()


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist's load scheduling starts each worker on a contiguous chunk of the collection: with the longest
    # tests first (below), one worker would get them all. One test at a time instead (its --maxschedchunk=1, "for a
    # small number of slow tests"): a worker is handed the next test as it finishes one. An explicit value stays.
    if getattr(config.option, "maxschedchunk", 0) is None:
        config.option.maxschedchunk = 1


# The longest tests, longest first (each walks every view of a page, or trains, or runs a journey of several steps).
LONGEST = ("test_every_view_fits_and_axe_finds_nothing_serious",
           "test_a_12_by_12_model_is_readable_in_every_view_it_changes",
           "test_a_link_trains_the_repeat_task_and_its_model_joins_every_view",
           "test_keyboard_alone_selects_a_token_a_view_a_head_and_generates",
           "test_embedded_views_fit_their_frame",
           "test_a_link_restores_the_page_and_copy_link_embed_code_csv_and_chart_files")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest tests first, then the other browser tests, then the rest. pytest-xdist hands tests to its workers
    in this order, so the long ones start early on both workers and the short ones fill in around them: a long test
    started last would leave one worker running it alone, the part lasting that much longer."""
    here = Path(__file__).parent

    def rank(item: pytest.Item) -> int:
        if here not in item.path.parents:
            return len(LONGEST) + 2
        name = getattr(item, "originalname", item.name)
        if name in LONGEST:
            return LONGEST.index(name)
        return len(LONGEST) + ("browser" not in getattr(item, "fixturenames", ()))

    items.sort(key=rank)  # stable: each rank keeps the collection's order
