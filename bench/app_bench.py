"""How long the playground takes from a prompt change to every view's sources updated (CPython, no browser).

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=py python bench/app_bench.py [--repeats 30]

Prompt lengths T of 8, 16, 32 and 64 tokens, up to the model's context. Set OPENBLAS_NUM_THREADS=1 (as in
Pyodide): on a busy machine OpenBLAS's threads made the shipped model's T = 32 forward pass ~100x slower.

Models: the shipped one (n_ctx 32), a random model of its size with a context of 64 so that T = 64 can be
measured, and the lesson model.
The timed step is `state.prompt = ...`: one forward pass plus the watchers of what is on the page patching their
Bokeh sources and HTML: the token strip, the Generate view's text (always current) and the open view; the hidden
views only mark themselves stale (views.common.View) and catch up when shown. Each length is timed with three
views open: the model map (the landing view), Attention (the grid of every head) and Patching (it re-runs its
experiment: the corrupted prompt and one batched forward pass of every patch; its example's one-token change at
position 2, metric was − were; the lesson model: dog at position 2, tired − lay). `catch_up_rows` times what
opening each view costs after a prompt change (the shipped model, its full context).
Not a timed test: it reports; the goal is p50 <= 50 ms.
"""

from __future__ import annotations

import asyncio
import os
import time

import numpy as np
import panel as pn

import slm
from playground.app import VIEW_CLASSES, Playground
from playground.state import PlaygroundState
from playground.views.patching import PATCH_EXAMPLES


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


def rows(repeats: int, open_views: tuple[str, ...] = ("map", "attention", "patching")
         ) -> list[tuple[str, int, float, float, float]]:
    """(model and open view, T, p50 ms, p90 ms, forward alone ms) for every model, length and open view. Also run
    inside the static site's worker by bench/browser_app_bench.py, so it uses nothing the site's trimmed stdlib
    may lack."""
    out = []
    for label, model in benchmark_models():
        state = PlaygroundState(model_name="lesson")
        app = Playground(state)
        app.build_hidden()  # every view, as after the first render: the benchmark times them all
        state.use_model(model)
        vocab = slm.tokenizer_for(model).vocab
        example = PATCH_EXAMPLES["lesson" if model.cfg.n_vocab == len(slm.LESSON_VOCAB) else "shipped"]
        app.settings["patching"].param.update(**{k: v for k, v in example.items() if k != "prompt"})
        for length in sorted({min(n, model.cfg.n_ctx) for n in (8, 16, 32, 64)}):
            for view in open_views:
                state.view = view
                texts = prompts(vocab, length, repeats + 3)
                measure(app, texts[:3])  # warm up
                times = measure(app, texts[3:])
                ids = state.tokens.ids
                start = time.perf_counter()
                for _ in range(10):
                    model.forward(ids)
                forward = (time.perf_counter() - start) * 100
                p50, p90 = np.percentile(times, [50, 90])
                out.append((f"{label} [{view} open]", len(ids), float(p50), float(p90), forward))
    return out


def catch_up_rows(repeats: int) -> list[tuple[str, float, float]]:
    """(view, p50 ms, p90 ms) of opening each view right after a prompt change made with the map open (the view
    is stale, and catches up before it is shown): the shipped model, prompts of its full context."""
    model = slm.load_pretrained()
    state = PlaygroundState(model_name="shipped", view="map")
    app = Playground(state)
    app.build_hidden()
    texts = prompts(slm.tokenizer_for(model).vocab, model.cfg.n_ctx, repeats + 3)
    out = []
    for name in VIEW_CLASSES:
        if name == "map":
            continue
        times = []
        for text in texts:
            app.switcher.value = "map"
            state.prompt = text
            start = time.perf_counter()
            app.switcher.value = name
            times.append((time.perf_counter() - start) * 1000)
        p50, p90 = np.percentile(times[3:], [50, 90])
        out.append((name, float(p50), float(p90)))
    return out


async def generation_rate(max_new_tokens: int = 24) -> float:
    """Tokens per second of the app's own streaming generation (shipped model, greedy), every view built: what
    a learner sees, pauses between tokens included."""
    state = PlaygroundState(model_name="shipped", prompt="the cat", temperature=0.0, max_new_tokens=max_new_tokens)
    app = Playground(state)
    app.build_hidden()
    start = time.perf_counter()
    await state.generate()
    return len(state.generated) / (time.perf_counter() - start)


def model_generation_rate(max_new_tokens: int = 31) -> float:
    """Tokens per second of slm.generate itself (shipped model, greedy, KV cache), without the app's pauses."""
    model = slm.load_pretrained()
    start_id = slm.tokenizer_for(model).index["<start>"]
    start = time.perf_counter()
    count = sum(1 for _ in slm.generate(model, [start_id], max_new_tokens, temperature=0))
    return count / (time.perf_counter() - start)


def table(results: list[tuple[str, int, float, float, float]]) -> str:
    lines = [f"{'model':48} {'T':>3} {'p50 ms':>8} {'p90 ms':>8} {'forward ms':>10}"]
    lines += [f"{label:48} {t:>3} {p50:8.1f} {p90:8.1f} {fwd:10.2f}" for label, t, p50, p90, fwd in results]
    return "\n".join(lines)


def catch_up_table(results: list[tuple[str, float, float]]) -> str:
    lines = [f"{'opening a stale view (shipped, T = n_ctx)':48} {'p50 ms':>8} {'p90 ms':>8}"]
    lines += [f"{name:48} {p50:8.1f} {p90:8.1f}" for name, p50, p90 in results]
    return "\n".join(lines)


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    pn.extension()
    print(f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', '(unset)')}")
    print(table(rows(args.repeats)))
    print(catch_up_table(catch_up_rows(args.repeats)))
    print(f"generation: slm.generate {model_generation_rate():.0f} tokens/s; "
          f"in the app, streamed with its pauses: {asyncio.run(generation_rate()):.1f} tokens/s")


if __name__ == "__main__":
    main()
