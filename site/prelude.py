"""Worker-side imports, run by worker.js before boot.py: Panel and the app's module, nothing built yet.

The snapshot worker runs only this file, and then ``warm_up()``, before it takes its memory snapshot
(snapshot.js), so an interpreter restored from that snapshot has done all of it already. worker.js sets
``app_module``, ``app_stylesheet``, ``panel_cdn_root``, ``import_groups``, ``packages_installed`` and
``app_installed``; ``timings`` (seconds) goes to the page with the render message. The names JS reads here
(``timings``, ``warm_up``) are declared in site/src/worker/python-api.js.
"""

import gc
import importlib
import os
import time

timings: dict[str, float] = {}
_t = time.perf_counter()

# The imports below create ~150k objects that live as long as the page: the cyclic collector would scan them at
# every full collection, later while tokens stream too (~60 ms each). So it stays off until they are done, and
# then they go to the permanent generation (gc.freeze). Measured in Node: a full collection afterwards 60 -> 3 ms,
# the same heap size (no garbage of note kept); the imports 5-10 % faster there, no change in Chromium.
gc.disable()

# Panel reads PANEL_CDN_ROOT when panel.io.resources is imported: every stylesheet URL in the document then
# points at the copies of Panel's CSS vendored next to the page, not at cdn.holoviz.org.
os.environ["PANEL_CDN_ROOT"] = panel_cdn_root  # noqa: F821 - set by worker.js

# worker.js installs the packages a group at a time, in the order imported here (sitebuild/assemble.py
# IMPORT_GROUPS): each group's module is imported while the next group downloads. `import_groups`: (module, a JS
# promise settled once its group is in); `packages_installed`: settled once every group is. runPythonAsync runs this
# file, where a top-level await is allowed.
_waiting = 0.0  # for the packages, not importing: not part of import_panel
for _module, _installed in [*import_groups, (None, packages_installed)]:  # noqa: F821 - set by worker.js
    _w = time.perf_counter()
    await _installed  # noqa: F704
    _waiting += time.perf_counter() - _w
    if _module:
        importlib.import_module(_module)
import panel  # noqa: E402
import panel.io.pyodide  # noqa: E402, F401 - what boot.py uses; imported here so that the snapshot holds it

# pn.extension() would give every Panel class an `__init__` signature for IDE completion (0.02 s): not used here.
panel.config.apply_signatures = False

timings["import_panel"] = time.perf_counter() - _t - _waiting
# worker.js installs the app's own wheel and the packages only the app's code may need (Markdown, PyYAML) while Panel
# is imported, which does not need them: a JS promise, settled once they are in.
await app_installed  # noqa: F704, F821 - set by worker.js
_t = time.perf_counter()
importlib.import_module(app_module)  # noqa: F821 - set by worker.js
timings["import_app"] = time.perf_counter() - _t

gc.freeze()
gc.enable()


async def prepare_page() -> None:
    """What the app has to read before its page is built (its module's `prepare()`, if any), awaited by boot.py:
    e.g. a model that the link names, kept in the browser's storage, so that the page is ready on it."""
    prepare = getattr(importlib.import_module(app_module), "prepare", None)  # noqa: F821 - set by worker.js
    if prepare is not None:
        await prepare()


def build_page() -> object:
    """The app's page, built as the site serves it (boot.py; warm_up below): the hidden tabs' views are built after
    'ready' (worker.js calls playground.start_building_hidden), one at a time, each reaching the page as a patch; a
    tab opened before that builds its view at once. No CustomJS: the site's CSP refuses it."""
    playground = importlib.import_module(app_module).create_app(  # noqa: F821 - set by worker.js
        build_hidden_on_load=False, custom_js=False, stylesheet_url=app_stylesheet)  # noqa: F821 - set by worker.js
    playground.root.servable()
    return playground


def warm_up() -> None:
    """Called by the snapshot worker only, before the snapshot is taken: build the default page once, as boot.py
    does, into a document that is then thrown away. Building a page fills caches that outlive it (param's and
    Bokeh's per-class tables, the shipped model's weights, ...): in the snapshot, they make a start from it build
    the learner's page in ~60 % of the time (docs/site.md, "Memory snapshot"). The app worker never calls it: on a
    first visit it would only add its cost."""
    from panel.io.document import _cleanup_doc
    from panel.io.pyodide import _doc_json, init_doc
    from panel.io.state import state

    init_doc()
    doc = state.curdoc
    build_page()
    _doc_json(doc, None)  # what write_doc sends, serialized the same way
    # Panel's own teardown of a session's document: its views' models and watchers dropped, the document destroyed.
    _cleanup_doc(doc)
    state._locations.pop(doc, None)
    state.curdoc = None
    del doc
    gc.collect()
