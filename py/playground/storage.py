"""Where the page keeps the models a learner trained or loaded, so that a reload loses nothing.

In the browser the worker offers `slmStore` (IndexedDB; see site/): `available()`, `list()`, `get(key)`,
`put(key, bytes, name)`, `remove(key)`, each a Promise. A page without an origin of its own (the portable file, a
sandboxed frame) has no IndexedDB: there `available()` is false and `list()`/`get()` return the models the file
was saved with. Under `panel serve` and in tests a MemoryStore stands in for it (this process only).
"""

from __future__ import annotations

from typing import Any


class MemoryStore:
    """The store's interface, kept in this process: what `panel serve` and the tests use."""

    def __init__(self) -> None:
        self.items: dict[str, tuple[bytes, str]] = {}

    async def available(self) -> bool:
        return True

    async def list(self) -> list[dict[str, Any]]:
        return [{"key": key, "name": name, "bytes": len(data)} for key, (data, name) in self.items.items()]

    async def get(self, key: str) -> bytes | None:
        item = self.items.get(key)
        return None if item is None else item[0]

    async def put(self, key: str, data: bytes, name: str) -> None:
        self.items[key] = (bytes(data), name)

    async def remove(self, key: str) -> None:
        self.items.pop(key, None)


class BrowserStore:
    """The worker's slmStore, with Python values in and out."""

    def __init__(self, js_store: Any) -> None:
        self.js = js_store

    async def available(self) -> bool:
        return bool(await self.js.available())

    async def list(self) -> list[dict[str, Any]]:
        items = await self.js.list()
        return [dict(item) for item in items.to_py()]

    async def get(self, key: str) -> bytes | None:
        data = await self.js.get(key)
        return None if data is None else bytes(data.to_py())

    async def put(self, key: str, data: bytes, name: str) -> None:
        from pyodide.ffi import to_js  # only in the browser

        await self.js.put(key, to_js(memoryview(data)), name)

    async def remove(self, key: str) -> None:
        await self.js.remove(key)


_STORE: MemoryStore | BrowserStore | None = None


def store() -> MemoryStore | BrowserStore:
    """The page's store: the worker's when there is one, else this process's memory."""
    global _STORE
    if _STORE is None:
        try:
            import js  # Pyodide's view of the worker's globals

            _STORE = BrowserStore(js.slmStore)
        except (ImportError, AttributeError):  # CPython, or a worker without the store
            _STORE = MemoryStore()
    return _STORE
