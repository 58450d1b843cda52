"""Attention heatmaps: one small heatmap per head (layers x heads), and the selected head drawn large.

Rows are query positions (the token that is reading), columns key positions (the tokens it may read). A cell's
colour is the softmax weight `attention`; masked cells (a future token under the causal mask) are hatched grey,
never drawn as a weight of 0. Figures are built once per model shape; a new prompt only replaces source data.

A model with many heads (common.many_heads: GPT-2 small's 144) gets a summary first: one layer × head chart, a
cell per head coloured by a measure of its pattern (analysis.HEAD_MEASURES), then the selected layer's heads as
small multiples (one row of figures, refilled when the layer changes) and the selected head large.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np
import panel as pn
from bokeh.events import Tap
from bokeh.models import BoxAnnotation, ColorBar, ColumnDataSource, HoverTool, LinearColorMapper, Range1d

import slm

from .. import analysis
from ..state import PlaygroundState
from .common import (
    MASKED_FILL,
    MASKED_HATCH,
    WEIGHT_PALETTE,
    Numbers,
    View,
    caption,
    esc,
    label_axis,
    many_heads,
    patches_bokeh,
    save_tool,
    small_figure,
    title,
    wrap_row,
)

HOVER = [("query", "@query_token (position @query)"), ("key", "@key_token (position @key)"),
         ("weight", "@weight{0.0000}")]
SLANT = 1.0  # radians: key labels of a short prompt, slanted
SLANTED_MAX = 12  # more tokens than this: vertical key labels (large view); no labels (small multiples)
SUMMARY_HOVER = [("head", "layer @layer · head @head"), ("measure", "@text"), ("reads most", "@reads")]
MASKED_HOVER = [("query", "@query_token (position @query)"), ("key", "@key_token (position @key)"),
                ("weight", "masked: a future token")]


class Heatmap:
    """One head's heatmap: two sources (allowed and masked cells) on shared ranges."""

    def __init__(self, mapper: LinearColorMapper, x_range: Range1d, y_range: Range1d, size: int,
                 large: bool) -> None:
        self.cells = ColumnDataSource(data=_empty())
        self.masked = ColumnDataSource(data=_empty())
        self.labels: list[str] = []
        # The large one follows the screen's width (up to a size set by the prompt's length); the small multiples
        # keep a fixed size and wrap, two to a row on a phone.
        sizing = dict(sizing_mode="stretch_width", min_width=260) if large else dict(width=size)
        self.fig = small_figure(height=size, x_range=x_range, y_range=y_range, **sizing)
        fig = self.fig
        fig.rect("key", "query", 1, 1, source=self.cells, fill_color={"field": "weight", "transform": mapper},
                 line_color=None, name="cells")
        fig.rect("key", "query", 1, 1, source=self.masked, fill_color=MASKED_FILL, line_color=None,
                 hatch_pattern="/", hatch_color=MASKED_HATCH, hatch_scale=6 if large else 4, name="masked")
        fig.grid.visible = False
        fig.xaxis.major_label_orientation = SLANT
        # The selected query row, outlined so the learner can find "their" token.
        self.row = BoxAnnotation(left=-0.5, right=0.5, bottom=-0.5, top=0.5, fill_alpha=0.0,
                                 line_color="#D55E00", line_width=3 if large else 1.5)
        fig.add_layout(self.row)
        if large:
            fig.add_tools(HoverTool(renderers=[fig.select_one({"name": "cells"})], tooltips=HOVER),
                          HoverTool(renderers=[fig.select_one({"name": "masked"})], tooltips=MASKED_HOVER))
            fig.add_layout(ColorBar(color_mapper=mapper, width=10, title="weight", title_text_font_size="11px",
                                    major_label_text_font_size="10px"), "right")
            fig.xaxis.axis_label, fig.yaxis.axis_label = "key (the token read)", "query (the token reading)"
        else:
            fig.add_tools(HoverTool(renderers=[fig.select_one({"name": "cells"})], tooltips=HOVER))
            fig.outline_line_width = 1

    def update(self, allowed: dict, hidden: dict, labels: list[str], position: int, show_labels: bool) -> None:
        self.cells.data, self.masked.data = allowed, hidden
        # Relabelling axes costs more than the data itself: only when the tokens changed and the labels show.
        if show_labels and labels != self.labels:
            for axis in (self.fig.xaxis[0], self.fig.yaxis[0]):
                label_axis(axis, labels)
            # Many tokens: vertical key labels, so neighbours never overlap (slanted ones do past ~12 tokens).
            orientation = "vertical" if len(labels) > SLANTED_MAX else SLANT
            if self.fig.xaxis[0].major_label_orientation != orientation:
                self.fig.xaxis[0].major_label_orientation = orientation
            self.labels = list(labels)
        if self.fig.xaxis[0].visible != show_labels:
            self.fig.axis.visible = show_labels
        self.select_row(position, len(labels))

    def select_row(self, position: int, n: int) -> None:
        self.row.update(bottom=position - 0.5, top=position + 0.5, left=-0.5, right=n - 0.5)


class LayerGrid:
    """One layer's heads as thumbnails in a single figure (a model with many heads): head j's heatmap is the block
    at column j % columns, row j // columns, gap(n) cells apart (room for its name above it). One figure fed with
    data, whatever the layer."""

    @staticmethod
    def gap(n: int) -> float:
        return max(2.0, 0.2 * n)

    def __init__(self, mapper: LinearColorMapper) -> None:
        self.cells = ColumnDataSource(data=_empty() | {"x": [], "y": [], "head": []})
        self.masked = ColumnDataSource(data=_empty() | {"x": [], "y": [], "head": []})
        self.names = ColumnDataSource(data=dict(x=[], y=[], text=[]))
        self.frame = ColumnDataSource(data=dict(x=[], y=[], size=[]))
        self.fig = small_figure(sizing_mode="stretch_width", min_width=260, max_width=640, height=300,
                                x_range=Range1d(0, 1), y_range=Range1d(1, 0), name="attention-layer")
        fig = self.fig
        fig.rect("x", "y", 1, 1, source=self.cells, fill_color={"field": "weight", "transform": mapper},
                 line_color=None, name="cells")
        fig.rect("x", "y", 1, 1, source=self.masked, fill_color=MASKED_FILL, line_color=None, name="masked")
        fig.rect("x", "y", "size", "size", source=self.frame, fill_alpha=0.0, line_color="#D55E00", line_width=3)
        fig.text("x", "y", text="text", source=self.names, text_font_size="11px", text_baseline="bottom",
                 text_color="#222222")
        fig.add_tools(HoverTool(renderers=[fig.select_one({"name": "cells"})],
                                tooltips=[("head", "@head"), *HOVER]))
        fig.axis.visible = False
        fig.grid.visible = False
        fig.outline_line_color = None

    def layout(self, n_heads: int) -> tuple[int, int]:
        """(columns, rows) of the thumbnails: as square as it gets (12 heads: 4 × 3; 9: 3 × 3)."""
        columns = int(np.ceil(np.sqrt(n_heads)))
        return columns, int(np.ceil(n_heads / columns))

    def update(self, trace: slm.Trace, layer: int, labels: list[str], selected: int | None) -> None:
        n_heads, n = trace.layers[layer].attention.shape[0], len(labels)
        columns, rows = self.layout(n_heads)
        step = n + self.gap(n)
        allowed, hidden = {}, {}
        for j in range(n_heads):
            a, h = analysis.attention_columns(trace, layer, j, labels)
            for part, columns_of in ((a, allowed), (h, hidden)):
                part["x"] = part["key"] + (j % columns) * step
                part["y"] = part["query"] + (j // columns) * step
                part["head"] = np.full(len(part["key"]), j)
                for name, column in part.items():
                    columns_of.setdefault(name, []).append(column)
        self.cells.data = {name: np.concatenate(parts) for name, parts in allowed.items()}
        self.masked.data = {name: np.concatenate(parts) for name, parts in hidden.items()} if hidden else (
            _empty() | {"x": [], "y": [], "head": []})
        self.names.data = dict(x=[(j % columns) * step - 0.5 for j in range(n_heads)],
                               y=[(j // columns) * step - 0.7 for j in range(n_heads)],
                               text=[f"H{j}" for j in range(n_heads)])
        width, height = columns * step - self.gap(n), rows * step - self.gap(n)
        self.fig.x_range.update(start=-0.5, end=width - 0.5)
        self.fig.y_range.update(start=height - 0.5, end=-0.5 - self.gap(n))  # room for the first row's names
        self.fig.height = int(60 + 420 * rows / columns)
        self.select(selected, n_heads, n)

    def select(self, head: int | None, n_heads: int, n: int) -> None:
        columns, _ = self.layout(n_heads)
        step = n + self.gap(n)
        if head is None:
            self.frame.data = dict(x=[], y=[], size=[])
        else:
            centre = (n - 1) / 2
            self.frame.data = dict(x=[(head % columns) * step + centre], y=[(head // columns) * step + centre],
                                   size=[n + 0.4])

    def head_at(self, x: float, y: float, n_heads: int, n: int) -> int | None:
        columns, _ = self.layout(n_heads)
        step = n + self.gap(n)
        column, row = int(np.floor((x + 0.5) / step)), int(np.floor((y + 0.5) / step))
        inside = (x + 0.5) - column * step < n and (y + 0.5) - row * step < n
        head = row * columns + column
        return head if inside and 0 <= column < columns and 0 <= head < n_heads else None


# What the referent head's hint offers when the prompt has no pronoun in it.
REFERENT_EXAMPLE = "the cat chased the dogs because they were"
PRONOUNS = ("it", "they", "he", "she")
COPULAS = ("is", "are", "was", "were")


def _training_note(model: slm.Model, key: str) -> Any:
    """meta[key], or else the same key among the training metrics (meta["training"]["metrics"])."""
    meta = model.meta
    if key in meta:
        return meta[key]
    training = meta.get("training")
    metrics = training.get("metrics") if isinstance(training, dict) else None
    return metrics.get(key) if isinstance(metrics, dict) else None


def pronoun_head(model: slm.Model) -> tuple[int, int] | None:
    """The head the training notes point a learner at (shipped model only): meta["pronoun_head"], or the same
    key in the training metrics."""
    pair = _training_note(model, "pronoun_head")
    if isinstance(pair, list | tuple) and len(pair) == 2:
        with contextlib.suppress(TypeError, ValueError):
            layer, head = int(pair[0]), int(pair[1])
            if 0 <= layer < model.cfg.n_layers and 0 <= head < model.cfg.n_heads:
                return layer, head
    return None


def pronoun_head_query(model: slm.Model) -> str:
    """Where the pronoun head reads from: "pronoun" ("they") or "copula" (the verb after it: "they were")."""
    return "copula" if _training_note(model, "pronoun_head_query") == "copula" else "pronoun"


def referent_query_position(model: slm.Model, labels: Sequence[str]) -> int | None:
    """The last position in the prompt where the pronoun head does its job: the last pronoun, or (for a copula
    head) the last copula right after a pronoun. None when the prompt has none."""
    copula = pronoun_head_query(model) == "copula"
    for i in range(len(labels) - 1, 0, -1):
        if copula:
            if labels[i] in COPULAS and labels[i - 1] in PRONOUNS:
                return i
        elif labels[i] in PRONOUNS:
            return i
    return None


def show_referent_head(state: PlaygroundState) -> None:
    """The hint's action: select the pronoun head and the position it reads from (using an example prompt
    when this one has no pronoun), and open the attention view."""
    pair = pronoun_head(state.model)
    if pair is None:
        return
    if referent_query_position(state.model, state.tokens.labels) is None:
        state.prompt = REFERENT_EXAMPLE  # one forward pass, as any prompt change
    position = referent_query_position(state.model, state.tokens.labels)
    state.param.update(layer=pair[0], head=pair[1], view="attention", position=-1 if position is None else position)


def _empty() -> dict:
    return {"query": [], "key": [], "weight": [], "query_token": [], "key_token": []}


class AttentionView(View):
    def __init__(self, state: PlaygroundState) -> None:
        self.state = state
        self.mapper = LinearColorMapper(palette=WEIGHT_PALETTE, low=0.0, high=1.0)
        self.numbers = Numbers("attention")
        self.x_range, self.y_range = Range1d(-0.5, 0.5), Range1d(0.5, -0.5)  # y flipped: position 0 on top
        self.large = Heatmap(self.mapper, Range1d(-0.5, 0.5), Range1d(0.5, -0.5), 420, large=True)
        self.large.fig.name = "attention-large"  # a stable handle for the browser tests
        save_tool(self.large.fig, "attention-head")
        # A tap (or click) on a cell of the large heatmap writes its value here: touch screens have no hover.
        self.large.fig.on_event(Tap, self._on_cell_tap)
        self.large_title = title("", level=3)
        self._build_summary()
        self.layers_title = title("Every head", level=3)
        self.layers_pane = pn.Column(sizing_mode="stretch_width", margin=0)
        self.grid_text = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width")
        self.grid = pn.Column(self.summary, self.layers_title, self.layers_pane, self.grid_text,
                              sizing_mode="stretch_width", max_width=820)
        self.large_pane = pn.pane.Bokeh(self.large.fig, margin=(0, 10), sizing_mode="stretch_width")
        self.readout = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width", min_height=24)
        self.large_text = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width")
        self.hint_text = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width")
        self.hint_button = pn.widgets.Button(label="", color="primary", variant="outline",
                                             margin=(0, 10, 8, 24), css_classes=["pg-press"])
        self.hint_button.on_click(lambda _: show_referent_head(state))
        self.hint = pn.Column(self.hint_text, self.hint_button, visible=False, sizing_mode="stretch_width")
        self.shape: tuple[int, int] | None = None
        self.many = False  # summary first (many_heads), with one layer's heads as small multiples
        # The small multiples, slot by slot (every head, or the shown layer's heads), and the heads they show.
        self.slots: list[tuple[Heatmap, pn.widgets.Button]] = []
        self.slot_heads: list[tuple[int, int]] = []
        self.layer_grid: LayerGrid | None = None  # many heads: the selected layer's heads, one figure
        head_select = pn.widgets.Select(label="Head shown large", options=[], width=170, margin=(0, 10))
        self.head_select = head_select
        head_select.param.watch(self._on_head_select, "value")
        pn.bind(self.when_shown(self.update), state.param.trace, watch=True)
        pn.bind(self.when_shown(self.select_head), state.param.layer, state.param.head, watch=True)
        pn.bind(self.when_shown(self.select_position), state.param.position, watch=True)
        self.update()
        large = pn.Column(wrap_row(self.large_title, head_select), self.large_pane, self.readout, self.large_text,
                          sizing_mode="stretch_width", styles={"flex": "1 1 420px"}, max_width=760)
        self.panel = pn.Column(
            title("Attention: who reads from whom"),
            caption("Each square is one head. Row <b>i</b> is the query at position i (the token that is "
                    "reading); column <b>j</b> is the key at position j (the token it may read). The colour is "
                    "the softmax weight <code>attention</code>: each row sums to 1. Hatched grey cells are "
                    "masked: under the causal mask a token may not look at tokens that come after it. Choose a "
                    "head's name to see it large; hover or tap a cell for its weight. The outlined row is the "
                    "selected token."),
            self.hint, wrap_row(self.grid, large, styles={"flex-wrap": "wrap", "align-items": "flex-start"}),
            self.numbers.button, name="Attention", sizing_mode="stretch_width",
        )

    # ---- building (only when the model's shape changes) ----

    def _build_summary(self) -> None:
        """The layer × head chart of a model with many heads (hidden otherwise): one cell per head."""
        self.summary_source = ColumnDataSource(data=dict(x=[], y=[], value=[], text=[], layer=[], head=[],
                                                         reads=[]))
        fig = small_figure(sizing_mode="stretch_width", min_width=260, max_width=640, height=300,
                           x_range=Range1d(-0.5, 0.5), y_range=Range1d(0.5, -0.5), name="attention-summary")
        fig.rect("x", "y", 0.94, 0.94, source=self.summary_source, line_color=None,
                 fill_color={"field": "value", "transform": self.mapper})
        fig.add_tools(HoverTool(tooltips=SUMMARY_HOVER))
        fig.add_layout(ColorBar(color_mapper=self.mapper, width=10, major_label_text_font_size="10px"), "right")
        fig.grid.visible = False
        fig.xaxis.axis_label, fig.yaxis.axis_label = "head", "layer"
        self.summary_box = BoxAnnotation(left=-0.5, right=0.5, bottom=-0.5, top=0.5, fill_alpha=0.0,
                                         line_color="#D55E00", line_width=3)
        fig.add_layout(self.summary_box)
        fig.on_event(Tap, self._on_summary_tap)
        self.summary_fig = save_tool(fig, "attention-every-head")
        self.measure = pn.widgets.Select(label="Colour each head by how much it", width=300, margin=(0, 10),
                                         options={words: key for key, words in analysis.HEAD_MEASURES.items()})
        self.measure.param.watch(lambda _: self._update_summary(), "value")
        self.summary_text = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width")
        self.summary = pn.Column(
            title("Every head at a glance", level=3),
            caption("One cell per head, averaged over every token of the prompt. Click or tap a cell (or choose "
                    "a head's name below) to draw its layer's heads and the head itself large."),
            self.measure, pn.pane.Bokeh(fig, margin=(0, 10), sizing_mode="stretch_width"), self.summary_text,
            sizing_mode="stretch_width", visible=False)

    def _build_grid(self, n_layers: int, n_heads: int) -> None:
        size = 150 if n_heads > 2 else 170  # two to a row on a 360-px phone
        self.many = many_heads(n_layers, n_heads)
        self.slots = []
        layers = []
        if self.many and self.layer_grid is None:
            self.layer_grid = LayerGrid(self.mapper)
            self.layer_grid.fig.on_event(Tap, self._on_layer_tap)
            save_tool(self.layer_grid.fig, "attention-layer")
        if self.many:
            layers.append(pn.pane.Bokeh(self.layer_grid.fig, margin=(0, 10), sizing_mode="stretch_width"))
        for i in range(0 if self.many else n_layers):
            cells = []
            for j in range(n_heads):
                slot = len(self.slots)
                heatmap = Heatmap(self.mapper, self.x_range, self.y_range, size, large=False)
                heatmap.fig.on_event(Tap, partial(self._on_slot, slot))
                # The head's name is a real button: keyboards, screen readers and fingers choose it.
                button = pn.widgets.Button(label=f"layer {i} · head {j}", color="light", width=size,
                                           margin=(0, 0, 2, 0), css_classes=["pg-head-button"])
                button.on_click(partial(self._on_slot, slot))
                self.slots.append((heatmap, button))
                cells.append(pn.Column(button, pn.pane.Bokeh(heatmap.fig, margin=0), margin=(2, 4)))
            # One row per layer: on a wide screen all heads of a layer side by side, on a phone they wrap.
            layers.append(wrap_row(*cells, styles={"flex-wrap": "wrap"}))
        self.layers_pane.objects = layers
        self.summary.visible = self.many
        if self.many:
            self._shape_summary(n_layers, n_heads)
        # The grid asks for the width of a whole layer in one row (the large head goes beside it if there is
        # room, else below), and shrinks on a phone, where the heads wrap. Many heads: the summary's width.
        basis = 460 if self.many else n_heads * (size + 8) + 24
        self.grid.styles = {"flex": f"0 1 {basis}px"}
        self.head_select.options = {f"layer {i} · head {j}": (i, j) for i in range(n_layers) for j in range(n_heads)}
        self.shape = (n_layers, n_heads)

    def _shape_summary(self, n_layers: int, n_heads: int) -> None:
        fig = self.summary_fig
        fig.x_range.update(start=-0.5, end=n_heads - 0.5)
        fig.y_range.update(start=n_layers - 0.5, end=-0.5)
        label_axis(fig.xaxis[0], [f"H{j}" for j in range(n_heads)])
        label_axis(fig.yaxis[0], [f"L{i}" for i in range(n_layers)])
        fig.height = 80 + max(14, min(26, 420 // n_layers)) * n_layers  # ~14 px a row at 30 layers

    def _heads_shown(self) -> list[tuple[int, int]]:
        """The head each small multiple shows: every head, or (many heads) the selected layer's."""
        n_layers, n_heads = self.shape
        if self.many:
            return [(self.state.layer, j) for j in range(n_heads)]
        return [(i, j) for i in range(n_layers) for j in range(n_heads)]

    @property
    def small(self) -> dict[tuple[int, int], Heatmap]:
        """(layer, head) -> the small multiple drawing it now."""
        return {head: heatmap for (heatmap, _), head in zip(self.slots, self.slot_heads, strict=False)}

    # ---- updating ----

    @patches_bokeh
    def update(self, *_: object) -> None:
        state = self.state
        cfg, labels = state.model.cfg, state.tokens.labels
        if self.shape != (cfg.n_layers, cfg.n_heads):
            self._build_grid(cfg.n_layers, cfg.n_heads)
        n = len(labels)
        self.x_range.update(start=-0.5, end=n - 0.5)
        self.y_range.update(start=n - 0.5, end=-0.5)
        self.slot_heads = []
        self._update_small()
        # The large view has its own ranges so its size can follow the prompt length.
        # ~18 px per row at the full context of 32 (an 11-px label each), and at most 700 px wide with the colour
        # bar, so that the view still fits an 800-px embed.
        side = max(260, min(620, 34 * n + 120))
        self.large.fig.update(max_width=side + 80, height=side)
        self.large.fig.x_range.update(start=-0.5, end=n - 0.5)
        self.large.fig.y_range.update(start=n - 0.5, end=-0.5)
        self._update_large()
        self._update_summary()
        self._update_hint()

    def _update_small(self) -> None:
        """Fill the small multiples with the heads they show now."""
        state = self.state
        labels, position = state.tokens.labels, state.selected_position
        show_small_labels = len(labels) <= SLANTED_MAX
        heads = self._heads_shown()
        if self.many:
            self.layer_grid.update(state.trace, state.layer, labels, state.head)
        for (heatmap, button), (i, j) in zip(self.slots, [] if self.many else heads, strict=True):
            allowed, hidden = analysis.attention_columns(state.trace, i, j, labels)
            heatmap.update(allowed, hidden, labels, position, show_small_labels)
            if button.label != (name := f"layer {i} · head {j}"):
                button.label = name
        self.slot_heads = heads
        if self.many:
            self.layers_title.object = (f"<h3 class='pg-title'>Layer {state.layer}: its {len(heads)} heads</h3>")
        self._update_grid_text()

    @patches_bokeh
    def _update_summary(self) -> None:
        if not self.many:
            return
        state = self.state
        labels, position = state.tokens.labels, state.selected_position
        values = analysis.head_summary(state.trace, self.measure.value)
        n_layers, n_heads = values.shape
        layer, head = np.divmod(np.arange(n_layers * n_heads), n_heads)
        reads = np.stack([lay.attention[:, position].argmax(axis=-1) for lay in state.trace.layers])  # (L, H)
        flat = values.ravel()
        self.summary_source.data = dict(
            x=head, y=layer, value=flat, text=[f"{v:.2f}" for v in flat], layer=layer, head=head,
            reads=[f"{esc(labels[k])} (position {k})" for k in reads.ravel()])
        words = analysis.HEAD_MEASURES[self.measure.value]
        self.summary_fig.title.text = f"How much each head {words}"
        best = np.unravel_index(int(np.argmax(values)), values.shape)
        summary = (f"{n_layers} layers × {n_heads} heads, each coloured by how much it {esc(words)}, from 0 to 1; "
                   f"the highest: layer {best[0]} · head {best[1]} ({values[best]:.2f}).")
        rows = [[f"layer {i}", *(float(v) for v in values[i])] for i in range(n_layers)]
        self.summary_text.object = self.numbers.record(
            "every head's measure", summary, "Show every head's number",
            ["layer", *(f"head {j}" for j in range(n_heads))], rows)
        self._outline_summary()

    def _outline_summary(self) -> None:
        layer, head = self.state.layer, self.state.head
        self.summary_box.update(left=head - 0.5, right=head + 0.5, bottom=layer + 0.5, top=layer - 0.5)

    def _update_hint(self) -> None:
        """The trained model's training notes name a head that links a pronoun to its noun: say so, say what it
        does in this prompt, and offer a button that shows it."""
        state = self.state
        pair = pronoun_head(state.model)
        self.hint.visible = pair is not None
        if pair is None:
            self.hint_text.object = ""
            return
        layer, head = pair
        copula = pronoun_head_query(state.model) == "copula"
        reader = ("the verb right after a pronoun (<i>they <u>were</u></i>, <i>it <u>was</u></i>)" if copula
                  else "a pronoun (<i>they</i>, <i>it</i>)")
        example_row = "were" if copula else "they"
        text = (f"<b>A head to look at: layer {layer} · head {head}.</b> Training found that from {reader} it puts "
                "most of its weight on the noun the pronoun refers to, e.g. in <i>the cat chased the dogs because "
                f"they were</i> the row of <i>{example_row}</i> reads <i>dogs</i>.")
        labels = state.tokens.labels
        position = referent_query_position(state.model, labels)
        if position is None:
            text += " This prompt has no such pronoun."
            self.hint_button.label = f"Try it on “{REFERENT_EXAMPLE}”"
        else:
            weights = state.trace.layers[layer].attention[head, position]
            key = int(np.argmax(weights))
            text += (f" In this prompt: “{esc(labels[position])}” (position {position}) reads “{esc(labels[key])}” "
                     f"(position {key}) with weight {weights[key]:.2f}.")
            self.hint_button.label = f"Show layer {layer} · head {head} at “{labels[position]}” (position {position})"
        self.hint_text.object = f"<div class='pg-calm'>{text}</div>"

    def _update_large(self) -> None:
        state = self.state
        labels = state.tokens.labels
        allowed, hidden = analysis.attention_columns(state.trace, state.layer, state.head, labels)
        self.large.update(allowed, hidden, labels, state.selected_position, True)
        self.large_title.object = (f"<h3 class='pg-title'>layer {state.layer} · head {state.head}, "
                                   f"large</h3>")
        self.head_select.value = (state.layer, state.head)
        if self.many:
            self.layer_grid.select(state.head, self.shape[1], len(labels))
        for (heatmap, button), (i, j) in zip(self.slots, [] if self.many else self.slot_heads, strict=True):
            selected = (i, j) == (state.layer, state.head)
            heatmap.fig.outline_line_color = "#D55E00" if selected else "#cccccc"
            heatmap.fig.outline_line_width = 3 if selected else 1
            color = "primary" if selected else "light"
            if button.color != color:  # a property change costs a patch: only when it changes
                button.color = color
        if self.readout.object:
            self.readout.object = ""  # the tapped cell belonged to the previous head or prompt
        self._update_large_text()

    def _update_large_text(self) -> None:
        """The large heatmap as text: where the selected token's row puts most weight, and every weight."""
        state = self.state
        labels, position = state.tokens.labels, state.selected_position
        weights = state.trace.layers[state.layer].attention[state.head]
        masked = np.isneginf(state.trace.layers[state.layer].scores[state.head])
        key = int(np.argmax(weights[position]))
        summary = (f"Layer {state.layer} head {state.head}: “{esc(labels[position])}” (position {position}) attends "
                   f"most to “{esc(labels[key])}” (position {key}), weight {weights[position, key]:.2f}.")
        header = ["query \\ key"] + [f"{k} {label}" for k, label in enumerate(labels)]
        rows = [[f"{q} {labels[q]}"] + ["masked" if masked[q, k] else float(weights[q, k])
                                        for k in range(len(labels))] for q in range(len(labels))]
        self.large_text.object = self.numbers.record("selected head", summary, "Show every weight of this head",
                                                     header, rows)

    def _update_grid_text(self) -> None:
        """The small multiples as text: for the selected token, the key each head reads most."""
        state = self.state
        labels, position = state.tokens.labels, state.selected_position
        rows = []
        for (i, j) in self.slot_heads:
            weights = state.trace.layers[i].attention[j, position]
            key = int(np.argmax(weights))
            rows.append([f"layer {i} · head {j}", f"{key} {labels[key]}", float(weights[key])])
        which = f"Layer {state.layer}: {len(rows)}" if self.many else f"{len(rows)}"
        summary = (f"{which} heads. For “{esc(labels[position])}” (position {position}), the table lists the "
                   "token each head reads most.")
        self.grid_text.object = self.numbers.record("every head", summary, "Show what every head reads",
                                                 ["head", "reads most", "weight"], rows)

    @patches_bokeh
    def select_head(self, *_: object) -> None:
        if self.many and self.slot_heads and self.slot_heads[0][0] != self.state.layer:
            self._update_small()  # another layer: its heads into the same figures
        if self.many:
            self._outline_summary()
        self._update_large()

    @patches_bokeh
    def select_position(self, *_: object) -> None:
        n, position = len(self.state.tokens.labels), self.state.selected_position
        for heatmap in [*(heatmap for heatmap, _ in self.slots), self.large]:
            heatmap.select_row(position, n)
        self._update_large_text()
        self._update_grid_text()
        self._update_summary()  # its "reads most" is the selected token's

    def _on_slot(self, slot: int, _event: object) -> None:
        layer, head = self.slot_heads[slot]
        self.state.param.update(layer=layer, head=head)

    def _on_layer_tap(self, event: object) -> None:
        x, y = getattr(event, "x", None), getattr(event, "y", None)
        if x is None or y is None or self.shape is None:
            return
        head = self.layer_grid.head_at(x, y, self.shape[1], len(self.state.tokens.labels))
        if head is not None:
            self.state.head = head

    def _on_summary_tap(self, event: object) -> None:
        x, y = getattr(event, "x", None), getattr(event, "y", None)
        if x is None or y is None or self.shape is None:
            return
        head, layer = round(x), round(y)
        if 0 <= layer < self.shape[0] and 0 <= head < self.shape[1]:
            self.state.param.update(layer=layer, head=head)

    def _on_cell_tap(self, event: object) -> None:
        """Write the tapped cell's weight under the large heatmap (a polite status: read aloud too)."""
        state = self.state
        labels = state.tokens.labels
        query, key = round(event.y), round(event.x)
        if not (0 <= query < len(labels) and 0 <= key < len(labels)):
            return
        scores = state.trace.layers[state.layer].scores[state.head]
        weight = ("masked: a future token" if np.isneginf(scores[query, key])
                  else f"weight {state.trace.layers[state.layer].attention[state.head, query, key]:.4f}")
        self.readout.object = (f"<div role='status' class='pg-summary'>Query “{esc(labels[query])}” (position "
                               f"{query}) → key “{esc(labels[key])}” (position {key}): {weight}</div>")

    def _on_head_select(self, event: object) -> None:
        if event.new is not None and tuple(event.new) != (self.state.layer, self.state.head):
            self.state.param.update(layer=event.new[0], head=event.new[1])


__all__ = ["AttentionView"]
