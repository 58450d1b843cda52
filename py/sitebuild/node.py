"""Build steps that need the browser's Python 3.13 itself: Python files of node/ run inside the npm Pyodide
under Node (node/run_python.cjs), with a host folder mounted at /host."""

from __future__ import annotations

from pathlib import Path

from .common import HERE, BuildError, run

NODE = HERE / "node"
RUNNER = NODE / "run_python.cjs"


def run_python(pkg: Path, script: str, host: Path, *args: str) -> None:
    """Run node/<script> in Pyodide (npm package at ``pkg``) with ``host`` at /host and ``args`` in sys.argv."""
    run(["node", str(RUNNER), str(pkg), str(host), str(NODE / script), *args])


def step_files(script: str) -> bytes:
    """The code a step runs (runner and script), for the cache key of what it makes."""
    return RUNNER.read_bytes() + b"\0" + (NODE / script).read_bytes()


def compile_trees(pkg: Path, trees: list[Path], ddir: str, mode: str, optimize: int = 0) -> None:
    """Byte-compile each of ``trees`` (folders in one parent folder) for Python 3.13 (node/compile_tree.py), all in
    one start of Pyodide (~5 s each); in ``legacy`` mode the sources go."""
    host = trees[0].parent
    if any(tree.parent != host for tree in trees):
        raise ValueError(f"trees to compile must share one parent folder: {trees}")
    run_python(pkg, "compile_tree.py", host, ddir, mode, str(optimize), *(tree.name for tree in trees))
    if mode == "legacy":
        for tree in trees:
            for py in tree.rglob("*.py"):
                if py.with_suffix(".pyc").is_file():
                    py.unlink()
                else:
                    raise BuildError(f"compileall left no bytecode for {py} (syntax not valid for Python 3.13?)")
