"""The lesson format (py/lessons/format.py, docs/lessons.md): a good file's parts, and broken files' problems named
with their line numbers."""

from __future__ import annotations

import contextlib
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lessons
from lessons import LessonError, parse

GOOD = textwrap.dedent("""\
    ---
    title: A small lesson
    model: lesson
    ---

    Welcome: $a + b$.

    ## First step

    Prose with [the attention view](?view=attention&layer=1&head=0) and [a second link](?view=map).

    Which are even? Choose all that apply.

    - [x] 2
      - 2 = 2 · 1
    - [ ] 3
    - [x] 4

    ## Second step

    Click the head.

    answer: layer=1 head=0 or layer=1 head=3
    right: Yes.
    wrong: Look again.

    ```python
    print("an example, shown as it is")
    ```

    ```python starter
    def square(x):
        return x
    ```

    ```python check model
    assert square(3) == 9, "square(3) should be 9"
    ```

    ```python solution
    def square(x):
        return x * x
    ```
    """)


def problems(text: str) -> list[tuple[int, str]]:
    with pytest.raises(LessonError) as info:
        parse(text)
    return [(p.line, p.message) for p in info.value.problems]


def lines(text: str) -> list[int]:
    return [line for line, _ in problems(text)]


def test_good_lesson_parts():
    lesson = parse(GOOD, source="https://example.org/lessons/small.md")
    assert (lesson.name, lesson.title, lesson.model) == ("small", "A small lesson", "lesson")
    assert '<span class="math inline">a + b</span>' in lesson.intro_html
    first, second = lesson.steps
    assert (first.number, first.id, first.title, first.line) == (1, "first-step", "First step", 8)
    assert first.state == {"view": "attention", "layer": "1", "head": "0"}  # the first ?query link only
    assert first.state_line == 10
    assert [b.kind for b in first.blocks] == ["prose", "choice"]
    question = first.blocks[1]
    assert question.prompt_html == "<p>Which are even? Choose all that apply.</p>\n"
    assert question.multiple and question.line == 14
    assert [o.correct for o in question.options] == [True, False, True]
    assert [o.html for o in question.options] == ["2", "3", "4"]
    assert question.options[0].feedback_html == "2 = 2 · 1"
    assert question.grade([0, 2]).correct
    assert not question.grade([0]).correct
    assert not question.grade([0, 1, 2]).correct
    assert question.grade([0, 1]).feedback_html == ["2 = 2 · 1"]
    assert 'class="lesson-state"' in first.blocks[0].html

    select, example, challenge = second.blocks[0], second.blocks[1], second.blocks[2]
    assert select.kind == "select" and select.answers == [{"layer": "1", "head": "0"}, {"layer": "1", "head": "3"}]
    assert select.grade({"view": "heads", "layer": 1, "head": 3}).correct
    assert select.grade({"layer": 1, "head": 3}).feedback_html == ["Yes."]
    assert not select.grade({"layer": 0, "head": 3}).correct
    assert select.grade({"layer": 0, "head": 3}).feedback_html == ["Look again."]
    assert not select.grade({"head": 0}).correct  # a key the page does not report is not a match
    assert example.kind == "prose" and "an example, shown as it is" in example.html
    assert second.state == {}
    assert challenge.kind == "challenge" and challenge.needs_model
    assert challenge.starter.text == "def square(x):\n    return x\n" and challenge.starter.line == 32
    assert challenge.check.line == 37 and challenge.solution.line == 41
    assert len(lesson.questions) == 2 and lesson.challenges == [challenge]
    assert lesson.to_dict()["steps"][1]["blocks"][2]["check"]["text"].startswith("assert square(3)")


def test_single_answer_question_and_bytes_input():
    text = GOOD.replace("- [x] 4", "- [ ] 4")
    question = parse(text.encode("utf-8")).steps[0].blocks[1]
    assert not question.multiple
    assert question.grade([0]).correct and not question.grade([2]).correct


def test_math_block_and_display():
    lesson = parse(GOOD.replace("Welcome: $a + b$.", "$$x < y$$"))
    assert lesson.intro_html == '<div class="math block">\nx &lt; y\n</div>\n'


@pytest.mark.parametrize("text, expected", [
    ("## Step\n\ntext\n", [1]),  # no front matter
    ("---\ntitle: x\n\n## Step\n", [1]),  # front matter never closed
    ("---\ntitle: x\nauthor: me\n---\n## Step\n", [3]),  # unknown key
    ("---\nmodel: lesson\n---\n## Step\n", [1]),  # no title
    ("---\ntitle: x\n---\n\n# Big title\n\n## Step\n", [5]),
    ("---\ntitle: x\n---\n\ntext only\n", [5]),  # no step at all: named at the last line
    ("---\ntitle: x\n---\n## S\n\nQ?\n\n- [ ] a\n- [ ] b\n", [8]),  # no right option
    ("---\ntitle: x\n---\n## S\n\nQ?\n\n- [x] a\n", [8]),  # one option
    ("---\ntitle: x\n---\n## S\n\nQ?\n\n- [x] a\n- b\n- [ ] c\n", [9]),  # an item without a box
    ("---\ntitle: x\n---\n## S\n\n- [x] a\n- [ ] b\n", [6]),  # a question without its text
    ("---\ntitle: x\n---\n## S\n\nQ?\n\n- [x] a\n\n  more text\n- [ ] b\n", [10]),  # an option of two paragraphs
    ("---\ntitle: x\n---\n## S\n\n```python check\nassert True\n```\n", [6]),  # check before starter
    ("---\ntitle: x\n---\n## S\n\n```python starter\nx = 1\n```\n", [6]),  # starter without check
    ("---\ntitle: x\n---\n## S\n\n```python starter\nx = 1\n```\n\n```python check\nassert x\n```\n\n"
     "```python solution\nx = 1\ny = (\n```\n", [16]),  # the solution's syntax error, at its file line
    ("---\ntitle: x\n---\n## S\n\n```python starter hidden\nx = 1\n```\n\n```python check\nassert x\n```\n", [6]),
    ("---\ntitle: x\n---\n## S\n\nText.\n\n```python starter\nx = 1\n", [8, 8]),  # never closed, so no check
    ("---\ntitle: x\n---\n## S\n\nSee [it](?view=attention&colour=red).\n", [6]),  # no such state key
    ("---\ntitle: x\n---\n## S\n\nSee\n[it](?view=nowhere).\n", [7]),  # no such view
    ("---\ntitle: x\n---\n## S\n\nClick it.\n\nanswer: layer=1 head\n", [8]),  # not key=value
    ("---\ntitle: x\n---\n## S\n\nClick it.\n\nanswer: layer=1\nmaybe: no\n", [9]),
    ("---\ntitle: x\n---\n## S\n\nClick it.\n\nanswer: colour=red\n", [8]),
    ("---\ntitle: x\n---\nQ?\n\n- [x] a\n- [ ] b\n\n## S\n", [6]),  # a question before the first step
])
def test_broken_lessons_name_their_lines(text, expected):
    assert lines(text) == expected


def test_every_problem_is_reported_at_once():
    text = ("---\ntitle: x\ncolour: red\n---\n# Title\n\n## S\n\nQ?\n\n- [ ] a\n- [ ] b\n\n"
            "```python starter\nx = (\n```\n")
    found = problems(text)
    assert [line for line, _ in found] == [3, 5, 11, 14, 15]
    assert "unknown key 'colour'" in found[0][1]
    assert "needs a python check" in found[3][1] and "starter:" in found[4][1]


def test_error_message_names_source_and_lines():
    with pytest.raises(LessonError, match=r"^mine\.md: line 1: a lesson starts with front matter"):
        parse("hello", source="mine.md")


def test_too_large_and_not_text():
    with pytest.raises(LessonError, match="at most"):
        parse(b"a" * (lessons.format.MAX_BYTES + 1))
    assert lines(b"---\ntitle: x\n---\n\xff\xfe\n") == [4]
    assert lines("---\ntitle: x\n---\n## S\n\x00\n") == [5]


def test_progress_event():
    lesson = parse(GOOD, source="small.md")
    step = lesson.steps[1]
    event = lessons.progress_event(lesson, step, 0, "select", True)
    assert event == {"type": "slm-lesson-question", "lesson": "small", "step": 2, "step_id": "second-step",
                     "item": 0, "kind": "select", "correct": True}
    assert lessons.progress_event(lesson, step, 0, "challenge", False)["type"] == "slm-lesson-challenge"


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("-#[]()x ?=&`$*_<>:\n\tab1\\!|~")), max_size=300))
def test_any_text_gives_a_lesson_or_a_lesson_error(text):
    try:
        parse("---\ntitle: fuzz\n---\n## S\n\n" + text)
    except LessonError as exc:
        assert all(p.line >= 1 for p in exc.problems)


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=400))
def test_any_bytes_give_a_lesson_or_a_lesson_error(data):
    with contextlib.suppress(LessonError):  # anything else raised fails the test
        parse(data)
