#!/usr/bin/env python3
"""Build the static in-browser site: ``py/playground`` + ``py/slm`` running on Pyodide in a Web Worker.

Steps: read the pins in ``build.lock`` -> fetch (npm / pip, verified, cached under ``.cache/``) -> slim and
byte-compile the wheels for Python 3.13 (inside the npm Pyodide under Node) -> write ``site/build/`` with a
Pyodide lock file and a manifest the loader reads -> optionally serve ``site/`` on 127.0.0.1.

Only the standard library is used; network access goes through the ``pip`` and ``npm`` clients.
See docs/site.md for the layout and the measured numbers.
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import contextlib
import csv
import functools
import hashlib
import http.server
import io
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import threading
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent
SITE = ROOT / "site"
LOCK = ROOT / "build.lock"
CACHE = ROOT / ".cache"
PY_DIR = ROOT / "py"
# Files in site/ that are hand-written (copied when building into another folder).
SHELL_FILES = ("index.html", "embed.html", "loader.js", "worker.js", "snapshot.js", "prelude.py", "boot.py",
               "style.css", "sw.js")
# The runtime default for packages that are not vendored (binary wasm wheels such as NumPy).
PYODIDE_CDN = "https://cdn.jsdelivr.net/pyodide/v{version}/full/"
try:  # optional: every zip the build writes is ~4 % smaller with it (requirements.txt installs it)
    from zopfli.zopfli import compress as zopfli_compress
except ImportError:
    zopfli_compress = None
DEFLATE = "zopfli" if zopfli_compress else "zlib-9"
# Bump when the processing below changes, so cached slimmed/compiled wheels are rebuilt.
PROCESS_VERSION = f"8-{DEFLATE}"
# Relative to the page: Panel's document JSON names its CSS under this prefix (see worker.js / boot.py).
PANEL_CDN_ROOT = "./build/vendor/"
# BokehJS bundles the main thread loads, in order (panel.min.js last: it extends the Bokeh global).
BOKEH_JS = ("bokeh.min.js", "bokeh-widgets.min.js", "bokeh-tables.min.js")
# Pyodide runtime files the browser needs (the rest of the npm package is docs, types and Node glue).
RUNTIME_FILES = ("pyodide.mjs", "pyodide.asm.js", "pyodide.asm.wasm")


class BuildError(Exception):
    """A problem the user can fix; printed without a traceback."""


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


# --------------------------------------------------------------------------------------------- lock file


def read_lock(path: Path = LOCK) -> dict:
    try:
        lock = json.loads(path.read_text())
    except FileNotFoundError as e:
        raise BuildError(f"lock file {path} is missing") from e
    except json.JSONDecodeError as e:
        raise BuildError(f"lock file {path} is not valid JSON: {e}") from e
    for key in ("pyodide", "terser", "wheels", "sdists", "pyodide_packages"):
        if key not in lock:
            raise BuildError(f"lock file {path} has no {key!r} section")
    return lock


def relock(path: Path = LOCK) -> None:
    """Re-resolve the sha256 of every pinned artifact (after editing a version in the lock)."""
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
    path.write_text(json.dumps(lock, indent=2) + "\n")
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


# ----------------------------------------------------------------------------------------------- fetching


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


def minified_runtime_js(pkg: Path, lock: dict) -> Path:
    """pyodide.asm.js through terser (compress + mangle: 1.07 -> 0.91 MB). The npm file is whitespace-minified
    only; terser leaves alone every scope that holds a direct eval (Emscripten evaluates side modules' EM_JS code
    in the module's scope), so what that code names keeps its name."""
    src = pkg / "pyodide.asm.js"
    version = lock["terser"]["version"]
    cache = CACHE / "site" / f"{sha256_file(src)[:16]}-terser-{version}-pyodide.asm.js"
    if cache.is_file():
        return cache
    prefix = CACHE / "npm" / f"terser-{version}"
    terser = prefix / "node_modules" / "terser" / "bin" / "terser"
    if not terser.is_file():
        log(f"npm install terser@{version}")
        prefix.mkdir(parents=True, exist_ok=True)
        run(["npm", "install", "--no-save", "--no-audit", "--no-fund", "--prefix", str(prefix), f"terser@{version}"])
    cache.parent.mkdir(parents=True, exist_ok=True)
    part = cache.with_suffix(".part")
    run(["node", str(terser), str(src), "--compress", "--mangle", "--output", str(part)])
    part.replace(cache)
    return cache


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


# ------------------------------------------------------------------------------------------ wheel surgery

# What the worker never reads. Panel's and Bokeh's browser assets are served from site/build/vendor instead
# (extracted from these same wheels); the Python side only builds URLs to them.
SLIM_RULES: dict[str, tuple[str, ...]] = {
    "panel": (r"panel/dist/", r"panel/tests/", r"panel/package-lock\.json$", r"panel/command/",
              r"panel/_templates/.*\.(ico|png)$", r"\.map$", r"\.d\.ts$",
              # TypeScript sources of panel.min.js and their build configs (package.json is read: keep it)
              r"^panel/.*\.ts$", r"^panel/styles/.*\.less$", r"^panel/(eslint\.config\.js|tsconfig\.json)$",
              # the `panel convert` / `panel compile` commands' code (nothing outside panel.command imports it)
              r"^panel/(io/convert|io/compile|compiler)\.py$"),
    "bokeh": (r"bokeh/server/static/", r"bokeh/sphinxext/", r"bokeh/sampledata/",
              r"bokeh/_sri/(?!{version}\.json)",  # resources.py reads the running version's hashes
              r"bokeh/command/", r"\.map$", r"\.d\.ts$"),
    # Only packaging.version is imported (by panel and bokeh); only these four markdown-it plugins (by panel's
    # Markdown pane).
    "packaging": (r"^packaging/(?!(__init__|version|_structures)\.py$)",),
    "mdit-py-plugins": (r"^mdit_py_plugins/(?!(__init__|utils)\.py$|(anchors|deflist|footnote|tasklists)/)",),
    # The JupyterLab extension's JS (for a Jupyter front end; also installed as data files): not used in a browser
    # worker. Its package.json stays: pyviz_comms reads its version from it at import.
    "pyviz_comms": (r"^pyviz_comms/labextension/(?!package\.json$)", r"^pyviz_comms-[^/]*\.data/"),
    "*": (r"(^|/)tests?/", r"\.pyi$", r"(^|/)py\.typed$"),
}

# Packages the site does not ship. A module that imports one of them unconditionally (at the top level, directly
# or through another such module) raises ImportError in the worker whether or not it is shipped: e.g.
# panel.io.server and bokeh.server.* (tornado), panel.io.ipywidget (ipywidgets). Those are left out.
NOT_SHIPPED = ("tornado", "ipywidgets", "ipykernel", "jupyter_client", "jupyter_server", "fastapi", "starlette",
               "django")
_TOP_IMPORT = re.compile(r"^(?:from\s+(\.*)([\w.]*)\s+import\s+\(?([\w, ]+)|import\s+([\w.]+))", re.M)


def drop_unimportable(tree: Path) -> list[str]:
    """Remove the modules of ``tree`` that cannot be imported without a package in NOT_SHIPPED; returns them."""
    modules: dict[str, Path] = {}
    for py in tree.rglob("*.py"):
        rel = py.relative_to(tree).with_suffix("")
        modules[".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)] = py
    imports: dict[str, set[str]] = {}
    for mod, py in modules.items():
        pkg = mod if py.name == "__init__.py" else mod.rpartition(".")[0]
        found: set[str] = set()
        for dots, name, names, plain in _TOP_IMPORT.findall(py.read_text(errors="replace")):
            if plain:
                found.add(plain)
                continue
            base = pkg.split(".")[: len(pkg.split(".")) - max(len(dots) - 1, 0)] if dots else []
            full = ".".join(base + ([name] if name else []))
            found.add(full)
            found.update(f"{full}.{n}" for n in re.findall(r"\w+", names))
        imports[mod] = found
    dead: set[str] = set()
    while True:
        new = {m for m, found in imports.items() if m not in dead
               and any(i.split(".")[0] in NOT_SHIPPED or i in dead for i in found)}
        if not new:
            break
        dead |= new
    for mod in dead:
        modules[mod].unlink()
    return sorted(dead)


# Vendored wasm wheels (--pyodide-packages): what neither `import numpy` nor the app imports (checked: sys.modules
# after visiting every view and generating; numpy 2.2 imports fft, polynomial, testing, typing, f2py and ctypeslib
# lazily, on attribute access). Pyodide loads every extension module of a package while installing it, so an
# unused .so (numpy.fft's _pocketfft_umath, linalg's lapack_lite) costs download *and* wasm compile time.
VENDORED_SLIM_RULES: dict[str, tuple[str, ...]] = {
    "numpy": (r"^numpy/(f2py|fft|polynomial|testing|typing|_pyinstaller|_core/include|_core/lib|random/_examples"
              r"|random/lib)/", r"^numpy/linalg/(lapack_lite|_umath_linalg)\.", r"^numpy/(conftest|_configtool)\.",
              r"^numpy/ma/API_CHANGES\.txt$", r"^numpy/_core/_add_newdocs(_scalars)?\.pyc$"),
    "*": (r"(^|/)tests?/", r"\.(pyi|pxd|pyx|c|h|a)$", r"(^|/)py\.typed$", r"\.dist-info/entry_points\.txt$"),
}


# Modules that replace a dropped one which is imported but never called. numpy.linalg imports its LAPACK gufuncs
# (_umath_linalg, a 1.26 MB side module: 0.42 MB of download and its wasm compile) at import, but only inv, solve,
# eig, svd, det, lstsq… call them; the app uses np.linalg.norm, which does not.
LINALG_STUB = '''"""Stand-in for numpy's LAPACK gufuncs: this site does not ship them (docs/site.md)."""


def __getattr__(name: str) -> object:
    raise AttributeError(f"numpy.linalg's LAPACK routines ({name}) are not part of this site: build.py dropped "
                         "numpy/linalg/_umath_linalg to keep the download small")
'''
# numpy._core imports these two only to attach docstrings to its C functions and scalar types (60 kB of
# bytecode): what python -OO does to the bytecode this build compiles, for NumPy's C objects.
NO_DOCS_STUB = '''"""NumPy's docstrings for its C objects are not part of this site (docs/site.md)."""\n'''
VENDORED_STUBS: dict[str, dict[str, str]] = {"numpy": {"numpy/linalg/_umath_linalg.py": LINALG_STUB,
                                                       "numpy/_core/_add_newdocs.py": NO_DOCS_STUB,
                                                       "numpy/_core/_add_newdocs_scalars.py": NO_DOCS_STUB}}


def unpack_vendored(whl: Path, dist: str, dest: Path) -> None:
    """Unpack a vendored wheel without what vendored_filter() drops; a module in VENDORED_STUBS that the wheel had
    (as .so or .pyc) is replaced by its stand-in."""
    unpack(whl, dest, vendored_filter(dist))
    with zipfile.ZipFile(whl) as zf:
        names = zf.namelist()
    for rel, text in VENDORED_STUBS.get(dist, {}).items():
        stem = rel.removesuffix(".py")
        if any(n.startswith(f"{stem}.") and n.endswith((".so", ".pyc")) for n in names):
            (dest / rel).write_text(text)


def vendored_filter(dist: str) -> Callable[[str], bool]:
    pats = [re.compile(p) for p in VENDORED_SLIM_RULES.get(dist, ()) + VENDORED_SLIM_RULES["*"]]
    return lambda name: not any(p.search(name) for p in pats)


def slim_filter(dist: str, version: str) -> Callable[[str], bool]:
    rules = SLIM_RULES.get(dist, ()) + SLIM_RULES["*"]
    pats = [re.compile(p.replace("{version}", re.escape(version))) for p in rules]
    return lambda name: not any(p.search(name) for p in pats)


def unpack(whl: Path, dest: Path, keep: Callable[[str], bool]) -> None:
    with zipfile.ZipFile(whl) as zf:
        for info in zf.infolist():
            if info.is_dir() or not keep(info.filename) or ".dist-info/RECORD" in info.filename:
                continue
            target = dest / info.filename
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(zf.read(info))


# Import-time work whose only product is documentation. Creating each of bokeh.models' ~450 classes builds an
# `__init__` signature from every property (with Sphinx type links) and an example docstring: 0.15 s of the
# ~1 s `import panel` takes in the worker (docs/site.md). help() and IDEs read them; nothing in the worker does
# (bokeh.plotting's glyph methods call `parameters()` themselves). The wheels are compiled without docstrings
# already (WHEEL_OPTIMIZE). The same for bokeh.plotting's 66 glyph methods (0.03 s): their signatures list
# the positional arguments only (what the methods map `*args` to), with no generated docstring.
# Each edit must match the pinned source exactly once, or the build stops.
#
# Param, on creating a Parameterized class, looks up every slot of every new parameter in every class of the
# MRO (about a quarter of `import panel`). Its edit finds the classes that define the parameter once per
# parameter, not once per slot, and reads a slot with one getattr instead of hasattr + getattr: the same
# result (tests/site compares every slot of every parameter of ~290 classes), 0.175 -> 0.13 s in Node.
#
# Also: `import panel` compiles 21 Jinja templates of Panel and Bokeh (0.07-0.09 s); their two Environments get a
# bytecode cache in their own template folders, which the build fills (template_bytecode(), below). And it
# imports two things nothing here uses: `panel.chat` (now on first access of `pn.chat`), and `unittest.mock`, for
# panel.io.cache's hashing of mocks; keyed by type name instead (Panel's own form for types it does not import),
# every mock still hashes as before (by id, which is also the fallback for objects without a hash function).
# Bokeh imports PyYAML with its settings and themes (0.015 s) to read a config or theme file, which a page
# never has: imported when a file is read instead. bokeh.palettes deep-copies two dicts of dicts of tuples of
# strings (0.009 s): copying the dicts gives the same result (new dicts, the same tuples). bokeh.plotting imports
# its contour module (0.005-0.01 s) for figure.contour(), which now imports it when called.
_GLYPH_PARAMETERS = ("        parameters = glyphclass.parameters()\n\n"
                     '        sigparams = [Parameter("self", Parameter.POSITIONAL_OR_KEYWORD)]'
                     ' + [x[0] for x in parameters] + [Parameter("kwargs", Parameter.VAR_KEYWORD)]\n')
_GLYPH_POSITIONALS = ('        sigparams = [Parameter("self", Parameter.POSITIONAL_OR_KEYWORD)]'
                      " + [Parameter(name, Parameter.POSITIONAL_OR_KEYWORD) for name in glyphclass._args]"
                      ' + [Parameter("kwargs", Parameter.VAR_KEYWORD)]\n')
_GLYPH_DOCSTRING = "        wrapped.__doc__ = generate_docstring(glyphclass, parameters, func.__doc__)\n\n"
_GLYPH_RETURN = "        return wrapped\n\n    return decorator\n\n"
SOURCE_EDITS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "bokeh": (("bokeh/model/model.py",
               "            parameters = [x[0] for x in  cls.parameters()]\n"
               "            cls.__init__.__signature__ = Signature(parameters=parameters)\n"
               "            process_example(cls)\n",
               ""),
              ("bokeh/core/templates.py",
               "from jinja2 import Environment, FileSystemLoader, Template\n",
               "from jinja2 import Environment, FileSystemBytecodeCache, FileSystemLoader, Template\n"),
              ("bokeh/core/templates.py",
               "    return Environment(loader=FileSystemLoader(templates_path), trim_blocks=True, lstrip_blocks=True)"
               "\n",
               "    return Environment(loader=FileSystemLoader(templates_path), trim_blocks=True, lstrip_blocks=True,\n"
               "                       bytecode_cache=FileSystemBytecodeCache(templates_path))\n"),
              ("bokeh/plotting/_decorators.py", _GLYPH_PARAMETERS + "\n        marker_type",
               _GLYPH_POSITIONALS + "\n        marker_type"),
              ("bokeh/plotting/_decorators.py", _GLYPH_PARAMETERS + "\n        @wraps",
               _GLYPH_POSITIONALS + "\n        @wraps"),
              ("bokeh/plotting/_decorators.py", _GLYPH_DOCSTRING + _GLYPH_RETURN + "def", _GLYPH_RETURN + "def"),
              ("bokeh/plotting/_decorators.py", _GLYPH_DOCSTRING + _GLYPH_RETURN + "#", _GLYPH_RETURN + "#"),
              ("bokeh/settings.py", "# External imports\nimport yaml\n\n", ""),
              ("bokeh/settings.py", "                self._config_override = yaml.load(",
               "                import yaml\n                self._config_override = yaml.load("),
              ("bokeh/settings.py", "                    return yaml.load(",
               "                    import yaml\n                    return yaml.load("),
              ("bokeh/themes/theme.py", "# External imports\nimport yaml\n\n", ""),
              ("bokeh/themes/theme.py", "                json = yaml.safe_load(f)",
               "                import yaml\n                json = yaml.safe_load(f)"),
              ("bokeh/palettes.py", "all_palettes = deepcopy(brewer)\n",
               "all_palettes = {name: dict(sizes) for name, sizes in brewer.items()}\n"),
              ("bokeh/palettes.py", "small_palettes = deepcopy(all_palettes)\n",
               "small_palettes = {name: dict(sizes) for name, sizes in all_palettes.items()}\n"),
              ("bokeh/plotting/_figure.py", "from .contour import from_contour\n", ""),
              ("bokeh/plotting/_figure.py", "        contour_renderer = from_contour(",
               "        from .contour import from_contour\n        contour_renderer = from_contour(")),
    "panel": (("panel/__init__.py",
               "from . import chat  # isort:skip noqa has to be after widgets\n",
               "def __getattr__(name):\n"
               "    if name == 'chat':\n"
               "        import importlib\n"
               "        return importlib.import_module('.chat', __name__)\n"
               "    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')\n"),
              ("panel/io/cache.py", "import unittest.mock\n", ""),
              ("panel/io/cache.py", "    unittest.mock.Mock : lambda obj:", "    'unittest.mock.Mock': lambda obj:"),
              ("panel/io/resources.py",
               "from jinja2.loaders import FileSystemLoader\n",
               "from jinja2.bccache import FileSystemBytecodeCache\nfrom jinja2.loaders import FileSystemLoader\n"),
              ("panel/io/resources.py",
               "    return Environment(loader=FileSystemLoader([\n",
               "    return Environment(bytecode_cache=FileSystemBytecodeCache(str(internal_path.resolve())),\n"
               "                       loader=FileSystemLoader([\n")),
    "param": (("param/parameterized.py",
               "        private = mcs.__get_private()\n"
               "        for slot in slots.keys():\n",
               "        private = mcs.__get_private()\n"
               "        defining = [p for p in (scls.__dict__.get(param_name) for scls in supers) if p is not None]\n"
               "        no_slot = object()\n"
               "        for slot in slots.keys():\n"),
              ("param/parameterized.py",
               "            for scls in supers:\n"
               "                # Class may not define parameter or slot might not be\n"
               "                # there because could be a more general type of Parameter\n"
               "                new_param = scls.__dict__.get(param_name)\n"
               "                if new_param is None or not hasattr(new_param, slot):\n"
               "                    continue\n"
               "\n"
               "                new_value = getattr(new_param, slot)\n",
               "            for new_param in defining:\n"
               "                new_value = getattr(new_param, slot, no_slot)\n"
               "                if new_value is no_slot:\n"
               "                    continue\n")),
}


def apply_source_edits(tree: Path, edits: Iterable[tuple[str, str, str]]) -> None:
    for rel, old, new in edits:
        path = tree / rel
        text = path.read_text()
        if text.count(old) != 1:
            raise BuildError(f"{rel}: a source edit (SOURCE_EDITS / STDLIB_EDITS) does not match it (a new version?)")
        path.write_text(text.replace(old, new))


def unpack_importable(whl: Path, dest: Path, keep: Callable[[str], bool],
                      edits: Iterable[tuple[str, str, str]] = ()) -> None:
    unpack(whl, dest, keep)
    drop_unimportable(dest)
    apply_source_edits(dest, edits)


def deflate(data: bytes) -> bytes:
    """A raw deflate stream of `data`: zopfli's when installed (~4 % smaller than zlib's best, the same format, so
    Pyodide's zipfile unpacks it as fast), else zlib at level 9."""
    if zopfli_compress is not None:
        return zopfli_compress(data, numiterations=15)[2:-4]  # without the zlib header and checksum
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    return packer.compress(data) + packer.flush()


def write_zip(out: Path, entries: Iterable[tuple[str, bytes]], store: Callable[[str], bool] = lambda name: False,
              ) -> None:
    """A zip of (name, data) entries with fixed timestamps (identical input -> identical bytes), compressed by
    deflate() — zipfile cannot take another compressor — or stored when `store(name)` or when that is smaller."""
    entries = list(entries)
    inputs = [b"" if store(name) else data for name, data in entries]
    if zopfli_compress is None:
        deflated = [deflate(data) for data in inputs]
    else:  # zopfli takes ~10 s per MB: use every core (the result is cached, see process_wheel)
        with concurrent.futures.ProcessPoolExecutor() as pool:
            deflated = list(pool.map(deflate, inputs, chunksize=4))
    body, central = io.BytesIO(), io.BytesIO()
    count = 0
    time, date = 0, (2020 - 1980) << 9 | 1 << 5 | 1  # DOS format: 2020-01-01 00:00
    for (name, data), packed in zip(entries, deflated, strict=True):
        raw = name.encode()
        flags = 0 if raw.isascii() else 0x800  # UTF-8 name
        packed = None if store(name) else packed
        method, payload = (8, packed) if packed is not None and len(packed) < len(data) else (0, data)
        crc, offset = zlib.crc32(data), body.tell()
        fields = (method, time, date, crc, len(payload), len(data), len(raw))
        body.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, flags, *fields, 0) + raw + payload)
        central.write(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, flags, *fields, 0, 0, 0, 0, 0, offset)
                      + raw)
        count += 1
    directory = central.getvalue()
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, len(directory), body.tell(), 0)
    out.write_bytes(body.getvalue() + directory + end)


def pack_wheel(src: Path, out: Path) -> None:
    """Zip a wheel tree with a fresh RECORD (sorted, fixed timestamps: identical input -> identical bytes)."""
    files = sorted(p for p in src.rglob("*") if p.is_file() and p.name != "RECORD")
    dist_info = next(p for p in src.iterdir() if p.name.endswith(".dist-info"))
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    entries = []
    for p in files:
        arc = p.relative_to(src).as_posix()
        data = p.read_bytes()
        entries.append((arc, data))
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        writer.writerow([arc, f"sha256={digest}", len(data)])
    rec = f"{dist_info.name}/RECORD"
    writer.writerow([rec, "", ""])
    entries.append((rec, record.getvalue().encode()))
    # .npz weights are zip-compressed already: stored.
    write_zip(out, entries, store=lambda name: name.endswith(".npz"))


def write_dist_info(dest: Path, name: str, version: str, top_level: Iterable[str]) -> None:
    di = dest / f"{name}-{version}.dist-info"
    di.mkdir(parents=True, exist_ok=True)
    (di / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (di / "WHEEL").write_text("Wheel-Version: 1.0\nGenerator: build.py\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    (di / "top_level.txt").write_text("".join(f"{t}\n" for t in top_level))


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


def node_pyodide(body: str) -> str:
    """A Node script running `body` inside the npm Pyodide, as every build step under Node does: arguments
    <package dir> <host folder> [`args`...], the host folder mounted at /host, any error -> exit status 1.
    PYTHONNODEBUGRANGES (CPython's -X no_debug_ranges): the bytecode it compiles keeps line numbers but not the
    column table behind a traceback's ^^^ markers, a quarter of a compressed .pyc (wheels and stdlib together
    1.1 MB smaller); the script stops if the option does not reach Python."""
    return r"""
const fs = require("fs");
const path = require("path");
const [pkg, hostDir, ...args] = process.argv.slice(2);
const { loadPyodide } = require(path.join(pkg, "pyodide.js"));
globalThis.XMLHttpRequest = class {}; // panel.io.pyodide imports it from `js` (a browser has one)
(async () => {
  const py = await loadPyodide({ indexURL: pkg + "/", env: { HOME: "/home/pyodide", PYTHONNODEBUGRANGES: "1" } });
  if (py.runPython("next(compile('a', '', 'eval').co_positions())[2] is not None")) {
    throw new Error("PYTHONNODEBUGRANGES did not reach Python: the bytecode would keep its column tables");
  }
  py.FS.mkdirTree("/host");
  py.FS.mount(py.FS.filesystems.NODEFS, { root: hostDir }, "/host");
""" + body + """
  process.exit(0);
})().catch((e) => { console.error(e); process.exit(1); });
"""


def run_node_pyodide(pkg: Path, name: str, body: str, host: Path, *args: str) -> None:
    script = CACHE / name
    script.write_text(node_pyodide(body))
    run(["node", str(script), str(pkg), str(host), *args])


# Byte-compile the host folder for the browser's Python 3.13.
NODE_COMPILE = r"""
  const [ddir, mode, optimize] = args;
  py.globals.set("ddir", ddir);
  py.globals.set("mode", mode);
  py.globals.set("optimize", Number(optimize));
  const ok = py.runPython(`
import compileall, py_compile, sys
# legacy: foo.pyc next to foo.py, importable once the source is removed.
# hash: __pycache__ pyc that is trusted without checking the (kept) source's mtime.
kw = dict(legacy=True) if mode == "legacy" else dict(
    invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
compileall.compile_dir("/host", ddir=ddir, quiet=1, workers=1, optimize=optimize, **kw)
`);
  if (ok === false) process.exit(1);
"""


def compile_tree(pkg: Path, tree: Path, ddir: str, mode: str, optimize: int = 0) -> None:
    run_node_pyodide(pkg, "compile_pyc.cjs", NODE_COMPILE, tree, ddir, mode, str(optimize))
    if mode == "legacy":
        for py in tree.rglob("*.py"):
            if py.with_suffix(".pyc").is_file():
                py.unlink()
            else:
                raise BuildError(f"compileall left no bytecode for {py} (syntax not valid for Python 3.13?)")


# Install the site's wheels (the arguments), do prelude.py's imports, and copy out to the host folder the Jinja
# bytecode cache files that Panel's and Bokeh's Environments (SOURCE_EDITS) wrote while compiling templates.
NODE_TEMPLATE_BYTECODE = r"""
  const site = py.runPython("import sysconfig; sysconfig.get_path('purelib')");
  // Unpacked without loading their .so files: Python loads an extension module when it is imported.
  for (const whl of args) py.unpackArchive(new Uint8Array(fs.readFileSync(whl)), "zip", { extractDir: site });
  py.runPython(`
import pathlib, shutil, sysconfig
import panel, panel.io.pyodide  # what prelude.py imports
site = pathlib.Path(sysconfig.get_path("purelib"))
for cached in site.glob("*/**/__jinja2_*.cache"):
    target = pathlib.Path("/host", cached.relative_to(site))
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(cached, target)
`);
"""


def template_bytecode(pkg: Path, entries: dict[str, dict], out_dir: Path) -> dict | None:
    """A wheel of Jinja's bytecode for the templates `import panel` compiles, made by Python 3.13 itself (the
    cache holds marshalled code): ~0.09 s off a first visit's app stage. Needs a wasm NumPy (Panel imports
    it), so only builds that vendor one get it; without it, the same templates are compiled at run time."""
    wheels = sorted(e["path"] for name, e in entries.items() if name != "slm_playground")  # not the app
    script = node_pyodide(NODE_TEMPLATE_BYTECODE)
    key = hashlib.sha256("|".join([PROCESS_VERSION, script, *map(sha256_file, wheels)]).encode())
    name, version = "site_template_bytecode", "1"
    cache = CACHE / "site" / f"{key.hexdigest()[:16]}-{name}-{version}-py3-none-any.whl"
    if not cache.is_file():
        log("compiling Panel's and Bokeh's Jinja templates for Python 3.13 (Pyodide under Node)")
        with tempfile.TemporaryDirectory() as tmp:
            tree = Path(tmp) / "tree"
            tree.mkdir()
            try:
                run_node_pyodide(pkg, "template_bytecode.cjs", NODE_TEMPLATE_BYTECODE, tree, *map(str, wheels))
            except BuildError as e:  # e.g. a stand-in NumPy without the module (the tests' fake wheel)
                log(f"no template bytecode: Panel does not import under Node with these wheels "
                    f"({str(e).strip().splitlines()[-1]})")
                return None
            if not any(tree.rglob("__jinja2_*.cache")):
                raise BuildError("importing Panel under Node wrote no Jinja bytecode (SOURCE_EDITS not applied?)")
            write_dist_info(tree, name, version, [])
            part = cache.with_suffix(".part")
            pack_wheel(tree, part)
            part.replace(cache)
    out = out_dir / cache.name.split("-", 1)[1]
    shutil.copyfile(cache, out)
    return {"name": name, "version": version, "path": out, "imports": []}


def process_wheel(pkg: Path, name: str, src: Path | None, out_dir: Path, make_tree: Callable[[Path], None],
                  out_name: str, key: str, compile_mode: str | None, optimize: int = 0) -> Path:
    """Slim + compile one wheel, cached under .cache/site/ by a key of its inputs."""
    cache = CACHE / "site" / f"{hashlib.sha256(f'{key}|{optimize}'.encode()).hexdigest()[:16]}-{out_name}"
    if not cache.is_file():
        with tempfile.TemporaryDirectory() as tmp:
            tree = Path(tmp) / "tree"
            tree.mkdir()
            make_tree(tree)
            if compile_mode:
                compile_tree(pkg, tree, "/lib/python3.13/site-packages", compile_mode, optimize)
            cache.parent.mkdir(parents=True, exist_ok=True)
            part = cache.with_suffix(".part")
            pack_wheel(tree, part)
            part.replace(cache)
    out = out_dir / out_name
    shutil.copyfile(cache, out)
    return out


# Standard-library modules nothing in the worker imports (checked: sys.modules after visiting every view and
# generating): debuggers, REPL, mail/ftp/xmlrpc clients, multiprocessing (no processes in a browser), ...
# A module stays if anything imported in the worker imports it, even lazily on a rare path (checked against the
# sources of every module in sys.modules): e.g. _strptime, _pylong, configparser (param.version), csv, idna.
STDLIB_DROP = re.compile(
    r"^(multiprocessing|_pyrepl|pydoc_data|xmlrpc|wsgiref|idlelib|turtledemo|tkinter|lib2to3|ensurepip|venv"
    r"|curses|dbm|sqlite3|xml|tomllib|email/mime|ctypes/macholib"
    # only panel.io.cache imported unittest (for unittest.mock), and no longer does (SOURCE_EDITS)
    r"|unittest|__phello__)/"
    r"|^(pydoc|pdb|bdb|doctest|_pyio|mailbox|pickletools|imaplib|smtplib|ftplib|poplib|nntplib|trace"
    r"|modulefinder|wave|turtle|zipapp|tabnanny|cgi|cgitb|tty|this|antigravity|__hello__"
    # nothing imports these (datetime and zoneinfo use their C versions; no processes, sockets or Windows)
    r"|_pydatetime|optparse|plistlib|statistics|tracemalloc|socketserver|compileall|symtable|pyclbr|fileinput"
    r"|filecmp|netrc|shelve|graphlib|sched|code|codeop|cmd|timeit|getpass|rlcompleter|pty|_py_abc"
    r"|_threading_local|_android_support|_apple_support|_osx_support|_aix_support|nturl2path"
    r"|http/(server|cookiejar|cookies)|urllib/robotparser|logging/(handlers|config)|json/tool"
    r"|asyncio/(proactor_events|windows_events|windows_utils|__main__)|concurrent/futures/process"
    r"|email/(_header_value_parser|headerregistry|contentmanager|policy)|zoneinfo/_zoneinfo"
    r"|ctypes/(_aix|wintypes)|sysconfig/__main__"
    # codecs for legacy code pages (the worker only meets UTF-8; cp437 is zipfile's, cp1252 the web's default)
    r"|encodings/(cp(?!437\.|1252\.)\d+|mac_\w+|iso8859_\d+|koi8_\w|big5\w*|euc_\w+|gb\w+|hz|iso2022_\w+|johab"
    r"|shift_jis\w*|kz1048|ptcp154|tis_620|palmos|hp_roman8|mbcs|oem|rot_13|uu_codec|bz2_codec))\.py$")
# Docstrings and asserts out of the bytecode (-OO): the stdlib supports it, and the app runs with the third-party
# wheels' docstrings gone too (the end-to-end tests); SITE_WHEEL_OPTIMIZE=0 keeps theirs.
STDLIB_OPTIMIZE = 2
WHEEL_OPTIMIZE = int(os.environ.get("SITE_WHEEL_OPTIMIZE", "2"))


# Pyodide's loadPackage unpacks a wheel with shutil's zip unpacker, which opens each member as a stream, copies
# it in chunks through a file object and checks its folder on disk, per file (~1,000 files here). This one reads
# each member whole, writes it with one os.write and makes each folder once: the same files with the same bytes
# (tests/site compares the trees for every wheel of the site), 0.03-0.045 s less of a cold start's
# package installation in Node.
UNPACK_WHEEL = '''
def _unpack_wheel(filename, extract_dir):
    """shutil's zip unpacker (same checks, same files), with each member read whole and each folder made once."""
    import os
    import zipfile

    if not zipfile.is_zipfile(filename):
        raise shutil.ReadError(f"{filename} is not a zip file")
    made = set()
    with zipfile.ZipFile(filename) as archive:
        for info in archive.infolist():
            name = info.filename
            if name.startswith("/") or ".." in name:
                continue
            target = os.path.join(extract_dir, *name.split("/"))
            folder = os.path.dirname(target)
            if folder not in made:
                os.makedirs(folder, exist_ok=True)
                made.add(folder)
            if not name.endswith("/"):
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
                try:
                    os.write(fd, archive.read(info))
                finally:
                    os.close(fd)

'''
STDLIB_EDITS = (("pyodide/_package_loader.py", "\n\nif IN_BROWSER:\n", "\n" + UNPACK_WHEEL + "\nif IN_BROWSER:\n"),
                ("pyodide/_package_loader.py", "        shutil._unpack_zipfile,  # type: ignore[attr-defined]\n",
                 "        _unpack_wheel,\n"))


def compiled_stdlib(pkg: Path) -> Path:
    """python_stdlib.zip with .pyc only (Pyodide otherwise compiles every stdlib module it imports), slimmed."""
    src = pkg / "python_stdlib.zip"
    tag = hashlib.sha256(f"{STDLIB_DROP.pattern}|{STDLIB_OPTIMIZE}|{STDLIB_EDITS}".encode()).hexdigest()[:8]
    cache = CACHE / "site" / f"{sha256_file(src)[:16]}-{PROCESS_VERSION}-{tag}-python_stdlib.zip"
    if cache.is_file():
        return cache
    log("byte-compiling the standard library for Python 3.13 (Pyodide under Node)")
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "stdlib"
        with zipfile.ZipFile(src) as zf:
            zf.extractall(tree, [n for n in zf.namelist() if not STDLIB_DROP.search(n)])
        apply_source_edits(tree, STDLIB_EDITS)
        compile_tree(pkg, tree, "/lib/python313.zip", "legacy", STDLIB_OPTIMIZE)
        cache.parent.mkdir(parents=True, exist_ok=True)
        part = cache.with_suffix(".part")
        write_zip(part, ((p.relative_to(tree).as_posix(), p.read_bytes()) for p in sorted(tree.rglob("*"))
                         if p.is_file()))
        part.replace(cache)
    return cache


# ------------------------------------------------------------------------------------------ project wheel


def project_packages(py_dir: Path) -> list[Path]:
    if not py_dir.is_dir():
        raise BuildError(f"--py-dir {py_dir}: not a folder")
    pkgs = sorted(p for p in py_dir.iterdir() if (p / "__init__.py").is_file())
    names = {p.name for p in pkgs}
    if not {"playground", "slm"} <= names:
        raise BuildError(f"{py_dir} must hold the packages 'playground' and 'slm' (found: {sorted(names)})")
    if not (py_dir / "playground" / "app.py").is_file():
        raise BuildError(f"{py_dir / 'playground' / 'app.py'} is missing (the app entry point)")
    return pkgs


# Not needed in the browser: the training code, and of slm/weights/ all but the weights (card, logs, curves).
PROJECT_EXCLUDE = re.compile(r"^slm/train/|^slm/weights/(?!.*\.npz$)")


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


# --------------------------------------------------------------------------------------------- the build


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


def build(site: Path = SITE, py_dir: Path = PY_DIR, pyodide_packages: Path | None = None) -> dict:
    lock = read_lock()
    project_packages(py_dir)  # check the inputs before downloading anything
    if zopfli_compress is None:
        log("zopfli is not installed (pip install zopfli): zips are deflated by zlib, ~0.3 MB larger")
    pkg = fetch_pyodide(lock)
    official = official_lock(pkg)
    vendored = pyodide_dir_wheels(pyodide_packages, lock, official) if pyodide_packages else {}
    wheels = cached_or_download(lock["wheels"], CACHE / "wheels", pip_wheel_args(CACHE / "wheels"), "wheel")
    sdists = cached_or_download(lock["sdists"], CACHE / "sdists",
                                pip_sdist_args(CACHE / "sdists", lock["sdists"]), "sdist")
    out = site / "build"
    if site.resolve() != SITE.resolve():
        site.mkdir(parents=True, exist_ok=True)
        for name in SHELL_FILES:
            shutil.copyfile(SITE / name, site / name)
    shutil.rmtree(out, ignore_errors=True)
    (out / "wheels").mkdir(parents=True)

    # Runtime: the npm files the browser needs, plus a byte-compiled stdlib.
    (out / "pyodide").mkdir()
    for name in RUNTIME_FILES:
        shutil.copyfile(minified_runtime_js(pkg, lock) if name == "pyodide.asm.js" else pkg / name,
                        out / "pyodide" / name)
    shutil.copyfile(compiled_stdlib(pkg), out / "pyodide" / "python_stdlib.zip")

    # Main-thread JS/CSS, from the same wheels the worker imports.
    panel_version = lock["wheels"]["panel"]["version"]
    vendor = out / "vendor"
    with zipfile.ZipFile(wheels["bokeh"]) as zf:
        for js in BOKEH_JS:
            (vendor / "bokeh").mkdir(parents=True, exist_ok=True)
            (vendor / "bokeh" / js).write_bytes(zf.read(f"bokeh/server/static/js/{js}"))
    dist = vendor / panel_version / "dist"
    # Panel's stylesheets: layout/widget CSS, design themes, spinner images; not the 90 MB of bundled 3rd-party
    # libraries (tabulator, vtk, deck.gl, ...) this app does not use.
    keep_dist = re.compile(r"^panel/dist/(panel\.min\.js|css/.*|assets/.*\.svg|bundled/(theme|css)/.*)$")
    with zipfile.ZipFile(wheels["panel"]) as zf:
        for n in zf.namelist():
            if keep_dist.match(n):
                (dist / n[len("panel/dist/"):]).parent.mkdir(parents=True, exist_ok=True)
                (dist / n[len("panel/dist/"):]).write_bytes(zf.read(n))

    # Python packages: slimmed + compiled pure wheels, pure wheels built from sdists, the project wheel.
    entries: dict[str, dict] = {}
    pub = out / "wheels"
    for name, whl in wheels.items():
        e = lock["wheels"][name]
        edits = SOURCE_EDITS.get(name, ())
        key = f"{PROCESS_VERSION}|{e['sha256']}|{SLIM_RULES.get(name)}|{SLIM_RULES['*']}|{NOT_SHIPPED}|{edits}"
        made = process_wheel(pkg, name, whl, pub, functools.partial(unpack_importable, whl, edits=edits,
                                                                    keep=slim_filter(name, e["version"])),
                             e["file"], key, "legacy", WHEEL_OPTIMIZE)
        entries[name] = {"name": name, "version": e["version"], "path": made, "imports": e["imports"]}
    for name, sd in sdists.items():
        e = lock["sdists"][name]
        fname = f"{e['dist_name']}-{e['version']}-py3-none-any.whl"
        made = process_wheel(pkg, name, sd, pub, functools.partial(sdist_to_tree, sd, e), fname,
                             f"{PROCESS_VERSION}|{e['sha256']}|{e['package_dirs']}", "legacy", WHEEL_OPTIMIZE)
        entries[name] = {"name": name, "version": e["version"], "path": made, "imports": e["imports"]}
    make_project, project_hash = project_tree(py_dir)
    made = process_wheel(pkg, "slm_playground", None, pub, make_project, "slm_playground-0.1.0-py3-none-any.whl",
                         f"{PROCESS_VERSION}|{project_hash}", "hash")
    entries["slm_playground"] = {"name": "slm_playground", "version": "0.1.0", "path": made,
                                 "imports": [p.name for p in project_packages(py_dir)], "stage": "app"}

    # Binary packages: vendored from --pyodide-packages, else fetched at run time from the Pyodide CDN.
    cdn = PYODIDE_CDN.format(version=lock["pyodide"]["version"])
    remote: dict[str, dict] = {}
    for name, e in lock["pyodide_packages"].items():
        if name in vendored:
            # A vendored wasm build replaces the pure-Python fallback built above (e.g. MarkupSafe).
            for other in [k for k, v in lock["sdists"].items() if v["dist_name"].lower() == name]:
                entries.pop(other)["path"].unlink()
            whl = vendored[name]
            rules = (VENDORED_SLIM_RULES.get(name), VENDORED_SLIM_RULES["*"], VENDORED_STUBS.get(name))
            key = f"{PROCESS_VERSION}|vendored|{sha256_file(whl)}|{rules}"
            made = process_wheel(pkg, name, whl, pub, functools.partial(unpack_vendored, whl, name), whl.name, key,
                                 None)
            entries[name] = {"name": name, "version": e["version"], "path": made,
                             "imports": official["packages"][name]["imports"]}
        elif e.get("required"):
            remote[name] = {"name": name, "version": e["version"], "url": cdn + e["file"], "sha256": e["sha256"],
                            "imports": official["packages"][name]["imports"]}

    if "numpy" in vendored:
        made_bytecode = template_bytecode(pkg, entries, pub)
        if made_bytecode:
            entries[made_bytecode["name"]] = made_bytecode

    # pyodide-lock.json in Pyodide's own schema: loadPackage() verifies each sha256 via fetch integrity.
    pkgs: dict[str, dict] = {}
    for name, e in sorted(entries.items()):
        pkgs[canonical(name)] = {"name": canonical(name), "version": e["version"],
                                 "file_name": f"wheels/{e['path'].name}",
                      "install_dir": "site", "sha256": sha256_file(e["path"]), "package_type": "package",
                      "imports": e["imports"], "depends": [], "unvendored_tests": False}
    for name, e in sorted(remote.items()):
        pkgs[canonical(name)] = {"name": canonical(name), "version": e["version"], "file_name": e["url"],
                                 "install_dir": "site",
                      "sha256": e["sha256"], "package_type": "package", "imports": e["imports"],
                      "depends": [], "unvendored_tests": False}
    (out / "pyodide-lock.json").write_text(json.dumps({"info": official["info"], "packages": pkgs}, indent=1))

    # Manifest: what the loader fetches, its size and stage (for the progress bar and the service worker).
    files: dict[str, dict] = {}
    for p in sorted(out.rglob("*")):
        if p.is_file():
            rel = p.relative_to(site).as_posix()
            stage = "app" if "slm_playground" in rel else "packages" if "/wheels/" in rel else "runtime"
            files[rel] = {"size": p.stat().st_size, "stage": stage}
    for name in SHELL_FILES:
        files[name] = {"size": (site / name).stat().st_size, "stage": "runtime"}
    build_hash = hashlib.sha256()
    for rel in sorted(files):
        build_hash.update(rel.encode() + b"\0" + hashlib.sha256((site / rel).read_bytes()).digest())
    manifest = {
        "build_id": build_hash.hexdigest()[:16],
        "pyodide_version": lock["pyodide"]["version"],
        "panel_cdn_root": PANEL_CDN_ROOT,
        "app_module": "playground.app",
        "main_js": [f"build/vendor/bokeh/{js}" for js in BOKEH_JS]
        + [f"build/vendor/{panel_version}/dist/panel.min.js"],
        "packages": sorted(pkgs),
        "remote": {n: {"url": e["url"], "stage": "packages"} for n, e in remote.items()},
        "files": files,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    check_csp(site, bool(remote))
    total = sum(f["size"] for f in files.values())
    log(f"wrote {out} ({total / 1e6:.1f} MB in {len(files)} files; build {manifest['build_id']}; "
        f"{'NumPy from ' + cdn if remote else 'all packages vendored'})")
    return manifest


def check_csp(site: Path, remote: bool) -> None:
    """The pages' CSP must allow the Pyodide CDN only when something is fetched from it."""
    cdn_origin = "https://cdn.jsdelivr.net"
    for page in ("index.html", "embed.html"):
        path = site / page
        html = path.read_text()
        new = re.sub(r"connect-src 'self'( https://cdn\.jsdelivr\.net)?",
                     f"connect-src 'self'{' ' + cdn_origin if remote else ''}", html)
        if "connect-src 'self'" not in new:
            raise BuildError(f"{path}: CSP meta with connect-src 'self' not found")
        if new != html:
            path.write_text(new)


# ----------------------------------------------------------------------------------------------- serving


class SiteHandler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, ".wasm": "application/wasm",
                      ".mjs": "text/javascript", ".js": "text/javascript", ".whl": "application/zip",
                      ".json": "application/json", ".py": "text/plain"}

    def end_headers(self) -> None:
        # Revalidate every time: the service worker is the cache; a rebuild must be seen at once.
        self.send_header("Cache-Control", "no-cache")
        super().end_headers()

    def copyfile(self, source, outputfile) -> None:  # noqa: ANN001 - signature of the base class
        # A reload or a closed tab drops the connection mid-file: not an error worth a traceback.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            super().copyfile(source, outputfile)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - signature of the base class
        if os.environ.get("SITE_SERVER_LOG"):
            super().log_message(format, *args)


@contextlib.contextmanager
def serving(site: Path = SITE, port: int = 0) -> Iterator[str]:
    """Serve ``site`` on 127.0.0.1 in a thread; yields the base URL."""
    handler = functools.partial(SiteHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--serve", action="store_true", help="after building, serve site/ on 127.0.0.1")
    ap.add_argument("--port", type=int, default=8000, help="port for --serve (0: any free port)")
    ap.add_argument("--pyodide-packages", type=Path, metavar="DIR",
                    help="folder of pyodide_2025_0 wasm wheels (NumPy, ...) to vendor: no request leaves the site")
    ap.add_argument("--site-dir", type=Path, default=SITE, help="write the site here instead of site/")
    ap.add_argument("--py-dir", type=Path, default=PY_DIR, help="folder holding the playground and slm packages")
    ap.add_argument("--relock", action="store_true", help="re-resolve sha256 hashes of the versions in build.lock")
    args = ap.parse_args(argv)
    try:
        if args.relock:
            relock()
            return 0
        build(args.site_dir, args.py_dir, args.pyodide_packages)
    except BuildError as e:
        print(f"build.py: error: {e}", file=sys.stderr)
        return 1
    if args.serve:
        with serving(args.site_dir, args.port) as url:
            print(f"Serving {args.site_dir} at {url}  (Ctrl+C to stop)", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
