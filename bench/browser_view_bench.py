#!/usr/bin/env python3
"""bench/view_bench.py (tab click → view built, 12 × 12 and 30 × 9 heads) inside the static site's worker, in
headless Chromium.

    python bench/browser_view_bench.py --pyodide-packages DIR [--repeats 5]

Builds the site into a temporary folder as bench/browser_app_bench.py does, waits for ready and the hidden views,
puts tests/playground/big_models.py into the worker's Python as the module `big_models`, and awaits
view_bench.report() there. Like the CPython figure it stops before the patch reaches the page.
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

# The models as a module of the worker's Python, then the bench's own code (its __main__ block left out).
SETUP = """
import sys, types
module = types.ModuleType("big_models")
exec(models_source, module.__dict__)
sys.modules["big_models"] = module
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pyodide-packages", type=Path, required=True, metavar="DIR")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    models = (ROOT / "tests" / "playground" / "big_models.py").read_text()
    source = (ROOT / "bench" / "view_bench.py").read_text().replace('if __name__ == "__main__":', "if False:")
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "site"
        if cli.main(["--site-dir", str(site), "--pyodide-packages", str(args.pyodide_packages)]) != 0:
            sys.exit("build failed")
        with serve.serving(site) as url, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(bypass_csp=True)
            page.goto(url + "index.html")
            page.wait_for_selector('body[data-ready="1"]', timeout=180_000)
            page.wait_for_function("document.body.dataset.snapshot !== 'saving'", timeout=180_000)
            settle(page)
            worker = page.workers[0]
            worker.evaluate("([m, s]) => { self.sitePyodide.globals.set('models_source', m); "
                            "self.sitePyodide.globals.set('bench_source', s); }", [models, source])
            worker.evaluate("code => self.sitePyodide.runPython(code)", SETUP)
            text = worker.evaluate("code => self.sitePyodide.runPythonAsync(code)",
                                   f'ns = {{}}; exec(bench_source, ns); await ns["report"]({args.repeats})')
            browser.close()
    print("In the browser (Pyodide in a Web Worker, headless Chromium):")
    print(text)


if __name__ == "__main__":
    main()
