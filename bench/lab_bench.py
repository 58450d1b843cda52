#!/usr/bin/env python3
"""The training lab and an own model in the built site, in headless Chromium (a real wasm NumPy needed):

    python bench/lab_bench.py --site DIR [--runs 3] [--skip-lab] [--skip-own] [--text] [--steps] [--link]
    # DIR: build.py --site-dir DIR

Lab: the repeat task's default preset (`view=train&task=repeat`, Start pressed once every view is built): seconds
from Start to the first status line with the measure >= 0.9, steps per second, and how long a click on a view tab
takes to be answered while it trains; with --text, 100 KB of own text to 20 % below the unigram loss; with --steps,
the preset's whole run in the page against the same run by the command line, in turn (the run's own seconds, from
the .npz each writes). Own model: a
random-weight Llama of the 15M TinyStories shape (d 288, 6 layers, 6 heads, vocabulary 32,000, context 256, SwiGLU
768) saved by `transformers` with a BPE tokenizer trained by `tokenizers`, dropped on the page: seconds from the
drop to the model shown, a prompt edit (32 tokens) to the views updated, Generate's tokens per second, the Patching
grid and its Stop, and the app worker's wasm memory at the end. Medians over the runs, each a fresh browser
context. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "py"))
from testkit.engines import CHROMIUM  # noqa: E402

STATUS = re.compile(r"step (\d+) / (\d+) · loss [\d.]+ · accuracy on the repeats ([\d.]+)")
# The files are fetched from the bench's server (a 60 MB argument would not survive the DevTools protocol).
DROP_JS = """async (files) => {
  const transfer = new DataTransfer();
  for (const [name, url] of files) transfer.items.add(new File([await (await fetch(url)).blob()], name));
  for (const type of ["dragenter", "dragover", "drop"]) {
    document.body.dispatchEvent(new DragEvent(type, {dataTransfer: transfer, bubbles: true, cancelable: true}));
  }
}"""


def serve(site: Path) -> str:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/index.html"


def llama_files(folder: Path, base: str) -> list[list[str]]:
    import torch
    import transformers

    from testkit.trained_tokenizers import llama_style

    torch.manual_seed(0)
    tokenizer = llama_style(legacy=True, vocab_size=32_000)
    cfg = transformers.LlamaConfig(vocab_size=32_000, hidden_size=288, intermediate_size=768, num_hidden_layers=6,
                                   num_attention_heads=6, num_key_value_heads=6, max_position_embeddings=256,
                                   bos_token_id=1, eos_token_id=2)
    transformers.LlamaForCausalLM(cfg).eval().save_pretrained(folder)
    tokenizer.save(str(folder / "tokenizer.json"))
    return [[p.name, f"{base}/{p.name}"] for p in sorted(folder.iterdir()) if p.is_file()]


def status_lines(page) -> list[str]:
    return page.locator(".pg-summary[role=status]").all_inner_texts()


# The arrival time of each message from the app's worker, kept by the page (an init script wraps Worker).
HEARD_JS = """(() => {
  const Original = window.Worker;
  window.__heard = [];
  window.Worker = function (url, options) {
    const worker = new Original(url, options);
    worker.addEventListener("message", () => window.__heard.push(performance.now()));
    return worker;
  };
})();"""
# A view tab clicked in the page, timed there: milliseconds from the click to the worker's first message after it
# (its answer), and to the first frame after the one that shows the view's heading (Panel renders into shadow
# roots, hence the walk).
SHOWN_JS = """async ([tab, heading]) => {
  const all = (root, sel, out = []) => { out.push(...root.querySelectorAll(sel));
    for (const e of root.querySelectorAll('*')) if (e.shadowRoot) all(e.shadowRoot, sel, out); return out; };
  const input = all(document, 'input[type=radio]').find(i => (i.closest('label')?.textContent || '').trim() === tab);
  const t0 = performance.now();
  input.click();
  return await new Promise((resolve) => {
    const tick = () => {
      const el = all(document, 'h2.pg-title').find(e => e.textContent === heading && e.getClientRects().length);
      const answered = () => (window.__heard.find((t) => t > t0) ?? NaN) - t0;
      if (el) requestAnimationFrame(() => resolve([performance.now() - t0, answered()]));
      else requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
  });
}"""
HEADINGS = {"Model map": "The model at a glance", "Train": "Train a transformer"}


def tab_click(page, n: int) -> tuple[float, float, float]:
    """The n-th click of Model map, Train, Model map, ...: seconds to the view on screen, to the worker idle, and to
    the worker's answer."""
    tab = ("Model map", "Train")[n % 2]
    start = time.monotonic()
    shown, answered = (ms / 1000 for ms in page.evaluate(SHOWN_JS, [tab, HEADINGS[tab]]))
    page.wait_for_function("() => document.body.dataset.worker !== 'busy'", timeout=30_000)
    return shown, time.monotonic() - start, answered


def lab_run(browser, url: str) -> dict:
    """From pressing Start (once every view is built, as a learner would find the page) to accuracy >= 0.9
    untouched; view-tab clicks (Model map and back) before Start, after 0.9 while it still trains (the Train view
    draws only while shown, so the status is read there), and once it is done."""
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    context.add_init_script(HEARD_JS)
    page = context.new_page()
    page.goto(url + "?view=train&task=repeat")
    page.wait_for_function("() => document.body.dataset.views === 'built'", timeout=180_000)
    page.wait_for_function("() => document.body.dataset.worker !== 'busy'", timeout=60_000)
    quiet = []
    for n in range(6):
        quiet.append(tab_click(page, n)[0])
        page.wait_for_timeout(500)
    page.get_by_role("button", name="Start", exact=True).click()
    pressed = time.monotonic()
    first = reached = None
    clicks = []
    while True:
        line = next((s for s in status_lines(page) if STATUS.search(s)), "")
        match = STATUS.search(line)
        now = time.monotonic()
        if match and first is None:
            first = (now, int(match.group(1)))
        if match and reached is None and float(match.group(3)) >= 0.9:
            reached = (now, int(match.group(1)))
        if reached and len(clicks) < 6 and "done" not in line and now - reached[0] > 1.0 * (len(clicks) + 1):
            clicks.append(tab_click(page, len(clicks)))
        if "done" in line or (first and now - first[0] > 300):
            break
        page.wait_for_timeout(100)
    steps = int(STATUS.search(line).group(1))
    # The same clicks once training is done: the Train view's charts as full, nothing training
    after = []
    for n in range(6):
        page.wait_for_timeout(1000)
        after.append(tab_click(page, n)[0])
    context.close()
    return {"to_0.9_s": None if reached is None else reached[0] - pressed, "step_at_0.9": reached and reached[1],
            "steps_per_s": (steps - first[1]) / (now - first[0]),
            "quiet_shown_s": statistics.median(quiet),
            "click_shown_s": statistics.median(c[0] for c in clicks) if clicks else None,
            "click_shown_worst_s": max((c[0] for c in clicks), default=None),
            "map_shown_s": statistics.median(c[0] for c in clicks[0::2]) if clicks else None,
            "train_shown_s": statistics.median(c[0] for c in clicks[1::2]) if clicks[1:] else None,
            # Only the Train clicks: under the Train view a chart update may be on its way when Model map is clicked
            "click_answered_s": statistics.median(c[2] for c in clicks[1::2]) if clicks[1:] else None,
            "click_answered_worst_s": max((c[2] for c in clicks[1::2]), default=None),
            "click_idle_s": statistics.median(c[1] for c in clicks) if clicks else None,
            "done_map_shown_s": statistics.median(after[0::2]), "done_train_shown_s": statistics.median(after[1::2])}


def link_run(browser, url: str) -> dict:
    """An instructor's lab link, `?view=train&task=repeat&autostart=1`: seconds from the page's `data-ready` to the
    status line's accuracy >= 0.9, left alone (compare lab_run's seconds from a Start press on a settled page)."""
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    page.goto(url + "?view=train&task=repeat&autostart=1")
    page.wait_for_function("() => document.body.dataset.ready === '1'", timeout=180_000, polling=20)
    ready = time.monotonic()
    reached = None
    while reached is None and time.monotonic() - ready < 300:
        match = next((m for m in map(STATUS.search, status_lines(page)) if m), None)
        if match and float(match.group(3)) >= 0.9:
            reached = time.monotonic() - ready
        page.wait_for_timeout(100)
    context.close()
    return {"link_to_0.9_s": reached}


def page_seconds(browser, url: str, folder: Path) -> float:
    """One run of the repeat preset started by the link (`autostart=1`), left alone until done: the run's own
    seconds (its steps and evaluations), read from the model the page downloads."""
    context = browser.new_context(viewport={"width": 1280, "height": 1000}, accept_downloads=True)
    page = context.new_page()
    page.goto(url + "?view=train&task=repeat&autostart=1")
    deadline = time.monotonic() + 600
    while not any(line.endswith(" done") for line in status_lines(page)):  # Panel's views are in shadow roots
        if time.monotonic() > deadline:
            raise TimeoutError("the run did not end within 10 minutes")
        page.wait_for_timeout(500)
    with page.expect_download() as download:
        page.get_by_role("button", name="Download the model (.npz)").click()
    path = folder / "page.npz"
    download.value.save_as(path)
    context.close()
    return run_seconds(path)


def cli_seconds(folder: Path) -> float:
    """The same run by `python -m slm.train --task repeat`, on one BLAS thread: its own seconds, from its .npz."""
    out = folder / "cli.npz"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "py"), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-m", "slm.train", "--task", "repeat", "--out", str(out), "--quiet"], env=env,
                   check=True, timeout=600)
    return run_seconds(out)


def run_seconds(npz: Path) -> float:
    with np.load(npz) as arrays:
        return float(json.loads(str(arrays["__meta__"]))["training"]["seconds"])


TEXT_STATUS = re.compile(r"step (\d+) / (\d+) · loss [\d.]+ · loss below the unigram baseline (-?[\d.]+)")


def text_run(browser, url: str) -> dict:
    """Your own text: 100 KB of this project's docs pasted, the text preset, Start pressed once every view is built
    → the first status line 20 % below the unigram loss (the issue's 'within 2 minutes')."""
    text = "".join(p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))).encode()[:100_000].decode(
        errors="ignore")
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    page.goto(url + "?view=train&task=text")
    page.wait_for_function("() => document.body.dataset.views === 'built'", timeout=180_000)
    page.get_by_label("Your text").fill(text)
    page.wait_for_function("() => document.body.dataset.worker !== 'busy'", timeout=60_000)
    page.get_by_role("button", name="Start", exact=True).click()
    pressed, reached, step = time.monotonic(), None, None
    while time.monotonic() - pressed < 300:
        match = next((m for m in map(TEXT_STATUS.search, status_lines(page)) if m), None)
        if match and float(match.group(3)) >= 0.2:
            reached, step = time.monotonic() - pressed, int(match.group(1))
            break
        page.wait_for_timeout(250)
    context.close()
    return {"text_0.2_s": reached, "text_step": step}


def drop_and_show(browser, page_url: str, files: list[list[str]], timeout_ms: int = 180_000) -> tuple:  # noqa: ANN001
    """A fresh page at `page_url` with every view built and `files` ([name, url]) dropped on it: its context, the
    page, and the seconds from the drop to the model in the selector and the worker idle."""
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    page.goto(page_url)
    page.wait_for_function("() => document.body.dataset.ready === '1'", timeout=180_000)
    page.wait_for_function("() => document.body.dataset.views === 'built'", timeout=180_000)
    start = time.monotonic()
    page.evaluate(DROP_JS, files)
    page.get_by_label("Model", exact=True).locator("option", has_text="loaded:").wait_for(state="attached",
                                                                                        timeout=timeout_ms)
    page.wait_for_function("() => document.body.dataset.worker !== 'busy'", timeout=timeout_ms)
    return context, page, time.monotonic() - start


def own_run(browser, url: str, files: list[list[str]]) -> dict:  # noqa: ANN001
    context, page, shown = drop_and_show(browser, url + "?view=map", files)
    edits = []
    for i in range(3):
        start = time.monotonic()
        page.get_by_label("Prompt").fill(("Once upon a time there was a little girl who " * 3)[: 120 + i])
        page.wait_for_timeout(50)
        page.wait_for_function("() => document.body.dataset.worker !== 'busy'", timeout=60_000)
        edits.append(time.monotonic() - start)
    print("own model:", {"shown_s": shown, "edits_s": edits}, flush=True)
    patching, stop = patching_run(page)
    page.get_by_role("radio", name="Generate", exact=True).check()  # a hidden view draws no tokens
    page.wait_for_function("() => document.body.dataset.worker !== 'busy'", timeout=60_000)
    page.get_by_role("button", name="Generate").click()
    # tokens/s from the first token to the last (the count stops growing for 3 s; a random model may stop early)
    seen: list[tuple[float, int]] = []
    count = page.locator(".pg-tok")
    while True:
        n = count.count()
        now = time.monotonic()
        if not seen or n != seen[-1][1]:
            seen.append((now, n))
        elif n and now - seen[-1][0] > 3:
            break
        if now - seen[0][0] > 120:
            break
        page.wait_for_timeout(20)
    firsts = [(t, n) for t, n in seen if n > 0]
    generation = (firsts[-1][1] - 1) / (firsts[-1][0] - firsts[0][0]) if len(firsts) > 1 else 0.0
    heap = wasm_heap(page)
    context.close()
    return {"shown_s": shown, "edit_s": statistics.median(edits), "tokens_per_s": generation, "heap_mb": heap,
            "patching_s": patching, "stop_s": stop}


def patching_run(page) -> tuple[float, float]:
    """The Patching view on the edited prompt (position 3 changed to "girl"; metric logit("was") − logit("time")):
    seconds from the last setting entered to the complete grid (the settings are entered with both metric words
    equal, which the view refuses at once); then a changed position restarts the grid, and Stop, pressed a second
    later, is timed until the page says the grid stopped."""
    page.get_by_role("radio", name="Patching", exact=True).check()
    page.wait_for_function("() => document.body.dataset.worker !== 'busy'", timeout=60_000)

    def enter(label: str, value: str) -> None:
        page.get_by_label(label, exact=True).fill(value)
        page.get_by_label(label, exact=True).press("Enter")
        page.wait_for_function("() => document.body.dataset.worker !== 'busy'", timeout=120_000)

    for label, value in (("Metric: logit of", "was"), ("minus logit of", "was"), ("Change position", "3"),
                         ("to the token", "girl")):
        enter(label, value)
    page.get_by_text("The two metric tokens are the same", exact=False).first.wait_for(timeout=30_000)
    start = time.monotonic()
    enter("minus logit of", "time")
    page.get_by_text("Patched run:", exact=False).first.wait_for(timeout=120_000)
    grid = time.monotonic() - start
    enter("Change position", "4")
    page.get_by_text("Running the patches", exact=False).first.wait_for(timeout=30_000)
    page.wait_for_timeout(1000)
    start = time.monotonic()
    page.get_by_role("button", name="Stop the grid", exact=True).click()
    page.get_by_text("Stopped:", exact=False).first.wait_for(timeout=30_000)
    stop = time.monotonic() - start
    print("patching:", {"grid_s": grid, "stop_s": stop}, flush=True)
    return grid, stop


def wasm_heap(page) -> float | None:
    """The app worker's wasm memory in MB (it only grows: the peak of the visit), read in the worker itself."""
    for worker in page.workers:
        size = worker.evaluate("() => self.sitePyodide ? self.sitePyodide._module.HEAP8.buffer.byteLength : null")
        if size:
            return size / 1e6
    return None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--site", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-lab", action="store_true")
    parser.add_argument("--skip-own", action="store_true")
    parser.add_argument("--text", action="store_true", help="also time the text task on 100 KB (minutes a run)")
    parser.add_argument("--link", action="store_true",
                        help="also time the lab link (autostart=1) from data-ready to accuracy 0.9, after each lab run")
    parser.add_argument("--steps", action="store_true",
                        help="also the repeat preset's whole run in the page and by `python -m slm.train`, in turn")
    args = parser.parse_args()
    url = serve(args.site)
    folder = args.site / "bench-llama"  # served beside the site, removed after
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    files = [] if args.skip_own else llama_files(folder, url.rsplit("/", 1)[0] + "/bench-llama")
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM)
            # with --link, each lab run (Start pressed) is followed by a link's run, so both see the same load
            labs = [] if args.skip_lab else [{**lab_run(browser, url), **(link_run(browser, url) if args.link else {})}
                                             for _ in range(args.runs)]
            texts = [text_run(browser, url) for _ in range(args.runs)] if args.text else []
            runs = [(page_seconds(browser, url, folder), cli_seconds(folder))
                    for _ in range(args.runs if args.steps else 0)]
            print("lab rows:", labs, flush=True)
            owns = [] if args.skip_own else [own_run(browser, url, files) for _ in range(args.runs)]
            browser.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    def med(rows: list[dict], key: str) -> str:
        values = [r[key] for r in rows if r[key] is not None]
        return f"{statistics.median(values):.2f}" if values else "never"

    def table(title: str, rows: list[dict], keys: tuple[tuple[str, str], ...]) -> None:
        if rows:
            print(f"\n| {title} | median |\n|---|---|")
            for key, what in keys:
                print(f"| {what} | {med(rows, key)} |")

    link_row = [("link_to_0.9_s", "the link (`autostart=1`): seconds from data-ready to accuracy ≥ 0.9")] * args.link
    table("training lab, repeat preset (Chromium)", labs, (
        ("to_0.9_s", "seconds from Start to accuracy ≥ 0.9"), ("step_at_0.9", "that step"),
        *link_row,
        ("steps_per_s", "steps per second"),
        ("quiet_shown_s", "a view-tab click to the view on screen, before Start, median, s"),
        ("click_shown_s", "… while it trains, median, s"), ("click_shown_worst_s", "… worst, s"),
        ("map_shown_s", "… while it trains, Model map clicks, median, s"),
        ("train_shown_s", "… while it trains, Train clicks, median, s"),
        ("done_map_shown_s", "… once done (nothing training), Model map clicks, median, s"),
        ("done_train_shown_s", "… once done (nothing training), Train clicks, median, s"),
        ("click_answered_s", "… while it trains, Train clicks, to the worker's first answer, median, s"),
        ("click_answered_worst_s", "… worst, s"),
        ("click_idle_s", "… while it trains, to the worker idle, median, s")))
    table("own model, 15M Llama shape (Chromium)", owns, (
        ("shown_s", "drop to the model shown, s"), ("edit_s", "prompt edit to views updated, s"),
        ("tokens_per_s", "Generate, tokens per second"),
        ("patching_s", "Patching tab click to the complete grid (32 tokens), s"),
        ("stop_s", "Stop pressed to the grid stopped, s"),
        ("heap_mb", "wasm heap after all that, MB")))
    if texts:
        print(f"\n| your own text, 100 KB, text preset (Chromium) | median |\n|---|---|\n"
              f"| seconds from Start to 20 % below the unigram loss | {med(texts, 'text_0.2_s')} |\n"
              f"| that step | {med(texts, 'text_step')} |")
    if runs:
        page, cli = (statistics.median(r[i] for r in runs) for i in (0, 1))
        print(f"\n| the repeat preset's 1,000 steps, the run's own seconds | median |\n|---|---|\n"
              f"| in the page (`autostart=1`) | {page:.2f} |\n| `python -m slm.train`, one BLAS thread | {cli:.2f} |\n"
              f"| ratio | {page / cli:.2f}× |")
    print(f"\nruns: {args.runs}; step runs (page, CPython): {runs}; lab rows: {labs}; text rows: {texts}; "
          f"own rows: {owns}")


if __name__ == "__main__":
    main()
