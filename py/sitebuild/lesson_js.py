"""The lesson panel's scripts, which the page loads only when a lesson opens (the cold start does not pay for them):

- ``build/lesson.js``: the panel itself, from ``site/src/lesson/`` by bundle.py like the site's other scripts;
- ``build/lesson-libs.js``: the code editor (CodeMirror 6 with Python) and the math typesetter (KaTeX, MathML
  output: no fonts or stylesheet to ship, the browsers draw MathML), from their npm packages (pinned in
  build.lock's ``lesson_js``), bundled and minified by esbuild from ``site/src/editor/editor.js``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from .bundle import bundle
from .common import CACHE, SITE, BuildError, log, run

LESSON_JS = "build/lesson.js"
LESSON_LIBS = "build/lesson-libs.js"
ENTRY = "editor/editor.js"


def npm_folder(pins: dict[str, str]) -> Path:
    """node_modules holding the pinned packages (and esbuild), installed once under .cache/npm/."""
    key = hashlib.sha256(json.dumps(pins, sort_keys=True).encode()).hexdigest()[:12]
    prefix = CACHE / "npm" / f"lesson-js-{key}"
    if not (prefix / "node_modules" / ".complete").is_file():
        shutil.rmtree(prefix, ignore_errors=True)
        prefix.mkdir(parents=True)
        log(f"npm install {' '.join(f'{n}@{v}' for n, v in pins.items())}")
        run(["npm", "install", "--no-save", "--no-audit", "--no-fund", "--prefix", str(prefix),
             *(f"{name}@{version}" for name, version in pins.items())])
        (prefix / "node_modules" / ".complete").write_text("")
    return prefix / "node_modules"


def esbuild_binary(modules: Path) -> Path:
    """esbuild's native binary (its npm package ships it as an optional package per platform)."""
    found = sorted(modules.glob("@esbuild/*/bin/esbuild"))
    if not found:
        raise BuildError(f"{modules}: esbuild's platform package is missing (npm install esbuild)")
    return found[0]


def libs(lock: dict) -> Path:
    """lesson-libs.js, cached by the entry's text and the pins."""
    pins = lock["lesson_js"]["npm"]
    entry = SITE / "src" / ENTRY
    key = hashlib.sha256(entry.read_bytes() + json.dumps(pins, sort_keys=True).encode()).hexdigest()[:16]
    cache = CACHE / "site" / f"{key}-lesson-libs.js"
    if not cache.is_file():
        modules = npm_folder(pins)
        cache.parent.mkdir(parents=True, exist_ok=True)
        part = cache.with_suffix(".part")
        log("esbuild: lesson-libs.js (CodeMirror, KaTeX)")
        run([str(esbuild_binary(modules)), str(entry), "--bundle", "--minify", "--format=iife", "--target=es2020",
             "--legal-comments=eof", f"--outfile={part}", "--log-level=warning"],
            env={**os.environ, "NODE_PATH": str(modules)})
        part.replace(cache)
    return cache


def write(site: Path, lock: dict) -> list[str]:
    """Writes both scripts into `site`; their paths, relative to it."""
    (site / LESSON_JS).write_text(bundle(SITE / "src", "lesson/lesson.js"))
    shutil.copyfile(libs(lock), site / LESSON_LIBS)
    return [LESSON_JS, LESSON_LIBS]
