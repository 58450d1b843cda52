"""The token strip: the prompt as the model reads it, one clickable box per position.

Clicking a token selects the position that the residual bars, the next-token chart and the outlined heatmap
row describe. Unknown words are drawn as `<unk>` in a dashed box, with a note naming the original words."""

from __future__ import annotations

import panel as pn
from bokeh.core.property.vectorization import value
from bokeh.models import ColumnDataSource, HoverTool, Range1d, TapTool

from ..state import PlaygroundState
from .common import esc, patches_bokeh, small_figure

WIDTH = 760
ROW_HEIGHT = 48
CHAR_PX = 8  # rough width of one character at the label font size, for laying the boxes out


def layout(labels: list[str], width: int = WIDTH) -> tuple[list[float], list[float], list[float]]:
    """Centre x, row y and box width of every token, wrapping into rows like text."""
    xs, ys, widths = [], [], []
    x, row = 4.0, 0
    for label in labels:
        w = max(34.0, CHAR_PX * len(label) + 14.0)
        if x + w > width - 4 and x > 4:
            x, row = 4.0, row + 1
        xs.append(x + w / 2)
        ys.append(row * ROW_HEIGHT + ROW_HEIGHT / 2)
        widths.append(w)
        x += w + 6
    return xs, ys, widths


class TokenStrip:
    def __init__(self, state: PlaygroundState) -> None:
        self.state = state
        self.source = ColumnDataSource(data=dict(x=[], y=[], w=[], label=[], index=[], fill=[], line=[], dash=[]))
        self.y_range = Range1d(ROW_HEIGHT, 0)
        # No axes or grids (rather than hidden ones): ten Bokeh models fewer to build, send and render.
        fig = small_figure(width=WIDTH, height=ROW_HEIGHT + 8, x_range=Range1d(0, WIDTH), y_range=self.y_range,
                           tools="", name="token-strip", x_axis_type=None, y_axis_type=None)
        boxes = fig.rect("x", "y", "w", ROW_HEIGHT - 10, source=self.source, fill_color="fill", line_color="line",
                         line_dash="dash", line_width=1.5, nonselection_fill_alpha=1.0, selection_fill_alpha=1.0,
                         nonselection_line_alpha=1.0)
        fig.text("x", "y", text="label", source=self.source, text_align="center", text_baseline="middle", y_offset=4,
                 text_font_size="13px", text_font=value("monospace"))
        fig.text("x", "y", text="index", source=self.source, text_align="center", y_offset=-11,
                 text_font_size="9px", text_color="#666", text_baseline="middle")
        fig.add_tools(TapTool(renderers=[boxes]),
                      HoverTool(renderers=[boxes], tooltips=[("position", "@index"), ("token", "@label")]))
        fig.outline_line_color = None
        self.fig = fig
        self.source.selected.on_change("indices", self._on_select)
        self.note = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width")
        pn.bind(self.update, state.param.tokens, watch=True)
        pn.bind(self.update, state.param.position, watch=True)
        self.update()
        self.panel = pn.Column(pn.pane.Bokeh(fig, margin=(0, 10)), self.note, sizing_mode="stretch_width")

    @patches_bokeh
    def update(self, *_: object) -> None:
        tokens, selected = self.state.tokens, self.state.selected_position
        xs, ys, widths = layout(tokens.labels)
        fill = ["#fde0cc" if unknown else "#eef6fb" for unknown in tokens.unknown]
        fill[selected] = "#9cc7e4"
        self.source.data = dict(
            x=xs, y=ys, w=widths, label=list(tokens.labels), index=[str(i) for i in range(len(xs))], fill=fill,
            line=["#D55E00" if unknown else "#56B4E9" for unknown in tokens.unknown],
            dash=["dashed" if unknown else "solid" for unknown in tokens.unknown],
        )
        height = (max(ys) + ROW_HEIGHT / 2) if ys else ROW_HEIGHT
        self.y_range.update(start=height, end=0)
        self.fig.height = int(height) + 8
        self.note.object = notes_html(self.state)

    def _on_select(self, _attr: str, _old: list[int], new: list[int]) -> None:
        if new:
            self.state.position = int(new[0])
            # Clear the Bokeh selection so a second click on the same token still registers.
            self.source.selected.indices = []


def notes_html(state: PlaygroundState) -> str:
    """Calm notes about how the prompt was read. Every user-supplied word is escaped."""
    tokens, notes = state.tokens, []
    if tokens.unknown_words:
        words = ", ".join(f"“{esc(w)}”" for w in tokens.unknown_words[:12])
        more = f" and {len(tokens.unknown_words) - 12} more" if len(tokens.unknown_words) > 12 else ""
        if tokens.dropped_unknown:
            notes.append(f"Not in this model's vocabulary, so left out: {words}{more}. The lesson model knows only "
                         f"{esc(' '.join(state.vocab))}.")
        else:
            notes.append(f"Not in the vocabulary: {words}{more}. The model reads each as <code>&lt;unk&gt;</code> "
                         "(the dashed boxes).")
    if tokens.truncated:
        n_ctx = state.model.cfg.n_ctx
        notes.append(f"The prompt is longer than the model's context of {n_ctx} tokens: the first {tokens.truncated} "
                     f"token(s) (counting <code>&lt;start&gt;</code>) were left out. The model reads the last {n_ctx}, "
                     "the text right before where generation continues.")
    if state.model_note:
        notes.append(esc(state.model_note))
    if state.run_note:
        notes.append(esc(state.run_note))
    return "".join(f"<div class='pg-note'>{note}</div>" for note in notes)
