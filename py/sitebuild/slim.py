"""What the site does not ship: files of each wheel, modules that cannot be imported without an unshipped
package, parts of a vendored NumPy, and standard-library modules nothing in the worker imports."""

from __future__ import annotations

import re
import zipfile
from collections.abc import Callable
from pathlib import Path

from .common import HERE

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
    # Only packaging.version is imported (by panel and bokeh); only these markdown-it plugins (four by panel's
    # Markdown pane, two by the lessons' parser).
    "packaging": (r"^packaging/(?!(__init__|version|_structures)\.py$)",),
    "mdit-py-plugins": (r"^mdit_py_plugins/(?!(__init__|utils)\.py$|(anchors|deflist|footnote|tasklists|dollarmath|"
                        r"front_matter)/)",),
    # The JupyterLab extension's JS (for a Jupyter front end; also installed as data files): not used in a browser
    # worker. Its package.json stays: pyviz_comms reads its version from it at import.
    "pyviz_comms": (r"^pyviz_comms/labextension/(?!package\.json$)", r"^pyviz_comms-[^/]*\.data/"),
    # gguf's command-line tools (gguf-dump, the editor GUI, ...) and the shim they run through; `import gguf`
    # imports neither.
    "gguf": (r"^gguf/scripts/", r"^gguf/gguf\.py$", r"\.dist-info/entry_points\.txt$"),
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
# lazily, on attribute access). numpy.typing stays (5 kB), but for its mypy plugin: gguf imports it when slm reads a
# GGUF file. Pyodide loads every extension module of a package while installing it, so an unused .so (numpy.fft's
# _pocketfft_umath, linalg's lapack_lite) costs download *and* wasm compile time.
VENDORED_SLIM_RULES: dict[str, tuple[str, ...]] = {
    "numpy": (r"^numpy/(f2py|fft|polynomial|testing|_pyinstaller|_core/include|_core/lib|random/_examples"
              r"|random/lib)/", r"^numpy/typing/mypy_plugin\.", r"^numpy/linalg/(lapack_lite|_umath_linalg)\.",
              r"^numpy/(conftest|_configtool)\.",
              r"^numpy/ma/API_CHANGES\.txt$", r"^numpy/_core/_add_newdocs(_scalars)?\.pyc$"),
    "*": (r"(^|/)tests?/", r"\.(pyi|pxd|pyx|c|h|a)$", r"(^|/)py\.typed$", r"\.dist-info/entry_points\.txt$"),
}


# Modules that replace a dropped one which is imported but never called: stubs/<dist>/<path in the wheel>.
# numpy.linalg imports its LAPACK gufuncs (_umath_linalg, a 1.26 MB side module: 0.42 MB of download and its wasm
# compile) at import, but only inv, solve, eig, svd, det, lstsq... call them; the app uses np.linalg.norm, which
# does not. numpy._core imports _add_newdocs(_scalars) only to attach docstrings to its C functions and scalar
# types (60 kB of bytecode): what python -OO does to the bytecode this build compiles, for NumPy's C objects.
STUBS = HERE / "stubs"


def vendored_stubs(dist: str) -> dict[str, str]:
    folder = STUBS / dist
    return {p.relative_to(folder).as_posix(): p.read_text() for p in sorted(folder.rglob("*.py"))}


def unpack_vendored(whl: Path, dist: str, dest: Path) -> None:
    """Unpack a vendored wheel without what vendored_filter() drops; a module of stubs/<dist>/ that the wheel had
    (as .so or .pyc) is replaced by its stand-in."""
    unpack(whl, dest, vendored_filter(dist))
    with zipfile.ZipFile(whl) as zf:
        names = zf.namelist()
    for rel, text in vendored_stubs(dist).items():
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


# Standard-library modules nothing in the worker imports (checked: sys.modules after visiting every view and
# generating): debuggers, REPL, mail/ftp/xmlrpc clients, multiprocessing (no processes in a browser), ...
# A module stays if anything imported in the worker imports it, even lazily on a rare path (checked against the
# sources of every module in sys.modules): e.g. _strptime, _pylong, configparser (param.version), csv, idna.
STDLIB_DROP = re.compile(
    r"^(multiprocessing|_pyrepl|pydoc_data|xmlrpc|wsgiref|idlelib|turtledemo|tkinter|lib2to3|ensurepip|venv"
    r"|curses|dbm|sqlite3|xml|tomllib|email/mime|ctypes/macholib"
    # only panel.io.cache imported unittest (for unittest.mock), and no longer does (patches/panel-*/0002)
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
