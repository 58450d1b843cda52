"""The playground's entry point: `panel serve py/playground/app.py`, or compiled into the static Pyodide site.

create_app() builds one state and the views that read it, and returns the root layout. Imports only numpy,
panel, bokeh, param, slm and playground, so the same file runs in CPython and in Pyodide.
"""

from __future__ import annotations

import panel as pn

from playground.state import VIEWS, PlaygroundState, sync_url
from playground.views.attention import AttentionView
from playground.views.common import STYLES, caption
from playground.views.generate import GenerateView
from playground.views.lesson import LessonView
from playground.views.next_token import NextTokenView
from playground.views.residual import ResidualView
from playground.views.tokens import TokenStrip

pn.extension(raw_css=[STYLES], notifications=False)

INTRO = ("A small transformer language model, running in your browser. Type a prompt: the model reads it as tokens "
         "(<code>&lt;start&gt;</code> first), and every view below shows one part of the same forward pass.")


class Playground:
    """The state, its views, and the layout (full page, or one view alone when embedded)."""

    def __init__(self, state: PlaygroundState | None = None) -> None:
        self.state = state = state or PlaygroundState()
        self.prompt = pn.widgets.TextInput(label="Prompt", value=state.prompt, placeholder="the cat chased the dog",
                                           width=420, max_length=2000)
        # Every keystroke re-runs the forward pass (it takes milliseconds); Enter also generates.
        self.prompt.param.watch(lambda e: setattr(state, "prompt", e.new), "value_input")
        self.prompt.param.watch(self._on_enter, "enter_pressed")
        state.param.watch(lambda e: setattr(self.prompt, "value", e.new) if self.prompt.value_input != e.new
                          else None, "prompt")
        self.generate = pn.widgets.Button(label="Generate", color="primary", width=100, margin=(26, 5, 5, 5))
        self.stop = pn.widgets.Button(label="Stop", color="warning", width=80, margin=(26, 5, 5, 5),
                                      disabled=True)
        self.generate.on_click(self._on_generate)
        self.stop.on_click(lambda _: state.stop())
        state.param.watch(self._on_generating, "generating")
        self.model_select = pn.widgets.Select.from_param(
            state.param.model_name, label="Model", width=150,
            options={"trained model": "shipped", "lesson model": "lesson"})
        self.prompt_bar = pn.Row(self.prompt, self.generate, self.stop, self.model_select)

        self.tokens = TokenStrip(state)
        self.views = {
            "generate": GenerateView(state), "attention": AttentionView(state), "residual": ResidualView(state),
            "next": NextTokenView(state), "lesson": LessonView(state),
        }
        self.tabs = pn.Tabs(*(view.panel for view in self.views.values()), dynamic=False, sizing_mode="stretch_width")
        self.tabs.param.watch(lambda e: setattr(state, "view", VIEWS[e.new]), "active")
        state.param.watch(self._on_view, ["view", "embed"])
        self.root = pn.Column(sizing_mode="stretch_width", max_width=1000, css_classes=["pg-root"])
        self._layout()

    def _layout(self, *_: object) -> None:
        state = self.state
        self.tabs.active = VIEWS.index(state.view)
        if state.embed:
            # Only the chosen view, plus what it cannot work without: the prompt box for generation, the token
            # strip (to choose a position) for the views that describe one position.
            parts = [self.prompt_bar] if state.view == "generate" else [self.tokens.panel]
            if state.view == "lesson":
                parts = [self.prompt_bar, self.tokens.panel]
            self.root.objects = [*parts, self.views[state.view].panel]
        else:
            self.root.objects = [
                pn.pane.HTML("<h1 class='pg-title'>Transformer playground</h1>", margin=(0, 10)),
                caption(INTRO), self.prompt_bar,
                caption("The prompt as tokens: click one to select its position."), self.tokens.panel, self.tabs,
            ]

    def _on_view(self, *events: object) -> None:
        if any(event.name == "embed" for event in events) or self.state.embed:
            self._layout()
        else:
            self.tabs.active = VIEWS.index(self.state.view)

    async def _on_generate(self, _event: object = None) -> None:
        await self.state.generate()

    async def _on_enter(self, _event: object) -> None:
        await self.state.generate()

    def _on_generating(self, event: object) -> None:
        self.generate.disabled, self.stop.disabled = event.new, not event.new


def create_app() -> pn.viewable.Viewable:
    """The root viewable of one session (the static-site build and `panel serve` both call this)."""
    playground = Playground()
    sync_url(playground.state)
    return playground.root


if __name__.startswith("bokeh") or __name__ == "__main__":  # `panel serve` runs this file as bokeh_app_*
    create_app().servable(title="Transformer playground")
