"""site/snapshot.js's reading of a side module's dylink.0 section, run in Node (CI has no wasm NumPy, so the
snapshot's end-to-end tests do not run there). The size it returns is how much of the snapshot is copied back over
a re-instantiated module's data segment: too little leaves the module's state re-initialised."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT
from sitebuild.kernels import leb128 as leb

pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="needs node")


def side_module(subsections: list[tuple[int, bytes]], tail: bytes = b"\x01\x04\x01\x60\x00\x00") -> bytes:
    """A wasm binary whose first section is dylink.0 with the given (kind, payload) subsections."""
    body = leb(len(b"dylink.0")) + b"dylink.0" + b"".join(bytes([k]) + leb(len(p)) + p for k, p in subsections)
    return b"\0asm\x01\0\0\0" + b"\0" + leb(len(body)) + body + tail


def mem_info(memory_size: int) -> tuple[int, bytes]:
    return 1, leb(memory_size) + leb(4) + leb(37) + leb(0)  # WASM_DYLINK_MEM_INFO: size, align, table size, align


def run_data_size(tmp_path: Path, binary: bytes) -> str:
    """What Node prints for dataSize(binary), or the message of the error it throws."""
    module = tmp_path / "snapshot.mjs"  # an .mjs copy: Node loads it as an ES module
    module.write_text((ROOT / "site" / "snapshot.js").read_text())
    script = (f"import {{ dataSize }} from {json.dumps(module.as_uri())};\n"
              f"try {{ console.log(dataSize(new Uint8Array({json.dumps(list(binary))}))); }}"
              " catch (e) { console.log(e.message); }")
    proc = subprocess.run(["node", "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def data_size(tmp_path: Path, binary: bytes) -> int:
    return int(run_data_size(tmp_path, binary))


@pytest.mark.parametrize("memory_size", [0, 100, 300_000, 2_544_435])
def test_data_size_reads_the_memory_info(tmp_path: Path, memory_size: int) -> None:
    assert data_size(tmp_path, side_module([mem_info(memory_size)])) == memory_size


def test_data_size_skips_other_subsections_and_long_headers(tmp_path: Path) -> None:
    # A NEEDED list first, long enough that the section size takes several LEB128 bytes.
    needed = leb(3) + b"".join(leb(len(n)) + n for n in (b"libz.so", b"libm.so", b"x" * 200))
    assert data_size(tmp_path, side_module([(2, needed), mem_info(123_456)])) == 123_456
    assert data_size(tmp_path, side_module([(2, needed)])) == 0  # no memory info: no data segment


def test_data_size_refuses_a_module_without_dylink(tmp_path: Path) -> None:
    plain = b"\0asm\x01\0\0\0\x01\x04\x01\x60\x00\x00"  # a type section first, no dylink.0
    assert "without a dylink.0 section" in run_data_size(tmp_path, plain)
