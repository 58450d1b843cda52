"""The challenge runner's verdicts (py/lessons/runner.py): pass, fail with the check's message, an exception
naming the learner's line, a syntax error, printed output, the model a check receives."""

from __future__ import annotations

import io

import slm
from lessons import run_challenge

CHECK = "assert square(3) == 9, f'square(3) gave {square(3)}, expected 9'\n"


def test_pass_and_output():
    verdict = run_challenge("def square(x):\n    return x * x\nprint('defined')\n", CHECK + "print('checked')\n")
    assert verdict.passed and verdict.status == "passed"
    assert verdict.stdout == "defined\nchecked\n"
    assert verdict.to_dict() == {"status": "passed", "message": "", "stdout": "defined\nchecked\n", "line": None,
                                 "passed": True}


def test_fail_gives_the_assertion_message():
    verdict = run_challenge("def square(x):\n    return x + x\n", CHECK)
    assert (verdict.status, verdict.message, verdict.line) == ("failed", "square(3) gave 6, expected 9", None)
    assert not verdict.passed
    bare = run_challenge("x = 1\n", "assert x == 2\n")
    assert bare.status == "failed" and bare.message == "the check failed (it gave no message)"


def test_exception_names_the_learner_line_not_the_runner():
    code = "import numpy as np\n\ndef square(x):\n    y = np.ones(3)\n    return y @ np.ones(4)\n"
    verdict = run_challenge(code, CHECK)
    assert verdict.status == "error" and verdict.line == 5
    assert verdict.message.startswith("line 5: ValueError: matmul")
    assert "Traceback" not in verdict.message and "runner.py" not in verdict.message
    top = run_challenge("x = 1\ny = undefined_name\n", CHECK)
    assert (top.status, top.line, top.message) == ("error", 2, "line 2: NameError: name 'undefined_name' is not "
                                                               "defined")


def test_error_inside_the_check_names_no_check_line():
    verdict = run_challenge("x = 1\n", CHECK)  # square was never defined: the check's NameError
    assert verdict.status == "error" and verdict.line is None
    assert verdict.message == "NameError: name 'square' is not defined"


def test_syntax_error():
    verdict = run_challenge("def square(x):\n    return (x\n", CHECK)
    assert verdict.status == "syntax" and verdict.line == 2
    assert verdict.message.startswith("line 2: ")


def test_memory_error_and_exit_are_verdicts():
    huge = run_challenge("import numpy as np\nx = np.zeros(10**15)\n", CHECK)
    assert huge.status == "error" and huge.line == 2 and "MemoryError" in huge.message
    gone = run_challenge("print('bye')\nraise SystemExit(3)\n", CHECK)
    assert gone.status == "error" and gone.line == 2 and gone.stdout == "bye\n"


def test_endless_recursion_is_a_verdict():
    verdict = run_challenge("def f(n):\n    return f(n + 1)\n\nf(0)\n")
    assert verdict.status == "error" and verdict.line == 2 and "RecursionError" in verdict.message


def test_run_without_check_and_capped_output():
    verdict = run_challenge("for i in range(100000):\n    print(i)\n")
    assert verdict.status == "ran" and not verdict.passed
    assert len(verdict.stdout) == 20_000 and verdict.stdout.startswith("0\n1\n")


def test_each_run_has_a_fresh_namespace():
    run_challenge("leak = 1\n")
    assert run_challenge("x = 1\n", "assert 'leak' not in globals(), 'leaked'\n").passed


def test_model_from_npz_bytes_name_or_object():
    lesson = slm.CausalLanguageModel()
    buffer = io.BytesIO()
    lesson.save(buffer)
    check = ("import numpy as np\nassert model.cfg.n_model == 4, model.cfg\n"
             "assert np.allclose(model.params['tok_emb'], expected)\n")
    names = {"expected": lesson.params["tok_emb"]}
    for model in (buffer.getvalue(), "lesson", lesson):
        assert run_challenge("", check, model=model, names=names).passed
    assert run_challenge("", "model\n").status == "error"  # no model given: no name `model`
