#!/usr/bin/env python3
"""A model of GPT-2 small's size (124M, random weights; the checkpoint of bench/hub_bench.py) in headless Chromium:
its three files dropped on the page, and prompt edits in every view.

    python bench/real_size_bench.py --site DIR [--drops 3] [--edits 5]    # a site built with --pyodide-packages

Drop: a fresh page with every view built, the files (config.json, model.safetensors of 498 MB, tokenizer.json)
dropped on it as a learner's file manager would (served beside the site and read into File objects first), timed to
the model in the selector and the worker idle (every built view updated for it), and once it is kept in the
browser's storage, a visit of its link (`model=`) to the model shown again. Edits: the model opened from a
local Hub mirror (`?hf=`), the views built; each view opened in turn and the prompt changed `--edits` times between
two prompts of 32 tokens (or the longest run of words under it, <start> counted), timed in the page's worker from
the new prompt to the open view updated (the state's forward pass and the view's update; like bench/view_bench.py
it stops before the patch reaches the page). Prints JSON lines and Markdown tables.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
import urllib.parse
from pathlib import Path

from hub_bench import REPO, checkpoint, settle, visit
from lab_bench import drop_and_show

from sitebuild.serve import serving
from testkit.engines import CHROMIUM
from testkit.hub_mirror import Mirror
from testkit.hub_mirror import serving as mirror_serving

# Run in the worker: the view opened, then the edits timed (the prompt's tokens counted with the model's tokenizer).
EDITS_PY = """
import time
from playground.models import encode_prompt
p = js.siteNamespace.get('playground')
state = p.state
state.view = view
p.views[view]
words = "the cat sat on the mat and the dog sat on the log while it rained".split()

def of_length(start):  # the longest run of words from `start` whose tokens (<start> included) are at most 32
    n = 1
    while len(encode_prompt(state.tokenizer, text := " ".join(words[(start + i) % len(words)] for i in range(n + 1)),
                            state.model.cfg.n_ctx).ids) <= 32:
        n += 1
    return " ".join(words[(start + i) % len(words)] for i in range(n))

prompts = [of_length(0), of_length(1)]
first = 1 if state.prompt == prompts[0] else 0  # every edit a change
seconds = []
for k in range(edits):
    t = time.perf_counter()
    state.prompt = prompts[(k + first) % 2]
    seconds.append(time.perf_counter() - t)
[seconds, len(state.tokens.ids)]
"""
VIEWS_PY = "from playground.app import VIEW_CLASSES\n[v for v in VIEW_CLASSES if v not in ('train', 'models')]"


def drop_run(browser, url: str, files: list[list[str]]) -> tuple[float, float]:  # noqa: ANN001 - a Playwright browser
    """Seconds from the drop to the model in the selector and the worker idle; from a visit of the model's link
    (`model=`, once it is kept) to the model shown again."""
    context, page, shown = drop_and_show(browser, url + "index.html?view=map", files, timeout_ms=300_000)
    start = time.monotonic() - shown  # the drop
    worker = next(w for w in page.workers if w.url.endswith("/worker.js"))
    model = worker.evaluate("() => self.siteNamespace.get('playground').state.model_name")
    # Then kept in the browser's storage (the status says so once the write is done).
    while "now the model" not in (status := worker.evaluate("() => self.siteNamespace.get('playground').shelf.status")):
        assert time.monotonic() - start < 300, status
        time.sleep(0.1)
    kept = time.monotonic() - start
    # A return visit by the model's link: the page reads it back from the storage.
    start = time.monotonic()
    page.goto(url + "index.html?" + urllib.parse.urlencode({"view": "map", "model": model}))
    page.wait_for_function("() => document.body.dataset.ready === '1'", timeout=180_000)
    worker = next(w for w in page.workers if w.url.endswith("/worker.js"))
    while worker.evaluate("() => self.siteNamespace.get('playground').state.model_name") != model:
        assert time.monotonic() - start < 300, "the kept model did not come back"
        time.sleep(0.05)
    page.wait_for_function("() => document.body.dataset.worker !== 'busy'", timeout=300_000)
    back = time.monotonic() - start
    context.close()
    print(json.dumps({"drop_to_shown_s": round(shown, 2), "model": model, "kept_s": round(kept, 2),
                      "reload_shown_s": round(back, 2), "status": status}), flush=True)
    return shown, back


def drops(site: Path, runs: int) -> list[tuple[float, float]]:
    from playwright.sync_api import sync_playwright

    checkpoint()
    folder = site / "bench-gpt2"  # served beside the site (the page's CSP allows only its own origin), removed after
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    names = ("config.json", "model.safetensors", "tokenizer.json")
    for name in names:
        (folder / name).symlink_to(Path(__file__).resolve().parents[1] / ".cache" / "bench-hub" / name)
    try:
        with serving(site) as url, sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM)
            seconds = [drop_run(browser, url, [[n, f"{url}bench-gpt2/{n}"] for n in names]) for _ in range(runs)]
            browser.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--site", type=Path, required=True)
    ap.add_argument("--drops", type=int, default=3)
    ap.add_argument("--edits", type=int, default=5)
    args = ap.parse_args()
    dropped = drops(args.site, args.drops)
    files = checkpoint()
    from playwright.sync_api import sync_playwright

    rows = []
    with mirror_serving(Mirror({REPO: {"main": files}})) as mirror, serving(args.site) as url, sync_playwright() as pw:
        browser = pw.chromium.launch_persistent_context(tempfile.mkdtemp(), executable_path=CHROMIUM,
                                                        args=["--headless=new", "--no-sandbox", "--disable-gpu"])
        page = browser.new_page()
        query = urllib.parse.urlencode({"hf": REPO, "hub": mirror.url, "view": "map"})
        print(json.dumps({"visit": "first", **visit(page, f"{url}index.html?{query}")}), flush=True)
        settle(page)
        worker = next(w for w in page.workers if w.url.endswith("/worker.js"))

        def run(code: str, **names: object) -> object:
            return worker.evaluate("([c, n]) => { const g = sitePyodide.toPy(n); g.set('js', self);"
                                   " try { return sitePyodide.runPython(c, {globals: g}).toJs(); }"
                                   " finally { g.destroy(); } }", [code, names])

        for view in run(VIEWS_PY):
            seconds, tokens = run(EDITS_PY, view=view, edits=args.edits)
            row = {"view": view, "tokens": tokens, "p50_s": round(statistics.median(seconds), 2),
                   "max_s": round(max(seconds), 2), "runs": [round(s, 2) for s in seconds]}
            print(json.dumps(row), flush=True)
            rows.append(row)
        browser.close()
    for i, (what, goal) in enumerate((("files dropped → the model shown and every view updated", "≤ 10 s"),
                                      ("its link on a return visit → the model shown from the storage", "≤ 5 s"))):
        if dropped:
            runs = [d[i] for d in dropped]
            print(f"\n{what}: median {statistics.median(runs):.2f} s ({', '.join(f'{x:.2f}' for x in runs)}); "
                  f"goal {goal}")
    print("\n| view | prompt tokens | edit → view updated, p50 (max) | goal |\n|---|---|---|---|")
    for r in rows:
        mark = "✓" if r["p50_s"] <= 2 else "✗"
        print(f"| {r['view']} | {r['tokens']} | {r['p50_s']:.2f} s ({r['max_s']:.2f} s) | ≤ 2 s {mark} |")


if __name__ == "__main__":
    main()
