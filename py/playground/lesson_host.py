"""The app's side of a lesson open on the page: the static site's lesson panel (site/src/lesson/) shows the steps,
questions and code editor, and asks this module, through the app worker, for what needs Python or the page's
state: a lesson file parsed (`lessons.parse`), a step's state applied to the state and the views' settings, an
answer graded (a "select it in the view" answer against the page's state), and the model shown, as `.npz`
bytes, for a check that asks for it. Learner code never runs here: the page runs it in a worker it can end.

Every call takes and returns JSON-able values (`LessonHost.handle`: a JSON request in, a JSON answer out), so the
page's side and the CPython tests speak the same language.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

import panel as pn
import param

import lessons

from .library import model_bytes
from .state import VIEW_ALIASES, PlaygroundState

MAX_OPEN = 8  # lessons kept parsed per page: the learner's, a preview being edited, the built-ins


@functools.cache
def builtin_lesson(name: str) -> lessons.Lesson:
    """A built-in lesson, parsed once per process."""
    return lessons.load_builtin(name)


def summary(lesson: lessons.Lesson) -> dict[str, Any]:
    """What a list of lessons shows of one: its name, title and how many steps, questions and challenges."""
    blocks = [block for step in lesson.steps for block in step.blocks]
    return {"name": lesson.name, "title": lesson.title, "steps": len(lesson.steps),
            "questions": sum(block.kind in ("choice", "select") for block in blocks),
            "challenges": sum(block.kind == "challenge" for block in blocks)}


def builtin_summaries() -> list[dict[str, Any]]:
    return [summary(builtin_lesson(name)) for name in lessons.builtin_names()]


def items(step: lessons.Step) -> list[Any]:
    """A step's questions and challenges in the order of the file: an answer's or a check's `item` indexes this
    (docs/lessons.md, "Events for course platforms")."""
    return [block for block in step.blocks if block.kind != "prose"]


def page_state(state: PlaygroundState) -> dict[str, Any]:
    """{URL key: value} of every state key the page has now (the state's and the views' settings'), which a select
    question's answer is compared with."""
    values: dict[str, Any] = {}
    for part in (state, *state.view_settings):
        values.update(part.url_values(always=list(part.URL)))
    values.pop("embed", None)
    return {key: value if isinstance(value, (bool, int, float, str)) or value is None else str(value)
            for key, value in values.items()}


def apply_state(state: PlaygroundState, values: dict[str, str]) -> None:
    """A step's state ({URL key: value}) applied as a link's would be: coerced and clamped, each key to the part it
    belongs to, the model and the lesson model's switches together (one model load)."""
    values = dict(values)
    if str(values.get("view", "")).lower() in VIEW_ALIASES:
        values["view"] = VIEW_ALIASES[str(values["view"]).lower()]
    with param.parameterized.batch_call_watchers(state):
        for part in (state, *state.view_settings):
            names = {key: name for name, key in part.URL.items()}
            mine = {names[key]: value for key, value in values.items() if key in names and key != "embed"}
            if mine:
                part.apply_url_values(mine)


def lesson_views(lesson: lessons.Lesson) -> list[str]:
    """The views a lesson's steps open, each once, in the order of its steps."""
    views = (str(step.state.get("view", "")).lower() for step in lesson.steps)
    return list(dict.fromkeys(VIEW_ALIASES.get(view, view) for view in views if view))


def apply_link(state: PlaygroundState, name: str, step: object = None) -> lessons.Lesson | None:
    """The state of step `step` (from 1; the first if absent or wrong) of built-in lesson `name` applied, as the
    page's panel will when it opens the lesson; the lesson, or None when there is no such lesson."""
    try:
        lesson = builtin_lesson(name)
    except KeyError:
        return None
    try:
        number = int(str(step)) if step is not None else 1
    except ValueError:
        number = 1
    number = min(max(number, 1), len(lesson.steps))
    apply_state(state, {**({"model": lesson.model} if lesson.model else {}), **lesson.steps[number - 1].state})
    return lesson


class LessonHost:
    """The lessons open on one page, and the calls the page's lesson panel makes about them."""

    def __init__(self, state: PlaygroundState) -> None:
        self.state = state
        self.open_lessons: dict[str, lessons.Lesson] = {}
        # Told the views of each lesson opened (the page's Playground.lesson_opened: it prepares them).
        self.on_open: Callable[[list[str]], None] | None = None

    def open(self, name: str | None = None, text: str | bytes | None = None, source: str = "") -> dict[str, Any]:
        """A built-in lesson by `name`, or a lesson file's `text` from `source` (a URL or a file name): {"ok":
        True, "key", "lesson": Lesson.to_dict(), "builtin"} or {"ok": False, "problems": [{"line", "message"}]}.
        Never raises for what the file holds: a broken lesson never breaks the page."""
        try:
            if text is None:
                lesson = builtin_lesson(str(name))
                key, builtin = f"builtin:{lesson.name}", True
            else:
                lesson = lessons.parse(text, source=source or "lesson.md")
                key, builtin = source or lesson.name, False
        except lessons.LessonError as e:
            return {"ok": False, "problems": [{"line": p.line, "message": p.message} for p in e.problems]}
        except KeyError as e:
            return {"ok": False, "problems": [{"line": 0, "message": str(e.args[0])}]}
        self.open_lessons.pop(key, None)
        self.open_lessons[key] = lesson
        if self.on_open is not None:
            self.on_open(lesson_views(lesson))
        while len(self.open_lessons) > MAX_OPEN:
            self.open_lessons.pop(next(iter(self.open_lessons)))
        data = lesson.to_dict()
        for step, step_data in zip(lesson.steps, data["steps"], strict=True):
            for block, block_data in zip(step.blocks, step_data["blocks"], strict=True):
                if block.kind == "choice":
                    block_data["multiple"] = block.multiple  # choose all that apply: check boxes, not radios
        return {"ok": True, "key": key, "builtin": builtin, "lesson": data}

    def _item(self, key: str, step: int, item: int) -> tuple[lessons.Lesson, lessons.Step, Any]:
        lesson = self.open_lessons[key]
        the_step = lesson.steps[step - 1]
        return lesson, the_step, items(the_step)[item]

    def grade(self, key: str, step: int, item: int, chosen: list[int] | None = None) -> dict[str, Any]:
        """An answer to question `item` of step `step` (from 1): a choice question's `chosen` option indices, or a
        select question graded against the page's state now. {"correct", "feedback_html": [HTML of each chosen
        option's feedback, or the select question's right/wrong line], "event"} (the event
        for the course page: lessons.progress_event)."""
        lesson, the_step, block = self._item(key, step, item)
        if block.kind == "choice":
            grade = block.grade([int(i) for i in chosen or []])
        elif block.kind == "select":
            grade = block.grade(page_state(self.state))
        else:
            raise ValueError(f"step {step} item {item} is a {block.kind}, not a question")
        event = lessons.progress_event(lesson, the_step, item, block.kind, grade.correct)
        return {"correct": grade.correct, "feedback_html": grade.feedback_html, "event": event}

    def checked(self, key: str, step: int, item: int, passed: bool) -> dict[str, Any]:
        """The course page's event for a challenge the page has checked."""
        lesson, the_step, block = self._item(key, step, item)
        if block.kind != "challenge":
            raise ValueError(f"step {step} item {item} is a {block.kind}, not a challenge")
        return {"event": lessons.progress_event(lesson, the_step, item, "challenge", passed)}

    def apply(self, state: dict[str, str]) -> dict[str, Any]:
        """A step's state applied, and shown in the page's address: also the keys that were already so (a link's
        lesson= applied them before the page was drawn, when the address could not follow yet)."""
        apply_state(self.state, state)
        now = page_state(self.state)
        if pn.state.location is not None:
            pn.state.location.update_query(**{key: now[key] for key in state if key in now})
        return {"state": now}

    def model_npz(self) -> bytes:
        """The model the page shows, as its .npz file: what a `python check model` check receives."""
        return model_bytes(self.state.model)

    def handle(self, request: str) -> str:
        """One call from the page: {"op": "open" | "grade" | "checked" | "apply" | "state" | "builtins", ...}, its
        answer as JSON; {"error": ...} for a request that names no lesson open here (the page reopens it)."""
        call = json.loads(request)
        op = call.pop("op")
        try:
            if op == "open":
                answer = self.open(**call)
            elif op == "grade":
                answer = self.grade(**call)
            elif op == "checked":
                answer = self.checked(**call)
            elif op == "apply":
                answer = self.apply(call["state"])
            elif op == "state":
                answer = {"state": page_state(self.state)}
            elif op == "builtins":
                answer = {"lessons": builtin_summaries()}
            else:
                answer = {"error": f"no lesson call {op!r}"}
        except (KeyError, IndexError, ValueError, TypeError) as e:
            answer = {"error": f"{type(e).__name__}: {e}"}
        return json.dumps(answer, default=str)


def host_for(state: PlaygroundState) -> LessonHost:
    """The page's LessonHost (one per state, made on first use)."""
    host = getattr(state, "_lesson_host", None)
    if host is None:
        host = LessonHost(state)
        state._lesson_host = host
    return host


def handle(playground: Any, request: str) -> str:
    """The app worker's entry point (site/src/worker/python-api.js LESSON_CALL): `playground` is boot.py's."""
    host = host_for(playground.state)
    host.on_open = playground.lesson_opened
    return host.handle(request)
