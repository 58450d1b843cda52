"""The Features view's work, without Panel: an SAE trained on the model shown (gather, train, index) as a generator
of small steps that the view runs between UI events, an estimate of how long that takes, and the SAE's file (a zip
of SAELens's cfg.json + sae_weights.safetensors) as the page keeps, downloads and reads it.

slm.sae does the work (docs/features.md); this module decides how much of it a page does: how many windows, which
hook, in which chunks.
"""

from __future__ import annotations

import io
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

import slm
import slm.sae as S

from . import storage

# What the view offers, in its order: the presets of slm.sae.PRESETS with a learner's label.
PRESET_LABELS = {"quick": "Quick (256 features, 200 steps)", "shipped-topk": "TopK (512 features, 600 steps)",
                 "shipped-relu": "ReLU + L1 (512 features, 1,500 steps)"}
SAMPLE_WINDOWS = 96  # windows of the model's own text for a model without the grammar: generating them is the cost
SAMPLE_LEN = 32
INDEX_WINDOWS = 256  # windows whose positions the feature list and the top contexts are computed over
HELD_OUT_WINDOWS = 64
GATHER_CHUNK = 32  # windows per step of gathering and indexing


def windows_for(preset: str) -> int:
    """Training windows for the grammar's models: the quick preset needs fewer rows than its steps × batch."""
    return 1000 if preset == "quick" else S.DEFAULT_WINDOWS


def hook_choices(model: slm.Model) -> list[str]:
    """The hook points the view offers: the residual stream after each block."""
    return [f"blocks.{i}.hook_resid_post" for i in range(model.cfg.n_layers)]


@dataclass
class Progress:
    phase: str  # "corpus", "gather", "train", "index", "done"
    done: int
    total: int
    record: dict[str, float] | None = None  # the trainer's last step

    def text(self) -> str:
        if self.phase == "train" and self.record:
            r = self.record
            return (f"Training: step {int(r['step'])} / {self.total} · loss {r['loss']:.3f} · FVE {r['fve']:.3f} · "
                    f"L0 {r['l0']:.1f} · dead {100 * r['dead_fraction']:.0f} %")
        what = {"corpus": "Writing the corpus", "gather": "Gathering activations", "train": "Training",
                "index": "Finding each feature's top contexts", "done": "Done"}[self.phase]
        return f"{what}: {self.done} / {self.total}"


class SaeRun:
    """One SAE for one model: `work()` yields a Progress after every small step (a chunk of windows, a few
    training steps); the view calls next() on it between UI events and stops by no longer calling. After the
    training phase, `sae` is set; once indexed, `done`. `stop_training()` ends the training where it is and
    goes on to index the SAE so far. `from_sae` starts at indexing, for an SAE kept or uploaded."""

    def __init__(self, model: slm.Model, preset: str = "quick", hook: str | None = None, steps: int = 0,
                 text: str | None = None, seed: int = 0) -> None:
        self.model, self.preset, self.seed = model, preset, seed
        self.hook = hook or S.default_hook(model)
        self.settings = S.settings_with(S.PRESETS[preset], steps=steps or None, seed=seed)
        self.text = text or None
        self.trainer: S.Trainer | None = None
        self.sae: S.SAE | None = None
        self.index: S.FeatureIndex | None = None
        self.final: dict[str, Any] = {}  # held-out metrics at the end
        self.seconds = 0.0  # from the first step to the last, the page's time between steps included
        self.phase_seconds: dict[str, float] = {}
        self.done = False  # trained (or given) and indexed
        self._stop = False

    @classmethod
    def from_sae(cls, model: slm.Model, sae: S.SAE) -> SaeRun:
        check_fits(sae, model)
        run = cls(model, hook=sae.hook_name)
        run.sae = sae
        return run

    def stop_training(self) -> None:
        self._stop = True

    @property
    def grammar(self) -> bool:
        return self.text is None and S.speaks_grammar(self.model)

    def corpus(self, n: int, seed: int, split: str = "train") -> Iterator[np.ndarray]:
        """Token windows in chunks: the grammar's documents or the text at once, the model's samples a few at a
        time (each generated window is a generation)."""
        if self.grammar or self.text is not None:
            yield S.corpus_windows(self.model, n, seed=seed, text=self.text, split=split)
            return
        seq_len = min(self.model.cfg.n_ctx, SAMPLE_LEN)
        for start in range(0, n, 8):
            yield S.corpus_windows(self.model, min(8, n - start), seq_len, seed=seed * 100_003 + start)

    def work(self) -> Iterator[Progress]:
        """The run's steps; `phase_seconds` adds up each phase's own time (not the page's between steps)."""
        steps = self._steps()
        while True:
            start = time.perf_counter()
            progress = next(steps, None)
            if progress is None:
                return
            self.phase_seconds[progress.phase] = (self.phase_seconds.get(progress.phase, 0.0)
                                                  + time.perf_counter() - start)
            yield progress

    def _steps(self) -> Iterator[Progress]:
        started = time.perf_counter()
        if self.sae is None:
            n = windows_for(self.preset) if self.grammar else SAMPLE_WINDOWS
            chunks, got = [], 0
            for chunk in self.corpus(n, self.seed):
                chunks.append(chunk)
                got += len(chunk)
                yield Progress("corpus", got, n)
            windows = np.concatenate(chunks)
            held = np.concatenate(list(self.corpus(HELD_OUT_WINDOWS if self.grammar else 16, self.seed + 1,
                                                   "valid")))
            acts = []
            for start in range(0, len(windows), GATHER_CHUNK):
                acts.append(S.gather(self.model, windows[start:start + GATHER_CHUNK], self.hook))
                yield Progress("gather", min(start + GATHER_CHUNK, len(windows)), len(windows))
            self.windows = windows
            self.trainer = t = S.Trainer(np.concatenate(acts), self.settings, self.hook,
                                         S.metadata_for(self.model, windows),
                                         held_out=S.gather(self.model, held, self.hook))
            del acts
            chunk = max(1, min(10, self.settings.steps // 40))
            while not t.done and not self._stop:
                record = t.step(chunk)
                yield Progress("train", t.t, self.settings.steps, record)
            self.sae = t.sae()
            self.final = t.metrics()
            self.trainer.x = None  # the gathered rows can go: the SAE and its history are what the view reads
            index_windows = windows[:INDEX_WINDOWS]
        else:
            index_windows = np.concatenate(list(self.corpus(INDEX_WINDOWS if self.grammar else 64, self.seed)))
        self.index = S.FeatureIndex(self.sae, self.model)
        for start in range(0, len(index_windows), GATHER_CHUNK):
            self.index.add(index_windows[start:start + GATHER_CHUNK])
            yield Progress("index", min(start + GATHER_CHUNK, len(index_windows)), len(index_windows))
        self.seconds += time.perf_counter() - started
        self.done = True
        yield Progress("done", 1, 1)

    def run_all(self) -> SaeRun:
        for _ in self.work():
            pass
        return self


def check_fits(sae: S.SAE, model: slm.Model) -> None:
    """ValueError, in words, when `sae` cannot read `model`'s activations."""
    if sae.hook_name not in model.hook_names():
        raise ValueError(f"this SAE reads {sae.hook_name!r}, which this model does not have")
    width = model.cfg.n_model
    if sae.d_in != width:
        raise ValueError(f"this SAE reads {sae.d_in} numbers per position, this model's residual stream has {width}")


def ordered_features(index: S.FeatureIndex, by: str) -> list[int]:
    """The features that fired, largest first by "density" or "mean" activation, or in number order ("number")."""
    live = np.flatnonzero(index.fired > 0)
    if by == "number":
        return live.tolist()
    key = index.density if by == "density" else index.mean_activation
    return live[np.argsort(-key[live], kind="stable")].tolist()


def density_histogram(index: S.FeatureIndex, bins: int = 24) -> tuple[np.ndarray, np.ndarray, int]:
    """(counts, edges of log10 density, dead): the live features' densities on a log scale, and how many never
    fired on the indexed windows."""
    density = index.density
    live = density[density > 0]
    lo = np.log10(max(1.0 / max(index.rows, 1), 1e-7))
    counts, edges = np.histogram(np.log10(live), bins=bins, range=(lo, 0.0))
    return counts, edges, int((density == 0).sum())


# ---- time, before it starts ----

def estimate_seconds(model: slm.Model, preset: str = "quick", steps: int = 0, text: str | None = None,
                     hook: str | None = None) -> dict[str, float]:
    """How long Start will take on this model, measured on a little of each part: {corpus, gather, train, index,
    total} in seconds. Costs about one forward pass of a window, a few generated tokens and one training step."""
    run = SaeRun(model, preset, hook, steps, text)
    settings = run.settings
    grammar = run.grammar
    n = windows_for(preset) if grammar else SAMPLE_WINDOWS
    seq_len = min(model.cfg.n_ctx, 128) if grammar or text else min(model.cfg.n_ctx, SAMPLE_LEN)
    probe = np.ones((min(8, n), seq_len), dtype=np.int64)
    S.gather(model, probe[:1], run.hook)  # the first pass of a shape pays for allocations the run pays once
    per_window = min(_timed(S.gather, model, probe, run.hook) for _ in range(2)) / len(probe)
    corpus = 0.0
    if not grammar and text is None:
        t0 = time.perf_counter()
        list(slm.generate(model, [1 if model.cfg.n_vocab > 1 else 0], 4, seed=0))
        corpus = (time.perf_counter() - t0) / 4 * (seq_len - 1) * (n + 16)
    rows = np.random.default_rng(0).standard_normal((max(settings.batch_size, 2), model.cfg.n_model))
    trainer = S.Trainer(rows.astype(np.float32), S.settings_with(settings, steps=3), run.hook)
    trainer.step(1)  # the first step allocates
    train = min(_timed(trainer.step, 1) for _ in range(2)) * settings.steps
    gather = per_window * (n + HELD_OUT_WINDOWS)
    index = per_window * 1.3 * min(INDEX_WINDOWS, n)
    out = {"corpus": corpus, "gather": gather, "train": train, "index": index}
    out["total"] = sum(out.values())
    return out


def _timed(function: Any, *args: Any) -> float:
    start = time.perf_counter()
    function(*args)
    return time.perf_counter() - start


def estimate_text(estimate: dict[str, float]) -> str:
    total = estimate["total"]
    parts = [f"{name} {_duration(estimate[name])}" for name in ("corpus", "gather", "train", "index")
             if estimate[name] >= 1]
    detail = f" ({', '.join(parts)})" if parts else ""
    return f"Start will take about {_duration(total)} on this model{detail}."


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


# ---- the SAE's file ----

def sae_bytes(sae: S.SAE) -> bytes:
    """The SAE as one .zip of SAELens's two files (stored, not deflated: the weights hardly compress)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zf:
        for name, data in S.to_files(sae).items():
            zf.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)  # the same SAE, the same bytes
    return out.getvalue()


def read_sae(files: dict[str, bytes]) -> S.SAE:
    """An SAE from what a learner gives: one .zip of SAELens's files, or cfg.json and sae_weights.safetensors."""
    if len(files) == 1:
        data = next(iter(files.values()))
        if zipfile.is_zipfile(io.BytesIO(data)):
            with zipfile.ZipFile(io.BytesIO(data)) as zf:
                files = {name: zf.read(name) for name in zf.namelist() if not name.endswith("/")}
    return S.load(files)


def store_key(model_name: str) -> str:
    return storage.SAE_PREFIX + model_name
