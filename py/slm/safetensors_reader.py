"""Reading `.safetensors` files with NumPy alone (the `safetensors` package is not in Pyodide).

The layout, as the format documents it: 8 bytes, a little-endian unsigned integer N; N bytes of JSON mapping each
tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets into the data that follows the header),
plus an optional "__metadata__" object; then the data, little-endian, row-major. F32, F16 and BF16 tensors are
read as float32; any other dtype is an error naming the tensor.
"""

from __future__ import annotations

import json
import math
import os
import struct
from typing import Any, NamedTuple

import numpy as np

ITEM_SIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
             "U16": 2, "U32": 4, "U64": 8, "F8_E4M3": 1, "F8_E5M2": 1}
FLOATS = ("F32", "F16", "BF16")
MAX_HEADER = 100_000_000  # the format's own bound on the JSON header


class TensorInfo(NamedTuple):
    dtype: str
    shape: tuple[int, ...]
    begin: int  # offsets into the file (header included)
    end: int


class SafetensorsFile:
    """One `.safetensors` file, from its bytes, a path or a seekable binary file (a zip member). The header is read
    and checked on opening; a tensor's data only when `tensor(name)` asks for it, so a file on disk or in a zip
    never sits in memory whole."""

    def __init__(self, source: Any, name: str = "model.safetensors", size: int | None = None) -> None:
        self.name = name
        self._data: memoryview | None = None
        self._file: Any = None
        if isinstance(source, bytes | bytearray | memoryview):
            self._data = memoryview(source).cast("B")
            size = len(self._data)
        else:
            self._file = open(source, "rb") if isinstance(source, str | os.PathLike) else source  # noqa: SIM115
            # a zip member knows its size: seeking to its end would inflate it all once more
            size = self._file.seek(0, 2) if size is None else size
        head = bytes(self._read(0, min(8, size)))
        if len(head) < 8:
            raise ValueError(f"{name}: not a safetensors file (only {size} bytes)")
        (n,) = struct.unpack("<Q", head)
        if n > min(MAX_HEADER, size - 8):
            raise ValueError(f"{name}: not a safetensors file, or truncated (a header of {n} bytes in a file of "
                             f"{size})")
        try:
            header = json.loads(bytes(self._read(8, 8 + n)).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{name}: the safetensors header is not valid JSON ({exc})") from None
        if not isinstance(header, dict):
            raise ValueError(f"{name}: the safetensors header is not a JSON object")
        self.metadata: dict[str, Any] = header.pop("__metadata__", None) or {}
        self.tensors: dict[str, TensorInfo] = {}
        start = 8 + n
        for key, spec in header.items():
            self.tensors[key] = self._check(key, spec, start, size)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()

    def __enter__(self) -> SafetensorsFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check(self, key: str, spec: Any, start: int, size: int) -> TensorInfo:
        try:
            dtype, shape, (begin, end) = spec["dtype"], tuple(int(d) for d in spec["shape"]), spec["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{self.name}: tensor {key} has a malformed header entry {spec!r}") from None
        if dtype not in ITEM_SIZE:
            raise ValueError(f"{self.name}: tensor {key} has an unknown dtype {dtype!r}")
        nbytes = math.prod(shape) * ITEM_SIZE[dtype]
        if not (isinstance(begin, int) and isinstance(end, int) and 0 <= begin <= end) or end - begin != nbytes:
            raise ValueError(f"{self.name}: tensor {key} ({dtype} {list(shape)}) has data offsets {[begin, end]} "
                             f"that do not hold its {nbytes} bytes")
        if start + end > size:
            raise ValueError(f"{self.name}: the file is truncated: tensor {key} ends at byte {start + end}, the file "
                             f"has {size}")
        return TensorInfo(dtype, shape, start + begin, start + end)

    def _read(self, begin: int, end: int) -> bytes | memoryview:
        if self._data is not None:
            return self._data[begin:end]
        self._file.seek(begin)
        data = self._file.read(end - begin)
        if len(data) != end - begin:
            raise ValueError(f"{self.name}: the file is truncated (bytes {begin}..{end} asked, {len(data)} read)")
        return data

    def keys(self) -> list[str]:
        return list(self.tensors)

    def n_values(self, keys: Any = None) -> int:
        """How many numbers the named tensors (all by default) hold, from the header alone."""
        return sum(math.prod(self.tensors[k].shape) for k in (self.tensors if keys is None else keys))

    @property
    def size(self) -> int | None:
        """The file's length in bytes when it was given as bytes (None for a path or a file object)."""
        return None if self._data is None else len(self._data)

    def tensor(self, key: str, in_place: bool = False) -> np.ndarray:
        """The tensor as a float32 array of its own (F16 and BF16 widened exactly), which the caller may write
        into. `in_place=True`: an F32 tensor of a file given as a writable buffer (a bytearray) is a view of the
        buffer's bytes instead, when aligned: writing into it changes the buffer."""
        info = self.tensors[key]
        if info.dtype not in FLOATS:
            raise ValueError(f"{self.name}: tensor {key} has dtype {info.dtype}; slm reads F32, F16 and BF16")
        native = np.dtype("<f4") == np.float32
        if in_place and info.dtype == "F32" and native and self._data is not None and not self._data.readonly:
            values = np.frombuffer(self._data[info.begin:info.end], dtype=np.float32)
            if values.flags.aligned:
                return values.reshape(info.shape)
        # A file's bytes are read into a buffer the array then owns: F32 needs no second copy.
        raw = self._read(info.begin, info.end) if self._data is not None else self._read_into(info.begin, info.end)
        if info.dtype == "F32":
            own = isinstance(raw, bytearray) and native
            values = np.frombuffer(raw, dtype="<f4") if own else np.frombuffer(raw, dtype="<f4").astype(np.float32)
        elif info.dtype == "F16":
            values = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        else:  # bfloat16 is the top half of a float32: shift its bits into place
            values = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        return values.reshape(info.shape)

    def _read_into(self, begin: int, end: int, step: int = 1 << 20) -> bytearray:
        """Bytes begin..end of a file, read a MiB at a time (a zip member's read() makes a copy of what it reads)."""
        out = bytearray(end - begin)
        view = memoryview(out)
        self._file.seek(begin)
        at = 0
        while at < len(out):
            chunk = self._file.read(min(step, len(out) - at))
            if not chunk:
                raise ValueError(f"{self.name}: the file is truncated (bytes {begin}..{end} asked, {at} read)")
            view[at:at + len(chunk)] = chunk
            at += len(chunk)
        return out
