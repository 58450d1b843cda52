"""Own models in the playground (CPython): GPT-2, Llama and GPT-NeoX checkpoints made here by `transformers` and a BPE
tokenizer trained by `tokenizers`, loaded as the page loads files, then every view, generation and patching on
them; a large-vocabulary model whose prompt pass unembeds only the rows the views read; files that are refused."""

from __future__ import annotations

import asyncio
import io
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import slm
from playground import library
from playground.app import VIEW_CLASSES, Playground
from playground.models import Vocabulary
from playground.state import LARGE_VOCAB, PlaygroundState
from slm import bpe
from slm.tokenizer import CharTokenizer

torch = pytest.importorskip("torch")


def run(coroutine: object) -> object:
    """asyncio.run in a thread of its own: after a Playwright test the session's thread has a running loop."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()

transformers = pytest.importorskip("transformers")


def checkpoint_files(kind: str, tmp_path: Path) -> dict[str, bytes]:
    from testkit.trained_tokenizers import gpt2_style, llama_style

    torch.manual_seed(0)
    if kind == "gpt2":
        tokenizer = gpt2_style(vocab_size=300)
        cfg = transformers.GPT2Config(vocab_size=tokenizer.get_vocab_size(), n_embd=32, n_layer=2, n_head=4,
                                      n_positions=64, bos_token_id=0, eos_token_id=0)
        model = transformers.GPT2LMHeadModel(cfg)
    elif kind == "neox":  # Pythia's layout: parallel attention and MLP, RoPE on a quarter of each head
        tokenizer = gpt2_style(vocab_size=300)
        cfg = transformers.GPTNeoXConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64,
                                         rotary_pct=0.25, bos_token_id=0, eos_token_id=0)
        model = transformers.GPTNeoXForCausalLM(cfg)
    else:
        tokenizer = llama_style(legacy=True, vocab_size=300)
        cfg = transformers.LlamaConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=32, intermediate_size=48,
                                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                       max_position_embeddings=64, bos_token_id=1, eos_token_id=2)
        model = transformers.LlamaForCausalLM(cfg)
    folder = tmp_path / kind
    model.eval().save_pretrained(folder)
    tokenizer.save(str(folder / "tokenizer.json"))
    return {f"{kind}/{p.name}": p.read_bytes() for p in folder.iterdir() if p.is_file()}, model, tokenizer


@pytest.mark.parametrize("kind", ["gpt2", "llama", "neox"])
def test_a_checkpoint_works_in_every_view(kind, tmp_path):
    files, reference, tokenizer = checkpoint_files(kind, tmp_path)
    model = library.load_files(files)
    app = Playground(PlaygroundState(model_name="lesson", view="map"))
    state = app.state
    name = state.add_model(model, "loaded")
    assert name == f"loaded: {kind}" and state.model is model
    state.prompt = "Once upon a time, Lily saw a dog."
    # the prompt's tokens are the tokenizer's own, shown readably
    expected = tokenizer.encode(state.prompt).ids
    assert state.tokens.ids[-len(expected):] == expected
    assert "Ġ" not in "".join(state.tokens.labels) and "▁" not in "".join(state.tokens.labels)
    # the trace's logits are the checkpoint's logits
    with torch.no_grad():
        hf = reference(torch.tensor([state.tokens.ids])).logits[0].numpy()
    np.testing.assert_allclose(state.trace.logits, hf, atol=1e-4)
    for view in VIEW_CLASSES:
        state.view = view  # each view is built and drawn for this model
    state.param.update(layer=1, head=3, position=2)
    state.ablate = "L1.H1"
    assert app.views["next"].source.data["token"]
    run(state.generate())
    assert len(state.generated) == state.max_new_tokens or state.generated
    text = state.continuation_text()
    assert isinstance(text, str) and text
    # patching with tokens typed as words: found as one token each (" dog" for "dog"), or named when they are not
    vocab = state.tokenizer
    ids = state.tokens.ids
    word = vocab.vocab[ids[2]].strip() or vocab.vocab[ids[2]]
    state.view = "patching"
    app.settings["patching"].param.update(patch_position=2, patch_token=word, good_token=word, bad_token="zzzzqq")
    summary = app.views["patching"].summary.object
    assert "second metric token “zzzzqq” is not in this model" in summary and "cats" not in summary


def test_a_large_vocabulary_unembeds_only_the_rows_the_views_read():
    chars = [chr(0x4E00 + i) for i in range(LARGE_VOCAB + 500)]
    tokenizer = CharTokenizer(chars)
    cfg = slm.Config(n_vocab=len(chars), n_ctx=32, n_model=16, n_heads=2, n_layers=2, positions="rope", norm="rms",
                     activation="swiglu")
    model = slm.Model(cfg, slm.init_params(cfg, seed=0, dtype=np.float32), {"name": "wide"}, tokenizer)
    app = Playground(PlaygroundState(model_name="lesson", view="next"))
    state = app.state
    state.add_model(model, "loaded")
    state.prompt = "".join(chars[:10])
    assert state.trace.output_positions.tolist() == [9]  # the last row: the one selected by default
    full = model.forward(np.asarray(state.tokens.ids))
    np.testing.assert_allclose(state.trace.probs[0], full.probs[9], atol=1e-6)
    state.position = 3  # another row: the pass runs again with its logits
    assert 3 in state.trace.output_positions.tolist()
    assert app.views["next"].source.data["token"][-1] == chars[int(np.argmax(full.probs[3]))]
    for view in VIEW_CLASSES:
        state.view = view


def test_files_that_are_not_a_model_are_refused_by_name(tmp_path):
    with pytest.raises(library.LoadError, match="notes.txt"):
        library.load_files({"notes.txt": b"hello"})
    with pytest.raises(library.LoadError, match="more than this page can hold"):
        library.load_files({"huge.npz": memoryview(np.zeros(library.MAX_BYTES + 1, np.uint8))})  # pages untouched
    cfg = slm.Config(n_vocab=4, n_ctx=8, n_model=8, n_heads=2)
    params = slm.init_params(cfg, seed=0, dtype=np.float32)
    params["tok_emb"][0, 0] = np.nan
    path = tmp_path / "nan.npz"
    slm.Model(cfg, params, {}, CharTokenizer(list("abcd"))).save(path)
    with pytest.raises(library.LoadError, match="nan.npz: the weight tok_emb holds NaN"):
        library.load_files({"nan.npz": path.read_bytes()})
    bare = tmp_path / "bare.npz"
    slm.Model(cfg, slm.init_params(cfg, seed=0, dtype=np.float32)).save(bare)
    with pytest.raises(library.LoadError, match="bare.npz: the model has no tokenizer"):
        library.load_files({"bare.npz": bare.read_bytes()})


def test_a_stored_model_comes_back_after_a_reload():
    """The shelf keeps a trained model in the page's store; a new page (a new playground) restores it, and the
    URL's model= shows it."""
    from playground import models, storage

    shop = storage.MemoryStore()
    storage._STORE = shop
    try:
        cfg = slm.Config(n_vocab=5, n_ctx=8, n_model=8, n_heads=2)
        model = slm.Model(cfg, slm.init_params(cfg, seed=1, dtype=np.float32), {"name": "kept"},
                          CharTokenizer(list("abcde")))
        first = Playground(PlaygroundState(model_name="lesson"))
        name = first.state.add_model(model, "trained")
        run(first.shelf.keep(name, model, "done."))
        assert "a reload keeps it" in first.shelf.status
        models.REGISTRY.pop(name)  # a new page: the registry starts empty
        second = Playground(PlaygroundState(model_name="lesson"))
        second._wanted_model = name
        run(second.restore_models())
        assert second.state.model_name == name
        np.testing.assert_array_equal(second.state.model.params["tok_emb"], model.params["tok_emb"])
    finally:
        storage._STORE = None
        models.REGISTRY.clear()


def test_a_link_to_a_kept_model_is_read_before_the_page_is_built():
    """restore_linked (what the site awaits before create_app): the first state built from the link is already on
    the kept model, never on the default one first; a name the store lacks, or a damaged entry, leaves the default
    model (Shelf.restore reports it after 'ready')."""
    from playground import models, storage

    storage._STORE = shop = storage.MemoryStore()
    try:
        cfg = slm.Config(n_vocab=5, n_ctx=8, n_model=8, n_heads=2)
        model = slm.Model(cfg, slm.init_params(cfg, seed=2, dtype=np.float32), {"name": "kept"},
                          CharTokenizer(list("abcde")))
        buffer = io.BytesIO()
        model.save(buffer, compress=False)
        run(shop.put("loaded: kept", buffer.getvalue(), "loaded: kept"))
        run(shop.put("loaded: broken", b"not an npz", "loaded: broken"))

        run(library.restore_linked("loaded: kept"))
        state = PlaygroundState()
        state.apply_url_values({"model_name": "loaded: kept"})
        assert state.model_name == "loaded: kept" and state.requested_model is None
        np.testing.assert_array_equal(state.model.params["tok_emb"], model.params["tok_emb"])

        for missing in ("loaded: broken", "loaded: never kept"):
            run(library.restore_linked(missing))
            assert missing not in models.REGISTRY
            state = PlaygroundState()
            state.apply_url_values({"model_name": missing})
            assert state.model_name == models.default_model_name() and state.requested_model == missing
    finally:
        storage._STORE = None
        models.REGISTRY.clear()


def test_a_dropped_checkpoint_stays_in_its_buffers_and_is_kept_in_chunks(tmp_path):
    """The site hands a drop over as bytearrays: the model's weights stay in them (one copy of the weights in the
    page's memory, issue 33). The kept .npz, written in chunks as the browser's store takes them, loads back."""
    from playground import models, storage

    files, _, _ = checkpoint_files("llama", tmp_path)
    handed = {name: bytearray(data) for name, data in files.items()}
    weights = np.frombuffer(handed["llama/model.safetensors"], np.uint8)
    storage._STORE = shop = storage.MemoryStore()
    try:
        page = Playground(PlaygroundState(model_name="lesson"))
        run(page.shelf.receive(handed))
        assert "a reload keeps it" in page.shelf.status and handed == {}
        model = page.state.model
        assert np.shares_memory(model.params["tok_emb"], weights)
        assert np.shares_memory(model.params["blocks.1.ffn.w_out"], weights)  # transposed within its own bytes
        reference = library.load_files(files)
        chunks: list[bytes] = []
        model.save(storage.ChunkWriter(lambda view: chunks.append(bytes(view))), compress=False)
        assert len(chunks) > 10
        for data in (shop.items[page.state.model_name][0], bytearray(b"".join(chunks))):
            again = slm.Model.load(data, in_place=True)
            for key, value in reference.params.items():
                np.testing.assert_array_equal(again.params[key], value)
    finally:
        storage._STORE = None
        models.REGISTRY.clear()


def test_loaded_models_keep_the_names_the_page_has_always_given(tmp_path):
    """A dropped model's selector name is "loaded: " + a name read from the files: an .npz's own name, else its
    file name; a checkpoint's folder (dropped as files or zipped), else its architecture and size, whatever the
    zip file is called. Kept models are stored under that name, and a link's model=loaded: NAME shows it again."""
    import zipfile
    from urllib.parse import parse_qsl

    from playground import models, storage
    from playground.state import URL_PARAMS

    files, _, _ = checkpoint_files("llama", tmp_path)
    folder_zip, loose_zip = io.BytesIO(), io.BytesIO()
    with zipfile.ZipFile(folder_zip, "w") as z, zipfile.ZipFile(loose_zip, "w") as loose:
        for name, data in files.items():
            z.writestr(name, data)
            loose.writestr(name.split("/")[-1], data)
    cfg = slm.Config(n_vocab=4, n_ctx=8, n_model=8, n_heads=2)
    unnamed, named = io.BytesIO(), io.BytesIO()
    slm.Model(cfg, slm.init_params(cfg, seed=0, dtype=np.float32), {}, CharTokenizer(list("abcd"))).save(unnamed)
    slm.Model(cfg, slm.init_params(cfg, seed=0, dtype=np.float32), {"name": "kept"},
              CharTokenizer(list("abcd"))).save(named)
    drops = [(files, "loaded: llama"), ({"checkpoint.zip": folder_zip.getvalue()}, "loaded: llama"),
             ({"Checkpoint.ZIP": loose_zip.getvalue()}, "loaded: llama 2x4 d32"),
             ({"mine.npz": unnamed.getvalue()}, "loaded: mine"),
             ({"folder/mine.npz": unnamed.getvalue()}, "loaded: mine"),
             ({"other.npz": named.getvalue()}, "loaded: kept")]
    storage._STORE = shop = storage.MemoryStore()
    try:
        page = Playground(PlaygroundState(model_name="lesson"))
        for dropped, expected in drops:
            run(page.shelf.receive({name: bytearray(data) for name, data in dropped.items()}))
            assert page.state.model_name == expected, page.shelf.status
            assert expected in shop.items, page.shelf.status
            if expected == "loaded: llama 2x4 d32":
                assert "model=loaded%3A+llama+2x4+d32" in page.state.share_query()
            models.REGISTRY.pop(expected)
        # an old link opens the kept model on a new page
        by_key = {key: name for name, key in URL_PARAMS.items()}
        link = PlaygroundState(model_name="lesson")
        link.apply_url_values({by_key[k]: v for k, v in parse_qsl("view=map&model=loaded%3A+llama+2x4+d32")})
        second = Playground(link)
        run(second.restore_models())
        assert second.state.model_name == "loaded: llama 2x4 d32"
        assert second.state.model.tokenizer is not None
    finally:
        storage._STORE = None
        models.REGISTRY.clear()


def test_a_word_typed_without_its_space_is_the_llama_tokenizers_word_token():
    """The Patching view's fields take words as a learner types them: "girl" finds Llama's "▁girl" (shown " girl"),
    though its tokenizer adds <s> to every text it encodes. (Before, such words were refused as not one token.)"""
    from testkit.trained_tokenizers import llama_style

    trained = llama_style(legacy=True, vocab_size=2000)
    vocab = Vocabulary(bpe.from_tokenizer_json(trained.to_str()))
    ids = trained.encode("Once upon a time there was a little girl who saw a dog in the park").ids
    words = [i for i in dict.fromkeys(ids) if vocab.vocab[i].startswith(" ") and vocab.vocab[i].strip() not in
             vocab.index]
    assert len(words) >= 3, [vocab.vocab[i] for i in ids]
    for i in words:
        assert vocab.lookup(vocab.vocab[i].strip()) == i, vocab.vocab[i]
    assert vocab.lookup("qqqzzzx") is None


def test_patching_words_typed_without_a_space_take_the_prompts_spacing():
    """GPT-2's vocabulary holds both "the" and " the": a word typed into the Patching view's fields becomes the
    token of the prompt's spacing (" the" mid-sentence), not the space-less one the exact text would find first."""
    from playground import circuits
    from testkit.trained_tokenizers import gpt2_style

    vocab = Vocabulary(bpe.from_tokenizer_json(gpt2_style(vocab_size=2000).to_str()))
    both = [w for w in ("the", "a", "and", "was", "in", "to", "of", "he")
            if w in vocab.index and " " + w in vocab.index]
    assert len(both) >= 3, "the trained vocabulary should hold words with and without their space"
    word, other, metric = both[:3]
    assert vocab.lookup(word) == vocab.index[word] and vocab.lookup(word, spaced=True) == vocab.index[" " + word]

    cfg = slm.Config(n_vocab=len(vocab), n_ctx=32, n_model=16, n_heads=2, n_layers=1)
    model = slm.Model.init(cfg, seed=0, dtype=np.float32)
    ids = vocab.encode(f"{word} {other} {word} {other}").ids
    labels = [vocab.vocab[i] for i in ids]
    assert labels == [word, " " + other, " " + word, " " + other], labels
    run = circuits.patch_run(model, vocab, ids, labels, 2, metric, word, other, "clean")
    assert not run.error, run.error
    assert run.target_ids[2] == vocab.index[" " + metric]
    assert (run.good, run.bad) == (vocab.index[" " + word], vocab.index[" " + other])
