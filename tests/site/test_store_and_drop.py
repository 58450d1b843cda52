"""The page engineer's contract with site/ (issue 30): the worker's model store (`slmStore`, IndexedDB
"slm-models"), the portable file's embedded models, and files dropped on the page. CI-level: the fake NumPy stops
the app at `import numpy`, but the worker stays up, so its store and the page's drop target can be driven.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from conftest import Visit, serve

PORTABLE = "build/transformer-playground.html"
LOCAL = ("file:", "blob:", "data:")

# A model's bytes in the worker: [0, 1, ..., 255] * 3.
MODEL_BYTES = "Uint8Array.from({ length: 768 }, (_, i) => i % 256)"


def app_worker(visit: Visit) -> object:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for worker in visit.page.workers:
            app = worker.url.endswith("/worker.js") or worker.url.startswith("blob:")
            if app and worker.evaluate("typeof self.slmStore") == "object":
                return worker
        time.sleep(0.1)
    raise AssertionError(f"no app worker with a store: {[w.url for w in visit.page.workers]}")


def test_the_model_store_keeps_models_across_visits(browser: object, fake_vendored_site: tuple[Path, str]) -> None:
    """put/list/get/remove in the worker, as Python calls them; a model put on one visit is listed on the next."""
    with serve(fake_vendored_site[0]) as url, Visit(browser, url) as visit:
        visit.open()
        worker = app_worker(visit)
        assert worker.evaluate("slmStore.available()") is True
        before = time.time() * 1000
        worker.evaluate(f"slmStore.put('trained-1', {MODEL_BYTES}, 'my model')")
        listed = worker.evaluate("slmStore.list()")
        assert [(m["key"], m["name"], m["bytes"]) for m in listed] == [("trained-1", "my model", 768)], listed
        assert before - 1000 <= listed[0]["saved"] <= time.time() * 1000 + 1000
        assert worker.evaluate(f"slmStore.get('trained-1').then((b) => b instanceof Uint8Array && "
                               f"b.join() === {MODEL_BYTES}.join())") is True
        assert worker.evaluate("slmStore.get('no such model')") is None
        # Python writes a model in chunks (storage.py): the store joins them.
        worker.evaluate("slmStore.put('chunks', [Uint8Array.of(1, 2), new Uint8Array([9, 3, 4]).subarray(1)], 'c')")
        assert worker.evaluate("slmStore.get('chunks').then((b) => b.join())") == "1,2,3,4"
        worker.evaluate("slmStore.remove('chunks')")
        # Bytes of another type are refused by name.
        error = worker.evaluate("slmStore.put('x', 'not bytes', 'x').then(() => null, (e) => e.message)")
        assert "must be a Uint8Array" in error, error
        visit.reload()
        worker = app_worker(visit)
        assert [m["key"] for m in worker.evaluate("slmStore.list()")] == ["trained-1"]
        worker.evaluate("slmStore.remove('trained-1')")
        assert worker.evaluate("slmStore.list()") == []


# In the worker: a model of `mb` MB whose every byte is known (its index times 7, mod 251), kept, read back, checked.
LARGE_JS = """async (mb) => {
  const n = mb * 1e6;
  const bytes = new Uint8Array(n);
  for (let i = 0; i < n; i++) bytes[i] = (i * 7) % 251;
  const chunks = [bytes.subarray(0, 1000), bytes.subarray(1000)];  // as Python writes a model: in chunks
  const put = await slmStore.put("big", chunks, "big model").then(() => null, (e) => String(e));
  const listed = (await slmStore.list()).find((m) => m.key === "big");
  const back = await slmStore.get("big");
  let wrong = back ? back.length !== n : true;
  for (let i = 0; !wrong && i < n; i += 1) wrong = back[i] !== (i * 7) % 251;
  const partSizes = (await slmStore.getParts("big")).map((part) => part.byteLength);
  // The app's Python reads it a part at a time into one bytearray (py/playground/storage.py).
  const python = await sitePyodide.runPythonAsync(`
from playground import storage
data = await storage.store().get("big")
[len(data), all(data[i] == (i * 7) % 251 for i in range(0, len(data), 9973)), data[-1] == (len(data) - 1) * 7 % 251]
`);
  const fromPython = python.toJs();
  python.destroy();
  await slmStore.put("big", [Uint8Array.of(5, 6)], "big model");  // kept again under its name, smaller
  const small = (await slmStore.get("big")).join();
  await slmStore.remove("big");
  return { put, bytes: listed?.bytes, parts: listed?.parts, partSizes, wrong, fromPython, small,
           after: await slmStore.get("big") };
}"""


def test_a_model_over_chromiums_value_limit_is_kept_in_parts(browser: object,
                                                             fake_vendored_site: tuple[Path, str]) -> None:
    """Chromium's IndexedDB refuses a value over ~133 MB ("The serialized keys and/or value are too large"), and
    GPT-2 small is 500 MB: a model of 200 MB is kept in parts, read back byte for byte (in JS, and by the app's
    Python a part at a time), replaced by a smaller one of the same name, and removed with its parts."""
    with serve(fake_vendored_site[0]) as url, Visit(browser, url) as visit:
        visit.open()
        result = app_worker(visit).evaluate(LARGE_JS, 200)
    part = 64 * 2**20  # site/src/worker/store.js PART_BYTES
    assert result == {"put": None, "bytes": 200_000_000, "parts": 3, "partSizes": [part, part, 200_000_000 - 2 * part],
                      "wrong": False, "fromPython": [200_000_000, True, True], "small": "5,6", "after": None}, result


def portable_with_a_model(browser: object, site: Path, folder: Path) -> Path:
    """The hosted page's portable.js writes the file with one model from its store (as "Save for offline use"
    does with the worker's models)."""
    with serve(site) as url, Visit(browser, url) as visit:
        visit.open()
        html = visit.page.evaluate(f"""async () => {{
            const {{ assemble }} = await import("./portable.js");
            const manifest = await (await fetch("build/manifest.json")).json();
            const read = async (u) => new Uint8Array(await (await fetch(u)).arrayBuffer());
            const models = [{{ key: "trained-1", name: "my model", bytes: 768, saved: 1700000000000,
                               data: {MODEL_BYTES} }}];
            return assemble({{ manifest, read, models }});
        }}""")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "transformer-playground.html"
    path.write_text(html)
    return path


def test_the_portable_file_lists_the_models_it_was_saved_with(browser: object,
                                                              fake_vendored_site: tuple[Path, str],
                                                              tmp_path: Path) -> None:
    """In the portable file (an opaque origin) the store has no IndexedDB: available() is false, put() rejects
    with a readable Error, and list()/get() answer with the embedded models, checked by their sha256."""
    path = portable_with_a_model(browser, fake_vendored_site[0], tmp_path / "stick")
    index = json.loads(re.search(r'<script type="application/json">(.*?)</script>', path.read_text(), re.S).group(1))
    assert [(m["key"], m["bytes"]) for m in index["models"]] == [("trained-1", 768)]
    with Visit(browser, path.as_uri() + "?model=trained-1", allowed=LOCAL) as visit:
        visit.open("")
        assert "No module named 'numpy'" in visit.page.text_content("#error-detail"), visit.console
        worker = app_worker(visit)
        assert worker.evaluate("slmStore.available()") is False
        assert worker.evaluate("slmStore.list()") == [
            {"key": "trained-1", "name": "my model", "bytes": 768, "saved": 1700000000000}]
        assert worker.evaluate(f"slmStore.get('trained-1').then((b) => b.join() === {MODEL_BYTES}.join())") is True
        error = worker.evaluate(f"slmStore.put('k', {MODEL_BYTES}, 'k').then(() => null, (e) => e.message)")
        assert error and "cannot keep models" in error, error
        # The page's query string reaches the app, as for every portable start.
        assert "model=trained-1" in visit.page.evaluate("location.search")
        assert visit.external == []


def test_a_damaged_embedded_model_stops_on_the_error_panel(browser: object, fake_vendored_site: tuple[Path, str],
                                                           tmp_path: Path) -> None:
    path = portable_with_a_model(browser, fake_vendored_site[0], tmp_path / "stick")
    html = path.read_text()
    block = re.search(r'(<script type="application/octet-stream" id="model-0">)([^<]*)', html)
    damaged = block.group(2)[:-8] + ("AAAAAAAA" if not block.group(2).endswith("AAAAAAAA") else "BBBBBBBB")
    path.write_text(html.replace(block.group(0), block.group(1) + damaged))
    with Visit(browser, path.as_uri(), allowed=LOCAL) as visit:
        visit.open("")
        assert "the model my model" in visit.page.text_content("#error-what"), visit.console
        assert "damaged" in visit.page.text_content("#error-detail")


def test_the_store_says_why_where_indexeddb_is_refused(browser: object, fake_vendored_site: tuple[Path, str]) -> None:
    """IndexedDB that throws (a sandboxed frame, some private windows: SecurityError): available() is false, put()
    rejects with a readable Error, list() is empty, and nothing else fails."""
    with serve(fake_vendored_site[0]) as url, Visit(browser, url) as visit:
        visit.open()
        worker = app_worker(visit)
        worker.evaluate("""() => {
          indexedDB.open = () => { throw new DOMException("The user denied permission to access the database.",
                                                          "SecurityError"); };
        }""")
        assert worker.evaluate("slmStore.available()") is False
        error = worker.evaluate(f"slmStore.put('k', {MODEL_BYTES}, 'k').then(() => null, (e) => e.message)")
        assert error and "cannot keep models" in error and "denied permission" in error, error
        assert worker.evaluate("slmStore.list()") == []
        assert worker.evaluate("slmStore.get('k')") is None


# A drop of two files carried by a DataTransfer, as a drag from the desktop brings them.
DRAG_JS = """async (kind) => {
  const dt = new DataTransfer();
  dt.items.add(new File([new Uint8Array([1, 2, 3])], "config.json"));
  dt.items.add(new File([new Uint8Array(10)], "model.npz"));
  document.body.dispatchEvent(new DragEvent(kind, { dataTransfer: dt, bubbles: true, cancelable: true }));
  return document.body.dataset.drop || null;
}"""


def test_files_dragged_over_the_page_are_highlighted_and_held_until_ready(browser: object,
                                                                          fake_vendored_site: tuple[Path, str]) -> None:
    with serve(fake_vendored_site[0]) as url, Visit(browser, url) as visit:
        visit.open()  # the fake NumPy: the app never becomes ready
        assert visit.page.evaluate(DRAG_JS, "dragenter") == "over"
        visit.screenshot("ci-drop-highlight")
        assert visit.page.evaluate(DRAG_JS, "dragover") == "over"
        assert visit.page.evaluate(DRAG_JS, "drop") is None
        deadline = time.monotonic() + 10
        while not [c for c in visit.console if "2 dropped file(s) held until the app has started" in c]:
            assert time.monotonic() < deadline, visit.console
            visit.page.wait_for_timeout(100)  # Playwright delivers console events while it waits


def test_no_drop_highlight_for_a_drag_without_files(browser: object, fake_vendored_site: tuple[Path, str]) -> None:
    with serve(fake_vendored_site[0]) as url, Visit(browser, url) as visit:
        visit.open()
        shown = visit.page.evaluate("""() => {
          const dt = new DataTransfer();
          dt.setData("text/plain", "some words");
          document.body.dispatchEvent(new DragEvent("dragenter", { dataTransfer: dt, bubbles: true }));
          return document.body.dataset.drop || null;
        }""")
        assert shown is None



# ----------------------------------------------------------------------------------- with a real wasm NumPy


def test_dropped_files_reach_the_apps_inbox(browser: object, vendored_site: Path) -> None:
    """Once the app is ready, a drop reaches playground.inbox.deliver as [name, bytes] pairs: recorded here by a
    receiver subscribed in the worker's Python, which sees the names and the bytes as Python bytearrays (copied once
    into the wasm heap, where a loaded model keeps its weights)."""
    with serve(vendored_site) as url, Visit(browser, url) as visit:
        visit.open()
        assert visit.page.evaluate("document.body.dataset.ready") == "1", visit.console
        worker = app_worker(visit)
        worker.evaluate("""() => sitePyodide.runPython(`
from playground import inbox
got = []
async def _record(files):
    got.append(sorted((name, type(data).__name__, len(data)) for name, data in files.items()))
_receiver = inbox.subscribe(inbox.Receiver(_record))
`)""")
        visit.page.evaluate(DRAG_JS, "drop")
        got = None
        deadline = time.monotonic() + 30
        while not got:
            assert time.monotonic() < deadline, visit.console
            visit.page.wait_for_timeout(100)
            got = worker.evaluate("sitePyodide.globals.get('got').toJs()")
        assert got == [[["config.json", "bytearray", 3], ["model.npz", "bytearray", 10]]], got
        assert [c for c in visit.console if "2 dropped file(s) handed to" in c], visit.console


def test_save_for_offline_use_embeds_the_stored_models(browser: object, vendored_site: Path, tmp_path: Path) -> None:
    """A model put in the store before "Save for offline use" is in the saved file, and its store lists it."""
    with serve(vendored_site) as url, Visit(browser, url) as visit:
        visit.open()
        assert visit.page.evaluate("document.body.dataset.ready") == "1", visit.console
        app_worker(visit).evaluate(f"slmStore.put('trained-1', {MODEL_BYTES}, 'my model')")
        with visit.page.expect_download(timeout=120_000) as download:
            visit.page.get_by_role("button", name="Save for offline use").click()
        saved = tmp_path / "saved" / download.value.suggested_filename
        download.value.save_as(saved)
    with Visit(browser, saved.as_uri(), allowed=LOCAL) as visit:
        visit.open("")
        assert visit.page.evaluate("document.body.dataset.ready") == "1", visit.console
        worker = app_worker(visit)
        assert [m["key"] for m in worker.evaluate("slmStore.list()")] == ["trained-1"]
        assert worker.evaluate("slmStore.available()") is False
