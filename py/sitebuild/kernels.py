"""The WebAssembly kernels of the browser's Python (site/src/worker/*.wat), assembled by wabt (npm, its version in
build.lock) into side modules: Pyodide's dynamic loader, behind ``ctypes.CDLL``, takes a module only with a
``dylink.0`` section first, saying how much memory and how many table slots it needs (none here)."""

from __future__ import annotations

from pathlib import Path

from .common import CACHE, HERE, SITE, log, run, sha256_file
from .fetch import npm_package

GEMM = "build/gemm.wasm"  # slm.matmul's matrix product (worker/kernels.js)
KERNELS = {GEMM: SITE / "src" / "worker" / "gemm.wat"}  # site file -> its source

WASM_MAGIC = b"\0asm\1\0\0\0"
DYLINK_MEM_INFO = 1  # the subsection of dylink.0 with the memory and table sizes


def write_kernels(site: Path, lock: dict) -> list[str]:
    """Each kernel into `site` (cached by its source and wabt's version); their site paths."""
    for rel, source in KERNELS.items():
        dest = site / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(side_module(assembled(source, lock)))
    return list(KERNELS)


def assembled(source: Path, lock: dict) -> bytes:
    version = lock["wabt"]["version"]
    cache = CACHE / "site" / f"{sha256_file(source)[:16]}-wabt-{version}-{source.stem}.wasm"
    if not cache.is_file():
        wabt = npm_package("wabt", version)
        log(f"wabt: {source.name}")
        cache.parent.mkdir(parents=True, exist_ok=True)
        part = cache.with_suffix(".part")
        run(["node", str(HERE / "node" / "wat2wasm.cjs"), str(wabt), str(source), str(part)])
        part.replace(cache)
    return cache.read_bytes()


def side_module(wasm: bytes) -> bytes:
    """`wasm` with a dylink.0 custom section in front of its sections: no memory, no table of its own."""
    if not wasm.startswith(WASM_MAGIC):
        raise ValueError("not a WebAssembly module (version 1)")
    name = b"dylink.0"
    mem_info = bytes([DYLINK_MEM_INFO]) + leb128(4) + bytes(4)  # memory size, its alignment, table size, alignment
    payload = leb128(len(name)) + name + mem_info
    return WASM_MAGIC + b"\0" + leb128(len(payload)) + payload + wasm[len(WASM_MAGIC):]


def leb128(n: int) -> bytes:
    """`n` as WebAssembly writes an unsigned integer (LEB128)."""
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)
