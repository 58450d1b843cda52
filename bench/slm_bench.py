"""Benchmark slm's NumPy forward pass against the independent PyTorch reference, and KV-cache generation.

    python bench/slm_bench.py [--positions learned|sinusoidal] [--dtype float32|float64|both] [--threads 1]
                              [--runs 300] [--no-pretrained]

Prints, for T = 8, 16, 32, 64: the median forward time of slm (NumPy, full trace) and of the PyTorch reference
(py/testkit/torch_reference.py, same weights, torch.inference_mode) and their ratio; then generation
tokens/s with the KV cache and with use_cache=False, growing a sequence to 64 tokens. Uses the shipped model's
size (context stretched to 64) when slm.load_pretrained() works, else n_vocab=250, n_ctx=64, n_model=48,
2 layers, 4 heads, d_ff=192, gelu.
BLAS and torch thread counts are both set to --threads (the environment variables must be set before NumPy is
imported, so the heavy imports happen inside main()).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LENGTHS = (8, 16, 32, 64)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--positions", choices=("learned", "sinusoidal"), default="learned")
    parser.add_argument("--dtype", choices=("float32", "float64", "both"), default="both")
    parser.add_argument("--threads", type=int, default=1, help="BLAS and torch threads (matched)")
    parser.add_argument("--runs", type=int, default=300, help="timed forward runs per length (median reported)")
    parser.add_argument("--gen-runs", type=int, default=15, help="timed generations per mode (median reported)")
    parser.add_argument("--no-pretrained", action="store_true", help="ignore the shipped model even if present")
    return parser.parse_args()


def median_times(fns, runs: int) -> list[float]:
    """Median wall time of each function, the functions interleaved run by run so that load on the machine
    affects them alike."""
    times: list[list[float]] = [[] for _ in fns]
    for fn in fns:
        fn()  # warm-up
    for _ in range(runs):
        for fn, bucket in zip(fns, times, strict=True):
            start = time.perf_counter()
            fn()
            bucket.append(time.perf_counter() - start)
    return [statistics.median(bucket) for bucket in times]


def main() -> None:
    args = parse_args()
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    sys.path.insert(0, str(ROOT / "py"))

    import numpy as np
    import torch

    import slm
    from testkit.torch_reference import TorchReference

    torch.set_num_threads(args.threads)
    cfg, source = None, "default config"
    if not args.no_pretrained:
        try:
            # The shipped model's size with its context stretched to the longest length timed (time does not
            # depend on the weights' values, so seeded random weights of that shape stand in).
            shipped = slm.load_pretrained().cfg
            cfg = shipped.replace(n_ctx=max(shipped.n_ctx, LENGTHS[-1]))
            source = f"shipped model's size (n_ctx {shipped.n_ctx} -> {cfg.n_ctx})"
        except (FileNotFoundError, ValueError) as exc:
            source = f"default config (load_pretrained: {exc.__class__.__name__})"
    if cfg is None:
        cfg = slm.Config(n_vocab=250, n_ctx=64, n_model=48, n_heads=4, n_layers=2, d_ff=192, activation="gelu",
                         positions=args.positions)
    lengths = [t for t in LENGTHS if t <= cfg.n_ctx]
    print(f"{source}: {cfg.to_json()}")
    print(f"numpy {np.__version__}, torch {torch.__version__}, threads {args.threads}, median of {args.runs} runs")
    print()

    dtypes = ("float32", "float64") if args.dtype == "both" else (args.dtype,)
    print("| dtype | T | slm NumPy (µs) | PyTorch (µs) | NumPy / PyTorch |")
    print("|---|---|---|---|---|")
    for dtype in dtypes:
        model = slm.Model.init(cfg, seed=0, dtype=getattr(np, dtype))
        reference = TorchReference(cfg, model.params, dtype=getattr(torch, dtype))
        rng = np.random.default_rng(0)
        for t in lengths:
            tokens = rng.integers(0, cfg.n_vocab, size=t)
            tokens_t = torch.tensor(tokens)
            with torch.inference_mode():
                np.testing.assert_allclose(model.forward(tokens).logits, reference(tokens_t)["logits"].numpy(),
                                           rtol=1e-4, atol=1e-4)
                t_numpy, t_torch = median_times([partial(model.forward, tokens), partial(reference, tokens_t)],
                                                args.runs)
            print(f"| {dtype} | {t} | {t_numpy * 1e6:.0f} | {t_torch * 1e6:.0f} | {t_numpy / t_torch:.2f}× |")
    print()

    model = slm.Model.init(cfg, seed=0)
    n_ctx = min(64, cfg.n_ctx)
    prompt = np.random.default_rng(1).integers(0, cfg.n_vocab, size=n_ctx).tolist()
    print(f"Generation (float64, greedy), growing the sequence up to T = {n_ctx} (never past n_ctx, so no sliding):")
    print("| prompt + new tokens | KV cache (tokens/s) | recompute, use_cache=False (tokens/s) | speed-up |")
    print("|---|---|---|---|")
    for n_prompt in (1, n_ctx // 2, n_ctx - 16):
        n_new = n_ctx - n_prompt

        def run(use_cache: bool, n_prompt=n_prompt, n_new=n_new) -> None:
            steps = list(slm.generate(model, prompt[:n_prompt], n_new, temperature=0, use_cache=use_cache))
            assert len(steps) == n_new

        cached, recomputed = median_times([partial(run, True), partial(run, False)], args.gen_runs)
        print(f"| {n_prompt} + {n_new} | {n_new / cached:.0f} | {n_new / recomputed:.0f} | "
              f"{recomputed / cached:.1f}× |")

    # One step at T = n_ctx: a single token through a cache of n_ctx - 1 positions, against a full forward.
    cache = slm.KVCache(cfg.n_layers)
    model.forward(prompt[:-1], cache=cache)

    def cached_step() -> None:
        copy = slm.KVCache(cfg.n_layers)
        copy.keys, copy.values, copy.length = list(cache.keys), list(cache.values), cache.length
        model.forward(prompt[-1:], cache=copy)

    t_step, t_full = median_times([cached_step, partial(model.forward, prompt)], args.runs)
    print()
    print(f"One step at T = {n_ctx}: cached {t_step * 1e6:.0f} µs, full recompute {t_full * 1e6:.0f} µs, "
          f"speed-up {t_full / t_step:.1f}×")

if __name__ == "__main__":
    main()
