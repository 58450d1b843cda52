"""Shared look: palettes, captions and small helpers for figures that are built once."""

from __future__ import annotations

import asyncio
import csv
import functools
import html
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import panel as pn
from bokeh.models import FixedTicker, SaveTool
from bokeh.palettes import Viridis256
from bokeh.plotting import figure

WEIGHT_PALETTE = Viridis256  # colour-blind safe and ordered dark -> bright
POSITIVE, NEGATIVE = "#0072B2", "#D55E00"  # Okabe-Ito blue / vermillion: distinguishable for colour-blind readers
NEUTRAL = "#56B4E9"
MASKED_FILL, MASKED_HATCH = "#f0f0f0", "#b0b0b0"
FONT = "11px"
# Above this many heads (layers × heads) the views summarise first and draw one layer's or one head's detail on
# demand: 144 small heatmaps took the browser minutes to build and lay out, and no screen shows them readably. The
# shipped model (16) and the lesson models keep every head on screen.
MANY_HEADS = 32


def many_heads(n_layers: int, n_heads: int) -> bool:
    return n_layers * n_heads > MANY_HEADS


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


def title(text: str, *, level: int = 2) -> pn.pane.HTML:
    """A heading: level 1 is the page's, 2 a view's, 3 a part of a view."""
    return pn.pane.HTML(f"<h{level} class='pg-title'>{esc(text)}</h{level}>", margin=(4, 10, 0, 10))


def caption(text: str) -> pn.pane.HTML:
    """A short explanation in the lesson's words. `text` is trusted markup written in this package."""
    return pn.pane.HTML(f"<div class='pg-caption'>{text}</div>", margin=(0, 10, 4, 10), sizing_mode="stretch_width")


def table_rows_html(header: list[str], rows: list[list[object]]) -> str:
    """A plain numbers table (header row, then data rows); every cell escaped, floats to 4 decimals."""
    def cell(value: object) -> str:
        return f"{value:.4f}" if isinstance(value, float) else esc(value)

    head = "".join(f"<th scope='col'>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<th scope='row'>{cell(row[0])}</th>" if i == 0 else f"<td>{cell(v)}</td>"
                                    for i, v in enumerate(row)) + "</tr>" for row in rows)
    return f"<table class='pg-table'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def text_alternative(summary: str, label: str, header: list[str], rows: list[list[object]]) -> str:
    """A chart's text alternative: one sentence (`summary`, trusted markup with user text already escaped), and
    the chart's numbers as a table behind a native disclosure, which keyboards and screen readers open."""
    return (f"<p class='pg-summary'>{summary}</p><details class='pg-numbers'><summary>{esc(label)}</summary>"
            f"<div class='pg-scroll' tabindex='0' role='region' aria-label='{esc(label)}'>"
            f"{table_rows_html(header, rows)}</div></details>")


def labelled_checkbox(owner: Any, name: str, label: str, **params: Any) -> pn.widgets.CheckBoxGroup:
    """A check box for the boolean parameter `name` of `owner`, with its text as a real <label> (Bokeh's Checkbox
    draws its text beside the box, unlinked, so a screen reader hears an unnamed check box; a one-item
    CheckboxGroup wraps the box in its label). Kept in step both ways."""
    box = pn.widgets.CheckBoxGroup(options=[label], value=[label] if getattr(owner, name) else [], **params)
    box.param.watch(lambda event: setattr(owner, name, label in event.new), "value")
    owner.param.watch(lambda event: setattr(box, "value", [label] if event.new else []), name)
    return box


class View:
    """What the views below the switcher share: a view redraws only while it is on the page. A hidden one notes
    that it is behind (`stale`) and catches up just before it is shown (Playground._show calls `catch_up`): a
    prompt change then patches the charts of one view, not of eight, and the page lays out only what it shows
    (BokehJS re-measures every chart a patch touches, hidden or not: measured, ~1 s of the page's main thread per
    prompt change with all eight views up to date, during which streamed tokens could not be drawn)."""

    panel: pn.viewable.Viewable
    stale = False

    def update(self, *_: object) -> None:
        raise NotImplementedError

    def when_shown(self, method: Callable[..., Any]) -> Callable[..., Any]:
        """`method` as a watcher: run now if the view is on the page (or not laid out yet), else later."""

        @functools.wraps(method)
        def run(*args: Any) -> None:
            panel = getattr(self, "panel", None)
            if panel is None or panel.visible:
                method(*args)
            else:
                self.stale = True

        return run

    def catch_up(self) -> None:
        if self.stale:
            self.stale = False
            self.update()


class WrapRow(pn.Row):
    """A row whose items wrap onto the next line when the screen is too narrow for them (a CSS flex row; Panel's
    FlexBox would do the same, but it is a ReactiveHTML component, which the static site's Content Security Policy
    cannot run).

    Panel gives a stretching Row a minimum width: the sum of its fixed-width children, which would make a phone's
    page as wide as all of them side by side. A row that wraps needs only its widest child: Panel computes that
    for a container without a direction."""

    _direction = None


class Numbers:
    """The numbers behind a view's charts, table by table, as its text alternatives show them: `record()` keeps
    a table and returns its text alternative; `button` downloads them all as one CSV file (a blank line and the
    table's name between tables)."""

    def __init__(self, view_name: str) -> None:
        self.tables: dict[str, tuple[list[str], list[list[object]]]] = {}
        self.button = pn.widgets.FileDownload(
            callback=self.csv, filename=f"playground-{view_name}.csv", label="Download the numbers (CSV)",
            variant="outline", color="primary", width=240, margin=(4, 10), css_classes=["pg-press"])

    def record(self, key: str, summary: str, label: str, header: list[str], rows: list[list[object]]) -> str:
        self.tables[key] = (header, rows)
        return text_alternative(summary, label, header, rows)

    def csv(self) -> io.StringIO:
        out = io.StringIO()
        writer = csv.writer(out)
        for i, (key, (header, rows)) in enumerate(self.tables.items()):
            if i:
                writer.writerow([])
            writer.writerow([f"# {key}"])
            writer.writerow(header)
            writer.writerows([[f"{v:.6g}" if isinstance(v, float) else v for v in row] for row in rows])
        out.seek(0)
        return out


def save_tool(fig: figure, filename: str) -> figure:
    """Let a chart be saved (Bokeh's save tool, in a toolbar above the chart; nothing else in it): as a PNG, or
    as an SVG when the page draws its charts as SVG (`charts=svg`, Playground.use_chart_format)."""
    fig.add_tools(SaveTool(filename=filename))
    fig.toolbar_location = "above"
    fig.toolbar.logo = None
    return fig


def wrap_row(*objects: Any, **params: Any) -> WrapRow:
    params.setdefault("sizing_mode", "stretch_width")
    params.setdefault("styles", {"flex-wrap": "wrap", "align-items": "flex-end"})
    return WrapRow(*objects, **params)


def chart_box(fig: figure, width: int) -> pn.Column:
    """`fig` (a stretching figure) in a box that asks its row for `width` px and takes no more; see fit_box."""
    box = pn.Column(pn.pane.Bokeh(fig, margin=(0, 10), sizing_mode="stretch_width"), sizing_mode="stretch_width")
    fit_box(box, width)
    return box


def fit_box(box: pn.Column, width: int) -> None:
    """A chart box's width where there is room (beside its neighbours on a wide screen); on a phone it shrinks to
    the figure's min_width instead. A chart with a fixed width wider than a phone widens the whole page, and not
    only its own view: Panel gives a container the widest child's width as its minimum, hidden views included,
    and a phone's browser then lays the page out wider than the screen (touches land off their targets)."""
    box.param.update(max_width=width + 20, styles={"flex": f"1 1 {width + 20}px"})  # + the pane's margins


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


# The app's stylesheet, on every component (app.add_styles): a file of its own, which the static site serves as it is.
STYLESHEET = Path(__file__).with_name("styles.css")
STYLES = STYLESHEET.read_text(encoding="utf-8")


def in_background(coroutine: Any, failed: Callable[[BaseException], None]) -> asyncio.Future:
    """Run a view's coroutine between the page's events; an exception inside it goes to `failed` (a task's
    exception is otherwise lost, and the learner would see a frozen bar)."""
    task = asyncio.ensure_future(coroutine)
    task.add_done_callback(lambda t: None if t.cancelled() or t.exception() is None else failed(t.exception()))
    return task
