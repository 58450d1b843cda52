"""Worker-side entry point: build the app's Panel document the way `panel convert --to pyodide-worker` does.

worker.js runs this file after prelude.py (which imported Panel and the app's module), in the same namespace,
with ``location_json`` (the page's ``window.location`` as JSON, query string included) set as well. The value
of the last expression goes to the page as Panel's 'render' message. ``apply_patch``, ``link_docs`` and
``set_location`` are called by worker.js for the 'patch', 'rendered' and 'location' messages, ``deliver_files`` for
files dropped on the page, and ``playground.start_building_hidden`` right after 'ready' (the names JS reads here are
declared in site/src/worker/python-api.js).
"""

import json
import time

from panel.io.pyodide import _convert_json_patch, _link_docs_worker, init_doc, write_doc
from panel.io.state import state
from panel.util import edit_readonly


def set_location(location: str) -> None:
    """Copy the page's window.location into pn.state.location (as panel's worker template does)."""
    if state.location is None:
        return
    data = json.loads(location)
    with edit_readonly(state.location):
        state.location.param.update({k: v for k, v in data.items() if k in state.location.param})


def apply_patch(patch: object) -> None:
    state.curdoc.apply_json_patch(_convert_json_patch(patch), setter="js")


def link_docs(send_patch: object) -> None:
    _link_docs_worker(state.curdoc, send_patch, setter="js")


def deliver_files(files: object) -> int | None:
    """Files dropped on the page (worker.js: a JS array of [name, Uint8Array]) to ``playground.inbox.deliver`` as
    [name, bytearray] pairs; how many playgrounds took them, or None when this build's app has no inbox. Each file
    is copied into the wasm heap once, into a buffer the loader may keep its weights in."""
    try:
        from playground import inbox
    except ModuleNotFoundError as e:
        if e.name != "playground.inbox":
            raise
        return None
    try:
        from playground import memory  # before the files come in: the heap grows for them, or they are refused

        memory.make_room(sum(int(data.byteLength) for _, data in files), f"{len(files)} file(s)")  # type: ignore[attr-defined]
    except ModuleNotFoundError as e:
        if e.name != "playground.memory":
            raise
    except MemoryError as e:
        return inbox.refuse(str(e))
    pairs = []
    for name, data in files:  # type: ignore[attr-defined]
        buffer = bytearray(data.byteLength)
        data.assign_to(buffer)
        pairs.append([str(name), buffer])
    return inbox.deliver(pairs)


init_doc()
# Under `panel serve` the query string is known while the app is built; give the worker the same.
set_location(location_json)  # noqa: F821 - set by worker.js
_t = time.perf_counter()
await prepare_page()  # noqa: F704, F821 - prelude.py made it
playground = build_page()  # noqa: F821 - prelude.py made it
timings["create_app"] = time.perf_counter() - _t  # noqa: F821 - prelude.py made it

_t = time.perf_counter()
_rendered = await write_doc()  # noqa: F704 - top-level await: run by pyodide.runPythonAsync
timings["write_doc"] = time.perf_counter() - _t  # noqa: F821 - prelude.py made it
_rendered  # noqa: B018 - the value of the last expression is what runPythonAsync returns to worker.js
