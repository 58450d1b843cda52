"""How long the playground takes from a prompt change to every view's sources updated (CPython, no browser).

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=py python bench/app_bench.py [--repeats 30]

Prompt lengths T of 8, 16, 32 and 64 tokens, up to the model's context. Set OPENBLAS_NUM_THREADS=1 (as in
Pyodide): on a busy machine OpenBLAS's threads made the shipped model's T = 32 forward pass ~100x slower.

Models: the shipped one (n_ctx 32), a random model of its size with a context of 64 so that T = 64 can be
measured, and the lesson model.
The timed step is `state.prompt = ...`: one forward pass plus every watcher patching its Bokeh sources and HTML.
Not a timed test: it reports; the goal is p50 <= 50 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import panel as pn

import slm
from playground.app import Playground
from playground.state import PlaygroundState


def benchmark_models() -> list[tuple[str, slm.Model]]:
    """The shipped model, and a random model of its size with a context of 64 so that T = 64 can be timed (the
    time does not depend on the weights' values); the lesson model."""
    shipped = slm.load_pretrained()
    stretched = slm.Model.init(shipped.cfg.replace(n_ctx=64), seed=0)
    stretched.meta["vocab"] = shipped.meta["vocab"]
    return [("shipped", shipped), ("shipped size, random, n_ctx 64", stretched),
            ("lesson model", slm.CausalLanguageModel())]


def prompts(vocab: list[str], length: int, count: int) -> list[str]:
    """`count` different prompts that encode to exactly `length` tokens (with <start>)."""
    words = [w for w in vocab if w.isalpha()]
    return [" ".join(words[(i + j) % len(words)] for j in range(length - 1)) for i in range(count)]


def measure(app: Playground, texts: list[str]) -> list[float]:
    times = []
    for text in texts:
        start = time.perf_counter()
        app.state.prompt = text  # synchronous: every watcher has run when this returns
        times.append((time.perf_counter() - start) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    pn.extension()
    cases = benchmark_models()
    print(f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', '(unset)')}")
    print(f"{'model':48} {'T':>3} {'p50 ms':>8} {'p90 ms':>8} {'forward ms':>10}")
    for label, model in cases:
        state = PlaygroundState(model_name="lesson")
        app = Playground(state)
        app.build_hidden()  # every view, as after the first render: the benchmark times them all
        state.use_model(model)
        for length in sorted({min(n, model.cfg.n_ctx) for n in (8, 16, 32, 64)}):
            texts = prompts(slm.tokenizer_for(model).vocab, length, args.repeats + 3)
            measure(app, texts[:3])  # warm up
            times = measure(app, texts[3:])
            ids = state.tokens.ids
            start = time.perf_counter()
            for _ in range(10):
                model.forward(ids)
            forward = (time.perf_counter() - start) * 100
            p50 = statistics.median(times)
            p90 = statistics.quantiles(times, n=10)[-1]
            print(f"{label:48} {len(ids):>3} {p50:8.1f} {p90:8.1f} {forward:10.2f}")


if __name__ == "__main__":
    main()
