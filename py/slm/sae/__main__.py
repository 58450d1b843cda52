"""Train a sparse autoencoder on a model's activations: `PYTHONPATH=py python -m slm.sae --help`.

    python -m slm.sae --model shipped --hook blocks.0.hook_resid_post --d-sae 512 --out runs/sae0

Gathers activations at the hook (default: after the middle block) from the corpus (slm.sae.corpus_windows: the
grammar's documents for the shipped model, --text FILE, or the model's own samples), trains a preset with any field
changed by a flag, prints progress and the metrics on held-out windows, and saves the SAE in SAELens's layout.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import numpy as np

from ..loading import load
from . import files
from .activations import corpus_windows, default_hook, gather, metadata_for
from .metrics import evaluate
from .train import DEFAULT_WINDOWS, PRESETS, Trainer, settings_with


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m slm.sae", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="shipped", help="'shipped' or a model file / folder slm.load reads")
    parser.add_argument("--hook", default=None, help="hook point (default: blocks.{middle}.hook_resid_post)")
    parser.add_argument("--preset", default="shipped-topk", choices=sorted(PRESETS))
    for f in dataclasses.fields(PRESETS["shipped-topk"]):
        parser.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=None,
                            help=f"(default: the preset's; {f.name}={f.default} in the default settings)")
    parser.add_argument("--windows", type=int, default=DEFAULT_WINDOWS,
                        help=f"token windows to train on (default {DEFAULT_WINDOWS})")
    parser.add_argument("--eval-windows", type=int, default=256, help="held-out windows for the metrics")
    parser.add_argument("--seq-len", type=int, default=None, help="tokens per window (default: n_ctx, at most 128)")
    parser.add_argument("--text", type=Path, default=None, help="train on this text file's tokens")
    parser.add_argument("--log-every", type=int, default=200, help="steps between progress lines")
    parser.add_argument("--out", type=Path, default=None, help="folder for cfg.json + sae_weights.safetensors")
    parser.add_argument("--json", action="store_true", help="print the final metrics as one JSON line too")
    return parser


def main(argv: list[str] | None = None) -> dict:
    args = _parser().parse_args(argv)
    changes = {f.name: getattr(args, f.name) for f in dataclasses.fields(PRESETS["shipped-topk"])}
    settings = settings_with(PRESETS[args.preset], **changes)
    model = load(args.model, dtype=np.float32)
    hook = args.hook or default_hook(model)
    text = args.text.read_text() if args.text else None

    start = time.perf_counter()
    tokens = corpus_windows(model, args.windows, args.seq_len, seed=settings.seed, text=text)
    held_out = corpus_windows(model, args.eval_windows, args.seq_len, seed=settings.seed + 1, text=text,
                              split="valid")
    acts = gather(model, tokens, hook)
    gathered = time.perf_counter() - start
    print(f"{model.meta.get('name', args.model)}: {acts.shape[0]} activations of d={acts.shape[1]} at {hook} "
          f"in {gathered:.1f} s; {settings}", flush=True)
    trainer = Trainer(acts, settings, hook, metadata_for(model, tokens))
    for record in trainer.run(args.log_every):
        print(f"step {record['step']:5d}  mse {record['mse']:.4f}  fve {record['fve']:.4f}  l0 {record['l0']:.2f}  "
              f"dead {record['dead_fraction']:.3f}  ({trainer.seconds:.1f} s)", flush=True)
    sae = trainer.sae()
    metrics = evaluate(model, sae, held_out)
    metrics.pop("density")
    metrics |= {"train_seconds": trainer.seconds, "gather_seconds": gathered, "resampled": trainer.resampled}
    print("held out: " + "  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                                   for k, v in metrics.items()))
    if args.out:
        files.save(sae, args.out)
        print(f"saved {args.out / files.CFG_FILE} and {args.out / files.WEIGHTS_FILE}")
    if args.json:
        print(json.dumps(metrics))
    return metrics


if __name__ == "__main__":
    main()
