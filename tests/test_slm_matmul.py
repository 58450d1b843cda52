"""slm.matmul: what it hands the SIMD kernel (addresses, shapes, strides) and when it takes einsum instead.

The kernel itself runs only in WebAssembly (tests/site/test_gemm_kernel.py runs it); here a stand-in reads the
operands from memory by the kernel's documented contract, so a wrong address or stride gives a wrong product."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from slm import matmul


class Kernel:
    """gemm(a, b, c, m, k, n, a_row, a_col) as gemm.wat defines it: c (m, n) = A (m, k) @ b (k, n), float32, b and c
    row-major, A[i, p] at a + 4 (i a_row + p a_col)."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, ...]] = []

    def __call__(self, a: int, b: int, c: int, m: int, k: int, n: int, a_row: int, a_col: int) -> None:
        self.calls.append((m, k, n, a_row, a_col))
        a_flat = self.floats(a, (m - 1) * a_row + (k - 1) * a_col + 1)
        big_a = np.lib.stride_tricks.as_strided(a_flat, (m, k), (4 * a_row, 4 * a_col))
        big_b = self.floats(b, k * n).reshape(k, n)
        self.floats(c, m * n)[:] = (big_a.astype(np.float64) @ big_b).reshape(-1)

    @staticmethod
    def floats(address: int, count: int) -> np.ndarray:
        return np.ctypeslib.as_array(ctypes.cast(address, ctypes.POINTER(ctypes.c_float)), shape=(count,))


class KernelNT(Kernel):
    """gemm_nt(a, w, c, m, k, n, w_row) as gemm.wat defines it: c (m, n) = a (m, k) @ w.T for w (n, k) with rows
    w_row floats apart, a and c row-major."""

    def __call__(self, a: int, w: int, c: int, m: int, k: int, n: int, w_row: int) -> None:  # type: ignore[override]
        self.calls.append((m, k, n, w_row))
        big_a = self.floats(a, m * k).reshape(m, k)
        w_flat = self.floats(w, (n - 1) * w_row + k)
        big_w = np.lib.stride_tricks.as_strided(w_flat, (n, k), (4 * w_row, 4))
        self.floats(c, m * n)[:] = (big_a.astype(np.float64) @ big_w.T).reshape(-1)


@pytest.fixture
def kernel(monkeypatch: pytest.MonkeyPatch) -> Kernel:
    k = Kernel()
    monkeypatch.setattr(matmul, "_gemm", k)
    return k


@pytest.fixture
def kernel_nt(monkeypatch: pytest.MonkeyPatch) -> KernelNT:
    k = KernelNT()
    monkeypatch.setattr(matmul, "_gemm_nt", k)
    return k


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape, dtype=np.float32)


@pytest.mark.parametrize("layout", ["stored", "transposed-small", "sliced"])
def test_matmul_hands_the_kernel_each_layout(kernel: Kernel, layout: str) -> None:
    """An activation (r, n) times a weight stored as used, stored transposed (copied: it is the smaller), or an
    activation that is a strided slice (copied before the call)."""
    x = rand(96, 40)
    w = {"stored": rand(40, 24), "transposed-small": rand(24, 40).T, "sliced": rand(40, 24)}[layout]
    if layout == "sliced":
        x = rand(96, 80)[:, ::2]
    got = matmul.matmul(x, w)
    np.testing.assert_allclose(got, x.astype(np.float64) @ w, rtol=1e-5, atol=1e-5)
    assert got.shape == (96, 24) and got.dtype == np.float32
    assert kernel.calls == [(96, 40, 24, 40, 1)]


def test_matmul_tn_reads_the_transposed_rows_in_place(kernel: Kernel) -> None:
    """A weight's gradient a.T @ b: a (r, m) is read as A (m, r) with unit stride down its rows, not copied."""
    a, b = rand(200, 33), rand(200, 17)
    got = matmul.matmul_tn(a, b)
    np.testing.assert_allclose(got, a.T.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    assert kernel.calls == [(33, 200, 17, 1, 33)]


@pytest.mark.parametrize("rows", [1, 3, 40])
def test_a_large_weight_stored_out_in_is_read_in_place(kernel: Kernel, kernel_nt: KernelNT, rows: int) -> None:
    """A few rows times a weight stored (out, in) and used transposed, larger than the rows (a generated token
    times an attention matrix or a tied unembedding): gemm_nt reads the weight where it is, with no copy."""
    x, w = rand(rows, 288), rand(2000, 288)
    got = matmul.matmul(x, w.T)
    np.testing.assert_allclose(got, x.astype(np.float64) @ w.T, rtol=1e-5, atol=1e-5)
    assert got.shape == (rows, 2000) and got.dtype == np.float32
    assert kernel_nt.calls == [(rows, 288, 2000, 288)] and kernel.calls == []


def test_each_heads_write_reads_its_columns_of_w_o_in_place(kernel_nt: KernelNT) -> None:
    """hook_result's values, z (B, H, T, k) times each head's k columns of w_o (d, H k): one call per head for the
    B T rows of every batch row, at the head's first column, rows H k floats apart."""
    z, w_o = rand(2, 4, 3, 16), rand(96, 64)
    got = matmul.heads_out(z, w_o)
    want = z.astype(np.float64) @ w_o.reshape(96, 4, 16).transpose(1, 2, 0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert got.shape == (2, 4, 3, 96) and kernel_nt.calls == [(6, 16, 96, 64)] * 4
    one = matmul.heads_out(z[1], w_o)  # one sequence, no batch axis
    np.testing.assert_allclose(one, want[1], rtol=1e-5, atol=1e-5)
    assert one.shape == (4, 3, 96)
    assert matmul.heads_out(z.astype(np.float64), w_o.astype(np.float64)) is None


def test_einsum_where_the_kernel_would_not_gain(kernel: Kernel, kernel_nt: KernelNT) -> None:
    """float64 operands and products under KERNEL_MIN_MACS go through einsum: the same product, and no call."""
    cases = [
        (rand(64, 32).astype(np.float64), rand(32, 32).astype(np.float64)),
        (rand(4, 16), rand(16, 8)),
        (rand(1, 24), rand(200, 24).T),
    ]
    for x, w in cases:
        np.testing.assert_allclose(matmul.matmul(x, w), x.astype(np.float64) @ w, rtol=1e-5, atol=1e-5)
    assert kernel.calls == [] and kernel_nt.calls == []
    assert matmul.KERNEL_MIN_MACS > 4 * 16 * 8 and matmul.KERNEL_MIN_MACS > 24 * 200


def test_without_a_kernel_the_products_are_einsums(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(matmul, "_gemm", None)
    monkeypatch.setattr(matmul, "_gemm_nt", None)
    x, w, g = rand(64, 40), rand(40, 24), rand(64, 8)
    assert not matmul.kernel_in_use()
    np.testing.assert_array_equal(matmul.matmul(x, w), np.einsum("rn,nm->rm", x, w))
    want = np.einsum("mr,nr->mn", np.ascontiguousarray(x.T), np.ascontiguousarray(g.T))
    np.testing.assert_array_equal(matmul.matmul_tn(x, g), want)
    matmul.use_kernel(None)
    assert not matmul.kernel_in_use()
