#!/usr/bin/env python3
"""A prompt edit on a model of GPT-2 small's size (124M, random weights, opened from a local Hub mirror as
bench/hub_bench.py does), in headless Chromium: for each view, the seconds from a new prompt of 32 tokens (or the
longest run of words under it, <start> counted) to the open
view updated, in the page's worker (the state's forward pass and the view's update; like bench/view_bench.py it
stops before the patch reaches the page).

    python bench/real_size_edit_bench.py --site DIR [--edits 5]    # a site built with --pyodide-packages

The views not yet opened are built by the page once the model is shown; the bench waits for them, then opens each
view in turn and edits the prompt `--edits` times, alternating two prompts. Prints one JSON line per view and a
Markdown table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import urllib.parse
from pathlib import Path

from hub_bench import REPO, checkpoint, settle, visit

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--site", type=Path, required=True)
    ap.add_argument("--edits", type=int, default=5)
    args = ap.parse_args()
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
    print("\n| view | prompt tokens | edit → view updated, p50 (max) | goal |\n|---|---|---|---|")
    for r in rows:
        mark = "✓" if r["p50_s"] <= 2 else "✗"
        print(f"| {r['view']} | {r['tokens']} | {r['p50_s']:.2f} s ({r['max_s']:.2f} s) | ≤ 2 s {mark} |")


if __name__ == "__main__":
    main()
