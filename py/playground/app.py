"""The playground's entry point: `panel serve py/playground/app.py`, or compiled into the static Pyodide site.

create_app() builds one state and the views that read it, and returns the root layout. Imports only numpy,
panel, bokeh, param, slm and playground, so the same file runs in CPython and in Pyodide.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import time
from collections.abc import Iterator, Mapping
from typing import Any

import panel as pn
from bokeh.models import SaveTool

from playground import memory
from playground.library import restore_linked
from playground.models import REGISTRY
from playground.state import PlaygroundState, ViewSettings, sync_url
from playground.views.attention import AttentionView
from playground.views.block import BlockSettings, BlockView
from playground.views.common import STYLES, caption, esc, title, wrap_row
from playground.views.features import FeaturesSettings, FeaturesView
from playground.views.generate import GenerateView
from playground.views.heads import HeadsView
from playground.views.lessons import LessonsView
from playground.views.model_map import ModelMapView
from playground.views.models import ModelsView
from playground.views.next_token import NextTokenView
from playground.views.patching import PatchingSettings, PatchingView
from playground.views.residual import ResidualView
from playground.views.tokens import TokenStrip
from playground.views.train import TrainSettings, TrainView

pn.extension(notifications=False)  # the app's stylesheet is added per document (create_app, add_styles)

# Each view's class and its label in the view switcher, in the switcher's order. Adding a view is one line here
# (and its name in state.VIEWS).
VIEW_CLASSES: dict[str, tuple[type, str]] = {
    "map": (ModelMapView, "Model map"),
    "generate": (GenerateView, "Generate"),
    "attention": (AttentionView, "Attention"),
    "residual": (ResidualView, "Residual stream"),
    "next": (NextTokenView, "Next token"),
    "block": (BlockView, "Block"),
    "heads": (HeadsView, "Heads"),
    "patching": (PatchingView, "Patching"),
    "train": (TrainView, "Train"),
    "features": (FeaturesView, "Features"),
    "models": (ModelsView, "Your models"),
    "lessons": (LessonsView, "Lessons"),
}
# The views with settings of their own: made with the page (a link carries them, whether or not their view is built
# yet) and handed to the view, instead of the state, when it is built.
VIEW_SETTINGS: dict[str, type[ViewSettings]] = {
    "block": BlockSettings, "patching": PatchingSettings, "train": TrainSettings,
    "features": FeaturesSettings}

INTRO = ("A small transformer language model, running in your browser. Type a prompt: the model reads it as tokens "
         "(<code>&lt;start&gt;</code> first), and every view below shows one part of the same forward pass.")

# `panel serve`'s page: Bokeh's default one has no viewport tag (a phone would lay it out 980 px wide and zoom
# out) and no landmark; this puts the app in <main>. The static site's index.html/embed.html do the same.
PAGE_TEMPLATE = """
{% block postamble %}<meta name="viewport" content="width=device-width, initial-scale=1">{% endblock %}
{% block contents %}{% from macros import embed %}<main>
{% for doc in docs %}{{ embed(doc) if doc.elementid }}
{% for root in doc.roots %}{{ embed(root) }}{% endfor %}{% endfor %}
</main>{% endblock %}
"""


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
            settings = self._playground.settings.get(name)
            view_class = VIEW_CLASSES[name][0]
            self._built[name] = view = view_class(self._playground.state if settings is None else settings)
            self._playground._view_built(name, view)
        return self._built[name]

    def built(self, name: str) -> bool:
        return name in self._built

    def __iter__(self) -> Iterator[str]:
        return iter(VIEW_CLASSES)

    def __len__(self) -> int:
        return len(VIEW_CLASSES)


class Playground:
    """The state, its views, and the layout (full page, or one view alone when embedded).

    The view switcher is a radio group (native radios: arrow keys move between views, a screen reader says which
    one is chosen); every built view sits in `self.content`, only the chosen one visible. Only the visible view
    is built here; the others are built when chosen or when build_hidden() runs (after the first render)."""

    def __init__(self, state: PlaygroundState | None = None, *, custom_js: bool = True) -> None:
        self.custom_js = custom_js
        self.state = state = state or PlaygroundState()
        self.shelf = state.shelf  # trained and loaded models: the views and the page's drops use it
        self.settings = {name: settings_class(state) for name, settings_class in VIEW_SETTINGS.items()}
        state.view_settings = list(self.settings.values())
        sync_url(state)  # the URL's values (view=, embed=, prompt=...) first: then only the view they show is built
        # then a built-in lesson's step (lesson=, step=): its view is the one built
        self.lesson_views = apply_lesson_link(state)
        self._wanted_model: str | None = None  # the URL's model= when it names a kept model (restore_models)
        self._hub_link: dict[str, str | None] | None = None  # the URL's hf= (revision=, hub=, file=): opened then
        self.prompt = pn.widgets.TextInput(label="Prompt", value=state.prompt, placeholder="the cat chased the dog",
                                           sizing_mode="stretch_width", min_width=200, max_length=2000,
                                           css_classes=["pg-prompt-input"])
        # Every keystroke re-runs the forward pass (it takes milliseconds); Enter also generates.
        self.prompt.param.watch(lambda e: setattr(state, "prompt", e.new), "value_input")
        self.prompt.param.watch(self._on_generate, "enter_pressed")
        state.param.watch(lambda e: setattr(self.prompt, "value", e.new) if self.prompt.value_input != e.new
                          else None, "prompt")
        self.generate = pn.widgets.Button(label="Generate", color="primary", width=110,
                                          align="end", css_classes=["pg-press"])
        self.stop = pn.widgets.Button(label="Stop", color="warning", width=80, disabled=True,
                                      align="end", css_classes=["pg-press"])
        self.generate.on_click(self._on_generate)
        self.stop.on_click(lambda _: state.stop())
        state.param.watch(self._on_generating, "generating")
        # No tooltip from the parameter's doc ("Which model to run", what the label and the options say): Panel
        # renders a description as Markdown, and markdown-it would be imported and set up for it while the first
        # page is built (~45 ms in Pyodide), before anything else on that page needs it.
        # A plain Select kept in step by hand: one made from_param takes the parameter's objects as its options
        # whenever they change (a model trained or loaded), losing the built-in models' labels.
        self.model_select = pn.widgets.Select(label="Model", width=150, options=self._model_options(),
                                              value=state.model_name)
        self.model_select.param.watch(lambda e: setattr(state, "model_name", e.new), "value")
        state.param.watch(self._sync_model_select, ["model_name", "models_changed"])
        self.prompt_bar = wrap_row(pn.Column(self.prompt, sizing_mode="stretch_width", min_width=240,
                                             styles={"flex": "1 1 300px"}),
                                   pn.Row(self.generate, self.stop, self.model_select, styles={"flex-wrap": "wrap"}))
        # Announced by screen readers when a generation ends (role=status is polite).
        self.announce = pn.pane.HTML("", margin=0, sizing_mode="stretch_width", css_classes=["pg-status"])
        state.param.watch(self._on_generating_announce, "generating")

        self._build_share()
        self.tokens = TokenStrip(state)
        self.switcher = pn.widgets.RadioBoxGroup(
            options={label: name for name, (_, label) in VIEW_CLASSES.items()}, value=state.view,
            inline=True, css_classes=["pg-switcher"], sizing_mode="stretch_width", margin=(10, 10, 4, 10))
        self.switcher.param.watch(self._on_switch, "value")
        self.content = pn.Column(sizing_mode="stretch_width", css_classes=["pg-content"])
        self.views = LazyViews(self)
        state.param.watch(self._on_view, ["view", "embed"])
        self.root = pn.Column(sizing_mode="stretch_width", max_width=1600, css_classes=["pg-root"])
        # start_building_hidden()'s task, kept here: the event loop holds only a weak reference to it.
        self._hidden_task: asyncio.Future | None = None
        self._restore_task: asyncio.Future | None = None  # restore_models(), started with it
        self._last_change = 0.0  # time.monotonic() of the state's last change: the background building waits
        self.prebuild = True  # False (the URL's prebuild=0): a view is built when first shown, never in the background
        for part in (state, *self.settings.values()):
            part.param.watch(self._note_change, [name for name in part.param if name != "name"])
        self._layout()

    @staticmethod
    def _model_options() -> dict[str, str]:
        return {"trained model": "shipped", "lesson model": "lesson", **{name: name for name in REGISTRY}}

    def _sync_model_select(self, *_: object) -> None:
        self.model_select.param.update(options=self._model_options(), value=self.state.model_name)

    async def restore_models(self) -> None:
        """The models this browser keeps back in the selector (the URL's model= shown if it names one), then the
        model the URL's hf= names opened from the Hub (or this browser's cache)."""
        await self.shelf.restore(self._wanted_model or self.state.requested_model)
        if self._hub_link:
            await self.shelf.open_hub(**self._hub_link)

    def _build_share(self) -> None:
        """"Copy link" (the whole state as a URL) and "Copy embed code" (an iframe of the current view), for
        instructors. The text is also shown in labelled fields, to copy by hand where a page forbids scripts."""
        self.share_link = pn.widgets.TextInput(label="Link to this state", sizing_mode="stretch_width",
                                               min_width=240, styles={"flex": "1 1 420px"})
        self.share_embed = pn.widgets.TextAreaInput(label="Embed code for this view", rows=3, min_width=240,
                                                    sizing_mode="stretch_width", styles={"flex": "1 1 420px"})
        buttons = []
        for label, field in (("Copy link", self.share_link), ("Copy embed code", self.share_embed)):
            # In the browser: the clipboard is the page's, not Python's. BokehJS compiles a CustomJS with `new
            # Function`, which the static site's Content Security Policy (no 'unsafe-eval') refuses: there
            # (custom_js=False) the buttons would only raise an error, so they are left out and the fields are
            # copied by hand.
            button = None
            if self.custom_js:
                button = pn.widgets.Button(label=label, color="primary", variant="outline", width=160,
                                           css_classes=["pg-press"], align="end")
                button.js_on_click(args={"field": field}, code="navigator.clipboard.writeText(field.value)")
            buttons.append(button)
        self.copy_link, self.copy_embed = buttons
        self.chart_format = pn.pane.HTML("", margin=(4, 10), sizing_mode="stretch_width")
        self.share = pn.Column(
            title("Share, save, embed"),
            caption("Every chart has a save button (PNG) above it and a “Download the numbers (CSV)” button "
                    "below. The link restores everything on this page; the embed code shows the current view "
                    "alone, e.g. in a course page."),
            wrap_row(self.share_link, *[self.copy_link] if self.copy_link else []),
            wrap_row(self.share_embed, *[self.copy_embed] if self.copy_embed else []),
            self.chart_format,
            sizing_mode="stretch_width", margin=(20, 0, 10, 0))
        for part in (self.state, *self.settings.values()):
            part.param.watch(self._update_share, list(part.URL))
        self._update_share()

    def share_urls(self) -> tuple[str, str]:
        """The link to this state and the URL of its embedded view: absolute when the page's address is known.
        The static site's embedded page is embed.html beside index.html; `panel serve` embeds with embed=1."""
        location = pn.state.location
        origin, path = "", ""
        if location is not None and location.hostname:
            port = f":{location.port}" if location.port else ""
            origin, path = f"{location.protocol}//{location.hostname}{port}", location.pathname or ""
        link = f"{origin}{path}?{self.state.share_query()}"
        if path.endswith((".html", "/")):
            embed = f"{origin}{path.rsplit('/', 1)[0]}/embed.html?{self.state.share_query(embed=1)}"
        else:
            embed = f"{origin}{path}?{self.state.share_query(embed=1)}"
        return link, embed

    def _update_share(self, *_: object) -> None:
        link, embed = self.share_urls()
        label = VIEW_CLASSES[self.state.view][1]
        self.share_link.value = link
        other = "png" if self.state.charts == "svg" else "svg"
        self.chart_format.object = (
            f"<p class='pg-summary'>The save buttons write {self.state.charts.upper()} files. "
            f"<a href='?{html.escape(self.state.share_query(charts=other))}'>Reload with charts that save as "
            f"{other.upper()}</a>.</p>")
        self.share_embed.value = (f'<iframe src="{html.escape(embed)}" width="100%" height="640" '
                                  f'style="border:0; max-width:960px" loading="lazy" '
                                  f'title="Transformer playground: {label}"></iframe>')

    def _view_built(self, name: str, view: Any) -> None:
        for pane in view.panel.select(pn.pane.Bokeh):
            # The toolbar shows only the save button: hover and tap work without theirs.
            for tool in pane.object.tools:
                tool.visible = isinstance(tool, SaveTool)
            if self.state.charts == "svg":
                # Bokeh's save tool writes what the chart is drawn with, and a chart's backend cannot change once
                # drawn: the page is opened with charts=svg instead (the share section links to it).
                pane.object.output_backend = "svg"
        view.panel.visible = name == self.state.view
        self.content.append(view.panel)

    def _on_switch(self, event: Any) -> None:
        self.state.view = event.new

    def _show(self, name: str) -> None:
        self.views[name].catch_up()  # built on first use; brought up to date before it is shown
        # The others are hidden first: shown first, the page would lay out and paint two views at once.
        for other in VIEW_CLASSES:
            if other != name and self.views.built(other):
                self.views[other].panel.visible = False
        self.views[name].panel.visible = True
        self.switcher.value = name

    def build_hidden(self) -> None:
        """Build every view not built yet (held: they reach the page together)."""
        if self.state.embed:
            return  # only the chosen view is on the page
        views = self.views
        with pn.io.hold():
            for name in VIEW_CLASSES:
                views[name]  # noqa: B018

    def _note_change(self, *_: object) -> None:
        self._last_change = time.monotonic()

    async def build_hidden_stepwise(self, pause: float = 0.05, quiet: float = 0.3) -> None:
        """build_hidden() one view at a time, each once the state has been still for `quiet` seconds and no
        generation streams: in the static site the app's one Python thread also runs the learner's first actions
        (typing, then Generate a moment later), which then wait at most for one view instead of all of them, and
        a view's patch (the page lays it out for ~0.2 s) does not land in the middle of a token stream. Nor while
        the Train view trains: views the learner has not opened would slow the run they are watching. Nor while a
        model is being opened (the kept models and a link's Hub model after 'ready', files picked): views built
        for the model shown then would be built again for the new one, and slow its opening. With a lesson open,
        only the views its steps show (`lesson_views`): its Back and Next would otherwise wait for views it never
        opens. Used by the site after 'ready'."""
        while True:
            await asyncio.sleep(pause)
            while (self.state.generating or self._training() or self._opening()
                   or time.monotonic() - self._last_change < quiet):
                await asyncio.sleep(pause)
            wanted = VIEW_CLASSES if self.lesson_views is None else self.lesson_views
            name = next((name for name in wanted if not self.views.built(name)), None)
            if self.state.embed or not self.prebuild or name is None:
                return
            self.views[name]  # noqa: B018

    def lesson_opened(self, views: list[str]) -> None:
        """A lesson is open (playground.lesson_host): the views its steps show, in step order, are built in the
        background from now on, and no others."""
        self.lesson_views = list(views)
        if self._hidden_task is not None and self._hidden_task.done():
            self._hidden_task = asyncio.ensure_future(self.build_hidden_stepwise())

    def _opening(self) -> bool:
        return self.shelf.busy or (self._restore_task is not None and not self._restore_task.done())

    def _training(self) -> bool:
        return any(self.views.built(name) and getattr(self.views[name], busy)
                   for name, busy in (("train", "running"), ("features", "working")))

    def start_building_hidden(self) -> asyncio.Future:
        """Start build_hidden_stepwise() in the background (the static site calls this right after 'ready');
        its task, done when every view is built."""
        if self._hidden_task is None:
            self._restore_task = asyncio.ensure_future(self.restore_models())
            if self.settings["train"].autostart:  # a presenter's link: the Train view trains once the page is ready
                self.views["train"]._schedule(self.views["train"].start())
            self._hidden_task = asyncio.ensure_future(self.build_hidden_stepwise())
        return self._hidden_task

    @property
    def hidden_views_pending(self) -> bool:
        """True until start_building_hidden()'s task has finished (the site's benchmark waits for it)."""
        return self._hidden_task is None or not self._hidden_task.done()

    def _layout(self, *_: object) -> None:
        state = self.state
        self._show(state.view)
        if state.embed:
            # Only the chosen view, plus what it cannot work without: the prompt box for generation, the token
            # strip (to choose a position) for the views that describe one position.
            parts = [self.prompt_bar] if state.view == "generate" else [self.tokens.panel]
            if state.view == "block":
                parts = [self.prompt_bar, self.tokens.panel]
            self.root.objects = [*parts, self.views[state.view].panel, self.announce]
            self.root.css_classes = ["pg-root", "pg-embed"]
        else:
            self.root.objects = [
                pn.pane.HTML("<h1 class='pg-title pg-h1'>Transformer playground</h1>", margin=(0, 10)),
                caption(INTRO), self.prompt_bar,
                caption("The prompt as tokens: choose one (click, tap, or the arrow keys) to select its position."),
                self.tokens.panel, self.switcher, self.content, self.share, self.announce,
            ]
            self.root.css_classes = ["pg-root"]

    def _on_view(self, *events: object) -> None:
        if any(event.name == "embed" for event in events) or self.state.embed:
            self._layout()
        else:
            self._show(self.state.view)

    async def _on_generate(self, _event: object = None) -> None:  # the Generate button, or Enter in the prompt
        await self.state.generate()

    def _on_generating(self, event: object) -> None:
        self.generate.disabled, self.stop.disabled = event.new, not event.new

    def _on_generating_announce(self, event: object) -> None:
        state = self.state
        if event.new:
            text = "Generating…"
        else:
            n = len(state.generated)
            text = f"Generated {n} token{'s' if n != 1 else ''}: {esc(state.continuation_text())}"
        self.announce.object = f"<div role='status' class='pg-visually-hidden'>{text}</div>"


def add_styles(stylesheet_url: str | None) -> None:
    """The app's stylesheet (STYLES) on every component of this session's document: Panel keeps raw_css and
    css_files per document once one exists. Raw CSS is copied into each component's model: ~230 copies of its 5 kB
    once every view is built, in each document message and in the page's memory (~3 MB after a collection, measured
    in Chromium). A .css URL becomes one stylesheet model per document, which each component links."""
    if stylesheet_url:
        if stylesheet_url not in pn.config.css_files:
            pn.config.css_files = [*pn.config.css_files, stylesheet_url]
    elif STYLES not in pn.config.raw_css:
        pn.config.raw_css = [*pn.config.raw_css, STYLES]


async def prepare() -> None:
    """Awaited by the static site before create_app(): the kept model that the link's model= names is read from this
    browser's storage, so that the page is ready on it (under `panel serve`, Shelf.restore finds it after load)."""
    if pn.state.location is not None:
        await restore_linked(str(pn.state.location.query_params.get("model") or ""))


def apply_lesson_link(state: PlaygroundState) -> list[str] | None:
    """A link's built-in lesson (`lesson=NAME`, `step=N`): its step's state applied before the first view is built,
    so that the page's lesson panel (site/src/lesson/), opening it after 'ready', finds its view drawn. Lessons and
    markdown-it are imported only then. The views the link's lesson shows (Playground.lesson_views): a built-in's,
    none yet for a lesson file the page fetches (its views come when it opens), None without `lesson=`."""
    location = pn.state.location
    name = str(location.query_params.get("lesson") or "") if location is not None else ""
    if not name:
        return None
    if name.replace("-", "").replace("_", "").isalnum():
        from playground.lesson_host import apply_link, lesson_views

        lesson = apply_link(state, name, location.query_params.get("step"))
        if lesson is not None:
            return lesson_views(lesson)
    return []


def page_options(playground: Playground, query: dict[str, str | None]) -> None:
    """A link's Hub model (hf=owner/name, revision=, file=, and hub= a mirror's base URL, which the box in "Your
    models" then uses too), opened after the kept models are restored; memory= (MB) lowers the most the page lets
    its memory grow to (docs/own-model.md: for tests); prebuild=0 builds each view when it is first shown instead
    of every view in the background after load (a slow device, or a test that opens one view)."""
    playground.prebuild = query.get("prebuild") != "0"
    if query.get("memory"):
        with contextlib.suppress(ValueError):  # not a number: the wasm cap stands
            memory.set_limit(float(query["memory"]))
    if query.get("hub"):
        playground.shelf.hub_base = query["hub"]
    if query.get("hf"):
        playground._hub_link = {"repo": query["hf"], "revision": query.get("revision"), "hub_base": query.get("hub"),
                                "file": query.get("file")}


def create_app(*, build_hidden_on_load: bool = True, custom_js: bool = True,
               stylesheet_url: str | None = None) -> Playground:
    """One session's playground (`panel serve` and the static site both call this); `.root` is what to show.

    The views of the hidden tabs are built after the first render, one at a time (``start_building_hidden()``, so
    that a learner's first click waits for one view at most): on the document's load event by default (what
    `panel serve` needs), or, with ``build_hidden_on_load=False``, when the host calls it (the static site, after
    'ready'). ``custom_js=False``: the host's page cannot run Bokeh's CustomJS (the static site's CSP).
    ``stylesheet_url``: where the host serves STYLES as a file (the static site); without it, the text is inlined."""
    add_styles(stylesheet_url)
    state = PlaygroundState()
    playground = Playground(state, custom_js=custom_js)  # which reads the URL before it builds a view
    if pn.state.location is not None:  # model= may name a model this browser keeps: found once they are restored
        query = pn.state.location.query_params
        wanted = str(query.get("model") or "")
        playground._wanted_model = wanted if wanted and wanted != state.model_name else None
        page_options(playground, {key: None if query.get(key) is None else str(query[key])
                                  for key in ("hf", "revision", "hub", "file", "memory", "prebuild")})
    if pn.state.curdoc is not None:
        pn.state.curdoc.template = PAGE_TEMPLATE
        if build_hidden_on_load:
            pn.state.onload(playground.start_building_hidden)
    return playground


if __name__.startswith("bokeh") or __name__ == "__main__":  # `panel serve` runs this file as bokeh_app_*
    create_app().root.servable(title="Transformer playground")
