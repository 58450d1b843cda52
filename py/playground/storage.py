"""Where the page keeps the models a learner trained or loaded, so that a reload loses nothing.

In the browser the worker offers `slmStore` (IndexedDB; see site/): `available()`, `list()`, `get(key)`,
`put(key, bytes, name)` (a Uint8Array, or an array of them to join), `remove(key)`, each a Promise. A page without
an origin of its own (the portable file, a sandboxed frame) has no IndexedDB: there `available()` is false and
`list()`/`get()` return the models the file was saved with. Under `panel serve` and in tests a MemoryStore stands
in for it (this process only).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any, BinaryIO


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

    async def put_written(self, key: str, write: Callable[[BinaryIO], object], name: str) -> None:
        """Keep what `write(file)` writes (a model's save)."""
        out = io.BytesIO()
        write(out)
        await self.put(key, out.getbuffer(), name)

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

    async def get(self, key: str) -> bytearray | None:
        """The stored bytes, copied once into a bytearray (Model.load(in_place=True) keeps its weights there), a
        stored part at a time."""
        parts = await self.js.getParts(key)
        if parts is None:
            return None
        out = bytearray(sum(int(part.byteLength) for part in parts))
        view, at = memoryview(out), 0
        for part in parts:
            n = int(part.byteLength)
            part.assign_to(view[at:at + n])
            at += n
        return out

    async def put(self, key: str, data: bytes, name: str) -> None:
        from pyodide.ffi import to_js  # only in the browser

        await self.js.put(key, to_js(memoryview(data)), name)

    async def put_written(self, key: str, write: Callable[[BinaryIO], object], name: str) -> None:
        """Keep what `write(file)` writes, each chunk copied into JS memory as it comes: the whole file never sits
        in the wasm heap beside the model it holds."""
        import js  # only in the browser
        from pyodide.ffi import to_js

        chunks = js.Array.new()
        write(ChunkWriter(lambda view: chunks.push(to_js(view))))  # to_js copies a buffer into a Uint8Array
        await self.js.put(key, chunks, name)


class ChunkWriter(io.RawIOBase):
    """A write-only file handing every write to `take(memoryview)` (which must copy it). No seek: zipfile then
    writes each member's sizes after its data, and np.savez's output stays a valid .npz."""

    def __init__(self, take: Callable[[memoryview], object]) -> None:
        super().__init__()
        self.take = take
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.take(view)
        self.size += len(view)
        return len(view)

    def tell(self) -> int:
        return self.size


# A model's SAE (the Features view) is kept under this prefix + the model's key, beside the model: restoring models
# passes over these entries, and removing a model removes its SAE.
SAE_PREFIX = "sae: "

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
