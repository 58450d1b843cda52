"""Each Python package the site ships, as a wheel: the pinned wheels slimmed, patched and byte-compiled for
Python 3.13, pure-Python wheels made from sdists, vendored wasm wheels slimmed, the project's own wheel, the Jinja
template bytecode and the standard-library zip. Every result is cached under ``.cache/site/`` by a key of its
inputs, so a rebuild only redoes what changed."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from .common import CACHE, BuildError, log, sha256_file
from .node import compile_trees, run_python, step_files
from .patches import apply_patches, patch_key
from .slim import STDLIB_DROP, drop_unimportable, unpack
from .zips import DEFLATE, pack_wheel, write_dist_info, write_zip

# Bump when the processing below changes, so cached slimmed/compiled wheels are rebuilt.
PROCESS_VERSION = f"8-{DEFLATE}"
# Docstrings and asserts out of the bytecode (-OO): the stdlib supports it, and the app runs with the third-party
# wheels' docstrings gone too (the end-to-end tests); SITE_WHEEL_OPTIMIZE=0 keeps theirs.
STDLIB_OPTIMIZE = 2
WHEEL_OPTIMIZE = int(os.environ.get("SITE_WHEEL_OPTIMIZE", "2"))


def unpack_importable(whl: Path, dest: Path, keep: Callable[[str], bool], dist: str, version: str) -> None:
    """Unpack what ``keep`` keeps of a pinned wheel, drop what cannot be imported here, apply its patches."""
    unpack(whl, dest, keep)
    drop_unimportable(dest)
    apply_patches(dest, dist, version)


class WheelJob(NamedTuple):
    """One wheel to make: ``make_tree`` fills a folder with its files, packed as ``out_name``; ``key`` names its
    inputs (the cache entry)."""
    make_tree: Callable[[Path], None]
    out_name: str
    key: str


def process_wheels(pkg: Path, jobs: list[WheelJob], out_dir: Path, compile_mode: str | None,
                   optimize: int = 0) -> list[Path]:
    """Slim + compile wheels, each cached under .cache/site/ by a key of its inputs (with the Pyodide that compiles
    it and the compile step's code, when it is compiled). The uncached ones are compiled together: one start of
    Pyodide under Node for all of them."""
    step = (f"|{sha256_file(pkg / 'pyodide.asm.wasm')}|{hashlib.sha256(step_files('compile_tree.py')).hexdigest()}"
            if compile_mode else "")
    caches = [CACHE / "site" / f"{hashlib.sha256(f'{job.key}{step}|{optimize}'.encode()).hexdigest()[:16]}-"
              f"{job.out_name}" for job in jobs]
    missing = [(job, cache) for job, cache in zip(jobs, caches, strict=True) if not cache.is_file()]
    if missing:
        with tempfile.TemporaryDirectory() as tmp:
            trees = []
            for i, (job, _) in enumerate(missing):
                trees.append(Path(tmp) / str(i))
                trees[-1].mkdir()
                job.make_tree(trees[-1])
            if compile_mode:
                compile_trees(pkg, trees, "/lib/python3.13/site-packages", compile_mode, optimize)
            for tree, (_, cache) in zip(trees, missing, strict=True):
                cache.parent.mkdir(parents=True, exist_ok=True)
                part = cache.with_suffix(".part")
                pack_wheel(tree, part)
                part.replace(cache)
    outs = []
    for job, cache in zip(jobs, caches, strict=True):
        outs.append(out_dir / job.out_name)
        shutil.copyfile(cache, outs[-1])
    return outs


def template_bytecode(pkg: Path, entries: dict[str, dict], out_dir: Path) -> dict | None:
    """A wheel of Jinja's bytecode for the templates `import panel` compiles, made by Python 3.13 itself (the
    cache holds marshalled code): 0.07-0.09 s off a first visit's app stage. Needs a wasm NumPy (Panel imports
    it), so only builds that vendor one get it; without it, the same templates are compiled at run time."""
    wheels = sorted(e["path"] for name, e in entries.items() if name != "slm_playground")  # not the app
    key = hashlib.sha256(step_files("template_bytecode.py") + "|".join([PROCESS_VERSION, *map(sha256_file, wheels)])
                         .encode())
    name, version = "site_template_bytecode", "1"
    cache = CACHE / "site" / f"{key.hexdigest()[:16]}-{name}-{version}-py3-none-any.whl"
    if not cache.is_file():
        log("compiling Panel's and Bokeh's Jinja templates for Python 3.13 (Pyodide under Node)")
        with tempfile.TemporaryDirectory() as tmp:
            tree, wheel_dir = Path(tmp) / "tree", Path(tmp) / "wheels"
            tree.mkdir()
            wheel_dir.mkdir()
            for whl in wheels:
                shutil.copyfile(whl, wheel_dir / whl.name)
            try:
                run_python(pkg, "template_bytecode.py", Path(tmp))
            except BuildError as e:  # e.g. a stand-in NumPy without the module (the tests' fake wheel)
                log(f"no template bytecode: Panel does not import under Node with these wheels "
                    f"({str(e).strip().splitlines()[-1]})")
                return None
            if not any(tree.rglob("__jinja2_*.cache")):
                raise BuildError("importing Panel under Node wrote no Jinja bytecode (patches not applied?)")
            write_dist_info(tree, name, version, [])
            part = cache.with_suffix(".part")
            pack_wheel(tree, part)
            part.replace(cache)
    out = out_dir / cache.name.split("-", 1)[1]
    shutil.copyfile(cache, out)
    return {"name": name, "version": version, "path": out, "imports": []}


def compiled_stdlib(pkg: Path, lock: dict) -> Path:
    """python_stdlib.zip with .pyc only (Pyodide otherwise compiles every stdlib module it imports), slimmed."""
    src = pkg / "python_stdlib.zip"
    version = lock["pyodide"]["version"]
    patches = patch_key("pyodide", version)
    tag = hashlib.sha256(f"{STDLIB_DROP.pattern}|{STDLIB_OPTIMIZE}|{patches}".encode()).hexdigest()[:8]
    cache = CACHE / "site" / f"{sha256_file(src)[:16]}-{PROCESS_VERSION}-{tag}-python_stdlib.zip"
    if cache.is_file():
        return cache
    log("byte-compiling the standard library for Python 3.13 (Pyodide under Node)")
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "stdlib"
        with zipfile.ZipFile(src) as zf:
            zf.extractall(tree, [n for n in zf.namelist() if not STDLIB_DROP.search(n)])
        apply_patches(tree, "pyodide", version)
        compile_trees(pkg, [tree], "/lib/python313.zip", "legacy", STDLIB_OPTIMIZE)
        cache.parent.mkdir(parents=True, exist_ok=True)
        part = cache.with_suffix(".part")
        write_zip(part, ((p.relative_to(tree).as_posix(), p.read_bytes()) for p in sorted(tree.rglob("*"))
                         if p.is_file()))
        part.replace(cache)
    return cache


def sdist_to_tree(sdist: Path, entry: dict, dest: Path) -> None:
    """Copy the pure-Python package dirs out of an sdist (PyYAML's lib/yaml, MarkupSafe's src/markupsafe)."""
    with tarfile.open(sdist) as tf:
        members = tf.getmembers()
        for src_dir, pkg in entry["package_dirs"].items():
            prefix = f"{members[0].name.split('/')[0]}/{src_dir}/"
            n = 0
            for m in members:
                if m.isfile() and m.name.startswith(prefix) and m.name.endswith(".py"):
                    target = dest / pkg / m.name[len(prefix):]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(tf.extractfile(m).read())  # type: ignore[union-attr]
                    n += 1
            if not n:
                raise BuildError(f"{sdist.name}: no Python files under {src_dir}/")
    write_dist_info(dest, entry["dist_name"], entry["version"], entry["package_dirs"].values())


# The packages of py/ that the browser runs (py/sitebuild, this builder, stays on the build machine).
PROJECT_PACKAGES = ("playground", "slm", "lessons")


def project_packages(py_dir: Path) -> list[Path]:
    if not py_dir.is_dir():
        raise BuildError(f"--py-dir {py_dir}: not a folder")
    pkgs = [py_dir / name for name in PROJECT_PACKAGES if (py_dir / name / "__init__.py").is_file()]
    if len(pkgs) != len(PROJECT_PACKAGES):
        found = sorted(p.name for p in py_dir.iterdir() if (p / "__init__.py").is_file())
        raise BuildError(f"{py_dir} must hold the packages {', '.join(PROJECT_PACKAGES)} (found: {found})")
    if not (py_dir / "playground" / "app.py").is_file():
        raise BuildError(f"{py_dir / 'playground' / 'app.py'} is missing (the app entry point)")
    return pkgs


# Not needed in the browser: the training's and the SAE's command lines (the Train and Features views run them), of
# slm/weights/ all but the weights (card, logs, curves), and the instructors' lesson checker.
PROJECT_EXCLUDE = re.compile(
    r"^slm/(train|sae)/(__main__|lab_cli)\.py$|^slm/weights/(?!.*\.npz$)|^lessons/(cli|__main__)\.py$")


def project_tree(py_dir: Path) -> tuple[Callable[[Path], None], str]:
    """The app's code and weights (slm/weights/*.npz) as one wheel; returns (tree maker, content hash)."""
    files: list[tuple[Path, str]] = []
    for pkg in project_packages(py_dir):
        for p in sorted(pkg.rglob("*")):
            rel = p.relative_to(py_dir)
            if (p.is_file() and "__pycache__" not in rel.parts and p.suffix not in (".pyc", ".pyo")
                    and not PROJECT_EXCLUDE.search(rel.as_posix())):
                files.append((p, rel.as_posix()))
    h = hashlib.sha256()
    for p, rel in files:
        h.update(rel.encode() + b"\0" + hashlib.sha256(p.read_bytes()).digest())

    def make(tree: Path) -> None:
        for p, rel in files:
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, tree / rel)
        write_dist_info(tree, "slm_playground", "0.1.0", [p.name for p in project_packages(py_dir)])

    return make, h.hexdigest()


def pyodide_dir_wheels(folder: Path, lock: dict, official: dict) -> dict[str, Path]:
    """Validate a --pyodide-packages folder: each wheel must be built for this Pyodide's ABI."""
    if not folder.is_dir():
        raise BuildError(f"--pyodide-packages {folder}: not a folder")
    abi = f"pyodide_{official['info']['abi_version']}_{official['info']['arch']}"
    found: dict[str, Path] = {}
    for whl in sorted(folder.glob("*.whl")):
        name = whl.name.split("-")[0].lower()
        if name in lock["pyodide_packages"]:
            if not whl.name.endswith(f"{abi}.whl") and not whl.name.endswith("none-any.whl"):
                raise BuildError(f"{whl.name}: not built for {abi} (Pyodide {lock['pyodide']['version']})")
            found[name] = whl
    missing = [n for n, e in lock["pyodide_packages"].items() if e.get("required") and n not in found]
    if missing:
        raise BuildError(f"--pyodide-packages {folder}: no wheel for {', '.join(missing)} "
                         f"(need e.g. {lock['pyodide_packages'][missing[0]]['file']})")
    for name, whl in found.items():
        want = lock["pyodide_packages"][name]["sha256"]
        if sha256_file(whl) != want:
            print(f"[build] WARNING: {whl.name} differs from the official Pyodide "
                  f"{lock['pyodide']['version']} build (sha256 in build.lock); vendoring it anyway", file=sys.stderr)
    return found
