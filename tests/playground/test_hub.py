"""Models from the Hub by name (CPython: the shelf through urllib, against a local mirror with the Hub's URL layout;
never the real Hub), and the page's memory: the room asked for before weights are read, the refusal with the size
needed, one large model at a time, Remove letting go of every reference."""

from __future__ import annotations

import asyncio
import gc
import urllib.parse
import weakref
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import slm
from playground import hub, inbox, library, memory, models
from playground.app import VIEW_CLASSES, Playground, page_options
from playground.state import PlaygroundState

pytest.importorskip("transformers")
from testkit.hub_mirror import Mirror, gpt2_checkpoint, serving  # noqa: E402

REPO = "school/tiny-gpt2"


def run(coroutine: object) -> object:
    """asyncio.run in a thread of its own: after a Playwright test the session's thread has a running loop."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return gpt2_checkpoint(tmp_path_factory.mktemp("gpt2"))


@pytest.fixture
def page():
    playground = Playground(PlaygroundState(model_name="lesson", view="map"))
    yield playground
    models.REGISTRY.clear()
    memory.set_limit(None)


def test_a_reference_is_checked_and_has_the_hubs_url_layout():
    ref = hub.HubRef.parse("EleutherAI/pythia-70m", "refs/pr/1", "https://mirror.example.org/hf/")
    assert ref.url("config.json") == "https://mirror.example.org/hf/EleutherAI/pythia-70m/resolve/refs%2Fpr%2F1/config.json"
    assert ref.label == "EleutherAI/pythia-70m@refs/pr/1"
    # A pasted model page's address; the public Hub by default (its host is written in hub.py alone).
    assert hub.HubRef.parse(f"{hub.DEFAULT_HUB}/openai-community/gpt2/tree/main").repo == "openai-community/gpt2"
    assert hub.HubRef.parse("a/b").url("model.safetensors") == f"{hub.DEFAULT_HUB}/a/b/resolve/main/model.safetensors"
    for bad, said in ((("gpt2",), "owner/name"), (("a/../b",), "owner/name"), (("a/b", "x y"), "not a revision"),
                      (("a/b", "main", "ftp://x"), "not a Hub's address"),
                      (("a/b", "main", None, "pytorch_model.bin"), ".safetensors or .gguf")):
        with pytest.raises(ValueError, match=said):
            hub.HubRef.parse(*bad)


def test_progress_says_mb_mb_per_s_and_time_left():
    assert hub.progress_text("model.safetensors", 120_000_000, 548_000_000, 4.0) == (
        "model.safetensors: 120 of 548 MB · 30.0 MB/s · 14 s left")
    assert hub.progress_text("config.json", 0, None, 0.0) == "config.json: 0 MB"


def test_a_model_opens_by_name_from_a_mirror_with_a_redirect(page, checkpoint):
    mirror = Mirror({REPO: {"step3": checkpoint}})
    with serving(mirror):
        page_options(page, {"hf": REPO, "revision": "step3", "hub": mirror.url, "file": None, "memory": None})
        run(page.restore_models())
    shelf, state = page.shelf, page.state
    assert state.model_name == f"hub: {REPO}@step3", shelf.status
    assert "is now the model of every view" in shelf.status and shelf.progress == "" and not shelf.busy
    assert "its files were not kept: this Python keeps no cache" in shelf.status  # CPython: urllib, no cache
    assert state.model.meta["hub"] == {"repo": REPO, "revision": "step3", "hub": mirror.url, "file": None}
    assert f"/{REPO}/resolve/step3/model.safetensors" in mirror.requests
    assert any(p.startswith("/cdn/") for p in mirror.requests)  # the weights came through the redirect
    assert not any(p.endswith((".bin", ".pt", ".pth")) for p in mirror.requests)  # never a pickle
    reference = library.load_files(checkpoint)
    np.testing.assert_array_equal(state.model.params["tok_emb"], reference.params["tok_emb"])
    # A link to this state carries the model's source: another browser downloads it, this one opens its cache.
    query = dict(urllib.parse.parse_qsl(state.share_query()))
    assert {k: query.get(k) for k in ("hf", "revision", "hub", "file")} == {
        "hf": REPO, "revision": "step3", "hub": mirror.url, "file": None}


def test_files_the_page_has_no_memory_for_are_refused_with_a_message(page):
    assert inbox.refuse("3 file(s) needs 900 MB of memory to load, more than this tab can give.") == 1
    assert page.shelf.status == ("Not loaded: 3 file(s) needs 900 MB of memory to load, more than this tab can give. "
                                 "The model shown before is still loaded.")


@pytest.mark.parametrize("case, said", [
    ("gated", "is gated or private on http://127.0.0.1"),
    ("missing", "config.json is not in school/none at revision main"),
    ("no weights", "has no safetensors weights"),
    ("unreachable", "could not be reached for config.json"),
])
def test_each_failure_is_named_and_the_model_shown_stays(page, checkpoint, case, said):
    no_weights = {k: v for k, v in checkpoint.items() if not k.endswith(".safetensors")}
    mirror = Mirror({REPO: {"main": no_weights}}, gated=("school/gated",))
    with serving(mirror):
        base = mirror.url
        repo = {"gated": "school/gated", "missing": "school/none", "no weights": REPO}.get(case, REPO)
        if case == "unreachable":
            base = base.rsplit(":", 1)[0] + ":9"  # the discard port: nothing listens
        run(page.shelf.open_hub(repo, "main", base))
    assert said in page.shelf.status and "The model shown before is still loaded." in page.shelf.status
    assert page.state.model_name == "lesson" and not page.shelf.busy and not page.shelf.downloading


def test_cancel_stops_the_download(page, checkpoint):
    mirror = Mirror({REPO: {"main": checkpoint}}, delay=0.2)

    async def open_then_cancel() -> None:
        opening = asyncio.ensure_future(page.shelf.open_hub(REPO, "main", mirror.url))
        while "model.safetensors" not in page.shelf.progress:
            assert not opening.done(), page.shelf.status
            await asyncio.sleep(0.01)
        page.shelf.cancel()
        await asyncio.wait_for(opening, 30)

    with serving(mirror):
        run(open_then_cancel())
    assert page.shelf.status.startswith(f"Cancelled: {REPO} was not opened."), page.shelf.status
    assert page.state.model_name == "lesson" and models.REGISTRY == {}


def test_a_model_too_large_for_the_tab_is_refused_with_the_size_it_needs(page, checkpoint, monkeypatch):
    """The heap cannot grow (the allocation fails as wasm's memory.grow would): refused before the weights are
    read whole, with the size asked for; the model shown stays."""
    asked = []

    def refuse(size):
        asked.append(size)
        raise MemoryError

    monkeypatch.setattr(memory, "_reserve", refuse)
    mirror = Mirror({REPO: {"main": checkpoint}})
    with serving(mirror):
        run(page.shelf.open_hub(REPO, "main", mirror.url))
    size = len(checkpoint["model.safetensors"])
    assert asked == [size + memory.MARGIN]  # asked once the file's size was known
    assert f"needs {memory.mb(size + memory.MARGIN)} of memory to load" in page.shelf.status, page.shelf.status
    assert page.state.model_name == "lesson"


def test_the_memory_limit_counts_the_models_already_loaded(checkpoint):
    model = library.load_files(checkpoint)
    held = memory.in_use([model])
    assert held == sum(v.nbytes for v in model.params.values())
    try:
        memory.set_limit((held + memory.MARGIN + 1000) / 1e6)
        memory.make_room(memory.MARGIN, "a model")  # nothing held: fits
        with pytest.raises(memory.NoRoom, match=r"needs \d+ MB of memory to load.*at most \d+ MB"):
            memory.make_room(memory.MARGIN + 2000, "a model", [model])
    finally:
        memory.set_limit(None)


def test_what_a_load_needs_beyond_its_files():
    cfg = slm.Config(n_vocab=16, n_ctx=8, n_model=8, n_heads=2)
    import json
    header = json.dumps({"a": {"dtype": "BF16", "shape": [10, 8], "data_offsets": [0, 160]},
                         "b": {"dtype": "F32", "shape": [4], "data_offsets": [160, 176]},
                         "__metadata__": {"format": "pt"}}).encode()
    data = len(header).to_bytes(8, "little") + header + bytes(176)
    assert memory.load_needs({"model.safetensors": bytearray(data)}) == 4 * 80 + memory.MARGIN  # F32 stays
    assert memory.load_needs({"model.safetensors": data}) == 4 * 84 + memory.MARGIN  # bytes: copied
    assert cfg.n_vocab == 16


def test_a_second_large_model_replaces_the_first_and_remove_lets_go(page, checkpoint, monkeypatch):
    monkeypatch.setattr(memory, "LARGE", 1)  # every model is large here
    shelf, state = page.shelf, page.state
    run(shelf.receive(dict(checkpoint)))
    first = state.model_name
    first_model = weakref.ref(state.model)
    run(shelf.receive(dict(checkpoint)))
    second = state.model_name
    assert second != first and first not in models.REGISTRY, models.REGISTRY.keys()
    assert f"{first} left memory to make room" in shelf.status
    for name in VIEW_CLASSES:  # every view built on the model shown
        state.view = name
    gc.collect()
    assert first_model() is None
    second_model = weakref.ref(state.model)
    run(shelf.remove(second))
    state.view = "map"
    gc.collect()
    assert state.model_name != second and second_model() is None
