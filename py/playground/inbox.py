"""Files dropped anywhere on the page: the worker hands them here (`deliver`), and each open playground takes them.

site/ reads a drop (several files, a folder, a .zip or .npz) on the page and calls deliver() with [name, bytes]
pairs; the playground's models view loads them, as if chosen with its file picker.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Iterable
from typing import Any

# Who takes dropped files, oldest first: each playground registers its receiver (weakly: a page thrown away just
# goes away).
_RECEIVERS: list[weakref.ref] = []


class Receiver:
    """Wraps a coroutine function taking {name: bytes or bytearray}, and a function told why files could not be
    taken in (the page had no memory for them)."""

    def __init__(self, receive: Callable[[dict[str, bytes]], Any],
                 refused: Callable[[str], Any] = lambda message: None) -> None:
        self.receive = receive
        self.refused = refused


def subscribe(receiver: Receiver) -> Receiver:
    _RECEIVERS[:] = [ref for ref in _RECEIVERS if ref() is not None]
    _RECEIVERS.append(weakref.ref(receiver))
    return receiver


def deliver(files: Iterable[Any]) -> int:
    """Hand dropped files to the page's playground (the newest one: the site's worker may still hold the page it
    built to warm up its memory snapshot); 1 if one took them, else 0. `files`: [name, bytes] pairs (JS arrays
    converted with to_py, or Python pairs). A bytearray is handed over as it is: the loader keeps weights in it."""
    mapping = {str(name): data if isinstance(data, bytes | bytearray) else bytes(data) for name, data in files}
    receivers = [ref() for ref in _RECEIVERS]
    receivers = [r for r in receivers if r is not None]
    if not receivers:
        return 0
    asyncio.ensure_future(receivers[-1].receive(mapping))
    return 1


def refuse(message: str) -> int:
    """Tell the page's playground that dropped files were not taken in, and why; 1 if one was told, else 0."""
    receivers = [r for r in (ref() for ref in _RECEIVERS) if r is not None]
    if not receivers:
        return 0
    receivers[-1].refused(message)
    return 1
