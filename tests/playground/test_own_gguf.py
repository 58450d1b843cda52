"""A GGUF file in the playground (CPython): dropped or picked, as the site hands files over (a bytearray), it opens as
a model in every view, named by its metadata, is kept in the page's storage and comes back after a reload."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import slm
from playground import library
from playground.app import VIEW_CLASSES, Playground
from playground.state import PlaygroundState

pytest.importorskip("gguf")
pytest.importorskip("transformers")


def run(coroutine: object) -> object:
    """asyncio.run in a thread of its own: after a Playwright test the session's thread has a running loop."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def test_a_dropped_gguf_opens_in_every_view_and_is_kept(tmp_path):
    from gguf import GGMLQuantizationType as Q

    from playground import models, storage
    from testkit import gguf_files

    sp = gguf_files.sentencepiece_model()
    reference = gguf_files.make_llama()
    held = gguf_files.write_gguf(tmp_path / "tiny.gguf", reference, gguf_files.sentencepiece_vocab(sp), Q.Q8_0)
    data = (tmp_path / "tiny.gguf").read_bytes()
    handed = {"models/tiny.gguf": bytearray(data)}
    storage._STORE = shop = storage.MemoryStore()
    try:
        page = Playground(PlaygroundState(model_name="lesson"))
        run(page.shelf.receive(handed))
        state = page.state
        assert state.model_name == "loaded: tiny-llama", page.shelf.status  # general.name
        assert "a reload keeps it" in page.shelf.status and handed == {}
        model = state.model
        assert "GGUF llama" in model.meta["source"] and "Q8_0" in model.meta["source"]
        state.prompt = "Once upon a time, Lily saw a dog."
        assert state.tokens.ids[-3:] == sp.encode(state.prompt)[-3:]
        dequantized = gguf_files.with_weights(reference, held)
        np.testing.assert_allclose(state.trace.logits, gguf_files.logits(dequantized, state.tokens.ids), atol=1e-4)
        for view in VIEW_CLASSES:
            state.view = view  # each view is built and drawn for this model
        run(state.generate())
        assert state.generated and isinstance(state.continuation_text(), str)
        # kept as an .npz of the float32 weights: the same model after a reload
        again = slm.Model.load(shop.items[state.model_name][0], in_place=True)
        for key, value in model.params.items():
            np.testing.assert_array_equal(again.params[key], value)
        assert again.tokenizer.encode(state.prompt).ids == model.tokenizer.encode(state.prompt).ids
    finally:
        storage._STORE = None
        models.REGISTRY.clear()


def test_a_gguf_that_is_not_a_model_is_refused_by_name():
    with pytest.raises(library.LoadError, match="broken.gguf: .*not a readable GGUF file"):
        library.load_files({"broken.gguf": b"GGUF" + bytes(20)})
