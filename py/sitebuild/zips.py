"""Deterministic zips: identical input gives identical bytes (fixed timestamps, sorted entries), deflated by
zopfli when it is installed (~4 % smaller than zlib's best, the same format) and stored where that is smaller."""

from __future__ import annotations

import base64
import concurrent.futures
import csv
import hashlib
import io
import os
import struct
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path

try:  # optional: every zip the build writes is ~4 % smaller with it (requirements.txt installs it)
    from zopfli.zopfli import compress as zopfli_compress
except ImportError:
    zopfli_compress = None
# SITE_DEFLATE=zlib: zlib even where zopfli is installed. The tests' builds use it: zopfli's ~100 s of a fresh
# clone's first build buy only size, which the benchmark measures (tests/site/test_builder.py checks zopfli's
# streams inflate to their input).
ZOPFLI = zopfli_compress is not None and os.environ.get("SITE_DEFLATE", "zopfli") != "zlib"
DEFLATE = "zopfli" if ZOPFLI else "zlib-9"


def zopfli_deflate(data: bytes) -> bytes:
    """A raw deflate stream by zopfli (~4 % smaller than zlib's best, the same format, so Pyodide's zipfile unpacks
    it as fast)."""
    return zopfli_compress(data, numiterations=15)[2:-4]  # without the zlib header and checksum


def deflate(data: bytes) -> bytes:
    """A raw deflate stream of `data`: zopfli's when installed (and not turned off), else zlib's at level 9."""
    if ZOPFLI:
        return zopfli_deflate(data)
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    return packer.compress(data) + packer.flush()


def gzip_file(data: bytes) -> bytes:
    """`data` as a gzip file (no name, no timestamp: the same bytes for the same input), deflated by deflate()."""
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"  # deflate, no flags, no mtime, best compression, OS unknown
    return header + deflate(data) + struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF)


def write_zip(out: Path, entries: Iterable[tuple[str, bytes]], store: Callable[[str], bool] = lambda name: False,
              ) -> None:
    """A zip of (name, data) entries with fixed timestamps (identical input -> identical bytes), compressed by
    deflate() — zipfile cannot take another compressor — or stored when `store(name)` or when that is smaller."""
    entries = list(entries)
    inputs = [b"" if store(name) else data for name, data in entries]
    if not ZOPFLI:
        deflated = [deflate(data) for data in inputs]
    else:  # zopfli takes ~10 s per MB: use every core (the result is cached, see process_wheel)
        with concurrent.futures.ProcessPoolExecutor() as pool:
            deflated = list(pool.map(deflate, inputs, chunksize=4))
    body, central = io.BytesIO(), io.BytesIO()
    count = 0
    time, date = 0, (2020 - 1980) << 9 | 1 << 5 | 1  # DOS format: 2020-01-01 00:00
    for (name, data), packed in zip(entries, deflated, strict=True):
        raw = name.encode()
        flags = 0 if raw.isascii() else 0x800  # UTF-8 name
        packed = None if store(name) else packed
        method, payload = (8, packed) if packed is not None and len(packed) < len(data) else (0, data)
        crc, offset = zlib.crc32(data), body.tell()
        fields = (method, time, date, crc, len(payload), len(data), len(raw))
        body.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, flags, *fields, 0) + raw + payload)
        central.write(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, flags, *fields, 0, 0, 0, 0, 0, offset)
                      + raw)
        count += 1
    directory = central.getvalue()
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, len(directory), body.tell(), 0)
    out.write_bytes(body.getvalue() + directory + end)


def pack_wheel(src: Path, out: Path) -> None:
    """Zip a wheel tree with a fresh RECORD (sorted, fixed timestamps: identical input -> identical bytes)."""
    files = sorted(p for p in src.rglob("*") if p.is_file() and p.name != "RECORD")
    dist_info = next(p for p in src.iterdir() if p.name.endswith(".dist-info"))
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    entries = []
    for p in files:
        arc = p.relative_to(src).as_posix()
        data = p.read_bytes()
        entries.append((arc, data))
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        writer.writerow([arc, f"sha256={digest}", len(data)])
    rec = f"{dist_info.name}/RECORD"
    writer.writerow([rec, "", ""])
    entries.append((rec, record.getvalue().encode()))
    # .npz weights are zip-compressed already: stored.
    write_zip(out, entries, store=lambda name: name.endswith(".npz"))


def write_dist_info(dest: Path, name: str, version: str, top_level: Iterable[str]) -> None:
    di = dest / f"{name}-{version}.dist-info"
    di.mkdir(parents=True, exist_ok=True)
    (di / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (di / "WHEEL").write_text("Wheel-Version: 1.0\nGenerator: build.py\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    (di / "top_level.txt").write_text("".join(f"{t}\n" for t in top_level))
