"""Files dropped anywhere on the page: the worker hands them here (`deliver`), and each open playground takes them.

site/ reads a drop (several files, a folder, a .zip or .npz) on the page and calls deliver() with [name, bytes]
pairs; the playground's models view loads them, as if chosen with its file picker.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Iterable
from typing import Any

# Who takes dropped files: each playground registers its receiver (weakly: a closed session just goes away).
_RECEIVERS: weakref.WeakSet = weakref.WeakSet()


class Receiver:
    """Wraps a coroutine function taking {name: bytes}."""

    def __init__(self, receive: Callable[[dict[str, bytes]], Any]) -> None:
        self.receive = receive


def subscribe(receiver: Receiver) -> Receiver:
    _RECEIVERS.add(receiver)
    return receiver


def deliver(files: Iterable[Any]) -> int:
    """Hand dropped files to every open playground; how many took them. `files`: [name, bytes] pairs (JS arrays
    converted with to_py, or Python pairs)."""
    mapping = {str(name): bytes(data) for name, data in files}
    receivers = list(_RECEIVERS)
    for receiver in receivers:
        asyncio.ensure_future(receiver.receive(mapping))
    return len(receivers)
