"""The playground's state: one param.Parameterized that every view reads.

Flow: the URL and the widgets set the plain parameters (prompt, model, settings, selection). A change of model
or prompt runs exactly one forward pass and publishes it as `trace` (with `tokens`); views watch `trace` and
the selection parameters and patch their Bokeh sources. Generation streams tokens into `generated` from an
async loop (no threads: Pyodide has none), yielding to the event loop between tokens so Stop is heard.
"""

from __future__ import annotations

import asyncio
import contextlib
import urllib.parse
from typing import Any

import numpy as np
import param

import slm
from slm.train.tasks import LIMITS, PRESETS, TASKS

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
VIEWS = ("map", "generate", "attention", "residual", "next", "lesson", "heads", "patching", "train", "models")
DEFAULT_PROMPTS = {"shipped": "the cat chased the dogs because they were", "lesson": "the cat was tired"}
# Above this vocabulary size a prompt's pass unembeds only the rows a view reads (the last and the selected one):
# in the browser's NumPy, 32 rows x 32,000 tokens alone take ~0.45 s.
LARGE_VOCAB = 4096
# Seconds between streamed tokens: each token reaches the page as its own patch and is drawn in its own frame
# (measured in the site: one new token per 60 Hz frame), Stop is heard, and the stream runs at >= 50 tokens/s.
STEP_DELAY = 0.015

# Parameter -> URL query name. Everything a link should restore.
URL_PARAMS = {
    "prompt": "prompt", "model_name": "model", "max_new_tokens": "max_new_tokens", "temperature": "temperature",
    "top_k": "top_k", "top_p": "top_p", "seed": "seed", "layer": "layer", "head": "head", "position": "pos",
    "view": "view", "embed": "embed", "norm_placement": "norm_placement", "norm": "norm",
    "positions": "positions", "causal": "causal", "n_heads": "heads", "n_kv_heads": "kv_heads",
    "activation": "activation",
    "ablate": "ablate", "compare": "compare", "compare_position": "compare_pos", "compare_token": "compare_token",
    "patch_position": "patch_pos", "patch_token": "patch_token", "good_token": "good", "bad_token": "bad",
    "patch_from": "patch_from", "charts": "charts",
    "train_task": "task", "autostart": "autostart", "train_layers": "train_layers", "train_heads": "train_heads",
    "train_d_model": "train_d_model", "train_ctx": "train_ctx", "train_steps": "train_steps",
    "train_batch": "train_batch", "train_lr": "train_lr", "train_seed": "train_seed",
}
# The Train view's settings: state parameter -> slm.train.tasks.Settings field.
TRAIN_SETTINGS = {"train_layers": "layers", "train_heads": "heads", "train_d_model": "d_model", "train_ctx": "ctx",
                  "train_steps": "steps", "train_batch": "batch", "train_lr": "lr", "train_seed": "seed"}


def _train_param(field: str) -> param.Parameter:
    limit, default = LIMITS[field], getattr(PRESETS["repeat"], field)
    if isinstance(default, float):
        return param.Number(default=default, bounds=(limit.low, limit.high), doc=f"Train: {limit.what}")
    return param.Integer(default=default, bounds=(int(limit.low), int(limit.high)), doc=f"Train: {limit.what}")
# The Patching view's example per model: the prompt, the one-token change, the two tokens of the metric.
PATCH_EXAMPLES = {
    "shipped": dict(prompt="the cat near the dogs", patch_position=2, patch_token="cats", good_token="was",
                    bad_token="were"),
    "lesson": dict(prompt="the cat was", patch_position=2, patch_token="dog", good_token="tired", bad_token="lay"),
}


class PlaygroundState(param.Parameterized):
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
    # the lesson model's architecture switches
    norm_placement = param.Selector(default="pre", objects=list(LESSON_CHOICES["norm_placement"]))
    norm = param.Selector(default="layer", objects=list(LESSON_CHOICES["norm"]))
    positions = param.Selector(default="sinusoidal", objects=list(LESSON_CHOICES["positions"]))
    causal = param.Boolean(default=True)
    n_heads = param.Selector(default=2, objects=[1, 2, 4])
    n_kv_heads = param.Selector(default=2, objects=[1, 2, 4])
    activation = param.Selector(default="relu", objects=list(LESSON_CHOICES["activation"]))
    # experiments
    ablate = param.String(default="none", doc="A head removed from the residual stream, e.g. 'L0.H1'")
    compare = param.Boolean(default=False, doc="Lesson: compare with a prompt that has one token changed")
    compare_position = param.Integer(default=1, bounds=(1, None), doc="The position whose token is changed")
    compare_token = param.String(default="dog", doc="The token put there instead")
    # activation patching: the prompt is the clean run; the corrupted one has patch_token at patch_position
    patch_position = param.Integer(default=2, bounds=(1, None), doc="Patching: the position whose token changes")
    patch_token = param.String(default="cats", doc="Patching: the token the corrupted prompt has there")
    good_token = param.String(default="was", doc="Patching metric: logit(good) - logit(bad) at the last position")
    bad_token = param.String(default="were")
    patch_from = param.Selector(default="clean", objects=["clean", "corrupted"],
                                doc="clean: clean activations into the corrupted run (recovery); or the other way")

    # the training lab (the Train view): its task, the settings of its run, and whether it starts by itself
    train_task = param.Selector(default="repeat", objects=list(TASKS), doc="Train: what the model learns")
    autostart = param.Boolean(default=False, doc="Train: start training once the page is ready")
    locals().update({name: _train_param(field) for name, field in TRAIN_SETTINGS.items()})

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

    def __init__(self, **params: Any) -> None:
        params.setdefault("model_name", default_model_name())
        params.setdefault("prompt", DEFAULT_PROMPTS[params["model_name"]])
        self._stop_requested = False
        self._fallback_note = ""
        self._generated_ids: list[int] = []
        self.requested_model: str | None = None  # the URL's model= naming a model not (yet) in the selector
        self._train_task_before = "repeat"  # the task whose preset the train_* defaults are
        super().__init__(**params)
        self._load_model()

    # ---- model and forward pass ----

    @param.depends("model_name", "norm_placement", "norm", "positions", "causal", "n_heads", "n_kv_heads",
                   "activation", watch=True)
    def _load_model(self) -> None:
        note = self._fallback_note if self.model_name == "lesson" else ""
        self.param.model_name.objects = model_names()  # models trained or loaded since this session began
        try:
            model = load_model(self.model_name, **self.lesson_options())
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
        """Take a registered model out of the selector (the shipped or lesson model takes its place if shown)."""
        REGISTRY.pop(name, None)
        if self.model_name == name:
            self.model_name = default_model_name()
        self.param.model_name.objects = model_names()
        self.models_changed += 1

    @param.depends("train_task", watch=True)
    def _train_preset(self) -> None:
        """Another task brings its preset, except for the settings the learner (or the link) changed."""
        old = PRESETS[self._train_task_before]
        new = PRESETS[self.train_task]
        self._train_task_before = self.train_task
        self.param.update(**{name: getattr(new, field) for name, field in TRAIN_SETTINGS.items()
                             if getattr(self, name) == getattr(old, field)})

    def train_settings(self) -> dict[str, Any]:
        return {field: getattr(self, name) for name, field in TRAIN_SETTINGS.items()}

    def lesson_options(self) -> dict[str, Any]:
        return dict(norm_placement=self.norm_placement, norm=self.norm, positions=self.positions,
                    causal=self.causal, n_heads=self.n_heads, n_kv_heads=self.n_kv_heads,
                    activation=self.activation)

    @param.depends("prompt", watch=True)
    def _run(self) -> None:
        """The one forward pass per change."""
        tokens = encode_prompt(self.tokenizer, self.prompt, self.model.cfg.n_ctx)
        trace = self.model.forward(np.asarray(tokens.ids), logit_positions=self._logit_rows(len(tokens.ids)))
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
        if (trace is not None and trace.logit_positions is not None and not self.run_note
                and self.selected_position not in trace.logit_positions.tolist()):
            self._run()

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

    def comparison(self) -> tuple[PromptTokens, slm.Trace, int] | None:
        """The prompt with one token replaced (compare_position gets compare_token) and its forward pass, for
        the causal-mask check; None when the prompt has no such position or the word is not in the vocabulary."""
        ids = list(self.tokens.ids)
        position, token = self.compare_position, self.tokenizer.lookup(self.compare_token)
        if token is None or position >= len(ids):
            return None
        ids[position] = token
        labels = list(self.tokens.labels)
        labels[position] = self.compare_token
        changed = self.tokens._replace(ids=ids, labels=labels)
        return changed, self.model.forward(np.asarray(ids)), position

    def load_patch_example(self) -> None:
        """The Patching view's example for this model (the trained or the lesson one)."""
        example = PATCH_EXAMPLES["shipped" if self.model_name == "shipped" else "lesson"]
        with param.parameterized.batch_call_watchers(self):
            self.param.update(**{k: v for k, v in example.items() if k != "prompt"})
            self.prompt = example["prompt"]

    def show_run(self, tokens: PromptTokens, trace: slm.Trace, note: str) -> None:
        """Let every view show another run of the model (a patched one) until the prompt changes again."""
        self.param.update(tokens=tokens, trace=trace, run_note=note, generated=[])

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
        """The query string that restores this state: every URL parameter that differs from its default, the
        view always, then `overrides` (e.g. embed=1). What "Copy link" and "Copy embed code" hand out."""
        values = {}
        for name, key in URL_PARAMS.items():
            value = getattr(self, name)
            if name in ("view", "model_name") or value != self.param[name].default:
                values[key] = int(value) if isinstance(value, bool) else value
        values.update(overrides)
        return urllib.parse.urlencode(values)

    def apply_url_values(self, values: dict[str, Any]) -> None:
        """Apply values read from a URL one by one, coercing what can be coerced (e.g. embed=1) and skipping
        what cannot, so a hand-edited link never breaks the page."""
        for name, value in values.items():
            if name == "model_name" and str(value) not in self.param.model_name.objects:
                self.requested_model = str(value)  # a kept model, listed once the page's store is read
                continue
            with contextlib.suppress(Exception):
                setattr(self, name, _coerce(self.param[name], value))


def _coerce(parameter: param.Parameter, value: Any) -> Any:
    if isinstance(parameter, param.Boolean):
        return str(value).strip().lower() in ("1", "true", "yes", "on")
    if isinstance(parameter, param.Integer):
        value = int(float(value))
    elif isinstance(parameter, param.Number):
        value = float(value)
    elif isinstance(parameter, param.String):
        return str(value)
    elif isinstance(parameter, param.Selector):
        for option in parameter.objects:
            if str(option).lower() == str(value).lower():
                return option
        return value
    if parameter.bounds is not None:  # clamp absurd values instead of refusing them
        low, high = parameter.bounds
        value = value if low is None else max(low, value)
        value = value if high is None else min(high, value)
    return value


def sync_url(state: PlaygroundState) -> None:
    """Keep the URL query string and the state in step (Panel's location.sync), when there is a page."""
    import panel as pn

    if pn.state.location is not None:
        pn.state.location.sync(state, URL_PARAMS, on_error=state.apply_url_values)
