"""Tab click → view built, for models of real models' shapes (CPython, no browser).

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=py python bench/view_bench.py [--repeats 5]

Random-weight models of GPT-2 small's shape (12 layers × 12 heads; a 512-word vocabulary, and GPT-2's 50,257) and
SmolLM2-135M's (30 layers × 9 heads), narrow (d 192 / 144: the views' cost depends on layers, heads, positions and
vocabulary, not on d), from tests/playground/big_models.py. For each view: the first click (the view is built:
its figures, widgets and first drawing) and a click after a prompt change made in another view (the view catches
up), over prompts of 32 tokens. The Patching view is timed to its first drawing (the grid then fills in from the
event loop: `grid s` is the whole grid of a 15-token prompt, with the page's event loop idle otherwise).
Not a timed test: it reports. The goal is ≤ 0.2 s in CPython (the browser's worker is 3–5× slower; ≤ 1 s there).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import numpy as np
import panel as pn

from playground.app import VIEW_CLASSES, Playground
from playground.state import PlaygroundState

try:  # bench/browser_view_bench.py puts the module in the site's worker first
    from big_models import GPT2_VOCAB, big_model, prompt, words
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "playground"))
    from big_models import GPT2_VOCAB, big_model, prompt, words

VIEWS = [name for name in VIEW_CLASSES if name not in ("generate", "train", "models")]
MODELS = (("12 × 12 (GPT-2 small), V 512", "gpt2-small", 512),
          ("12 × 12 (GPT-2 small), V 50,257", "gpt2-small", GPT2_VOCAB),
          ("30 × 9 (SmolLM2-135M), V 512", "smollm2-135m", 512))


def patching_words() -> dict:
    """An experiment the random models' word vocabulary has: change position 2, metric "ab" − "ac"."""
    vocab = words(512)
    return dict(patch_position=2, patch_token=vocab[40], good_token=vocab[4], bad_token=vocab[5])


async def clicks(shape: str, n_vocab: int, repeats: int) -> dict[str, tuple[float, float, float]]:
    """view -> (first click s, p50 of later clicks s, figures in the view)."""
    app = Playground(PlaygroundState(model_name="lesson", view="generate"))
    state = app.state
    state.add_model(big_model(shape, n_vocab), "loaded")
    app.settings["patching"].param.update(**patching_words())
    state.prompt = prompt(31)
    out = {}
    for view in VIEWS:
        start = time.perf_counter()
        app.switcher.value = view
        first = time.perf_counter() - start
        later = []
        for k in range(repeats):
            app.switcher.value = "generate"
            state.prompt = prompt(31 - (k % 2))  # a change the view missed
            start = time.perf_counter()
            app.switcher.value = view
            later.append(time.perf_counter() - start)
        figures = len(app.views[view].panel.select(pn.pane.Bokeh))
        out[view] = (first, float(np.median(later)), figures)
    app.views["patching"].running = False  # its grid, still filling in, stops at its next step
    return out


async def patching_grid(shape: str) -> float:
    """Seconds until a 15-token prompt's grid is complete, filled in from the event loop as on the page."""
    app = Playground(PlaygroundState(model_name="lesson", view="generate"))
    state = app.state
    state.add_model(big_model(shape), "loaded")
    app.settings["patching"].param.update(**patching_words())
    state.prompt = prompt(14)
    start = time.perf_counter()
    app.switcher.value = "patching"
    view = app.views["patching"]
    while not view.run.job.finished:
        await asyncio.sleep(0.01)
    return time.perf_counter() - start


async def report(repeats: int) -> str:
    """The table (awaited in the running event loop: the Patching view fills its grid from it)."""
    lines = [f"{'model':34} {'view':10} {'first click s':>13} {'later p50 s':>11} {'figures':>7}"]
    for label, shape, n_vocab in MODELS:
        for view, (first, later, figures) in (await clicks(shape, n_vocab, repeats)).items():
            lines.append(f"{label:34} {view:10} {first:13.3f} {later:11.3f} {figures:7d}")
    for label, shape, n_vocab in MODELS:
        if n_vocab == 512:
            lines.append(f"{label:34} patching grid, 15 tokens: {await patching_grid(shape):.2f} s")
    return "\n".join(lines)


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    pn.extension()
    print(f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', '(unset)')}")
    print(asyncio.run(report(args.repeats)))


if __name__ == "__main__":
    main()
