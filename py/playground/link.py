"""What a link carries: parameters with query keys, read back from a hand-edited URL without ever failing.

PlaygroundState (state.py) is one such set of parameters, each view's own settings (views/*.py) another; the state
puts them together in one query string (share_query, sync_url).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any, ClassVar

import param


class Linked(param.Parameterized):
    """Parameters a link carries: `URL` maps each parameter's name to its query key."""

    URL: ClassVar[dict[str, str]] = {}

    def url_values(self, always: Iterable[str] = ()) -> dict[str, Any]:
        """{query key: value} of the URL parameters that differ from their defaults (and those in `always`)."""
        values = {}
        for name, key in self.URL.items():
            value = getattr(self, name)
            if name in always or value != self.param[name].default:
                values[key] = int(value) if isinstance(value, bool) else value
        return values

    def apply_url_values(self, values: dict[str, Any]) -> None:
        """Apply values read from a URL ({parameter name: value}) one by one, coercing what can be coerced (e.g.
        embed=1) and skipping what cannot, so a hand-edited link never breaks the page."""
        for name, value in values.items():
            with contextlib.suppress(Exception):
                setattr(self, name, coerce(self.param[name], value))


def coerce(parameter: param.Parameter, value: Any) -> Any:
    """`value` (a URL's text) as `parameter` takes it: booleans from 1/true/yes/on, numbers clamped to the
    bounds, a selector's option matched without regard to case."""
    if isinstance(parameter, param.Boolean):
        return str(value).strip().lower() in ("1", "true", "yes", "on")
    if isinstance(parameter, param.Integer):
        value = int(float(value))
    elif isinstance(parameter, param.Number):
        value = float(value)
    elif isinstance(parameter, param.String):
        return str(value)
    elif isinstance(parameter, param.Selector):
        for option in parameter.objects:
            if str(option).lower() == str(value).lower():
                return option
        return value
    if parameter.bounds is not None:  # clamp absurd values instead of refusing them
        low, high = parameter.bounds
        value = value if low is None else max(low, value)
        value = value if high is None else min(high, value)
    return value
