"""`python -m lessons check FILE...`: an instructor's check of lesson files, without a browser.

For each file: the format (every problem with its line), then each challenge twice in a subprocess with a time
limit: its solution must pass the check, its starter must not. Exit status 0 when every file is good, 1 otherwise.
`python -m lessons check --builtin` checks the lessons shipped in this package.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from . import builtin_paths
from .format import Challenge, Code, Lesson, LessonError, parse
from .runner import Verdict, run_challenge

TIMEOUT = 30.0  # seconds per run: NumPy and slm import in ~1 s; a check that takes longer is too slow for a page
PACKAGE_ROOT = Path(__file__).resolve().parent.parent  # py/: where `lessons` and `slm` import from


@dataclass
class Report:
    line: int
    message: str
    ok: bool


def run_isolated(code: str, check: str, model: str | None, timeout: float = TIMEOUT) -> Verdict:
    """run_challenge in a fresh interpreter, ended after `timeout` seconds (an infinite loop is a verdict too)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(PACKAGE_ROOT),
                                                                      os.environ.get("PYTHONPATH")]))}
    request = json.dumps({"code": code, "check": check, "model": model})
    try:
        done = subprocess.run([sys.executable, "-m", "lessons", "_run"], input=request, capture_output=True,
                              text=True, timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired:
        return Verdict("error", f"stopped after {timeout:g} s (an endless loop?)")
    try:
        return Verdict(**json.loads(done.stdout.strip().splitlines()[-1]))
    except (IndexError, ValueError, TypeError):
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        return Verdict("error", f"the checker's process failed: {tail[0]}")


def _run_from_stdin() -> int:
    request = json.loads(sys.stdin.read())
    verdict = run_challenge(request["code"], request["check"], model=request.get("model"))
    print("\n" + json.dumps({k: v for k, v in verdict.to_dict().items() if k != "passed"}))
    return 0


def _where(code: Code, verdict: Verdict) -> int:
    return code.line + verdict.line - 1 if verdict.line else code.line - 1


def check_challenge(challenge: Challenge, model: str | None, timeout: float) -> list[Report]:
    """The solution passes and the starter does not."""
    reports = []
    check = challenge.check.text if challenge.check else ""
    use = model if challenge.needs_model else None
    starter = run_isolated(challenge.starter.text, check, use, timeout)
    if starter.passed:
        reports.append(Report(challenge.line, "the starter passes the check: the learner would have nothing to do",
                              False))
    else:
        reports.append(Report(challenge.line, f"starter fails as it should ({starter.status}: "
                                              f"{starter.message.splitlines()[0][:100] if starter.message else ''})",
                              True))
    if challenge.solution is None:
        reports.append(Report(challenge.line, "no python solution block: only the starter was checked", True))
        return reports
    solution = run_isolated(challenge.solution.text, check, use, timeout)
    if solution.passed:
        reports.append(Report(challenge.solution.line - 1, "solution passes", True))
    else:
        reports.append(Report(_where(challenge.solution, solution),
                              f"the solution does not pass: {solution.status}: {solution.message}", False))
    return reports


def check_lesson(lesson: Lesson, model: str | None, timeout: float) -> list[Report]:
    """Every challenge of the lesson; `model` (a name or an .npz path) for checks marked `model`, else the
    lesson's own model (front matter), else the shipped one."""
    model = model or (lesson.model if lesson.model in ("lesson", "shipped") else "shipped")
    return [r for challenge in lesson.challenges for r in check_challenge(challenge, model, timeout)]


def check_file(path: Path, model: str | None = None, timeout: float = TIMEOUT, out=sys.stdout) -> bool:
    try:
        lesson = parse(path.read_bytes(), source=path.name)
    except OSError as exc:
        print(f"{path}: cannot read: {exc.strerror}", file=out)
        return False
    except LessonError as exc:
        for problem in exc.problems:
            print(f"{path}:{problem.line}: {problem.message}", file=out)
        return False
    n_questions, n_challenges = len(lesson.questions), len(lesson.challenges)
    print(f"{path}: {lesson.title!r}: {len(lesson.steps)} steps, {n_questions} questions, {n_challenges} "
          "challenges", file=out)
    ok = True
    for report in check_lesson(lesson, model, timeout):
        print(f"{path}:{report.line}: {'ok' if report.ok else 'PROBLEM'}: {report.message}", file=out)
        ok &= report.ok
    return ok


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_run"]:
        return _run_from_stdin()
    parser = argparse.ArgumentParser(prog="python -m lessons", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check", help="validate lesson files and run their challenges")
    check.add_argument("files", nargs="*", type=Path, help="lesson files (.md)")
    check.add_argument("--builtin", action="store_true", help="also check the lessons shipped with the package")
    check.add_argument("--model", help="the model checks marked `model` receive: lesson, shipped or an .npz file "
                                       "(default: the lesson's model: front matter, else shipped)")
    check.add_argument("--timeout", type=float, default=TIMEOUT, help="seconds per run (default %(default)s)")
    args = parser.parse_args(argv)
    files = list(args.files) + (builtin_paths() if args.builtin else [])
    if not files:
        parser.error("name a lesson file, or --builtin")
    results = [check_file(path, args.model, args.timeout) for path in files]
    print(f"{sum(results)} of {len(results)} lesson file(s) good")
    return 0 if all(results) else 1
