"""Upstream changes as patch files: ``patches/<dist>-<version>/NNNN-what.patch``, applied in order with GNU patch.

Each patch opens with a header (why, the measured gain, the upstream issue or "none") that patch ignores. A patch
must apply exactly: no fuzz, every hunk, or the build stops naming each hunk that failed. ``--check-patches``
applies every folder to the pinned upstream sources in a scratch folder and reports every mismatch at once.
The folder named ``pyodide-<version>`` patches Pyodide's standard-library zip (its ``pyodide`` package);
``bokehjs-<version>`` patches the JavaScript of the bokeh wheel, which the page loads (assemble.py minifies the
patched ``bokeh.js`` with terser into the ``bokeh.min.js`` it serves); every other folder, the wheel of that name.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import zipfile
from pathlib import Path

from .common import HERE, BuildError, log

PATCHES = HERE / "patches"
_FOLDER = re.compile(r"^(?P<dist>.+)-(?P<version>\d[^-]*)$")


def patch_folders() -> dict[str, tuple[str, Path]]:
    """dist -> (version, folder) for every folder under patches/."""
    found: dict[str, tuple[str, Path]] = {}
    for folder in sorted(p for p in PATCHES.iterdir() if p.is_dir()):
        m = _FOLDER.match(folder.name)
        if not m or m["dist"] in found:
            raise BuildError(f"{folder}: patch folders are named <dist>-<version>, one per distribution")
        found[m["dist"]] = (m["version"], folder)
    return found


def patches_for(dist: str, version: str) -> list[Path]:
    """The patches of ``dist`` at ``version``, in order; an error if the folder is for another version."""
    folder = patch_folders().get(dist)
    if folder is None:
        return []
    if folder[0] != version:
        raise BuildError(f"{folder[1].name}: its patches are for {dist} {folder[0]}, build.lock pins {version}; "
                         "re-make them for the new version (docs/site.md, 'Bumping a version')")
    return sorted(folder[1].glob("*.patch"))


def apply(patch: Path, tree: Path) -> list[str]:
    """Apply one patch to ``tree`` (no fuzz, no backup or reject files); the hunks that failed, as text."""
    try:
        proc = subprocess.run(["patch", "-p1", "--forward", "--fuzz=0", "--batch", "--no-backup-if-mismatch",
                               "--reject-file=-", "-d", str(tree), "-i", str(patch)], capture_output=True, text=True)
    except FileNotFoundError as e:
        raise BuildError("GNU patch not found: install it (Debian/Ubuntu: apt-get install patch)") from e
    failures, current = [], "?"
    for line in (proc.stdout + proc.stderr).splitlines():
        if m := re.match(r"(?:patching|checking) file (.+)", line):
            current = m[1].strip("'")
        elif m := re.match(r"Hunk #(\d+) FAILED at (\d+)", line):
            failures.append(f"{current}: hunk #{m[1]} (line {m[2]}) does not match")
        elif "can't find file to patch" in line or "No file to patch" in line:
            failures.append(f"{current}: no such file")
        elif "Reversed (or previously applied) patch detected" in line:
            failures.append(f"{current}: already applied, or reversed")
    if proc.returncode != 0 and not failures:
        failures.append(f"patch failed ({proc.returncode}): {(proc.stdout + proc.stderr).strip()[-400:]}")
    return failures


def apply_patches(tree: Path, dist: str, version: str) -> None:
    """Apply every patch of ``dist`` ``version`` to an unpacked ``tree``; stop on the first that does not apply."""
    for patch in patches_for(dist, version):
        failures = apply(patch, tree)
        if failures:
            raise BuildError(f"{patch.parent.name}/{patch.name} does not apply (a new version? run "
                             f"`python build.py --check-patches`):\n  " + "\n  ".join(failures))


def patch_key(dist: str, version: str) -> str:
    """What the patches of a distribution are, for the cache key of the files made from it."""
    return "|".join(f"{p.name}:{p.read_text()}" for p in patches_for(dist, version))


def pinned_versions(lock: dict) -> dict[str, str]:
    versions = {name: e["version"] for name, e in lock["wheels"].items()}
    versions["pyodide"] = lock["pyodide"]["version"]
    versions["bokehjs"] = versions["bokeh"]  # BokehJS is in the bokeh wheel
    return versions


def check_patches(lock: dict) -> list[str]:
    """Apply every patch to the pinned upstream sources in a scratch folder; every mismatch, as text."""
    from .common import CACHE
    from .fetch import cached_or_download, fetch_pyodide, pip_wheel_args

    versions = pinned_versions(lock)
    problems: list[str] = []
    for dist, (version, folder) in patch_folders().items():
        if dist not in versions:
            problems.append(f"{folder.name}: build.lock pins no distribution named {dist!r}")
            continue
        if version != versions[dist]:
            problems.append(f"{folder.name}: build.lock pins {dist} {versions[dist]}, these patches are for "
                            f"{version}")
            continue
        with tempfile.TemporaryDirectory() as tmp:
            tree = Path(tmp)
            if dist == "pyodide":
                source = fetch_pyodide(lock) / "python_stdlib.zip"
            else:
                wheel = "bokeh" if dist == "bokehjs" else dist
                entries = {wheel: lock["wheels"][wheel]}
                source = cached_or_download(entries, CACHE / "wheels", pip_wheel_args(CACHE / "wheels"), "wheel")[wheel]
            with zipfile.ZipFile(source) as zf:
                zf.extractall(tree)
            for patch in sorted(folder.glob("*.patch")):
                problems += [f"{folder.name}/{patch.name}: {failure}" for failure in apply(patch, tree)]
        log(f"checked {folder.name}: {len(list(folder.glob('*.patch')))} patches")
    return problems
