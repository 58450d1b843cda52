"""Generate: the prompt's continuation streams in token by token, each token shaded by its probability."""

from __future__ import annotations

import panel as pn

from ..state import PlaygroundState
from .common import View, caption, esc, title, wrap_row


def stream_html(prompt: str, generated: list[tuple[str, float]], running: bool, problem: str = "") -> str:
    """The prompt (grey) followed by the generated tokens, each shaded by the probability the model gave it, with
    the value in the hover title. Everything is escaped: a prompt is text, never markup."""
    spans = [f"<span class='pg-prompt'>{esc(prompt) or '<i>(empty prompt: starting from &lt;start&gt;)</i>'}</span>"]
    for token, prob in generated:
        spans.append(f"<span class='pg-tok' style='background: rgba(0, 114, 178, {0.08 + 0.72 * prob:.3f}); "
                     f"color: {'white' if prob > 0.55 else 'black'}' title='p = {prob:.4f}' "
                     f"data-prob='{prob:.4f}'>{esc(token)}</span>")
    if running:
        spans.append("<span class='pg-cursor'>▍</span>")
    note = f"<p class='pg-summary' role='status'>{esc(problem)}</p>" if problem else ""
    return f"<div class='pg-stream' id='pg-stream'>{' '.join(spans)}</div>{note}"


class GenerateView(View):
    def __init__(self, state: PlaygroundState) -> None:
        self.state = state
        # Number boxes rather than sliders: Bokeh's slider handle cannot be given an accessible name, a labelled
        # input can (arrow keys step it; a phone shows its keyboard).
        self.max_new = pn.widgets.IntInput.from_param(state.param.max_new_tokens, label="max new tokens", width=130)
        self.temperature = pn.widgets.FloatInput.from_param(state.param.temperature,
                                                            label="temperature (0 = greedy)", width=170)
        self.top_k = pn.widgets.IntInput.from_param(state.param.top_k, label="top-k (0 = off)", width=130)
        self.top_p = pn.widgets.FloatInput.from_param(state.param.top_p, label="top-p (1 = off)", width=130)
        self.seed = pn.widgets.IntInput.from_param(state.param.seed, label="seed", width=110)
        self.output = pn.pane.HTML(stream_html(state.prompt, [], False), margin=(0, 10),
                                   sizing_mode="stretch_width", min_height=60)
        # Same widget family as Generate/Stop (a real button), outlined: it is the secondary action here.
        self.use = pn.widgets.Button(label="Analyse prompt + continuation", color="primary",
                                     variant="outline", width=240, disabled=True, margin=(5, 10),
                                     css_classes=["pg-press"])
        self.use.on_click(lambda _: state.append_continuation())
        self.use_help = caption("<b>Analyse prompt + continuation</b> makes the prompt and the generated tokens the "
                                "new prompt, so the token strip, attention, residual and next-token views describe "
                                "the whole text.")
        # Beside the button where there is room, under it on a phone (else it shrinks to a column a word wide).
        self.use_help.styles = {"flex": "1 1 280px"}
        # Always up to date, shown or not (unlike the other views): Generate and Enter work from every view, and
        # the stream is one small HTML pane.
        pn.bind(self.update, state.param.generated, state.param.generating, state.param.prompt,
                state.param.generate_problem, watch=True)
        self.panel = pn.Column(
            title("Generate"),
            caption("Type a prompt and press <b>Enter</b> or <b>Generate</b>. The model predicts a distribution for "
                    "the next token, one token is drawn from it (temperature 0: always the most likely one), "
                    "appended, and the model runs again on the longer text. Each new token is shaded by the "
                    "probability the model gave it: darker = more confident (hover for the value)."),
            wrap_row(self.max_new, self.temperature, self.top_k, self.top_p, self.seed),
            self.output, wrap_row(self.use, self.use_help, styles={"flex-wrap": "wrap"}), name="Generate",
            sizing_mode="stretch_width",
        )
        self.update()  # built after a generation (the tab opened later): show it

    def update(self, *_: object) -> None:
        state = self.state
        self.output.object = stream_html(state.prompt, state.generated, state.generating, state.generate_problem)
        self.use.disabled = state.generating or not state.generated
