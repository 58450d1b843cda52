"""Train the shipped model: `PYTHONPATH=py python -m slm.train --help`.

With `--task repeat|grammar|text FILE` it trains one of the training lab's tasks instead (slm.train.lab_cli).

Writes the weights (.npz, loadable with Model.load / slm.load_pretrained), the loss curve (JSON, PNG and a
Bokeh HTML page) and a metrics JSON next to them. tqdm shows progress if installed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from ..model import Model
from .evaluate import (
    EVAL_SEED,
    agreement,
    noun_numbers,
    pronoun_heads,
    role_probe_words,
    role_report,
    sample_parse_rate,
)
from .loop import TrainConfig, train
from .plot import loss_curve_html, loss_curve_png

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "weights" / "shipped.npz"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m slm.train", description=__doc__.split("\n")[0])
    for f in dataclasses.fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        default = f.default
        if isinstance(default, bool):
            parser.add_argument(flag, type=lambda s: s.lower() in ("1", "true", "yes"), default=default,
                                metavar="BOOL", help=f"(default {default})")
        elif default is None:
            parser.add_argument(flag, type=int, default=None, help="(default: 4 * n_model)")
        else:
            parser.add_argument(flag, type=type(default), default=default, help=f"(default {default})")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"weights file (default {DEFAULT_OUT})")
    parser.add_argument("--store-dtype", default="float32", choices=("float32", "float64"),
                        help="dtype of the saved arrays (default float32; slm.load_pretrained casts to float64)")
    parser.add_argument("--no-eval", action="store_true", help="skip the held-out metrics at the end")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--verify-against", type=Path, default=None, metavar="NPZ",
                        help="after training, check that the weights equal this file's bit for bit (exit 1 if not)")
    return parser


def _progress_bar(total: int, enabled: bool):
    if not enabled:
        return None, lambda: None
    try:
        from tqdm import tqdm  # only the command line needs tqdm
    except ImportError:
        return None, lambda: None
    bar = tqdm(total=total, unit="step", dynamic_ncols=True)
    state = {"valid": float("nan")}

    def update(step: int, loss: float, valid: float | None) -> None:
        if valid is not None:
            state["valid"] = valid
            bar.write(f"step {step:>6}  valid loss {valid:.4f}")
        bar.set_postfix(loss=f"{loss:.3f}", valid=f"{state['valid']:.3f}", refresh=False)
        bar.update(1)

    return update, bar.close


def metrics(model: Model) -> dict:
    """The held-out metrics of the model card (the same functions tests/test_shipped_model.py asserts)."""
    agree = agreement(model)
    heads = pronoun_heads(model)
    samples = sample_parse_rate(model)
    layer, head, query = heads.choice()
    looked = heads.to_referent if query == "pronoun" else heads.copula_to_referent
    other = heads.to_other if query == "pronoun" else heads.copula_to_other
    return {
        "agreement_accuracy": agree.accuracy,
        "agreement_by_kind": agree.by_kind,
        "agreement_n": agree.n,
        "sample_parse_rate": samples.rate,
        "sample_n": samples.n,
        "sample_examples": samples.examples,
        "pronoun_head": [layer, head],
        "pronoun_head_query": query,
        "pronoun_head_attention": float(looked[layer, head]),
        "pronoun_head_attention_to_other_noun": float(other[layer, head]),
        "pronoun_attention_to_referent": heads.to_referent.round(4).tolist(),
        "pronoun_attention_to_other": heads.to_other.round(4).tolist(),
        "copula_attention_to_referent": heads.copula_to_referent.round(4).tolist(),
        "copula_attention_to_other": heads.copula_to_other.round(4).tolist(),
        "pronoun_n": heads.n,
        "roles": role_report(model),
    }


APP_PROBES = 12  # held-out probes per role saved with the weights, for the playground's Heads view


def role_notes(n_ctx: int) -> dict:
    """What the playground needs to score the pronoun and bracket roles without the corpus (slm.train is not part
    of the site): the nouns' numbers and a few held-out probes per role (the first one is its "show me")."""
    probes = role_probe_words(APP_PROBES, seed=EVAL_SEED + 1, n_ctx=n_ctx)
    probes.pop("previous_token_on_repeats")
    return {"noun_number": noun_numbers(), "probes": {role: [" ".join(p[1:]) for p in prompts]
                                                      for role, prompts in probes.items()}}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(a == "--task" or a.startswith("--task=") for a in argv):
        from .lab_cli import main as lab_main  # the lab's tasks; the shipped model's path below is unchanged

        return lab_main(argv)
    args = _parser().parse_args(argv)
    tc = TrainConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig)})
    reference = Model.load(args.verify_against) if args.verify_against is not None else None  # before --out
    update, close = _progress_bar(tc.steps, not args.no_progress)
    started = time.perf_counter()
    model, curve = train(tc, update)
    close()

    stored = {n: v.astype(args.store_dtype) for n, v in model.params.items()}
    model = Model(model.cfg, stored, model.meta)
    training = model.meta["training"]
    training["command"] = "python -m slm.train " + shlex.join(argv)
    training["threads"] = {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    training["numpy"] = np.__version__
    training["store_dtype"] = args.store_dtype
    if not args.no_eval:
        evaluated = Model(model.cfg, {n: v.astype(np.float64) for n, v in stored.items()}, model.meta)
        found = metrics(evaluated)
        training["metrics"] = found
        model.meta["pronoun_head"] = found["pronoun_head"]
        model.meta["pronoun_head_query"] = found["pronoun_head_query"]
        model.meta["roles"] = {**role_notes(model.cfg.n_ctx), "best": found["roles"]["role_best"]}
    training["total_seconds"] = round(time.perf_counter() - started, 1)

    out = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    model.save(out)
    stem = out.with_suffix("")
    curve_dict = compact(curve.to_dict())
    small = compact(thin(curve.to_dict()))
    Path(f"{stem}_loss.json").write_text(json.dumps(small, separators=(",", ":")) + "\n", encoding="utf-8")
    loss_curve_png(curve_dict, f"{stem}_loss.png")  # the plots from every step
    loss_curve_html(curve_dict, f"{stem}_loss.html")
    Path(f"{stem}_metrics.json").write_text(json.dumps(training, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in training.items() if k != "config"}, indent=1, sort_keys=True))
    print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB) and {stem}_loss.json/.png/.html, {stem}_metrics.json")
    if reference is not None:
        return 0 if same_weights(model, reference) else 1
    return 0


def thin(curve: dict, max_points: int = 500) -> dict:
    """The per-step series (train loss, gradient norm: means over blocks of `every` steps; learning rate: at
    the block's last step) at no more than `max_points` points; the validation points are kept as they are."""
    n = len(curve["step"])
    every = max(1, -(-n // max_points))
    out = dict(curve, every=every)
    if every == 1:
        return out
    ends = list(range(every, n + 1, every))
    if not ends or ends[-1] != n:
        ends.append(n)
    starts = [0, *ends[:-1]]
    out["step"] = [curve["step"][e - 1] for e in ends]
    out["lr"] = [curve["lr"][e - 1] for e in ends]
    for key in ("train_loss", "grad_norm"):
        out[key] = [float(np.mean(curve[key][a:b])) for a, b in zip(starts, ends, strict=True)]
    return out


def compact(curve: dict) -> dict:
    """The curve with its floats rounded to 4 significant digits (keeps the JSON small)."""
    def r(value):
        return float(f"{value:.4g}") if isinstance(value, float) else value

    return {k: [r(v) for v in vals] if isinstance(vals, list) else r(vals) for k, vals in curve.items()}


def same_weights(a: Model, b: Model) -> bool:
    """Report whether two models have the same config and bit-for-bit equal arrays."""
    differ = [n for n in a.params if n not in b.params or a.params[n].dtype != b.params[n].dtype
              or not np.array_equal(a.params[n], b.params[n])]
    if a.cfg != b.cfg or differ or a.params.keys() != b.params.keys():
        print(f"DIFFERENT weights: {', '.join(differ) or 'config / names'}")
        return False
    print("identical weights (bit for bit)")
    return True


if __name__ == "__main__":
    raise SystemExit(main())
