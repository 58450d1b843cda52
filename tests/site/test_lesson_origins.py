"""Lessons from other sites: the pages' connect-src with `--lesson-origin` (check_csp on copies of the two pages, no
build), a wrong origin refused before the build downloads anything, and the page's reading of its own policy
(site/src/lesson/csp.js, run in Node), which decides whether the lesson panel fetches a lesson URL or names its
origin and the option. The browser side is in test_lessons_e2e.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT
from playground import hub
from sitebuild import cli
from sitebuild.assemble import PAGES, check_csp
from sitebuild.common import BuildError


def connect_src(path: Path) -> list[str]:
    return re.search(r"connect-src ('self'[^;\"]*)", path.read_text()).group(1).split()


def test_connect_src_lists_each_lesson_origin(tmp_path: Path) -> None:
    for page in PAGES:
        shutil.copyfile(ROOT / "site" / page, tmp_path / page)
    check_csp(tmp_path, False, [], ["https://courses.example.edu", "https://courses.example.edu/week-1/softmax.md",
                                    "http://127.0.0.1:*", "https://*.Example.org/", "https://huggingface.co"])
    hub_hosts = [hub.DEFAULT_HUB, *hub.REDIRECT_HOSTS]
    for page in PAGES:
        assert connect_src(tmp_path / page) == ["'self'", *hub_hosts, "https://courses.example.edu",
                                                "http://127.0.0.1:*", "https://*.example.org"], page
    check_csp(tmp_path, False)  # again on its own output, without the option: the origins are gone
    assert connect_src(tmp_path / PAGES[1]) == ["'self'", *hub_hosts]


@pytest.mark.parametrize("origin", ["courses.example.edu", "ftp://files.example.edu", "https://",
                                    "https://a.example.edu; script-src *", "https://a.example.edu'",
                                    "https://student@a.example.edu", "https://a.example.edu:port"])
def test_a_wrong_lesson_origin_is_refused(tmp_path: Path, origin: str) -> None:
    for page in PAGES:
        shutil.copyfile(ROOT / "site" / page, tmp_path / page)
    before = (tmp_path / PAGES[0]).read_text()
    with pytest.raises(BuildError, match=re.escape(f"--lesson-origin {origin!r}: give the origin")):
        check_csp(tmp_path, False, [], [origin])
    assert (tmp_path / PAGES[0]).read_text() == before


def test_build_py_stops_on_a_wrong_lesson_origin_before_building(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    site = tmp_path / "site"
    assert cli.main(["--site-dir", str(site), "--lesson-origin", "courses.example.edu"]) == 1
    assert "build.py: error: --lesson-origin 'courses.example.edu'" in capsys.readouterr().err
    assert not site.exists()


# Each case: (policy, page URL, lesson URL, whether the browser fetches it), by the CSP's rules for source lists.
CASES = [
    ("connect-src 'self'", "http://127.0.0.1:8000/index.html", "http://127.0.0.1:8000/my.md", True),
    ("connect-src 'self'", "http://127.0.0.1:8000/index.html", "http://127.0.0.1:8001/my.md", False),
    ("default-src 'self'", "http://127.0.0.1:8000/", "https://courses.example.edu/my.md", False),  # the fallback
    ("default-src *; connect-src 'self'", "http://127.0.0.1:8000/", "https://courses.example.edu/my.md", False),
    ("connect-src 'self' https://courses.example.edu", "http://127.0.0.1:8000/",
     "https://courses.example.edu/week-1/my.md", True),
    ("connect-src https://courses.example.edu", "https://site.example/", "http://courses.example.edu/my.md", False),
    ("connect-src http://courses.example.edu", "https://site.example/", "https://courses.example.edu/my.md", True),
    ("connect-src https://courses.example.edu", "https://site.example/", "https://www.courses.example.edu/a", False),
    ("connect-src https://*.example.edu", "https://site.example/", "https://www.example.edu/my.md", True),
    ("connect-src https://*.example.edu", "https://site.example/", "https://example.edu/my.md", False),
    ("connect-src http://127.0.0.1:*", "http://127.0.0.1:8000/", "http://127.0.0.1:51234/my.md", True),
    ("connect-src http://127.0.0.1:*", "http://127.0.0.1:8000/", "http://localhost:51234/my.md", False),
    ("connect-src https://a.example:8443", "https://site.example/", "https://a.example:8443/my.md", True),
    ("connect-src https://a.example:8443", "https://site.example/", "https://a.example/my.md", False),
    ("connect-src https://a.example/lessons/", "https://site.example/", "https://a.example/lessons/my.md", True),
    ("connect-src https://a.example/lessons/", "https://site.example/", "https://a.example/other.md", False),
    ("connect-src https:", "http://site.example/", "https://anything.example/my.md", True),
    ("connect-src 'none'", "https://site.example/", "https://site.example/my.md", False),
    ("img-src 'self'", "https://site.example/", "https://other.example/my.md", True),  # no connect-src, no default-src
]


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node")
def test_the_page_reads_its_policy_as_the_browser_applies_it(tmp_path: Path) -> None:
    module = tmp_path / "csp.mjs"  # an .mjs copy: Node loads it as an ES module
    module.write_text((ROOT / "site" / "src" / "lesson" / "csp.js").read_text())
    script = (f"import {{ mayFetch }} from {json.dumps(module.as_uri())};\n"
              f"const cases = {json.dumps([c[:3] for c in CASES])};\n"
              "const doc = (policy) => ({ querySelectorAll: () => [{ content: policy }] });\n"
              "console.log(JSON.stringify(cases.map(([policy, page, url]) =>"
              " mayFetch(new URL(url), doc(policy), new URL(page)))));\n"
              "console.log(JSON.stringify(mayFetch(new URL('https://x.example/'), { querySelectorAll: () => [] },"
              " new URL('https://site.example/'))));")
    proc = subprocess.run(["node", "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    got, without_policy = proc.stdout.split()
    assert dict(zip(CASES, json.loads(got), strict=True)) == {case: case[3] for case in CASES}
    assert json.loads(without_policy) is True  # a page without a policy may fetch anything

