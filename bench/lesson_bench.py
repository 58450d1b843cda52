#!/usr/bin/env python3
"""The lesson panel's timings in Chromium, on a built site (`python build.py --site-dir DIR --pyodide-packages P`):

    python bench/lesson_bench.py --site DIR [--runs 3]

Per run (a fresh browser context, `index.html?lesson=1-the-block`):
- open: from 'ready' to the first step on the panel, and to its state reaching the app's view;
- step change: each Next through the lesson, to the step on the panel and to its state applied; the first Next,
  pressed as soon as the lesson is open, also on its own row;
- first Check: how long a Check pressed as soon as the lesson is open waits for the spare worker's boot;
- Check -> verdict with the spare warm, for each built-in challenge's solution (all three lessons);
- an endless loop: from its run's start to the worker ended (the limit is 5 s), and a step change right after.
Prints a Markdown table (medians over the runs; docs/benchmarks.md) and writes artifacts/lesson-bench.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "py"), str(ROOT / "tests")]

import lessons  # noqa: E402
from sitebuild.serve import serving  # noqa: E402
from testkit.engines import CHROMIUM, CHROMIUM_ARGS  # noqa: E402

# The spare learner's worker has booted: each run uses one, and the next boots once it is over.
SPARE_UP = "window.siteInfo.learner.boots.length >= window.siteInfo.learner.runs.length + 1"


def wait(page, js: str, timeout_s: float = 120) -> None:  # noqa: ANN001 - a Playwright page
    page.wait_for_function(f"() => ({js})", timeout=timeout_s * 1000, polling=50)


def check(page, code: str, index: int = 0) -> dict:  # noqa: ANN001
    """Check `code` in the shown step's challenge `index`; the learner pool's record of the run, with the time
    from the click to the verdict on the panel."""
    page.evaluate("([c, i]) => window.siteInfo.lessonApi.setCode(c, i)", [code, index])
    n = page.evaluate("window.siteInfo.learner.runs.length")
    t0 = time.perf_counter()
    page.locator("#lesson .lesson-check").nth(index).click()
    wait(page, f"window.siteInfo.learner.runs.length > {n}")
    clicked_to_verdict = (time.perf_counter() - t0) * 1000
    return {**page.evaluate("window.siteInfo.learner.runs.at(-1)"), "click_to_verdict_ms": round(clicked_to_verdict)}


def next_step(page) -> dict:  # noqa: ANN001
    n = page.evaluate("window.siteInfo.lesson.steps.length")
    page.click("#lesson .lesson-next")
    wait(page, f"window.siteInfo.lesson.steps.length > {n} && window.siteInfo.lesson.steps.at(-1).ms !== undefined")
    return page.evaluate("window.siteInfo.lesson.steps.at(-1)")


def one_run(browser, url: str) -> dict:  # noqa: ANN001
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    page.goto(url + "index.html?lesson=1-the-block")
    wait(page, "document.body.dataset.ready === '1'", 240)
    wait(page, "window.siteInfo.lesson?.opens.length > 0 && window.siteInfo.lesson.steps.at(-1)?.ms !== undefined")
    info = page.evaluate("({ready: window.siteInfo.timings.ready, open: window.siteInfo.lesson.opens[0], "
                         "script: window.siteInfo.timings.lessonScript})")
    opened_at = info["open"]["at"]
    result = {"open_shown_after_ready_ms": round(opened_at - info["open"]["ms"] + info["open"]["shownMs"]
                                                 - info["ready"]),
              "open_applied_after_ready_ms": round(opened_at - info["ready"]),
              "lesson_script_ms": round(info["script"])}
    # The first Check as soon as the lesson is open: it waits for the spare's boot.
    block = lessons.load_builtin("1-the-block")
    steps = [next_step(page)]
    challenge = next(b for b in block.steps[1].blocks if b.kind == "challenge")
    first = check(page, challenge.starter.text)
    result["first_check"] = first
    result["boots_ms"] = page.evaluate("window.siteInfo.learner.boots")
    # Each challenge of the three lessons with the spare warm: its solution's Check -> verdict.
    verdicts = []
    for name in lessons.builtin_names():
        lesson = lessons.load_builtin(name)
        page.evaluate("(n) => window.siteInfo.lessonApi.open(n)", name)
        for step in lesson.steps:
            challenges = [b for b in step.blocks if b.kind == "challenge"]
            if not challenges:
                continue
            page.evaluate("(n) => window.siteInfo.lessonApi.show(n)", step.number)
            shown = f"'Step {step.number} '"
            wait(page, f"document.querySelector('#lesson .lesson-step-of').textContent.startsWith({shown})")
            for i, c in enumerate(challenges):
                wait(page, SPARE_UP, 120)
                run = check(page, c.solution.text, i)
                verdicts.append({"lesson": name, "step": step.number, **run})
    result["checks"] = verdicts
    # An endless loop with the spare warm, then a step change.
    page.evaluate("(n) => window.siteInfo.lessonApi.open(n)", "1-the-block")
    page.evaluate("() => window.siteInfo.lessonApi.show(2)")
    wait(page, SPARE_UP, 120)
    result["loop"] = check(page, "while True:\n    pass\n")
    result["step_after_loop"] = next_step(page)
    # Step changes through the first lesson.
    page.evaluate("() => window.siteInfo.lessonApi.show(1)")
    for _ in range(len(block.steps) - 1):
        steps.append(next_step(page))
    result["steps"] = steps
    context.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--site", type=Path, required=True, help="a built site folder")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    runs = []
    with serving(args.site) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for i in range(args.runs):
            runs.append(one_run(browser, url))
            print(f"run {i + 1}: {json.dumps({k: v for k, v in runs[-1].items() if k not in ('checks', 'steps')})}",
                  file=sys.stderr)
        browser.close()
    out = ROOT / "artifacts" / "lesson-bench.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(runs, indent=1))
    med = statistics.median

    def row(what: str, values: list[float], budget: str) -> str:
        return f"| {what} | {med(values):.0f} | {min(values):.0f}-{max(values):.0f} | {budget} |"

    print("| measure (Chromium, localhost) | median ms | range | budget |\n|---|---|---|---|")
    print(row("lesson on the panel, after ready", [r["open_shown_after_ready_ms"] for r in runs], "1000"))
    print(row("its step's state on the view, after ready", [r["open_applied_after_ready_ms"] for r in runs], "1000"))
    print(row("step change: on the panel", [s["shownMs"] for r in runs for s in r["steps"]], "300"))
    print(row("step change: state on the view", [s["ms"] for r in runs for s in r["steps"]], "300"))
    print(row("the first Next, as soon as the lesson is open: state on the view", [r["steps"][0]["ms"] for r in runs],
              "300"))
    print(row("first Check's wait for the spare worker", [r["first_check"]["waitedMs"] for r in runs], "(say)"))
    print(row("learner worker boot", [b for r in runs for b in r["boots_ms"]], "(say)"))
    print(row("Check -> verdict, spare warm (6 built-in solutions)",
              [c["click_to_verdict_ms"] for r in runs for c in r["checks"]], "1000"))
    print(row("endless loop: run start -> worker ended", [r["loop"]["ms"] for r in runs], "6000"))
    print(row("step change right after", [r["step_after_loop"]["ms"] for r in runs], "300"))


if __name__ == "__main__":
    main()
