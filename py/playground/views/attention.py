"""Attention heatmaps: one small heatmap per head (layers x heads), and the selected head drawn large.

Rows are query positions (the token that is reading), columns key positions (the tokens it may read). A cell's
colour is the softmax weight `attention`; masked cells (a future token under the causal mask) are hatched grey,
never drawn as a weight of 0. Figures are built once per model shape; a new prompt only replaces source data.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import panel as pn
from bokeh.events import Tap
from bokeh.models import BoxAnnotation, ColorBar, ColumnDataSource, HoverTool, LinearColorMapper, Range1d

from .. import analysis
from ..state import PlaygroundState
from .common import (
    MASKED_FILL,
    MASKED_HATCH,
    WEIGHT_PALETTE,
    caption,
    esc,
    label_axis,
    patches_bokeh,
    small_figure,
    title,
)

HOVER = [("query", "@query_token (position @query)"), ("key", "@key_token (position @key)"),
         ("weight", "@weight{0.0000}")]
SLANT = 1.0  # radians: key labels of a short prompt, slanted
SLANTED_MAX = 12  # more tokens than this: vertical key labels (large view); no labels (small multiples)
MASKED_HOVER = [("query", "@query_token (position @query)"), ("key", "@key_token (position @key)"),
                ("weight", "masked: a future token")]


class Heatmap:
    """One head's heatmap: two sources (allowed and masked cells) on shared ranges."""

    def __init__(self, mapper: LinearColorMapper, x_range: Range1d, y_range: Range1d, size: int,
                 large: bool) -> None:
        self.cells = ColumnDataSource(data=_empty())
        self.masked = ColumnDataSource(data=_empty())
        self.labels: list[str] = []
        self.fig = small_figure(width=size, height=size, x_range=x_range, y_range=y_range)
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


def _empty() -> dict:
    return {"query": [], "key": [], "weight": [], "query_token": [], "key_token": []}


class AttentionView:
    def __init__(self, state: PlaygroundState) -> None:
        self.state = state
        self.mapper = LinearColorMapper(palette=WEIGHT_PALETTE, low=0.0, high=1.0)
        self.x_range, self.y_range = Range1d(-0.5, 0.5), Range1d(0.5, -0.5)  # y flipped: position 0 on top
        self.large = Heatmap(self.mapper, Range1d(-0.5, 0.5), Range1d(0.5, -0.5), 420, large=True)
        self.large.fig.name = "attention-large"  # a stable handle for the browser tests
        self.large_title = title("")
        self.grid_pane = pn.GridBox(ncols=1, margin=(0, 8))
        self.large_pane = pn.pane.Bokeh(self.large.fig, margin=(0, 10))
        self.hint_text = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width")
        self.hint_button = pn.widgets.Button(label="", color="primary", variant="outline",
                                             margin=(0, 10, 8, 24), width=330)
        self.hint_button.on_click(lambda _: state.show_referent_head())
        self.hint = pn.Column(self.hint_text, self.hint_button, visible=False, sizing_mode="stretch_width")
        self.shape: tuple[int, int] | None = None
        self.small: dict[tuple[int, int], Heatmap] = {}
        head_select = pn.widgets.Select(label="Head shown large", options=[], width=160)
        self.head_select = head_select
        head_select.param.watch(self._on_head_select, "value")
        pn.bind(self.update, state.param.trace, watch=True)
        pn.bind(self.select_head, state.param.layer, state.param.head, watch=True)
        pn.bind(self.select_position, state.param.position, watch=True)
        self.update()
        self.panel = pn.Column(
            title("Attention: who reads from whom"),
            caption("Each square is one head. Row <b>i</b> is the query at position i (the token that is "
                    "reading); column <b>j</b> is the key at position j (the token it may read). The colour is "
                    "the softmax weight <code>attention</code>: each row sums to 1. <span style='color:#777'>"
                    "Hatched grey</span> cells are masked: under the causal mask a token may not look at tokens "
                    "that come after it. Click a head to see it large; hover a cell for its weight. The outlined "
                    "row is the selected token."),
            self.hint, self.grid_pane, pn.Row(self.large_title, head_select), self.large_pane,
            name="Attention", sizing_mode="stretch_width",
        )

    # ---- building (only when the model's shape changes) ----

    def _build_grid(self, n_layers: int, n_heads: int) -> None:
        size = max(150, min(230, 740 // n_heads))
        self.small = {}
        rows = []
        for i in range(n_layers):
            row = []
            for j in range(n_heads):
                heatmap = Heatmap(self.mapper, self.x_range, self.y_range, size, large=False)
                heatmap.fig.title.text = f"layer {i} · head {j}"
                heatmap.fig.on_event(Tap, partial(self._on_tap, i, j))
                self.small[(i, j)] = heatmap
                row.append(heatmap.fig)
            rows.append(row)
        # A GridBox of panes rather than a Bokeh gridplot: Panel sizes each pane from its figure.
        self.grid_pane.objects = [pn.pane.Bokeh(fig, margin=2) for row in rows for fig in row]
        self.grid_pane.ncols = n_heads
        self.head_select.options = {f"layer {i} · head {j}": (i, j) for i in range(n_layers) for j in range(n_heads)}
        self.shape = (n_layers, n_heads)

    # ---- updating ----

    @patches_bokeh
    def update(self, *_: object) -> None:
        state = self.state
        cfg, trace, labels = state.model.cfg, state.trace, state.tokens.labels
        if self.shape != (cfg.n_layers, cfg.n_heads):
            self._build_grid(cfg.n_layers, cfg.n_heads)
        n, position = len(labels), state.selected_position
        self.x_range.update(start=-0.5, end=n - 0.5)
        self.y_range.update(start=n - 0.5, end=-0.5)
        show_small_labels = n <= SLANTED_MAX
        for (i, j), heatmap in self.small.items():
            allowed, hidden = analysis.attention_columns(trace, i, j, labels)
            heatmap.update(allowed, hidden, labels, position, show_small_labels)
        # The large view has its own ranges so its size can follow the prompt length.
        # ~18 px per row at the full context of 32 (an 11-px label each), and at most 700 px wide with the colour
        # bar, so that the view still fits an 800-px embed.
        side = max(260, min(620, 34 * n + 120))
        self.large.fig.update(width=side + 80, height=side)
        self.large.fig.x_range.update(start=-0.5, end=n - 0.5)
        self.large.fig.y_range.update(start=n - 0.5, end=-0.5)
        self._update_large()
        self._update_hint()

    def _update_hint(self) -> None:
        """The trained model's training notes name a head that links a pronoun to its noun: say so, say what it
        does in this prompt, and offer a button that shows it."""
        state = self.state
        pair = state.pronoun_head
        self.hint.visible = pair is not None
        if pair is None:
            self.hint_text.object = ""
            return
        layer, head = pair
        copula = state.pronoun_head_query == "copula"
        reader = ("the verb right after a pronoun (<i>they <u>were</u></i>, <i>it <u>was</u></i>)" if copula
                  else "a pronoun (<i>they</i>, <i>it</i>)")
        example_row = "were" if copula else "they"
        text = (f"<b>A head to look at: layer {layer} · head {head}.</b> Training found that from {reader} it puts "
                "most of its weight on the noun the pronoun refers to, e.g. in <i>the cat chased the dogs because "
                f"they were</i> the row of <i>{example_row}</i> reads <i>dogs</i>.")
        labels, position = state.tokens.labels, state.referent_query_position()
        if position is None:
            text += " This prompt has no such pronoun."
            self.hint_button.label = "Try it on “the cat chased the dogs because they were”"
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
        for (i, j), heatmap in self.small.items():
            selected = (i, j) == (state.layer, state.head)
            heatmap.fig.outline_line_color = "#D55E00" if selected else "#cccccc"
            heatmap.fig.outline_line_width = 3 if selected else 1

    @patches_bokeh
    def select_head(self, *_: object) -> None:
        self._update_large()

    @patches_bokeh
    def select_position(self, *_: object) -> None:
        n, position = len(self.state.tokens.labels), self.state.selected_position
        for heatmap in [*self.small.values(), self.large]:
            heatmap.select_row(position, n)

    def _on_tap(self, layer: int, head: int, _event: object) -> None:
        self.state.param.update(layer=layer, head=head)

    def _on_head_select(self, event: object) -> None:
        if event.new is not None and tuple(event.new) != (self.state.layer, self.state.head):
            self.state.param.update(layer=event.new[0], head=event.new[1])


__all__ = ["AttentionView"]
