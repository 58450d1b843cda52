"""The playground's shared state: prompt + model → trace, generation, and the URL.

Flow: the URL and the widgets set the plain parameters (prompt, model, generation settings, selection). A change
of model or prompt runs exactly one forward pass and publishes it as `trace` (with `tokens`); views watch `trace`
and the selection parameters and patch their Bokeh sources. Generation streams tokens into `generated` from an
async loop (no threads: Pyodide has none), yielding to the event loop between tokens so Stop is heard.

What only one view uses lives in that view's module, with its own settings (a ViewSettings, e.g. the Train
view's); the app makes them with the page and lists them in `view_settings`, so that one link carries them all.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from typing import Any

import numpy as np
import param

import slm

from .library import Shelf
from .link import Linked
from .models import (
    END,
    LESSON_CHOICES,
    REGISTRY,
    PromptTokens,
    default_model_name,
    encode_prompt,
    load_model,
    model_names,
    register,
    vocabulary_for,
)

# The views, in their tabs' order; the first is the landing view.
VIEWS = ("map", "generate", "attention", "residual", "next", "block", "heads", "patching", "train", "features",
         "models", "lessons")
# Old names of views that links may still carry: `view=lesson` was the Block view before lessons became files.
VIEW_ALIASES = {"lesson": "block"}
DEFAULT_PROMPTS = {"shipped": "the cat chased the dogs because they were", "lesson": "the cat was tired"}
# Above this vocabulary size a prompt's pass unembeds only the rows a view reads (the last and the selected one):
# in the browser's NumPy, 32 rows x 32,000 tokens alone take ~0.45 s.
LARGE_VOCAB = 4096
# Seconds between streamed tokens: each token reaches the page as its own patch and is drawn in its own frame
# (measured in the site: one new token per 60 Hz frame), Stop is heard, and the stream runs at >= 50 tokens/s.
STEP_DELAY = 0.015

# Parameter -> URL query name: what a link restores of this state (the views' settings add their own).
URL_PARAMS = {
    "prompt": "prompt", "model_name": "model", "max_new_tokens": "max_new_tokens", "temperature": "temperature",
    "top_k": "top_k", "top_p": "top_p", "seed": "seed", "layer": "layer", "head": "head", "position": "pos",
    "view": "view", "embed": "embed", "ablate": "ablate", "charts": "charts",
}


class ViewSettings(Linked):
    """A view's own settings (views/<view>.py), beside the shared state it reads: made with the page, before
    the view is built, because the URL carries them."""

    def __init__(self, state: PlaygroundState, **params: Any) -> None:
        self.state = state
        super().__init__(**params)


class PlaygroundState(Linked):
    URL = URL_PARAMS

    # ---- what the learner chooses (and the URL carries) ----
    model_name = param.Selector(default="lesson", objects=model_names(), doc="Which model to run")
    prompt = param.String(default="", doc="The text the model reads after <start>")
    max_new_tokens = param.Integer(default=12, bounds=(1, 64), doc="How many tokens to generate at most")
    temperature = param.Number(default=0.8, bounds=(0.0, 2.0), step=0.05, doc="0 = always the most likely token")
    top_k = param.Integer(default=0, bounds=(0, 50), doc="Keep only the k most likely tokens (0 = all)")
    top_p = param.Number(default=1.0, bounds=(0.05, 1.0), step=0.05, doc="Keep the most likely tokens up to mass p")
    seed = param.Integer(default=0, bounds=(0, 999_999), doc="The same seed gives the same continuation")
    layer = param.Integer(default=0, bounds=(0, None), doc="The layer of the head shown large")
    head = param.Integer(default=0, bounds=(0, None), doc="The head shown large")
    position = param.Integer(default=-1, bounds=(-1, None), doc="Selected token position (-1 = the last one)")
    view = param.Selector(default=VIEWS[0], objects=list(VIEWS), doc="The open view")
    embed = param.Boolean(default=False, doc="Show only the chosen view (for an iframe)")
    charts = param.Selector(default="png", objects=["png", "svg"],
                            doc="What a chart's save button writes: Bokeh draws the charts as SVG for 'svg'")
    ablate = param.String(default="none", doc="A head removed from the residual stream, e.g. 'L0.H1'")
    architecture = param.Dict(default={name: choices[0] for name, choices in LESSON_CHOICES.items()},
                              doc="The lesson model's switches (views.block.BlockSettings sets them)")

    # ---- derived: written only by this class ----
    model = param.Parameter(doc="The slm.Model being shown")
    tokenizer = param.Parameter()
    tokens = param.Parameter(doc="The prompt as the model reads it (PromptTokens)")
    trace = param.Parameter(doc="The forward pass of `tokens`: every view reads this one")
    model_note = param.String(default="", doc="Why the model differs from the request, if it does")
    run_note = param.String(default="", doc="What `trace` shows when it is not the prompt's own run (show_run)")
    generated = param.List(default=[], doc="Streamed (token, probability) pairs")
    generating = param.Boolean(default=False)
    generate_problem = param.String(default="", doc="Why the last generation stopped early, for the learner")
    models_changed = param.Integer(default=0, doc="Counts changes of the registry (a model trained or loaded)")

    # ---- the page's parts: its kept models (made here), the views' own settings (listed by the app) ----
    shelf = param.ClassSelector(class_=Shelf, doc="The page's trained and loaded models: kept, restored, dropped")
    view_settings = param.List(default=[], doc="The views' settings (ViewSettings), which a link carries too")

    def __init__(self, **params: Any) -> None:
        params.setdefault("model_name", default_model_name())
        params.setdefault("prompt", DEFAULT_PROMPTS[params["model_name"]])
        self._stop_requested = False
        self._fallback_note = ""
        self._generated_ids: list[int] = []
        self.requested_model: str | None = None  # the URL's model= naming a model not (yet) in the selector
        super().__init__(**params)
        self.shelf = Shelf(self)
        self._load_model()

    # ---- model and forward pass ----

    @param.depends("model_name", "architecture", watch=True)
    def _load_model(self) -> None:
        note = self._fallback_note if self.model_name == "lesson" else ""
        self.param.model_name.objects = model_names()  # models trained or loaded since this session began
        try:
            model = load_model(self.model_name, **self.architecture)
        except FileNotFoundError:
            # The shipped weights are still being trained: fall back (which re-enters this method), and say so.
            self._fallback_note = "The trained model is not available yet, so the playground shows the lesson model."
            self.model_name = "lesson"
            return
        except ValueError as exc:
            note = f"That architecture cannot be built ({exc}); the previous model is still shown."
            model = self.model if self.model is not None else load_model("lesson")
        if self.model_name == "shipped":
            self._fallback_note = ""
        self.use_model(model, note)

    def use_model(self, model: slm.Model, note: str = "") -> None:
        """Show `model` (with a tokenizer): clamp the selection to its shape and run the prompt."""
        tokenizer = vocabulary_for(model)
        cfg = model.cfg
        with param.parameterized.batch_call_watchers(self):
            self.param.layer.bounds = (0, cfg.n_layers - 1)
            self.param.head.bounds = (0, cfg.n_heads - 1)
            self.param.update(
                model=model, tokenizer=tokenizer, model_note=note, layer=min(self.layer, cfg.n_layers - 1),
                head=min(self.head, cfg.n_heads - 1),
                ablate=self.ablate if self.ablate in self.head_names(model) else "none",
            )
            self._run()

    def add_model(self, model: slm.Model, kind: str, *, show: bool = True) -> str:
        """Register a trained ("trained") or loaded ("loaded") model, list it in the selector, and (show=True)
        make it the model of every view. Its selector name."""
        name = register(model, kind)
        self.param.model_name.objects = model_names()
        self.models_changed += 1
        if show:
            self.model_name = name
        return name

    def forget_model(self, name: str) -> None:
        """Take a registered model out of the selector (the shipped or lesson model takes its place if shown), and
        out of memory: no reference to it is left here (the wasm heap reuses its bytes)."""
        from .circuits import forget_probes

        forget_probes(REGISTRY.pop(name, None))
        if self.model_name == name:
            self.model_name = default_model_name()
        self.param.model_name.objects = model_names()
        self.models_changed += 1

    @param.depends("prompt", watch=True)
    def _run(self) -> None:
        """The one forward pass per change."""
        tokens = encode_prompt(self.tokenizer, self.prompt, self.model.cfg.n_ctx)
        trace = self.model.forward(np.asarray(tokens.ids), output_positions=self._logit_rows(len(tokens.ids)))
        self.param.update(tokens=tokens, trace=trace, generated=[], run_note="")

    def _logit_rows(self, n: int) -> list[int] | None:
        if self.model.cfg.n_vocab <= LARGE_VOCAB:
            return None
        selected = n - 1 if self.position < 0 or self.position >= n else self.position
        return sorted({n - 1, selected})

    @param.depends("position", watch=True)
    def _ensure_logits(self) -> None:
        """A large-vocabulary run has logits at some rows only: selecting another position runs it again."""
        trace = self.trace
        if (trace is not None and trace.output_positions is not None and not self.run_note
                and self.selected_position not in trace.output_positions.tolist()):
            self._run()

    def show_run(self, tokens: PromptTokens, trace: slm.Trace, note: str) -> None:
        """Let every view show another run of the model (a patched one) until the prompt changes again."""
        self.param.update(tokens=tokens, trace=trace, run_note=note, generated=[])

    # ---- reading the selection ----

    @property
    def selected_position(self) -> int:
        """The selected position, clamped to the prompt (-1 and anything too large mean the last token)."""
        n = len(self.tokens.ids)
        return n - 1 if self.position < 0 or self.position >= n else self.position

    @property
    def vocab(self) -> list[str]:
        return self.tokenizer.vocab

    @staticmethod
    def head_names(model: slm.Model) -> list[str]:
        return ["none"] + [f"L{i}.H{j}" for i in range(model.cfg.n_layers) for j in range(model.cfg.n_heads)]

    # ---- generation ----

    async def generate(self) -> None:
        """Stream a continuation of the prompt into `generated`, one token at a time. One generation at a time:
        a second call while one runs does nothing."""
        if self.generating:
            return
        self._stop_requested = False
        self.param.update(generating=True, generated=[], generate_problem="")
        self._generated_ids = []
        model, tokenizer = self.model, self.tokenizer
        end = tokenizer.index.get(END)
        steps = slm.generate(
            model, self.tokens.ids, self.max_new_tokens, temperature=self.temperature,
            top_k=self.top_k or None, top_p=self.top_p if self.top_p < 1 else None, seed=self.seed,
            stop_ids=() if end is None else (end,),
        )
        try:
            for step in steps:
                if self._stop_requested or model is not self.model:
                    break
                self._generated_ids.append(int(step.token))
                self.generated = [*self.generated, (tokenizer.vocab[step.token], step.prob)]
                await asyncio.sleep(STEP_DELAY)  # let the page draw the token and hear a Stop click
                if self._stop_requested:
                    break
        except Exception as exc:  # noqa: BLE001 - shown in the Generate view, not lost in a console
            self.generate_problem = f"Generation stopped: {exc}"
        finally:
            self.generating = False

    def stop(self) -> None:
        self._stop_requested = True

    def continuation_text(self) -> str:
        ids = self._generated_ids
        if len(ids) != len(self.generated):  # set from elsewhere (a test, a restored state): by the tokens' text
            ids = [self.tokenizer.lookup(token) for token, _ in self.generated]
        return self.tokenizer.decode([i for i in ids if i is not None])

    def append_continuation(self) -> None:
        """Make prompt + continuation the new prompt, so every view describes the generated text too."""
        if self.generated:
            joiner = " " if self.tokenizer.words else ""  # a character or BPE continuation carries its own spaces
            self.prompt = f"{self.prompt}{joiner}{self.continuation_text()}".strip()

    # ---- URL ----

    def share_query(self, **overrides: Any) -> str:
        """The query string that restores this state and the views' settings: every URL parameter that differs
        from its default, the view and model always, then `overrides` (e.g. embed=1). What "Copy link" and
        "Copy embed code" hand out."""
        values = self.url_values(always=("view", "model_name"))
        for settings in self.view_settings:
            values.update(settings.url_values())
        return urllib.parse.urlencode({**values, **self.hub_values(), **overrides})

    def hub_values(self) -> dict[str, str]:
        """A model opened from the Hub is in a link by its source (hf=, revision=, hub=, file=): another browser
        downloads it, this one opens it from its cache."""
        source = (self.model.meta or {}).get("hub") if self.model is not None else None
        if not isinstance(source, dict):
            return {}
        from .hub import DEFAULT_HUB

        values = {"hf": source.get("repo"), "revision": source.get("revision"), "file": source.get("file"),
                  "hub": source.get("hub")}
        defaults = {"revision": "main", "hub": DEFAULT_HUB, "file": None}
        return {key: str(value) for key, value in values.items() if value and value != defaults.get(key)}

    def apply_url_values(self, values: dict[str, Any]) -> None:
        values = dict(values)
        if str(values.get("view", "")).lower() in VIEW_ALIASES:
            values["view"] = VIEW_ALIASES[str(values["view"]).lower()]
        if "model_name" in values and str(values["model_name"]) not in self.param.model_name.objects:
            self.requested_model = str(values.pop("model_name"))  # a kept model, listed once the store is read
        super().apply_url_values(values)


def url_keys(state: PlaygroundState) -> list[str]:
    """Every query key a link may set: the state's and its views' settings'."""
    return [key for part in (state, *state.view_settings) for key in part.URL.values()]


def sync_url(state: PlaygroundState) -> None:
    """Keep the URL query string in step with the state and the views' settings (Panel's location.sync), when
    there is a page. The state's watchers wait for the whole URL: one model load for its model and architecture."""
    import panel as pn

    if pn.state.location is not None:
        with param.parameterized.batch_call_watchers(state):
            for part in (state, *state.view_settings):
                pn.state.location.sync(part, part.URL, on_error=part.apply_url_values)
