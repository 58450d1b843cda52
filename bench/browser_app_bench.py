#!/usr/bin/env python3
"""The app benchmark (bench/app_bench.py) run inside the static site's worker, in headless Chromium.

    python bench/browser_app_bench.py --pyodide-packages .cache/pyodide-packages [--repeats 20]

Builds the site with a vendored wasm NumPy into a temporary folder, serves it on 127.0.0.1, waits for
`data-ready="1"`, then runs app_bench.rows() in the worker's Pyodide (the same code, the same models): time from a
prompt change to every view's sources updated, in the browser. Like the CPython figure, it excludes sending the
patch to the page. The issue's browser goal: p50 <= 150 ms.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "py"))
from site_bench import CHROMIUM, CHROMIUM_ARGS, settle  # noqa: E402 - the sibling benchmark's browser settings and wait

from sitebuild import cli, serve  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pyodide-packages", type=Path, required=True, metavar="DIR")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    source = (ROOT / "bench" / "app_bench.py").read_text().replace('if __name__ == "__main__":', "if False:")
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "site"
        if cli.main(["--site-dir", str(site), "--pyodide-packages", str(args.pyodide_packages)]) != 0:
            sys.exit("build failed")
        with serve.serving(site) as url, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(bypass_csp=True)  # wait_for_function evaluates a string, which the CSP forbids
            page.goto(url + "index.html")
            page.wait_for_selector('body[data-ready="1"]', timeout=180_000)
            # Measure the app at rest, as a learner meets it: after the snapshot worker (site/snapshot.js) and the
            # app's background building of the hidden tabs (playground.app) are done; both compete for the CPU.
            page.wait_for_function("document.body.dataset.snapshot !== 'saving'", timeout=180_000)
            settle(page)
            worker = page.workers[0]
            worker.evaluate("src => { self.sitePyodide.globals.set('bench_source', src); }", source)
            run = f'ns = {{}}; exec(bench_source, ns); ns["table"](ns["rows"]({args.repeats}))'
            text = worker.evaluate("code => self.sitePyodide.runPython(code)", run)
            run = f'ns = {{}}; exec(bench_source, ns); ns["catch_up_table"](ns["catch_up_rows"]({args.repeats}))'
            text += "\n" + worker.evaluate("code => self.sitePyodide.runPython(code)", run)
            rate = worker.evaluate("code => self.sitePyodide.runPythonAsync(code)",
                                   'ns = {}; exec(bench_source, ns); await ns["generation_rate"]()')
            raw = worker.evaluate("code => self.sitePyodide.runPython(code)",
                                  'ns = {}; exec(bench_source, ns); ns["model_generation_rate"]()')
            browser.close()
    print("In the browser (Pyodide 0.29.3 in a Web Worker, headless Chromium):")
    print(text)
    print(f"generation: slm.generate {raw:.0f} tokens/s; in the app, streamed with its pauses: {rate:.1f} tokens/s")


if __name__ == "__main__":
    main()
