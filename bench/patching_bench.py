"""Benchmark the Patching grid (slm.interventions.activation_patching) against an older slm, in one process.

    python bench/patching_bench.py [--old-rev 426c2b3] [--rounds 300] [--threads 1]

The old package is `git archive`d from --old-rev (default: the last commit before the hooks redesign, whose grid
ran the last block by hand) into a temporary folder and imported as `slm_old`; both get the shipped model's
float64 weights. Each round times the old grid and the new one back to back (the order alternating by round),
so that load on the shared machine affects them alike; the medians and the old/new ratio are printed for the
app's example (T = 6, the shipped model's "the cat near the dogs" with "cat" -> "cats") and for T = 32, as the
app calls it: both traces given, the metric at the last position.
"""

from __future__ import annotations

import argparse
import importlib
import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old-rev", default="426c2b3", help="the commit whose py/slm is the baseline")
    parser.add_argument("--rounds", type=int, default=300, help="interleaved rounds per prompt (medians reported)")
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads")
    return parser.parse_args()


def import_old(rev: str, into: Path):
    """py/slm at `rev`, importable as slm_old (its imports are relative, so a renamed folder works)."""
    blob = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "py/slm"], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(into, filter="data")
    (into / "py" / "slm").rename(into / "slm_old")
    sys.path.insert(0, str(into))
    return importlib.import_module("slm_old")


def main() -> None:
    args = parse_args()
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    sys.path.insert(0, str(ROOT / "py"))
    import numpy as np

    import slm

    new_model = slm.load("shipped")
    with tempfile.TemporaryDirectory() as tmp:
        old = import_old(args.old_rev, Path(tmp))
        old_model = old.Model(old.Config.from_json(new_model.cfg.to_json()), dict(new_model.params))
        words = slm.tokenizer_for(new_model).index
        ids = [words[w] for w in ("<start>", "the", "cat", "near", "the", "dogs")]
        long = (ids + [words[w] for w in ("and", "the", "cat", "near", "the", "dogs", "was")] * 5)[:32]
        print(f"Patching grid, shipped model (float64), {args.rounds} interleaved rounds, median ms; "
              f"old = {args.old_rev}")
        print("| T | old (ms) | new (ms) | new / old |")
        print("|---|---|---|---|")
        for target in (ids, long):
            source = list(target)
            source[2] = words["cats"]
            good, bad = words["was"], words["were"]
            runs = []
            for module, model in ((old, old_model), (slm, new_model)):
                t, s = np.asarray(target), np.asarray(source)
                t_trace, s_trace = model.forward(t), model.forward(s)
                runs.append(lambda m=module, model=model, t=t, s=s, a=t_trace, b=s_trace, good=good, bad=bad:
                            m.interventions.activation_patching(model, t, s, -1, good, bad, a, b))
            results = [run() for run in runs]
            for field in ("residual", "heads"):
                diff = np.abs(getattr(results[0], field) - getattr(results[1], field)).max()
                assert diff < 1e-12, f"old and new grids differ by {diff} ({field})"
            times: list[list[float]] = [[], []]
            for r in range(args.rounds):
                for which in ((0, 1) if r % 2 == 0 else (1, 0)):
                    start = time.perf_counter()
                    runs[which]()
                    times[which].append(time.perf_counter() - start)
            old_ms, new_ms = (1e3 * statistics.median(bucket) for bucket in times)
            print(f"| {len(target)} | {old_ms:.2f} | {new_ms:.2f} | {new_ms / old_ms:.2f} |")


if __name__ == "__main__":
    main()
