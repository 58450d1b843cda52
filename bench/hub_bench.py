#!/usr/bin/env python3
"""A GPT-2-small-shaped model (124M parameters, random weights, float32 safetensors of ~500 MB) opened by name from a
local mirror with the Hub's URL layout, in headless Chromium: time from navigation to the model shown, the wasm
heap then, and the same after a reload (from Cache Storage, no request to the mirror) once the first visit has
built its views and saved its memory snapshot, as a returning visitor finds it.

    python bench/hub_bench.py --site DIR            # a site built with --pyodide-packages (a real wasm NumPy)
    python bench/hub_bench.py --pyodide-packages /work/pyodide-pkgs   # builds one into a temporary folder

The checkpoint is made once with `transformers` and kept in .cache/bench-hub/. Prints one JSON line per visit.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "py"))

from sitebuild.serve import serving  # noqa: E402
from testkit.engines import CHROMIUM  # noqa: E402
from testkit.hub_mirror import Mirror, gpt2_checkpoint  # noqa: E402
from testkit.hub_mirror import serving as mirror_serving  # noqa: E402

REPO = "bench/gpt2-small-shape"
STATUS_PY = ("import js\np = js.siteNamespace.get('playground')\n"
             "p.shelf.status if ('now the model' in p.shelf.status or 'Not' in p.shelf.status) else ''")


def checkpoint() -> dict[str, bytes]:
    folder = ROOT / ".cache" / "bench-hub"
    if not (folder / "model.safetensors").is_file():
        folder.mkdir(parents=True, exist_ok=True)
        gpt2_checkpoint(folder, n_layer=12, n_embd=768, n_head=12, n_positions=1024, model_vocab=50257)
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def visit(page, url: str, reload: bool = False) -> dict:  # noqa: ANN001 - a Playwright page
    t0 = time.monotonic()
    page.reload() if reload else page.goto(url)
    page.wait_for_selector("body[data-ready='1'], body[data-error='1']", state="attached", timeout=300_000)
    ready = time.monotonic() - t0
    worker = next(w for w in page.workers if w.url.endswith("/worker.js"))
    while not (status := worker.evaluate("(c) => sitePyodide.runPython(c)", STATUS_PY)):
        assert time.monotonic() - t0 < 600, "the model did not open within 10 minutes"
        time.sleep(0.2)
    shown = time.monotonic() - t0
    heap = worker.evaluate("sitePyodide._module.HEAP8.length")
    return {"ready_s": round(ready, 2), "model_shown_s": round(shown, 2), "wasm_heap_mb": round(heap / 1e6),
            "status": status}


def settle(page) -> None:  # noqa: ANN001 - a Playwright page
    """A returning visitor comes back to a visit that has finished its background work: every view built (for the
    model shown) and the memory snapshot for the next visit saved."""
    worker = next(w for w in page.workers if w.url.endswith("/worker.js"))
    while worker.evaluate("() => self.siteNamespace.get('playground').hidden_views_pending"):
        time.sleep(0.2)
    while page.evaluate("document.body.dataset.snapshot") == "saving":  # a polling wait_for_function: the CSP
        time.sleep(0.2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--site", type=Path)
    ap.add_argument("--pyodide-packages", type=Path)
    args = ap.parse_args()
    site = args.site
    if site is None:
        site = Path(tempfile.mkdtemp()) / "site"
        subprocess.run([sys.executable, str(ROOT / "build.py"), "--site-dir", str(site), "--pyodide-packages",
                        str(args.pyodide_packages)], check=True)
    files = checkpoint()
    print(json.dumps({"safetensors_mb": round(len(files["model.safetensors"]) / 1e6)}))
    from playwright.sync_api import sync_playwright

    with mirror_serving(Mirror({REPO: {"main": files}})) as mirror, serving(site) as url, sync_playwright() as pw:
        # A profile on disk, as a learner's browser has: an ephemeral context keeps Cache Storage in memory.
        browser = pw.chromium.launch_persistent_context(tempfile.mkdtemp(), executable_path=CHROMIUM,
                                                        args=["--headless=new", "--no-sandbox", "--disable-gpu"])
        page = browser.new_page()
        console: list[str] = []
        page.on("console", lambda m: console.append(m.text))
        query = urllib.parse.urlencode({"hf": REPO, "hub": mirror.url, "view": "models"})
        first = visit(page, f"{url}index.html?{query}")
        print(json.dumps({"visit": "first", **first, "mirror_requests": len(mirror.requests)}))
        settle(page)
        before = len(mirror.requests)
        again = visit(page, "", reload=True)
        print(json.dumps({"visit": "reload", **again, "mirror_requests": len(mirror.requests) - before}))
        print(json.dumps({"console": [c for c in console if "kept" in c or "Cache" in c]}))
        browser.close()


if __name__ == "__main__":
    main()
