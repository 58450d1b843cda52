"""An uncompressed .npz read without copying its arrays: each array a view of the file's own bytes.

`Model.load(buffer, in_place=True)` uses it for a page's stored models, whose bytes arrive in one bytearray: the
weights then need one copy of memory, not two (the wasm heap never shrinks, so the peak is what the page keeps).
"""

from __future__ import annotations

import io
import math
import struct
import zipfile
import zlib
from typing import Any

import numpy as np

LOCAL_HEADER = struct.Struct("<4s22xHH")  # a zip member's local header: signature, ..., name and extra lengths


class BufferFile(io.RawIOBase):
    """A read-only, seekable file over a buffer, without copying it (io.BytesIO copies a bytearray)."""

    def __init__(self, data: Any) -> None:
        super().__init__()
        self._view = memoryview(data).cast("B")
        self._at = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._at

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._at = max(0, offset + (0, self._at, len(self._view))[whence])
        return self._at

    def read(self, n: int = -1) -> bytes:
        end = len(self._view) if n is None or n < 0 else self._at + n
        chunk = bytes(self._view[self._at:end])
        self._at += len(chunk)
        return chunk

    def readinto(self, out: Any) -> int:
        chunk = self._view[self._at:self._at + len(out)]
        out[:len(chunk)] = chunk
        self._at += len(chunk)
        return len(chunk)


def views(buffer: bytearray) -> dict[str, np.ndarray] | None:
    """The arrays of an uncompressed .npz in `buffer`, as writable views of it; None (the buffer untouched) when it
    is not one, a member fails its CRC, or the arrays fill less than 90 % of it (views keep every byte alive).

    An array whose data is not aligned for its dtype is moved back by a few bytes over the end of its own .npy
    header (already read), so the buffer is no longer a valid file afterwards."""
    file = BufferFile(buffer)
    try:
        with zipfile.ZipFile(file) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return None
    found = []
    for info in members:
        if info.compress_type != zipfile.ZIP_STORED or not info.filename.endswith(".npy"):
            return None
        file.seek(info.header_offset)
        head = file.read(LOCAL_HEADER.size)
        if len(head) < LOCAL_HEADER.size:
            return None
        signature, name_length, extra_length = LOCAL_HEADER.unpack(head)
        start = info.header_offset + LOCAL_HEADER.size + name_length + extra_length
        if signature != b"PK\x03\x04" or start + info.file_size > len(buffer):
            return None
        if zlib.crc32(memoryview(buffer)[start:start + info.file_size]) != info.CRC:
            return None
        file.seek(start)
        try:
            version = np.lib.format.read_magic(file)
            if version not in ((1, 0), (2, 0)):
                return None
            read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read_header(file)
        except ValueError:
            return None
        at, count = file.tell(), math.prod(shape)
        if dtype.hasobject or at + count * dtype.itemsize > start + info.file_size:
            return None
        found.append((info.filename[:-4], at, count, shape, fortran, dtype))
    if 10 * sum(count * dtype.itemsize for _, _, count, _, _, dtype in found) < 9 * len(buffer):
        return None
    whole = np.frombuffer(buffer, np.uint8)
    address = whole.__array_interface__["data"][0]
    arrays = {}
    for name, at, count, shape, fortran, dtype in found:
        shift = (address + at) % dtype.alignment
        if shift:  # fewer bytes than the .npy header holds before the data
            _move(whole, at, at - shift, count * dtype.itemsize)
            at -= shift
        arrays[name] = np.frombuffer(buffer, dtype, count, at).reshape(shape, order="F" if fortran else "C")
    return arrays


def _move(data: np.ndarray, source: int, target: int, n: int, step: int = 1 << 20) -> None:
    """Bytes source..source+n to target < source, a MiB at a time (a whole array at once would copy it first)."""
    for i in range(0, n, step):
        k = min(step, n - i)
        data[target + i:target + i + k] = data[source + i:source + i + k]
