"""The Block view (called "Lesson" before lessons became files): the 4-number lesson model, every table of its
forward pass, and three experiments.

The six tables follow one row (one position) through the block: x → attention → head_out → h → FFN hidden → y.
Architecture switches re-create the seeded model; "change one token" re-runs the prompt with one token swapped
and marks which rows changed and which stayed bit-identical; ablation removes one head's write."""

from __future__ import annotations

from typing import Any

import numpy as np
import panel as pn
import param

import slm

from .. import analysis
from ..models import LESSON_CHOICES, PromptTokens
from ..state import PlaygroundState, ViewSettings
from .common import View, caption, esc, labelled_checkbox, title, wrap_row

# The architecture switches, named as slm.CausalLanguageModel's arguments (the state's `architecture`).
SWITCHES = tuple(LESSON_CHOICES)


class BlockSettings(ViewSettings):
    """The lesson model's architecture switches and the change-one-token experiment."""

    URL = {"norm_placement": "norm_placement", "norm": "norm", "positions": "positions", "causal": "causal",
           "n_heads": "heads", "n_kv_heads": "kv_heads", "activation": "activation",
           "compare": "compare", "compare_position": "compare_pos", "compare_token": "compare_token"}

    norm_placement = param.Selector(default="pre", objects=list(LESSON_CHOICES["norm_placement"]))
    norm = param.Selector(default="layer", objects=list(LESSON_CHOICES["norm"]))
    positions = param.Selector(default="sinusoidal", objects=list(LESSON_CHOICES["positions"]))
    causal = param.Boolean(default=True)
    n_heads = param.Selector(default=2, objects=[1, 2, 4])
    n_kv_heads = param.Selector(default=2, objects=[1, 2, 4])
    activation = param.Selector(default="relu", objects=list(LESSON_CHOICES["activation"]))
    compare = param.Boolean(default=False, doc="Compare with a prompt that has one token changed")
    compare_position = param.Integer(default=1, bounds=(1, None), doc="The position whose token is changed")
    compare_token = param.String(default="dog", doc="The token put there instead")

    def __init__(self, state: PlaygroundState, **params: Any) -> None:
        super().__init__(state, **{**state.architecture, **params})  # the switches start as the model is

    @param.depends(*SWITCHES, watch=True, on_init=True)
    def _rebuild(self) -> None:
        """A switch re-creates the lesson model: the state loads it from its `architecture`."""
        self.state.architecture = {name: getattr(self, name) for name in SWITCHES}

    def comparison(self) -> tuple[PromptTokens, slm.Trace, int] | None:
        """The prompt with one token replaced (compare_position gets compare_token) and its forward pass, for
        the causal-mask check; None when the prompt has no such position or the word is not in the vocabulary."""
        state = self.state
        ids = list(state.tokens.ids)
        position, token = self.compare_position, state.tokenizer.lookup(self.compare_token)
        if token is None or position >= len(ids):
            return None
        ids[position] = token
        labels = list(state.tokens.labels)
        labels[position] = self.compare_token
        changed = state.tokens._replace(ids=ids, labels=labels)
        return changed, state.model.forward(np.asarray(ids)), position


def table_html(heading: str, rows: list[str], columns: list[str], values: np.ndarray,
               changed: np.ndarray | None = None, note: str = "",
               groups: list[tuple[str, int]] | None = None) -> str:
    """One lesson table, 4 decimals, one row per position; rows marked changed (≠) or identical (=) when
    `changed` is given. `groups` (label, number of columns) adds a header row above the columns, e.g. one group
    per head. Labels are escaped."""
    starts = set()
    group_row = ""
    if groups:
        cells, col = ["<td></td>"], 0
        for label, width in groups:
            starts.add(col)
            cells.append(f"<th colspan='{width}' class='pg-group'>{esc(label)}</th>")
            col += width
        group_row = f"<tr>{''.join(cells)}</tr>"

    def css(c: int) -> str:
        return " class='pg-group'" if c in starts else ""

    head = "".join(f"<th{css(c)}>{esc(name)}</th>" for c, name in enumerate(columns))
    body = []
    for i, label in enumerate(rows):
        row_css = "" if changed is None else (" class='pg-changed'" if changed[i] else " class='pg-same'")
        cells = "".join(f"<td{css(c)}>{v:.4f}</td>" if np.isfinite(v) else f"<td{css(c)}>—</td>"
                        for c, v in enumerate(values[i]))
        body.append(f"<tr{row_css}><td class='pg-tokcell'>{esc(label)}</td>{cells}</tr>")
    caption_html = f"<caption style='caption-side: top; text-align: left'><b>{heading}</b> {note}</caption>"
    return f"<table class='pg-table'>{caption_html}{group_row}<tr><td></td>{head}</tr>{''.join(body)}</table>"


ACTIVATION_LABELS = {  # the FFN hidden layer, as a formula; {x} is what the FFN reads
    "relu": "= ReLU({x} W_in + b_in)",
    "gelu": "= GELU({x} W_in + b_in): a smooth ReLU that lets small negatives through",
    "swiglu": "= SiLU(gate) ⊙ ({x} W_in + b_in): the gate decides how much of each unit passes",
}


def _heads_tables(trace: slm.Trace, rows: list[str], n_heads: int, diff: callable, rope: bool, reads: str) -> str:
    """q, k and v of the first block as the (T, d) tables the projections make, with the columns grouped by head:
    head j owns columns j·k … (j+1)·k − 1 (a reshape, no new numbers). With GQA, fewer k/v heads are each
    shared by a group of query heads."""
    layer = trace.layers[0]
    size = layer.q.shape[-1]
    n_kv = layer.k.shape[0]
    group = n_heads // n_kv
    tables = []
    for name, values, count in (("q", layer.q, n_heads), ("k", layer.k, n_kv), ("v", layer.v, n_kv)):
        flat = np.concatenate(list(values), axis=-1)  # (T, count * size): the columns before the reshape
        if name == "q":
            groups = [(f"head {j}", size) for j in range(count)]
        elif group == 1:
            groups = [(f"head {g}", size) for g in range(count)]
        else:  # one k/v head serves `group` query heads
            groups = [(f"heads {g * group}–{(g + 1) * group - 1}", size) for g in range(count)]
        columns = [f"{name}{c}" for _ in range(count) for c in range(size)]
        after = " (after RoPE)" if rope and name != "v" else ""
        note = f"= {reads} W_{name}{after}"
        tables.append(table_html(f"2 · {name} by head", rows, columns, flat,
                                 diff(lambda t, name=name: np.concatenate(list(getattr(t.layers[0], name)), -1)),
                                 note, groups))
    return "".join(tables)


def lesson_tables(trace: slm.Trace, labels: list[str], other: slm.Trace | None = None,
                  model: slm.Model | None = None) -> list[str]:
    """The tables of a one-block trace (the first block if there are more): x, q/k/v by head, attention, head_out,
    h, FFN hidden, y. `model` (its config and, for SwiGLU, its gate weights) makes the labels follow the
    architecture; without it they describe the lesson's default (pre-norm, ReLU)."""
    cfg = model.cfg if model is not None else None
    pre = cfg is None or cfg.norm_placement == "pre"
    parallel = trace.layers[0].h is None  # attention and FFN both read x: no h between them
    activation = cfg.activation if cfg is not None else "relu"
    layer = trace.layers[0]
    rows = [f"{i} {label}" for i, label in enumerate(labels)]
    d = trace.x.shape[-1]
    dims = [f"d{c}" for c in range(d)]

    def diff(get: callable) -> np.ndarray | None:
        return None if other is None else analysis.changed_rows(get(trace), get(other))

    tables = [table_html("1 · x", rows, dims, trace.x, diff(lambda t: t.x), "= token embedding + position")]
    n_heads = layer.attention.shape[0]
    tables.append(_heads_tables(trace, rows, n_heads, diff, cfg is not None and cfg.positions == "rope",
                                "norm(x)" if pre else "x"))
    heads = []
    for j in range(n_heads):
        heads.append(table_html(f"3 · attention, head {j}", rows, [str(k) for k in range(len(labels))],
                                np.where(np.isneginf(layer.scores[j]), np.nan, layer.attention[j]),
                                diff(lambda t, j=j: t.layers[0].attention[j]), "(— = masked)"))
    tables.append("".join(heads))
    heads = []
    for j in range(layer.head_out.shape[0]):
        heads.append(table_html(f"4 · head_out, head {j}", rows, dims, layer.head_out[j],
                                diff(lambda t, j=j: t.layers[0].head_out[j]), "= its write into the stream"))
    tables.append("".join(heads))
    if not parallel:
        tables.append(table_html("5 · h", rows, dims, layer.h, diff(lambda t: t.layers[0].h),
                                 "= x + attention" if pre else "= norm(x + attention)"))
    hidden = [f"f{c}" for c in range(layer.ff_act.shape[-1])]
    ffn_reads = "norm(x)" if parallel else "norm(h)" if pre else "h"
    ffn = ""
    if activation == "swiglu" and model is not None and "blocks.0.ffn.w_gate" in model.params:
        w_gate = model.params["blocks.0.ffn.w_gate"]

        def gate(t: slm.Trace) -> np.ndarray:
            return slm.layers.silu(t.layers[0].ffn_in @ w_gate)

        ffn = table_html("6 · FFN gate", rows, hidden, gate(trace), diff(gate), f"= SiLU({ffn_reads} W_gate)")
    label = ACTIVATION_LABELS.get(activation, ACTIVATION_LABELS["relu"]).format(x=ffn_reads)
    ffn += table_html(f"6 · FFN hidden ({activation_name(activation)})", rows, hidden, layer.ff_act,
                      diff(lambda t: t.layers[0].ff_act), label)
    tables.append(ffn)
    y_is = ("= x + attention + FFN: the block's output" if parallel else
            "= h + FFN: the block's output" if pre else "= norm(h + FFN): the block's output")
    tables.append(table_html("7 · y", rows, dims, layer.y, diff(lambda t: t.layers[0].y), y_is))
    return tables


def heads_note(cfg: slm.Config) -> str:
    """Heads as a reshape, in this model's numbers."""
    h, g, k, d = cfg.n_heads, cfg.n_kv_heads, cfg.head_size, cfg.n_model
    def span(j: int) -> str:
        return f"{j * k}" if k == 1 else f"{j * k}–{(j + 1) * k - 1}"

    owners = ", ".join(f"head {j} → column{'s' if k > 1 else ''} {span(j)}" for j in range(h))
    text = (f"<b>Heads are a reshape.</b> <code>q = norm(x) W_q</code> is one table of d = {d} columns. With {h} "
            f"head(s), each of size k = d / h = {k}, head j owns columns j·k … (j+1)·k − 1: {owners}. Table 2 "
            "shows q, k and v with their columns grouped by head (numbered within the head). ")
    if g == h:
        text += "Every head has its own k and v columns too."
    elif g == 1:
        text += f"Multi-query attention: a single k/v head ({k} columns) is shared by all {h} query heads."
    else:
        text += (f"Grouped-query attention (GQA): {g} k/v heads for {h} query heads, so query heads "
                 f"{', '.join(f'{j * (h // g)}–{(j + 1) * (h // g) - 1}' for j in range(g))} share one each.")
    return f"<div class='pg-calm'>{text}</div>"


def activation_name(activation: str) -> str:
    return {"relu": "ReLU", "gelu": "GELU", "swiglu": "SwiGLU"}.get(activation, activation)


def _named(label: str, buttons: pn.widgets.RadioButtonGroup) -> pn.Column:
    """A button group with its name above it, like the labelled selects beside it (Bokeh draws none)."""
    return pn.Column(pn.pane.HTML(f"<div class='pg-group-label'>{esc(label)}</div>", margin=(4, 10, 0, 10)),
                     buttons, margin=0)


class BlockView(View):
    def __init__(self, settings: BlockSettings) -> None:
        self.settings = settings
        self.state = state = settings.state
        p, own = state.param, settings.param
        self.toggles = wrap_row(
            _named("norm placement", pn.widgets.RadioButtonGroup.from_param(own.norm_placement, width=110)),
            _named("norm", pn.widgets.RadioButtonGroup.from_param(own.norm, width=110)),
            pn.widgets.Select.from_param(own.positions, label="positions", width=120),
            pn.widgets.Select.from_param(own.n_heads, label="heads", width=70),
            pn.widgets.Select.from_param(own.n_kv_heads, label="kv heads (GQA)", width=110),
            _named("FFN activation", pn.widgets.RadioButtonGroup.from_param(
                own.activation, width=170, options={"ReLU": "relu", "GELU": "gelu", "SwiGLU": "swiglu"})),
            labelled_checkbox(settings, "causal", "causal mask", margin=(10, 10, 14, 10)),
        )
        self.toggle_labels = caption("Architecture (re-creates the lesson model from the same seed): norm before "
                                     "or after each sublayer · layer norm or RMS norm · how positions enter · "
                                     "heads · key/value heads shared by groups of query heads (GQA) · the "
                                     "feed-forward activation (ReLU, GELU, or SwiGLU with its extra gate).")
        self.compare = labelled_checkbox(settings, "compare", "change one token and compare",
                                         margin=(10, 10, 14, 10))
        self.compare_position = pn.widgets.IntInput.from_param(own.compare_position, label="position", width=90)
        self.compare_token = pn.widgets.Select(label="new token", options=list(slm.LESSON_VOCAB), width=110,
                                               value=settings.compare_token)
        self.compare_token.param.watch(lambda e: setattr(settings, "compare_token", e.new), "value")
        self.compare_note = pn.pane.HTML("", margin=(0, 10))
        self.ablate = pn.widgets.Select(label="Remove a head (ablation)", options=["none"], value="none", width=200)
        self.ablate.param.watch(lambda e: setattr(state, "ablate", e.new), "value")
        self.ablation = pn.pane.HTML("", margin=(0, 10))
        self.tables = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width")
        self.heads_note = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width")
        self.switch = pn.widgets.Button(label="Switch to the lesson model", color="primary", width=220)
        self.switch.on_click(lambda _: setattr(state, "model_name", "lesson"))
        self.not_lesson = pn.Column(
            pn.pane.HTML("<div class='pg-calm'>This view shows the lesson model (4 numbers per token, "
                         "7 words) so that every number fits on screen.</div>", margin=(0, 10)),
            self.switch)
        self.body = pn.Column(
            self.toggle_labels, self.toggles,
            title("Change one token", level=3),
            caption("Swap the token at one position and run again. Rows marked <b style='color:#0072B2'>=</b> are "
                    "bit-identical, rows marked <b style='color:#D55E00'>≠</b> changed. With the causal mask, every "
                    "row before the swapped position stays identical: no earlier token can see a later one."),
            wrap_row(self.compare, self.compare_position, self.compare_token), self.compare_note,
            title("The tables", level=3),
            caption("One row per position, 4 decimals. Read them in order: the rows <code>x</code> enter the "
                    "block; the projections make <code>q</code>, <code>k</code>, <code>v</code>; each head's "
                    "<code>attention</code> weights mix the value rows into its <code>head_out</code>; adding the "
                    "heads' writes to x gives <code>h</code>; the feed-forward network's hidden layer and write "
                    "give <code>y</code>."),
            self.heads_note, self.tables,
            title("Remove a head", level=3),
            caption("Zero one head's <code>head_out</code> and compare the next-token probabilities at the "
                    "selected position."),
            self.ablate, self.ablation,
        )
        pn.bind(self.when_shown(self.update), p.trace, p.position, own.compare, own.compare_position,
                own.compare_token, p.ablate, watch=True)
        self.update()
        self.panel = pn.Column(
            title("Block: every number of one block"),
            caption("The lesson's model: 7 words, 4 numbers per token, one block, fixed random (untrained) weights. "
                    "Its predictions are meaningless; the point is to follow the arithmetic."),
            self.not_lesson, self.body, name="Block", sizing_mode="stretch_width",
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
        if self.settings.compare:
            result = self.settings.comparison()
            if result is None:
                note = ("<div class='pg-note'>The prompt needs at least two tokens after &lt;start&gt; to change one "
                        "(type a longer prompt, or choose a smaller position).</div>")
            else:
                changed_tokens, other, position = result
                note = self._causal_note(state, other, position, changed_tokens.labels[position],
                                         self.settings.causal)
        self.compare_note.object = note
        tables = lesson_tables(state.trace, state.tokens.labels, other, state.model)
        self.heads_note.object = heads_note(state.model.cfg)
        # Each table scrolls inside its own box when it is wider than the screen (a phone), never the page.
        self.tables.object = "<div class='pg-tables'>" + "".join(
            f"<div class='pg-scroll' tabindex='0' role='region' aria-label='table {i + 1}'>{t}</div>"
            for i, t in enumerate(tables)) + "</div>"
        self.ablation.object = self._ablation_table(state)

    @staticmethod
    def _causal_note(state: PlaygroundState, other: slm.Trace, position: int, new_label: str, causal: bool) -> str:
        old_label = state.tokens.labels[position]
        earlier = analysis.changed_rows(state.trace.layers[-1].y[:position], other.layers[-1].y[:position])
        swap = f"Position {position}: “{esc(old_label)}” → “{esc(new_label)}”. "
        if not earlier.any():
            why = ("the causal mask keeps them blind to it." if causal else
                   "(the swap happened not to reach them).")
            return (f"<div class='pg-calm'>{swap}Every row before position {position} is bit-identical in every "
                    f"table: {why}</div>")
        return (f"<div class='pg-note'>{swap}{int(earlier.sum())} earlier row(s) changed: with the causal mask off, "
                "every token reads every other token, including the later one that was swapped.</div>")

    @staticmethod
    def _ablation_table(state: PlaygroundState) -> str:
        ablated = analysis.ablated_probs(state.model, state.tokens.ids, state.ablate)
        if ablated is None:
            return ""
        position = state.selected_position
        before, after = state.trace.probs[state.trace.logit_row(position)], ablated[position]
        values = np.stack([before, after, after - before], axis=1)
        return table_html(f"next token after position {position} (“{esc(state.tokens.labels[position])}”)",
                          state.vocab, ["model", f"without {state.ablate}", "change"], values)
