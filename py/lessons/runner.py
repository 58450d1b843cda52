"""Run a learner's code and a challenge's hidden check in this interpreter, and say what happened.

The caller bounds the time: the page runs this in a worker it can end, `python -m lessons check` in a subprocess
with a timeout. Here the learner's code and then the check run in one fresh namespace; the verdict names the
learner's line when their code fails and never shows the check's source or this module's frames.
"""

from __future__ import annotations

import contextlib
import io
import traceback
from dataclasses import asdict, dataclass
from typing import Any

LEARNER_FILE = "<your code>"
CHECK_FILE = "<check>"
MAX_OUTPUT = 20_000  # characters of printed output kept: a print in a loop must not flood the page


@dataclass
class Verdict:
    """What a Run or a Check gave.

    status: "passed" (the check ran without error), "failed" (an AssertionError: `message` is its text), "error"
    (an exception: `message` names it, and `line` the learner's line when it came from their code), "syntax" (the
    learner's code does not parse), or "ran" (a Run without a check finished).
    """

    status: str
    message: str = ""
    stdout: str = ""
    line: int | None = None

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "passed": self.passed}


class _Capped(io.StringIO):
    def write(self, text: str) -> int:
        room = MAX_OUTPUT - self.tell()
        if room > 0:
            super().write(text[:room])
        return len(text)


def load_model(model: Any) -> Any:
    """The `model` a check receives: an slm.Model as given, `.npz` bytes (the page's current model), or a name:
    "lesson" (slm's 4-number lesson model), "shipped", or a path."""
    import slm

    if model is None or isinstance(model, slm.Model):
        return model
    if model == "lesson":
        return slm.CausalLanguageModel()
    return slm.load(bytes(model) if isinstance(model, (bytearray, memoryview)) else model)


def _learner_line(exc: BaseException) -> int | None:
    """The line of the learner's code nearest to where `exc` was raised, if the traceback passes through it."""
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == LEARNER_FILE:
            line = frame.lineno
    if isinstance(exc, SyntaxError) and exc.filename == LEARNER_FILE:
        line = exc.lineno
    return line


def _describe(exc: BaseException) -> str:
    if isinstance(exc, MemoryError):
        return "MemoryError: the code asked for more memory than there is (an array too large?)"
    if isinstance(exc, SystemExit):
        return "SystemExit: exit() was called; the code stopped there"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def run_challenge(code: str, check: str | None = None, *, model: Any = None,
                  names: dict[str, Any] | None = None) -> Verdict:
    """Run the learner's `code`, then `check` (a challenge's hidden check; None for a plain Run) in the same fresh
    namespace, printing into the verdict's `stdout`.

    `model` (see load_model) becomes the name `model` in that namespace, for checks marked `python check model`;
    `names` adds other names. Never raises for anything the code does (KeyboardInterrupt excepted: that is the
    caller stopping it)."""
    out = _Capped()
    namespace: dict[str, Any] = {"__name__": "__lesson__", "__builtins__": __builtins__}
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            compiled = compile(code, LEARNER_FILE, "exec")
        except SyntaxError as exc:
            where = f"line {exc.lineno}: " if exc.lineno else ""
            return Verdict("syntax", f"{where}{exc.msg}", out.getvalue(), exc.lineno)
        except ValueError as exc:  # source with a null byte
            return Verdict("syntax", str(exc), out.getvalue())
        try:
            if model is not None:
                namespace["model"] = load_model(model)
            namespace.update(names or {})
            exec(compiled, namespace)  # noqa: S102 - running the learner's code is the point
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - whatever the learner's code raises is a verdict
            line = _learner_line(exc)
            where = f"line {line}: " if line else ""
            return Verdict("error", where + _describe(exc), out.getvalue(), line)
        if check is None:
            return Verdict("ran", "", out.getvalue())
        try:
            exec(compile(check, CHECK_FILE, "exec"), namespace)  # noqa: S102
        except KeyboardInterrupt:
            raise
        except AssertionError as exc:
            line = _learner_line(exc)
            message = str(exc) or "the check failed (it gave no message)"
            return Verdict("failed", message, out.getvalue(), line)
        except BaseException as exc:  # noqa: BLE001
            line = _learner_line(exc)
            where = f"line {line}: " if line else ""
            return Verdict("error", where + _describe(exc), out.getvalue(), line)
    return Verdict("passed", "", out.getvalue())
