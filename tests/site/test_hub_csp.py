"""The pages' connect-src for models opened from the Hub (no build: check_csp on copies of the two pages): the Hub's
hosts as py/playground/hub.py names them, a --hub-mirror's origin, the CDN only when asked, and a bad mirror refused."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "py"))
from playground import hub  # noqa: E402
from sitebuild.assemble import PAGES, PYODIDE_CDN_ORIGIN, check_csp  # noqa: E402
from sitebuild.common import BuildError  # noqa: E402


def connect_src(path: Path) -> list[str]:
    return re.search(r"connect-src ('self'[^;\"]*)", path.read_text()).group(1).split()


def test_connect_src_lists_the_hub_and_the_mirror(tmp_path):
    for page in PAGES:
        shutil.copyfile(ROOT / "site" / page, tmp_path / page)
    check_csp(tmp_path, False, ["https://mirror.example.org/hf/", "https://mirror.example.org"])
    for page in PAGES:
        assert connect_src(tmp_path / page) == ["'self'", hub.DEFAULT_HUB, *hub.REDIRECT_HOSTS,
                                                "https://mirror.example.org"], page
    check_csp(tmp_path, True)  # run again on its own output: the CDN added, the mirror gone
    assert connect_src(tmp_path / PAGES[0]) == ["'self'", PYODIDE_CDN_ORIGIN, hub.DEFAULT_HUB, *hub.REDIRECT_HOSTS]
    with pytest.raises(BuildError, match="--hub-mirror 'mirror.example.org'"):
        check_csp(tmp_path, False, ["mirror.example.org"])
