"""The SIMD kernel the site ships (build/gemm.wasm, from site/src/worker/gemm.wat) as the browser's Python loads it:
in the npm Pyodide under Node, through ctypes.CDLL, with no NumPy there (CI has none for wasm). Its products are
compared here with NumPy's in float64, for every kind of edge its blocks leave: gemm's 4 rows x 8 columns, and
gemm_nt's (a weight used in place as W^T) 2 rows x 4 columns x 4 floats of k."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "py"))

from sitebuild.fetch import fetch_pyodide  # noqa: E402
from sitebuild.kernels import GEMM  # noqa: E402
from sitebuild.lock import read_lock  # noqa: E402
from sitebuild.node import RUNNER  # noqa: E402

GUARD = 8  # floats past the output, which the kernel must leave alone

# Runs in Pyodide: each case's operands from /host, its product (and the guard after it) back to /host.
IN_PYODIDE = """
import ctypes, json
lib = ctypes.CDLL("/host/gemm.wasm")
gemm, gemm_nt = lib.gemm, lib.gemm_nt
gemm.restype = gemm_nt.restype = None
gemm.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 5
gemm_nt.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 4
for i, (m, k, n, a_row, a_col) in enumerate(json.load(open("/host/cases.json"))):
    a = bytearray(open(f"/host/a{i}.bin", "rb").read())
    b = bytearray(open(f"/host/b{i}.bin", "rb").read())
    c = bytearray(open(f"/host/c{i}.bin", "rb").read())  # filled with NaN
    ptr = lambda buf: ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf))
    if a_row <= 0:  # gemm_nt: b holds W (n x k), rows k - a_row floats apart (the rest of a row is padding)
        gemm_nt(ptr(a), ptr(b), ptr(c), m, k, n, k - a_row)
    else:
        gemm(ptr(a), ptr(b), ptr(c), m, k, n, a_row, a_col)
    open(f"/host/c{i}.bin", "wb").write(c)
"""


def cases() -> list[tuple[int, int, int, bool | str]]:
    """(m, k, n, A stored transposed or "nt"): for gemm every remainder of rows mod 4 and of columns mod 8, the lab's
    shapes; for gemm_nt every remainder of rows mod 2, of columns mod 4 and of k mod 4, a generated token's, and W's
    rows farther apart than k (one head's columns of w_o; NaN between them, which a wrong stride would read)."""
    small = [(m, k, n, t) for m in (1, 3, 4, 5, 9) for n in (1, 7, 8, 9, 17) for k in (1, 6) for t in (False, True)]
    nt = [(m, k, n, "nt") for m in (1, 2, 3, 4) for n in (1, 3, 4, 5, 8) for k in (1, 3, 4, 5, 8, 11)]
    return small + nt + [(384, 32, 96, False), (32, 384, 96, True), (128, 384, 32, True), (1, 288, 203, False),
                         (1, 576, 1031, "nt"), (7, 64, 96, "nt"), (3, 13, 9, "nt-strided"), (2, 64, 96, "nt-strided")]


def test_the_kernel_multiplies_every_shape_in_pyodide(cdn_site: Path, tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    expected, spec = [], []
    for i, (m, k, n, transposed) in enumerate(cases()):
        big_a = rng.standard_normal((m, k), dtype=np.float32)
        big_b = rng.standard_normal((k, n), dtype=np.float32)
        stored = np.ascontiguousarray(big_a.T) if transposed is True else big_a
        if transposed in ("nt", "nt-strided"):
            pad = 5 if transposed == "nt-strided" else 0  # W's rows as one head's columns of a wider weight
            spec.append([m, k, n, -pad, 0])
            w = np.concatenate([big_b.T, np.full((n, pad), np.nan, np.float32)], axis=1)
            (tmp_path / f"b{i}.bin").write_bytes(w.tobytes())
        else:
            spec.append([m, k, n, 1, m] if transposed else [m, k, n, k, 1])
            (tmp_path / f"b{i}.bin").write_bytes(big_b.tobytes())
        (tmp_path / f"a{i}.bin").write_bytes(stored.tobytes())
        (tmp_path / f"c{i}.bin").write_bytes(np.full(m * n + GUARD, np.nan, np.float32).tobytes())
        expected.append(big_a.astype(np.float64) @ big_b)
    (tmp_path / "cases.json").write_text(json.dumps(spec))
    (tmp_path / "gemm.wasm").write_bytes((cdn_site / GEMM).read_bytes())
    (tmp_path / "run.py").write_text(IN_PYODIDE)
    pkg = fetch_pyodide(read_lock())
    proc = subprocess.run(["node", str(RUNNER), str(pkg), str(tmp_path), str(tmp_path / "run.py")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for i, ((m, k, n, transposed), want) in enumerate(zip(cases(), expected, strict=True)):
        got = np.frombuffer((tmp_path / f"c{i}.bin").read_bytes(), np.float32)
        np.testing.assert_allclose(got[: m * n].reshape(m, n), want, rtol=1e-5, atol=1e-5 * np.sqrt(k),
                                   err_msg=f"m={m} k={k} n={n} transposed={transposed}")
        assert np.isnan(got[m * n:]).all(), f"m={m} k={k} n={n}: written past the output"
