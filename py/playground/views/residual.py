"""The residual stream at the selected position: who wrote the predicted token's logit, how long the stream is
after each sublayer, what it would predict if it stopped early, and (for the lesson model) every coordinate.

A model with many heads (common.many_heads) gets a bar per layer's attention and FFN instead of one per head (the
table still lists every head, and the note names the largest), and its stream's length and logit lens after each
block only, the lens as a column (a row of 30 tokens does not fit a phone)."""

from __future__ import annotations

import numpy as np
import panel as pn
from bokeh.models import ColumnDataSource, FactorRange, HoverTool, LinearColorMapper

from .. import analysis
from ..state import PlaygroundState
from .common import (
    NEGATIVE,
    NEUTRAL,
    POSITIVE,
    WEIGHT_PALETTE,
    Numbers,
    View,
    caption,
    esc,
    many_heads,
    patches_bokeh,
    save_tool,
    small_figure,
    title,
    wrap_row,
)

MAX_COORDINATES = 8  # per-coordinate bars only make sense for a model this narrow (the lesson's d = 4)


def _flex(basis: int, *objects: object, **params: object) -> pn.Column:
    """A column that asks for `basis` px in a wrapping row and grows or shrinks from there."""
    return pn.Column(*objects, sizing_mode="stretch_width", styles={"flex": f"1 1 {basis}px"}, **params)


class ResidualView(View):
    def __init__(self, state: PlaygroundState) -> None:
        self.state = state
        self.numbers = Numbers("residual")
        # 1. direct logit attribution
        self.attr_source = ColumnDataSource(data=dict(name=[], value=[], color=[]))
        self.attr_fig = small_figure(sizing_mode="stretch_width", min_width=280, max_width=900, height=300,
                                     y_range=FactorRange(), title="", name="residual-attribution")
        save_tool(self.attr_fig, "direct-contributions")
        self.attr_fig.hbar(y="name", right="value", height=0.7, color="color", source=self.attr_source)
        self.attr_fig.add_tools(HoverTool(tooltips=[("component", "@name"), ("contribution", "@value{0.0000}")]))
        self.attr_fig.xaxis.axis_label = "direct contribution to the logit"
        self.attr_fig.ygrid.visible = False
        self.attr_note = pn.pane.HTML("", margin=(0, 10))
        self.attr_text = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width")
        self.steps_text = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width")
        self.coord_text = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width")
        # 2. residual norm after each sublayer
        self.norm_source = ColumnDataSource(data=dict(stage=[], norm=[]))
        self.norm_fig = small_figure(sizing_mode="stretch_width", min_width=280, max_width=520, height=230,
                                     x_range=FactorRange(), title="‖residual‖ after each step")
        save_tool(self.norm_fig, "residual-norms")
        self.norm_fig.vbar(x="stage", top="norm", width=0.7, color=NEUTRAL, source=self.norm_source)
        self.norm_fig.add_tools(HoverTool(tooltips=[("after", "@stage"), ("norm", "@norm{0.0000}")]))
        self.norm_fig.xaxis.major_label_orientation = 0.8
        # 3. logit lens strip
        self.lens_source = ColumnDataSource(data=dict(stage=[], row=[], token=[], prob=[], text_color=[]))
        self.lens_fig = small_figure(sizing_mode="stretch_width", min_width=280, max_width=520, height=230,
                                     x_range=FactorRange(), y_range=FactorRange("top token"),
                                     title="Logit lens: the top token after each step")
        mapper = LinearColorMapper(palette=WEIGHT_PALETTE, low=0, high=1)
        save_tool(self.lens_fig, "logit-lens")
        self.lens_cells = self.lens_fig.rect("stage", "row", 0.95, 0.9, source=self.lens_source,
                                             fill_color={"field": "prob", "transform": mapper}, line_color=None)
        self.lens_words = self.lens_fig.text("stage", "row", text="token", source=self.lens_source,
                                             text_align="center", text_baseline="middle", text_color="text_color",
                                             text_font_size="12px")
        self.lens_fig.add_tools(HoverTool(tooltips=[("after", "@stage"), ("top token", "@token"),
                                                    ("probability", "@prob{0.0000}")]))
        self.lens_fig.xaxis.major_label_orientation = 0.8
        self.lens_fig.yaxis.visible = False
        # 4. per-coordinate bars (lesson model)
        self.coord_source = ColumnDataSource(data=dict(step=[], value=[], color=[], label=[]))
        self.coord_fig = small_figure(sizing_mode="stretch_width", min_width=280, max_width=900, height=240,
                                      x_range=FactorRange(), title="")
        save_tool(self.coord_fig, "residual-coordinates")
        self.coord_fig.vbar(x="step", top="value", width=0.85, color="color", source=self.coord_source)
        self.coord_fig.add_tools(HoverTool(tooltips=[("", "@label"), ("value", "@value{0.0000}")]))
        self.coord_fig.xaxis.major_label_orientation = 0.0
        self.coord_fig.xaxis.group_label_orientation = 0.0
        self.coord_fig.xaxis.major_label_text_font_size = "9px"
        self.coord_pane = pn.Column(
            title("Every coordinate of the residual row", level=3),
            caption("The lesson's tables, as bars for the selected row: <code>x</code> enters the block, the "
                    "attention adds its write (<code>attn_out</code>, the sum of every <code>head_out</code>) "
                    "giving <code>h</code>, the feed-forward adds its write giving <code>y</code>. With pre-norm, "
                    "x + attention = h and h + FFN = y exactly; with post-norm each sum is normalised first."),
            pn.pane.Bokeh(self.coord_fig, margin=(0, 10), sizing_mode="stretch_width"), self.coord_text,
        )
        self.heading = title("")
        pn.bind(self.when_shown(self.update), state.param.trace, state.param.position, watch=True)
        self.update()
        self.panel = pn.Column(
            title("The residual stream"),
            caption("Every sublayer <i>adds</i> its output to a running vector per position, the residual "
                    "stream: <code>x</code> (token + position) → <code>h</code> after attention → <code>y</code> "
                    "after the feed-forward network. Click a token above to choose the position."),
            self.heading,
            caption("Which component pushed the predicted token's logit up (blue) or down (orange)? With the "
                    "final norm's scale frozen, the logit is a plain sum of these direct contributions."),
            # Side by side on a wide screen: the contributions, and the stream's length and logit lens.
            wrap_row(
                _flex(520, self.attr_note, pn.pane.Bokeh(self.attr_fig, margin=(0, 10), sizing_mode="stretch_width"),
                      self.attr_text, max_width=900),
                _flex(520, wrap_row(_flex(280, pn.pane.Bokeh(self.norm_fig, margin=(0, 10),
                                                             sizing_mode="stretch_width")),
                                    _flex(280, pn.pane.Bokeh(self.lens_fig, margin=(0, 10),
                                                             sizing_mode="stretch_width")),
                                    styles={"flex-wrap": "wrap", "align-items": "flex-start"}),
                      self.steps_text, max_width=1040),
                styles={"flex-wrap": "wrap", "align-items": "flex-start"}),
            self.coord_pane, self.numbers.button, name="Residual stream", sizing_mode="stretch_width",
        )

    @patches_bokeh
    def update(self, *_: object) -> None:
        state = self.state
        model, trace, position, vocab = state.model, state.trace, state.selected_position, state.vocab
        label = state.tokens.labels[position]
        many = many_heads(model.cfg.n_layers, model.cfg.n_heads)
        result = analysis.attribution(model, trace, position)
        if result is None:
            self.attr_fig.visible = False
            self.attr_note.object = (
                "<div class='pg-calm'>This model normalises the residual stream inside every block (post-norm), so "
                "the stream is no longer a plain sum of what each component wrote and a per-component "
                "attribution would not add up. Switch norm placement to <b>pre</b> to see it.</div>")
            self.heading.object = (f"<h3 class='pg-title'>Position {position} (“{esc(label)}”)</h3>")
            self.attr_text.object = ""
        else:
            names, values = (analysis.layer_totals(result.names, result.values) if many
                             else (result.names, result.values))
            names, values = list(reversed(names)), values[::-1]  # the embedding on top, the last layer at the bottom
            self.attr_fig.visible = True
            self.attr_note.object = self._many_note(result) if many else ""
            self.attr_fig.y_range.factors = names
            self.attr_fig.height = max(160, (15 if many else 22) * len(names) + 60)
            self.attr_source.data = dict(name=names, value=values,
                                         color=[POSITIVE if v >= 0 else NEGATIVE for v in values])
            predicted = vocab[result.target]
            self.attr_fig.title.text = f"Direct contributions to the logit of “{predicted}”"
            prob = trace.probs[trace.logit_row(position), result.target]
            self.heading.object = (f"<h3 class='pg-title'>Position {position} (“{esc(label)}”) predicts next: "
                                   f"“{esc(predicted)}” ({prob:.4f})</h3>")
            order = np.argsort(-np.abs(result.values), kind="stable")
            top = ", ".join(f"{esc(result.names[i])} ({result.values[i]:+.2f})" for i in order[:3])
            self.attr_text.object = self.numbers.record("direct contributions",
                f"The logit of “{esc(predicted)}” is the sum of {len(result.names)} direct contributions, "
                f"{result.values.sum():.2f} in all; the largest: {top}.", "Show every contribution",
                ["component", "contribution"],
                [[n, float(v)] for n, v in zip(result.names, result.values, strict=True)])
        stages, norms = analysis.residual_norms(trace, position)
        lens_stages, tokens, probs = analysis.lens(model, trace, position, vocab)
        if many:  # after each block only
            keep = analysis.block_outputs(stages)
            stages, norms = [stages[k] for k in keep], norms[keep]
            keep = analysis.block_outputs(lens_stages)
            lens_stages, tokens, probs = [lens_stages[k] for k in keep], [tokens[k] for k in keep], probs[keep]
        self.norm_fig.x_range.factors = stages
        self.norm_source.data = dict(stage=stages, norm=norms)
        self._shape_lens(lens_stages, column=many)
        self.lens_source.data = dict(stage=lens_stages, row=["top token"] * len(lens_stages), token=tokens,
                                     prob=probs, text_color=["black" if p > 0.55 else "white" for p in probs])
        lens_at = dict(zip(lens_stages, zip(tokens, probs, strict=True), strict=True))
        self.steps_text.object = self.numbers.record("after each step",
            f"The residual's length goes from {norms[0]:.2f} to {norms[-1]:.2f}; stopped after "
            f"{esc(lens_stages[0])} it would predict “{esc(tokens[0])}”, after {esc(lens_stages[-1])} "
            f"“{esc(tokens[-1])}” ({probs[-1]:.2f}).", "Show the length and top token after each step",
            ["after", "‖residual‖", "top token", "probability"],
            [[stage, float(norm), *((lens_at[stage][0], float(lens_at[stage][1])) if stage in lens_at else ("", ""))]
             for stage, norm in zip(stages, norms, strict=True)])
        self._update_coordinates(position)

    @staticmethod
    def _many_note(result: analysis.Attribution) -> str:
        heads = [k for k, name in enumerate(result.names) if ".H" in name]
        top = sorted(heads, key=lambda k: -abs(result.values[k]))[:5]
        listed = ", ".join(f"{esc(result.names[k])} ({result.values[k]:+.2f})" for k in top)
        return (f"<div class='pg-calm'>Each layer's heads are summed into one bar (its attention), and its FFN into "
                f"another; the table below lists every head. The heads that contribute most: {listed}.</div>")

    def _shape_lens(self, stages: list[str], column: bool) -> None:
        """The logit lens as a row of cells (stages along x), or as a column (many layers: one stage a row)."""
        fig = self.lens_fig
        along, across = ("row", "stage") if column else ("stage", "row")
        if self.lens_cells.glyph.x != along:
            for renderer in (self.lens_cells, self.lens_words):
                renderer.glyph.update(x=along, y=across)
            fig.xaxis.major_label_orientation = 0.0 if column else 0.8
            fig.xaxis.visible, fig.yaxis.visible = not column, column
        if column:
            fig.x_range.factors, fig.y_range.factors = ["top token"], stages[::-1]  # x on top, as in the map
            fig.height = 60 + 20 * len(stages)
        else:
            fig.x_range.factors, fig.y_range.factors = stages, ["top token"]
            fig.height = 230

    def _update_coordinates(self, position: int) -> None:
        state = self.state
        d = state.model.cfg.n_model
        self.coord_pane.visible = d <= MAX_COORDINATES
        if d > MAX_COORDINATES:
            return
        steps = analysis.coordinate_steps(state.trace, position)
        factors = [(step, f"d{c}") for step, _ in steps for c in range(d)]
        values = np.concatenate([row for _, row in steps])
        self.coord_fig.x_range.factors = factors
        self.coord_fig.title.text = f"Residual row at position {position}, coordinate by coordinate"
        self.coord_source.data = dict(
            step=factors, value=values, color=[POSITIVE if v >= 0 else NEGATIVE for v in values],
            label=[f"{step}[{coord}]" for step, coord in factors],
        )
        self.coord_text.object = self.numbers.record("coordinates",
            f"The residual row at position {position}, {d} numbers, after each of {len(steps)} steps.",
            "Show every coordinate", ["step", *(f"d{c}" for c in range(d))],
            [[step, *(float(v) for v in row)] for step, row in steps])
