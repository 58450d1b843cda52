"""The Heads and Patching views without a browser: what they draw equals slm.roles / a patched forward pass
computed here, on the lesson model and on the trained one."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import numpy as np
import pytest

import slm
from playground import circuits
from playground.app import Playground
from playground.state import PlaygroundState
from playground.views.heads import HeadsView, show_role
from playground.views.patching import PatchingSettings, PatchingView
from slm import roles

XSS = "<img src=x onerror=alert(1)>"


@pytest.fixture(params=["lesson", "shipped"])
def state(request) -> PlaygroundState:
    return PlaygroundState(model_name=request.param)


def test_heads_view_draws_the_role_scores_of_the_prompt(state):
    state.prompt = "the cat was tired the cat was" if state.model_name == "lesson" else \
        "the dog ( near the cats [ the old one ] ) chased the ball because it rolled . the dog"
    view = HeadsView(state)
    cfg, labels = state.model.cfg, state.tokens.labels
    expected = roles.role_scores(state.trace, labels, circuits.noun_numbers(state.model))
    data = view.prompt_source.data
    assert len(data["score"]) == len(roles.ROLES) * cfg.n_layers * cfg.n_heads
    for role, layer, head, score in zip(data["role"], data["layer"], data["x"], data["score"], strict=True):
        want = expected[role].scores[layer, head] if expected[role].n else np.nan
        np.testing.assert_equal(score, want)
    # a previous-token score by hand for one head: the mean weight on the token just before
    att = state.trace.layers[cfg.n_layers - 1].attention[cfg.n_heads - 1]
    by_hand = np.mean([att[t, t - 1] for t in range(1, len(labels))])
    i = [k for k, (r, la, h) in enumerate(zip(data["role"], data["layer"], data["x"], strict=True))
         if (r, la, h) == ("previous_token", cfg.n_layers - 1, cfg.n_heads - 1)][0]
    assert data["score"][i] == pytest.approx(by_hand, abs=1e-12)


def test_probe_scores_are_the_mean_over_the_probe_prompts(state):
    probes = circuits.probe_prompts(state.model, state.tokenizer)
    ids = probes["induction"]
    assert ids and all(len(p) <= state.model.cfg.n_ctx for p in ids)
    per = []
    for p in ids:  # R + R after <start>: the classic offset t -> t - |R| + 1 over the second copy
        n = (len(p) - 1) // 2
        att = state.model.forward(np.asarray(p)).attention
        per.append([att[:, :, t, t - n + 1] for t in range(1 + n, 1 + 2 * n)])
    by_hand = np.mean([row for rows in per for row in rows], axis=0)
    scores = circuits.probe_scores(state.model, state.tokenizer)
    np.testing.assert_allclose(scores["induction"].scores, by_hand, atol=1e-12)
    if state.model_name == "lesson":  # no sentences saved with the lesson model's weights
        assert scores["pronoun"].n == 0 and scores["bracket"].n == 0


def test_cell_at_inverts_the_layout():
    for n_layers, n_heads in ((1, 2), (2, 8), (3, 4)):
        data = circuits.score_columns({r: roles.RoleScore(np.zeros((n_layers, n_heads)), 1) for r in roles.ROLES},
                                      n_layers, n_heads)
        for x, y, role, layer in zip(data["x"], data["y"], data["role"], data["layer"], strict=True):
            assert circuits.cell_at(x + 0.3, y - 0.4, n_layers, n_heads) == (role, layer, x)
        assert circuits.cell_at(-1, 0, n_layers, n_heads) is None
        assert circuits.cell_at(0, n_layers, n_layers, n_heads) is None  # the gap row between two roles


def test_show_me_selects_the_strongest_head_on_a_prompt_with_the_role(state):
    show_role(state, "induction")
    best = roles.strongest(circuits.probe_scores(state.model, state.tokenizer)["induction"])
    assert (state.layer, state.head) == best and state.view == "attention"
    targets = dict(roles.induction_targets(state.tokens.labels))
    assert targets.get(state.position), "the selected row has an induction target"


def test_tapping_a_heads_cell_selects_the_head(state):
    view = HeadsView(state)
    cfg = state.model.cfg
    y = len(roles.ROLES) - 1  # some row inside the first role's block or after
    role, layer, head = circuits.cell_at(cfg.n_heads - 1, min(y, cfg.n_layers - 1), cfg.n_layers, cfg.n_heads)
    view._on_tap(SimpleNamespace(x=cfg.n_heads - 1, y=min(y, cfg.n_layers - 1)))
    assert (state.layer, state.head) == (layer, head)


def _patch_by_hand(model, target, source, site, good, bad):
    """One forward pass of `target` with one activation of `source`'s run put in by a hook written here."""
    src = model.forward(np.asarray(source))
    if site[0] == "resid":
        rows = src.x if site[1] == 0 else src.layers[site[1] - 1].y

        def hook(x, _):
            x = x.copy()
            x[site[2]] = rows[site[2]]
            return x
        trace = model.forward(np.asarray(target), fwd_hooks=[(f"blocks.{site[1]}.hook_resid_pre", hook)])
    else:
        def hook(out, _):  # (T, H, d): the trace's head_out is (H, T, d)
            out = out.copy()
            out[:, site[2]] = src.layers[site[1]].head_out[site[2]]
            return out
        trace = model.forward(np.asarray(target), fwd_hooks=[(f"blocks.{site[1]}.attn.hook_result", hook)])
    return trace.logits[-1, good] - trace.logits[-1, bad]


@pytest.mark.parametrize("patch_from", ["clean", "corrupted"])
def test_patching_view_draws_the_patched_metric(state, patch_from):
    state.view = "patching"
    settings = PatchingSettings(state)
    view = PatchingView(settings)
    settings.load_example()
    settings.patch_from = patch_from
    run = view.run
    assert not run.error
    index = state.tokenizer.index
    clean = list(state.tokens.ids)
    corrupted = list(clean)
    corrupted[settings.patch_position] = index[settings.patch_token]
    target, source = (corrupted, clean) if patch_from == "clean" else (clean, corrupted)
    good, bad = index[settings.good_token], index[settings.bad_token]
    data = view.resid_source.data
    for x, y, metric in zip(data["x"], data["y"], data["metric"], strict=True):
        assert metric == pytest.approx(_patch_by_hand(state.model, target, source, ("resid", y, x), good, bad),
                                       abs=1e-9)
    data = view.head_source.data
    for x, y, metric in zip(data["x"], data["y"], data["metric"], strict=True):
        assert metric == pytest.approx(_patch_by_hand(state.model, target, source, ("head", y, x), good, bad),
                                       abs=1e-9)
    # click a cell: the detail names the patched run; "show" puts that run into every view until the next edit
    view._on_tap("head", SimpleNamespace(x=0, y=state.model.cfg.n_layers - 1))
    assert "Patched run" in view.detail.object and view.show_button.visible
    view._show_in_views(None)
    assert state.run_note and state.tokens.ids == target
    expected = _patch_by_hand(state.model, target, source, ("head", state.model.cfg.n_layers - 1, 0), good, bad)
    assert state.trace.logits[-1, good] - state.trace.logits[-1, bad] == pytest.approx(expected, abs=1e-9)
    state.prompt = state.prompt + " "
    state.prompt = state.prompt.strip()
    assert not state.run_note and state.tokens.ids == clean


def test_patching_explains_what_is_missing_and_escapes_it(state):
    state.view = "patching"
    settings = PatchingSettings(state)
    view = PatchingView(settings)
    settings.load_example()
    settings.patch_token = XSS
    assert "is not in this model" in view.summary.object and "<img" not in view.summary.object
    settings.load_example()
    settings.good_token = settings.bad_token
    assert "the same" in view.summary.object
    settings.load_example()
    settings.patch_position = 40
    assert "no position 40" in view.summary.object
    assert len(view.resid_source.data["x"]) == 0


def test_patching_waits_while_hidden_and_catches_up(state):
    app = Playground(state)
    state.view = "patching"
    view = app.views["patching"]
    app.settings["patching"].load_example()
    state.view = "generate"
    before = view.run
    state.prompt = state.prompt + " " + state.prompt
    assert view.run is before and view.stale
    state.view = "patching"
    assert view.run is not before and not view.stale


def test_the_url_carries_the_experiment():
    assert {"patch_position", "patch_token", "good_token", "bad_token", "patch_from"} <= set(PatchingSettings.URL)
    state = PlaygroundState(model_name="lesson")
    settings = PatchingSettings(state)
    settings.apply_url_values({"patch_position": "3", "patch_token": "dog"})
    state.apply_url_values({"view": "Patching"})
    assert settings.patch_position == 3 and state.view == "patching"


def test_roles_need_a_trace_of_the_prompt(state):
    with pytest.raises(ValueError):
        roles.role_scores(state.trace, state.tokens.labels[:-1])
    assert isinstance(circuits.prompt_scores(state.model, state.trace, state.tokens.labels), dict)
    assert isinstance(slm.roles.ROLES, tuple)


def test_a_long_patching_grid_fills_in_between_events_and_stops(monkeypatch):
    """A grid that takes longer than FIRST seconds (here: any) goes on in steps from the event loop: it says how far
    it is, Stop halts it with grey cells left, Continue completes it, and the result equals the grid in one go."""
    import asyncio

    from playground.views import patching

    monkeypatch.setattr(patching, "FIRST", 0.0)
    monkeypatch.setattr(patching, "STEP", 0.0)
    state = PlaygroundState(model_name="shipped")
    state.view = "patching"
    settings = PatchingSettings(state)

    async def scenario():
        view = PatchingView(settings)  # builds and starts the grid inside the loop
        assert view.running and view.stop_button.visible and view.stop_button.label == "Stop the grid"
        assert "Running the patches" in view.summary.object
        await asyncio.sleep(0.05)
        view._stop_or_continue(None)
        assert not view.running and "Stopped" in view.summary.object and view.stop_button.label == "Continue the grid"
        done = view.run.job.done
        await asyncio.sleep(0.05)
        assert view.run.job.done == done and not view.run.job.finished  # nothing ran while stopped
        assert np.isnan(view.head_source.data["metric"]).any() or np.isnan(view.resid_source.data["metric"]).any()
        view._stop_or_continue(None)
        await view.task
        return view

    # in a thread of its own: an earlier browser test may have left this thread an event loop that is running
    with ThreadPoolExecutor(1) as pool:
        view = pool.submit(asyncio.run, scenario()).result()
    assert view.run.job.finished and not view.stop_button.visible and "Stopped" not in view.summary.object
    whole = circuits.patch_run(state.model, state.tokenizer, state.tokens.ids, state.tokens.labels,
                               settings.patch_position, settings.patch_token, settings.good_token,
                               settings.bad_token, "clean")
    whole.job.run_for(float("inf"))
    for x, y, metric in zip(view.head_source.data["x"], view.head_source.data["y"], view.head_source.data["metric"],
                            strict=True):
        assert metric == pytest.approx(whole.result.heads[y, x], abs=1e-9)
    assert not np.isnan(view.resid_source.data["metric"]).any()
