"""Benchmark a 32-token forward pass of a TinyStories-Llama-shaped model with every row's logits, and with one row's.

    python bench/logits_bench.py [--old-rev eb2d72c] [--rounds 40] [--threads 1]

Shape of the 15M-parameter TinyStories Llama (issue 33): d = 288, 6 layers, 6 heads, d_ff = 768, vocab 32,000,
context 256, RMSNorm, SwiGLU, RoPE, untied unembedding; seeded random float32 weights (time does not depend on
the values). Times, interleaved round by round in one process (medians): the old package (--old-rev, imported as
slm_old as in patching_bench.py) and this one with every row's logits, and this one with
`forward(tokens, output_positions=-1)`, as generation and the app's views ask for them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old-rev", default="eb2d72c", help="the commit whose py/slm is the baseline")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads")
    args = parser.parse_args()
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    sys.path[:0] = [str(ROOT / "py"), str(ROOT / "bench")]
    import numpy as np
    from patching_bench import import_old

    import slm

    cfg = slm.Config(n_vocab=32000, n_ctx=256, n_model=288, n_heads=6, n_layers=6, d_ff=768, activation="swiglu",
                     norm="rms", positions="rope")
    model = slm.Model.init(cfg, seed=0, dtype=np.float32)
    tokens = np.random.default_rng(0).integers(0, cfg.n_vocab, 32)
    with tempfile.TemporaryDirectory() as tmp:
        old = import_old(args.old_rev, Path(tmp))
        old_model = old.Model(old.Config.from_json(cfg.to_json()), model.params)
        runs = {
            f"{args.old_rev}, all 32 rows": lambda: old_model.forward(tokens),
            "now, all 32 rows": lambda: model.forward(tokens),
            "now, output_positions=-1": lambda: model.forward(tokens, output_positions=-1),
        }
        last = [run().logits[..., -1, :] for run in runs.values()]
        assert all(np.allclose(last[0], other, atol=1e-4) for other in last[1:])
        times: dict[str, list[float]] = {name: [] for name in runs}
        for r in range(args.rounds):
            order = list(runs) if r % 2 == 0 else list(runs)[::-1]
            for name in order:
                start = time.perf_counter()
                runs[name]()
                times[name].append(time.perf_counter() - start)
    print(f"32-token forward (full Trace), Llama shape d=288 L=6 H=6 V=32000 float32, CPython, {args.threads} "
          f"BLAS thread(s), median of {args.rounds} interleaved rounds")
    print("| run | ms |")
    print("|---|---|")
    for name, bucket in times.items():
        print(f"| {name} | {1e3 * statistics.median(bucket):.1f} |")


if __name__ == "__main__":
    main()
