"""Fetching: the npm Pyodide package, pip's wheels and sdists (verified against build.lock, cached under
``.cache/`` so that rebuilds work offline), and terser for Pyodide's JavaScript and the patched BokehJS."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import sys
import tarfile
import tempfile
from collections.abc import Iterable
from pathlib import Path

from .common import CACHE, BuildError, log, run, sha256_file


def pip_wheel_args(dest: Path) -> list[str]:
    # Pure-Python wheels for the Python inside Pyodide 0.29.3 (3.13), never an sdist, never the host's deps.
    return [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps",
            "--only-binary=:all:", "--python-version", "3.13", "--implementation", "py", "--abi", "none",
            "--platform", "any", "-d", str(dest)]


def pip_sdist_args(dest: Path, names: Iterable[str]) -> list[str]:
    # --no-binary only for these: with ":all:" pip would also build the isolated build deps (Cython!) from source.
    return [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps",
            f"--no-binary={','.join(names)}", "-d", str(dest)]


def cached_or_download(entries: dict, folder: Path, base_args: list[str], kind: str) -> dict[str, Path]:
    """Return name -> verified file, calling pip only for what the cache lacks (so rebuilds work offline)."""
    folder.mkdir(parents=True, exist_ok=True)
    missing = [n for n, e in entries.items()
               if not (folder / e["file"]).is_file() or sha256_file(folder / e["file"]) != e["sha256"]]
    if missing:
        log(f"pip download {len(missing)} {kind}: {', '.join(missing)}")
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as req:
            for n in missing:
                req.write(f"{n}=={entries[n]['version']} --hash=sha256:{entries[n]['sha256']}\n")
        try:
            run(base_args[:-2] + ["--require-hashes", "-r", req.name] + base_args[-2:])
        finally:
            os.unlink(req.name)
    out = {}
    for n, e in entries.items():
        p = folder / e["file"]
        if not p.is_file():
            raise BuildError(f"{kind} {n}: pip did not produce {e['file']} (does the lock name the right file?)")
        if sha256_file(p) != e["sha256"]:
            raise BuildError(f"{kind} {n}: sha256 of {p} does not match build.lock")
        out[n] = p
    return out


def npm_package(name: str, version: str) -> Path:
    """The folder of an npm package, installed once under .cache/npm/ (npm checks what it downloads)."""
    prefix = CACHE / "npm" / f"{name}-{version}"
    folder = prefix / "node_modules" / name
    if not (folder / "package.json").is_file():
        log(f"npm install {name}@{version}")
        prefix.mkdir(parents=True, exist_ok=True)
        run(["npm", "install", "--no-save", "--no-audit", "--no-fund", "--prefix", str(prefix), f"{name}@{version}"])
    return folder


def terser_minified(src: Path, lock: dict, what: str) -> Path:
    """``src`` through terser (compress + mangle), cached by its content; ``what`` names the file in the log."""
    version = lock["terser"]["version"]
    cache = CACHE / "site" / f"{sha256_file(src)[:16]}-terser-{version}-{src.name}"
    if cache.is_file():
        return cache
    terser = npm_package("terser", version) / "bin" / "terser"
    log(f"terser: {what}")
    cache.parent.mkdir(parents=True, exist_ok=True)
    part = cache.with_suffix(".part")
    run(["node", str(terser), str(src), "--compress", "--mangle", "--output", str(part)])
    part.replace(cache)
    return cache


def minified_runtime_js(pkg: Path, lock: dict) -> Path:
    """pyodide.asm.js through terser (1.07 -> 0.91 MB). The npm file is whitespace-minified only; terser leaves
    alone every scope that holds a direct eval (Emscripten evaluates side modules' EM_JS code in the module's
    scope), so what that code names keeps its name."""
    return terser_minified(pkg / "pyodide.asm.js", lock, "Pyodide's pyodide.asm.js")


def fetch_pyodide(lock: dict, verify: bool = True) -> Path:
    """The npm pyodide package, unpacked under .cache/ (npm pack verifies its own integrity)."""
    version = lock["pyodide"]["version"]
    npm_dir = CACHE / "npm"
    tgz = npm_dir / f"pyodide-{version}.tgz"
    unpacked = CACHE / f"pyodide-{version}"
    npm_dir.mkdir(parents=True, exist_ok=True)
    if not tgz.is_file():
        log(f"npm pack pyodide@{version}")
        run(["npm", "pack", f"pyodide@{version}"], cwd=npm_dir)
    if verify:
        want = lock["pyodide"]["integrity"]
        algo, _, b64 = want.partition("-")
        got = base64.b64encode(hashlib.new(algo, tgz.read_bytes()).digest()).decode()
        if got != b64:
            raise BuildError(f"{tgz} does not match the integrity in build.lock; delete it and rebuild")
    pkg = unpacked / "package"
    if not (pkg / "pyodide.asm.wasm").is_file():
        shutil.rmtree(unpacked, ignore_errors=True)
        with tarfile.open(tgz) as tf:
            tf.extractall(unpacked, filter="data")
    return pkg


def official_lock(pkg: Path) -> dict:
    return json.loads((pkg / "pyodide-lock.json").read_text())
