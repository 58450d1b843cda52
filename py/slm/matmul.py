"""Products of activations with weights as Pyodide runs them.

Pyodide's NumPy has no BLAS and no SIMD, so its matmul is a plain loop. Here these products run einsum's unrolled
loops or, once the page has provided one (`use_kernel`), a WebAssembly SIMD kernel called through ctypes. CPython
never comes here: its callers keep NumPy's matmul, whose rounding `shipped.npz` was trained with.
"""

from __future__ import annotations

import ctypes

import numpy as np

# gemm(a, b, c, m, k, n, a_row, a_col): c (m, n) = A (m, k) @ b (k, n), all float32, b and c rows contiguous, and
# A[i, p] at a + 4 (i a_row + p a_col), so a transposed operand needs no copy.
# gemm_nt(a, w, c, m, k, n, w_row): c (m, n) = a (m, k) @ w.T for w (n, k) with rows w_row floats apart, a and c
# contiguous: a weight stored (out, in), or one head's columns of it.
_gemm = None
_gemm_nt = None
# Under this many multiply-adds the kernel's call costs more than it saves (~15 us, measured under Node).
KERNEL_MIN_MACS = 16_384


def use_kernel(path: str | None) -> None:
    """Run the products through the kernel in the WebAssembly side module at `path` (see site/src/worker/gemm.wat);
    None goes back to einsum."""
    global _gemm, _gemm_nt
    if path is None:
        _gemm = _gemm_nt = None
        return
    lib = ctypes.CDLL(path)
    gemm, gemm_nt = lib.gemm, lib.gemm_nt
    gemm.restype = gemm_nt.restype = None
    gemm.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 5
    gemm_nt.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int] * 4
    _gemm, _gemm_nt = gemm, gemm_nt


def kernel_in_use() -> bool:
    return _gemm is not None


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a (r, n) @ b (n, m)."""
    if _gemm is not None and _worth_it(a, b):
        # A weight stored transposed is copied when it is the smaller operand (the lab's steps), else read in
        # place along its rows (a large model's weights stored (out, in), a few rows at a time).
        if b.flags.c_contiguous or b.size <= a.size:
            return _kernel(a, np.ascontiguousarray(b))
        if b.flags.f_contiguous:
            return _kernel_nt(a, b.T)
    # einsum's loops run along rows of both operands for a weight stored (m, n) and used transposed, along rows of
    # b and of the output otherwise.
    return np.einsum("rn,mn->rm", a, b.T) if b.flags.f_contiguous else np.einsum("rn,nm->rm", a, b)


def matmul_tn(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a.T @ b for a (r, m), b (r, n): a weight's gradient, summed over the rows."""
    if _gemm is not None and _worth_it(a.T, b):
        return _kernel(a.T, np.ascontiguousarray(b))
    return np.einsum("mr,nr->mn", np.ascontiguousarray(a.T), np.ascontiguousarray(b.T))


def _worth_it(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype == np.float32 and a.shape[0] * a.shape[1] * b.shape[1] >= KERNEL_MIN_MACS


def _kernel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a (m, k) @ b (k, n) by the kernel; b's rows contiguous, a either way round (else copied)."""
    (m, k), n = a.shape, b.shape[1]
    if not (a.flags.c_contiguous or a.flags.f_contiguous):
        a = np.ascontiguousarray(a)
    a_row, a_col = (k, 1) if a.flags.c_contiguous else (1, m)
    out = np.empty((m, n), np.float32)
    _gemm(_address(a), _address(b), _address(out), m, k, n, a_row, a_col)
    return out


def heads_out(z: np.ndarray, w_o: np.ndarray) -> np.ndarray | None:
    """Each head's write into the residual, (..., H, T, d), for z (..., H, T, k) and w_o (d, H k) stored (out, in):
    head h's z times its own k columns of w_o, read in place, one product per head for every batch row at once.
    None when the kernel would not take it."""
    n_heads, t, k = z.shape[-3:]
    rows = z.size // k
    if not (_gemm_nt is not None and z.dtype == w_o.dtype == np.float32 and w_o.flags.c_contiguous
            and rows * k * w_o.shape[0] >= KERNEL_MIN_MACS):
        return None
    d = w_o.shape[0]
    by_head = np.ascontiguousarray(np.moveaxis(z.reshape(-1, n_heads, t, k), 1, 0))  # (H, B, T, k)
    out = np.empty((n_heads, rows // n_heads, d), np.float32)  # (H, B T, d)
    # One address each, then offsets: asking NumPy for an array's address costs more than a small product, and
    # each call of the kernel as much again (a batch of 32 windows would make 256 calls, one per head and window).
    z_at, w_at, out_at = _address(by_head), _address(w_o), _address(out)
    for h in range(n_heads):
        _gemm_nt(z_at + 4 * h * by_head[0].size, w_at + 4 * h * k, out_at + 4 * h * out[0].size, rows // n_heads, k,
                 d, w_o.shape[1])
    return np.moveaxis(out.reshape(n_heads, -1, t, d), 0, 1).reshape(*z.shape[:-1], d)


def _kernel_nt(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """a (m, k) @ w.T by the kernel, for w (n, k) with contiguous rows."""
    a = np.ascontiguousarray(a)
    (m, k), n = a.shape, w.shape[0]
    out = np.empty((m, n), np.float32)
    _gemm_nt(_address(a), _address(w), _address(out), m, k, n, k)
    return out


def _address(x: np.ndarray) -> int:
    return x.__array_interface__["data"][0]
