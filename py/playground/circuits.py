"""What the Heads and Patching views show, as plain functions of a model and its traces (no Panel or Bokeh here,
so the numbers can be tested directly).

Heads: slm.roles' scores on the current prompt and on a standard probe set. The probes: `<start>` + R + R with
R random words of the model's vocabulary (previous token, duplicate token, induction; every model has them),
and, when the weights were saved with them (meta["roles"], written by training from held-out sentences of the
corpus, which is not part of the site), held-out documents, pronoun sentences and sentences with bracketed asides.

Patching: slm.interventions.activation_patching between the prompt and the prompt with one token changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

import slm
from slm import interventions, roles

from .models import START

REPEAT_LENGTHS = (4, 6, 8, 10)  # |R| of the repeated-word probes (cut to what the vocabulary and context allow)
REPEATS_PER_LENGTH = 3
PROBE_SEED = 2024
FOUR_ROLES = ("previous_token", "induction", "pronoun", "bracket")  # the lesson's four; duplicate token is a helper


def noun_numbers(model: slm.Model) -> dict[str, str]:
    notes = model.meta.get("roles")
    numbers = notes.get("noun_number") if isinstance(notes, dict) else None
    return dict(numbers) if isinstance(numbers, dict) else {}


def _vocab_words(vocab: Sequence[str]) -> list[int]:
    """Ids of the plain words (no <specials>, no punctuation), for random probes."""
    return [i for i, w in enumerate(vocab) if w.isalpha()]


def repeated_probes(model: slm.Model, vocab: Sequence[str]) -> list[list[int]]:
    words = _vocab_words(vocab)
    start = vocab.index(START) if START in vocab else None
    rng = np.random.default_rng(PROBE_SEED)
    longest = min(len(words), (model.cfg.n_ctx - 1) // 2)
    lengths = sorted({min(n, longest) for n in REPEAT_LENGTHS if longest >= 2})
    return [roles.repeated_tokens(words, n, rng, start).tolist() for n in lengths for _ in range(REPEATS_PER_LENGTH)]


def probe_prompts(model: slm.Model, tokenizer: slm.WordTokenizer) -> dict[str, list[list[int]]]:
    """role -> probe prompts (token ids, <start> first) for this model."""
    repeats = repeated_probes(model, tokenizer.vocab)
    probes = {"previous_token": repeats, "duplicate_token": repeats, "induction": repeats}
    notes = model.meta.get("roles")
    saved = notes.get("probes") if isinstance(notes, dict) else None
    start = tokenizer.index.get(START)
    for role, texts in (saved or {}).items():
        if role in roles.ROLES and isinstance(texts, list):
            prompts = [[start, *tokenizer.encode(str(t)).ids] for t in texts if start is not None]
            prompts = [p[: model.cfg.n_ctx] for p in prompts]
            if prompts:
                probes[role] = prompts
    return probes


_PROBE_CACHE: dict[str, Any] = {}


def forget_probes(model: slm.Model | None) -> None:
    """Drop the kept scores when they are `model`'s (a model removed from the page leaves no reference here)."""
    if model is not None and _PROBE_CACHE.get("model") is model:
        _PROBE_CACHE.clear()


def probe_scores(model: slm.Model, tokenizer: slm.WordTokenizer) -> dict[str, roles.RoleScore]:
    """Every role's scores pooled over the model's probe set (computed once per model: the last one is kept)."""
    if _PROBE_CACHE.get("model") is model:
        return _PROBE_CACHE["scores"]
    numbers = noun_numbers(model)
    vocab = tokenizer.vocab
    probes = probe_prompts(model, tokenizer)
    patterns = _attention_patterns(model, [ids for prompts in probes.values() for ids in prompts])
    scores = {}
    for role in roles.ROLES:
        per = []
        for ids in probes.get(role, []):
            per.append(roles.score_targets(patterns[tuple(ids)],
                                           roles.role_targets(role, [vocab[i] for i in ids], numbers)))
        scores[role] = roles.mean_scores(per) if per else _nothing(model)
    _PROBE_CACHE.update(model=model, scores=scores)
    return scores


class _Pattern(NamedTuple):
    """What roles.score_targets reads of a trace: one sequence's tokens and its (L, H, T, T) attention."""

    tokens: np.ndarray
    attention: np.ndarray


def _attention_patterns(model: slm.Model, prompts: list[list[int]]) -> dict[tuple[int, ...], _Pattern]:
    """Each distinct prompt's attention, from one batched pass per prompt length (the roles share their
    probes: GPT-2 small's shape ran 36 passes for 12 prompts) that unembeds one row only (a 50k vocabulary)."""
    by_length: dict[int, list[tuple[int, ...]]] = {}
    for ids in dict.fromkeys(tuple(p) for p in prompts):
        by_length.setdefault(len(ids), []).append(ids)
    patterns = {}
    for group in by_length.values():
        attention = model.forward(np.asarray(group), output_positions=-1).attention  # (B, L, H, T, T)
        for k, ids in enumerate(group):
            patterns[ids] = _Pattern(np.asarray(ids), attention[k])
    return patterns


def _nothing(model: slm.Model) -> roles.RoleScore:
    return roles.RoleScore(np.full((model.cfg.n_layers, model.cfg.n_heads), np.nan), 0)


def prompt_scores(model: slm.Model, trace: slm.Trace, labels: Sequence[str]) -> dict[str, roles.RoleScore]:
    return roles.role_scores(trace, labels, noun_numbers(model))


class Example(NamedTuple):
    prompt: str  # the text after <start>
    position: int  # a query row of the role in it
    layer: int
    head: int


def show_me(model: slm.Model, tokenizer: slm.WordTokenizer, role: str) -> Example | None:
    """A probe prompt that shows `role`, the role's strongest head on the probe set, and a query row where that
    head does its job (the row where it puts the most weight on the role's keys); None if the model has none."""
    best = roles.strongest(probe_scores(model, tokenizer)[role])
    prompts = probe_prompts(model, tokenizer).get(role)
    if best is None or not prompts:
        return None
    ids, vocab, (layer, head) = prompts[0], tokenizer.vocab, best
    targets = roles.role_targets(role, [vocab[i] for i in ids], noun_numbers(model))
    targets = [(q, keys) for q, keys in targets if keys]
    if not targets:
        return None
    attention = model.forward(np.asarray(ids)).layers[layer].attention[head]
    query = max(targets, key=lambda t: attention[t[0], t[1]].sum())[0]
    return Example(tokenizer.decode(ids[1:]), query, layer, head)


SCORE_COLUMNS = ("x", "y", "row", "head", "score", "color_score", "text", "role", "role_title", "layer", "n")


def row_count(n_layers: int, shown: Sequence[str] = roles.ROLES) -> int:
    """Rows of the roles × layers heatmap: each role's layers, and an empty row between roles."""
    return len(shown) * (n_layers + 1) - 1


def cell_at(x: float | None, y: float | None, n_layers: int, n_heads: int,
            shown: Sequence[str] = roles.ROLES) -> tuple[str, int, int] | None:
    """(role, layer, head) of the heatmap cell at data coordinates (x, y), or None off the cells; `shown`: the
    roles drawn, in order (a model with many heads shows one at a time)."""
    if x is None or y is None:
        return None
    head, row = int(np.floor(x + 0.5)), int(np.floor(y + 0.5))
    role_index, layer = divmod(row, n_layers + 1)
    if not (0 <= head < n_heads and 0 <= role_index < len(shown) and layer < n_layers and row >= 0):
        return None
    return shown[role_index], layer, head


def score_columns(scores: dict[str, roles.RoleScore], n_layers: int, n_heads: int,
                  shown: Sequence[str] = roles.ROLES) -> dict:
    """One ColumnDataSource dict for the roles × layers × heads heatmap: x = head, y = row (see cell_at)."""
    cols: dict[str, list] = {k: [] for k in SCORE_COLUMNS}
    for k, role in enumerate(shown):
        score = scores[role]
        for i in range(n_layers):
            for j in range(n_heads):
                value = float(score.scores[i, j]) if score.n else float("nan")
                cols["x"].append(j)
                cols["y"].append(k * (n_layers + 1) + i)
                cols["row"].append(f"{roles.ROLE_TITLES[role]} · L{i}")
                cols["head"].append(j)
                cols["score"].append(value)
                cols["color_score"].append(value if np.isfinite(value) else -1.0)
                cols["text"].append(f"{value:.2f}" if np.isfinite(value) else "–")
                cols["role"].append(role)
                cols["role_title"].append(roles.ROLE_TITLES[role])
                cols["layer"].append(i)
                cols["n"].append(score.n)
    return cols


# ---- patching ----

class PatchRun(NamedTuple):
    """A patching experiment: its grid is computed by `job` in steps (a large model's takes seconds); `error` says
    what is missing when it cannot run."""

    error: str
    job: interventions.PatchingJob | None = None
    target_labels: list[str] | None = None
    source_labels: list[str] | None = None
    changed: int = -1  # the changed position
    good: int = -1
    bad: int = -1
    target_ids: list[int] | None = None
    source_trace: slm.Trace | None = None

    @property
    def result(self) -> interventions.Patching | None:
        """The grid so far (NaN where a patch has not run yet)."""
        return None if self.job is None else self.job.result


def patch_run(model: slm.Model, tokenizer: slm.WordTokenizer, ids: Sequence[int], labels: Sequence[str],
              position: int, token: str, good: str, bad: str, patch_from: str,
              trace: slm.Trace | None = None) -> PatchRun:
    """Clean = the prompt; corrupted = the prompt with `token` at `position`. patch_from "clean": clean activations
    into the corrupted run (how much of the clean answer each one recovers); "corrupted": the other way. The
    metric is logit(good) − logit(bad) at the last position. The grid is not run yet: run.job.run_for() runs it."""
    def lookup(word: str, spaced: bool) -> int | None:  # a Vocabulary also finds " cat" for "cat"
        return tokenizer.lookup(word, spaced) if hasattr(tokenizer, "lookup") else tokenizer.index.get(word)

    # A word typed without its space takes the spacing of the token it replaces; the metric's words, the spacing
    # most of the prompt's words have (GPT-2's " Mary", not its "Mary", after the first word).
    replaced = labels[position] if 0 <= position < len(labels) else ""
    words_spaced = sum(label.startswith(" ") for label in labels[1:]) * 2 > len(labels[1:])
    token_id, good_id, bad_id = lookup(token, replaced.startswith(" ")), lookup(good, words_spaced), \
        lookup(bad, words_spaced)
    for word, found, what in ((token, token_id, "The replacement token"), (good, good_id, "The first metric token"),
                              (bad, bad_id, "The second metric token")):
        if found is None:
            return PatchRun(f"{what} “{word}” is not in this model's vocabulary (as one token).")
    if good_id == bad_id:
        return PatchRun("The two metric tokens are the same: their logit difference is always 0.")
    if not 1 <= position < len(ids):
        return PatchRun(f"The prompt has no position {position} to change (positions 1 to {len(ids) - 1}).")
    if ids[position] == token_id:
        return PatchRun(f"Position {position} already holds “{token}”: choose another token to make a corrupted "
                        "prompt.")
    corrupted = list(ids)
    corrupted[position] = token_id
    corrupted_labels = list(labels)
    corrupted_labels[position] = token
    clean_trace = trace if trace is not None else model.forward(np.asarray(ids))
    corrupted_trace = model.forward(np.asarray(corrupted))
    if patch_from == "clean":
        target, source, t_trace, s_trace = corrupted, list(ids), corrupted_trace, clean_trace
        t_labels, s_labels = corrupted_labels, list(labels)
    else:
        target, source, t_trace, s_trace = list(ids), corrupted, clean_trace, corrupted_trace
        t_labels, s_labels = list(labels), corrupted_labels
    job = interventions.PatchingJob(model, np.asarray(target), np.asarray(source), -1, good_id, bad_id,
                                    t_trace, s_trace)
    return PatchRun("", job, t_labels, s_labels, position, good_id, bad_id, target, s_trace)


def patched_trace(model: slm.Model, target_ids: Sequence[int], source_trace: slm.Trace,
                  site: interventions.Site) -> slm.Trace:
    """The run of one heatmap cell alone (unbatched, for the other views): the target prompt with `site` patched in
    from the source run."""
    hooks = interventions.patch_hooks(source_trace, [site])
    # patch_hooks writes into a batch of one: give the hook that axis and take it off again
    return model.forward(np.asarray(target_ids), fwd_hooks=[(name, lambda value, hook, fn=fn: fn(value[None], hook)[0])
                                                            for name, fn in hooks])
