"""The site's builder (py/sitebuild): its patches of upstream code, its size, and the facts it shares with the
site's JavaScript. No browser; the pinned wheels are fetched (and cached) like a build does."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from sitebuild import bundle, first_view, patches
from sitebuild.common import HERE
from sitebuild.lock import read_lock

PATCH_HEADER = re.compile(r"\ASubject: .+\n\nWhy: .+(\n  .+)*\nGain: .+(\n  .+)*\nUpstream: .+\nChecked by: .+\n", re.M)


def test_every_patch_applies_to_the_pinned_sources() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "build.py"), "--check-patches"], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "every patch applies to the pinned sources" in proc.stdout
    checked = re.findall(r"checked (\S+): (\d+) patches", proc.stdout)
    assert {name for name, _ in checked} == {"bokeh-3.9.2", "bokehjs-3.9.2", "panel-1.9.4", "param-2.4.2",
                                             "pyodide-0.29.3"}


def test_each_patch_says_why_what_it_gains_and_where_upstream() -> None:
    found = sorted(patches.PATCHES.glob("*/*.patch"))
    assert len(found) == 13
    for patch in found:
        assert re.match(r"\d{4}-[a-z0-9-]+\.patch$", patch.name), patch.name
        assert PATCH_HEADER.match(patch.read_text()), f"{patch}: header (Subject, Why, Gain, Upstream) missing"


def test_check_patches_lists_every_mismatch_with_its_hunk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two broken hunks in two distributions and a folder for another version: all three reported at once."""
    broken = tmp_path / "patches"
    shutil.copytree(patches.PATCHES, broken)
    glyphs = broken / "bokeh-3.9.2" / "0003-glyph-methods-without-generated-docs.patch"
    text = glyphs.read_text()
    second = text.index("@@ -66,17")  # a context line of the second hunk, changed as a new release might
    line = text.index("\n ", second) + 1
    glyphs.write_text(text[:line] + " # a line the pinned bokeh does not have" + text[text.index("\n", line):])
    param = broken / "param-2.4.2" / "0001-inherit-slots-from-defining-classes-only.patch"
    param.write_text(param.read_text().replace("-                new_value = getattr(new_param, slot)",
                                               "-                new_value = getattr(new_param, slot, None)"))
    (broken / "panel-1.9.4").rename(broken / "panel-1.9.3")
    monkeypatch.setattr(patches, "PATCHES", broken)

    problems = patches.check_patches(read_lock())
    assert problems == [
        "bokeh-3.9.2/0003-glyph-methods-without-generated-docs.patch: bokeh/plotting/_decorators.py: "
        "hunk #2 (line 64) does not match",  # where patch looked, after hunk #1 took out two lines
        "panel-1.9.3: build.lock pins panel 1.9.4, these patches are for 1.9.3",
        "param-2.4.2/0001-inherit-slots-from-defining-classes-only.patch: param/parameterized.py: "
        "hunk #1 (line 5106) does not match",
    ], problems


def test_the_build_stops_on_patches_for_another_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sitebuild.common import BuildError

    moved = tmp_path / "patches"
    shutil.copytree(patches.PATCHES, moved)
    (moved / "param-2.4.2").rename(moved / "param-2.4.1")
    monkeypatch.setattr(patches, "PATCHES", moved)
    with pytest.raises(BuildError, match=r"param-2.4.1: its patches are for param 2.4.1, build.lock pins 2.4.2"):
        patches.apply_patches(tmp_path, "param", "2.4.2")


def test_builder_modules_stay_small_and_hold_no_upstream_source() -> None:
    for module in sorted(HERE.glob("*.py")):
        lines = module.read_text().splitlines()
        assert len(lines) <= 400, f"{module.name}: {len(lines)} lines"
    # The upstream code the build changes lives in patch files, not in Python strings.
    text = "\n".join(m.read_text() for m in HERE.glob("*.py"))
    for upstream in ("process_example(cls)", "from . import chat", "_unpack_zipfile", "slot_overridden"):
        assert upstream not in text, upstream


def test_the_site_facts_are_written_once(cdn_site: Path) -> None:
    """Cache prefix, shell files, stages and CDN come from the build (manifest, site-facts.js), not from copies in
    the JavaScript."""
    manifest = json.loads((cdn_site / "build" / "manifest.json").read_text())
    facts = manifest["site"]
    js = (cdn_site / facts["facts"]).read_text()
    assert json.loads(js[js.index("{"):js.rindex("}") + 1]) == facts
    # The hand-written files of site/ (not what a build in place writes there from site/src/), and those bundles.
    bundles = sorted(bundle.BUNDLES.values())
    hand_written = sorted(p.name for p in (ROOT / "site").iterdir()
                          if p.is_file() and p.name not in bundles and not p.name.startswith("."))
    assert sorted(facts["shell_files"]) == sorted([*hand_written, *bundles])
    assert all((cdn_site / name).read_text().startswith("// Written by build.py") for name in bundles)
    assert set(facts["pages"]) <= set(hand_written) and list(facts["stages"]) == ["runtime", "packages", "app"]
    assert {f["stage"] for f in manifest["files"].values()} == set(facts["stages"])
    for name in ("loader.js", "worker.js", "sw.js", "snapshot.js", "index.html", "embed.html"):
        text = (cdn_site / name).read_text()
        assert facts["cache_prefix"] not in text, name
        assert not [label for label in facts["stages"].values() if label in text], name
        assert facts["cdn"] not in text and "boot.py\", \"style.css" not in text, name


def test_zopfli_streams_inflate_to_their_input() -> None:
    """What a build with zopfli writes (the tests' own builds use zlib, SITE_DEFLATE): raw deflate streams that
    zlib inflates to the input, smaller than zlib's own at level 9 on text like the wheels'."""
    import zlib

    from sitebuild import zips

    if zips.zopfli_compress is None:
        pytest.fail("zopfli is not installed: pip install -r requirements.txt")
    data = (ROOT / "site" / "src" / "worker" / "worker.js").read_bytes()
    stream = zips.zopfli_deflate(data)
    assert zlib.decompress(stream, -15) == data
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    assert len(stream) < len(packer.compress(data) + packer.flush())



@pytest.fixture(scope="module")
def python_without_panel(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A newcomer's Python: this one's interpreter in a venv of its own, without Panel, Bokeh, param or NumPy."""
    bare = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    return str(first_view.venv_python(bare))


def test_the_first_view_renders_where_the_pins_are(tmp_path: Path, python_without_panel: str) -> None:
    """The build's own Python when it has the pins; else .cache/render-venv when it was made with build.lock's
    pins and runs; else the builder makes it (and makes it again when a pin changes)."""
    pins = first_view.pins(read_lock())
    assert {n: pins[n] for n in first_view.RENDERS_WITH} == {"numpy": "2.2.5", "panel": "1.9.4", "bokeh": "3.9.2",
                                                               "param": "2.4.2"}
    venv = tmp_path / "render-venv"
    assert first_view.choose(sys.executable, pins, venv) == ("this", sys.executable)
    where, why = first_view.choose(python_without_panel, pins, venv)
    assert where == "make" and "lacks numpy 2.2.5 (it has none), panel 1.9.4 (it has none)" in why, why

    # a venv made with these pins: here a stand-in whose python is this one (which has them)
    made = first_view.venv_python(venv)
    made.parent.mkdir(parents=True)
    made.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    made.chmod(0o755)
    (venv / first_view.PINS_FILE).write_text(json.dumps(pins))
    assert first_view.choose(python_without_panel, pins, venv) == ("venv", str(made))
    assert first_view.choose(python_without_panel, {**pins, "jinja2": "3.1.7"}, venv)[0] == "make"
    assert first_view.choose(python_without_panel, {**pins, "panel": "1.9.5"}, venv)[0] == "make"
    (venv / first_view.PINS_FILE).write_text("{")  # left by an interrupted build
    assert first_view.choose(python_without_panel, pins, venv)[0] == "make"
    made.unlink()
    (venv / first_view.PINS_FILE).write_text(json.dumps(pins))
    assert first_view.choose(python_without_panel, pins, venv)[0] == "make"


def test_a_python_without_panel_renders_the_same_first_view(tmp_path: Path, python_without_panel: str) -> None:
    """The builder's own environment (.cache/render-venv, made by pip once; later builds reuse it) renders the
    same bytes as a Python that has the pins."""
    from sitebuild.assemble import APP_STYLESHEET, PANEL_CDN_ROOT

    pins = first_view.pins(read_lock())
    notes: list[str] = []
    python = first_view.render_python(pins, notes.append, python=python_without_panel, wheels=ROOT / ".cache/wheels")
    assert python == str(first_view.venv_python(first_view.RENDER_VENV)), notes
    assert first_view.lacks(python, pins) is None
    assert first_view.render_python(pins, notes.append, python=python_without_panel) == python
    assert len(notes) <= 1, notes  # made at most once
    rendered = {}
    for name, by in (("venv", python), ("this", sys.executable)):
        out = tmp_path / f"{name}.json"
        proc = first_view.render_in(by, out, ROOT / "py", PANEL_CDN_ROOT, APP_STYLESHEET)
        assert proc.returncode == 0, proc.stderr
        rendered[name] = out.read_bytes()
    assert rendered["venv"] == rendered["this"]
