#!/usr/bin/env python3
"""Build the static in-browser site: ``py/playground`` + ``py/slm`` running on Pyodide in a Web Worker.

Steps: read the pins in ``build.lock`` -> fetch (npm / pip, verified, cached under ``.cache/``) -> slim, patch and
byte-compile the wheels for Python 3.13 (inside the npm Pyodide under Node) -> write ``site/build/`` with a
Pyodide lock file and a manifest the loader reads -> optionally serve ``site/`` on 127.0.0.1.

The builder is the package ``py/sitebuild`` (standard library only; network access goes through the ``pip`` and
``npm`` clients); this file is its entry point. See docs/site.md.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "py"))

from sitebuild.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
