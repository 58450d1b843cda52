"""Byte-compile /host for the browser's Python 3.13 (run inside Pyodide under Node by sitebuild.node).

Arguments: the folder the bytecode will be imported from (``ddir``: it names the source in tracebacks), the mode,
the optimization level. Modes: ``legacy`` writes foo.pyc next to foo.py, importable once the source is removed;
``hash`` writes __pycache__ files that are trusted without checking the kept source's modification time.
"""

import compileall
import py_compile
import sys

ddir, mode, optimize = sys.argv[1], sys.argv[2], int(sys.argv[3])
options = ({"legacy": True} if mode == "legacy"
           else {"invalidation_mode": py_compile.PycInvalidationMode.UNCHECKED_HASH})
if not compileall.compile_dir("/host", ddir=ddir, quiet=1, workers=1, optimize=optimize, **options):
    raise SystemExit("compileall failed")
