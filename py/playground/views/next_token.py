"""The next-token distribution at the selected position, and how it moves when one head is removed."""

from __future__ import annotations

import numpy as np
import panel as pn
from bokeh.models import ColumnDataSource, FactorRange, HoverTool, Legend, LegendItem
from bokeh.transform import dodge

from .. import analysis
from ..state import PlaygroundState
from .common import (
    NEGATIVE,
    POSITIVE,
    Numbers,
    View,
    caption,
    esc,
    patches_bokeh,
    save_tool,
    small_figure,
    title,
)

TOP_K = 10
SINGLE_HEIGHT = 0.7  # bar height (in category units) when the model's bars are alone
PAIR_HEIGHT, PAIR_OFFSET = 0.34, 0.18  # side by side with the ablated bars


class NextTokenView(View):
    def __init__(self, state: PlaygroundState) -> None:
        self.state = state
        self.numbers = Numbers("next-token")
        self.source = ColumnDataSource(data=dict(token=[], prob=[], ablated=[], prob_text=[]))
        fig = small_figure(sizing_mode="stretch_width", min_width=280, max_width=720, height=320,
                           y_range=FactorRange(), x_range=(0, 1), title="", name="next-token")
        # Two bar sets side by side only while a head is removed; alone, the model's bars sit on their labels.
        # The Dodge transforms are kept so that update() can move them (0 offset without a comparison).
        full_y, ablated_y = dodge("token", 0.0, range=fig.y_range), dodge("token", -PAIR_OFFSET, range=fig.y_range)
        self.dodges = (full_y["transform"], ablated_y["transform"])
        full = fig.hbar(y=full_y, right="prob", height=SINGLE_HEIGHT, color=POSITIVE, source=self.source)
        self.full_bars = full
        # The probability written at the end of each of the model's bars (hover is not needed to read it).
        fig.text(x="prob", y=full_y, text="prob_text", source=self.source, x_offset=4, text_baseline="middle",
                 text_font_size="10px", text_color="#333")
        self.ablated_bars = fig.hbar(y=ablated_y, right="ablated", height=PAIR_HEIGHT, color=NEGATIVE,
                                     source=self.source)
        # One tooltip per bar set: no "without the head: 0" on the model's bars when no head is removed.
        fig.add_tools(HoverTool(renderers=[full], tooltips=[("token", "@token"), ("probability", "@prob{0.0000}")]),
                      HoverTool(renderers=[self.ablated_bars], tooltips=[
                          ("token", "@token"), ("without the head", "@ablated{0.0000}"),
                          ("with it", "@prob{0.0000}")]))
        fig.xaxis.axis_label = "probability of being the next token"
        fig.ygrid.visible = False
        self.legend = Legend(items=[LegendItem(label="the model", renderers=[full]),
                                    LegendItem(label="with the head removed", renderers=[self.ablated_bars])],
                             location="bottom_right", label_text_font_size="11px")
        fig.add_layout(self.legend)
        self.fig = save_tool(fig, "next-token")
        # `ablate` is a string in the state (so a URL can carry it); its choices depend on the model's shape.
        self.ablate = pn.widgets.Select(label="Remove a head (ablation)", options=["none"], value="none", width=200)
        self.ablate.param.watch(lambda event: setattr(state, "ablate", event.new), "value")
        self.summary = pn.pane.HTML("", margin=(0, 10))
        self.text = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width")
        pn.bind(self.when_shown(self.update), state.param.trace, state.param.position, state.param.ablate,
                watch=True)
        self.update()
        self.panel = pn.Column(
            title("Next-token distribution"),
            caption(f"After reading up to the selected token, the model's probabilities for the next token (the "
                    f"{TOP_K} most likely; from <code>softmax(logits)</code>). Remove a head to zero its "
                    "<code>head_out</code> write and watch the probabilities move."),
            self.ablate, self.summary, pn.pane.Bokeh(fig, margin=(0, 10), sizing_mode="stretch_width"),
            self.text, self.numbers.button,
            name="Next token", sizing_mode="stretch_width",
        )

    @patches_bokeh
    def update(self, *_: object) -> None:
        state = self.state
        self.ablate.options = state.head_names(state.model)
        self.ablate.value = state.ablate
        position = state.selected_position
        probs = state.trace.probs[state.trace.logit_row(position)]
        tokens, top = analysis.top_tokens(probs, state.vocab, TOP_K)
        ablated_all = analysis.ablated_probs(state.model, state.tokens.ids, state.ablate)
        has_ablation = ablated_all is not None
        ablated = ablated_all[position][analysis.top_ids(probs, TOP_K)] if has_ablation else np.zeros(
            len(tokens))
        factors = list(reversed(tokens))  # most likely on top
        self.fig.y_range.factors = factors
        self.source.data = dict(token=factors, prob=top[::-1], ablated=ablated[::-1],
                                prob_text=[f"{p:.4f}" for p in top[::-1]])
        self.ablated_bars.visible = self.legend.visible = has_ablation
        offset, height = (PAIR_OFFSET, PAIR_HEIGHT) if has_ablation else (0.0, SINGLE_HEIGHT)
        if self.dodges[0].value != offset:
            self.dodges[0].value = offset
            self.full_bars.glyph.height = height
        self.fig.height = max(180, 26 * len(tokens) + 70)
        label = state.tokens.labels[position]
        self.fig.title.text = f"What comes after position {position} (“{label}”)?"
        header, rows = ["token", "probability"], [[t, float(p)] for t, p in zip(tokens, top, strict=True)]
        if has_ablation:
            header.append(f"without {state.ablate}")
            rows = [[*row, float(a)] for row, a in zip(rows, ablated, strict=True)]
        self.text.object = self.numbers.record("next token",
            f"After “{esc(label)}” (position {position}) the most likely next token is “{esc(tokens[0])}” "
            f"({top[0]:.2f}), then “{esc(tokens[1])}” ({top[1]:.2f}).", f"Show the {len(tokens)} most likely tokens",
            header, rows)
        if has_ablation:
            moved = float(np.abs(ablated_all[position] - probs).sum() / 2)
            self.summary.object = (f"<div class='pg-calm'>Without {esc(state.ablate)} the distribution moves by "
                                   f"{moved:.4f} (total variation: the probability mass that changes place).</div>")
        else:
            self.summary.object = ""
