"""Lesson mode: the 4-number lesson model, every table of its forward pass, and three experiments.

The six tables follow one row (one position) through the block: x → attention → head_out → h → FFN hidden → y.
Architecture switches re-create the seeded model; "change one token" re-runs the prompt with one token swapped
and marks which rows changed and which stayed bit-identical; ablation removes one head's write."""

from __future__ import annotations

import numpy as np
import panel as pn

import slm

from .. import analysis
from ..state import PlaygroundState
from .common import caption, esc, title


def table_html(heading: str, rows: list[str], columns: list[str], values: np.ndarray,
               changed: np.ndarray | None = None, note: str = "") -> str:
    """One lesson table, 4 decimals, one row per position; rows marked changed (≠) or identical (=) when
    `changed` is given. Labels are escaped."""
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    body = []
    for i, label in enumerate(rows):
        css = "" if changed is None else (" class='pg-changed'" if changed[i] else " class='pg-same'")
        cells = "".join(f"<td>{v:.4f}</td>" if np.isfinite(v) else "<td>—</td>" for v in values[i])
        body.append(f"<tr{css}><td class='pg-tokcell'>{esc(label)}</td>{cells}</tr>")
    caption_html = f"<caption style='caption-side: top; text-align: left'><b>{heading}</b> {note}</caption>"
    return f"<table class='pg-table'>{caption_html}<tr><th></th>{head}</tr>{''.join(body)}</table>"


def lesson_tables(trace: slm.Trace, labels: list[str], other: slm.Trace | None = None) -> list[str]:
    """The six tables of a one-block trace (the first block if there are more)."""
    layer = trace.layers[0]
    rows = [f"{i} {label}" for i, label in enumerate(labels)]
    d = trace.x.shape[-1]
    dims = [f"d{c}" for c in range(d)]

    def diff(get: callable) -> np.ndarray | None:
        return None if other is None else analysis.changed_rows(get(trace), get(other))

    tables = [table_html("1 · x", rows, dims, trace.x, diff(lambda t: t.x), "= token embedding + position")]
    heads = []
    for j in range(layer.attention.shape[0]):
        heads.append(table_html(f"2 · attention, head {j}", rows, [str(k) for k in range(len(labels))],
                                np.where(np.isneginf(layer.scores[j]), np.nan, layer.attention[j]),
                                diff(lambda t, j=j: t.layers[0].attention[j]), "(— = masked)"))
    tables.append("".join(heads))
    heads = []
    for j in range(layer.head_out.shape[0]):
        heads.append(table_html(f"3 · head_out, head {j}", rows, dims, layer.head_out[j],
                                diff(lambda t, j=j: t.layers[0].head_out[j]), "= its write into the stream"))
    tables.append("".join(heads))
    tables.append(table_html("4 · h", rows, dims, layer.h, diff(lambda t: t.layers[0].h),
                             "= x + attention (pre-norm)"))
    tables.append(table_html("5 · FFN hidden", rows, [f"f{c}" for c in range(layer.ff_act.shape[-1])],
                             layer.ff_act, diff(lambda t: t.layers[0].ff_act), "= ReLU(norm(h) W_in)"))
    tables.append(table_html("6 · y", rows, dims, layer.y, diff(lambda t: t.layers[0].y),
                             "= h + FFN(h): the block's output"))
    return tables


class LessonView:
    def __init__(self, state: PlaygroundState) -> None:
        self.state = state
        p = state.param
        self.toggles = pn.Row(
            pn.widgets.RadioButtonGroup.from_param(p.norm_placement, label="norm placement", width=110),
            pn.widgets.RadioButtonGroup.from_param(p.norm, label="norm", width=110),
            pn.widgets.Select.from_param(p.positions, label="positions", width=120),
            pn.widgets.Select.from_param(p.n_heads, label="heads", width=70),
            pn.widgets.Select.from_param(p.n_kv_heads, label="kv heads (GQA)", width=110),
            pn.widgets.Checkbox.from_param(p.causal, label="causal mask", margin=(28, 10, 10, 10)),
        )
        self.toggle_labels = caption("Architecture (re-creates the lesson model from the same seed): norm before "
                                     "or after each sublayer · layer norm or RMS norm · how positions enter · "
                                     "heads · key/value heads shared by groups of query heads (GQA).")
        self.compare = pn.widgets.Checkbox.from_param(p.compare, label="change one token and compare")
        self.compare_position = pn.widgets.IntInput.from_param(p.compare_position, label="position", width=90)
        self.compare_token = pn.widgets.Select(label="new token", options=list(slm.LESSON_VOCAB), width=110,
                                               value=state.compare_token)
        self.compare_token.param.watch(lambda e: setattr(state, "compare_token", e.new), "value")
        self.compare_note = pn.pane.HTML("", margin=(0, 10))
        self.ablate = pn.widgets.Select(label="Remove a head (ablation)", options=["none"], value="none", width=200)
        self.ablate.param.watch(lambda e: setattr(state, "ablate", e.new), "value")
        self.ablation = pn.pane.HTML("", margin=(0, 10))
        self.tables = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width")
        self.switch = pn.widgets.Button(label="Switch to the lesson model", color="primary", width=220)
        self.switch.on_click(lambda _: setattr(state, "model_name", "lesson"))
        self.not_lesson = pn.Column(
            pn.pane.HTML("<div class='pg-calm'>Lesson mode shows the lesson's tiny model (4 numbers per token, "
                         "7 words) so that every number fits on screen.</div>", margin=(0, 10)),
            self.switch)
        self.body = pn.Column(
            self.toggle_labels, self.toggles,
            title("Change one token", level=4),
            caption("Swap the token at one position and run again. Rows marked <b style='color:#0072B2'>=</b> are "
                    "bit-identical, rows marked <b style='color:#D55E00'>≠</b> changed. With the causal mask, every "
                    "row before the swapped position stays identical: no earlier token can see a later one."),
            pn.Row(self.compare, self.compare_position, self.compare_token), self.compare_note,
            title("The six tables", level=4),
            caption("One row per position, 4 decimals. Read them in order: the rows <code>x</code> enter the "
                    "block; each head's <code>attention</code> weights mix the value rows into its "
                    "<code>head_out</code>; adding the heads' writes to x gives <code>h</code>; the feed-forward "
                    "network's hidden layer and write give <code>y</code>."),
            self.tables,
            title("Remove a head", level=4),
            caption("Zero one head's <code>head_out</code> and compare the next-token probabilities at the "
                    "selected position."),
            self.ablate, self.ablation,
        )
        pn.bind(self.update, p.trace, p.position, p.compare, p.compare_position, p.compare_token, p.ablate,
                watch=True)
        self.update()
        self.panel = pn.Column(
            title("Lesson mode: every number of one block"),
            caption("The lesson's model: 7 words, 4 numbers per token, one block, fixed random (untrained) weights. "
                    "Its predictions are meaningless; the point is to follow the arithmetic."),
            self.not_lesson, self.body, name="Lesson", sizing_mode="stretch_width",
        )

    def update(self, *_: object) -> None:
        state = self.state
        lesson = isinstance(state.model, slm.CausalLanguageModel)
        self.not_lesson.visible, self.body.visible = not lesson, lesson
        if not lesson:
            return
        n = len(state.tokens.ids)
        self.compare_position.end = max(1, n - 1)
        self.ablate.options = state.head_names(state.model)
        self.ablate.value = state.ablate
        other, note = None, ""
        if state.compare:
            result = state.comparison()
            if result is None:
                note = ("<div class='pg-note'>The prompt needs at least two tokens after &lt;start&gt; to change one "
                        "(type a longer prompt, or choose a smaller position).</div>")
            else:
                changed_tokens, other, position = result
                note = self._causal_note(state, other, position, changed_tokens.labels[position])
        self.compare_note.object = note
        tables = lesson_tables(state.trace, state.tokens.labels, other)
        self.tables.object = "<div class='pg-tables'>" + "".join(f"<div>{t}</div>" for t in tables) + "</div>"
        self.ablation.object = self._ablation_table(state)

    @staticmethod
    def _causal_note(state: PlaygroundState, other: slm.Trace, position: int, new_label: str) -> str:
        old_label = state.tokens.labels[position]
        earlier = analysis.changed_rows(state.trace.layers[-1].y[:position], other.layers[-1].y[:position])
        swap = f"Position {position}: “{esc(old_label)}” → “{esc(new_label)}”. "
        if not earlier.any():
            why = ("the causal mask keeps them blind to it." if state.causal else
                   "(the swap happened not to reach them).")
            return (f"<div class='pg-calm'>{swap}Every row before position {position} is bit-identical in every "
                    f"table: {why}</div>")
        return (f"<div class='pg-note'>{swap}{int(earlier.sum())} earlier row(s) changed: with the causal mask off, "
                "every token reads every other token, including the later one that was swapped.</div>")

    @staticmethod
    def _ablation_table(state: PlaygroundState) -> str:
        ablated = state.ablated_probs()
        if ablated is None:
            return ""
        position = state.selected_position
        before, after = state.trace.probs[position], ablated[position]
        values = np.stack([before, after, after - before], axis=1)
        return table_html(f"next token after position {position} (“{esc(state.tokens.labels[position])}”)",
                          state.vocab, ["model", f"without {state.ablate}", "change"], values)
