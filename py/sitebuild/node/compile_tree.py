"""Byte-compile folders of /host for the browser's Python 3.13 (run inside Pyodide under Node by sitebuild.node).

Arguments: the folder the bytecode will be imported from (``ddir``: it names the source in tracebacks), the mode,
the optimization level, then the names of the folders of /host to compile, each as its own tree.
Modes: ``legacy`` writes foo.pyc next to foo.py, importable once the source is removed;
``hash`` writes __pycache__ files that are trusted without checking the kept source's modification time.
"""

import compileall
import py_compile
import sys

ddir, mode, optimize, names = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
options = ({"legacy": True} if mode == "legacy"
           else {"invalidation_mode": py_compile.PycInvalidationMode.UNCHECKED_HASH})
for name in names:
    if not compileall.compile_dir(f"/host/{name}", ddir=ddir, quiet=1, workers=1, optimize=optimize, **options):
        raise SystemExit(f"compileall failed in {name}")
