"""`python -m slm.train --task repeat|grammar|text FILE`: the training lab's run, from the command line.

It trains exactly as the Train view does (slm.train.lab.Lab, the same presets and limits) and writes the same
.npz: the weights, the tokenizer, meta["curve"] and meta["task"].
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .lab import Lab
from .tasks import LIMITS, PRESETS, TASKS, make_task


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m slm.train --task", description=__doc__.split("\n")[0])
    p.add_argument("--task", required=True, choices=TASKS)
    p.add_argument("file", nargs="?", type=Path, help="the text to train on (--task text)")
    for name, limit in LIMITS.items():
        kind = float if name == "lr" else int
        p.add_argument("--" + name.replace("_", "-"), type=kind, default=None,
                       help=f"{limit.what}, {limit.low:g} to {limit.high:g} (default: the task's preset)")
    p.add_argument("--out", type=Path, default=None, help="the .npz to write (default: <task>.npz)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    changes = {name: getattr(args, name) for name in LIMITS if getattr(args, name) is not None}
    text = None
    if args.task == "text":
        if args.file is None:
            print("--task text needs a FILE to train on", file=sys.stderr)
            return 2
        text = args.file.read_bytes()
    try:
        task = make_task(args.task, PRESETS[args.task].replace(**changes), text)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    run = Lab(task)
    started = time.perf_counter()
    while not run.finished:
        run.run_for(2.0)
        if not args.quiet:
            print(run.status(), flush=True)
    out = args.out or Path(f"{args.task}.npz")
    out.parent.mkdir(parents=True, exist_ok=True)
    model = run.model()
    model.save(out)
    summary = {"out": str(out), "state": run.state, "steps": run.step_count,
               "seconds": round(time.perf_counter() - started, 1),
               "final_val_loss": model.meta["curve"]["val_loss"][-1],
               "measure": model.meta["curve"]["measure"][-1], "measure_name": task.measure_name,
               "first_step_measure_0.9": run.first_step_reaching(0.9)}
    print(json.dumps(summary))
    if run.state == "diverged":
        print(run.message, file=sys.stderr)
        return 1
    return 0
