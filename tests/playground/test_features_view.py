"""The Features view without a browser: train a short SAE on the shipped model in chunks, browse a feature, see the
prompt's features, steer, keep the SAE with its model, open it again from its file."""

from __future__ import annotations

import asyncio
import io
import zipfile

import numpy as np
import pytest
from test_state import run

import slm
import slm.sae as S
from playground import sae_lab, storage
from playground.library import Shelf
from playground.models import END, REGISTRY
from playground.state import PlaygroundState
from playground.views import features
from slm.train.lab import Lab

STEPS = 30


@pytest.fixture
def view() -> features.FeaturesView:
    storage._STORE = storage.MemoryStore()  # this test's store: nothing kept by another test
    state = PlaygroundState(model_name="shipped", prompt="the cats near the dog ( in the barn ) were")
    v = features.FeaturesView(features.FeaturesSettings(state, steps=STEPS))
    v.catch_up()
    return v


def trained(view: features.FeaturesView) -> features.FeaturesView:
    run(view.train())
    return view


def test_before_start_the_view_says_how_long_start_will_take(view):
    assert "Not started. Start will take about" in view.status.object
    assert view.hook.value == "blocks.0.hook_resid_post" and view.hook.options == [
        "blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]
    assert not view.results.visible and view.download.disabled


def test_a_short_run_trains_indexes_and_shows_every_part(view):
    trained(view)
    run_ = view.run
    assert run_.trainer.t == STEPS and run_.index is not None and view.sae is not None
    assert view.results.visible and not view.download.disabled
    assert view.status.object.count("Done: 30 steps") == 1, view.status.object
    # the live curve has one point per step; the histogram counts every live feature
    assert view.curve_source.data["step"] == list(range(1, STEPS + 1))
    live = int((run_.index.density > 0).sum())
    assert sum(view.hist_source.data["count"]) == live > 0
    # the list: live features, most frequent first; the link's feature (0) shown, as it fired
    order = list(view.feature_list.options.values())
    assert run_.index.fired[0] > 0 and view.settings.feature == 0
    assert np.all(np.diff(run_.index.density[order]) <= 0) and len(order) == min(live, features.LIST_SIZE)
    assert "Feature #0</h4>" in view.page.object and "<mark>" in view.page.object
    # sorting by mean activation reorders the list
    view.settings.sort = "mean"
    means = run_.index.mean_activation[list(view.feature_list.options.values())]
    assert np.all(np.diff(means) <= 0)
    # choosing a feature in the list shows its page
    other = list(view.feature_list.options.values())[3]
    view.feature_list.value = other
    assert view.settings.feature == other and f"Feature #{other}</h4>" in view.page.object


def test_the_feature_page_marks_the_token_it_fired_on_and_names_the_logit_effect(view):
    trained(view)
    f = view.settings.feature
    contexts = view.run.index.top_contexts(f, 8, before=6, after=2)
    vocab = view.state.tokenizer.vocab
    top = contexts[0]
    assert f"<mark>{vocab[top.tokens[top.at]]}</mark>" in view.page.object
    promoted, suppressed = S.logit_effect(view.sae, view.state.model, f, 8)
    page = view.page.object
    assert page.index(f"<b>{vocab[promoted[0][0]]}</b>") < page.index("suppresses")
    assert f"<b>{vocab[suppressed[0][0]]}</b>" in page.split("suppresses")[1]


def test_the_selected_token_lists_the_features_that_fire_there(view):
    trained(view)
    state = view.state
    state.position = 2  # "cats"
    acts = S.prompt_features(view.sae, state.model, state.tokens.ids)[2]
    expected = [f for f, _ in S.firing(acts, 12)]
    assert list(view.at_token.options.values()) == expected and expected
    assert "“cats” (position 2)" in view.prompt_note.object
    view.at_token.value = expected[-1]
    assert view.settings.feature == expected[-1]


def test_steering_adds_the_direction_and_the_unsteered_text_is_plain_generation(view):
    trained(view)
    state = view.state
    state.temperature = 0.0
    view.settings.alpha = 0.0  # α = 0: both texts are the same
    run(view.steer())
    same = view.steered.object.split("pg-steered'>")[1].split("</span>")[0]
    assert same == view.unsteered.object.split("pg-unsteered'>")[1].split("</span>")[0] and same
    end = state.tokenizer.index.get(END)
    plain = [s.token for s in slm.generate(state.model, state.tokens.ids, state.max_new_tokens, temperature=0.0,
                                           seed=state.seed, stop_ids=() if end is None else (end,))]
    assert same == state.tokenizer.decode(plain)
    assert view.steer_rate > 0 and not view.steering
    view.settings.alpha = 60.0  # a strong push changes the greedy text
    run(view.steer())
    steered = view.steered.object.split("pg-steered'>")[1].split("</span>")[0]
    assert steered != view.unsteered.object.split("pg-unsteered'>")[1].split("</span>")[0]


def test_stop_during_training_keeps_the_sae_so_far(view):
    view.settings.steps = 400

    async def scenario() -> None:
        task = asyncio.ensure_future(view.train())
        while view.run is None or view.run.trainer is None or view.run.trainer.t < 5:
            await asyncio.sleep(0.01)
        view.stop_work()
        await task

    run(scenario())
    assert 5 <= view.run.trainer.t < 400 and view.sae is not None and view.results.visible


def test_the_sae_is_kept_with_its_model_and_comes_back_after_a_reload(view):
    trained(view)
    key = sae_lab.store_key("shipped")
    kept = storage._STORE.items[key][0]
    assert "a reload keeps it" in view.kept.object
    # a new page (same store): the view finds the kept SAE for the model shown and indexes it
    state = PlaygroundState(model_name="shipped", prompt="the cat")
    again = features.FeaturesView(features.FeaturesSettings(state))

    async def settle() -> None:
        again.catch_up()  # shown: it looks in the store
        for _ in range(500):
            if again.sae is not None:
                return
            await asyncio.sleep(0.01)

    run(settle())
    assert again.sae is not None and np.array_equal(again.sae.W_dec, view.sae.W_dec)
    assert "kept in this browser" in again.kept.object
    # restoring the page's models passes over the SAE's entry (it is not a model)
    shelf = Shelf(state)
    run(shelf.restore())
    assert key not in state.param.model_name.objects and "could not be read" not in shelf.status
    # the download is the same file, SAELens's two files in a zip
    with zipfile.ZipFile(io.BytesIO(view._zip().getvalue())) as zf:
        assert sorted(zf.namelist()) == ["cfg.json", "sae_weights.safetensors"]
    assert view._zip().getvalue() == kept


def test_an_uploaded_sae_opens_and_one_for_another_model_is_refused(view):
    trained(view)
    files = S.to_files(view.sae)
    storage._STORE = storage.MemoryStore()
    state = PlaygroundState(model_name="shipped")
    other = features.FeaturesView(features.FeaturesSettings(state))

    async def settle() -> None:
        other.catch_up()
        other.upload.param.update(value=list(files.values()), filename=list(files))
        for _ in range(500):
            if other.sae is not None and sae_lab.store_key("shipped") in storage._STORE.items:
                return
            await asyncio.sleep(0.01)

    run(settle())
    assert other.sae is not None and np.array_equal(other.sae.W_enc, view.sae.W_enc)
    state.model_name = "lesson"  # d_model differs
    other.upload.param.update(value=[sae_lab.sae_bytes(view.sae)], filename=["sae.zip"])
    assert "Not opened" in other.status.object and "64" in other.status.object


def test_a_model_without_the_grammar_trains_on_its_own_samples():
    cfg = slm.Config(n_layers=2, n_heads=2, n_model=16, n_ctx=16, n_vocab=40)
    model = slm.Model.init(cfg, seed=0)
    run_ = sae_lab.SaeRun(model, "quick", steps=5)
    assert not run_.grammar
    phases = [p.phase for p in run_.work()]
    assert phases[0] == "corpus" and phases[-1] == "done" and "train" in phases
    assert run_.index.rows == 96 * 16 and run_.sae.hook_name == "blocks.0.hook_resid_post"
    estimate = sae_lab.estimate_seconds(model, "quick", 5)
    assert estimate["corpus"] > 0 and estimate["total"] == pytest.approx(sum(
        estimate[k] for k in ("corpus", "gather", "train", "index")))
    assert sae_lab.estimate_text({"corpus": 100.0, "gather": 0.5, "train": 3000.0, "index": 2.0, "total": 3102.5}) \
        == "Start will take about 52 min on this model (corpus 2 min, train 50 min, index 2 s)."


def test_another_model_hides_the_sae_and_coming_back_shows_it_again(view):
    trained(view)
    sae = view.sae
    state = view.state

    async def scenario() -> None:
        state.model_name = "lesson"  # the shown view follows the model at once
        assert view.sae is None and not view.results.visible and "Not started" in view.status.object
        state.model_name = "shipped"
        for _ in range(500):
            if view.sae is not None:
                return
            await asyncio.sleep(0.01)

    run(scenario())
    assert view.sae is sae and view.results.visible
    assert "trained or opened in this page" in view.kept.object


def test_an_sae_of_the_lesson_model_is_not_kept_under_its_name():
    storage._STORE = storage.MemoryStore()
    state = PlaygroundState(model_name="lesson", prompt="the cat was tired")
    v = features.FeaturesView(features.FeaturesSettings(state, steps=5))
    v.catch_up()
    run(v.train())
    assert v.sae is not None and storage._STORE.items == {}
    assert "lasts until the page closes" in v.kept.object


def test_a_lab_models_sae_trains_on_the_grammar_is_read_and_steered_and_comes_back_with_the_model():
    """The Train view's path: a short lab run on the grammar, the model kept in the page's storage ("Explore this
    model"); its SAE trains on the grammar's documents, its features are read and steered, and after a reload the
    model and its SAE both come back from the storage."""
    storage._STORE = storage.MemoryStore()
    lab = Lab("grammar", {"steps": 20})
    lab.step(20)
    state = PlaygroundState(model_name="shipped", prompt="the cats near the dog")
    name = state.add_model(lab.model(), "trained")
    try:
        run(Shelf(state).keep(name, state.model, "kept"))
        v = features.FeaturesView(features.FeaturesSettings(state, steps=STEPS))
        v.catch_up()
        assert "Start will take about" in v.status.object and len(v.hook.options) == lab.settings.layers
        run(v.train())
        assert v.run.grammar and v.run.trainer.t == STEPS, "the grammar's documents, not the model's samples"
        assert v.sae.d_in == lab.settings.d_model and v.results.visible and "<mark>" in v.page.object
        assert f"Feature #{v.settings.feature}</h4>" in v.page.object and v.feature_list.options
        state.temperature, v.settings.alpha = 0.0, 0.0
        run(v.steer())
        end = state.tokenizer.index.get(END)
        plain = [s.token for s in slm.generate(state.model, state.tokens.ids, state.max_new_tokens, temperature=0.0,
                                               seed=state.seed, stop_ids=() if end is None else (end,))]
        assert v.steered.object.split("pg-steered'>")[1].split("</span>")[0] == state.tokenizer.decode(plain)
        assert sae_lab.store_key(name) in storage._STORE.items and "a reload keeps it" in v.kept.object
        # a reload: the model comes back from the storage, then its SAE with it
        del REGISTRY[name]
        again = PlaygroundState(model_name="shipped", prompt="the cat")
        run(Shelf(again).restore(wanted=name))
        assert again.model_name == name and again.model is not state.model
        w = features.FeaturesView(features.FeaturesSettings(again))

        async def settle() -> None:
            w.catch_up()
            for _ in range(500):
                if w.sae is not None:
                    return
                await asyncio.sleep(0.01)

        run(settle())
        assert w.sae is not None and np.array_equal(w.sae.W_dec, v.sae.W_dec) and "kept in this" in w.kept.object
    finally:
        REGISTRY.pop(name, None)


def test_the_sae_a_single_file_was_saved_with_opens_with_its_model():
    """The single file's store keeps nothing (available() is false) and answers with the entries it was saved with:
    an SAE among them opens with its model, and the view says where it came from."""

    class FileStore(storage.MemoryStore):
        async def available(self) -> bool:
            return False

    sae = S.SAE.init(64, 32, "topk", k=4, hook_name="blocks.0.hook_resid_post", seed=1)
    storage._STORE = FileStore()
    storage._STORE.items[sae_lab.store_key("shipped")] = (sae_lab.sae_bytes(sae), sae_lab.store_key("shipped"))
    v = features.FeaturesView(features.FeaturesSettings(PlaygroundState(model_name="shipped", prompt="the cat")))

    async def settle() -> None:
        v.catch_up()
        for _ in range(500):
            if v.sae is not None:
                return
            await asyncio.sleep(0.01)

    run(settle())
    assert v.sae is not None and np.array_equal(v.sae.W_enc, sae.W_enc) and v.results.visible
    assert "SAE, saved in this file." in v.kept.object
