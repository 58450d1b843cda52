"""``python build.py``: build the site (and serve it), re-lock the pins, or check the patches."""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import threading
from pathlib import Path

from .assemble import build
from .common import PY_DIR, SITE, BuildError, cache_held
from .lock import read_lock, relock
from .patches import check_patches
from .serve import serving

DESCRIPTION = ("Build the static in-browser site: py/playground + py/slm running on Pyodide in a Web Worker "
               "(docs/site.md).")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="build.py", description=DESCRIPTION)
    ap.add_argument("--serve", action="store_true", help="after building, serve site/ on 127.0.0.1")
    ap.add_argument("--port", type=int, default=8000, help="port for --serve (0: any free port)")
    ap.add_argument("--pyodide-packages", type=Path, metavar="DIR",
                    help="folder of pyodide_2025_0 wasm wheels (NumPy, ...) to vendor: no request leaves the site")
    ap.add_argument("--site-dir", type=Path, default=SITE, help="write the site here instead of site/")
    ap.add_argument("--py-dir", type=Path, default=PY_DIR, help="folder holding the playground and slm packages")
    ap.add_argument("--hub-mirror", action="append", default=[], metavar="URL",
                    help="a Hugging Face Hub mirror the pages' CSP allows beside the Hub (hub=URL opens from it)")
    ap.add_argument("--lesson-origin", action="append", default=[], metavar="URL",
                    help="a site lesson files may be fetched from (?lesson=URL): its origin is added to the pages' "
                         "CSP (connect-src); repeat for several, e.g. https://courses.example.edu")
    ap.add_argument("--prepare", action="store_true",
                    help="only download and prepare what builds keep in .cache/ (then a build needs no network); "
                         "writes no site")
    ap.add_argument("--relock", action="store_true", help="re-resolve sha256 hashes of the versions in build.lock")
    ap.add_argument("--check-patches", action="store_true",
                    help="apply every patch under py/sitebuild/patches to the pinned sources; list every mismatch")
    args = ap.parse_args(argv)
    try:
        with cache_held():  # one build at a time may write .cache/
            if args.relock:
                relock()
                return 0
            if args.check_patches:
                problems = check_patches(read_lock())
                for problem in problems:
                    print(f"build.py: patch mismatch: {problem}", file=sys.stderr)
                print(f"{len(problems)} patch mismatches" if problems else "every patch applies to the pinned sources")
                return 1 if problems else 0
            if args.prepare:
                with tempfile.TemporaryDirectory() as tmp:
                    build(Path(tmp) / "site", args.py_dir, prepare=True)
                return 0
            build(args.site_dir, args.py_dir, args.pyodide_packages, args.hub_mirror, args.lesson_origin)
    except BuildError as e:
        print(f"build.py: error: {e}", file=sys.stderr)
        return 1
    if args.serve:
        with serving(args.site_dir, args.port) as url:
            print(f"Serving {args.site_dir} at {url}  (Ctrl+C to stop)", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                threading.Event().wait()
    return 0
