"""Patching: which activations carry the difference one token makes to the answer.

The prompt is the clean run; the corrupted run has one token changed. The metric is logit(good) − logit(bad)
at the last position. Each cell re-runs one prompt with one activation taken from the other run — the residual
entering a block at one position, or one head's output — and shows how much of the way that moves the metric
from the run's own value to the other run's (slm.interventions.activation_patching). Click a cell to see that
patched run.

A large model's grid takes seconds (hundreds of patched forward passes): the first FIRST seconds run at once (a
small model's grid is done by then), the rest in steps of STEP seconds from an async loop, so that the page's other
controls are answered between them. The grid fills in as it goes, with the progress in words and a button that stops it.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np
import panel as pn
import param
from bokeh.events import Tap
from bokeh.models import ColorBar, ColumnDataSource, HoverTool, LinearColorMapper, Range1d
from bokeh.palettes import RdBu11

from slm.interventions import Site

from .. import analysis, circuits
from ..state import ViewSettings
from .common import (
    View,
    caption,
    chart_box,
    esc,
    fit_box,
    in_background,
    label_axis,
    patches_bokeh,
    small_figure,
    title,
    wrap_row,
)

PALETTE = RdBu11[::-1]  # blue = towards the other run's answer, red = away from it; colour-blind safe pair
HOVER = [("patch", "@what"), ("metric", "@metric{0.000}"), ("moved", "@moved_text")]
FIRST = 0.15  # seconds of patching before the view first draws (the shipped model's grid is done by then)
STEP = 0.15  # seconds of patching between the page's other events: a click waits at most about this
REDRAW = 1.0  # seconds between drawings of a grid that is filling in
# The example per model: the prompt, the one-token change, the two tokens of the metric.
PATCH_EXAMPLES = {
    "shipped": dict(prompt="the cat near the dogs", patch_position=2, patch_token="cats", good_token="was",
                    bad_token="were"),
    "lesson": dict(prompt="the cat was", patch_position=2, patch_token="dog", good_token="tired", bad_token="lay"),
}


class PatchingSettings(ViewSettings):
    """The experiment: the prompt is the clean run; the corrupted one has patch_token at patch_position."""

    URL = {"patch_position": "patch_pos", "patch_token": "patch_token", "good_token": "good", "bad_token": "bad",
           "patch_from": "patch_from"}

    patch_position = param.Integer(default=2, bounds=(1, None), doc="The position whose token changes")
    patch_token = param.String(default="cats", doc="The token the corrupted prompt has there")
    good_token = param.String(default="was", doc="Metric: logit(good) - logit(bad) at the last position")
    bad_token = param.String(default="were")
    patch_from = param.Selector(default="clean", objects=["clean", "corrupted"],
                                doc="clean: clean activations into the corrupted run (recovery); or the other way")

    def load_example(self) -> None:
        """The example for the model shown (the trained or the lesson one)."""
        example = PATCH_EXAMPLES["shipped" if self.state.model_name == "shipped" else "lesson"]
        with param.parameterized.batch_call_watchers(self):
            self.param.update(**{k: v for k, v in example.items() if k != "prompt"})
            self.state.prompt = example["prompt"]


class PatchingView(View):
    def __init__(self, settings: PatchingSettings) -> None:
        self.settings = settings
        self.state = state = settings.state
        self.run: circuits.PatchRun | None = None
        self.site: Site | None = None
        self.mapper = LinearColorMapper(palette=PALETTE, low=-1.0, high=1.0, nan_color="#eeeeee")
        self.resid_source = ColumnDataSource(data=_empty())
        self.head_source = ColumnDataSource(data=_empty())
        self.resid_fig = self._figure(self.resid_source, "patching-residual", "position", "resid")
        self.head_fig = self._figure(self.head_source, "patching-heads", "head", "head")
        self.boxes = {fig: chart_box(fig, 420) for fig in (self.resid_fig, self.head_fig)}
        self.head_fig.add_layout(ColorBar(color_mapper=self.mapper, width=10, title="moved",
                                          title_text_font_size="11px", major_label_text_font_size="10px"), "right")
        # the experiment's settings: live in the view's settings (a link restores them)
        own = settings.param
        self.position = pn.widgets.IntInput.from_param(own.patch_position, name="Change position", width=130)
        self.token = pn.widgets.TextInput.from_param(own.patch_token, name="to the token", width=130)
        self.good = pn.widgets.TextInput.from_param(own.good_token, name="Metric: logit of", width=130)
        self.bad = pn.widgets.TextInput.from_param(own.bad_token, name="minus logit of", width=130)
        self.direction = pn.widgets.Select.from_param(
            own.patch_from, name="Patch", width=250,
            options={"clean → corrupted run (recovery)": "clean", "corrupted → clean run (damage)": "corrupted"})
        self.example = pn.widgets.Button(label="Load the example", color="primary", variant="outline",
                                         margin=(26, 5, 5, 5), width=150)
        self.example.on_click(lambda _: settings.load_example())
        self.summary = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width")
        self.detail = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width")
        self.show_button = pn.widgets.Button(label="Show this patched run in the other views", visible=False,
                                             color="primary", margin=(0, 10, 8, 10), width=330)
        self.show_button.on_click(self._show_in_views)
        self.stop_button = pn.widgets.Button(label="Stop the grid", visible=False, variant="outline", color="primary",
                                             margin=(0, 10, 8, 10), width=160)
        self.stop_button.on_click(self._stop_or_continue)
        self.running = False
        self.loops = 0  # how many filling loops were started: only the last one runs
        self.task: asyncio.Future | None = None
        pn.bind(self.when_shown(self.update), state.param.trace, own.patch_position, own.patch_token, own.good_token,
                own.bad_token, own.patch_from, watch=True)
        self.update()
        self.panel = pn.Column(
            title("Patching: where does one token's difference travel?"),
            caption("Two runs that differ in one token: the prompt above (<i>clean</i>) and the same prompt with one "
                    "token changed (<i>corrupted</i>). The metric is how much the model prefers one next token "
                    "over another after the last token: <code>logit(good) − logit(bad)</code>. Each cell re-runs "
                    "one prompt with a single activation copied from the other run — the residual stream entering "
                    "a layer at one position, or one head's output — and shows how far that moves the metric "
                    "towards the other run's value (1 = all the way, 0 = not at all). Click a cell to see the "
                    "patched run."),
            wrap_row(self.position, self.token, self.good, self.bad),
            wrap_row(self.direction, self.example),
            self.summary, self.stop_button,
            wrap_row(*self.boxes.values(), styles={"flex-wrap": "wrap", "align-items": "flex-start"}),
            self.detail, self.show_button,
            name="Patching", sizing_mode="stretch_width",
        )

    def _figure(self, source: ColumnDataSource, name: str, x_label: str, kind: str):
        fig = small_figure(sizing_mode="stretch_width", min_width=260, height=200, x_range=Range1d(-0.5, 0.5),
                           y_range=Range1d(0.5, -0.5), name=name)
        fig.rect("x", "y", 0.95, 0.95, source=source, line_color="line", line_width=2,
                 fill_color={"field": "moved", "transform": self.mapper})
        fig.add_tools(HoverTool(tooltips=HOVER))
        fig.grid.visible = False
        fig.xaxis.axis_label, fig.yaxis.axis_label = x_label, "layer"
        fig.on_event(Tap, lambda event: self._on_tap(kind, event))
        return fig

    # ---- updating ----

    @patches_bokeh
    def update(self, *_: object) -> None:
        """Re-run the experiment (while the view is shown, as every view: the other tabs do not wait for its
        forward passes)."""
        state, own = self.state, self.settings
        if state.run_note:  # the views show a patched run already: keep the experiment as it was
            return
        self.site = None
        self.running = False  # a grid still filling in for the old settings stops at its next step
        self.run = run = circuits.patch_run(
            state.model, state.tokenizer, state.tokens.ids, state.tokens.labels, own.patch_position,
            own.patch_token.strip(), own.good_token.strip(), own.bad_token.strip(), own.patch_from, state.trace)
        if run.error:
            self.summary.object = (f"<div class='pg-note'>{esc(run.error)} Change the settings above, or press "
                                   "<i>Load the example</i>.</div>")
            self.resid_source.data, self.head_source.data = _empty(), _empty()
            self.stop_button.visible = False
            for box in self.boxes.values():  # their axes would still name the last grid's tokens and layers
                box.visible = False
            self._show_detail()
            return
        run.job.run_for(FIRST)
        self._draw_grid()
        if not run.job.finished:
            self._continue()

    def _continue(self) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no event loop (a script or a test): finish the grid here
            self.run.job.run_for(float("inf"))
            self._draw_grid()
            return
        self.running = True
        self._draw_grid()
        self.loops += 1
        self.task = in_background(self._fill(self.run, self.loops), self._failed)

    async def _fill(self, run: circuits.PatchRun, loop: int) -> None:
        """Fill in `run`'s grid until it is complete, replaced or stopped (a Continue pressed while this loop still
        waits starts another: `loop` tells this one to end)."""
        last_draw = time.monotonic()
        while not run.job.finished:
            await asyncio.sleep(0.01)  # the page's other events run here
            if not self.running or run is not self.run or loop != self.loops:
                return
            run.job.run_for(STEP)
            if run.job.finished or time.monotonic() - last_draw > REDRAW:
                last_draw = time.monotonic()
                self.running = not run.job.finished
                self._draw_grid()

    def _failed(self, exc: BaseException) -> None:
        self.running = False
        self.stop_button.visible = False
        self.summary.object = f"<div class='pg-note'>The patching grid stopped: {esc(exc)}</div>"

    def _stop_or_continue(self, _event: object) -> None:
        if self.running:
            self.running = False
            self._draw_grid()
        elif self.run is not None and self.run.job is not None and not self.run.job.finished:
            self._continue()

    @patches_bokeh
    def _draw_grid(self) -> None:
        """The grid so far (cells not run yet are grey), and above it the summary or the progress."""
        run, state = self.run, self.state
        job = run.job
        if job.finished:
            self.summary.object = summary_html(run, state.vocab)
        else:
            share = f"{100 * job.done / job.total:.0f} %"
            doing = ("Running the patches" if self.running else "Stopped") + f": {share} of the grid"
            rest = (" Grey cells are still to come." if self.running else
                    " Grey cells were not run: press <i>Continue the grid</i> to finish it.")
            self.summary.object = f"<div class='pg-calm' role='status'>{doing}.{rest}</div>"
        self.stop_button.visible = not job.finished
        for box in self.boxes.values():
            box.visible = True
        self.stop_button.label = "Stop the grid" if self.running else "Continue the grid"
        cfg, n = state.model.cfg, len(run.target_labels)
        result = run.result
        labels = [t if t == s else f"{s}→{t}" for t, s in zip(run.target_labels, run.source_labels, strict=True)]
        self.resid_source.data = cells(result.residual, result.recovered(result.residual), "resid", labels)
        self.head_source.data = cells(result.heads, result.recovered(result.heads), "head", None)
        for fig, width in ((self.resid_fig, n), (self.head_fig, cfg.n_heads)):
            fig.x_range.update(start=-0.5, end=width - 0.5)
            fig.y_range.update(start=cfg.n_layers - 0.5, end=-0.5)
            label_axis(fig.yaxis[0], [f"L{i}" for i in range(cfg.n_layers)])
            fig.height = max(170, 90 + (34 if cfg.n_layers <= 12 else 18) * cfg.n_layers)  # 30 layers: 630 px
        label_axis(self.resid_fig.xaxis[0], labels)
        self.resid_fig.xaxis[0].major_label_orientation = "vertical" if n > 10 else 0.8
        label_axis(self.head_fig.xaxis[0], [f"H{j}" for j in range(cfg.n_heads)])
        fit_box(self.boxes[self.resid_fig], max(260, min(760, 60 + 26 * n)))
        fit_box(self.boxes[self.head_fig], max(260, 110 + 34 * cfg.n_heads))
        self.resid_fig.title.text = "Residual entering each layer"
        self.head_fig.title.text = "Each head's output"
        self._show_detail()

    def _on_tap(self, kind: str, event: object) -> None:
        run = self.run
        if run is None or run.error:
            return
        x, y = getattr(event, "x", None), getattr(event, "y", None)
        if x is None or y is None:
            return
        index, layer = int(np.floor(x + 0.5)), int(np.floor(y + 0.5))
        width = len(run.target_labels) if kind == "resid" else self.state.model.cfg.n_heads
        if 0 <= index < width and 0 <= layer < self.state.model.cfg.n_layers:
            self.site = Site(kind, layer, index)
            self._show_detail()

    @patches_bokeh
    def _show_detail(self) -> None:
        run, site, state = self.run, self.site, self.state
        for source in (self.resid_source, self.head_source):  # outline the selected cell
            data = dict(source.data)
            if len(data["x"]):
                kind = "resid" if source is self.resid_source else "head"
                data["line"] = ["#000000" if site == Site(kind, y, x) else None for x, y in
                                zip(data["x"], data["y"], strict=True)]
                source.data = data
        self.show_button.visible = site is not None and run is not None and not run.error
        if not self.show_button.visible:
            self.detail.object = "<div class='pg-caption'>Click a cell to see that patched run.</div>"
            return
        trace = self._patched_trace()
        probs = trace.probs[trace.logit_row(-1)]
        tokens, top = analysis.top_tokens(probs, state.vocab, 5)
        last = trace.logit_row(-1)
        metric = float(trace.logits[last, run.good] - trace.logits[last, run.bad])
        if site.kind == "resid":
            where = (f"the residual entering layer {site.layer} at position {site.index} "
                     f"(“{esc(run.target_labels[site.index])}”)")
        else:
            where = f"the output of layer {site.layer} · head {site.index}"
        listing = ", ".join(f"“{esc(t)}” {p:.3f}" for t, p in zip(tokens, top, strict=True))
        self.detail.object = (f"<div class='pg-calm'><b>Patched run:</b> “{esc(' '.join(run.target_labels[1:]))}” "
                              f"with {where} taken from the other run. Metric {metric:.3f}. Next token after the "
                              f"last position: {listing}.</div>")

    def _patched_trace(self):
        run = self.run
        return circuits.patched_trace(self.state.model, run.target_ids, run.source_trace, self.site)

    def _show_in_views(self, _event: object) -> None:
        run, site, state = self.run, self.site, self.state
        if run is None or site is None or run.error:
            return
        trace = self._patched_trace()
        tokens = state.tokens._replace(ids=list(run.target_ids), labels=list(run.target_labels))
        what = f"L{site.layer} position {site.index}" if site.kind == "resid" else f"L{site.layer}.H{site.index}"
        state.show_run(tokens, trace, f"Showing a patched run: “{' '.join(run.target_labels[1:])}” with {what} "
                                      "taken from the other run. Edit the prompt to go back to the model's own run.")


def _empty() -> dict:
    return {"x": [], "y": [], "metric": [], "moved": [], "moved_text": [], "what": [], "line": []}


def cells(metric: np.ndarray, moved: np.ndarray, kind: str, labels: list[str] | None) -> dict:
    """Heatmap columns for a (layers, n) grid of metric values and how far each moved (x = position or head)."""
    n_layers, n = metric.shape
    y, x = np.divmod(np.arange(n_layers * n), n)
    what = [f"layer {i}, position {j} ({labels[j]})" if kind == "resid" else f"layer {i} · head {j}"
            for i, j in zip(y, x, strict=True)]
    flat = moved.ravel()
    return {"x": x, "y": y, "metric": metric.ravel(), "moved": flat,
            "moved_text": [f"{v:.3f}" if np.isfinite(v) else "–" for v in flat], "what": what,
            "line": [None] * len(flat)}


def summary_html(run: circuits.PatchRun, vocab: list[str]) -> str:
    result = run.result
    good, bad = esc(vocab[run.good]), esc(vocab[run.bad])
    target, source = " ".join(run.target_labels[1:]), " ".join(run.source_labels[1:])
    return (f"<div class='pg-calm'>Patched run: “{esc(target)}” (metric <code>logit({good}) − logit({bad})</code> "
            f"= {result.target:.3f}); activations from “{esc(source)}” (metric {result.source:.3f}). The changed "
            f"token is at position {run.changed}; patches before it change nothing.</div>")
