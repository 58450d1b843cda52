"""The portable file against the hosted site, per browser engine: the file's size, and its time to ready from a
file:// URL against a cold visit of the hosted site (served on 127.0.0.1 with NumPy vendored), in the same engine.

Each visit starts with a fresh profile (no service worker, no memory snapshot: a cold start); the two kinds of visit
alternate, their order swapped every run; time to ready is the page's own `window.siteInfo.timings.ready` (ms since
the navigation started). Prints a Markdown table of medians (min-max). Engines come from py/testkit/engines.py
(Chromium with Playwright, Firefox ESR with puppeteer-core, WebKitGTK with Selenium on Xvfb).

    python bench/portable_bench.py [--runs 5] [--engines chromium firefox webkit] [--skip-build]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "py"))
from sitebuild import cli  # noqa: E402
from sitebuild.assemble import PORTABLE_FILE  # noqa: E402
from sitebuild.serve import serving  # noqa: E402
from testkit.engines import CHROMIUM, CHROMIUM_ARGS, ENGINES, engines_session  # noqa: E402

OUT = ROOT / "artifacts" / "bench" / "portable"


def visit(engines: object, engine: str, url: str, local: bool) -> float:
    """One cold visit; its time to ready in ms."""
    with engines.page(engine, local=local) as page:  # type: ignore[attr-defined]
        page.open(url)
        page.wait_ready()
        if page.evaluate("() => document.body.dataset.ready") != "1":
            raise RuntimeError(f"{engine} {url}: {page.text('#error-what')}: {page.text('#error-detail')}")
        return float(page.evaluate("() => window.siteInfo.timings.ready"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="visits of each kind per engine")
    ap.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    ap.add_argument("--pyodide-packages", type=Path, default=ROOT / ".cache" / "pyodide-packages")
    ap.add_argument("--skip-build", action="store_true", help="reuse artifacts/bench/portable/site")
    args = ap.parse_args()
    site = OUT / "site"
    built = args.skip_build or cli.main(["--site-dir", str(site), "--pyodide-packages",
                                          str(args.pyodide_packages)]) == 0
    if not built:
        sys.exit("build failed")
    stick = OUT / "stick"
    stick.mkdir(parents=True, exist_ok=True)
    portable = Path(shutil.copy(site / PORTABLE_FILE, stick / Path(PORTABLE_FILE).name))
    size = portable.stat().st_size
    hosted_payload = sum(f.stat().st_size for f in (site / "build").rglob("*")
                         if f.is_file() and f != site / PORTABLE_FILE)

    from playwright.sync_api import sync_playwright

    rows = []
    with sync_playwright() as p, serving(site) as url:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        with engines_session(chromium) as engines:
            for engine in args.engines:
                times: dict[str, list[float]] = {"hosted": [], "file": []}
                for run in range(args.runs):
                    order = ("hosted", "file") if run % 2 == 0 else ("file", "hosted")
                    for kind in order:
                        target = url + "index.html" if kind == "hosted" else portable.as_uri()
                        times[kind].append(visit(engines, engine, target, local=kind == "hosted"))
                    print(f"[bench] {engine} run {run + 1}: hosted {times['hosted'][-1]:.0f} ms, "
                          f"file {times['file'][-1]:.0f} ms", flush=True)
                rows.append((engine, times))
        chromium.close()

    def cell(values: list[float]) -> str:
        return f"{statistics.median(values) / 1000:.2f} s ({min(values) / 1000:.2f}-{max(values) / 1000:.2f})"

    print(f"\nportable file: {size / 1e6:.2f} MB (goal <= 21 MB); hosted site payload {hosted_payload / 1e6:.2f} MB")
    print(f"{args.runs} cold visits of each kind per engine, alternating, fresh profile each\n")
    print("| engine | hosted, cold | file:// | ratio (goal <= 1.3) |")
    print("|---|---|---|---|")
    for engine, times in rows:
        ratio = statistics.median(times["file"]) / statistics.median(times["hosted"])
        print(f"| {engine} | {cell(times['hosted'])} | {cell(times['file'])} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
