"""The page's memory: room made for a model before its weights are read whole, and the refusal, with the size
needed, when the tab cannot give it.

In the browser Python's heap is the wasm memory. It grows when an allocation needs more (up to Pyodide's 4 GiB)
and never shrinks, and a growth the browser refuses would otherwise surface as a MemoryError halfway through a
load. So a load first asks for what it will need in one block: NumPy's `empty` allocates without writing, the heap
grows to hold it (or the refusal comes now, with nothing read), and the block is freed at once, leaving the room
for the weights. What is already loaded counts by itself: it is in the heap.

`?memory=MB` (read by the app, `set_limit`) lowers the most the page lets the heap grow to: a test then sees the
refusal of a model too large for its tab without a browser that runs out of memory.
"""

from __future__ import annotations

import numpy as np

import slm

CAP = 4 * 2**30  # Pyodide's wasm memory (32-bit addresses) grows to at most 4 GiB
MARGIN = 64 * 2**20  # beside the weights: a forward pass's arrays and the page's own
LARGE = 100 * 2**20  # a model whose float32 weights take this much is large: one such model is held at a time

_limit: int | None = None


class NoRoom(MemoryError):
    """The tab cannot hold what a load needs: the message says how much and what holds the rest."""


def set_limit(megabytes: float | None) -> None:
    """The most the heap may grow to (None: the wasm cap); what `?memory=` sets, in MB as the messages print them."""
    global _limit
    _limit = None if not megabytes or megabytes <= 0 else int(megabytes * 1e6)


def limit() -> int:
    return min(CAP, _limit) if _limit else CAP


def heap_size() -> int | None:
    """The wasm memory's size in bytes in the browser; None in CPython."""
    try:
        import pyodide_js  # only in Pyodide
    except ImportError:
        return None
    return int(pyodide_js._module.HEAP8.length)


def in_use(models: list[slm.Model]) -> int:
    """Bytes of these models' weights (each array counted once): what CPython counts as held, for the limit."""
    seen: dict[int, int] = {}
    for model in models:
        for value in model.params.values():
            seen[id(value)] = value.nbytes
    return sum(seen.values())


def _reserve(size: int) -> None:
    """Allocates `size` bytes without writing them, and frees them: MemoryError if the heap cannot grow to it."""
    block = np.empty(size, np.uint8)
    del block


def make_room(need: int, what: str, held: list[slm.Model] = ()) -> None:
    """Makes sure `need` more bytes fit in the heap beside what it holds (`held`: the models loaded, which CPython
    counts against the limit; the browser's heap holds them already). NoRoom, saying how much, otherwise."""
    size = heap_size()
    try:
        if _limit is not None and size is None and in_use(list(held)) + need > _limit:
            raise MemoryError
        _reserve(need)
        after = heap_size()
        if after is not None and after > limit():
            raise MemoryError
    except MemoryError:
        holds = heap_size() if size is not None else in_use(list(held))
        raise NoRoom(f"{what} needs {mb(need)} of memory to load, more than this tab can give: the page holds "
                     f"{mb(holds)} already (the model shown among it), and a tab's memory grows to at most "
                     f"{mb(limit())}.") from None


def mb(size: int) -> str:
    return f"{size / 1e6:,.0f} MB"


# ---- what a load needs beyond the files' own bytes ----

def load_needs(files: dict[str, bytes | bytearray]) -> int:
    """Bytes a load of these files may allocate beyond the files themselves (which are in the heap already), plus
    MARGIN: the float32 weights that cannot stay in the files' buffers (half precision widened, a zip's members
    read out, a quantized GGUF expanded)."""
    extra = 0
    for name, data in files.items():
        lower = name.lower()
        if lower.endswith(".safetensors"):
            extra += _safetensors_needs(data, in_place=isinstance(data, bytearray))
        elif lower.endswith((".zip", ".npz")):
            extra += _zip_needs(data, lower.endswith(".zip"))
        elif lower.endswith(".gguf"):
            extra += min(8 * len(data), 4 * slm.params.MAX_PARAMS)  # Q4 types hold ~4.5 bits of a float32's 32
    return extra + MARGIN


def _safetensors_needs(data: bytes | bytearray, in_place: bool) -> int:
    import json
    import math

    try:
        size = int.from_bytes(bytes(data[:8]), "little")
        header = json.loads(bytes(data[8:8 + size]))
    except (ValueError, UnicodeDecodeError):
        return 0  # not readable: slm.load says so, before it allocates anything
    extra = 0
    for key, info in header.items():
        if key == "__metadata__" or not isinstance(info, dict):
            continue
        values = math.prod(info.get("shape") or [1])
        if info.get("dtype") != "F32" or not in_place:
            extra += 4 * values
    return extra


def _zip_needs(data: bytes | bytearray, checkpoint: bool) -> int:
    import zipfile

    try:
        members = zipfile.ZipFile(_as_file(data)).infolist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return 0
    # A checkpoint's members are read out of the zip; an .npz's stored float32 arrays stay in its buffer.
    read_out = sum(m.file_size for m in members if checkpoint or m.compress_type != zipfile.ZIP_STORED)
    return 2 * read_out if checkpoint else read_out


def _as_file(data: bytes | bytearray):  # noqa: ANN202 - a file over the caller's bytes, not a copy
    from slm.npz_views import BufferFile

    return BufferFile(data)
