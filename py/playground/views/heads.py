"""Heads: what role each attention head plays, scored on this prompt and on a standard probe set.

Two heatmaps with the same layout (a block of layers × heads per role; a model with many heads, one role at a
time, chosen in a menu): the score is the attention mass a head puts where the role says it should look
(slm.roles). A table names each role's strongest head on the probe set, with a "show me" button that loads a prompt
displaying the role and selects the head in the Attention view.
"""

from __future__ import annotations

import weakref

import panel as pn
from bokeh.events import Tap
from bokeh.models import ColumnDataSource, FixedTicker, HoverTool, LinearColorMapper, Range1d

from slm import roles

from .. import circuits
from ..state import PlaygroundState
from .common import (
    WEIGHT_PALETTE,
    View,
    caption,
    chart_box,
    esc,
    fit_box,
    label_axis,
    many_heads,
    patches_bokeh,
    small_figure,
    title,
    wrap_row,
)

HOVER = [("role", "@role_title"), ("head", "layer @layer · head @head"), ("score", "@text"), ("rows averaged", "@n")]
WALK = (
    "<b>A guided walk.</b> 1. Find the four heads: the table names, for each role, the head that scores highest "
    "on the probe set. 2. Press <i>show me</i>: the Attention view opens on a prompt where the role matters, "
    "with that head selected — does the selected row read where the role says? 3. Test the claim: in the Next "
    "token view remove the head (ablation) and see which prediction breaks; in the Patching view change one "
    "token and see which heads carry the change to the answer. A score says where a head <i>looks</i>; only an "
    "intervention shows what it <i>does</i>."
)


class HeadsView(View):
    def __init__(self, state: PlaygroundState) -> None:
        self.state = state
        self.mapper = LinearColorMapper(palette=WEIGHT_PALETTE, low=0.0, high=1.0, low_color="#eeeeee")
        self.prompt_source = ColumnDataSource(data=_empty())
        self.probe_source = ColumnDataSource(data=_empty())
        self.prompt_fig = self._figure(self.prompt_source, "On this prompt", "heads-prompt")
        self.probe_fig = self._figure(self.probe_source, "On the probe set", "heads-probes")
        self.boxes = {fig: chart_box(fig, 360) for fig in (self.prompt_fig, self.probe_fig)}
        self.table = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width")
        self.buttons = wrap_row(margin=(0, 10))  # wraps on a narrow screen
        self.shape: tuple[int, int, tuple[str, ...]] | None = None  # layers, heads, the roles drawn
        self.model_seen: weakref.ref | None = None  # weak: a model removed from the page must not stay alive here
        # A model with many heads: one role's layers × heads at a time (five blocks of 30 layers do not fit).
        self.role = pn.widgets.Select(label="Role shown", value="induction", width=240, margin=(0, 10),
                                      options={roles.ROLE_TITLES[role]: role for role in roles.ROLES}, visible=False)
        self.role.param.watch(self.update, "value")
        pn.bind(self.when_shown(self.update), state.param.trace, watch=True)
        self.update()
        self.panel = pn.Column(
            title("Heads: what does each one do?"),
            caption("Researchers find heads with recognisable jobs: a <b>previous-token</b> head reads the token "
                    "just before; an <b>induction</b> head, at a token seen before, reads the token that came "
                    "<i>after</i> it last time (and so copies repeated text); a <b>pronoun</b> head reads the noun "
                    "a pronoun refers to; a <b>bracket</b> head, where a closing bracket is due, reads the "
                    "bracket it closes. (A <b>duplicate-token</b> head reads earlier copies of the same token.) "
                    "Each cell is the share of a head's attention that goes where the role says, from 0 to 1: on "
                    "the prompt above, and averaged over held-out probe prompts. Grey: the prompt has no instance "
                    "of the role. Click a cell to select that head in the Attention view."),
            self.table, self.buttons, self.role,
            wrap_row(*self.boxes.values(), styles={"flex-wrap": "wrap", "align-items": "flex-start"}),
            pn.pane.HTML(f"<div class='pg-calm'>{WALK}</div>", margin=(0, 10), sizing_mode="stretch_width"),
            name="Heads", sizing_mode="stretch_width",
        )

    def _figure(self, source: ColumnDataSource, heading: str, name: str):
        fig = small_figure(sizing_mode="stretch_width", min_width=260, height=300, x_range=Range1d(-0.5, 0.5),
                           y_range=Range1d(0.5, -0.5), title=heading, name=name)
        fig.rect("x", "y", 0.95, 0.95, source=source, line_color=None,
                 fill_color={"field": "color_score", "transform": self.mapper})
        fig.text("x", "y", text="text", source=source, text_align="center", text_baseline="middle",
                 text_font_size="10px", text_color="text_color", name="numbers")
        fig.add_tools(HoverTool(tooltips=HOVER))
        fig.grid.visible = False
        fig.on_event(Tap, self._on_tap)
        return fig

    @patches_bokeh
    def update(self, *_: object) -> None:
        state = self.state
        cfg = state.model.cfg
        probe = circuits.probe_scores(state.model, state.tokenizer)
        prompt = circuits.prompt_scores(state.model, state.trace, state.tokens.labels)
        many = many_heads(cfg.n_layers, cfg.n_heads)
        shown = self.shown
        self.role.visible = many
        for fig, source, scores in ((self.prompt_fig, self.prompt_source, prompt),
                                    (self.probe_fig, self.probe_source, probe)):
            data = circuits.score_columns(scores, cfg.n_layers, cfg.n_heads, shown)
            data["text_color"] = ["black" if s > 0.55 else ("#333" if s < 0 else "white") for s in data["color_score"]]
            if self.shape != (cfg.n_layers, cfg.n_heads, shown):
                rows = circuits.row_count(cfg.n_layers, shown)
                fig.y_range.update(start=rows - 0.5, end=-0.5)
                fig.x_range.update(start=-0.5, end=cfg.n_heads - 0.5)
                label_axis(fig.xaxis[0], [f"H{j}" for j in range(cfg.n_heads)])
                fig.yaxis[0].ticker = FixedTicker(ticks=sorted(set(data["y"])))
                names = [f"L{layer}" for layer in data["layer"]] if len(shown) == 1 else data["row"]
                fig.yaxis[0].major_label_overrides = dict(zip(data["y"], names, strict=True))
                # Many heads: no number written in each cell (12 of them do not fit a phone's row); hover has it.
                fig.select_one({"name": "numbers"}).visible = not many
                fig.height = 60 + (14 if many else 18) * rows
                fit_box(self.boxes[fig], max(300, 170 + (30 if many else 40) * cfg.n_heads))
            title_text = fig.title.text.split(":")[0]
            fig.title.text = f"{title_text}: {roles.ROLE_TITLES[shown[0]]}" if len(shown) == 1 else title_text
            source.data = data
        self.shape = (cfg.n_layers, cfg.n_heads, shown)
        self.table.object = summary_html(probe, prompt)
        if self.model_seen is None or self.model_seen() is not state.model:  # the buttons depend on the model only
            self.model_seen = weakref.ref(state.model)
            self.buttons.objects = [self._button(role, probe[role]) for role in circuits.FOUR_ROLES
                                    if probe[role].n]

    @property
    def shown(self) -> tuple[str, ...]:
        """The roles drawn: all of them, or (many heads) the one chosen."""
        cfg = self.state.model.cfg
        return (self.role.value,) if many_heads(cfg.n_layers, cfg.n_heads) else tuple(roles.ROLES)

    def _button(self, role: str, score: roles.RoleScore) -> pn.widgets.Button:
        layer, head = roles.strongest(score)
        button = pn.widgets.Button(label=f"show me: {roles.ROLE_TITLES[role]} (layer {layer} · head {head})",
                                   color="primary", variant="outline", margin=(0, 8, 8, 0))
        button.on_click(lambda _: show_role(self.state, role))
        return button

    def _on_tap(self, event: object) -> None:
        cfg = self.state.model.cfg
        cell = circuits.cell_at(getattr(event, "x", None), getattr(event, "y", None), cfg.n_layers, cfg.n_heads,
                                self.shown)
        if cell is not None:
            self.state.param.update(layer=cell[1], head=cell[2])


def show_role(state: PlaygroundState, role: str) -> None:
    """The "show me" button: a probe prompt that displays `role`, its strongest head selected at a row where
    it does its job, in the attention view."""
    example = circuits.show_me(state.model, state.tokenizer, role)
    if example is None:
        return
    state.prompt = example.prompt  # one forward pass, as any prompt change
    state.param.update(layer=example.layer, head=example.head, position=example.position, view="attention")


def _empty() -> dict:
    return {k: [] for k in (*circuits.SCORE_COLUMNS, "text_color")}


def summary_html(probe: dict[str, roles.RoleScore], prompt: dict[str, roles.RoleScore]) -> str:
    """The table: each role's strongest head on the probe set, its score there, and on this prompt."""
    rows = []
    for role in roles.ROLES:
        best = roles.strongest(probe[role])
        if best is None:
            rows.append(f"<tr><td class='pg-tokcell'>{esc(roles.ROLE_TITLES[role])}</td><td colspan=3>no probe "
                        "prompts for this model</td></tr>")
            continue
        layer, head = best
        here = prompt[role]
        on_prompt = f"{here.scores[layer, head]:.2f}" if here.n else "– (not in this prompt)"
        rows.append(f"<tr><td class='pg-tokcell'>{esc(roles.ROLE_TITLES[role])}</td><td>layer {layer} · head {head}"
                    f"</td><td>{probe[role].scores[layer, head]:.2f}</td><td>{on_prompt}</td></tr>")
    return ("<table class='pg-table'><tr><th>role</th><th>strongest head (probe set)</th><th>score there</th>"
            "<th>same head on this prompt</th></tr>" + "".join(rows) + "</table>")
