"""The portable edition (build/transformer-playground.html, written by site/portable.js) and the start-ups from an
opaque origin it shares with embed.html in a sandboxed iframe.

CI (no wasm NumPy): the file's format, and that each start-up gets as far as importing NumPy (the fake wheel's
missing module) with no request leaving the file or the site. With PYODIDE_PACKAGES: the whole playground from
file:// with every request refused, "Save for offline use", and both kinds of iframe. Screenshots in
artifacts/site/.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import re
import shutil
import time
from pathlib import Path

import pytest
from test_engines_e2e import generate as generate_in
from test_engines_e2e import show_tab

from conftest import Visit, run_build, serve, token_box_height
from testkit.engines import ENGINES, Engines

PORTABLE = "build/transformer-playground.html"
# What a file:// page may load: itself, and the blob: URLs it makes of what it embeds.
LOCAL = ("file:", "blob:", "data:")
# What the file embeds: what the page and the worker load, not what only a server uses.
SERVER_ONLY = {"index.html", "embed.html", "sw.js", "snapshot.js", "portable.js", "fetcher.js", "build/manifest.json",
               "build/site-facts.js"}


def parse_portable(path: Path) -> tuple[dict, dict[str, bytes], str]:
    """(index, path -> decoded bytes, the page without its data blocks), read independently of loader.js."""
    html = path.read_text()
    index = json.loads(re.search(r'<script type="application/json">(.*?)</script>', html, re.S).group(1))
    blocks = dict(re.findall(r'<script type="application/octet-stream" id="([^"]+)">([^<]*)</script>', html))
    files = {}
    for part in index["parts"]:
        stored = base64.b64decode(blocks[part["id"]], validate=True)
        files[part["path"]] = gzip.decompress(stored) if part["encoding"] == "gzip" else stored
    shell = re.sub(r'<script type="application/(json|octet-stream)"[^>]*>.*?</script>\n?', "", html, flags=re.S)
    return index, files, shell


def csp_of(html: str) -> str:
    return re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html).group(1)


# ----------------------------------------------------------------------------------------------- the file


def test_the_portable_file_embeds_the_site_checked_and_compressed(fake_vendored_site: tuple[Path, str]) -> None:
    site = fake_vendored_site[0]
    index, files, shell = parse_portable(site / PORTABLE)
    manifest = json.loads((site / "build" / "manifest.json").read_text())
    # Each file once (compressed below), not also its gzip copy for hosts that send wasm or scripts uncompressed.
    assert set(files) == set(manifest["files"]) - SERVER_ONLY - set(manifest["site"]["gzip_copies"].values())
    for part in index["parts"]:
        data = files[part["path"]]
        assert hashlib.sha256(data).hexdigest() == part["sha256"] and len(data) == part["size"], part["path"]
        if part["path"] != "build/pyodide-lock.json":
            assert data == (site / part["path"]).read_bytes(), part["path"]  # the served bytes, unchanged
        assert part["encoding"] == ("gzip" if re.search(r"\.(wasm|m?js|json|css|py|svg)$", part["path"])
                                    else "identity"), part["path"]
    lock = json.loads(files["build/pyodide-lock.json"])
    assert all(p["file_name"].startswith("wheels/") for p in lock["packages"].values())
    assert index["manifest"]["remote"] == {} and index["manifest"]["build_id"] == manifest["build_id"]
    # A strict CSP: the one inline script by its hash, blob: URLs of what the page embeds, no network, no eval.
    csp = csp_of(shell)
    assert "default-src 'none'" in csp and "connect-src blob: data:;" in csp and "'unsafe-eval'" not in csp
    inline = re.findall(r"<script type=\"module\">(.*?)</script>", shell, re.S)
    assert inline == [(site / "loader.js").read_text()]
    digest = base64.b64encode(hashlib.sha256(inline[0].encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}' blob: 'wasm-unsafe-eval';" in csp
    assert not re.search(r"""(src|href)=["'](?!data:)""", shell), "the page must not name another file"


def test_no_portable_file_without_vendored_numpy(cdn_site: Path, tmp_path: Path) -> None:
    assert not (cdn_site / PORTABLE).exists()
    proc = run_build(tmp_path / "site")
    assert proc.returncode == 0
    said = [line for line in proc.stdout.splitlines() if "portable file" in line]
    assert said == [f"[build] no portable file ({PORTABLE}): numpy is not vendored (--pyodide-packages DIR)"], said


def test_the_hosted_page_assembles_the_same_file(browser: object, fake_vendored_site: tuple[Path, str]) -> None:
    """portable.js in the browser, on the files a visit of the hosted site reads (what "Save for offline use"
    does), writes the file the build wrote: the same page and index, and the same files in it."""
    site = fake_vendored_site[0]
    with serve(site) as url, Visit(browser, url) as visit:
        visit.open()  # ends on the fake NumPy's error; the files are all there
        html = visit.page.evaluate("""async () => {
            const { assemble } = await import("./portable.js");
            const manifest = await (await fetch("build/manifest.json")).json();
            const read = async (u) => new Uint8Array(await (await fetch(u)).arrayBuffer());
            return assemble({ manifest, read });
        }""")
    saved = site.parent / "saved.html"
    saved.write_text(html)
    assert parse_portable(saved) == parse_portable(site / PORTABLE)


# ---------------------------------------------------------------------------------- opaque-origin start-ups


def copy_of_portable(site: Path, folder: Path) -> Path:
    """The file on its own in another folder, as on a USB stick."""
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(site / PORTABLE, folder / "transformer-playground.html"))


@pytest.mark.parametrize("engine", ENGINES)
def test_portable_file_from_disk_gets_to_numpy_with_no_request(engines: Engines, engine: str,
                                                               fake_vendored_site: tuple[Path, str],
                                                               tmp_path: Path) -> None:
    """Every request refused, the fake NumPy's file: the page decodes and checks what it embeds, starts the
    worker from a blob, boots Pyodide and installs every wheel from memory, and stops at `import numpy`."""
    path = copy_of_portable(fake_vendored_site[0], tmp_path / "stick")
    with engines.page(engine, local=False) as page:
        page.open(path.as_uri() + "?view=attention")
        page.screenshot("ci-portable-fake-numpy")
        assert "No module named 'numpy'" in (page.text("#error-detail") or ""), (page.text("#error"), page.console)
        assert page.external == [], page.external
        assert page.evaluate("() => document.getElementById('offline').getClientRects().length") == 0


def course_page(folder: Path, site_url: str, sandbox: str | None) -> Path:
    """A course page on another origin that embeds the attention view in an iframe."""
    attribute = f' sandbox="{sandbox}"' if sandbox is not None else ""
    (folder / "course.html").write_text(
        f'<!doctype html><html lang="en"><title>Course</title><h1>Week 3: attention</h1>'
        f'<iframe{attribute} src="{site_url}embed.html?view=attention&prompt=the+cat+chased+the+dogs" '
        f'width="900" height="640" title="Transformer playground"></iframe></html>')
    return folder / "course.html"


def embedded_frame(visit: Visit) -> object:
    """The iframe's frame, once its page is ready or shows its error panel."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        frame = next((f for f in visit.page.frames if "embed.html" in f.url), None)
        if frame and frame.evaluate("document.body?.dataset.ready || document.body?.dataset.error"):
            return frame
        time.sleep(0.1)
    raise AssertionError(f"the embedded page did not finish; console: {visit.console}")


@pytest.mark.parametrize("sandbox", ["allow-scripts", None], ids=["sandboxed", "cross-origin"])
def test_embed_in_an_iframe_gets_to_numpy(browser: object, fake_vendored_site: tuple[Path, str], tmp_path: Path,
                                          sandbox: str | None) -> None:
    """In an iframe sandboxed without allow-same-origin (an opaque origin) the worker starts from a blob; in a plain
    cross-origin iframe as on the page itself. Both get as far as the fake NumPy, with nothing but errors of
    that."""
    with serve(fake_vendored_site[0]) as site_url, serve(tmp_path) as course_url, Visit(browser, course_url) as visit:
        course_page(tmp_path, site_url, sandbox)
        visit.page.goto(course_url + "course.html")
        frame = embedded_frame(visit)
        visit.screenshot(f"ci-iframe-{sandbox or 'plain'}-fake-numpy")
        assert "No module named 'numpy'" in frame.text_content("#error-detail"), visit.console
        assert visit.external == []


# ----------------------------------------------------------------------------------- with a real wasm NumPy


def generate(page: object) -> list[str]:
    page.locator("input[placeholder='the cat chased the dog']").fill("the dogs")
    page.get_by_role("button", name="Generate").click()
    page.locator(".pg-tok").first.wait_for(timeout=60_000)
    page.locator(".pg-cursor").wait_for(state="detached", timeout=60_000)
    return page.locator(".pg-tok").all_text_contents()


SOURCES_JS = """(column) => [...Bokeh.documents[0].all_models]
  .filter((m) => m.constructor.__name__ === "ColumnDataSource" && column in m.data)
  .map((m) => m.data[column].length)"""


def test_portable_file_runs_the_playground_from_disk_offline(browser: object, vendored_site: Path,
                                                             tmp_path: Path) -> None:
    path = copy_of_portable(vendored_site, tmp_path / "stick")
    assert path.stat().st_size <= 21_000_000
    with Visit(browser, path.as_uri(), allowed=LOCAL) as visit:
        visit.context.set_offline(True)
        visit.open("?view=attention&prompt=the+cat+chased+the+dogs+because+they")
        visit.screenshot("portable-01-attention")
        page = visit.page
        assert page.evaluate("document.body.dataset.ready") == "1", (page.text_content("#error"), visit.console)
        assert page.locator("input[placeholder='the cat chased the dog']").input_value().startswith("the cat")
        assert token_box_height(page) >= 44  # the app's stylesheet, from the file (a blob: URL) like Panel's own
        visit.wait_js(f"({SOURCES_JS})('weight').some((n) => n > 0)", timeout_s=30)
        for tab, column, shot in (("Residual stream", "value", "portable-02-residual"),
                                  ("Next token", "prob", "portable-03-next-token")):
            page.get_by_role("radio", name=tab, exact=True).check()
            visit.wait_js(f"({SOURCES_JS})('{column}').some((n) => n > 0)", timeout_s=30)
            visit.screenshot(shot)
        page.get_by_role("radio", name="Block", exact=True).check()
        page.get_by_role("button", name="Switch to the lesson model").click()
        page.get_by_text("The tables", exact=True).wait_for(timeout=30_000)  # the lesson model's tables
        visit.screenshot("portable-04-lesson")
        visit.open("?view=generate")  # again from the file, on the Generate view
        assert len(generate(page)) > 1
        visit.screenshot("portable-05-generated")
        assert visit.external == []
        assert not [c for c in visit.console if "pageerror" in c or "Content Security Policy" in c], visit.console


def test_save_for_offline_use_downloads_the_built_file(browser: object, vendored_site: Path, tmp_path: Path) -> None:
    with serve(vendored_site) as url, Visit(browser, url) as visit:
        visit.open()
        assert visit.page.evaluate("document.body.dataset.ready") == "1"
        with visit.page.expect_download(timeout=120_000) as download:
            visit.page.get_by_role("button", name="Save for offline use").click()
        saved = tmp_path / "saved" / download.value.suggested_filename
        download.value.save_as(saved)
        visit.page.get_by_text("Saved transformer-playground.html").wait_for(timeout=10_000)
        visit.screenshot("portable-06-saved")
    assert saved.name == "transformer-playground.html"
    assert parse_portable(saved) == parse_portable(vendored_site / PORTABLE)
    with Visit(browser, saved.as_uri(), allowed=LOCAL) as visit:
        visit.open("")
        assert visit.page.evaluate("document.body.dataset.ready") == "1", visit.console


# The Features view's status line and notes, joined (they sit in the app's shadow roots).
SUMMARIES_JS = """() => {
  const out = [];
  const walk = (root) => {
    for (const el of root.querySelectorAll(".pg-summary")) out.push(el.textContent.trim());
    for (const el of root.querySelectorAll("*")) if (el.shadowRoot) walk(el.shadowRoot);
  };
  walk(document);
  return out.join(" | ");
}"""


def test_a_file_saved_from_a_page_holding_an_sae_opens_with_it(browser: object, vendored_site: Path,
                                                               tmp_path: Path) -> None:
    """An SAE opened in the Features view is kept with its model (`sae: shipped`); "Save for offline use" puts it
    in the file, which opens on the Features view with that SAE indexed and its features listed."""
    import slm.sae as S
    from playground import sae_lab

    sae = S.SAE.init(64, 48, "topk", k=4, hook_name="blocks.0.hook_resid_post", seed=3)  # the shipped model's d
    (tmp_path / "sae.zip").write_bytes(sae_lab.sae_bytes(sae))
    opened = "48 features at blocks.0.hook_resid_post, indexed on"
    with serve(vendored_site) as url, Visit(browser, url) as visit:
        visit.open("index.html?view=features&model=shipped")
        assert visit.page.evaluate("document.body.dataset.ready") == "1", visit.console
        visit.page.locator("input[type=file][accept='.zip,.json,.safetensors']").set_input_files(
            str(tmp_path / "sae.zip"))
        visit.wait_js(f"({SUMMARIES_JS})().includes('a reload keeps it') && ({SUMMARIES_JS})().includes('{opened}')",
                      timeout_s=120)
        with visit.page.expect_download(timeout=120_000) as download:
            visit.page.get_by_role("button", name="Save for offline use").click()
        saved = tmp_path / "saved" / download.value.suggested_filename
        download.value.save_as(saved)
    index = json.loads(re.search(r'<script type="application/json">(.*?)</script>', saved.read_text(), re.S).group(1))
    assert [m["key"] for m in index["models"]] == ["sae: shipped"], index["models"]
    with Visit(browser, saved.as_uri(), allowed=LOCAL) as visit:
        visit.context.set_offline(True)
        visit.open("?view=features&model=shipped")
        assert visit.page.evaluate("document.body.dataset.ready") == "1", visit.console
        said = visit.wait_js(f"(() => {{ const s = ({SUMMARIES_JS})(); return s.includes('{opened}') && "
                             "s.includes('Where it fires most') && s; })()", timeout_s=120)
        visit.screenshot("portable-07-features-sae")
        assert "This model's SAE, saved in this file." in said, said
        assert visit.external == []
        assert not [c for c in visit.console if "pageerror" in c], visit.console


@pytest.mark.parametrize("sandbox", ["allow-scripts", None], ids=["sandboxed", "cross-origin"])
def test_embed_in_an_iframe_runs(browser: object, vendored_site: Path, tmp_path: Path, sandbox: str | None) -> None:
    with serve(vendored_site) as site_url, serve(tmp_path) as course_url, Visit(browser, course_url) as visit:
        course_page(tmp_path, site_url, sandbox)
        visit.page.goto(course_url + "course.html")
        frame = embedded_frame(visit)
        visit.page.wait_for_timeout(1000)
        visit.screenshot(f"iframe-{sandbox or 'plain'}")
        assert frame.evaluate("document.body.dataset.ready") == "1", (frame.text_content("#error"), visit.console)
        assert max(frame.evaluate(SOURCES_JS, "weight")) > 0
        assert not [c for c in visit.console if "pageerror" in c], visit.console


@pytest.mark.parametrize("engine", ENGINES)
def test_portable_file_runs_in_every_engine(engines: Engines, engine: str, vendored_site: Path,
                                            tmp_path: Path) -> None:
    """From file://, every request refused, in Chromium, Firefox and WebKit: ready with the query string's state,
    the attention and residual views have data, Generate gives tokens."""
    path = copy_of_portable(vendored_site, tmp_path / "stick")
    with engines.page(engine, local=False) as page:
        page.open(path.as_uri() + "?prompt=the+cat+chased+the+dogs+because+they")
        page.screenshot("portable-e2e-01-ready")
        assert page.evaluate("document.body.dataset.ready") == "1", (page.text("#error"), page.console)
        print(f"[{engine}] portable file: ready at {page.evaluate('window.siteInfo.timings.ready'):.0f} ms")
        assert page.evaluate("window.siteInfo.paths['simd-products']") == "on", page.console  # from the file's bytes
        attention = show_tab(page, "Attention", "weight")
        assert any(max((w for w in json.loads(ws) if w is not None), default=0) > 0 for ws in attention)
        page.screenshot("portable-e2e-02-attention")
        assert any(json.loads(values) for values in show_tab(page, "Residual stream", "value"))
        page.click("label", "Generate")
        frames, tokens = generate_in(page, "the dogs")
        assert len(tokens) > 1, frames
        page.screenshot("portable-e2e-03-generated")
        assert page.external == [], page.external
        assert not page.errors(), page.console
