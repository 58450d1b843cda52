"""Lessons as Markdown files: the format's parser, the challenge runner, the built-in lessons (docs/lessons.md).

Pure Python and markdown-it-py (which the site already ships for Panel): the page imports it in Pyodide, the
instructor's checker (`python -m lessons check FILE...`) in CPython. It imports neither Panel nor the playground.

For the page (the Lessons view and the learner's worker):

    lesson = lessons.parse(text, source="my-lesson.md")   # or lessons.load_builtin("the-block")
    # a LessonError (.problems: [Problem(line, message)]) for a broken file, and nothing else
    lesson.title, lesson.model, lesson.intro_html
    for step in lesson.steps:          # step.number, .id (slug), .title, .state ({URL key: value}: apply on open)
        for block in step.blocks:      # in order; block.kind says which:
            "prose"      block.html (sanitised HTML; math as <span class="math inline">TeX</span> and
                         <div class="math block">TeX</div> for the view to typeset; state links
                         <a href="?..." class="lesson-state"> to apply, not follow)
            "choice"     block.prompt_html, block.options (.html, .feedback_html), block.multiple,
                         block.grade([chosen indices]) -> Grade(correct, feedback_html)
            "select"     block.prompt_html, block.grade({URL key: value of the page's state}) -> Grade
            "challenge"  block.starter.text (the editor's first text), block.check.text (never shown),
                         block.solution (None or .text, shown on request), block.needs_model
    lesson.to_dict()                   # the same as JSON-able data

    # in the learner's worker (a separate, killable Pyodide worker):
    verdict = lessons.run_challenge(code, challenge.check.text, model=npz_bytes_or_None)  # Check
    verdict = lessons.run_challenge(code)                                                    # Run
    verdict.to_dict()   # {status: passed|failed|error|syntax|ran, message, stdout, line, passed}

    lessons.progress_event(lesson, step, item, kind, correct)   # the postMessage payload for course pages
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from .format import (
    Challenge,
    Code,
    Grade,
    Lesson,
    LessonError,
    Option,
    Problem,
    Prose,
    Question,
    SelectQuestion,
    Step,
    parse,
)
from .runner import Verdict, load_model, run_challenge

EVENT_TYPES = {"choice": "slm-lesson-question", "select": "slm-lesson-question",
               "challenge": "slm-lesson-challenge"}


def builtin_paths() -> list[Path]:
    """The built-in lessons' files, in their teaching order (their names start with a number)."""
    folder = resources.files(__name__) / "builtin"
    return sorted(Path(str(p)) for p in folder.iterdir() if p.name.endswith(".md"))


def builtin_names() -> list[str]:
    """The built-in lessons' names (`?lesson=NAME`), e.g. "1-the-block", in their teaching order."""
    folder = resources.files(__name__) / "builtin"
    return sorted(p.name[:-3] for p in folder.iterdir() if p.name.endswith(".md"))


def load_builtin(name: str) -> Lesson:
    """A built-in lesson by name (read through importlib.resources, so also from a zipped package)."""
    entry = resources.files(__name__) / "builtin" / f"{name}.md"
    if name in builtin_names():
        return parse(entry.read_bytes(), source=f"{name}.md")
    raise KeyError(f"no built-in lesson {name!r} (lessons: {', '.join(builtin_names())})")


def progress_event(lesson: Lesson, step: Step, item: int, kind: str, correct: bool) -> dict[str, Any]:
    """The message posted to a course page (window.parent, target origin "*") when a question is answered or a
    challenge checked: lesson and step names and whether it was right, nothing the learner wrote."""
    return {"type": EVENT_TYPES[kind], "lesson": lesson.name, "step": step.number, "step_id": step.id,
            "item": item, "kind": kind, "correct": bool(correct)}


__all__ = [
    "Challenge", "Code", "Grade", "Lesson", "LessonError", "Option", "Problem", "Prose", "Question",
    "SelectQuestion", "Step", "Verdict", "builtin_names", "builtin_paths", "load_builtin", "load_model", "parse",
    "progress_event", "run_challenge",
]
