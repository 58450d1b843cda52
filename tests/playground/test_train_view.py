"""The Train view's loop without a browser: it trains in short chunks and steps aside when the page speaks."""

from __future__ import annotations

import asyncio

import panel as pn
from bokeh.document import Document
from bokeh.models import Div
from test_state import run

from playground.state import PlaygroundState
from playground.views import train


def test_training_pauses_while_the_page_lays_out_a_change_made_there():
    """A change the page sends (a patch applied with a setter, as the site's worker applies them) holds the next
    chunk back for GRACE seconds, so the page's layout is not slowed by training; then training goes on."""

    async def scenario() -> None:
        doc, div = Document(), Div(text="")
        doc.add_root(div)
        pn.state.curdoc = doc
        try:
            view = train.TrainView(train.TrainSettings(PlaygroundState(model_name="lesson"), task="repeat"))
            task = asyncio.ensure_future(view.start())
            while view.run is None or view.run.step_count < 3:
                await asyncio.sleep(0.01)
            doc.apply_json_patch({"events": [{"kind": "ModelChanged", "model": {"id": div.id}, "attr": "text",
                                             "new": "clicked"}]}, setter="page")
            await asyncio.sleep(0.05)  # the chunk under way when the change came ends (CHUNK < 0.05 s)
            held = view.run.step_count
            await asyncio.sleep(train.GRACE - 0.1)
            assert view.run.step_count == held, "a chunk ran while the page was laying out"
            for _ in range(1000):  # then it trains again (however loaded the machine)
                if view.run.step_count > held:
                    break
                await asyncio.sleep(0.01)
            assert view.run.step_count > held, "training did not go on after the grace"
            # Python's own changes (the charts' updates) do not hold it back
            div.text = "drawn"
            steps = view.run.step_count
            for _ in range(1000):
                if view.run.step_count > steps:
                    break
                await asyncio.sleep(0.01)
            assert view.run.step_count > steps
            view.running = False
            await task
        finally:
            pn.state.curdoc = None

    run(scenario())


def test_a_view_tab_hides_the_shown_view_before_it_shows_the_chosen_one():
    """Shown first, the page would lay out and paint the old view and the new one together (the Train view's six
    charts and the Model map, for a click on Model map)."""
    from playground.app import VIEW_CLASSES, Playground

    app = Playground(PlaygroundState(model_name="lesson", view="train"))
    app.build_hidden()
    changes: list[tuple[str, bool]] = []
    for name in VIEW_CLASSES:
        app.views[name].panel.param.watch(lambda e, name=name: changes.append((name, e.new)), "visible")
    app.state.view = "map"
    assert ("map", True) in changes and ("train", False) in changes, changes
    assert changes.index(("train", False)) < changes.index(("map", True)), changes
    assert [name for name in VIEW_CLASSES if app.views[name].panel.visible] == ["map"]


def test_a_task_brings_its_preset_except_what_the_learner_changed():
    from slm.train.tasks import PRESETS

    settings = train.TrainSettings(PlaygroundState(model_name="lesson"))
    assert settings.run_settings() == PRESETS["repeat"].to_dict()
    settings.steps = 77
    settings.task = "grammar"
    assert settings.run_settings() == PRESETS["grammar"].replace(steps=77).to_dict()
    settings.use_preset()  # "Use the task's preset"
    assert settings.run_settings() == PRESETS["grammar"].to_dict()
    # the link's keys for them, as presenters' links and the lab's tests write them
    assert set(train.TrainSettings.URL.values()) == {
        "task", "autostart", "train_layers", "train_heads", "train_d_model", "train_ctx", "train_steps",
        "train_batch", "train_lr", "train_seed"}
