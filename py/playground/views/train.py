"""Train: a small transformer trained in the page, its heads watched as they form.

slm.train.lab runs the training; this view drives it in short chunks from an async loop (the page's one
Python thread also answers every other control between chunks) and feeds the charts: loss, the task's measure,
every head's role scores against the step, and the probe prompt's attention at the step the learner picks (a click
on a chart, or the step box: a number field, which keyboards and screen readers work, unlike a drag slider's
unlabelled handle).
"""

from __future__ import annotations

import asyncio
import io
import time
from typing import Any

import numpy as np
import panel as pn
import param
from bokeh.events import Tap
from bokeh.models import ColumnDataSource, HoverTool, LinearColorMapper, Range1d, Span

from slm.train.lab import ROLE_NAMES, Lab
from slm.train.tasks import LIMITS, MAX_TEXT_BYTES, PRESETS, QUERY_KEYS, TASKS, decode_text

from .. import library
from ..models import START
from ..state import PlaygroundState, ViewSettings
from .common import (
    NEGATIVE,
    POSITIVE,
    WEIGHT_PALETTE,
    Numbers,
    View,
    caption,
    chart_box,
    esc,
    in_background,
    patches_bokeh,
    save_tool,
    small_figure,
    title,
    wrap_row,
)

CHUNK = 0.04  # seconds of training between UI turns: a click or Pause waits at most about this
GRACE = 0.3  # seconds without training after a change made in the page: its layout then has the machine to itself
REDRAW = 0.3  # seconds between chart updates while training
ROLE_TITLES = {"previous_token": "previous token", "induction": "induction", "duplicate_token": "duplicate token"}
TASK_LABELS = {"repeat": "Repeat a random sequence", "grammar": "The playground's grammar", "text": "Your own text"}
TASK_NOTES = {
    "repeat": "Each training sequence is a run of random words written twice. The second copy can be predicted "
              "only by looking back: watch the loss drop suddenly when a <b>previous-token</b> head and an "
              "<b>induction</b> head form together (the phase change), and the accuracy on the repeated half jump.",
    "grammar": "Sentences of the playground's grammar. Number agreement (“the cats … were”) appears within a "
               "thousand steps; the pronoun head takes several thousand.",
    "text": "Paste a text or open a .txt file (up to 1 MB). The model reads words when the text has at most 2,000 "
            "different words, else characters. The measure: how far the loss is below guessing each token by its "
            "frequency alone.",
}
HEAD_COLORS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#999999")


def _setting(field: str) -> param.Parameter:
    """A run's setting (slm.train.tasks.Settings): the repeat preset's value, within the lab's limits."""
    limit, default = LIMITS[field], getattr(PRESETS["repeat"], field)
    if isinstance(default, float):
        return param.Number(default=default, bounds=(limit.low, limit.high), doc=limit.what)
    return param.Integer(default=default, bounds=(int(limit.low), int(limit.high)), doc=limit.what)


class TrainSettings(ViewSettings):
    """The training lab's task, the settings of its run (named as slm.train.tasks.Settings' fields, under its
    URL keys train_layers, ...), and whether a run starts by itself once the page is ready."""

    URL = {"task": "task", "autostart": "autostart", **QUERY_KEYS}

    task = param.Selector(default="repeat", objects=list(TASKS), doc="What the model learns")
    autostart = param.Boolean(default=False, doc="Start training once the page is ready")
    layers = _setting("layers")
    heads = _setting("heads")
    d_model = _setting("d_model")
    ctx = _setting("ctx")
    steps = _setting("steps")
    batch = _setting("batch")
    lr = _setting("lr")
    seed = _setting("seed")

    def __init__(self, state: PlaygroundState, **params: Any) -> None:
        self._task_before = "repeat"  # the task whose preset the settings' defaults are
        super().__init__(state, **params)

    @param.depends("task", watch=True)
    def _preset(self) -> None:
        """Another task brings its preset, except for the settings the learner (or the link) changed."""
        old, new = PRESETS[self._task_before], PRESETS[self.task]
        self._task_before = self.task
        self.param.update(**{field: getattr(new, field) for field in QUERY_KEYS
                             if getattr(self, field) == getattr(old, field)})

    def use_preset(self) -> None:
        self.param.update(**PRESETS[self.task].to_dict())

    def run_settings(self) -> dict[str, Any]:
        """What Lab takes: {Settings field: value}."""
        return {field: getattr(self, field) for field in QUERY_KEYS}


class TrainView(View):
    def __init__(self, settings: TrainSettings) -> None:
        self.settings = settings
        self.state = settings.state
        self.run: Lab | None = None
        self.task: asyncio.Future | None = None
        self.running = False
        self.text = ""
        self._last_draw = 0.0
        self._last_heard = 0.0  # time.monotonic() of the last change the page sent (_heard)
        self._listening: Any = None  # the document _heard listens to
        self._grid_shape: tuple | None = None
        self._drawn_steps: list[int] | None = None  # the evaluations the curves show
        self._drawn_attention: tuple | None = None  # (run, checkpoint step) the grid shows
        self._build_controls()
        self._build_charts()
        self.numbers = Numbers("train")
        self.alt = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width")
        self._show_settings()
        # The charts appear with the first run (empty axes would only look broken).
        self.charts = pn.Column(
            wrap_row(*self.boxes[:2], styles={"flex-wrap": "wrap", "align-items": "flex-start"}),
            self.role_row, self.step_row, self.grid_note, self.attention_box, self.sample, self.alt,
            self.numbers.button,
            sizing_mode="stretch_width", visible=False)
        self.panel = pn.Column(
            title("Train a transformer"),
            caption("Train a small model here, in this page, and watch its attention heads form. Choose a task, "
                    "press <b>Start</b>; the charts follow the training. Click a chart at an earlier step (or type "
                    "the step) to see the heads before they formed. When you like the model, <b>Explore this "
                    "model</b> opens it in every view."),
            self.task_note, self.controls, self.text_box, self.buttons, self.status, self.charts,
            name="Train", sizing_mode="stretch_width",
        )

    # ---- controls ----

    def _build_controls(self) -> None:
        settings = self.settings
        self.task_select = pn.widgets.Select.from_param(settings.param.task, label="Task", width=240,
                                                        description=None, options={v: k for k, v in
                                                                                   TASK_LABELS.items()})
        self.task_select.param.watch(self._on_task, "value")
        inputs = []
        for field in QUERY_KEYS:
            limit = LIMITS[field]
            widget = pn.widgets.FloatInput if field == "lr" else pn.widgets.IntInput
            label = {"d_model": "d_model", "ctx": "context", "lr": "learning rate"}.get(field, field)
            extra = {"step": 1e-4, "format": "0.0000"} if field == "lr" else {}
            inputs.append(widget.from_param(settings.param[field], label=label, width=110, description=None,
                                            start=limit.low, end=limit.high, **extra))
        self.preset = pn.widgets.Button(label="Use the task's preset", variant="outline", color="primary",
                                        width=200, align="end", css_classes=["pg-press"])
        self.preset.on_click(lambda _: self._apply_preset())
        self.controls = wrap_row(self.task_select, *inputs, self.preset, margin=(0, 10))
        self.task_note = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width")
        self.text_input = pn.widgets.TextAreaInput(label="Your text", rows=5, sizing_mode="stretch_width",
                                                   max_length=MAX_TEXT_BYTES, placeholder="Paste a text here…")
        self.text_file = pn.widgets.FileInput(label="…or open a .txt file", accept=".txt,text/plain",
                                              margin=(4, 10))
        self.text_file.param.watch(self._on_text_file, "value")
        self.text_box = pn.Column(self.text_input, self.text_file, sizing_mode="stretch_width")
        self.start_button = pn.widgets.Button(label="Start", color="primary", width=100, css_classes=["pg-press"])
        # outline: white text on the warning colour fails WCAG contrast while it is enabled
        self.pause_button = pn.widgets.Button(label="Pause", color="primary", variant="outline", width=100,
                                              disabled=True, css_classes=["pg-press"])
        self.reset_button = pn.widgets.Button(label="Reset", variant="outline", color="primary", width=100,
                                              disabled=True, css_classes=["pg-press"])
        self.explore = pn.widgets.Button(label="Explore this model", color="primary", width=180, disabled=True,
                                         css_classes=["pg-press"])
        self.download = pn.widgets.FileDownload(callback=self._npz, filename="trained.npz", disabled=True,
                                                label="Download the model (.npz)", variant="outline",
                                                color="primary", width=240, css_classes=["pg-press"])
        self.start_button.on_click(lambda _: self._schedule(self.start()))
        self.pause_button.on_click(lambda _: self.pause_or_resume())
        self.reset_button.on_click(lambda _: self.reset())
        self.explore.on_click(lambda _: self._schedule(self.explore_model()))
        self.buttons = wrap_row(self.start_button, self.pause_button, self.reset_button, self.explore,
                                self.download, margin=(4, 10))
        self.status = pn.pane.HTML("<div role='status' class='pg-summary'>Not started.</div>", margin=(0, 10),
                                   sizing_mode="stretch_width")

    def _on_task(self, event: Any) -> None:
        self._show_settings()  # the settings have brought the task's preset (TrainSettings._preset)

    def _apply_preset(self) -> None:
        self.settings.use_preset()
        self._show_settings()

    def _show_settings(self) -> None:
        self.task_note.object = f"<p class='pg-caption'>{TASK_NOTES[self.settings.task]}</p>"
        self.text_box.visible = self.settings.task == "text"

    def _on_text_file(self, event: Any) -> None:
        data = event.new
        if not data:
            return
        try:
            self.text_input.value = decode_text(data)
        except ValueError as exc:
            self._say(f"That file was not used: {exc}")

    # ---- training ----

    def _schedule(self, coroutine: Any) -> None:
        self.task = in_background(coroutine, self._failed)

    def _failed(self, exc: BaseException) -> None:
        self.running = False
        self._say(f"Training stopped: {exc}")
        self._buttons()

    async def start(self) -> None:
        """A new run with the current settings (the old one is dropped), then train until done or paused."""
        settings = self.settings
        self.running = False
        await asyncio.sleep(0)
        # value_input follows every key press; value only a change (leaving the box), which a quick Start precedes
        text = (self.text_input.value_input or self.text_input.value) if settings.task == "text" else None
        try:
            self.run = Lab(settings.task, settings.run_settings(), text=text)
        except ValueError as exc:
            self._say(f"Not started: {exc}")
            return
        self._draw(force=True)
        await self.resume()

    async def resume(self) -> None:
        if self.run is None or self.run.finished or self.running:
            return
        self.running = True
        self._buttons()
        run = self.run
        # While the learner looks at another view the charts wait (`catch_up` draws them on return): the page
        # would otherwise lay out the hidden charts at every draw, and its clicks would queue behind that.
        draw = self.when_shown(self._draw)
        self._listen()
        try:
            while self.running and run is self.run and not run.finished:
                run.run_for(CHUNK)
                if time.monotonic() - self._last_draw > REDRAW or run.finished:
                    draw()
                await asyncio.sleep(0.005)  # the page's other events run here
                while self.running and (wait := self._last_heard + GRACE - time.monotonic()) > 0:
                    await asyncio.sleep(wait)
        except Exception as exc:  # noqa: BLE001 - a failed step must reach the learner, not a console
            self._say(f"Training stopped: {exc}")
        finally:
            if run is self.run:
                self.running = False
                self._draw(force=True)
                self._buttons()

    def _listen(self) -> None:
        doc = pn.state.curdoc
        if doc is not None and doc is not self._listening:
            doc.on_change(self._heard)
            self._listening = doc

    def _heard(self, event: Any) -> None:
        if getattr(event, "setter", None) is not None:  # set by the page (Python's own changes have no setter)
            self._last_heard = time.monotonic()

    def pause_or_resume(self) -> None:
        if self.running:
            self.running = False  # the loop stops after its current chunk
        else:
            self._schedule(self.resume())

    def reset(self) -> None:
        self.running = False
        self.run = None
        self._clear()
        self._say("Not started.")
        self._buttons()

    async def explore_model(self) -> None:
        if self.run is None:
            return
        step = None if self.following else int(self.step_input.value)
        model = self.run.model() if step is None else self.run.model_at(step)
        if step is not None:
            model.meta.update(name=f"{self.run.name.rsplit(',', 1)[0]}, step {model.meta['step']})")
        # The views open on the run's own probe (for the repeat task, a repeated sequence): the shown prompt was
        # written for another model's vocabulary.
        probe = [i for i in self.run.task.probe.tolist() if self.run.task.tokenizer.vocab[i] != START]
        name = self.state.add_model(model, "trained")
        self.state.prompt = self.run.task.tokenizer.decode(probe)
        self.state.view = "map"
        await self.state.shelf.keep(name, model, f"{name} is now the model of every view.")

    def _npz(self) -> io.BytesIO:
        model = self.run.model() if self.run is not None else self.state.model
        return io.BytesIO(library.model_bytes(model))

    def _buttons(self) -> None:
        run = self.run
        self.pause_button.disabled = run is None or run.finished
        self.pause_button.label = "Pause" if self.running else "Resume"
        self.reset_button.disabled = run is None
        has_steps = run is not None and run.step_count > 0
        self.explore.disabled = self.download.disabled = self.running or not has_steps
        self.start_button.label = "Start again" if run is not None else "Start"

    def _say(self, text: str) -> None:
        self.status.object = f"<div role='status' class='pg-summary'>{esc(text)}</div>"

    # ---- charts ----

    def _set_step(self, step: int) -> None:
        self._setting = True
        try:
            self.step_input.value = step
        finally:
            self._setting = False

    def _on_step(self, event: Any) -> None:
        if getattr(self, "_setting", False) or self.run is None:
            return
        self.following = event.new >= self.run.step_count
        self._draw_attention()

    def _on_tap(self, event: Any) -> None:
        if self.run is None or event.x is None:
            return
        self.step_input.value = int(min(max(round(event.x), 0), self.run.step_count))

    def _build_charts(self) -> None:
        self.loss_source = ColumnDataSource(data=dict(step=[], train=[], val=[]))
        # Ranges are set from the data as it comes (figures without data cannot fit DataRange1d and say so).
        self.step_range = Range1d(0, 1)
        self.loss_range = Range1d(0, 1)
        loss = small_figure(title="Loss", sizing_mode="stretch_width", min_width=200, height=240,
                            x_axis_label="step", y_axis_label="cross-entropy", name="train-loss",
                            x_range=self.step_range, y_range=self.loss_range)
        loss.line("step", "train", source=self.loss_source, color=POSITIVE, line_width=2, legend_label="training")
        loss.line("step", "val", source=self.loss_source, color=NEGATIVE, line_width=2, line_dash="dashed",
                  legend_label="validation")
        loss.legend.location = "top_right"
        loss.legend.label_text_font_size = "10px"
        self.measure_source = ColumnDataSource(data=dict(step=[], measure=[]))
        measure = small_figure(title="The task's measure", sizing_mode="stretch_width", min_width=200, height=240,
                               x_axis_label="step", x_range=self.step_range, y_range=Range1d(0, 1.02),
                               name="train-measure")
        measure.line("step", "measure", source=self.measure_source, color=POSITIVE, line_width=2)
        measure.scatter("step", "measure", source=self.measure_source, color=POSITIVE, size=4)
        self.measure_fig = measure
        self.step_figures = [loss, measure]
        self.boxes = [chart_box(save_tool(loss, "train-loss"), 420),
                      chart_box(save_tool(measure, "train-measure"), 420)]
        self.role_sources: dict[str, ColumnDataSource] = {}
        role_boxes = []
        for role in ROLE_NAMES:
            source = ColumnDataSource(data=dict(xs=[], ys=[], head=[], color=[]))
            fig = small_figure(title=f"{ROLE_TITLES[role]} score", sizing_mode="stretch_width",
                               min_width=200, height=220, x_axis_label="step", x_range=self.step_range,
                               y_range=Range1d(0, 1.02), name=f"train-{role}")
            fig.multi_line("xs", "ys", source=source, line_color="color", line_width=2)
            self.step_figures.append(fig)
            fig.add_tools(HoverTool(tooltips=[("head", "@head")]))
            self.role_sources[role] = source
            role_boxes.append(chart_box(save_tool(fig, f"train-{role}"), 320))
        self.role_row = wrap_row(*role_boxes, styles={"flex-wrap": "wrap", "align-items": "flex-start"})
        self.step_input = pn.widgets.IntInput(label="Step shown", value=0, start=0, end=PRESETS["repeat"].steps,
                                              width=140, margin=(4, 10), description=None)
        self.step_input.param.watch(self._on_step, "value")
        self.following = True  # the shown step follows the newest checkpoint until the learner picks one
        self.step_row = wrap_row(self.step_input, caption("Click any chart above at a step to show the heads "
                                                          "as they were then."), margin=(0, 10))
        self.markers = []
        for fig in self.step_figures:
            marker = Span(location=0, dimension="height", line_color="#444444", line_dash="dotted", line_width=1)
            fig.add_layout(marker)
            fig.on_event(Tap, self._on_tap)
            self.markers.append(marker)
        self.attention_source = ColumnDataSource(data=dict(x=[], y=[], w=[], head=[], q=[], k=[]))
        self.mapper = LinearColorMapper(palette=WEIGHT_PALETTE, low=0.0, high=1.0)
        att = small_figure(title="Attention",
                           sizing_mode="stretch_width", min_width=200, height=300, name="train-attention",
                           x_range=Range1d(-0.5, 0.5), y_range=Range1d(0.5, -0.5))
        att.rect("x", "y", 1, 1, source=self.attention_source, line_color=None,
                 fill_color={"field": "w", "transform": self.mapper})
        att.add_tools(HoverTool(tooltips=[("head", "@head"), ("query → key", "@q → @k"), ("weight", "@w{0.00}")]))
        att.axis.visible = False
        att.grid.visible = False
        self.attention_fig = att
        self.attention_box = chart_box(save_tool(att, "train-attention"), 900)
        self.sample = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width")
        self.grid_note = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width")

    @patches_bokeh
    def _clear(self) -> None:
        self.charts.visible = False
        self.loss_source.data = dict(step=[], train=[], val=[])
        self.measure_source.data = dict(step=[], measure=[])
        for source in self.role_sources.values():
            source.data = dict(xs=[], ys=[], head=[], color=[])
        self.attention_source.data = dict(x=[], y=[], w=[], head=[], q=[], k=[])
        self._grid_shape = None
        self._drawn_steps, self._drawn_attention = None, None
        self.sample.object = self.alt.object = ""
        self.following = True

    @patches_bokeh
    def _draw(self, force: bool = False) -> None:
        run = self.run
        if run is None:
            return
        self._last_draw = time.monotonic()
        self.charts.visible = True
        text = run.status()
        self.status.object = f"<div role='status' class='pg-summary'>{esc(text)}</div>"
        if self.following:
            self._set_step(run.step_count)
        self._draw_attention()
        h = run.history()
        steps = h["eval_step"].tolist()
        if not force and not run.finished and steps == self._drawn_steps:
            return  # no evaluation since the last draw: the curves are as they were
        self._drawn_steps = steps
        self.loss_source.data = dict(step=steps, train=_finite(h["eval_train_loss"]), val=_finite(h["val_loss"]))
        self.measure_source.data = dict(step=steps, measure=_finite(h["measure"]))
        self.measure_fig.title.text = run.task.measure_name
        self.step_range.end = max(run.settings.steps, 1)
        losses = [v for v in (*h["eval_train_loss"], *h["val_loss"]) if np.isfinite(v)]
        self.loss_range.end = 1.05 * max(losses) if losses else 1.0
        layers, heads = run.settings.layers, run.settings.heads
        for role, source in self.role_sources.items():
            scores = h["roles"][role]
            source.data = dict(
                xs=[steps] * (layers * heads),
                ys=[_finite(scores[:, i, j]) for i in range(layers) for j in range(heads)],
                head=[f"layer {i} · head {j}" for i in range(layers) for j in range(heads)],
                color=[HEAD_COLORS[(i * heads + j) % len(HEAD_COLORS)] for i in range(layers) for j in range(heads)])
        self.step_input.end = run.settings.steps
        if force or run.finished:
            self._text_alternative(run, h)
            try:
                sample = esc(run.sample(24, seed=run.step_count))
                self.sample.object = (f"<p class='pg-summary'><b>A sample</b> (step {run.step_count}): "
                                      f"<span class='pg-generated'>{sample}</span></p>")
            except ValueError as exc:
                self.sample.object = f"<p class='pg-summary'>{esc(exc)}</p>"

    @patches_bokeh
    def _draw_attention(self) -> None:
        run = self.run
        if run is None:
            return
        earlier = [c for c in run.checkpoint_steps if c <= int(self.step_input.value)]
        step = earlier[-1] if earlier else run.checkpoint_steps[0]  # the checkpoint the model is taken from
        if (run, step) == self._drawn_attention:
            return  # the same checkpoint as the grid shows
        self._drawn_attention = (run, step)
        for marker in self.markers:
            marker.location = step
        attention = run.attention(step)  # (L, H, T, T)
        layers, heads, n, _ = attention.shape
        words = run.task.probe_words()
        if self._grid_shape != (layers, heads, n, tuple(words)):
            # The grid's layout and labels change only with the run: sent once, then only the weights move.
            self._grid_shape = (layers, heads, n, tuple(words))
            q, k = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
            xs = [(j * (n + 2) + k).ravel() for i in range(layers) for j in range(heads)]
            ys = [(i * (n + 2) + q).ravel() for i in range(layers) for j in range(heads)]
            self.attention_source.data = dict(
                x=np.concatenate(xs), y=np.concatenate(ys), w=attention.reshape(-1),
                head=[f"layer {i} · head {j}" for i in range(layers) for j in range(heads) for _ in range(n * n)],
                q=[words[a] for a in q.ravel()] * (layers * heads), k=[words[b] for b in k.ravel()] * (layers * heads))
        else:
            self.attention_source.data["w"] = attention.reshape(-1)
        fig = self.attention_fig
        fig.x_range.start, fig.x_range.end = -0.5, heads * (n + 2) - 2.5
        fig.y_range.start, fig.y_range.end = layers * (n + 2) - 2.5, -0.5  # the first query row on top
        self.attention_fig.title.text = f"Attention at step {step}"
        probe = esc(" ".join(words))
        self.grid_note.object = (f"<p class='pg-summary'>Showing the heads at step {step}: the attention of every "
                                 f"head on the probe prompt “{probe}” (one square per head, layers in rows; a "
                                 "square's rows are query positions, its columns key positions).</p>")

    def _text_alternative(self, run: Lab, h: dict[str, Any]) -> None:
        steps = h["eval_step"].tolist()
        header = ["step", "training loss", "validation loss", run.task.measure_name]
        rows = [[s, float(t), float(v), float(m)] for s, t, v, m in
                zip(steps, h["eval_train_loss"], h["val_loss"], h["measure"], strict=True)]
        best = {role: np.nanmax(h["roles"][role][-1]) if np.isfinite(h["roles"][role][-1]).any() else float("nan")
                for role in ROLE_NAMES}
        summary = (f"After {run.step_count} steps: validation loss {h['val_loss'][-1]:.3f}, "
                   f"{esc(run.task.measure_name)} {h['measure'][-1]:.2f}. Strongest head per role: "
                   + ", ".join(f"{ROLE_TITLES[r]} {v:.2f}" for r, v in best.items()) + ".")
        self.alt.object = self.numbers.record("training curve", summary, "The training curve as numbers",
                                              header, rows)
        role_rows = [[f"layer {i} · head {j}", *[float(h["roles"][r][-1][i, j]) for r in ROLE_NAMES]]
                     for i in range(run.settings.layers) for j in range(run.settings.heads)]
        self.numbers.tables["role scores now"] = (["head", *[ROLE_TITLES[r] for r in ROLE_NAMES]], role_rows)

    def update(self, *_: object) -> None:
        """Nothing follows the prompt here: the view draws its own run (and catches up with it when shown)."""
        self._draw()


def _finite(values: np.ndarray) -> list[float]:
    """NaN for Bokeh (a gap in the line) as float('nan'), everything as plain floats."""
    return [float(v) for v in np.asarray(values, dtype=float)]
