"""The token strip: the prompt as the model reads it, one choosable box per position.

Choosing a token selects the position that the residual bars, the next-token chart and the outlined heatmap row
describe. The strip is a group of native radio buttons styled as boxes (views.common.STYLES, `.pg-tokens`): a
click, a tap or the arrow keys choose, and a screen reader says "cat, 2 of 5". The small number under each
token is its position (a CSS counter). Unknown words are shown as `<unk>` in a dashed box, with a note naming
the original words."""

from __future__ import annotations

import panel as pn

from ..state import PlaygroundState
from .common import esc

# A word can appear twice in a prompt, but a radio group's labels must be unique: each label carries as many
# zero-width spaces as its position, which nothing displays or reads aloud.
INVISIBLE = "\u200b"


def token_options(labels: list[str]) -> dict[str, int]:
    """Radio label -> position, unique even when a token repeats."""
    return {f"{label}{INVISIBLE * i}": i for i, label in enumerate(labels)}


def unknown_css(unknown: list[bool]) -> list[str]:
    """The dashed outline of the unknown positions (one rule; nth-child counts from 1)."""
    picks = ", ".join(f":host(.pg-tokens) label:nth-child({i + 1})" for i, u in enumerate(unknown) if u)
    return [f"{picks} {{ border-style: dashed; border-color: #B34700; background: #fde0cc; }}"] if picks else []


class TokenStrip:
    def __init__(self, state: PlaygroundState) -> None:
        self.state = state
        self.radio = pn.widgets.RadioBoxGroup(options={}, inline=True, css_classes=["pg-tokens"],
                                              sizing_mode="stretch_width", margin=(2, 10))
        self.radio.param.watch(self._on_select, "value")
        self.note = pn.pane.HTML("", margin=(0, 10), sizing_mode="stretch_width")
        self._labels: list[str] = []
        pn.bind(self.update, state.param.tokens, watch=True)
        pn.bind(self.select, state.param.position, watch=True)
        self.update()
        self.panel = pn.Column(self.radio, self.note, sizing_mode="stretch_width")

    def update(self, *_: object) -> None:
        tokens = self.state.tokens
        if tokens.labels != self._labels:  # same tokens (e.g. a space typed): nothing to redraw
            self._labels = list(tokens.labels)
            self.radio.param.update(options=token_options(tokens.labels), stylesheets=unknown_css(tokens.unknown),
                                    value=self.state.selected_position)
        else:
            self.select()
        self.note.object = notes_html(self.state)

    def select(self, *_: object) -> None:
        self.radio.value = self.state.selected_position

    def _on_select(self, event: object) -> None:
        if event.new is not None and event.new != self.state.selected_position:
            self.state.position = int(event.new)


def notes_html(state: PlaygroundState) -> str:
    """Calm notes about how the prompt was read. Every user-supplied word is escaped."""
    tokens, notes = state.tokens, []
    if tokens.unknown_words:
        words = ", ".join(f"“{esc(w)}”" for w in tokens.unknown_words[:12])
        more = f" and {len(tokens.unknown_words) - 12} more" if len(tokens.unknown_words) > 12 else ""
        if tokens.dropped_unknown:
            notes.append(f"Not in this model's vocabulary, so left out: {words}{more}. This model knows only "
                         f"{esc(' '.join(state.vocab[:200]))}{' …' if len(state.vocab) > 200 else ''}.")
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
