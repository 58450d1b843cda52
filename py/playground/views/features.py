"""Features: a sparse autoencoder trained here on the model shown, its features browsed, and generation steered.

playground.sae_lab does the work in small steps (gather, train, index); this view runs them from an async loop
between UI events (like the Train view), shows the metrics live, then the feature list (a native list box: arrow
keys and screen readers work), a density histogram, one feature's page (top contexts, logit effect), the features
that fire at the selected token of the prompt, and a steered generation beside the unsteered one. The SAE is kept
with its model in the page's storage, under sae_lab.store_key(model name): a reload and the single-file copy keep it.
"""

from __future__ import annotations

import asyncio
import io
import time
from typing import Any

import numpy as np
import panel as pn
import param
from bokeh.models import ColumnDataSource, HoverTool, Range1d

import slm.sae as S

from .. import sae_lab, storage
from ..models import END
from ..state import PlaygroundState, ViewSettings
from .common import (
    NEUTRAL,
    POSITIVE,
    Numbers,
    View,
    caption,
    chart_box,
    esc,
    in_background,
    patches_bokeh,
    save_tool,
    small_figure,
    table_rows_html,
    title,
    wrap_row,
)

CHUNK = 0.04  # seconds of work between UI turns: a click or Stop waits at most about this
REDRAW = 0.3  # seconds between chart updates while training
STEER_DRAW = 0.1  # seconds between updates of the steered and unsteered texts
LIST_SIZE = 200  # features in the list box (the rest: type the number)
# The list boxes: as wide as their lines where there is room, narrower on a phone (a fixed 320 px would widen its page).
LIST_WIDTH = {"sizing_mode": "stretch_width", "min_width": 200, "max_width": 340, "styles": {"flex": "1 1 300px"}}
SORTS = {"density (most frequent first)": "density", "mean activation (largest first)": "mean",
         "feature number": "number"}


class FeaturesSettings(ViewSettings):
    """The Features view's choices a link carries: the preset, the feature shown, steering's α, and the steps
    (0: the preset's)."""

    URL = {"preset": "sae_preset", "feature": "feature", "alpha": "alpha", "steps": "sae_steps", "sort": "sae_sort"}

    preset = param.Selector(default="quick", objects=list(sae_lab.PRESET_LABELS), doc="The SAE's training preset")
    feature = param.Integer(default=0, bounds=(0, None), doc="The feature shown")
    alpha = param.Number(default=8.0, bounds=(-100.0, 100.0), step=1.0, doc="Steering: α × the feature's direction")
    steps = param.Integer(default=0, bounds=(0, 100_000), doc="Training steps (0: the preset's)")
    sort = param.Selector(default="density", objects=list(SORTS.values()), doc="The feature list's order")


class FeaturesView(View):
    def __init__(self, settings: FeaturesSettings) -> None:
        self.settings = settings
        self.state = state = settings.state
        self.run: sae_lab.SaeRun | None = None
        self.saes: dict[str, tuple[Any, S.SAE]] = {}  # model name -> (that model, its SAE), this page
        self.task: asyncio.Future | None = None
        self.working = False
        self.steering = False
        self._stop_steer = False
        self._last_draw = 0.0
        self._estimates: dict[tuple, dict[str, float]] = {}
        self._looked_up: set[str] = set()  # model names whose kept SAE was looked for in storage
        self.feature_ms = 0.0  # the last feature page's drawing time (bench/)
        self.steer_rate = 0.0  # tokens per second of the last steered generation, both texts counted (bench/)
        self.numbers = Numbers("features")
        self._build_controls()
        self._build_charts()
        self._build_feature()
        self.panel = pn.Column(
            title("Features: a sparse autoencoder"),
            caption("A sparse autoencoder (SAE) rewrites each position's residual stream as a sum of a few "
                    "<b>features</b>, directions it learns from many activations. Press <b>Start</b> to train one "
                    "here on the model shown; then choose a feature to see where it fires most and which next "
                    "tokens it pushes up, see which features fire on your prompt, and <b>steer</b> generation by "
                    "adding a feature's direction. See docs/features.md."),
            self.controls, self.buttons, self.status, self.files_row, self.results,
            name="Features", sizing_mode="stretch_width")
        state.param.watch(self.when_shown(self._on_model), "model")
        state.param.watch(self.when_shown(self._draw_prompt), ["trace", "position"])
        settings.param.watch(self._on_feature, "feature")
        settings.param.watch(self._on_sort, "sort")
        settings.param.watch(lambda _: self._say_estimate(), ["preset", "steps"])
        self.stale = True  # drawn when first shown (Playground._show calls catch_up): the estimate costs a pass

    # ---- controls ----

    def _build_controls(self) -> None:
        settings = self.settings
        self.preset = pn.widgets.Select.from_param(settings.param.preset, label="Preset", width=260, description=None,
                                                   options={v: k for k, v in sae_lab.PRESET_LABELS.items()})
        self.hook = pn.widgets.Select(label="Hook point (read and steered)", width=240, options=[])
        self.hook.param.watch(lambda _: self._say_estimate(), "value")
        # A short label (a phone's column clips a long one); the rest is the description behind its "?".
        self.text = pn.widgets.TextAreaInput(label="Your text (optional)", rows=2, sizing_mode="stretch_width",
                                             description="Trained on this text; without it, on the grammar's documents "
                                                         "(the shipped and lab models) or the model's own samples.",
                                             max_length=200_000, min_width=240, styles={"flex": "1 1 320px"})
        self.controls = wrap_row(self.preset, self.hook, self.text, margin=(0, 10))
        self.start = pn.widgets.Button(label="Start", color="primary", width=100, css_classes=["pg-press"])
        self.stop = pn.widgets.Button(label="Stop", color="primary", variant="outline", width=100, disabled=True,
                                      css_classes=["pg-press"])
        self.start.on_click(lambda _: self._schedule(self.train()))
        self.stop.on_click(lambda _: self.stop_work())
        self.download = pn.widgets.FileDownload(callback=self._zip, filename="sae.zip", disabled=True,
                                                label="Download the SAE (.zip)", variant="outline",
                                                color="primary", width=220, css_classes=["pg-press"])
        self.upload = pn.widgets.FileInput(accept=".zip,.json,.safetensors", multiple=True, margin=(4, 10),
                                           label="Open an SAE (.zip, or cfg.json + sae_weights.safetensors)")
        self.upload.param.watch(self._on_upload, "value")
        self.buttons = wrap_row(self.start, self.stop, self.download, margin=(4, 10))
        self.files_row = pn.Column(
            caption("<label>Open an SAE: a .zip of SAELens's <code>cfg.json</code> and "
                    "<code>sae_weights.safetensors</code>, or the two files.</label>"),
            self.upload, sizing_mode="stretch_width")
        self.status = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width")
        self.kept = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width")

    def _build_charts(self) -> None:
        self.curve_source = ColumnDataSource(data=dict(step=[], fve=[]))
        self.step_range = Range1d(0, 1)
        curve = small_figure(title="Variance explained, by step", sizing_mode="stretch_width",
                             min_width=200, height=220, x_axis_label="step", y_axis_label="FVE",
                             x_range=self.step_range, y_range=Range1d(0, 1.02), name="sae-fve")
        curve.line("step", "fve", source=self.curve_source, color=POSITIVE, line_width=2)
        self.hist_source = ColumnDataSource(data=dict(left=[], right=[], count=[], label=[]))
        hist = small_figure(title="Features by density", sizing_mode="stretch_width", min_width=200, height=220,
                            x_axis_label="log₁₀ (fraction of positions it fires on)", y_axis_label="features",
                            name="sae-density")
        hist.quad(left="left", right="right", bottom=0, top="count", source=self.hist_source, fill_color=NEUTRAL,
                  line_color="white")
        hist.add_tools(HoverTool(tooltips=[("density", "@label"), ("features", "@count")]))
        self.curve_box = chart_box(save_tool(curve, "sae-fve"), 420)
        self.hist_box = chart_box(save_tool(hist, "sae-density"), 420)
        self.charts_alt = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width")
        self.charts = pn.Column(wrap_row(self.curve_box, self.hist_box,
                                         styles={"flex-wrap": "wrap", "align-items": "flex-start"}),
                                self.charts_alt, sizing_mode="stretch_width", visible=False)

    def _build_feature(self) -> None:
        settings = self.settings
        self.sort = pn.widgets.Select(label="Order the features by", width=240,
                                      options=SORTS, value=settings.sort)
        self.sort.param.watch(lambda e: setattr(settings, "sort", e.new), "value")
        # Not LIST_WIDTH: in its column a flex basis would set the list's height, which WebKit leaves empty below it.
        self.feature_list = pn.widgets.Select(label="Features (choose one)", size=10, options={},
                                              sizing_mode="stretch_width")
        self.feature_list.param.watch(self._on_list, "value")
        self.feature_input = pn.widgets.IntInput.from_param(settings.param.feature, label="Feature number",
                                                            width=140, description=None, start=0)
        self.page = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width", min_width=240,
                                 styles={"flex": "1 1 420px"})
        self.prompt_title = title("On your prompt", level=3)
        self.prompt_note = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width")
        self.at_token = pn.widgets.Select(label="Features at the selected token (choose one to show it)", size=6,
                                          options={}, **LIST_WIDTH)
        self.at_token.param.watch(self._on_list, "value")
        self.prompt_table = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width", min_width=240,
                                         styles={"flex": "1 1 420px"})
        self.alpha = pn.widgets.FloatInput.from_param(settings.param.alpha, label="α (steering strength)", width=170,
                                                      description=None)
        self.steer_button = pn.widgets.Button(label="Steer", color="primary", width=100, css_classes=["pg-press"],
                                              align="end")
        self.steer_stop = pn.widgets.Button(label="Stop steering", color="primary", variant="outline", width=130,
                                            disabled=True, align="end", css_classes=["pg-press"])
        self.steer_button.on_click(lambda _: self._schedule(self.steer()))
        self.steer_stop.on_click(lambda _: setattr(self, "_stop_steer", True))
        self.steered = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width", min_width=240,
                                    styles={"flex": "1 1 320px"})
        self.unsteered = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width", min_width=240,
                                      styles={"flex": "1 1 320px"})
        self.results = pn.Column(
            self.kept, self.charts,
            title("The features", level=3),
            wrap_row(pn.Column(self.sort, self.feature_list, self.feature_input, **LIST_WIDTH), self.page,
                     styles={"flex-wrap": "wrap", "align-items": "flex-start"}),
            self.prompt_title, self.prompt_note,
            wrap_row(self.at_token, self.prompt_table, styles={"flex-wrap": "wrap", "align-items": "flex-start"}),
            title("Steering", level=3),
            caption("Generate from your prompt twice with the same seed and sampling settings (the Generate view's): "
                    "once with α × the feature's decoder direction added at the hook point, at every position, "
                    "and once without. A negative α pushes the other way."),
            wrap_row(self.alpha, self.steer_button, self.steer_stop, margin=(0, 10)),
            wrap_row(self.steered, self.unsteered, styles={"flex-wrap": "wrap", "align-items": "flex-start"}),
            self.numbers.button,
            sizing_mode="stretch_width", visible=False)

    # ---- the SAE of the model shown ----

    @property
    def sae(self) -> S.SAE | None:
        run = self.run
        return run.sae if run is not None and run.model is self.state.model and run.done else None

    def _on_model(self, *_: object) -> None:
        if self.run is not None and self.run.model is not self.state.model:
            self.stop_work()
            self.run = None
        self._hooks()
        model, sae = self.saes.get(self.state.model_name, (None, None))
        if model is self.state.model and self.run is None:
            self._open(sae, "This model's SAE (trained or opened in this page).")
        elif self.run is None:
            self._hide_results()
            if self.state.model_name not in self._looked_up and self.state.model_name != "lesson":
                self._looked_up.add(self.state.model_name)
                self._schedule(self._restore(self.state.model_name))
        self._say_estimate()

    def _hooks(self) -> None:
        choices = sae_lab.hook_choices(self.state.model)
        default = S.default_hook(self.state.model)
        self.hook.param.update(options=choices, value=self.hook.value if self.hook.value in choices else default)

    async def _restore(self, name: str) -> None:
        """The SAE this browser keeps for the model `name` (or the single file was saved with), if any."""
        shop = storage.store()
        try:
            data = await shop.get(sae_lab.store_key(name))
            # A store that cannot keep anything answers with what the single file was saved with.
            where = "kept in this browser" if data is None or await shop.available() else "saved in this file"
        except Exception:  # noqa: BLE001 - no storage, or a broken one: nothing kept, say nothing
            return
        if data is None or name != self.state.model_name or self.run is not None:
            return
        try:
            sae = sae_lab.read_sae({"sae.zip": bytes(data)})
        except Exception as exc:  # noqa: BLE001
            self._say(f"The SAE kept for this model could not be read ({exc}).")
            return
        self._open(sae, f"This model's SAE, {where}.")

    def _open(self, sae: S.SAE, note: str) -> None:
        try:
            self.run = sae_lab.SaeRun.from_sae(self.state.model, sae)
        except ValueError as exc:
            self._say(f"That SAE does not fit this model: {exc}.")
            return
        self.saes[self.state.model_name] = (self.state.model, sae)
        self.kept.object = f"<p class='pg-summary'>{esc(note)}</p>"
        self._schedule(self._work(self.run))

    def _on_upload(self, event: Any) -> None:
        values, names = self.upload.value, self.upload.filename
        if not values:
            return
        values = values if isinstance(values, list) else [values]
        names = names if isinstance(names, list) else [names]
        try:
            sae = sae_lab.read_sae({str(n): bytes(v) for n, v in zip(names, values, strict=False)})
            sae_lab.check_fits(sae, self.state.model)
        except Exception as exc:  # noqa: BLE001 - any file must get a message
            self._say(f"Not opened: {exc}")
            return
        self.stop_work()
        self.run = None
        self._open(sae, f"Opened {', '.join(map(str, names))}: {sae.d_sae} features at {sae.hook_name}.")
        self._schedule(self._keep(self.state.model_name, sae))

    async def _keep(self, name: str, sae: S.SAE) -> None:
        if name == "lesson":  # its weights follow the Block view's switches: the name does not say which model
            self.kept.object = ("<p class='pg-summary'>An SAE of the lesson model lasts until the page closes (the "
                                "model changes with its switches): download it to keep it.</p>")
            return
        shop = storage.store()
        try:
            if not await shop.available():
                self.kept.object = ("<p class='pg-summary'>This page has no storage: the SAE lasts until the page "
                                    "closes. Download it to keep it.</p>")
                return
            await shop.put(sae_lab.store_key(name), sae_lab.sae_bytes(sae), sae_lab.store_key(name))
            self.kept.object = ("<p class='pg-summary'>The SAE is kept in this browser with its model: a reload "
                                "keeps it.</p>")
        except Exception as exc:  # noqa: BLE001 - quota, a private window: the SAE stays in the page
            self.kept.object = f"<p class='pg-summary'>The SAE could not be kept ({esc(exc)}): download it.</p>"

    def _zip(self) -> io.BytesIO:
        return io.BytesIO(sae_lab.sae_bytes(self.sae) if self.sae is not None else b"")

    # ---- running ----

    def _schedule(self, coroutine: Any) -> None:
        self.task = in_background(coroutine, self._failed)

    def _failed(self, exc: BaseException) -> None:
        self.working = False
        self._say(f"Stopped: {exc}")
        self._buttons()

    def stop_work(self) -> None:
        """Stop: training ends where it is (the SAE so far is indexed and shown); gathering is abandoned."""
        if self.run is not None and self.run.trainer is not None and self.run.sae is None:
            self.run.stop_training()
        elif self.working:
            self.working = False
            self.run = None
            self._say("Stopped.")
        self._stop_steer = True

    async def train(self) -> None:
        """A new SAE on the model shown with the chosen preset, trained until done or stopped."""
        if self.working:
            return
        settings = self.settings
        text = (self.text.value_input or self.text.value or "").strip() or None
        self.run = run = sae_lab.SaeRun(self.state.model, settings.preset, self.hook.value, settings.steps, text)
        self.kept.object = ""
        self._hide_results()
        await self._work(run)
        if run is self.run and run.done:
            name = self.state.model_name
            self.saes[name] = (run.model, run.sae)
            await self._keep(name, run.sae)

    async def _work(self, run: sae_lab.SaeRun) -> None:
        self.working = True
        self._buttons()
        steps = run.work()
        try:
            while self.working and run is self.run:
                deadline = time.perf_counter() + CHUNK
                progress = None
                for progress in steps:
                    if progress.phase == "done" or time.perf_counter() > deadline:
                        break
                if progress is None or progress.phase == "done":
                    break
                if time.monotonic() - self._last_draw > REDRAW:
                    self._progress(run, progress)
                await asyncio.sleep(0)  # the page's other events run here (a turn of the loop: no timer to wait for)
        finally:
            if run is self.run:
                self.working = False
                self._buttons()
        if run is self.run and run.done:
            self._finished(run)

    @patches_bokeh
    def _progress(self, run: sae_lab.SaeRun, progress: sae_lab.Progress) -> None:
        self._last_draw = time.monotonic()
        self._say(progress.text())
        if run.trainer is not None and run.trainer.history:
            self._draw_curve(run)

    @patches_bokeh
    def _draw_curve(self, run: sae_lab.SaeRun) -> None:
        history = run.trainer.history if run.trainer is not None else []
        self.charts.visible = bool(history)
        self.curve_box.visible = bool(history)
        self.curve_source.data = dict(step=[r["step"] for r in history], fve=[float(r["fve"]) for r in history])
        self.step_range.end = max(run.settings.steps, 1)

    def _finished(self, run: sae_lab.SaeRun) -> None:
        sae = run.sae
        if run.trainer is not None:
            m = run.final
            t = run.trainer
            parts = run.phase_seconds
            spent = ", ".join(f"{label} {parts[key]:.1f} s" for key, label in (
                ("corpus", "corpus"), ("gather", "gathering"), ("train", "training"), ("index", "indexing"))
                if key in parts)
            self._say(f"Done: {t.t} steps in {run.seconds:.0f} s ({spent}). On held-out positions: "
                      f"FVE {m['fve']:.3f}, "
                      f"L0 {m['l0']:.1f}, dead {100 * m['dead']:.0f} %, dense {100 * m['dense']:.0f} % "
                      f"({sae.d_sae} features at {sae.hook_name}).")
        else:
            self._say(f"{sae.d_sae} features at {sae.hook_name}, indexed on {run.index.rows} positions.")
        self.results.visible = True
        self._draw_curve(run)
        self._draw_histogram(run)
        self._fill_list()
        self._draw_feature()
        self._draw_prompt()
        self._buttons()

    def _buttons(self) -> None:
        self.start.disabled = self.working
        self.start.label = "Start again" if self.run is not None else "Start"
        self.stop.disabled = not self.working
        self.download.disabled = self.sae is None
        self.steer_button.disabled = self.sae is None or self.steering
        self.steer_stop.disabled = not self.steering
        if self.sae is not None:
            self.download.filename = _filename(self.state.model_name)

    def _say(self, text: str) -> None:
        self.status.object = f"<div role='status' class='pg-summary'>{esc(text)}</div>"

    def _say_estimate(self) -> None:
        if self.working or self.sae is not None or not self.hook.value:
            return
        model = self.state.model
        text = (self.text.value_input or self.text.value or "").strip() or None
        key = (id(model), self.settings.preset, self.settings.steps, self.hook.value, text is None)
        if key not in self._estimates:
            try:
                self._estimates[key] = sae_lab.estimate_seconds(model, self.settings.preset, self.settings.steps,
                                                                text, self.hook.value)
            except Exception as exc:  # noqa: BLE001 - e.g. a model too small to sample from: Start will say why
                self._say(f"Not started. ({exc})")
                return
        self._say(f"Not started. {sae_lab.estimate_text(self._estimates[key])}")

    def _hide_results(self) -> None:
        self.results.visible = False
        self.charts.visible = False

    # ---- drawing ----

    @patches_bokeh
    def _draw_histogram(self, run: sae_lab.SaeRun) -> None:
        counts, edges, dead = sae_lab.density_histogram(run.index)
        self.charts.visible = True
        self.hist_source.data = dict(left=edges[:-1].tolist(), right=edges[1:].tolist(), count=counts.tolist(),
                                     label=[f"{10 ** a:.2g} – {10 ** b:.2g}" for a, b in zip(edges[:-1], edges[1:],
                                                                                        strict=True)])
        d = run.index.density
        live = d[d > 0]
        median = f"{100 * float(np.median(live)):.2g} %" if live.size else "–"
        rows = [[f"{10 ** a:.3g} – {10 ** b:.3g}", int(c)] for a, b, c in zip(edges[:-1], edges[1:], counts,
                                                                               strict=True)]
        self.charts_alt.object = self.numbers.record(
            "density histogram",
            f"{live.size} of {run.sae.d_sae} features fired on the {run.index.rows} indexed positions ({dead} never "
            f"did); the median live feature fires on {median} of them.",
            "The density histogram as numbers", ["density", "features"], rows)

    def _fill_list(self) -> None:
        run = self.run
        if run is None or run.index is None:
            return
        order = sae_lab.ordered_features(run.index, self.settings.sort)[:LIST_SIZE]
        density, mean = run.index.density, run.index.mean_activation
        options = {f"#{f} · fires on {100 * density[f]:.2g} % · mean {mean[f]:.2f}": f for f in order}
        self.feature_input.end = run.sae.d_sae - 1
        if self.settings.feature >= run.sae.d_sae or (order and run.index.fired[self.settings.feature] == 0):
            self.settings.feature = order[0] if order else 0
        self.feature_list.param.update(options=options,
                                       value=self.settings.feature if self.settings.feature in order else None)

    def _on_sort(self, event: Any) -> None:
        self.sort.value = event.new
        self._fill_list()

    def _on_list(self, event: Any) -> None:
        if event.new is not None and event.new != self.settings.feature:
            self.settings.feature = int(event.new)

    def _on_feature(self, *_: object) -> None:
        f = self.settings.feature
        if self.feature_list.value != f and f in self.feature_list.options.values():
            self.feature_list.value = f
        self._draw_feature()

    def _draw_feature(self) -> None:
        run, sae = self.run, self.sae
        if sae is None:
            return
        start = time.perf_counter()
        f = min(self.settings.feature, sae.d_sae - 1)
        self.page.object = feature_html(run.index, sae, self.state, f)
        self.feature_ms = 1000 * (time.perf_counter() - start)

    def _draw_prompt(self, *_: object) -> None:
        sae, state = self.sae, self.state
        if sae is None:
            return
        acts = S.prompt_features(sae, state.model, state.tokens.ids)
        labels = state.tokens.labels
        at = state.selected_position
        here = S.firing(acts[at], 12)
        self.prompt_note.object = (
            f"<p class='pg-summary'>Choose a token in the strip above the views (click, or the arrow keys): its "
            f"features are listed here. The selected token is “{esc(labels[at])}” (position {at}): "
            f"{len(here)} feature{'s' if len(here) != 1 else ''} fire there.</p>")
        self.at_token.param.update(options={f"#{f} · {a:.2f}": f for f, a in here}, value=None)
        rows = []
        for t, label in enumerate(labels):
            top = S.firing(acts[t], 3)
            rows.append([f"{t} {label}", ", ".join(f"#{f} ({a:.1f})" for f, a in top) or "none"])
        self.prompt_table.object = ("<div class='pg-scroll' tabindex='0' role='region' aria-label='The strongest "
                                    "features at each position'>" +
                                    table_rows_html(["position and token", "strongest features (activation)"], rows) +
                                    "</div>")

    # ---- steering ----

    async def steer(self) -> None:
        sae, state = self.sae, self.state
        if sae is None or self.steering:
            return
        self.steering, self._stop_steer = True, False
        self._buttons()
        f, alpha = self.settings.feature, float(self.settings.alpha)
        end = state.tokenizer.index.get(END)
        # One token of each per pass (both texts in one batch): the two texts grow side by side.
        pairs = S.steer(state.model, sae, f, alpha, state.tokens.ids, state.max_new_tokens, state.seed,
                        temperature=state.temperature, top_k=state.top_k or None,
                        top_p=state.top_p if state.top_p < 1 else None, stop_ids=() if end is None else (end,))
        texts: dict[str, list[int]] = {"steered": [], "plain": []}
        model, spent, drawn = state.model, 0.0, 0.0
        try:
            while True:
                start = time.perf_counter()
                pair = next(pairs, None)
                spent += time.perf_counter() - start  # the generation's own time, not the page's
                if pair is None:
                    break
                for name, step in zip(("steered", "plain"), pair, strict=True):
                    if step is not None:
                        texts[name].append(int(step.token))
                # Both panes are patched at most every STEER_DRAW seconds (each patch resends their whole text, and
                # is sent as it is made: the page draws it on its own thread); between patches a token only yields
                # to the event loop, where Stop is heard.
                if time.perf_counter() - drawn > STEER_DRAW:
                    self._show_steer(f, alpha, texts, running=True)
                    drawn = time.perf_counter()
                await asyncio.sleep(0)
                if self._stop_steer or state.model is not model:
                    break
        finally:
            n = len(texts["steered"]) + len(texts["plain"])
            self.steer_rate = n / spent if spent > 0 else 0.0
            self.steering = False
            self._show_steer(f, alpha, texts, running=False)
            self._buttons()

    def _show_steer(self, f: int, alpha: float, texts: dict[str, list[int]], running: bool) -> None:
        vocab = self.state.tokenizer
        prompt = esc(self.state.prompt)

        def text(ids: list[int]) -> str:
            return esc(vocab.decode(ids)) + ("<span class='pg-cursor'>▍</span>" if running else "")

        self.steered.object = (f"<p class='pg-summary'><b>Steered</b> (feature #{f}, α = {alpha:g})</p>"
                               f"<div class='pg-stream'><span class='pg-prompt'>{prompt}</span> "
                               f"<span class='pg-steered'>{text(texts['steered'])}</span></div>")
        self.unsteered.object = (f"<p class='pg-summary'><b>Not steered</b></p><div class='pg-stream'>"
                                 f"<span class='pg-prompt'>{prompt}</span> <span class='pg-unsteered'>"
                                 f"{text(texts['plain'])}</span></div>")

    def update(self, *_: object) -> None:
        """The model or the prompt changed while the view was hidden: catch up."""
        self._on_model()
        if self.sae is not None:
            self._draw_prompt()


def feature_html(index: S.FeatureIndex, sae: S.SAE, state: PlaygroundState, f: int, n: int = 8) -> str:
    """One feature's page: its numbers, its top contexts (the token it fired on marked), and its logit effect."""
    vocab = state.tokenizer
    joiner = " " if vocab.words else ""
    density, mean, top = index.density[f], index.mean_activation[f], index.max[f]
    head = (f"<h4 class='pg-title'>Feature #{f}</h4><p class='pg-summary'>Fires on {100 * density:.2g} % of "
            f"{index.rows} positions; mean activation where it fires {mean:.2f}, largest {top:.2f}.</p>")
    items = []
    for c in index.top_contexts(f, n, before=6, after=2):
        words = [esc(vocab.vocab[i]) for i in c.tokens]
        words[c.at] = f"<mark>{words[c.at]}</mark>"
        items.append(f"<li><span class='pg-context'>{joiner.join(words)}</span> "
                     f"<span class='pg-act'>({c.activation:.2f})</span></li>")
    contexts = (f"<p class='pg-summary'><b>Where it fires most</b> (the marked token; its activation):</p>"
                f"<ol class='pg-contexts'>{''.join(items)}</ol>" if items else
                "<p class='pg-summary'>It did not fire on the indexed positions.</p>")
    promoted, suppressed = S.logit_effect(sae, state.model, f, 8)

    def listing(pairs: list[tuple[int, float]]) -> str:
        return ", ".join(f"<b>{esc(vocab.vocab[i])}</b> ({v:+.2f})" for i, v in pairs)

    effect = (f"<p class='pg-summary'><b>Logit effect</b> (W_dec[{f}] through the final norm to the unembedding; "
              f"direct effect only): promotes {listing(promoted)}; suppresses {listing(suppressed)}.</p>")
    return head + contexts + effect


def _filename(name: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in name.replace(": ", "-")).strip("-")
    return f"sae-{safe or 'model'}.zip"
