"""The playground's entry point: `panel serve py/playground/app.py`, or compiled into the static Pyodide site.

create_app() builds one state and the views that read it, and returns the root layout. Imports only numpy,
panel, bokeh, param, slm and playground, so the same file runs in CPython and in Pyodide.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from typing import Any

import panel as pn

from playground.state import VIEWS, PlaygroundState, sync_url
from playground.views.attention import AttentionView
from playground.views.common import STYLES, caption
from playground.views.generate import GenerateView
from playground.views.heads import HeadsView
from playground.views.lesson import LessonView
from playground.views.next_token import NextTokenView
from playground.views.patching import PatchingView
from playground.views.residual import ResidualView
from playground.views.tokens import TokenStrip

pn.extension(raw_css=[STYLES], notifications=False)

# Each tab's view and its label (the label is known before the view is built: a hidden tab starts as a placeholder).
VIEW_CLASSES: dict[str, tuple[type, str]] = {
    "generate": (GenerateView, "Generate"), "attention": (AttentionView, "Attention"),
    "residual": (ResidualView, "Residual stream"), "next": (NextTokenView, "Next token"),
    "lesson": (LessonView, "Lesson"), "heads": (HeadsView, "Heads"), "patching": (PatchingView, "Patching"),
}

INTRO = ("A small transformer language model, running in your browser. Type a prompt: the model reads it as tokens "
         "(<code>&lt;start&gt;</code> first), and every view below shows one part of the same forward pass.")


class LazyViews(Mapping):
    """name -> view, each built on first access: building a view (figures, widgets, its watchers on `trace`) is
    most of create_app(), so only the views on screen are built up front. A view built later draws the current
    trace at construction, like every view does."""

    def __init__(self, playground: Playground) -> None:
        self._playground = playground
        self._built: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            if name not in VIEW_CLASSES:
                raise KeyError(name)
            self._built[name] = view = VIEW_CLASSES[name][0](self._playground.state)
            self._playground._view_built(name, view)
        return self._built[name]

    def __iter__(self) -> Iterator[str]:
        return iter(VIEW_CLASSES)

    def __len__(self) -> int:
        return len(VIEW_CLASSES)


class Playground:
    """The state, its views, and the layout (full page, or one view alone when embedded).

    Only the visible view is built here; a hidden tab holds an empty placeholder until it is opened or
    build_hidden() runs (after the first render), whichever comes first."""

    def __init__(self, state: PlaygroundState | None = None) -> None:
        self.state = state = state or PlaygroundState()
        self.prompt = pn.widgets.TextInput(label="Prompt", value=state.prompt, placeholder="the cat chased the dog",
                                           width=420, max_length=2000)
        # Every keystroke re-runs the forward pass (it takes milliseconds); Enter also generates.
        self.prompt.param.watch(lambda e: setattr(state, "prompt", e.new), "value_input")
        self.prompt.param.watch(self._on_generate, "enter_pressed")
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
        self.tabs = pn.Tabs(*(pn.Column(name=label, sizing_mode="stretch_width")
                              for _, label in VIEW_CLASSES.values()), dynamic=False, sizing_mode="stretch_width")
        self.views = LazyViews(self)
        self.tabs.param.watch(self._on_tab, "active")
        state.param.watch(self._on_view, ["view", "embed"])
        self.root = pn.Column(sizing_mode="stretch_width", max_width=1000, css_classes=["pg-root"])
        # start_building_hidden()'s task, kept here: the event loop holds only a weak reference to it.
        self._hidden_task: asyncio.Future | None = None
        self._layout()

    def _view_built(self, name: str, view: Any) -> None:
        self.tabs[VIEWS.index(name)] = view.panel  # replaces the tab's placeholder

    def _on_tab(self, event: Any) -> None:
        self.views[VIEWS[event.new]]  # noqa: B018 - builds the tab's view on first open
        self.state.view = VIEWS[event.new]

    def build_hidden(self) -> None:
        """Build every view not built yet (held: their tabs reach the page together)."""
        if self.state.embed:
            return  # only the chosen view is on the page
        views = self.views
        with pn.io.hold():
            for name in VIEW_CLASSES:
                views[name]  # noqa: B018

    async def build_hidden_stepwise(self, pause: float = 0.05) -> None:
        """build_hidden() one view at a time, yielding in between and waiting while a generation streams: in the
        static site the app's one Python thread also runs the learner's first actions (typing, Generate), which
        then wait at most for one view instead of all of them. Used by the site after 'ready'."""
        for name in VIEW_CLASSES:
            await asyncio.sleep(pause)
            while self.state.generating:
                await asyncio.sleep(0.1)
            if self.state.embed:
                return
            self.views[name]  # noqa: B018 - no-op when built already (e.g. its tab was opened)

    def start_building_hidden(self) -> None:
        """Start build_hidden_stepwise() in the background (the static site calls this right after 'ready')."""
        if self._hidden_task is None:
            self._hidden_task = asyncio.ensure_future(self.build_hidden_stepwise())

    @property
    def hidden_views_pending(self) -> bool:
        """True until start_building_hidden()'s task has finished (the site's benchmark waits for it)."""
        return self._hidden_task is None or not self._hidden_task.done()

    def _layout(self, *_: object) -> None:
        state = self.state
        self.tabs.active = VIEWS.index(state.view)
        self.views[state.view]  # noqa: B018 - the visible view is always built
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

    async def _on_generate(self, _event: object = None) -> None:  # the Generate button, or Enter in the prompt
        await self.state.generate()

    def _on_generating(self, event: object) -> None:
        self.generate.disabled, self.stop.disabled = event.new, not event.new


def create_app(*, build_hidden_on_load: bool = True) -> Playground:
    """One session's playground (`panel serve` and the static site both call this); `.root` is what to show.

    The views of the hidden tabs are built after the first render, one at a time (``start_building_hidden()``, so
    that a learner's first click waits for one view at most): on the document's load event by default (what
    `panel serve` needs), or, with ``build_hidden_on_load=False``, when the host calls it (the static site, after
    'ready')."""
    state = PlaygroundState()
    sync_url(state)  # the URL's values (view=, embed=, prompt=...) first: then only the view they show is built
    playground = Playground(state)
    if build_hidden_on_load and pn.state.curdoc is not None:
        pn.state.onload(playground.start_building_hidden)
    return playground


if __name__.startswith("bokeh") or __name__ == "__main__":  # `panel serve` runs this file as bokeh_app_*
    create_app().root.servable(title="Transformer playground")
