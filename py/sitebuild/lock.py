"""``build.lock``: the pinned version and hash of every artifact the build fetches, and ``--relock``."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

from .common import LOCK, BuildError, log, run, sha256_file

SECTIONS = ("pyodide", "terser", "wabt", "wheels", "sdists", "pyodide_packages")


def read_lock(path: Path = LOCK) -> dict:
    try:
        lock = json.loads(path.read_text())
    except FileNotFoundError as e:
        raise BuildError(f"lock file {path} is missing") from e
    except json.JSONDecodeError as e:
        raise BuildError(f"lock file {path} is not valid JSON: {e}") from e
    for key in SECTIONS:
        if key not in lock:
            raise BuildError(f"lock file {path} has no {key!r} section")
    return lock


def relock(path: Path = LOCK) -> None:
    """Re-resolve the sha256 of every pinned artifact (after editing a version in the lock)."""
    from .fetch import fetch_pyodide, official_lock, pip_sdist_args, pip_wheel_args

    lock = read_lock(path)
    with tempfile.TemporaryDirectory() as tmp:
        tmpd = Path(tmp)
        npm = run(["npm", "pack", "--json", f"pyodide@{lock['pyodide']['version']}"], cwd=tmpd)
        lock["pyodide"]["integrity"] = json.loads(npm.stdout)[0]["integrity"]
        specs = [f"{name}=={e['version']}" for name, e in lock["wheels"].items()]
        run(pip_wheel_args(tmpd) + specs)
        for name, entry in lock["wheels"].items():
            found = find_dist(tmpd, name, entry["version"], ".whl")
            entry.update(file=found.name, sha256=sha256_file(found))
        specs = [f"{name}=={e['version']}" for name, e in lock["sdists"].items()]
        run(pip_sdist_args(tmpd, lock["sdists"]) + specs)
        for name, entry in lock["sdists"].items():
            found = find_dist(tmpd, name, entry["version"], ".tar.gz")
            entry.update(file=found.name, sha256=sha256_file(found))
        official = official_lock(fetch_pyodide(lock, verify=False))
        for name, entry in lock["pyodide_packages"].items():
            pkg = official["packages"][name]
            entry.update(version=pkg["version"], file=pkg["file_name"], sha256=pkg["sha256"])
    path.write_text(json.dumps(lock, indent=1) + "\n")  # as the file is written
    log(f"rewrote {path}")


def canonical(name: str) -> str:
    """Package names as Pyodide's lock file keys them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def find_dist(folder: Path, name: str, version: str, suffix: str) -> Path:
    norm = re.sub(r"[-_.]+", "_", name).lower()
    for p in folder.iterdir():
        stem = re.sub(r"[-_.]+", "_", p.name).lower()
        if p.name.endswith(suffix) and stem.startswith(f"{norm}_{version.replace('.', '_')}"):
            return p
    raise BuildError(f"pip did not produce {name} {version} ({suffix}) in {folder}")
