"""What every step of the build shares: where things are, the error a user can fix, logging, subprocesses."""

from __future__ import annotations

import contextlib
import hashlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "site"
LOCK = ROOT / "build.lock"
CACHE = ROOT / ".cache"
PY_DIR = ROOT / "py"
HERE = Path(__file__).resolve().parent


class BuildError(Exception):
    """A problem the user can fix; printed without a traceback."""


@contextlib.contextmanager
def cache_held() -> Iterator[None]:
    """Hold .cache/ for one build at a time: two builds at once (parallel test workers) would write the same
    downloads and cache entries. Where there is no flock (Windows), builds simply are not run at once."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    CACHE.mkdir(exist_ok=True)
    with (CACHE / ".lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        yield


def log(msg: str) -> None:
    print(f"[build] {msg}", flush=True)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    """Run a subprocess; on failure raise BuildError with its output so the user sees why."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, **kw)  # type: ignore[call-overload]
    except FileNotFoundError as e:
        raise BuildError(f"{cmd[0]!r} not found: install it (the build needs Python + pip + node/npm)") from e
    if proc.returncode != 0:
        out = (proc.stdout + proc.stderr).strip()
        raise BuildError(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{out[-4000:]}")
    return proc
