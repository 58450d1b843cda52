"""The Attention view's pronoun-head hint without a browser: found in the model's notes, and its button."""

from __future__ import annotations

import slm
from playground.app import Playground
from playground.state import PlaygroundState


def test_pronoun_head_hint_is_actionable():
    vocab = ["<pad>", "<start>", "<unk>", ".", "the", "cat", "dogs", "chased", "they", "were", "ran", "because"]
    cfg = slm.Config(n_vocab=len(vocab), n_ctx=32, n_model=16, n_heads=4, n_layers=2)
    model = slm.Model.init(cfg, seed=1)
    # The trainer may keep the note only among its metrics: the app finds it there too.
    model.meta.update(vocab=vocab, training={"metrics": {"pronoun_head": [1, 2], "pronoun_head_query": "copula"}})
    app = Playground(PlaygroundState(model_name="lesson", view="attention"))
    state, attention = app.state, app.views["attention"]
    state.use_model(model)
    state.prompt = "the cat ran"
    assert attention.hint.visible and "no such pronoun" in attention.hint_text.object
    attention.hint_button.clicks += 1  # "Try it on the example"
    assert state.prompt == "the cat chased the dogs because they were"
    assert (state.layer, state.head, state.position, state.view) == (1, 2, 8, "attention")  # the row of "were"
    assert "“were” (position 8) reads" in attention.hint_text.object
    state.param.update(prompt="the cat ran because they were . the cat ran", position=-1)
    attention.hint_button.clicks += 1  # the prompt has one: select it, keep the prompt
    assert state.prompt.endswith("the cat ran") and state.position == 6
    state.use_model(slm.CausalLanguageModel())
    assert not attention.hint.visible
