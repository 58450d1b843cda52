"""The model map (the landing view): the whole forward pass at the selected position in one picture.

The residual stream runs down the left as a line. The token and its position enter it at the top; each block's
heads and then its feed-forward network are nodes to its right, each joined to it by a line where it adds its
write; the final norm and the unembedding close it. A node's colour and size are its direct contribution to the
predicted token's logit (analysis.model_map: the same numbers as the residual view's bars), and each head says
where it attends. Tapping or clicking a node (or choosing it in the list, by keyboard) opens its detail.

A model with many heads (common.many_heads) is drawn one row per block: its attention (every head and the output
bias summed, naming its strongest head) and its FFN, labelled to their right; the list and the table keep every
head, and a tap on a block's attention opens its strongest head."""

from __future__ import annotations

import math

import numpy as np
import panel as pn
from bokeh.models import ColumnDataSource, HoverTool, Range1d, TapTool

from .. import analysis
from ..state import PlaygroundState
from .common import (
    NEGATIVE,
    POSITIVE,
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

ROW_PX = 100  # height of one row of nodes (labels above and below them)
ROW_PX_MANY = 40  # many heads: one row per block, labels beside the nodes
FFN_X_MANY = 2.7  # where a block's FFN node sits beside its attention node (room for the attention's label)
UNKNOWN = "#b8b8b8"  # a node without an exact contribution (post-norm)


def per_block(nodes: list[analysis.MapNode], trace: object, position: int) -> list[analysis.MapNode]:
    """The map's nodes with each block's heads (and attention bias) as one "attn" node and its FFN (and bias) as
    one "ffn" node: contributions summed, the write being the block's whole attn_out / ff_out at `position`. An
    attn node's name, `reads` and `weight` are its strongest head's: its name, number and contribution (or write,
    post-norm)."""
    out = [n for n in nodes if n.kind in ("embed", "pos")]
    for i, layer in enumerate(trace.layers):
        parts = [n for n in nodes if n.layer == i and n.kind in ("head", "bias", "ffn")]
        heads = [n for n in parts if n.kind == "head"]
        exact = not any(math.isnan(n.contribution) for n in heads)
        best = max(heads, key=lambda n: abs(n.contribution) if exact else n.write)
        attn = [n for n in parts if n.kind == "head" or n.name.endswith("attn.b_o")]
        ffn = [n for n in parts if n not in attn]
        out.append(analysis.MapNode(best.name, "attn", i, 0, sum(n.contribution for n in attn),
                                    float(np.linalg.norm(layer.attn_out[position])), best.index,
                                    best.contribution if exact else best.write))
        out.append(analysis.MapNode(f"L{i}.ffn", "ffn", i, 1, sum(n.contribution for n in ffn),
                                    float(np.linalg.norm(layer.ff_out[position])), -1, float("nan")))
    return out + [n for n in nodes if n.kind == "norm"]


def node_label(node: analysis.MapNode, labels: list[str]) -> str:
    if node.kind == "attn":
        return f"attention {node.contribution:+.2f}\nH{node.reads} {node.weight:+.2f}".replace("+nan", "")
    short = {"embed": "token", "pos": "position", "ffn": "FFN", "norm": "norm bias" if node.name == "norm_f.bias"
             else "final norm"}.get(node.kind, node.name.split(".", 1)[-1])
    value = "" if math.isnan(node.contribution) else f" {node.contribution:+.2f}"
    text = f"{short}{value}"
    if node.kind == "head":
        # Three short lines, not two long ones: on a phone the eight heads of the trained model stand ~32 px apart,
        # and labels on the same side of a row ~64 px (a line like "→ because 0.91" would meet its neighbour's).
        text += f"\n→ {labels[node.reads]}\n{node.weight:.2f}"
    return text


class ModelMapView(View):
    def __init__(self, state: PlaygroundState) -> None:
        self.state = state
        self.numbers = Numbers("model-map")
        self.source = ColumnDataSource(data=dict(x=[], y=[], size=[], color=[], label=[], name=[], part=[],
                                                 contribution=[], value=[], write=[], reads=[], offset=[], valign=[],
                                                 marker=[], beside=[], align=[]))
        self.links = ColumnDataSource(data=dict(x0=[], y0=[], x1=[], y1=[]))
        self.spine = ColumnDataSource(data=dict(x=[0.0, 0.0], y=[-0.5, 1.0]))
        self.output = ColumnDataSource(data=dict(x=[], y=[], text=[], x_offset=[]))
        self.y_range, self.x_range = Range1d(1, -1), Range1d(-1.7, 4.7)
        fig = small_figure(sizing_mode="stretch_width", min_width=280, max_width=900, height=400,
                           x_range=self.x_range, y_range=self.y_range, x_axis_type=None,
                           name="model-map", title="")
        fig.grid.visible = False
        fig.outline_line_color = None
        # The rows' names are the y axis's labels: Bokeh gives an axis the pixels its labels need, where names
        # drawn inside the plot would get a share of the x range, too narrow on a phone with many heads.
        rows_axis = fig.yaxis[0]
        rows_axis.axis_line_color = rows_axis.major_tick_line_color = rows_axis.minor_tick_line_color = None
        rows_axis.major_label_text_font_style, rows_axis.major_label_text_color = "italic", "#444444"
        fig.line("x", "y", source=self.spine, line_width=6, line_color="#9cc7e4", line_cap="round")
        fig.segment("x0", "y0", "x1", "y1", source=self.links, line_width=2, line_color="#8a8a8a")
        nodes = fig.scatter("x", "y", size="size", marker="marker", fill_color="color", line_color="#333333",
                            line_width=1,
                            source=self.source, name="nodes", nonselection_fill_alpha=1.0,
                            selection_fill_alpha=1.0, nonselection_line_alpha=1.0)
        # Labels alternate below and above the nodes of a row, so that neighbours' labels never meet on a phone.
        fig.text("x", "y", text="label", source=self.source, text_align="align", text_baseline="valign",
                 y_offset="offset", x_offset="beside", text_font_size="10.5px", text_color="#222222",
                 text_line_height=1.1)
        fig.text(x=0.0, y=-0.55, text=["residual stream ↓"], text_align="left", text_baseline="middle",
                 x_offset=8, text_font_size="11px", text_color="#0b5cab")
        fig.text("x", "y", text="text", source=self.output, text_align="left", text_baseline="middle",
                 x_offset="x_offset", text_font_size="13px", text_color="#111111", text_font_style="bold")
        fig.add_tools(TapTool(renderers=[nodes]),
                      HoverTool(renderers=[nodes], tooltips=[("part", "@name"), ("contribution", "@contribution"),
                                                            ("‖write‖", "@write"), ("attends to", "@reads")]))
        self.fig = save_tool(fig, "model-map")
        self.source.selected.on_change("indices", self._on_tap)
        self.heading = title("", level=3)
        self.note = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width")
        self.text = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width")
        # The keyboard's way to a node's detail (the picture is a canvas).
        self.part = pn.widgets.Select(label="Part of the model", options={}, width=220, margin=(0, 10))
        self.open = pn.widgets.Button(label="Open its detail", color="primary", variant="outline", width=150,
                                      css_classes=["pg-press"], margin=(0, 10))
        self.open.on_click(lambda _: self.open_detail(self.part.value))
        self._names: list[str] = []
        pn.bind(self.when_shown(self.update), state.param.trace, state.param.position, watch=True)
        self.update()
        self.panel = pn.Column(
            title("The model at a glance"),
            caption("One forward pass at the selected token, top to bottom. The token and its position enter the "
                    "<b>residual stream</b> (the thick line); every head and every feed-forward network (FFN) "
                    "<i>adds</i> its write to it; the final norm and the unembedding turn it into the next-token "
                    "prediction. A node's colour says whether it pushed the predicted token's logit up (blue) or "
                    "down (orange), its size by how much (its direct contribution, as in the residual view); "
                    "under each head, the token it attends to most. Tap or click a node to open its detail."),
            self.heading, self.note,
            # A wide screen puts the numbers beside the picture; a narrow one, below it.
            wrap_row(pn.Column(pn.pane.Bokeh(fig, margin=(0, 10), sizing_mode="stretch_width"),
                               sizing_mode="stretch_width", styles={"flex": "1 1 520px"}, max_width=900),
                     pn.Column(wrap_row(self.part, self.open), self.text, self.numbers.button,
                               sizing_mode="stretch_width",
                               styles={"flex": "1 1 320px"}, max_width=640),
                     styles={"flex-wrap": "wrap", "align-items": "flex-start"}),
            name="Model map", sizing_mode="stretch_width",
        )

    @patches_bokeh
    def update(self, *_: object) -> None:
        state = self.state
        model, trace, position, labels = state.model, state.trace, state.selected_position, state.tokens.labels
        target, nodes = analysis.model_map(model, trace, position)
        exact = not any(math.isnan(n.contribution) for n in nodes if n.kind != "norm")
        n_layers = len(trace.layers)
        many = many_heads(n_layers, model.cfg.n_heads)
        drawn = per_block(nodes, trace, position) if many else nodes
        rows_per_block = 1 if many else 2

        def row_of(node: analysis.MapNode) -> float:
            if node.kind in ("embed", "pos"):
                return 0.0
            if node.kind == "norm":
                return 1.0 + rows_per_block * n_layers
            if many:
                return 1.0 + node.layer
            return 1.0 + 2 * node.layer + (1 if node.kind == "ffn" or node.name.endswith("ffn.b_out") else 0)

        xs = [FFN_X_MANY if many and n.kind in ("ffn", "pos") else 1.0 + n.index for n in drawn]
        ys = [row_of(n) for n in drawn]
        sizes_from = [abs(n.contribution) for n in drawn] if exact else [n.write for n in drawn]
        top = max((v for v in sizes_from if not math.isnan(v)), default=1.0) or 1.0
        smallest, span = (10.0, 18.0) if many else (14.0, 30.0)  # many: rows ROW_PX_MANY apart
        size = [smallest if math.isnan(v) else smallest + span * math.sqrt(v / top) for v in sizes_from]
        color = [UNKNOWN if math.isnan(n.contribution) else (POSITIVE if n.contribution >= 0 else NEGATIVE)
                 for n in drawn]
        rows = sorted(set(ys))
        last = 2.0 + rows_per_block * n_layers
        # Below the node (screen y grows downwards), or above it for every second node of a row; many heads:
        # beside it.
        above = [n.index % 2 == 1 for n in drawn]
        offsets = [0.0 if many else -(s / 2 + 3) if up else s / 2 + 3 for up, s in zip(above, size, strict=True)]
        beside = [s / 2 + 4 if many else 0.0 for s in size]
        logit = trace.logits[trace.logit_row(position), target]
        self.source.data = dict(
            x=[*xs, 1.0], y=[*ys, last], size=[*size, 26.0], color=[*color, "#f2f5f9"],
            marker=["circle"] * len(drawn) + ["square"], offset=[*offsets, 16.0], beside=[*beside, 0.0],
            align=["left" if many else "center"] * len(drawn) + ["center"],
            valign=[*("middle" if many else "bottom" if up else "top" for up in above), "top"],
            # many: the token's label on two lines, so that its row's line to the position node runs between them
            label=[*(node_label(n, labels).replace(" ", "\n", 1) if many and n.kind == "embed" else
                     node_label(n, labels) for n in drawn), f"logit {logit:.2f}"],
            name=[*(n.name for n in drawn), "unembed"], part=[*(n.kind for n in drawn), "unembed"],
            contribution=[*("—" if math.isnan(n.contribution) else f"{n.contribution:+.4f}" for n in drawn),
                          f"= logit {logit:.4f}"],
            value=[*(n.contribution for n in drawn), float(logit)],  # the numbers (nan: none), for tests and CSV
            write=[*("—" if math.isnan(n.write) else f"{n.write:.4f}" for n in drawn), "—"],
            reads=[*(f"{labels[n.reads]} (position {n.reads}, {n.weight:.2f})" if n.kind == "head" else
                     f"strongest head: H{n.reads}" if n.kind == "attn" else "—" for n in drawn), "—"])
        self.links.data = dict(x0=[0.0] * (len(rows) + 1), y0=[*rows, last], y1=[*rows, last],
                               x1=[*(max(x for x, y in zip(xs, ys, strict=True) if y == r) for r in rows), 1.0])
        names = {0.0: "input"}
        for i in range(n_layers):
            if many:
                names[1.0 + i] = f"L{i}"
            else:
                names[1.0 + 2 * i], names[2.0 + 2 * i] = f"L{i} heads", f"L{i} FFN"
        names[1.0 + rows_per_block * n_layers], names[last] = "final norm", "unembed"
        label_axis(self.fig.yaxis[0], [names[row] for row in range(len(names))])  # rows 0..last
        predicted, prob = state.vocab[target], trace.probs[trace.logit_row(position), target]
        self.output.data = dict(x=[1.0], y=[last], text=[f"“{predicted}” {prob:.2f}"], x_offset=[24])
        self.spine.data = dict(x=[0.0, 0.0], y=[-0.5, last])
        width = FFN_X_MANY + 0.8 if many else max(n.index for n in nodes) + 1
        self.x_range.update(start=-0.3, end=width + 0.95)  # the spine's half width on the left
        self.y_range.update(start=last + (1.0 if many else 0.6), end=-0.8)  # many: room for the logit's label
        self.fig.height = int((ROW_PX_MANY if many else ROW_PX) * (last + 1.2)) + (60 if many else 0)
        label = labels[position]
        self.heading.object = (f"<h3 class='pg-title'>Position {position} (“{esc(label)}”) → next: "
                               f"“{esc(predicted)}” ({prob:.4f})</h3>")
        if exact:
            logit = sum(n.contribution for n in nodes)
            self.note.object = ""
            order = sorted(nodes, key=lambda n: -abs(n.contribution))[:3]
            summary = (f"At position {position} (“{esc(label)}”) the model predicts “{esc(predicted)}” ({prob:.2f}). "
                       f"Its logit, {logit:.2f}, is the sum of {len(nodes)} direct contributions; the largest: "
                       + ", ".join(f"{esc(n.name)} ({n.contribution:+.2f})" for n in order) + ".")
        else:
            self.note.object = (
                "<div class='pg-calm'>This model normalises the residual stream inside every block (post-norm), so "
                "what each part wrote is rescaled by every later norm and the logit is not a sum of direct "
                "contributions: the nodes are grey. What is exact here: each node's size is the length of what it "
                "adds to the stream at this position, and each head's attention. Switch norm placement to "
                "<b>pre</b> to see the contributions.</div>")
            summary = (f"At position {position} (“{esc(label)}”) the model predicts “{esc(predicted)}” ({prob:.2f}). "
                       "Post-norm: no exact per-part contribution; the table lists each part's write length.")
        table = [[n.name, "—" if math.isnan(n.contribution) else float(n.contribution),
                  "—" if math.isnan(n.write) else float(n.write),
                  f"{labels[n.reads]} (position {n.reads}, {n.weight:.2f})" if n.kind == "head" else ""]
                 for n in nodes]
        self.text.object = self.numbers.record("model map", summary, "Show every part's numbers",
                                            ["part", "direct contribution", "‖write‖", "attends most to"], table)
        names_now = [n.name for n in nodes]
        if names_now != self._names:
            self._names = names_now
            self.part.param.update(options={**{_describe(n): n.name for n in nodes},
                                            "unembedding (next token)": "unembed"}, value=nodes[0].name)

    def open_detail(self, name: str | None) -> None:
        """A head opens the attention view with it enlarged; the unembedding opens the next-token view; every
        other part, the residual view (its bar and the stream's length)."""
        state = self.state
        if not name:
            return
        if name.startswith("L") and ".H" in name:
            layer, head = (int(part[1:]) for part in name.split("."))
            state.param.update(layer=layer, head=head, view="attention")
        elif name == "unembed":
            state.view = "next"
        else:
            state.view = "residual"

    def _on_tap(self, _attr: str, _old: list[int], new: list[int]) -> None:
        if new:
            name = self.source.data["name"][new[0]]
            self.source.selected.indices = []  # a second tap on the same node still registers
            self.open_detail(name)


def _describe(node: analysis.MapNode) -> str:
    if node.kind == "head":
        return f"layer {node.layer} · head {node.index}"
    return {"embed": "token embedding", "pos": "position", "ffn": f"layer {node.layer} · FFN",
            "norm": "final norm"}.get(node.kind, node.name)


__all__ = ["ModelMapView"]
