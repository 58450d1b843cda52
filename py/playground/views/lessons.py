"""Lessons: the list of built-in lessons and how to open one's own. A lesson itself (its steps, questions and code
editor) is the static site's lesson panel, beside the view each step opens (site/src/lesson/, docs/lessons.md);
the page opens a link of this list there instead of following it."""

from __future__ import annotations

import html

import panel as pn

from ..state import PlaygroundState
from .common import View, caption, title


def lessons_html(summaries: list[dict]) -> str:
    """The built-in lessons as a list of links (`?lesson=NAME`), each with its size."""
    rows = []
    for s in summaries:
        rows.append(f"<li><a class='pg-lesson-link' href='?lesson={html.escape(s['name'])}' "
                    f"data-lesson='{html.escape(s['name'])}'>{html.escape(s['title'])}</a> "
                    f"<span class='pg-summary'>{s['steps']} steps · {s['questions']} questions · "
                    f"{s['challenges']} coding challenges</span></li>")
    return f"<ul class='pg-lessons'>{''.join(rows)}</ul>"


class LessonsView(View):
    def __init__(self, state: PlaygroundState) -> None:
        # Imported here: the lessons' parser imports markdown-it, which the first page does not need.
        from ..lesson_host import builtin_summaries

        self.state = state
        self.list = pn.pane.HTML(lessons_html(builtin_summaries()), margin=(0, 10), sizing_mode="stretch_width")
        self.panel = pn.Column(
            title("Lessons"),
            caption("Step-by-step lessons with questions and coding challenges, checked in your browser. A lesson "
                    "opens beside the view each of its steps shows; your answers and code are kept in this "
                    "browser."),
            self.list,
            caption("Your own lesson: drop its Markdown file (<code>.md</code>) anywhere on this page, "
                    "<a class='pg-lesson-pick' href='#open-lesson-file'>choose a lesson file</a>, or open "
                    "<code>?lesson=</code> followed by its URL. The format is in <code>docs/lessons.md</code>."),
            name="Lessons", sizing_mode="stretch_width")

    def update(self, *_: object) -> None:
        pass  # nothing in it depends on the prompt or the model
