"""The first view, pre-rendered: the page the app shows for the default state (default prompt, trained model,
landing view), as the Bokeh document JSON that the worker's 'render' message carries.

`loader.js` shows it with BokehJS alone while Python starts, and only when the page's URL sets none of the app's
state parameters (`state_params`, the app's URL_PARAMS): a URL that asks for another prompt or view waits for the
live app instead, so no number is ever shown for a prompt other than the one in the box. The live app replaces it
when ready.

It is rendered by the Python that runs the build, in a subprocess (`python -m sitebuild.first_view OUT`), with the
same app and the same pinned Panel, Bokeh and NumPy as the worker (numpy==2.2.5 on both sides: the same numbers).
Without those in that Python the build skips it and says why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

FIRST_VIEW_FILE = "build/first-view.json"


def write(site: Path, py_dir: Path, panel_cdn_root: str, stylesheet_url: str,
          log) -> dict | None:  # noqa: ANN001 - log: common.log
    """Render the first view into site/FIRST_VIEW_FILE; what the manifest says of it (None when skipped).
    `stylesheet_url`: where the site serves the app's stylesheet (the live app links it there too)."""
    out = site / FIRST_VIEW_FILE
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(py_dir), str(Path(__file__).resolve().parents[1])]),
           "PANEL_CDN_ROOT": panel_cdn_root, "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "sitebuild.first_view", str(out), stylesheet_url], env=env,
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        reason = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        log(f"no pre-rendered first view ({FIRST_VIEW_FILE}): rendering it in this Python failed: {reason}")
        out.unlink(missing_ok=True)
        return None
    return {"path": FIRST_VIEW_FILE, "state_params": json.loads(out.read_text())["state_params"]}


def render(stylesheet_url: str) -> dict:
    """The default state's page as Panel's worker renders it (panel.io.pyodide.write_doc: the document's JSON,
    its render items and root ids), and the URL parameters that make a state other than the default."""
    import panel as pn
    from bokeh.document import Document
    from bokeh.embed.util import standalone_docs_json_and_render_items
    from panel.io.resources import set_resource_mode

    from playground.app import create_app
    from playground.state import URL_PARAMS

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
            "root_ids": json.dumps([m.id for m in doc.roots]), "state_params": sorted(URL_PARAMS.values()),
            "view": playground.state.view, "prompt": playground.state.prompt}


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(json.dumps(render(sys.argv[2]), separators=(",", ":")))
