"""The static site (build.py + site/): what CI can check without a wasm NumPy.

The CDN build must boot Pyodide, install every vendored wheel and end on an error panel naming NumPy when the
CDN is unreachable; a --pyodide-packages build must never request anything but 127.0.0.1.
"""

from __future__ import annotations

import gzip
import hashlib
import itertools
import json
import os
import re
import time
import zipfile
from pathlib import Path

import pytest

from conftest import MAP_NODES_JS, ROOT, Visit, built, run_build, serve, token_box_height
from sitebuild import assemble, patches, slim
from sitebuild.common import BuildError
from sitebuild.serve import SiteHandler, serving
from testkit.hosts import hosted

LOCK = json.loads((ROOT / "build.lock").read_text())


def served_lock(site: Path) -> dict:
    return json.loads((site / "build" / "pyodide-lock.json").read_text())


# ---------------------------------------------------------------------------------------- build outputs


def test_lock_pins_every_artifact_with_a_hash() -> None:
    assert LOCK["pyodide"]["version"] == "0.29.3"
    assert LOCK["pyodide"]["integrity"].startswith("sha512-")
    assert LOCK["wheels"]["panel"]["version"] == "1.9.4"
    assert LOCK["wheels"]["bokeh"]["version"] == "3.9.2"
    for section in ("wheels", "sdists", "pyodide_packages"):
        for name, entry in LOCK[section].items():
            assert re.fullmatch(r"[0-9a-f]{64}", entry["sha256"]), f"{section}/{name} has no sha256"
            assert entry["file"], f"{section}/{name} names no file"
    assert LOCK["pyodide_packages"]["numpy"]["version"] == "2.2.5"


def test_served_files_match_the_lock_hashes(cdn_site: Path) -> None:
    """Pyodide checks these sha256 (fetch integrity) when it installs: they must describe the served bytes."""
    lock = served_lock(cdn_site)
    for name, pkg in lock["packages"].items():
        if pkg["file_name"].startswith("https://"):
            assert name == "numpy", f"only NumPy may come from the CDN, not {name}"
            assert pkg["file_name"] == ("https://cdn.jsdelivr.net/pyodide/v0.29.3/full/"
                                        + LOCK["pyodide_packages"]["numpy"]["file"])
            assert pkg["sha256"] == LOCK["pyodide_packages"]["numpy"]["sha256"]
            continue
        path = cdn_site / "build" / pkg["file_name"]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == pkg["sha256"], name


def test_wheels_are_slimmed_and_compiled(cdn_site: Path) -> None:
    wheels = cdn_site / "build" / "wheels"
    panel = next(wheels.glob("panel-*.whl"))
    assert panel.stat().st_size < 4_000_000, "panel wheel should lose its bundled browser assets"
    with zipfile.ZipFile(panel) as zf:
        names = zf.namelist()
    assert "panel/__init__.pyc" in names and "panel/__init__.py" not in names
    assert not any(n.startswith("panel/dist/") for n in names)
    assert "panel/package.json" in names  # read by panel.io.resources at import
    # The pure-Python wheels built from sdists (no wasm binary needed for these two).
    assert next(wheels.glob("PyYAML-*-py3-none-any.whl"))
    assert next(wheels.glob("MarkupSafe-*-py3-none-any.whl"))
    # Browser assets come from the same wheels, next to the page.
    assert (cdn_site / "build/vendor/bokeh/bokeh.min.js").is_file()
    assert (cdn_site / "build/vendor/1.9.4/dist/panel.min.js").is_file()
    assert (cdn_site / "build/vendor/1.9.4/dist/bundled/theme/default.css").is_file()


def test_vendored_wheels_are_slimmed_with_their_hash_in_the_lock(tmp_path: Path) -> None:
    """--pyodide-packages: NumPy loses what nothing imports; the served (slimmed) file's sha256 is in the lock."""
    keep = slim.vendored_filter("numpy")
    for name in ("numpy/__init__.pyc", "numpy/_core/_multiarray_umath.cpython-313-wasm32-emscripten.so",
                 "numpy/linalg/_linalg.pyc", "numpy/random/_pcg64.cpython-313-wasm32-emscripten.so",
                 "numpy/ma/core.pyc", "numpy/_typing/_shape.pyc", "numpy/ctypeslib.pyc",
                 "numpy/typing/__init__.pyc", "numpy-2.2.5.dist-info/METADATA"):  # numpy.typing: gguf imports it
        assert keep(name), name
    for name in ("numpy/fft/_pocketfft_umath.cpython-313-wasm32-emscripten.so", "numpy/f2py/__init__.pyc",
                 "numpy/polynomial/__init__.pyc", "numpy/testing/__init__.pyc", "numpy/typing/mypy_plugin.pyc",
                 "numpy/_core/include/numpy/ndarraytypes.h", "numpy/__init__.pyi", "numpy/__init__.pxd",
                 "numpy/linalg/lapack_lite.cpython-313-wasm32-emscripten.so", "numpy/random/lib/libnpyrandom.a",
                 "numpy/linalg/_umath_linalg.cpython-313-wasm32-emscripten.so"):
        assert not keep(name), name
    # The LAPACK module numpy.linalg imports is replaced by a stand-in that names what is missing when called.
    whl = tmp_path / "numpy-2.2.5-cp313-cp313-pyodide_2025_0_wasm32.whl"
    with zipfile.ZipFile(whl, "w") as zf:
        zf.writestr("numpy/linalg/_umath_linalg.cpython-313-wasm32-emscripten.so", b"\0asm")
        zf.writestr("numpy/linalg/_linalg.pyc", b"")
    slim.unpack_vendored(whl, "numpy", tmp_path / "tree")
    linalg = tmp_path / "tree" / "numpy" / "linalg"
    assert sorted(p.name for p in linalg.iterdir()) == ["_linalg.pyc", "_umath_linalg.py"]
    stub: dict = {}
    exec(compile((linalg / "_umath_linalg.py").read_text(), "_umath_linalg.py", "exec"), stub)
    with pytest.raises(AttributeError, match=r"LAPACK routines \(inv\) are not part of this site"):
        stub["__getattr__"]("inv")
    # The stdlib keeps what Python needs at start and what imported modules import lazily.
    for name in ("encodings/utf_8.py", "encodings/aliases.py", "encodings/cp437.py", "encodings/idna.py",
                 "encodings/latin_1.py", "_strptime.py", "_pylong.py", "configparser.py", "csv.py",
                 "email/parser.py", "http/client.py", "asyncio/base_events.py"):
        assert not slim.STDLIB_DROP.search(name), name
    for name in ("encodings/cp1251.py", "encodings/big5.py", "xml/dom/minidom.py", "_pydatetime.py",
                 "http/server.py", "email/_header_value_parser.py", "unittest/mock.py", "this.py"):
        assert slim.STDLIB_DROP.search(name), name


def test_modules_that_need_an_unshipped_package_are_dropped(tmp_path: Path) -> None:
    files = {"pkg/__init__.py": "from .core import x\n", "pkg/core.py": "x = 1\n",
             "pkg/io/__init__.py": "", "pkg/io/server.py": "import tornado\nfrom ..core import x\n",
             "pkg/io/admin.py": "from .server import y\n",  # needs a dropped module: dropped too
             "pkg/io/lazy.py": "def f():\n    import tornado\n",  # imported only when f() runs: kept
             "pkg/io/optional.py": "try:\n    import ipywidgets\nexcept ImportError:\n    pass\n"}
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert slim.drop_unimportable(tmp_path) == ["pkg.io.admin", "pkg.io.server"]
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.py")) == sorted(
        set(files) - {"pkg/io/server.py", "pkg/io/admin.py"})


APP_DOCUMENT = """
import hashlib, inspect, json, os, re, sys, types
import bokeh.core.templates, bokeh.models, panel, panel.io.resources
imported = {name: name in sys.modules for name in ("panel.chat", "unittest.mock", "yaml", "panel.pipeline",
                                                   "panel.template", "panel.pane.vtk", "panel.widgets.terminal")}
from bokeh.document import Document
from playground.app import create_app
doc = Document()
create_app().root.server_doc(doc)

def shape(code):  # a code object's instructions, names and constants, nested code included
    return [code.co_code.hex(), code.co_names, code.co_varnames,
            [shape(c) if isinstance(c, types.CodeType) else repr(c) for c in code.co_consts]]

content = doc.to_json().content
defs = sorted(d["name"] for d in content.get("defs", []))
from bokeh.model import Model
registered = set(Model.model_class_reverse_map)
import panel.chat  # imported with Panel by the original, on first use by the edited one
# Every name of Panel's pane, widget and template packages and pn.Template, pn.pipeline (the edited Panel imports
# some of them on first use), and the data models those imports and panel.chat's register.
lazy_names = {f"{m.__name__}.{n}": getattr(m, n).__qualname__ for m in (panel.pane, panel.widgets)
              for n in m.__all__}
lazy_names.update({name: getattr(panel, name).__name__ for name in ("Template", "template", "pipeline")})
lazy_names.update({f"panel.template.{n}": getattr(panel.template, n).__qualname__
                   for n in dir(panel.template) if n.endswith("Template")})
later_models = sorted(set(Model.model_class_reverse_map) - registered)
# The Jinja templates loaded by now (Panel's templates load theirs when their module is imported).
templates = {}
for env in (panel.io.resources._env, bokeh.core.templates.get_env()):
    cache = env.bytecode_cache
    for (_, name), template in list(env.cache.items()):
        source, filename, _ = env.loader.get_source(env, name)
        templates[name] = {
            "code": hashlib.sha256(json.dumps(shape(template.root_render_func.__code__)).encode()).hexdigest(),
            "from_cache": cache is not None and cache.get_bucket(env, name, filename, source).code is not None,
            "cache_dir": getattr(cache, "directory", None)}
import unittest.mock
cache = sys.modules["panel.io.cache"]

import warnings
from bokeh.plotting import figure
plot = figure()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # the marker methods are deprecated
    glyphs = [str(r.glyph.properties_with_values(include_defaults=False)) for r in (
        plot.quad(1, 2, 3, 4), plot.line([1, 2], [3, 4], color="red"), plot.asterisk([1], [2], size=3))]
mocks = [m() for m in (unittest.mock.Mock, unittest.mock.MagicMock, unittest.mock.NonCallableMock,
                       unittest.mock.AsyncMock)]

import tempfile
from bokeh.settings import settings
from bokeh.themes import Theme
with tempfile.TemporaryDirectory() as folder:  # YAML files Bokeh reads: a theme and a config file
    with open(os.path.join(folder, "theme.yaml"), "w") as f:
        f.write("attrs:\\n  Plot:\\n    width: 123\\n")
    with open(os.path.join(folder, "bokeh.yaml"), "w") as f:
        f.write("log_level: debug\\n")
    settings.load_config(os.path.join(folder, "bokeh.yaml"))
    yaml_files = {"theme": Theme(filename=os.path.join(folder, "theme.yaml"))._json, "log_level": settings.log_level()}
print(json.dumps({"yaml_files": yaml_files, "signature": str(inspect.signature(bokeh.models.Plot.__init__)),
                  # the ids Bokeh gives a CustomJS's callbacks are Python object ids, and param names an object
                  # without a name by its class and a count of the objects made so far (the edited Panel makes ~90
                  # fewer while it is imported): not part of what is compared
                  "document": re.sub(r"'([A-Za-z]+)\\d{5}'", r"'\\1<n>'", re.sub(
                      r"\\b\\d{12,}\\b", "<id>", str({k: v for k, v in content.items() if k != "defs"}))),
                  "defs": defs,
                  "later_models": later_models, "lazy_names": lazy_names,
                  "templates": templates, "imported": imported,
                  "chat": panel.chat.ChatInterface.__name__, "glyphs": glyphs,
                  "glyph_signatures": [str(inspect.signature(getattr(figure, m))) for m in ("quad", "asterisk")],
                  "mock_hashes_by_id": [cache._generate_hash(m) == cache._int_to_bytes(id(m)) for m in mocks]}))
"""

# Every slot of every parameter of every Parameterized class, right after the imports: later, Panel's widgets
# set `allow_refs` on their classes' parameters when first instantiated, which subclasses created after that
# inherit.
PARAMETERS = """
import hashlib, json, os, re
import panel, param
# what the original Panel imports with `import panel` and the edited one on first use, before panel.chat as the
# original does: the same classes on both sides, their default objects made in the same order
[getattr(m, n) for m in (panel.pane, panel.widgets) for n in m.__all__] + [panel.template, panel.pipeline]
import panel.chat, playground.app
def stable(value):  # a slot value's repr without what differs between processes: addresses, Panel's folder
    return re.sub(r" at 0x[0-9a-f]+", "", repr(value)).replace(os.path.dirname(panel.__file__), "<panel>")
def parameterized(cls):
    yield cls
    for sub in cls.__subclasses__():
        yield from parameterized(sub)
parameters = {}
for cls in parameterized(param.Parameterized):
    slots = {name: {slot: stable(getattr(p, slot)) for slot in type(p)._all_slots_ if slot != "owner"}
             for name, p in cls.param.objects(instance=False).items()}
    parameters[f"{cls.__module__}.{cls.__qualname__}"] = hashlib.sha256(
        json.dumps(slots, sort_keys=True).encode()).hexdigest()
print(json.dumps(parameters))
"""

# What prelude.py imports before it waits for the "app" stage's packages (sitebuild/assemble.py APP_STAGE_PACKAGES),
# with their modules not importable; then the site's first page (what boot.py builds) once they are.
PANEL_WITHOUT = """
import json, sys
blocked = set(json.loads(sys.argv[1]))
class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ImportError(f"{name} is not installed yet")
sys.meta_path.insert(0, Blocked())
import panel
sys.meta_path.remove(sys.meta_path[0])
from bokeh.document import Document
from playground.app import create_app
doc = Document()
create_app(build_hidden_on_load=False, custom_js=False).root.server_doc(doc)
print(json.dumps(len(doc.to_json().content["roots"][0]["attributes"]["children"])))  # the page's rows
"""


def test_patches_change_docs_and_template_compilation_only(tmp_path: Path) -> None:
    """sitebuild's patches applied to the installed bokeh, panel and param (the pinned versions): the signatures are
    gone, Panel's and Bokeh's Jinja environments keep compiled templates in their template folders and use
    them in the next process, panel.chat, unittest.mock and yaml are not imported with Panel (YAML files still
    read the same), and the app's Bokeh
    document (but for the definitions of panel.chat's data models), the compiled templates, pn.chat, the
    hashing of mocks, what Bokeh's glyph methods make of positional arguments and every slot of every
    parameter of every Parameterized class (param's edit is a speed-up only) are exactly as before."""
    import shutil
    import subprocess
    import sys

    import bokeh
    import panel
    import param

    for module, name in ((bokeh, "bokeh"), (panel, "panel"), (param, "param")):
        assert module.__version__.split("+")[0] == LOCK["wheels"][name]["version"]
        shutil.copytree(Path(module.__file__).parent, tmp_path / name,
                        ignore=shutil.ignore_patterns("__pycache__", "static", "sampledata", "dist", "tests"))
        patches.apply_patches(tmp_path, name, LOCK["wheels"][name]["version"])

    def run(*path: Path, script: str = APP_DOCUMENT, args: tuple[str, ...] = (), check: bool = True) -> dict:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in (*path, ROOT / "py"))}
        out = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True,
                             check=check, timeout=300)
        return json.loads(out.stdout.splitlines()[-1]) if out.returncode == 0 else out.stderr

    # `import panel` needs none of the app stage's packages with the edited Bokeh; the original imports yaml.
    later = [m for name, e in {**LOCK["wheels"], **LOCK["sdists"]}.items()
             if name in assemble.APP_STAGE_PACKAGES for m in e["imports"]]
    assert sorted(later) == ["gguf", "linkify_it", "markdown_it", "mdit_py_plugins", "mdurl", "uc_micro", "yaml"]
    assert run(tmp_path, script=PANEL_WITHOUT, args=(json.dumps(later),)) > 2
    assert "yaml is not installed yet" in run(script=PANEL_WITHOUT, args=(json.dumps(later),), check=False)

    original, first, second = run(), run(tmp_path), run(tmp_path)
    assert "x_range" in original["signature"] and "x_range" not in first["signature"]
    # Not imported with Panel any more, and still there when asked for: pn.chat; mocks hash by id as before.
    lazy = ("panel.pipeline", "panel.template", "panel.pane.vtk", "panel.widgets.terminal")  # panel 0001, 0005
    assert original["imported"] == {"panel.chat": True, "unittest.mock": True, "yaml": True,
                                    **dict.fromkeys(lazy, True)}
    assert first["imported"] == {"panel.chat": False, "unittest.mock": False, "yaml": False,
                                 **dict.fromkeys(lazy, False)}
    assert first["lazy_names"] == original["lazy_names"] and len(original["lazy_names"]) > 130
    # PyYAML is imported where a YAML file is read, and such files read the same.
    assert first["yaml_files"] == original["yaml_files"] == {"theme": {"attrs": {"Plot": {"width": 123}}},
                                                              "log_level": "debug"}
    assert first["chat"] == original["chat"] == "ChatInterface"
    assert first["mock_hashes_by_id"] == original["mock_hashes_by_id"] == [True] * 4
    assert first["document"] == second["document"] == original["document"]
    parameters = run(script=PARAMETERS)
    assert len(parameters) > 250 and run(tmp_path, script=PARAMETERS) == parameters
    # Positional arguments still go to the glyph's fields in order.
    assert first["glyphs"] == original["glyphs"] and "'bottom': Value(value=4," in original["glyphs"][0]
    assert "line_color" in original["glyph_signatures"][0]
    assert first["glyph_signatures"] == ["(self, left, right, top, bottom, **kwargs) -> 'GlyphRenderer'",
                                         "(self, x, y, size, angle, **kwargs) -> 'GlyphRenderer'"]
    # The document also defines Panel's data models; what the edited Panel leaves out are those of panel.chat and
    # of the modules it imports on first use.
    missing = set(original["defs"]) - set(first["defs"])
    assert set(first["defs"]) <= set(original["defs"]) and missing <= set(first["later_models"]), missing
    assert len(original["templates"]) >= 20 and first["templates"].keys() == original["templates"].keys()
    for name, template in original["templates"].items():
        assert template["cache_dir"] is None and not template["from_cache"], name
        assert first["templates"][name]["code"] == second["templates"][name]["code"] == template["code"], name
        assert second["templates"][name]["from_cache"], name  # written by the first run, read by the second
        assert tmp_path in Path(first["templates"][name]["cache_dir"]).parents, name  # the edited copies
    for name in ("bokeh", "panel", "param"):  # applied already: each patch now names what does not match
        with pytest.raises(BuildError, match=r"(?s)does not apply.*already applied"):
            patches.apply_patches(tmp_path, name, LOCK["wheels"][name]["version"])


def patched_unpacker(tree: Path) -> str:
    """The source of `_unpack_wheel` in Pyodide's package loader, patched as the build patches it."""
    import ast

    from sitebuild.fetch import fetch_pyodide
    from sitebuild.lock import read_lock

    lock = read_lock()
    with zipfile.ZipFile(fetch_pyodide(lock) / "python_stdlib.zip") as zf:
        zf.extract("pyodide/_package_loader.py", tree)
    patches.apply_patches(tree, "pyodide", lock["pyodide"]["version"])
    source = (tree / "pyodide/_package_loader.py").read_text()
    function = next(node for node in ast.parse(source).body
                    if isinstance(node, ast.FunctionDef) and node.name == "_unpack_wheel")
    assert "_unpack_wheel," in source  # and it is the one the loader registers for wheels
    return ast.get_source_segment(source, function)


@pytest.mark.filterwarnings("ignore:Duplicate name")
def test_wheel_unpacker_writes_what_shutils_does(cdn_site: Path, tmp_path: Path) -> None:
    """Pyodide's unpacker for wheels as the site's stdlib has it (sitebuild/patches/pyodide-*) against the
    shutil function it replaces: the same folders and files with the same bytes, for every wheel of the site and
    for a zip with folder entries, a repeated name and names that must not be extracted."""
    import shutil

    odd = tmp_path / "odd.whl"
    with zipfile.ZipFile(odd, "w") as zf:
        for name, data in (("pkg/", b""), ("pkg/a.py", b"x = 1"), ("pkg/sub/b.bin", bytes(range(256)) * 300),
                           ("empty/", b""), ("../evil.py", b"no"), ("/abs.py", b"no"), ("pkg/a.py", b"x = 2")):
            zf.writestr(name, data)
    namespace = {"shutil": shutil}
    exec(patched_unpacker(tmp_path / "stdlib"), namespace)  # noqa: S102 - the function as the site ships it

    def tree(root: Path) -> dict[str, bytes | None]:
        return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else None) for p in root.rglob("*")}

    wheels = sorted((cdn_site / "build" / "wheels").glob("*.whl"))
    assert len(wheels) > 10
    for whl in [*wheels, odd]:
        original, edited = tmp_path / "shutil" / whl.stem, tmp_path / "edited" / whl.stem
        shutil._unpack_zipfile(str(whl), str(original))
        namespace["_unpack_wheel"](str(whl), str(edited))
        assert tree(edited) == tree(original) != {}, whl.name
    assert tree(tmp_path / "edited" / "odd")["pkg/a.py"] == b"x = 2" and not (tmp_path / "edited" / "evil.py").exists()
    with pytest.raises(shutil.ReadError):
        namespace["_unpack_wheel"](str(cdn_site / "index.html"), str(tmp_path / "not-a-zip"))


def test_app_code_ships_as_a_wheel_not_inlined(cdn_site: Path) -> None:
    app = next((cdn_site / "build" / "wheels").glob("slm_playground-*.whl"))
    with zipfile.ZipFile(app) as zf:
        names = set(zf.namelist())
    assert {"playground/app.py", "slm/model.py", "slm/weights/shipped.npz"} <= names
    # The training the Train view runs (slm.train.lab, .tasks), not its command lines, nor the card, logs and curves
    # next to the weights.
    assert {"slm/train/lab.py", "slm/train/tasks.py"} <= names
    assert not [n for n in names if n in ("slm/train/__main__.py", "slm/train/lab_cli.py")
                or (n.startswith("slm/weights/") and not n.endswith(".npz"))]
    # The lessons' parser and runner with the built-in lessons, not the instructors' checker.
    assert {"lessons/format.py", "lessons/runner.py", "lessons/builtin/1-the-block.md"} <= names
    assert not {"lessons/cli.py", "lessons/__main__.py"} & names
    # The page and the worker only call into the app (boot.py: create_app, start_building_hidden); none of its
    # code is inlined in them.
    for js in ("loader.js", "worker.js"):
        text = (cdn_site / js).read_text()
        assert not re.search(r"^\s*(def \w+\(|from [\w.]+ import|import panel)", text, re.M), js
        assert "PlaygroundState" not in text, js
        assert "create_app" not in text, js


def test_the_apps_stylesheet_is_one_file_that_every_component_links(cdn_site: Path) -> None:
    """The app's CSS is served as it is, and the documents name it by URL: the first view's JSON holds the URL, not
    the text, which each component's model would otherwise carry (playground.app.add_styles)."""
    manifest = json.loads((cdn_site / "build" / "manifest.json").read_text())
    url = manifest["app_stylesheet"]
    assert url.startswith("./build/") and url.endswith(".css")
    source = ROOT / "py" / assemble.APP_STYLESHEET_SOURCE
    assert (cdn_site / url).read_bytes() == source.read_bytes()
    first_view = json.loads((cdn_site / "build" / "first-view.json").read_text())["docs_json"]
    rule = source.read_text().splitlines()[0]  # ".pg-title { ... }"
    assert rule.startswith(".pg-title") and rule not in first_view
    # One stylesheet model, which the page's components reference (Bokeh's JSON: {"id": ...}).
    (model,) = re.findall(r'"id": "(\w+)", "attributes": \{"url": ' + re.escape(json.dumps(url)), first_view)
    assert first_view.count(json.dumps(url)) == 1 and first_view.count(f'{{"id": "{model}"}}') > 20


def test_pages_have_a_strict_csp_and_no_inline_script(cdn_site: Path, fake_vendored_site: tuple[Path, str]) -> None:
    for site, cdn_allowed in ((cdn_site, True), (fake_vendored_site[0], False)):
        for page in ("index.html", "embed.html"):
            html = (site / page).read_text()
            csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html).group(1)
            assert "script-src 'self' blob: 'wasm-unsafe-eval';" in csp  # blob: the inflated gzip copies
            assert ("https://cdn.jsdelivr.net" in csp) is cdn_allowed, (page, csp)
            assert not re.search(r"<script(?![^>]*\bsrc=)", html), "inline script"
            assert not re.search(r"\son[a-z]+=", html), "inline event handler"


def test_relative_urls_only(cdn_site: Path) -> None:
    for name in ("index.html", "embed.html", "loader.js", "worker.js", "snapshot.js", "sw.js"):
        text = (cdn_site / name).read_text()
        assert not re.search(r"""(src|href)=["']/""", text), name
        assert "http://127.0.0.1" not in text and "localhost" not in text, name


def test_bad_pyodide_packages_dir_is_a_clear_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = run_build(tmp_path / "site", "--pyodide-packages", str(empty))
    assert proc.returncode == 1
    assert "no wheel for numpy" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_build(tmp_path / "site", "--pyodide-packages", str(tmp_path / "missing"))
    assert proc.returncode == 1 and "not a folder" in proc.stderr


def test_rebuild_changes_build_id_only_when_content_changes(cdn_site: Path, tmp_path: Path) -> None:
    first = json.loads((cdn_site / "build" / "manifest.json").read_text())["build_id"]
    again, _ = built(tmp_path / "site")
    assert json.loads((again / "build" / "manifest.json").read_text())["build_id"] == first
    (tmp_path / "site" / "style.css").write_text("/* changed */")  # a hand-edited shell file
    proc = run_build(tmp_path / "site")
    assert proc.returncode == 0
    # --site-dir copies the shell files from site/ again: the edit is overwritten, the id is stable.
    assert json.loads((again / "build" / "manifest.json").read_text())["build_id"] == first


# -------------------------------------------------------------------------------------------- in Chromium


def test_cdn_build_offline_boots_installs_and_names_numpy(browser: object, cdn_site: Path) -> None:
    """Every non-local request is blocked (as in CI): the page must boot Pyodide, install every vendored wheel,
    then stop on the error panel naming NumPy, with a Retry button."""
    with serve(cdn_site) as url, Visit(browser, url, service_workers="block") as visit:
        visit.open()
        visit.screenshot("ci-cdn-offline-error")
        page = visit.page
        assert page.evaluate("document.body.dataset.error") == "1", visit.console
        assert page.evaluate("document.body.dataset.ready") is None
        what = page.text_content("#error-what")
        assert "NumPy" in what, what
        assert "numpy-2.2.5" in page.text_content("#error-detail")
        assert page.is_visible("#retry")
        assert all(u.startswith("https://cdn.jsdelivr.net/pyodide/v0.29.3/full/numpy-") for u in visit.external)
        assert visit.external, "NumPy should have been requested from the CDN (and blocked)"
        lock = served_lock(cdn_site)
        vendored = {n for n, p in lock["packages"].items() if not p["file_name"].startswith("https://")}
        # All but the app's own wheel and the packages only its code may need, which are installed in the next
        # stage ("App code"), after this one.
        app_stage = {"slm-playground", *assemble.APP_STAGE_PACKAGES}
        assert not app_stage & set(visit.info()["loadedPackages"]), visit.info()
        assert vendored - app_stage <= set(visit.info()["loadedPackages"]), visit.info()
        # Runtime booted from the site itself (the gzip copy of its wasm, on a first visit).
        assert any(u.endswith("build/pyodide/pyodide.asm.wasm.gz") for u in visit.requests)
        # Retry really retries (and fails the same way, still offline).
        page.click("#retry")
        page.wait_for_selector("body[data-error='1']", state="attached", timeout=180_000)
        assert "NumPy" in page.text_content("#error-what")


def test_vendored_build_never_leaves_localhost(browser: object, fake_vendored_site: tuple[Path, str]) -> None:
    """Built with --pyodide-packages: all requests go to 127.0.0.1. (The NumPy wheel is a fake here, so the
    app stops at `import numpy`; the end-to-end test runs the real one.)"""
    site, stderr = fake_vendored_site
    assert "differs from the official Pyodide" in stderr  # the fake is not the official NumPy build
    assert "file_name" in (site / "build" / "pyodide-lock.json").read_text()
    assert "https://" not in (site / "build" / "pyodide-lock.json").read_text()
    with serve(site) as url, Visit(browser, url) as visit:
        visit.open()
        visit.screenshot("ci-vendored-fake-numpy")
        assert visit.external == []
        assert any(u.endswith("numpy-2.2.5-cp313-cp313-pyodide_2025_0_wasm32.whl") for u in visit.requests)
        assert "No module named 'numpy'" in visit.page.text_content("#error-detail")


def test_second_visit_is_served_by_the_service_worker_offline(browser: object,
                                                              fake_vendored_site: tuple[Path, str]) -> None:
    """After one visit the service worker holds every asset: offline, the page gets exactly as far (here:
    to the fake NumPy) instead of failing on a download."""
    site, _ = fake_vendored_site
    with serve(site) as url, Visit(browser, url) as visit:
        visit.open()
        visit.wait_js("navigator.serviceWorker.controller !== null")
        first = visit.page.text_content("#error-detail")
        visit.context.set_offline(True)
        visit.page.reload()
        visit.page.wait_for_selector("body[data-error='1']", state="attached", timeout=180_000)
        assert visit.page.text_content("#error-detail") == first


def test_the_next_visit_reads_the_page_scripts_compiled(browser: object, fake_vendored_site: tuple[Path, str],
                                                         tmp_path: Path) -> None:
    """The service worker stores the page's scripts (BokehJS, Panel's JS: the manifest's site.main_js) while it
    installs, and Chromium keeps V8's compiled code of a script stored then: the next visit's page compiles none of
    them, it reads their code (Chromium's trace: each script's `v8.compile` consumed a full cache). Stored only by
    'keep' after the install, a script had its code kept only after a first run from the cache: the next visit
    compiled every one of them."""
    site, _ = fake_vendored_site
    main_js = json.loads((site / "build" / "manifest.json").read_text())["site"]["main_js"]
    assert len(main_js) == 4
    with serve(site) as url, Visit(browser, url) as visit:
        visit.open()
        visit.wait_js("navigator.serviceWorker.controller !== null")  # every file stored
        trace = tmp_path / "reload.json"
        browser.start_tracing(page=visit.page, path=str(trace), categories=["devtools.timeline", "v8"])
        visit.page.reload()
        visit.page.wait_for_selector("body[data-error='1']", state="attached", timeout=180_000)  # the fake NumPy
        browser.stop_tracing()
    recorded = json.loads(trace.read_text())
    compiled = {e["args"]["data"]["url"].removeprefix(url): e["args"]["data"]
                for e in recorded.get("traceEvents", recorded)
                if e.get("name") == "v8.compile" and "url" in e.get("args", {}).get("data", {})}
    for script in main_js:
        assert script in compiled, sorted(compiled)
        assert compiled[script].get("consumedCacheSize", 0) > 0 and compiled[script].get("cacheKind") == "full", (
            script, compiled[script])


def test_missing_asset_ends_on_error_panel(browser: object, fake_vendored_site: tuple[Path, str],
                                           tmp_path: Path) -> None:
    """A missing file (here the wasm runtime, which a first visit downloads gzipped) names itself on the error
    panel: never a blank page."""
    import shutil

    site = tmp_path / "broken"
    shutil.copytree(fake_vendored_site[0], site)
    (site / "build" / "pyodide" / "pyodide.asm.wasm.gz").unlink()
    with serve(site) as url, Visit(browser, url, service_workers="block") as visit:
        visit.open()
        visit.screenshot("ci-missing-wasm")
        assert "Pyodide runtime" in visit.page.text_content("#error-what")
        assert "pyodide.asm.wasm" in visit.page.text_content("#error-detail")


def test_a_missing_app_wheel_is_named_before_what_python_says(browser: object, fake_vendored_site: tuple[Path, str],
                                                               tmp_path: Path) -> None:
    """The app's wheel is installed while Panel is imported (here Panel's import fails on the fake NumPy): when the
    wheel itself could not be downloaded, the error panel names it, not the Python error that followed."""
    import shutil

    site = tmp_path / "no-app-wheel"
    shutil.copytree(fake_vendored_site[0], site)
    (app_wheel,) = (site / "build" / "wheels").glob("slm_playground-*.whl")
    app_wheel.unlink()
    with serve(site) as url, Visit(browser, url, service_workers="block") as visit:
        visit.open()
        visit.screenshot("ci-missing-app-wheel")
        assert visit.page.text_content("#error-what") == "App code: could not load the app (slm_playground wheel)"
        # (fetched with its sha256 as integrity, a 404 reads as a network error)
        assert f"build/wheels/{app_wheel.name}" in visit.page.text_content("#error-detail")


WASM = "build/pyodide/pyodide.asm.wasm"


def test_the_wasm_and_the_pages_scripts_ship_with_gzip_copies_of_the_same_bytes(cdn_site: Path) -> None:
    """For hosts that send wasm and JavaScript uncompressed the build also ships pyodide.asm.wasm and the page's
    scripts (BokehJS, Panel's JS) gzipped, named in the manifest (where the worker, the page and the service worker
    find them): each copy holds the served file's bytes, in under 40 % of its size."""
    manifest = json.loads((cdn_site / "build" / "manifest.json").read_text())
    main_js = manifest["site"]["main_js"]
    assert len(main_js) == 4 and all(p.endswith(".js") for p in main_js)
    assert manifest["site"]["gzip_copies"] == {p: f"{p}.gz" for p in (WASM, *main_js)}
    for path in (WASM, *main_js):
        data = (cdn_site / path).read_bytes()
        copy = (cdn_site / f"{path}.gz").read_bytes()
        assert gzip.decompress(copy) == data
        assert len(copy) < 0.4 * len(data), path


CACHED_WASM_SHA256 = """async (path) => {
  const url = new URL(path, location.href).href;
  for (const name of await caches.keys()) {
    const hit = await (await caches.open(name)).match(url);
    if (hit) {
      const digest = await crypto.subtle.digest("SHA-256", await hit.arrayBuffer());
      return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
    }
  }
  return null;
}"""


def test_a_first_visit_downloads_the_wasm_gzipped_and_keeps_it_whole(browser: object,
                                                                     fake_vendored_site: tuple[Path, str]) -> None:
    """A first visit downloads the gzip copy and boots from it (here as far as the fake NumPy); the cache then holds
    the wasm itself, byte for byte, and the next visit, served by the service worker, asks for the wasm, not the
    copy (Chromium keeps compiled code beside a cached file, not beside one made in the worker)."""
    site, _ = fake_vendored_site
    with serve(site) as url, Visit(browser, url) as visit:
        visit.open()
        assert "No module named 'numpy'" in visit.page.text_content("#error-detail"), visit.console
        first = list(visit.requests)
        assert any(u.endswith(f"{WASM}.gz") for u in first)
        assert not any(u.endswith(WASM) for u in first)
        visit.wait_js("navigator.serviceWorker.controller !== null")
        # The worker stores it while the visit goes on; a slow machine may still be writing it.
        deadline = time.monotonic() + 30
        while (cached := visit.page.evaluate(CACHED_WASM_SHA256, WASM)) is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert cached == hashlib.sha256((site / WASM).read_bytes()).hexdigest()
        visit.reload()
        again = visit.requests[len(first):]
        assert "No module named 'numpy'" in visit.page.text_content("#error-detail"), visit.console
        assert any(u.endswith(WASM) for u in again)
        assert not any(u.endswith(f"{WASM}.gz") for u in again)


class EncodedCopyHandler(SiteHandler):
    """A host that sends a .gz file as Content-Encoding: gzip (the browser then decompresses it itself)."""

    def end_headers(self) -> None:
        if self.path.split("?")[0].endswith(".gz"):
            self.send_header("Content-Encoding", "gzip")
        super().end_headers()


def test_a_copy_sent_content_encoded_is_not_decompressed_twice(browser: object,
                                                               fake_vendored_site: tuple[Path, str]) -> None:
    site, _ = fake_vendored_site
    with serving(site, handler_class=EncodedCopyHandler) as url, Visit(browser, url, service_workers="block") as visit:
        visit.open()
        assert any(u.endswith(f"{WASM}.gz") for u in visit.requests)
        assert "No module named 'numpy'" in visit.page.text_content("#error-detail"), visit.console


@pytest.mark.parametrize("page", ["embed.html"])
def test_embed_page_uses_the_same_loader(cdn_site: Path, page: str) -> None:
    html = (cdn_site / page).read_text()
    assert 'data-embed="1"' in html and 'src="loader.js"' in html


def test_rebuild_replaces_the_service_worker_and_its_cache(browser: object, fake_vendored_site: tuple[Path, str],
                                                           tmp_path: Path) -> None:
    """A new build id (what a rebuild that changes any file produces) must bring a new service worker that drops
    the old cache, so no stale asset is served."""
    import shutil

    site = tmp_path / "rebuilt"
    shutil.copytree(fake_vendored_site[0], site)
    manifest_path = site / "build" / "manifest.json"
    with serve(site) as url, Visit(browser, url) as visit:
        visit.open()
        page = visit.page
        visit.wait_js("navigator.serviceWorker.controller !== null")
        old = json.loads(manifest_path.read_text())["build_id"]
        assert page.evaluate("caches.keys()") == [f"slm-site-{old}"]
        manifest = json.loads(manifest_path.read_text())
        manifest["build_id"] = "rebuilt0000000000"
        manifest_path.write_text(json.dumps(manifest))
        page.reload()
        page.wait_for_selector("body[data-error='1']", state="attached", timeout=180_000)
        visit.wait_js("navigator.serviceWorker.controller?.scriptURL.endsWith('build=rebuilt0000000000')")
        visit.wait_js("caches.keys().then((k) => k.length === 1)")
        assert page.evaluate("caches.keys()") == ["slm-site-rebuilt0000000000"]


# ------------------------------------------------------------------------------------------ first view


class SlowNumpyHandler(SiteHandler):
    """A host that takes five seconds to answer for the NumPy wheel."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if "/numpy-" in self.path:
            time.sleep(5)
        super().do_GET()


def test_first_view_shows_the_default_page_before_python(browser: object, fake_vendored_site: tuple[Path, str]
                                                         ) -> None:
    """The build pre-renders the default state's page (sitebuild/first_view.py); the page shows it with BokehJS
    alone, before Python (here it never gets ready: the NumPy wheel is a fake), inert, with the progress still
    shown; its numbers are the app's own for that state (computed here by the app in CPython)."""
    from playground.app import Playground
    from playground.state import PlaygroundState

    site, _ = fake_vendored_site
    manifest = json.loads((site / "build" / "manifest.json").read_text())
    assert manifest["first_view"]["path"] == "build/first-view.json"
    # The fake NumPy fails at once: answered late, it leaves the first view on screen long enough to be checked.
    with serving(site, handler_class=SlowNumpyHandler) as url, Visit(browser, url) as visit:
        page = visit.page
        page.goto(url + "index.html")
        page.wait_for_selector("body[data-first-view='shown']", state="attached", timeout=60_000)
        shown = page.evaluate(MAP_NODES_JS)
        visit.screenshot("ci-first-view")
        assert page.evaluate("document.querySelector('#app').inert") is True
        assert page.is_visible("#loading") and page.is_visible(".first-view-note")
        assert token_box_height(page) >= 44  # the app's stylesheet, linked (below)
        assert page.evaluate("document.body.dataset.ready") is None
        expected = Playground(PlaygroundState()).views["map"].source.data
        assert shown["name"] == list(expected["name"])
        assert shown["value"] == [float(v) for v in expected["value"]]  # bit for bit: numpy 2.2.5 on both sides
        page.wait_for_selector("body[data-error='1']", state="attached", timeout=180_000)
        assert "No module named 'numpy'" in page.text_content("#error-detail")


class SlowScriptHandler(SiteHandler):
    """A host that takes a second and a half to answer for Panel's JS (one of the first view's files)."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path.split("?")[0].endswith(("/panel.min.js", "/panel.min.js.gz")):
            time.sleep(1.5)
        super().do_GET()


RESOURCES_JS = ("() => [performance.timeOrigin, "
                "performance.getEntriesByType('resource').map((e) => [e.name, e.startTime, e.responseEnd])]")


@pytest.mark.parametrize("copies", [True, False])
def test_the_runtime_is_requested_once_the_first_views_bytes_are_in(browser: object,
                                                                    fake_vendored_site: tuple[Path, str],
                                                                    copies: bool) -> None:
    """With a first view, the worker starts at once (its script, Pyodide's module and the lock load meanwhile) but
    requests the runtime (Pyodide's script, the stdlib, the wasm) only once BokehJS, Panel's JS (their gzip copies,
    or with ?fallback=script-copies the scripts themselves) and the first view's document are in: here Panel's JS
    comes 1.5 s late, and the runtime after it."""
    site, _ = fake_vendored_site
    manifest = json.loads((site / "build" / "manifest.json").read_text())
    with serving(site, handler_class=SlowScriptHandler) as url, Visit(browser, url, service_workers="block") as visit:
        visit.open("index.html" if copies else "index.html?fallback=script-copies")
        page_origin, page_entries = visit.page.evaluate(RESOURCES_JS)
        worker_origin, worker_entries = visit.page.workers[0].evaluate(RESOURCES_JS)
    ended = {name: page_origin + end for name, _, end in page_entries}
    started = {name: worker_origin + start for name, start, _ in worker_entries}
    scripts = [f"{path}.gz" if copies else path for path in manifest["site"]["main_js"]]
    first_view = [url + path for path in (*scripts, manifest["first_view"]["path"])]
    runtime = [f"{url}build/pyodide/{name}"
               for name in ("pyodide.asm.js", "python_stdlib.zip", f"{Path(WASM).name}.gz")]
    assert set(first_view) <= ended.keys() and set(runtime) <= started.keys(), (ended, started)
    last_byte = max(ended[u] for u in first_view)
    assert ended[url + "build/vendor/1.9.4/dist/panel.min.js" + (".gz" if copies else "")] == last_byte
    assert min(started[u] for u in runtime) >= last_byte - 1, (last_byte, {u: started[u] for u in runtime})
    # The worker was there before that: its module and the lock had been requested 1.5 s before.
    assert started[url + "build/pyodide-lock.json"] < last_byte - 1000


def test_the_wheels_come_in_the_order_they_are_imported(browser: object,
                                                        fake_vendored_site: tuple[Path, str]) -> None:
    """The wheels are requested a group at a time, each group once the one before it is in: NumPy, then what
    importing bokeh.models needs, then the rest of what `import panel` needs, then the "App code" stage (the app and
    the packages only its code needs). They are downloaded by a thread of their own (site/fetcher.js), not by the
    app worker, which is busy with Python for up to a second at a time. Here the fake NumPy installs but fails to
    import, with the next groups still coming: they are all installed before the error shows."""
    site, _ = fake_vendored_site
    build = site / "build"
    manifest = json.loads((build / "manifest.json").read_text())
    lock = json.loads((build / "pyodide-lock.json").read_text())["packages"]
    assert [g["module"] for g in manifest["import_groups"]] == ["numpy", "bokeh.models"]
    assert manifest["import_groups"][0]["packages"] == ["numpy"]
    app_stage = {"slm-playground", *assemble.APP_STAGE_PACKAGES}
    grouped = {n for g in manifest["import_groups"] for n in g["packages"]}
    rest = set(lock) - grouped - app_stage
    assert {"panel", "param"} <= rest and "bokeh" in grouped
    groups = [g["packages"] for g in manifest["import_groups"]] + [sorted(rest), sorted(app_stage)]
    with serve(site) as url, Visit(browser, url, service_workers="block") as visit:
        visit.open()
        assert "No module named 'numpy'" in visit.page.text_content("#error-detail")
        loaded = set(visit.info()["loadedPackages"])
        app_worker = next(w for w in visit.page.workers if w.url.endswith("/worker.js"))
        _, entries = app_worker.evaluate(RESOURCES_JS)
    assert set(lock) <= loaded, loaded
    assert not [name for name, _, _ in entries if name.endswith(".whl")], "the app worker downloaded wheels"
    wheels = [[url + "build/" + lock[n]["file_name"] for n in group] for group in groups]
    for before, after in itertools.pairwise(wheels):
        assert min(visit.started[u] for u in after) >= max(visit.finished[u] for u in before), (before, after)


@pytest.mark.parametrize("query", ["?prompt=the+dogs", "?view=attention", "?embed=1"])
def test_no_first_view_for_another_state(browser: object, fake_vendored_site: tuple[Path, str], query: str) -> None:
    """A URL that sets any of the app's state parameters waits for the live app: no numbers for a prompt (or a
    view) other than the one asked for."""
    site, _ = fake_vendored_site
    with serve(site) as url, Visit(browser, url) as visit:
        page = visit.page
        page.goto(url + "index.html" + query)
        page.wait_for_selector("body[data-error='1']", state="attached", timeout=180_000)
        assert page.evaluate("document.body.dataset.firstView") is None
        assert page.evaluate("(window.Bokeh?.documents ?? []).length") == 0
        assert not [r for r in visit.requests if r.endswith("first-view.json")], visit.requests


def test_a_rolled_back_build_reaches_a_returning_visitor(browser: object, fake_vendored_site: tuple[Path, str],
                                                         tmp_path: Path) -> None:
    """An instructor rolls back to an older build whose files carry older modification times than the build a
    student already ran. On a plain static host (validators from file times, no cache headers) and with no
    interception in the way, the student's next reload runs the rolled-back build, not the cached newer one."""
    import shutil

    site = tmp_path / "site"
    shutil.copytree(fake_vendored_site[0], site)
    manifest_path = site / "build" / "manifest.json"
    older = json.loads(manifest_path.read_text())
    newer = {**older, "build_id": "f" * len(older["build_id"])}  # deployed first; the same files otherwise
    manifest_path.write_text(json.dumps(newer))
    with hosted(site, "plain") as url, Visit(browser, url, intercept=False) as visit:
        visit.open()
        assert visit.info()["build"] == newer["build_id"]
        visit.wait_js("navigator.serviceWorker.controller !== null")
        manifest_path.write_text(json.dumps(older))
        week_ago = time.time() - 7 * 86400
        os.utime(manifest_path, (week_ago, week_ago))
        for _ in range(2):  # the first reload and the one after it
            visit.reload()
            assert visit.info()["build"] == older["build_id"]


def test_a_damaged_file_in_the_cache_is_fetched_again(browser: object, fake_vendored_site: tuple[Path, str]) -> None:
    """The Bokeh wheel's bytes in the service worker's cache are damaged (a disk error, an interrupted write): the
    next start notices by the wheel's sha256, fetches it again and gets as far as before (here: the NumPy panel of
    the fake NumPy), instead of stopping on 'could not load bokeh' at every start and every Retry."""
    with hosted(fake_vendored_site[0], "plain") as url, Visit(browser, url, intercept=False) as visit:
        visit.open()
        first = visit.page.text_content("#error-what")
        visit.wait_js("navigator.serviceWorker.controller !== null")
        damaged = visit.page.evaluate("""async () => {
          for (const name of await caches.keys()) {
            const cache = await caches.open(name);
            for (const request of await cache.keys()) {
              if (!/bokeh-[^/]*\\.whl$/.test(request.url)) continue;
              const bytes = new Uint8Array(await (await cache.match(request)).arrayBuffer());
              bytes[bytes.length >> 1] ^= 0xff;
              await cache.put(request, new Response(bytes, { headers: { "Content-Type": "application/zip" } }));
              return request.url;
            }
          }
          return null;
        }""")
        assert damaged, "the Bokeh wheel was not in the cache"
        visit.reload()
        again = visit.page.text_content("#error-what")
        assert "bokeh" not in again.lower(), visit.page.text_content("#error")
        assert again == first, (first, again)
