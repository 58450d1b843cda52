"""The built-in lessons (py/lessons/builtin/*.md) and the instructor's checker (`python -m lessons check`): each
lesson parses, links only to states the app has, and every solution passes its check while every starter fails,
through the checker's own code path (a subprocess per run)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import lessons
import slm
from lessons import cli, states
from slm import roles

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def builtins():
    return {name: lessons.load_builtin(name) for name in lessons.builtin_names()}


def test_three_lessons_with_enough_questions_and_challenges(builtins):
    assert list(builtins) == ["1-the-block", "2-causal-attention", "3-circuits"]
    assert sum(len(lesson.questions) for lesson in builtins.values()) >= 9
    challenges = [c for lesson in builtins.values() for c in lesson.challenges]
    assert len(challenges) >= 4
    written = " ".join(c.starter.text for c in challenges)
    for name in ("def layer_norm(", "def causal_softmax(", "def attention_head(", "def block("):
        assert name in written
    assert all(c.solution is not None for c in challenges)
    assert any(isinstance(q, lessons.SelectQuestion) for lesson in builtins.values() for q in lesson.questions)


def test_every_step_opens_a_state(builtins):
    for lesson in builtins.values():
        for step in lesson.steps:
            assert step.state.get("view") in states.VIEWS, (lesson.name, step.title)


def test_state_keys_are_the_apps():
    """The lessons' list of URL keys is the playground's (but `embed`, which the lesson page decides)."""
    pytest.importorskip("panel")
    from playground.state import URL_PARAMS, VIEW_ALIASES, VIEWS
    from playground.views.block import BlockSettings
    from playground.views.patching import PatchingSettings
    from playground.views.train import TrainSettings

    app = set(URL_PARAMS.values()) | {k for s in (BlockSettings, PatchingSettings, TrainSettings)
                                      for k in s.URL.values()}
    assert set(states.STATE_KEYS) == app - {"embed"}
    assert states.VIEWS == VIEWS
    assert states.VIEW_ALIASES == VIEW_ALIASES
    # A lesson written before the Block view's rename still opens it, and a select answer naming it still matches.
    assert states.parse_query("?view=lesson&heads=2") == ({"view": "block", "heads": "2"}, [])
    alternatives, problems = states.parse_answer("view=lesson layer=0")
    assert not problems and states.matches(alternatives, {"view": "block", "layer": 0})


def test_the_select_answer_is_the_shipped_models_strongest_induction_head(builtins):
    select = next(q for q in builtins["3-circuits"].questions if isinstance(q, lessons.SelectQuestion))
    model = slm.load("shipped")
    vocab = model.tokenizer.vocab
    words = [i for i, w in enumerate(vocab) if w.isalpha()]
    rng = np.random.default_rng(0)
    scores = []
    for _ in range(20):
        ids = roles.repeated_tokens(words, 10, rng, vocab.index("<start>"))
        scores.append(roles.score_targets(model.forward(ids), roles.induction_targets(ids.tolist())))
    layer, head = roles.strongest(roles.mean_scores(scores))
    assert select.grade({"model": "shipped", "layer": layer, "head": head}).correct
    assert select.answers == [{"model": "shipped", "layer": str(layer), "head": str(head)}]


def test_the_ablated_prompt_loses_its_copy():
    """What the ablation step says: the shipped model copies "baker", and without layer 1, head 5 it does not."""
    model = slm.load("shipped")
    ids = [model.tokenizer.vocab.index("<start>"), *model.tokenizer.encode("apple barn ball baker apple barn ball").ids]
    baker = model.tokenizer.vocab.index("baker")
    assert model.forward(np.array(ids)).probs[-1, baker] > 0.9
    ablated = slm.interventions.run_ablated(model, np.array(ids), [(1, 5)]).probs[-1]
    assert baker not in np.argsort(ablated)[::-1][:3]


def test_solutions_pass_and_starters_fail_through_the_checker(builtins):
    for lesson in builtins.values():
        reports = cli.check_lesson(lesson, None, timeout=60)
        assert all(r.ok for r in reports), [(lesson.name, r.line, r.message) for r in reports if not r.ok]
        assert sum("solution passes" in r.message for r in reports) == len(lesson.challenges)
        assert sum("starter fails" in r.message for r in reports) == len(lesson.challenges)


def test_checker_reports_a_passing_starter_a_failing_solution_and_a_loop(tmp_path):
    text = ("---\ntitle: t\n---\n## S\n\n```python starter\nx = 2\n```\n\n```python check\nassert x == 2, 'x'\n```\n"
            "\n## T\n\n```python starter\nx = 1\n```\n\n```python check\nassert x == 2, 'x should be 2'\n```\n\n"
            "```python solution\nx = 1\ny = x / 0\n```\n\n## U\n\n```python starter\nwhile True:\n    pass\n```\n\n"
            "```python check\nassert x\n```\n")
    path = tmp_path / "t.md"
    path.write_text(text)
    out = tmp_path / "out.txt"
    with out.open("w") as handle:
        assert not cli.check_file(path, timeout=3, out=handle)
    report = out.read_text()
    assert f"{path}:6: PROBLEM: the starter passes the check" in report
    assert f"{path}:26: PROBLEM: the solution does not pass: error: line 2: ZeroDivisionError" in report
    assert f"{path}:31: ok: starter fails as it should (error: stopped after 3 s" in report


def test_command_line_exit_status(tmp_path):
    broken = tmp_path / "broken.md"
    broken.write_text("---\ntitle: b\n---\n## S\n\nQ?\n\n- [ ] a\n- [ ] b\n")
    good = tmp_path / "good.md"
    good.write_text("---\ntitle: g\n---\n## S\n\nProse.\n")
    env_path = str(ROOT / "py")

    def run(*args):
        return subprocess.run([sys.executable, "-m", "lessons", "check", *map(str, args)], capture_output=True,
                              text=True, cwd=ROOT, env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"},
                              timeout=60)

    bad = run(broken, good)
    assert bad.returncode == 1
    assert f"{broken}:8: a question needs at least one right option" in bad.stdout
    assert "1 of 2 lesson file(s) good" in bad.stdout
    ok = run(good)
    assert ok.returncode == 0 and "1 of 1 lesson file(s) good" in ok.stdout
    assert run().returncode == 2


def test_the_documented_example_is_a_good_lesson(tmp_path):
    """docs/lessons.md's complete example parses, and its solution passes while its starter fails."""
    doc = (ROOT / "docs" / "lessons.md").read_text()
    example = doc.split("````markdown\n", 1)[1].split("\n````", 1)[0] + "\n"
    path = tmp_path / "softmax.md"
    path.write_text(example)
    lesson = lessons.parse(example, source="softmax.md")
    assert [b.kind for step in lesson.steps for b in step.blocks] == ["prose", "choice", "select", "prose",
                                                                      "challenge"]
    out = tmp_path / "out.txt"
    with out.open("w") as handle:
        assert cli.check_file(path, timeout=60, out=handle)
    print(out.read_text())
