"""The training lab: a run the page drives in short chunks (a Web Worker between UI events) or the CLI in one go.

    run = Lab("repeat")                        # or Lab("text", {"ctx": 32}, text=...), Lab(task_object)
    while not run.finished:
        run.run_for(0.1)                       # or run.step(10): a few steps, then back to the caller
        run.history()                          # curves, the task measure, every head's role scores
    run.model_at(150)                          # the model as it was at a checkpoint (the step slider)
    run.sample()                               # a short generation
    run.model().save("mine.npz")               # weights, tokenizer, meta["curve"] and meta["task"]

A run is deterministic: the same task, settings and seed give the same curve, however the steps are chunked
(evaluation never touches the batch sampler or the weights). A loss that becomes NaN or infinite stops the run
at its last good checkpoint with state "diverged".
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..generate import generate
from ..model import Model
from .optim import AdamW, lr_at
from .step import train_step
from .tasks import Settings, Task, make_task

ROLE_NAMES = ("previous_token", "induction", "duplicate_token")
STATES = ("ready", "running", "done", "diverged")
CHECKPOINT_BYTES = 48_000_000  # all kept checkpoints together; older ones are thinned out beyond this
MAX_CHECKPOINTS = 120


@dataclass
class Checkpoint:
    step: int
    params: dict[str, np.ndarray]  # float32 copies


def _default_every(steps: int) -> int:
    """Evaluate (and keep a checkpoint) about 50 times a run, at most every 10 steps: in the browser an
    evaluation of the repeat preset costs about half a training step, so this keeps it near 5 % of the time."""
    return max(10, -(-steps // 50))


class Lab:
    """One training run of a task, stepped by the caller. Attributes: `task`, `settings`, `state` (one of
    STATES), `message` (for the learner, set when the run is done or diverged), `step_count` (steps done)."""

    def __init__(self, task: str | Task, settings: Settings | Mapping[str, Any] | None = None, *,
                 text: str | bytes | None = None, eval_every: int | None = None,
                 checkpoint_every: int | None = None) -> None:
        self.task = task if isinstance(task, Task) else make_task(task, settings, text)
        if isinstance(task, Task) and settings is not None:
            raise ValueError("give the settings to make_task when passing a Task")
        s = self.settings = self.task.settings
        self.eval_every = eval_every or _default_every(s.steps)
        self.checkpoint_every = checkpoint_every or self.eval_every
        cfg = s.model_config(self.task.n_vocab)
        self._model = Model.init(cfg, seed=s.seed, dtype=np.float32)
        self._model.tokenizer = self.task.tokenizer
        self._rng = np.random.default_rng([s.seed, 7])  # the batch sampler: nothing else draws from it
        self._optimizer = AdamW(self._model.params, betas=(0.9, 0.98), weight_decay=0.1)
        self.step_count = 0
        self.state = "ready"
        self.message = ""
        self.seconds = 0.0  # time spent in training steps and evaluations
        self._train_loss: list[float] = []
        self._lr: list[float] = []
        self._eval_step: list[int] = []
        self._train_at_eval: list[float] = []
        self._val_loss: list[float] = []
        self._measure: list[float] = []
        self._roles: dict[str, list[np.ndarray]] = {r: [] for r in ROLE_NAMES}
        self._checkpoints: list[Checkpoint] = []
        self._checkpoint_spacing = self.checkpoint_every
        self._evaluate()
        self._checkpoint()

    # ---- stepping ----

    @property
    def finished(self) -> bool:
        return self.state in ("done", "diverged")

    def step(self, n: int = 1) -> int:
        """Run up to n training steps (fewer at the end of the run or on divergence); return how many ran."""
        done = 0
        start = time.perf_counter()
        while done < n and not self.finished:
            self._one_step()
            done += 1
        self.seconds += time.perf_counter() - start
        return done

    def run_for(self, seconds: float) -> int:
        """Run steps until `seconds` have passed (at least one step, unless finished); return how many ran."""
        done = 0
        start = time.perf_counter()
        while not self.finished:
            self._one_step()
            done += 1
            if time.perf_counter() - start >= seconds:
                break
        self.seconds += time.perf_counter() - start
        return done

    def run(self) -> Lab:
        """Train to the end (the command line's way)."""
        while not self.finished:
            self.step(100)
        return self

    def _one_step(self) -> None:
        s = self.settings
        self.state = "running"
        lr = lr_at(self.step_count, s.lr, s.warmup, s.steps, 0.1)
        loss, norm = train_step(self._model, self._optimizer, self.task.batch(self._rng), lr, clip=1.0)
        if not (math.isfinite(loss) and math.isfinite(norm)):  # the weights were not updated: stop there
            self._diverge(loss if not math.isfinite(loss) else norm, self.step_count + 1)
            return
        self.step_count += 1
        self._train_loss.append(float(loss))
        self._lr.append(lr)
        at_end = self.step_count == s.steps
        if self.step_count % self.eval_every == 0 or at_end:
            self._evaluate()
            if not math.isfinite(self._val_loss[-1]):
                self._diverge(self._val_loss[-1], self.step_count)
                return
        if self.step_count % self.checkpoint_every == 0 or at_end:
            self._checkpoint()
        if at_end:
            self.state = "done"
            self.message = f"done: {s.steps} steps"

    def _diverge(self, value: float, bad_step: int) -> None:
        """Go back to the last good checkpoint and stop, with a message for the learner."""
        last = self._checkpoints[-1]
        self._restore(last)
        self.state = "diverged"
        self.message = (f"the loss became {value} at step {bad_step}: training stopped at step {last.step}, the "
                        f"last good checkpoint. Lower the learning rate (now {self.settings.lr:g}) and start again.")

    def _restore(self, checkpoint: Checkpoint) -> None:
        for name, value in checkpoint.params.items():
            self._model.params[name][...] = value
        n = checkpoint.step
        self.step_count = n
        del self._train_loss[n:], self._lr[n:]
        keep = sum(1 for s in self._eval_step if s <= n)
        for series in (self._eval_step, self._train_at_eval, self._val_loss, self._measure,
                       *self._roles.values()):
            del series[keep:]

    # ---- measurements ----

    def _evaluate(self) -> None:
        with np.errstate(all="ignore"):  # a diverging model may overflow here; the NaN is caught by the caller
            val_loss, measure = self.task.evaluate(self._model)
            scores = self.task.role_scores(self._model)
        self._eval_step.append(self.step_count)
        recent = self._train_loss[-self.eval_every:]
        self._train_at_eval.append(float(np.mean(recent)) if recent else float("nan"))
        self._val_loss.append(float(val_loss))
        self._measure.append(float(measure))
        for role in ROLE_NAMES:
            self._roles[role].append(np.asarray(scores[role], dtype=np.float64))

    def _checkpoint(self) -> None:
        if self._checkpoints and self._checkpoints[-1].step == self.step_count:
            return
        params = {n: v.astype(np.float32, copy=True) for n, v in self._model.params.items()}
        self._checkpoints.append(Checkpoint(self.step_count, params))
        size = sum(v.nbytes for v in params.values())
        limit = max(8, min(MAX_CHECKPOINTS, CHECKPOINT_BYTES // max(size, 1)))
        if len(self._checkpoints) > limit:
            self._thin()

    def _thin(self) -> None:
        """Keep every other checkpoint (step 0 and the newest always): the spacing doubles, the memory halves.
        It depends only on the step count, so chunked and one-go runs keep the same checkpoints."""
        self._checkpoint_spacing *= 2
        newest = self._checkpoints[-1]
        kept = [c for c in self._checkpoints if c.step % self._checkpoint_spacing == 0]
        if kept[-1] is not newest:
            kept.append(newest)
        self._checkpoints = kept

    # ---- what the page reads ----

    @property
    def checkpoint_steps(self) -> list[int]:
        return [c.step for c in self._checkpoints]

    def history(self) -> dict[str, Any]:
        """The run so far as arrays: every step's training loss and learning rate; at every evaluation (step 0,
        then every `eval_every` steps) the mean training loss since the last one, the validation loss, the task
        measure and each role's (n_evals, L, H) scores on the probe."""
        layers, heads = self.settings.layers, self.settings.heads
        return {
            "step": np.arange(1, self.step_count + 1),
            "train_loss": np.array(self._train_loss),
            "lr": np.array(self._lr),
            "eval_step": np.array(self._eval_step),
            "eval_train_loss": np.array(self._train_at_eval),
            "val_loss": np.array(self._val_loss),
            "measure": np.array(self._measure),
            "measure_name": self.task.measure_name,
            "roles": {r: np.array(v).reshape(len(v), layers, heads) for r, v in self._roles.items()},
            "checkpoints": self.checkpoint_steps,
        }

    def status(self) -> str:
        """The status line: `step N / M · loss L · <measure> X`, then `done` (or the divergence message)."""
        s = self.settings
        loss = self._train_loss[-1] if self._train_loss else self._val_loss[0]
        line = (f"step {self.step_count} / {s.steps} · loss {loss:.3f} · "
                f"{self.task.measure_name} {self._measure[-1]:.2f}")
        if self.state == "done":
            line += " · done"
        elif self.state == "diverged":
            line += " · diverged: " + self.message
        return line

    def first_step_reaching(self, threshold: float = 0.9) -> int | None:
        """The first evaluated step whose task measure is at least `threshold` (None if none yet)."""
        for step, value in zip(self._eval_step, self._measure, strict=True):
            if value >= threshold:
                return step
        return None

    def model_at(self, step: int | None = None) -> Model:
        """The model at the last checkpoint at or before `step` (None: now), with tokenizer, as a copy."""
        if step is None:
            params = {n: v.copy() for n, v in self._model.params.items()}
            at = self.step_count
        else:
            earlier = [c for c in self._checkpoints if c.step <= step] or self._checkpoints[:1]
            params = {n: v.copy() for n, v in earlier[-1].params.items()}
            at = earlier[-1].step
        return Model(self._model.cfg, params, {"step": at, "name": self._name(at), "source": "trained"},
                     self.task.tokenizer)

    def attention(self, step: int | None = None) -> np.ndarray:
        """(L, H, T, T) attention of the probe prompt (task.probe_words() labels its rows) at `step`."""
        return self.model_at(step).forward(self.task.probe).attention

    def sample(self, max_new_tokens: int = 24, temperature: float = 0.8, seed: int = 0,
               prompt: str | None = None, step: int | None = None) -> str:
        """A short generation from the task's sample prompt (or `prompt`), decoded to text."""
        model = self.model_at(step) if step is not None else self._model
        tok = self.task.tokenizer
        ids = self.task.sample_prompt if prompt is None else tok.encode(prompt).ids
        if not ids:
            raise ValueError("the prompt has no token the model knows")
        ids = list(ids)[-self.settings.ctx:]
        new = [s.token for s in generate(model, ids, max_new_tokens, temperature=temperature, seed=seed)]
        return tok.decode(ids + new)

    @property
    def name(self) -> str:
        """What the model selector shows, e.g. "repeat 2x4 d32 (seed 0, step 400)"."""
        return self._name(self.step_count)

    def _name(self, step: int) -> str:
        s = self.settings
        return f"{self.task.name} {s.layers}x{s.heads} d{s.d_model} (seed {s.seed}, step {step})"

    def curve(self) -> dict[str, Any]:
        """meta["curve"]: lists of equal length, one point per evaluation (docs/slm.md)."""
        return {
            "step": list(self._eval_step),
            "train_loss": [_round(v) for v in self._train_at_eval],
            "val_loss": [_round(v) for v in self._val_loss],
            "measure": [_round(v) for v in self._measure],
            "measure_name": self.task.measure_name,
        }

    def model(self) -> Model:
        """The model now, ready for `save`: float32 weights, the tokenizer, meta name/source/curve/task."""
        model = self.model_at(None)
        model.meta = {
            "name": self.name,
            "source": "trained",
            "curve": self.curve(),
            "task": {**self.task.describe(), "steps_done": self.step_count, "state": self.state,
                     "eval_every": self.eval_every},
            "training": {"seconds": round(self.seconds, 2), "numpy": np.__version__},
        }
        return model


def _round(value: float) -> float | None:
    """4 significant digits (a small JSON); NaN as null, which JSON has no number for."""
    return float(f"{value:.4g}") if math.isfinite(value) else None
