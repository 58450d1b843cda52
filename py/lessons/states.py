"""The page's state as a lesson names it: a step's opening link (`?view=attention&layer=1`) and a select
question's answer (`answer: layer=1 head=0`).

The keys are the playground's URL keys (py/playground/state.py and the views' settings; listed in
docs/playground.md). This package does not import the playground (it runs without Panel), so the list is written
here; tests/lessons/test_states.py fails when the two lists part.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

VIEWS = ("map", "generate", "attention", "residual", "next", "block", "heads", "patching", "train", "features",
         "models", "lessons")
# Old names of views a lesson may still use: `view=lesson` was the Block view before lessons became files
# (playground.state.VIEW_ALIASES; the same test keeps them equal).
VIEW_ALIASES = {"lesson": "block"}
STATE_KEYS = (
    # the shared state (playground.state.URL_PARAMS), but `embed`: the lesson page decides that
    "prompt", "model", "max_new_tokens", "temperature", "top_k", "top_p", "seed", "layer", "head", "pos", "view",
    "ablate", "charts",
    # the Block view's settings (views/block.py)
    "norm_placement", "norm", "positions", "causal", "heads", "kv_heads", "activation", "compare", "compare_pos",
    "compare_token",
    # the Patching view's (views/patching.py)
    "patch_pos", "patch_token", "good", "bad", "patch_from",
    # the Train view's (views/train.py, slm.train.settings.QUERY_KEYS)
    "task", "autostart", "train_layers", "train_heads", "train_d_model", "train_ctx", "train_steps", "train_batch",
    "train_lr", "train_seed",
)
# An answer alternative is key=value pairs separated by spaces; alternatives are separated by " or ".
ALTERNATIVES_RE = re.compile(r"\s+or\s+")
PAIR_RE = re.compile(r"^([a-z_]+)=(\S+)$")


def _key_problem(key: str) -> str | None:
    if key in STATE_KEYS:
        return None
    return f"the page has no state key {key!r} (keys: {', '.join(STATE_KEYS)})"


def parse_query(href: str) -> tuple[dict[str, str], list[str]]:
    """A step link's target (`?view=attention&layer=1`) as {key: value}, and what is wrong with it."""
    pairs = urllib.parse.parse_qsl(href.lstrip("?"), keep_blank_values=True)
    state, problems = {}, []
    for key, value in pairs:
        problem = _key_problem(key)
        if problem:
            problems.append(f"link {href!r}: {problem}")
        elif key == "view" and VIEW_ALIASES.get(value, value) not in VIEWS:
            problems.append(f"link {href!r}: no view {value!r} (views: {', '.join(VIEWS)})")
        else:
            state[key] = VIEW_ALIASES.get(value, value) if key == "view" else value
    if not pairs:
        problems.append(f"link {href!r} names no state (e.g. ?view=attention&layer=1)")
    return state, problems


def parse_answer(text: str) -> tuple[list[dict[str, str]], list[str]]:
    """`layer=1 head=0 or layer=1 head=3` as [{"layer": "1", "head": "0"}, {"layer": "1", "head": "3"}], and
    what is wrong with it."""
    alternatives, problems = [], []
    for part in ALTERNATIVES_RE.split(text.strip()):
        alternative = {}
        for pair in part.split():
            match = PAIR_RE.match(pair)
            if not match:
                problems.append(f"answer: {pair!r} is not key=value (e.g. answer: layer=1 head=0)")
                continue
            key, value = match.groups()
            problem = _key_problem(key)
            if problem:
                problems.append(f"answer: {problem}")
            else:
                alternative[key] = VIEW_ALIASES.get(value, value) if key == "view" else value
        if alternative:
            alternatives.append(alternative)
    if not alternatives and not problems:
        problems.append("answer: names no state (e.g. answer: layer=1 head=0)")
    return alternatives, problems


def same_value(expected: str, actual: Any) -> bool:
    """An answer's value against the page's: numbers as numbers (`1` = 1 = 1.0), booleans as 1/true/yes/on,
    anything else as text without regard to case."""
    if isinstance(actual, bool):
        return (expected.lower() in ("1", "true", "yes", "on")) == actual
    try:
        return float(expected) == float(actual)
    except (TypeError, ValueError):
        return expected.lower() == str(actual).lower()


def matches(alternatives: list[dict[str, str]], state: Mapping[str, Any]) -> bool:
    """True when the page's state (its URL keys → values) agrees with every pair of one alternative."""
    return any(all(key in state and same_value(value, state[key]) for key, value in alternative.items())
               for alternative in alternatives)
