"""The sparse autoencoder: encode, decode, and the gradients of its training objective, in NumPy.

With x a row of activations (d_in,), in SAELens's names and shapes:
    pre = (x - b_dec) @ W_enc + b_enc        (the b_dec subtraction when apply_b_dec_to_input)
    f   = act(pre)                           ReLU; TopK: the k largest of pre kept (then ReLU), the rest 0;
                                             JumpReLU (read only): pre where pre > threshold, else 0
    x̂   = f @ W_dec + b_dec
Objective (one batch of B rows): mean over rows of ‖x̂ − x‖² + λ Σ_j f_j, with the rows of W_dec kept at unit
norm by the trainer (so λ Σ f is SAELens's λ Σ f_j ‖W_dec[j]‖). TopK needs no λ: k bounds the L0. TopK's auxiliary
loss (AuxK, Gao et al. 2024, as SAELens): the k_aux = d_in/2 largest pre-activations among the dead features,
ReLU'd, reconstruct the main reconstruction's error e = x − x̂ (held fixed) through their decoder rows, no bias:
+ c · min(n_dead/k_aux, 1) · mean over rows of ‖ê − e‖², which pulls dead features toward what the live ones miss.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from .. import matmul

ACTIVATIONS = ("relu", "topk", "jumprelu")
ARCHITECTURE = {"relu": "standard", "topk": "topk", "jumprelu": "jumprelu"}  # SAELens's name of each


# In the page (Pyodide's NumPy has no BLAS) the products go through slm.matmul, which uses the site's SIMD kernel when
# it has one; CPython keeps NumPy's @.
IN_PAGE = sys.platform == "emscripten"


def _mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a (..., n) @ b (n, m)."""
    if not IN_PAGE:
        return a @ b
    return matmul.matmul(a.reshape(-1, a.shape[-1]), b).reshape(*a.shape[:-1], b.shape[-1])


def _mul_tn(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a.T @ b for a (r, m), b (r, n)."""
    return matmul.matmul_tn(a, b) if IN_PAGE else a.T @ b


class SAE:
    """W_enc (d_in, d_sae), b_enc (d_sae,), W_dec (d_sae, d_in), b_dec (d_in,) in `params` (the arrays an optimiser
    updates in place), the activation, and the hook point it reads (`hook_name`, a TransformerLens name)."""

    def __init__(self, params: dict[str, np.ndarray], activation: str = "relu", k: int | None = None,
                 hook_name: str | None = None, apply_b_dec_to_input: bool = True,
                 metadata: dict[str, Any] | None = None) -> None:
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
        missing = {"W_enc", "b_enc", "W_dec", "b_dec"} - set(params)
        if missing:
            raise ValueError(f"an SAE needs W_enc, b_enc, W_dec and b_dec; missing {sorted(missing)}")
        d_in, d_sae = np.shape(params["W_enc"])
        shapes = {"b_enc": (d_sae,), "W_dec": (d_sae, d_in), "b_dec": (d_in,)}
        if activation == "jumprelu":
            shapes["threshold"] = (d_sae,)
        for name, shape in shapes.items():
            if name not in params or np.shape(params[name]) != shape:
                raise ValueError(f"{name} must have shape {shape} for W_enc of shape {(d_in, d_sae)}, got "
                                 f"{None if name not in params else np.shape(params[name])}")
        if activation == "topk" and not (isinstance(k, int | np.integer) and 1 <= k <= d_sae):
            raise ValueError(f"a TopK SAE needs k in 1..d_sae={d_sae}, got {k!r}")
        self.params = params
        self.activation = activation
        self.k = int(k) if activation == "topk" else None
        self.hook_name = hook_name
        self.apply_b_dec_to_input = apply_b_dec_to_input
        self.metadata = dict(metadata or {})  # SAELens's cfg["metadata"]: model_name, hook_name, context_size...

    @classmethod
    def init(cls, d_in: int, d_sae: int, activation: str = "relu", k: int | None = None,
             hook_name: str | None = None, seed: int = 0, dtype: Any = np.float32,
             b_dec: np.ndarray | None = None) -> SAE:
        """Random unit-norm decoder rows, W_enc = W_dec.T (SAELens's start), b_enc = 0, b_dec given or 0."""
        rng = np.random.default_rng(seed)
        w_dec = rng.standard_normal((d_sae, d_in))
        w_dec /= np.linalg.norm(w_dec, axis=1, keepdims=True)
        params = {"W_enc": w_dec.T.copy(), "b_enc": np.zeros(d_sae), "W_dec": w_dec,
                  "b_dec": np.zeros(d_in) if b_dec is None else np.array(b_dec, dtype=np.float64)}
        return cls({n: v.astype(dtype) for n, v in params.items()}, activation, k, hook_name)

    # the weights by their SAELens names
    W_enc = property(lambda self: self.params["W_enc"])
    b_enc = property(lambda self: self.params["b_enc"])
    W_dec = property(lambda self: self.params["W_dec"])
    b_dec = property(lambda self: self.params["b_dec"])
    d_in = property(lambda self: self.params["W_enc"].shape[0])
    d_sae = property(lambda self: self.params["W_enc"].shape[1])
    dtype = property(lambda self: self.params["W_enc"].dtype)

    def __repr__(self) -> str:
        kind = f"topk k={self.k}" if self.activation == "topk" else self.activation
        return f"SAE({self.d_in} -> {self.d_sae}, {kind}, hook_name={self.hook_name!r})"

    def hidden_pre(self, x: np.ndarray) -> np.ndarray:
        """(..., d_sae) pre-activations of rows x (..., d_in)."""
        x = np.asarray(x, dtype=self.dtype)
        if self.apply_b_dec_to_input:
            x = x - self.b_dec
        return _mul(x, self.W_enc) + self.b_enc

    def activate(self, pre: np.ndarray) -> np.ndarray:
        if self.activation == "relu":
            return np.maximum(pre, 0)
        if self.activation == "jumprelu":
            return np.where(pre > self.params["threshold"], np.maximum(pre, 0), 0).astype(pre.dtype)
        return _top_k(pre, self.k)

    def encode(self, x: np.ndarray) -> np.ndarray:
        """Feature activations f (..., d_sae) of activations x (..., d_in)."""
        return self.activate(self.hidden_pre(x))

    def decode(self, f: np.ndarray) -> np.ndarray:
        """The reconstruction (..., d_in) of feature activations f (..., d_sae)."""
        return _mul(np.asarray(f, dtype=self.dtype), self.W_dec) + self.b_dec

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """decode(encode(x)): what splicing the SAE into a model puts in place of x."""
        return self.decode(self.encode(x))

    def normalize_decoder(self) -> None:
        """Scale each row of W_dec to unit norm, in place (the ReLU objective's constraint)."""
        w = self.params["W_dec"]
        w /= np.maximum(np.linalg.norm(w, axis=1, keepdims=True), 1e-12)

    def folded(self, scale: float) -> SAE:
        """The SAE for raw activations x of one trained on scale·x (as SAELens folds its norm scaling factor):
        W_enc·scale, W_dec/scale, b_dec/scale. Features are unchanged: encode(x) here = trained encode(scale·x)."""
        p = {n: v.copy() for n, v in self.params.items()}
        p["W_enc"] *= scale
        p["W_dec"] /= scale
        p["b_dec"] /= scale
        return SAE(p, self.activation, self.k, self.hook_name, self.apply_b_dec_to_input, self.metadata)

    def copy(self) -> SAE:
        return self.folded(1.0)


def _top_k(pre: np.ndarray, k: int) -> np.ndarray:
    """ReLU of the k largest entries of each row, 0 elsewhere."""
    rows = pre.reshape(-1, pre.shape[-1])
    n, d = rows.shape
    top = np.argpartition(rows, -k, axis=-1)[:, -k:]
    # Flat indices into the (n, d) rows: one gather and one scatter, where take/put_along_axis build index grids
    # (twice the time of the whole top-k in the page).
    at = (top + (np.arange(n) * d)[:, None]).ravel()
    out = np.zeros(n * d, dtype=pre.dtype)
    out[at] = np.maximum(rows.ravel()[at], 0)
    return out.reshape(pre.shape)


def loss_and_grads(sae: SAE, x: np.ndarray, l1: float = 0.0, dead: np.ndarray | None = None, aux: float = 0.0
                   ) -> tuple[float, dict[str, float], dict[str, np.ndarray], np.ndarray]:
    """The objective on rows x (B, d_in), its parts {"mse", "l1", "aux"}, the gradient of every parameter, and the
    feature activations f (B, d_sae) (the trainer counts which fired). mse is the mean over rows of the summed
    squared error; l1 the mean over rows of λ Σ f; aux the TopK auxiliary loss with coefficient `aux` on the
    features in the boolean mask `dead` (d_sae,). A TopK SAE's gradient flows through the k kept units only."""
    if sae.activation == "jumprelu":
        raise ValueError("JumpReLU SAEs are read from SAELens files, not trained here")
    x = np.asarray(x, dtype=sae.dtype)
    n = x.shape[0]
    centred = x - sae.b_dec if sae.apply_b_dec_to_input else x
    pre = _mul(centred, sae.W_enc) + sae.b_enc
    f = sae.activate(pre)
    err = _mul(f, sae.W_dec) + sae.b_dec - x
    mse = float(np.einsum("ij,ij->", err, err)) / n
    l1_term = l1 * float(f.sum()) / n

    g_out = (2.0 / n) * err  # d loss / d x̂
    g_f = _mul(g_out, sae.W_dec.T)
    if l1:
        g_f = g_f + l1 / n
    g_pre = g_f * (f > 0)  # ReLU: the units above 0; TopK: the kept units above 0 (the rest are constant 0)
    grads = {
        "W_enc": _mul_tn(centred, g_pre),
        "b_enc": g_pre.sum(axis=0),
        "W_dec": _mul_tn(f, g_out),
        "b_dec": g_out.sum(axis=0),
    }
    aux_term = 0.0
    n_dead = 0 if dead is None or not aux else int(np.count_nonzero(dead))
    if n_dead:
        k_aux = max(sae.d_in // 2, 1)
        weight = aux * min(n_dead / k_aux, 1.0)
        idx = np.flatnonzero(dead)
        f_aux = _top_k(pre[:, idx], min(k_aux, n_dead))
        w_dead = sae.W_dec[idx]
        aux_err = _mul(f_aux, w_dead) + err  # ê − e, with e = x − x̂ = −err
        aux_term = weight * float(np.einsum("ij,ij->", aux_err, aux_err)) / n
        g_aux = (2.0 * weight / n) * aux_err
        g_pre_aux = _mul(g_aux, w_dead.T) * (f_aux > 0)
        grads["W_dec"][idx] += _mul_tn(f_aux, g_aux)
        grads["W_enc"][:, idx] += _mul_tn(centred, g_pre_aux)
        grads["b_enc"][idx] += g_pre_aux.sum(axis=0)
    if sae.apply_b_dec_to_input:
        # b_dec also enters every row's pre-activation as −b_dec @ W_enc: summed over the rows, its gradient there
        # is −(Σ_rows g_pre) @ W_enc.T, and Σ_rows g_pre (auxiliary part included) is b_enc's gradient.
        grads["b_dec"] -= grads["b_enc"] @ sae.W_enc.T
    return mse + l1_term + aux_term, {"mse": mse, "l1": l1_term, "aux": aux_term}, grads, f
