"""Fixtures shared by every browser test: one headless Debian Chromium for the whole session.

One Playwright instance only: a second sync_playwright() started while the first is alive fails ("Sync API
inside the asyncio loop"), so the playground and site tests share this browser.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.engines import CHROMIUM, CHROMIUM_ARGS


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    playwright = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is not installed: apt-get install chromium (tests/run.sh does it as root)")
    with playwright.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()
