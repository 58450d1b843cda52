"""The first view, pre-rendered: the page the app shows for the default state (default prompt, trained model,
landing view), as the Bokeh document JSON that the worker's 'render' message carries.

`loader.js` shows it with BokehJS alone while Python starts, and only when the page's URL sets none of the app's
state parameters (`state_params`, playground.state.url_keys): a URL that asks for another prompt or view waits for
the live app instead, so no number is ever shown for a prompt other than the one in the box. The live app replaces
it when ready.

It is rendered in a subprocess (`python -m sitebuild.first_view OUT`) with the same app and the same pinned Panel,
Bokeh, param and NumPy as the worker (numpy==2.2.5 on both sides: the same numbers). The Python that runs the build
does it when it has those versions; otherwise the builder makes its own environment once, `.cache/render-venv`
(`python -m venv`, then pip installs the pins of build.lock, taking the wheels the build already fetched), so a
fresh machine's first build renders it too. That environment is made again when build.lock's pins change.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from .common import CACHE, BuildError, run

FIRST_VIEW_FILE = "build/first-view.json"
RENDER_VENV = CACHE / "render-venv"
PINS_FILE = "render-pins.json"  # in RENDER_VENV: the pins it was made with
RENDERS_WITH = ("numpy", "panel", "bokeh", "param")  # the distributions whose versions make the view's bytes
# Prints {name: installed version or null} for RENDERS_WITH, without importing them (fast).
PROBE = ("import json, sys\nfrom importlib import metadata\ndef v(n):\n try:\n  return metadata.version(n)\n"
         " except metadata.PackageNotFoundError:\n  return None\nprint(json.dumps({n: v(n) for n in sys.argv[1:]}))")


def write(site: Path, py_dir: Path, panel_cdn_root: str, stylesheet_url: str, lock: dict,
          log) -> dict | None:  # noqa: ANN001 - log: common.log
    """Render the first view into site/FIRST_VIEW_FILE; what the manifest says of it (None when skipped).
    `stylesheet_url`: where the site serves the app's stylesheet (the live app links it there too)."""
    out = site / FIRST_VIEW_FILE
    try:
        python = render_python(pins(lock), log)
    except BuildError as e:  # no environment to render in (offline, no venv module): the site works without it
        log(f"no pre-rendered first view ({FIRST_VIEW_FILE}): {e}")
        out.unlink(missing_ok=True)
        return None
    proc = render_in(python, out, py_dir, panel_cdn_root, stylesheet_url)
    if proc.returncode != 0:
        reason = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        log(f"no pre-rendered first view ({FIRST_VIEW_FILE}): rendering it in {python} failed: {reason}")
        out.unlink(missing_ok=True)
        return None
    return {"path": FIRST_VIEW_FILE, "state_params": json.loads(out.read_text())["state_params"]}


def render_in(python: str, out: Path, py_dir: Path, panel_cdn_root: str,
              stylesheet_url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(py_dir), str(Path(__file__).resolve().parents[1])]),
           "PANEL_CDN_ROOT": panel_cdn_root, "OPENBLAS_NUM_THREADS": "1"}
    return subprocess.run([python, "-m", "sitebuild.first_view", str(out), stylesheet_url], env=env,
                          capture_output=True, text=True, timeout=300)


def pins(lock: dict) -> dict[str, str]:
    """Distribution -> version for the render: build.lock's wheels and sdists (the worker's) and NumPy as the
    pinned Pyodide ships it (requirements.txt pins the same)."""
    found = {name: e["version"] for section in ("wheels", "sdists") for name, e in lock[section].items()}
    return {**found, "numpy": lock["pyodide_packages"]["numpy"]["version"]}


def lacks(python: str, pins: dict[str, str]) -> str | None:
    """Why `python` cannot render the first view as the worker would (a missing or other version of one of
    RENDERS_WITH, or it does not run); None when it can."""
    try:
        proc = subprocess.run([python, "-c", PROBE, *RENDERS_WITH], capture_output=True, text=True, timeout=60)
        found = json.loads(proc.stdout) if proc.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError) as e:  # not a Python that runs
        return f"{python} does not run: {e}"
    if found is None:
        return f"{python} does not run: {(proc.stderr.strip().splitlines() or ['no output'])[-1]}"
    wrong = [f"{n} {pins[n]} (it has {found[n] or 'none'})" for n in RENDERS_WITH if found[n] != pins[n]]
    return f"{python} lacks {', '.join(wrong)}" if wrong else None


def venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def choose(python: str, pins: dict[str, str], venv: Path = RENDER_VENV) -> tuple[str, str]:
    """Where to render: ("this", python) when the build's own Python has the pins, ("venv", its python) when
    `venv` was made with these pins and still runs, else ("make", why not the build's Python)."""
    why = lacks(python, pins)
    if why is None:
        return "this", python
    if made_with(venv) == pins and lacks(str(venv_python(venv)), pins) is None:
        return "venv", str(venv_python(venv))
    return "make", why


def made_with(venv: Path) -> dict | None:
    try:
        return json.loads((venv / PINS_FILE).read_text())
    except (OSError, ValueError):  # not made, or made by an interrupted build
        return None


def render_python(pins: dict[str, str], log, python: str = sys.executable,  # noqa: ANN001 - log: common.log
                  venv: Path = RENDER_VENV, wheels: Path = CACHE / "wheels") -> str:
    """The Python that renders the first view (see choose), making `venv` when neither will do."""
    where, found = choose(python, pins, venv)
    if where != "make":
        return found
    log(f"first view: {found}; making {venv.name} with the pins of build.lock (once)")
    make_venv(python, pins, venv, wheels)
    return str(venv_python(venv))


def prepare(lock: dict, log) -> None:  # noqa: ANN001 - log: common.log
    """`build.py --prepare`: make the environment now when this Python lacks the pins (pip needs the network once,
    as the rest of what --prepare fetches), so that later builds need none."""
    try:
        render_python(pins(lock), log)
    except BuildError as e:
        log(f"no environment for the first view yet (a build makes it): {e}")


def alive(pid: int) -> bool:
    if os.name == "nt":  # os.kill there ends the process: keep the folder
        return True
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def make_venv(python: str, pins: dict[str, str], venv: Path, wheels: Path) -> None:
    """`python -m venv` beside `venv`, pip installs RENDERS_WITH at their pins (the rest of build.lock's versions
    as constraints, the build's fetched wheels as a source), then takes `venv`'s place."""
    for stale in venv.parent.glob(f"{venv.name}.part-*"):  # left by a build that was killed
        pid = stale.name.rpartition("-")[2]
        if not (pid.isdigit() and alive(int(pid))):
            shutil.rmtree(stale, ignore_errors=True)
    part = venv.with_name(f"{venv.name}.part-{os.getpid()}")
    shutil.rmtree(part, ignore_errors=True)
    part.parent.mkdir(parents=True, exist_ok=True)
    try:
        install = [str(venv_python(part)), "-m", "pip"]
        try:
            run([python, "-m", "venv", str(part)], timeout=300)
        except BuildError:  # no ensurepip (Debian without python3-venv): the venv without pip, this Python's pip
            shutil.rmtree(part, ignore_errors=True)
            run([python, "-m", "venv", "--without-pip", str(part)], timeout=300)
            install = [python, "-m", "pip", "--python", str(venv_python(part))]
        constraints = part / "constraints.txt"
        constraints.write_text("".join(f"{n}=={v}\n" for n, v in sorted(pins.items()) if n not in RENDERS_WITH))
        run([*install, "install", "--disable-pip-version-check", "--quiet", "--only-binary=:all:",
             "-c", str(constraints), *(["--find-links", str(wheels)] if wheels.is_dir() else []),
             *(f"{n}=={pins[n]}" for n in RENDERS_WITH)], timeout=1800)
        why = lacks(str(venv_python(part)), pins)
        if why:
            raise BuildError(f"after pip install: {why}")
        (part / PINS_FILE).write_text(json.dumps(pins, sort_keys=True))
        shutil.rmtree(venv, ignore_errors=True)
        try:
            part.rename(venv)
        except OSError:  # a build beside this one made it first
            if made_with(venv) != pins:
                raise
            shutil.rmtree(part, ignore_errors=True)
    except BaseException:
        shutil.rmtree(part, ignore_errors=True)
        raise


def render(stylesheet_url: str) -> dict:
    """The default state's page as Panel's worker renders it (panel.io.pyodide.write_doc: the document's JSON,
    its render items and root ids), and the URL parameters that make a state other than the default."""
    import panel as pn
    from bokeh.document import Document
    from bokeh.embed.util import standalone_docs_json_and_render_items
    from panel.io.resources import set_resource_mode

    from playground.app import create_app
    from playground.state import url_keys

    doc = Document()
    pn.state.curdoc = doc  # as panel.io.pyodide.init_doc does in the worker
    # Under Pyodide Panel names its stylesheets as CDN resources (below PANEL_CDN_ROOT, as they are); elsewhere it
    # adds a version query to some (loading.css?v=...). In CDN mode here the URLs are the worker's, so the live
    # document finds the first view's stylesheets loaded instead of downloading one again.
    with set_resource_mode("cdn"):
        # as site/prelude.py's build_page: the same page
        playground = create_app(build_hidden_on_load=False, custom_js=False, stylesheet_url=stylesheet_url)
        playground.root.server_doc(doc)
    docs_json, render_items = standalone_docs_json_and_render_items(doc.roots, suppress_callback_warning=True)
    # Bokeh names the document and the roots' elements with random UUIDs: fixed names keep the build reproducible
    # (the same sources, the same build id). The page puts the roots in elements of its own.
    items = [i.to_json() for i in render_items]
    docs_json = {"first-view": docs_json[items[0]["docid"]]}
    items[0].update(docid="first-view", roots={m: f"first-view-root-{n}" for n, m in enumerate(items[0]["roots"])})
    return {"docs_json": json.dumps(docs_json), "render_items": json.dumps(items),
            "root_ids": json.dumps([m.id for m in doc.roots]), "state_params": sorted(url_keys(playground.state)),
            "view": playground.state.view, "prompt": playground.state.prompt}


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(json.dumps(render(sys.argv[2]), separators=(",", ":")))
