"""A lesson end to end in Chromium, Firefox and WebKit with a real wasm NumPy (set PYODIDE_PACKAGES=DIR; skipped
without it, as in CI): one journey per engine, many checks per page load. The built-in lesson opens from the URL
with its first step's state; a question answered wrong then right; the code editor (CodeMirror, highlighted, typed
into with the keyboard); Run; Check of the starter (fails, with the check's message), of the solution (passes); an
endless loop stopped within the time limit + 1 s with the page usable after; a lesson from another site (another
port) whose check runs only once the learner accepts the notice naming its origin, its exception naming the
learner's line; a MemoryError gives a message and leaves the code in the editor; a reload keeps the code; a hostile
lesson file dropped on the page executes nothing; a lesson from an origin the build does not allow is named with the
option that allows it, and not fetched; axe-core finds nothing critical or serious on the whole page, also on a
phone, where wide display math scrolls in its own box. Screenshots: artifacts/site/<engine>-lesson-*.png.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import lessons
from conftest import LESSON_ORIGIN, serve
from sitebuild.serve import SiteHandler, serving
from testkit.engines import ENGINES, Engines, Page

AXE = Path(__file__).resolve().parents[2] / "node_modules" / "axe-core" / "axe.min.js"  # package.json
LIMIT_S = 5  # site/src/lesson/learner.js TIME_LIMIT_MS

# Everything a lesson file might try, in its prose, a question and an option: none of it may run.
HOSTILE = """---
title: Hostile lesson
---

<script>window.pwned = 1</script>

## Everything at once

<img src=x onerror="window.pwned = 2"> <svg onload="window.pwned = 3"></svg>
[click me](javascript:window.pwned=4) and [data](data:text/html,<script>parent.pwned=5</script>)
<iframe srcdoc="<script>parent.pwned=6</script>"></iframe>
<style>body { display: none }</style>
<a href="#" onclick="window.pwned = 7">a link</a> and math $\\href{javascript:window.pwned=8}{x}$.

Pick one <b onmouseover="window.pwned=9">option</b>.

- [x] <img src=x onerror="window.pwned=10"> this one
  - <img src=x onerror="window.pwned=12">
- [ ] [that one](javascript:window.pwned=11)
"""

# A lesson file on another site: served from another port of 127.0.0.1, which the vendored build allows
# (conftest.LESSON_ORIGIN); from localhost, another origin, which it does not.
ELSEWHERE = """---
title: A lesson from another site
---

## Its check

Make `x` equal 2.

```python starter
x = 1
```

```python check
assert x == 2, f"x is {x}, not 2"
```
"""
assert LESSON_ORIGIN == "http://127.0.0.1:*"


class LessonSite(SiteHandler):
    """The other site: a static host that lets any page read its files (SiteHandler's CORS header), and records
    what it is asked for."""

    asked: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        LessonSite.asked.append(self.path)
        super().do_GET()


def open_lesson(page: Page, ref: str) -> None:
    """Opens a lesson as ?lesson= would, in the page already open (its promise not awaited: engines differ)."""
    page.evaluate("(ref) => { window.siteInfo.lessonApi.open(ref); return true; }", ref)


DROP_JS = """(text) => {
  const data = new DataTransfer();
  data.items.add(new File([text], "hostile.md", { type: "text/markdown" }));
  for (const type of ["dragenter", "dragover", "drop"]) {
    document.dispatchEvent(new DragEvent(type, { dataTransfer: data, bubbles: true, cancelable: true }));
  }
  return true;
}"""

AXE_RUN = """async (source, context) => {
  if (!window.axe) {
    // The page's CSP takes scripts from the site and blob: URLs only.
    const url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
    await new Promise((resolve, reject) => {
      const s = document.createElement("script");
      s.src = url; s.onload = resolve; s.onerror = reject;
      document.head.append(s);
    });
  }
  const result = await axe.run(context ? document.querySelector(context) : document, { runOnly: { type: "tag",
    values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22a", "wcag22aa", "best-practice"] } });
  return result.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.slice(0, 5).map((n) => n.target.join(" ")) }));
}"""


# The panel's header: the kicker, the title and the Close button, each box as [left, top, right, bottom].
HEAD_JS = """() => Object.fromEntries(["kicker", "title", "close"].map((k) => {
  const r = document.querySelector(`#lesson .lesson-${k}`).getBoundingClientRect();
  return [k, [r.left, r.top, r.right, r.bottom]];
}))"""
# Every typeset display formula of the shown step: its box, what it holds and whether a keyboard reaches it.
MATH_JS = """() => [...document.querySelectorAll('#lesson .math.block[data-typeset]')].map((m) => {
  const r = m.getBoundingClientRect();
  return { left: r.left, right: r.right, scrollWidth: m.scrollWidth, clientWidth: m.clientWidth,
           tabIndex: m.tabIndex, overflowX: getComputedStyle(m).overflowX };
})"""


def serious_axe(page: Page, context: str | None = "#lesson") -> list[dict]:
    """axe-core's critical and serious findings in the lesson panel (`context`) or, with None, the whole page."""
    if not AXE.exists():
        pytest.fail(f"{AXE} is missing: `npm ci` in the repository (tests/run.sh does it)")
    found = page.evaluate(AXE_RUN, AXE.read_text(), context)
    return [v for v in found if v["impact"] in ("critical", "serious")]


def assert_header(page: Page) -> None:
    """The Close button sits at the header's top right on the title's row, a target of at least 24 × 24 px
    (WCAG 2.5.8), clear of the kicker and the title."""
    head = page.evaluate(HEAD_JS)
    kicker, title, close = head["kicker"], head["title"], head["close"]
    assert close[2] - close[0] >= 24 and close[3] - close[1] >= 24, head
    assert close[1] >= kicker[3] - 1 and close[1] < title[3] and close[3] > title[1], head  # on the title's row
    assert close[0] >= title[2] and abs(close[2] - kicker[2]) <= 1, head  # right of the title, at the right edge


def check(page: Page, code: str, button: str = "button.lesson-check") -> tuple[dict, str]:
    """Put `code` in the shown step's editor, press Check (or Run); the run's record and the verdict shown."""
    page.evaluate("(c) => window.siteInfo.lessonApi.setCode(c)", code)
    runs = page.evaluate("window.siteInfo.learner.runs.length")
    page.click(button)
    page.wait_js(f"window.siteInfo.learner.runs.length > {runs}", timeout_s=90)
    page.wait_js("!document.querySelector('#lesson button.lesson-check').disabled", timeout_s=10)
    return page.evaluate("window.siteInfo.learner.runs.at(-1)"), page.text("#lesson .lesson-verdict")


@pytest.mark.parametrize("engine", ENGINES)
def test_a_lesson_end_to_end(engines: Engines, engine: str, vendored_site: Path, tmp_path: Path) -> None:
    (tmp_path / "elsewhere.md").write_text(ELSEWHERE)
    lesson = lessons.load_builtin("1-the-block")
    step2 = lesson.steps[1]
    layer_norm = next(b for b in step2.blocks if b.kind == "challenge")
    question = next(b for b in lesson.steps[0].blocks if b.kind == "choice")
    right = next(i for i, o in enumerate(question.options) if o.correct)
    wrong = next(i for i, o in enumerate(question.options) if not o.correct)
    with (serve(vendored_site) as url, serving(tmp_path, handler_class=LessonSite) as elsewhere,
          engines.page(engine) as page):
        page.open(url + "index.html?lesson=1-the-block")
        assert page.evaluate("document.body.dataset.ready") == "1", (page.text("#error"), page.console)
        page.wait_js("window.siteInfo.lesson?.opens.length > 0", timeout_s=60)
        opened = page.evaluate("window.siteInfo.lesson.opens[0]")
        assert opened["ok"], page.console
        assert page.text("#lesson-title") == lesson.title
        # The first step's state link: the Block view, with the lesson model and its prompt.
        page.wait_js("new URLSearchParams(location.search).get('view') === 'block'", timeout_s=30)
        assert "Step 1 of 6" in page.text("#lesson .lesson-step-of")
        # Math typeset offline (KaTeX's MathML) once the libraries are in.
        page.wait_js("document.querySelector('#lesson .math math') !== null", timeout_s=60)
        page.screenshot("lesson-01-open")
        # The live app has replaced the first view's picture: not dimmed (a dimmed app fails axe's contrast check).
        assert page.evaluate("getComputedStyle(document.querySelector('#app')).opacity") == "1"
        assert_header(page)
        # The first question's options are formulas: their inputs are named all the same.
        found = serious_axe(page, None)
        assert not found, json.dumps(found, indent=1)

        # A question, wrong then right: feedback each time, and the progress counts the right one.
        options = "#lesson .lesson-question .lesson-option input"
        page.evaluate(f"(i) => document.querySelectorAll('{options}')[i].click()", wrong)
        page.click("#lesson button.lesson-answer")
        page.wait_js("document.querySelector('#lesson .lesson-feedback.wrong') !== null", timeout_s=20)
        assert page.text("#lesson .lesson-feedback strong") == "Not quite."
        page.evaluate(f"(i) => document.querySelectorAll('{options}')[i].click()", right)
        page.click("#lesson button.lesson-answer")
        page.wait_js("document.querySelector('#lesson .lesson-feedback.right') !== null", timeout_s=20)
        assert page.text("#lesson .lesson-progress-text").startswith("1 of ")

        # Next: the layer-norm challenge, in the code editor (CodeMirror, with Python highlighting).
        t0 = time.monotonic()
        page.click("#lesson button.lesson-next")
        page.wait_js("document.querySelector('#lesson .lesson-step-of').textContent === 'Step 2 of 6'")
        step_ms = page.evaluate("window.siteInfo.lesson.steps.at(-1).shownMs")
        page.wait_js("document.querySelector('#lesson .cm-content') !== null", timeout_s=30)
        assert page.evaluate("document.querySelectorAll('#lesson .cm-line span').length") > 5  # highlighted tokens
        assert page.evaluate("window.siteInfo.lessonApi.getCode()") == layer_norm.starter.text
        page.wait_js("new URLSearchParams(location.search).get('norm') === 'rms'", timeout_s=30)  # step 2's state
        print(f"[{engine}] lesson on the panel {opened['shownMs']} ms after its script, its state applied at "
              f"{opened['ms']} ms; step change {step_ms} ms "
              f"({time.monotonic() - t0:.2f} s to the editor)")

        # Typed with the keyboard, then Run: the output is shown.
        page.fill("#lesson .cm-content", "print(6 * 7); ")  # at the start of the first line: still Python
        assert page.evaluate("window.siteInfo.lessonApi.getCode()").startswith("print(6 * 7); import numpy")
        runs = page.evaluate("window.siteInfo.learner.runs.length")
        page.click("#lesson button.lesson-run")
        page.wait_js(f"window.siteInfo.learner.runs.length > {runs}", timeout_s=120)
        first = page.evaluate("window.siteInfo.learner.runs.at(-1)")
        assert first["status"] == "ran", (first, page.text("#lesson .lesson-verdict"))
        assert page.text("#lesson .lesson-output").strip() == "42"
        print(f"[{engine}] the first run waited {first['waitedMs']} ms for Python to start "
              f"(boots: {page.evaluate('window.siteInfo.learner.boots')} ms)")

        # Check the starter (fails, with the check's message), then the solution (passes).
        run, verdict = check(page, layer_norm.starter.text)
        assert run["status"] == "failed" and verdict.startswith("Not yet: "), verdict
        run, verdict = check(page, layer_norm.solution.text)
        assert run["status"] == "passed", verdict
        assert page.text("#lesson .lesson-progress-text").startswith("2 of ")
        page.screenshot("lesson-02-passed")

        # An endless loop: stopped after the limit, the message says so, the code stays, the page answers.
        loop = "while True:\n    pass\n"
        page.wait_js("window.siteInfo.learner.boots.length >= 4", timeout_s=90)  # the spare is warm
        run, verdict = check(page, loop)
        assert run["status"] == "timeout" and "Stopped after 5 s" in verdict, verdict
        assert run["ms"] <= (LIMIT_S + 1) * 1000, run
        assert page.evaluate("window.siteInfo.lessonApi.getCode()") == loop
        t0 = time.monotonic()
        page.click("#lesson button.lesson-back")
        page.wait_js("document.querySelector('#lesson .lesson-step-of').textContent === 'Step 1 of 6'", timeout_s=5)
        assert time.monotonic() - t0 < 1.5
        page.click("#lesson button.lesson-next")
        page.wait_js("document.querySelector('#lesson .cm-content') !== null", timeout_s=30)

        # A lesson from another site: shown as any other, but its check runs only once the learner has accepted the
        # notice naming that site. The exception the code raises names the learner's line.
        origin = elsewhere.rstrip("/")
        t0 = time.monotonic()
        open_lesson(page, elsewhere + "elsewhere.md")
        page.wait_js("document.querySelector('#lesson-title').textContent === 'A lesson from another site'",
                     timeout_s=30)
        page.wait_js("document.querySelector('#lesson .cm-content') !== null", timeout_s=30)
        page.evaluate("(c) => window.siteInfo.lessonApi.setCode(c)", "import numpy as np\n\nraise ValueError('no')\n")
        runs = page.evaluate("window.siteInfo.learner.runs.length")
        page.click("#lesson button.lesson-check")
        page.wait_js("document.querySelector('#lesson .lesson-consent') !== null", timeout_s=10)
        notice = page.text("#lesson .lesson-consent")
        assert f"This lesson comes from {origin}, not from this site." in notice, notice
        assert page.text("#lesson button.lesson-agree") == f"Run checks from {origin}"
        assert page.evaluate("window.siteInfo.learner.runs.length") == runs  # nothing has run yet
        page.screenshot("lesson-elsewhere-1-notice")
        page.click("#lesson button.lesson-agree")
        # The run waits for the spare that the last one started (WebKit's take ~90 s on a loaded machine).
        page.wait_js(f"window.siteInfo.learner.runs.length > {runs}", timeout_s=180)
        run, verdict = page.evaluate("window.siteInfo.learner.runs.at(-1)"), page.text("#lesson .lesson-verdict")
        assert run["status"] == "error" and "line 3: ValueError: no" in verdict, verdict
        assert page.count("#lesson .lesson-consent") == 0
        page.screenshot("lesson-elsewhere-2-checked")
        open_lesson(page, "1-the-block")  # back where the learner left it: step 2
        page.wait_js("document.querySelector('#lesson .lesson-step-of').textContent === 'Step 2 of 6'", timeout_s=30)
        page.wait_js("document.querySelector('#lesson .cm-content') !== null", timeout_s=30)
        print(f"[{engine}] the lesson from another site, its check and the way back: {time.monotonic() - t0:.1f} s "
              f"(the check waited {run['waitedMs']} ms for Python to start)")

        # An enormous array (wasm32 NumPy refuses 10**10 elements with a ValueError before it would run out of
        # memory) gives a message; the code stays.
        huge = "import numpy as np\n\nx = np.zeros(10**10)\n"
        run, verdict = check(page, huge)
        assert run["status"] == "error" and verdict.startswith("Error: line 3: "), verdict
        assert any(word in verdict for word in ("MemoryError", "Maximum allowed dimension", "too big")), verdict
        assert page.evaluate("window.siteInfo.lessonApi.getCode()") == huge
        page.screenshot("lesson-03-memory-error")

        # axe: nothing critical or serious in the panel or on the whole page, here and on a phone (360 px, stacked;
        # WebKit's narrowest window is wider, ~450 px). The layer-norm step's display math is wider than a phone:
        # it scrolls in its own box, which a keyboard reaches, and nothing widens the page.
        for context in ("#lesson", None):
            found = serious_axe(page, context)
            assert not found, json.dumps(found, indent=1)
        page.resize(360, 800)
        time.sleep(0.5)
        width = page.evaluate("innerWidth")
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        maths = page.evaluate(MATH_JS)
        assert maths and all(m["left"] >= 0 and m["right"] <= width for m in maths), (width, maths)
        wide = [m for m in maths if m["scrollWidth"] > m["clientWidth"] + 1]
        assert wide and all(m["overflowX"] == "auto" and m["tabIndex"] == 0 for m in wide), (width, maths)
        assert_header(page)
        for context in ("#lesson", None):
            found = serious_axe(page, context)
            assert not found, json.dumps(found, indent=1)
        page.evaluate("() => { window.scrollTo(0, 0); return true; }")  # the header, then the formula
        page.screenshot("lesson-04-phone")
        page.resize(1280, 1000)

        # A reload keeps the step and the code.
        page.reload()
        page.wait_ready()
        page.wait_js("window.siteInfo.lesson?.opens.length > 0", timeout_s=60)
        page.wait_js("document.querySelector('#lesson .lesson-challenge') !== null", timeout_s=30)
        assert page.evaluate("window.siteInfo.lessonApi.getCode()") == huge
        assert page.text("#lesson .lesson-progress-text").startswith("2 of ")

        # A hostile lesson file dropped on the page: shown as text, nothing of it runs. (WebKit gives a script's
        # DragEvent no files: there the file goes the way a drop hands it over, to the panel's openFile.)
        hostile_open = "document.querySelector('#lesson-title').textContent === 'Hostile lesson'"
        page.evaluate(DROP_JS, HOSTILE)
        try:
            page.wait_js(hostile_open, timeout_s=10)
        except AssertionError:
            assert engine == "webkit", "the dropped lesson file did not open"
            page.evaluate("(t) => window.siteInfo.lessonApi.openFile('hostile.md', t)", HOSTILE)
            page.wait_js(hostile_open, timeout_s=30)
        page.evaluate("() => { for (const a of document.querySelectorAll('#lesson a')) a.click(); return true; }")
        page.evaluate("() => { for (const i of document.querySelectorAll('#lesson input')) i.click(); return true; }")
        page.click("#lesson button.lesson-answer")
        page.wait_js("document.querySelector('#lesson .lesson-feedback strong') !== null", timeout_s=20)
        time.sleep(0.5)
        assert page.evaluate("window.pwned === undefined")
        tags = page.evaluate("[...document.querySelectorAll('#lesson *')].map((e) => e.tagName.toLowerCase())")
        assert not {"script", "iframe", "svg", "style", "img"} & set(tags), sorted(set(tags))
        handlers = page.evaluate("[...document.querySelectorAll('#lesson *')].flatMap((e) => "
                                 "[...e.attributes].map((a) => a.name)).filter((n) => n.startsWith('on'))")
        assert handlers == []
        shown = page.text("#lesson .lesson-step")
        assert "onerror" in shown and "<script>" in shown  # the file's tags, as text
        page.screenshot("lesson-05-hostile")
        errors = [e for e in page.errors() if "the Python worker" in e]
        assert not errors, errors

        # A lesson from an origin the build does not allow: the panel names it and the option that allows it, and
        # the page does not ask for the file.
        blocked = elsewhere.replace("127.0.0.1", "localhost")
        asked = len(LessonSite.asked)
        open_lesson(page, blocked + "elsewhere.md")
        page.wait_js("document.querySelector('#lesson-title').textContent.startsWith('This lesson could not be')",
                     timeout_s=10)
        message = page.text("#lesson .lesson-problems")
        assert (f"This site does not let lessons be fetched from {blocked.rstrip('/')}." in message
                and f"python build.py --lesson-origin {blocked.rstrip('/')}" in message), message
        page.screenshot("lesson-elsewhere-3-not-allowed")
        assert len(LessonSite.asked) == asked, LessonSite.asked


COURSE_PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>A course</title></head><body>
<main><h1>A course page</h1><iframe id="lesson" title="Lesson" width="1200" height="900" src="{src}"></iframe></main>
<script>window.received = []; window.addEventListener("message", (e) => window.received.push(e.data));</script>
</body></html>"""


def test_an_embedded_lesson_posts_its_events_to_the_course_page(engines: Engines, vendored_site: Path,
                                                                tmp_path: Path) -> None:
    """embed.html?lesson=… in a course page's iframe (another origin): an answered question posts the documented
    event to window.parent (Chromium)."""
    from sitebuild.serve import serving

    lesson = lessons.load_builtin("1-the-block")
    question = next(b for b in lesson.steps[0].blocks if b.kind == "choice")
    right = next(i for i, o in enumerate(question.options) if o.correct)
    with serve(vendored_site) as url, engines.page("chromium") as page:
        (tmp_path / "course.html").write_text(COURSE_PAGE.format(src=url + "embed.html?lesson=1-the-block"))
        with serving(tmp_path) as course:
            page.goto(course + "course.html")  # another port: another origin
            frame = page.page.frame_locator("#lesson")  # type: ignore[attr-defined]
            inner = next(f for f in page.page.frames if "embed.html" in f.url)  # type: ignore[attr-defined]
            inner.wait_for_function("() => window.siteInfo?.lesson?.opens.length > 0", timeout=180_000)
            frame.locator("#lesson .lesson-option input").nth(right).click()
            frame.locator("#lesson button.lesson-answer").click()
            page.page.wait_for_function("() => window.received.length > 0", timeout=30_000)  # type: ignore[attr-defined]
            received = page.page.evaluate("window.received")  # type: ignore[attr-defined]
    assert received == [{"type": "slm-lesson-question", "lesson": "1-the-block", "step": 1,
                         "step_id": lesson.steps[0].id, "item": 0, "kind": "choice", "correct": True}]


SAME_ORIGIN_ANSWER = """(right) => {
  const doc = document.querySelector("#lesson").contentDocument;
  doc.querySelectorAll("#lesson .lesson-question .lesson-option input")[right].click();
  doc.querySelector("#lesson button.lesson-answer").click();
}"""


@pytest.mark.parametrize("engine", ENGINES)
def test_an_embedded_lesson_posts_its_events_in_every_engine(engines: Engines, engine: str, vendored_site: Path,
                                                              tmp_path: Path) -> None:
    """The same event in every engine: the course page frames embed.html from a sub-path of its own host (the test
    scripts the frame through contentDocument, which the engines' drivers reach only on one origin; another origin's
    frame is the test above, Chromium). A wrong answer posts correct: false, then the right one correct: true."""
    lesson = lessons.load_builtin("1-the-block")
    question = next(b for b in lesson.steps[0].blocks if b.kind == "choice")
    right = next(i for i, o in enumerate(question.options) if o.correct)
    wrong = next(i for i, o in enumerate(question.options) if not o.correct)
    (tmp_path / "site").symlink_to(vendored_site, target_is_directory=True)
    (tmp_path / "course.html").write_text(COURSE_PAGE.format(src="site/embed.html?lesson=1-the-block"))
    with serve(tmp_path) as course, engines.page(engine) as page:
        page.goto(course + "course.html")
        frame = "document.querySelector('#lesson').contentDocument"
        page.wait_js(f"{frame}?.body?.dataset.ready || {frame}?.body?.dataset.error", timeout_s=180)
        assert page.evaluate(f"{frame}.body.dataset.ready") == "1", page.evaluate(f"{frame}.body.innerText")
        page.wait_js("document.querySelector('#lesson').contentWindow.siteInfo.lesson?.opens.length > 0",
                     timeout_s=60)
        for option, count in ((wrong, 1), (right, 2)):
            page.evaluate(SAME_ORIGIN_ANSWER, option)
            page.wait_js(f"window.received.length >= {count}", timeout_s=30)
        events = page.evaluate("window.received")
        page.screenshot("lesson-course-page")
    expected = {"type": "slm-lesson-question", "lesson": "1-the-block", "step": 1, "step_id": lesson.steps[0].id,
                "item": 0, "kind": "choice"}
    assert events == [{**expected, "correct": False}, {**expected, "correct": True}]


@pytest.mark.parametrize("engine", ENGINES)
def test_the_embed_page_runs_a_lesson_on_a_phone(engines: Engines, engine: str, vendored_site: Path) -> None:
    """embed.html?lesson=… in every engine, 360 px wide (WebKit's narrowest window is ~450 px): the panel sits
    above the view, nothing is wider than the screen, axe finds nothing critical or serious, and a right answer is
    marked right. (Framed by a course page, with the events it posts: the two tests above.)"""
    lesson = lessons.load_builtin("1-the-block")
    question = next(b for b in lesson.steps[0].blocks if b.kind == "choice")
    right = next(i for i, o in enumerate(question.options) if o.correct)
    with serve(vendored_site) as url, engines.page(engine) as page:
        page.resize(360, 800)
        page.open(url + "embed.html?lesson=1-the-block")
        assert page.evaluate("document.body.dataset.ready") == "1", (page.text("#error"), page.console)
        page.wait_js("window.siteInfo.lesson?.opens.length > 0", timeout_s=60)
        page.wait_js("document.querySelector('#lesson .math math') !== null", timeout_s=60)
        width = page.evaluate("innerWidth")
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        panel, app = page.evaluate("['#lesson', '#app'].map((s) => document.querySelector(s)"
                                   ".getBoundingClientRect()).map((r) => [r.top, r.bottom])")
        assert panel[1] <= app[0] + 1, (panel, app)  # stacked: the panel above the view
        for context in ("#lesson", None):
            found = serious_axe(page, context)
            assert not found, json.dumps(found, indent=1)
        page.screenshot("lesson-embed-phone")
        options = "#lesson .lesson-question .lesson-option input"
        page.evaluate(f"(i) => document.querySelectorAll('{options}')[i].click()", right)
        page.click("#lesson button.lesson-answer")
        page.wait_js("document.querySelector('#lesson .lesson-feedback.right') !== null", timeout_s=20)
        assert page.text("#lesson .lesson-progress-text").startswith("1 of ")


@pytest.mark.parametrize("engine", ENGINES)
def test_the_portable_file_opens_a_builtin_lesson_and_runs_code_offline(engines: Engines, engine: str,
                                                                       vendored_site: Path, tmp_path: Path) -> None:
    """"Save for offline use" carries the built-in lessons, the panel and its editor: the single file, opened from
    disk with every request off the machine refused, opens a lesson at a challenge and runs code; a lesson URL is
    answered with what to do instead. In every engine."""
    portable = tmp_path / "transformer-playground.html"
    portable.write_bytes((vendored_site / "build" / "transformer-playground.html").read_bytes())
    with engines.page(engine, local=False) as page:
        page.open(portable.as_uri() + "?lesson=1-the-block&step=2")
        assert page.evaluate("document.body.dataset.ready") == "1", (page.text("#error"), page.console)
        page.wait_js("document.querySelector('#lesson .cm-content') !== null", timeout_s=60)
        run, verdict = check(page, "print(6 * 7)", button="button.lesson-run")
        assert run["status"] == "ran" and page.text("#lesson .lesson-output").strip() == "42", verdict
        open_lesson(page, "https://courses.example.edu/week-1.md")
        page.wait_js("document.querySelector('#lesson .lesson-problems') !== null", timeout_s=10)
        message = page.text("#lesson .lesson-problems")
        assert "This offline copy fetches nothing from the web, so no lesson from https://courses.example.edu: " \
               "download the lesson file and drop it on the page." in message, message
        assert not page.external, page.external


MY_LESSON = """---
title: My own lesson
---

## One question

Two plus two?

- [ ] 3
- [x] 4
"""


def test_the_offline_copy_carries_the_lesson_file_open_on_the_page(engines: Engines, vendored_site: Path,
                                                                   tmp_path: Path) -> None:
    """A lesson file dropped on the hosted page goes into "Save for offline use"'s file (portable.js with the open
    lessons, as offline-copy.js calls it), which opens it again from disk (Chromium)."""
    with serve(vendored_site) as url, engines.page("chromium") as page:
        page.open(url + "index.html")
        assert page.evaluate("document.body.dataset.ready") == "1", (page.text("#error"), page.console)
        page.evaluate(DROP_JS.replace("hostile.md", "my-lesson.md"), MY_LESSON)
        page.wait_js("document.querySelector('#lesson-title')?.textContent === 'My own lesson'", timeout_s=60)
        html = page.evaluate("""async () => {
            const { assemble } = await import("./portable.js");
            const manifest = await (await fetch("build/manifest.json")).json();
            const read = async (u) => new Uint8Array(await (await fetch(u)).arrayBuffer());
            return assemble({ manifest, read, lessons: window.siteInfo.lessonApi.lessonFiles() });
        }""")
    saved = tmp_path / "transformer-playground.html"
    saved.write_text(html)
    with engines.page("chromium") as page:
        page.open(saved.as_uri())
        assert page.evaluate("document.body.dataset.ready") == "1", (page.text("#error"), page.console)
        page.wait_js("document.querySelector('#lesson-title')?.textContent === 'My own lesson'", timeout_s=60)
        assert "Two plus two?" in page.text("#lesson .lesson-step")
