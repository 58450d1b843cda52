"""Shared look: palettes, captions and small helpers for figures that are built once."""

from __future__ import annotations

import functools
import html
from collections.abc import Callable
from typing import Any

import panel as pn
from bokeh.models import FixedTicker
from bokeh.palettes import Viridis256
from bokeh.plotting import figure

WEIGHT_PALETTE = Viridis256  # colour-blind safe and ordered dark -> bright
POSITIVE, NEGATIVE = "#0072B2", "#D55E00"  # Okabe-Ito blue / vermillion: distinguishable for colour-blind readers
NEUTRAL = "#56B4E9"
MASKED_FILL, MASKED_HATCH = "#f0f0f0", "#b0b0b0"
FONT = "11px"


def patches_bokeh(method: Callable[..., Any]) -> Callable[..., Any]:
    """For methods that change Bokeh models directly (source data, ranges, axes).

    Panel runs widget events that arrive with a Bokeh event (e.g. Enter in the prompt box) as coroutines without
    the server's document lock, and Bokeh refuses unlocked changes to plain Bokeh models; pn.io.unlocked() is
    Panel's way to apply and dispatch them. Outside a server session (tests, Pyodide) it does nothing."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with pn.io.unlocked():
            return method(*args, **kwargs)

    return wrapper


def esc(text: object) -> str:
    """Everything that came from a user goes through here before it reaches HTML or Markdown."""
    return html.escape(str(text), quote=True)


def title(text: str, *, level: int = 3) -> pn.pane.HTML:
    return pn.pane.HTML(f"<h{level} class='pg-title'>{esc(text)}</h{level}>", margin=(4, 10, 0, 10))


def caption(text: str) -> pn.pane.HTML:
    """A short explanation in the lesson's words. `text` is trusted markup written in this package."""
    return pn.pane.HTML(f"<div class='pg-caption'>{text}</div>", margin=(0, 10, 4, 10), sizing_mode="stretch_width")


def small_figure(**kwargs: object) -> figure:
    """A figure without the Bokeh toolbar clutter (a learner needs hover, not pan and zoom)."""
    kwargs.setdefault("toolbar_location", None)
    kwargs.setdefault("tools", "")
    fig = figure(**kwargs)
    fig.title.text_font_size = "12px"
    fig.axis.major_label_text_font_size = FONT
    fig.min_border_left = 4
    return fig


def label_axis(axis: object, labels: list[str]) -> None:
    """Put the tokens on a numeric axis: one tick per position, labelled with its token. The ticker is created
    once per axis and then only its ticks change."""
    ticks = list(range(len(labels)))
    if isinstance(axis.ticker, FixedTicker):
        axis.ticker.ticks = ticks
    else:
        axis.ticker = FixedTicker(ticks=ticks)
    axis.major_label_overrides = dict(enumerate(labels))


STYLES = """
.pg-title { margin: 6px 0 2px 0; font-weight: 600; color: #222; }
.pg-caption { color: #444; font-size: 13px; line-height: 1.4; max-width: 760px; }
.pg-note { background: #fff8e1; border-left: 4px solid #e6a700; padding: 6px 10px; font-size: 13px; color: #333;
           max-width: 740px; }
.pg-calm { background: #eef6fb; border-left: 4px solid #56B4E9; padding: 6px 10px; font-size: 13px; color: #333;
           max-width: 740px; }
.pg-stream { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 15px; line-height: 2;
             max-width: 760px; word-wrap: break-word; }
.pg-stream .pg-prompt { color: #555; }
.pg-stream .pg-tok { padding: 2px 3px; margin: 0 1px; border-radius: 3px; border: 1px solid #9cc7e4; }
.pg-table { border-collapse: collapse; font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12px;
            margin: 2px 12px 10px 0; }
.pg-table th, .pg-table td { border: 1px solid #ddd; padding: 2px 6px; text-align: right; }
.pg-table th { background: #f5f5f5; font-weight: 600; }
.pg-table td.pg-tokcell { text-align: left; font-weight: 600; }
.pg-table tr.pg-changed td { background: #fde0cc; }
.pg-table tr.pg-same td.pg-tokcell::after { content: " ="; color: #0072B2; }
.pg-table tr.pg-changed td.pg-tokcell::after { content: " ≠"; color: #D55E00; }
.pg-table th.pg-group, .pg-table td.pg-group { border-left: 2px solid #777; }
.pg-tables { display: flex; flex-wrap: wrap; max-width: 780px; }
.pg-legend { font-size: 12px; color: #555; }
"""
