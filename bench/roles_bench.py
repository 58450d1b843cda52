"""The head-role targets of the shipped model, measured on held-out probes (issue 13), each printed with whether
it is met.

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=py python bench/roles_bench.py [--weights path.npz]

Probes (slm.train.evaluate, seed EVAL_SEED, none of them drawn by training): 100 documents of the validation split
(previous token), 100 × `<start>` + R + R with |R| = 10 distinct random words (duplicate token, induction,
copying), 100 held-out pronoun sentences, 100 held-out sentences with bracketed asides, 400 held-out closing
brackets, 200 held-out decisions per agreement kind. Scores are slm.roles' (attention mass on the role's keys,
averaged over the query rows). Ablation is zero-ablation (slm.interventions).
"""

from __future__ import annotations

import argparse

import numpy as np

import slm
from slm.train.evaluate import ROLE_TARGETS, agreement, pronoun_heads, role_report


def load(path: str | None) -> slm.Model:
    if path is None:
        return slm.load_pretrained()
    model = slm.Model.load(path)
    return slm.Model(model.cfg, {k: v.astype(np.float64) for k, v in model.params.items()}, model.meta)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", default=None, help="a saved model (default: the shipped one)")
    args = parser.parse_args()
    model = load(args.weights)
    report = role_report(model)
    agree = agreement(model)
    pronoun = pronoun_heads(model)
    best, score = report["role_best"], report["role_best_score"]
    ablated = report["copying_without_induction_heads"]
    rows = [
        ("previous-token head >= 0.9 (held-out documents)", f"L{best['previous_token'][0]}.H"
         f"{best['previous_token'][1]} {score['previous_token']:.3f}", score["previous_token"] >= 0.9),
        ("previous-token head >= 0.9 (<start> + R + R)", f"L{best['previous_token_on_repeats'][0]}.H"
         f"{best['previous_token_on_repeats'][1]} {score['previous_token_on_repeats']:.3f}",
         score["previous_token_on_repeats"] >= ROLE_TARGETS["previous_token"]),
        ("induction head >= 0.5 (<start> + R + R)", f"L{best['induction'][0]}.H{best['induction'][1]} "
         f"{score['induction']:.3f}", score["induction"] >= ROLE_TARGETS["induction"]),
        ("top-1 copying on the second copy of R >= 80 %", f"{100 * report['copying']:.1f} %",
         report["copying"] >= 0.8),
        ("ablating the induction heads lowers copying by >= 40 points",
         f"{100 * report['copying']:.1f} -> {100 * ablated:.1f} % ({len(report['induction_heads'])} heads: "
         f"{', '.join(f'L{i}.H{j}' for i, j in report['induction_heads'])})",
         report["copying"] - ablated >= 0.4),
        ("pronoun head >= 0.8 (attention from it/they to the referent)", f"L{pronoun.best[0]}.H{pronoun.best[1]} "
         f"{pronoun.to_referent[pronoun.best]:.3f} (role score {score['pronoun']:.3f})",
         pronoun.to_referent[pronoun.best] >= ROLE_TARGETS["pronoun"]),
        ("bracket head >= 0.5 (closing position -> matching open bracket)",
         f"L{best['bracket'][0]}.H{best['bracket'][1]} {score['bracket']:.3f}",
         score["bracket"] >= ROLE_TARGETS["bracket"]),
    ]
    for depth in (1, 2):
        value = report["brackets"][f"choice_depth{depth}"]
        rows.append((f"closing bracket predicted correctly >= 95 %, depth {depth} (matching vs other bracket)",
                     f"{100 * value:.1f} % (top-1 among all tokens {100 * report['brackets'][f'top1_depth{depth}']:.1f}"
                     " %)", value >= 0.95))
    rows.append(("held-out agreement >= 98 %", f"{100 * agree.accuracy:.1f} %", agree.accuracy >= 0.98))
    width = max(len(r[0]) for r in rows)
    for name, value, met in rows:
        print(f"{name:<{width}}  {value:<55} {'MET' if met else 'NOT MET'}")
    print("\nzero-ablating each role's strongest head (copying / matching bracket chosen / referent, referent_verb):")
    for role, effect in report["ablations"].items():
        layer, head = effect["head"]
        ref = effect["referent"]
        print(f"  {role:<15} L{layer}.H{head}: copying {100 * effect['copying']:.1f} %, brackets "
              f"{100 * effect['bracket_choice']:.1f} %, referent {100 * ref['referent']:.0f} % / "
              f"{100 * ref['referent_verb']:.0f} %")
    print(f"  (unablated: copying {100 * report['copying']:.1f} %, "
          f"brackets {100 * report['brackets']['choice']:.1f} %, referent {100 * agree.by_kind['referent']:.0f} % / "
          f"{100 * agree.by_kind['referent_verb']:.0f} %)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
