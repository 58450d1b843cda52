"""slm against an independent PyTorch implementation of the documented architecture (testkit.torch_reference:
written from docs/slm.md, not from slm's code), fed the same weights."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import slm  # noqa: E402
from testkit.torch_reference import TorchReference  # noqa: E402

TOL = 1e-5


def _compare(cfg: slm.Config, seed: int = 0, t: int | None = None) -> None:
    model = slm.Model.init(cfg, seed=seed, dtype=np.float32)
    # Non-zero biases and norm parameters, so that a transposed or misplaced one cannot hide behind zeros or ones.
    rng = np.random.default_rng(seed + 100)
    for name, value in model.params.items():
        if name.endswith((".bias", ".weight")) or ".b_" in name:
            model.params[name] = (value + 0.2 * rng.standard_normal(value.shape)).astype(np.float32)
    t = cfg.n_ctx if t is None else t
    tokens = rng.integers(0, cfg.n_vocab, size=t)
    trace = model.forward(tokens)
    with torch.inference_mode():
        ref = TorchReference(cfg, model.params)(torch.tensor(tokens))
    assert trace.logits.dtype == np.float32
    for i, layer in enumerate(trace.layers):
        np.testing.assert_allclose(layer.attention, ref["attention"][i].numpy(), rtol=TOL, atol=TOL)
        assert (layer.h is None) == (ref["h"][i] is None)  # a parallel block has no h
        if layer.h is not None:
            np.testing.assert_allclose(layer.h, ref["h"][i].numpy(), rtol=TOL, atol=TOL)
        np.testing.assert_allclose(layer.y, ref["y"][i].numpy(), rtol=TOL, atol=TOL)
    np.testing.assert_allclose(trace.logits, ref["logits"].numpy(), rtol=TOL, atol=TOL)
    np.testing.assert_allclose(trace.probs, ref["probs"].numpy(), rtol=TOL, atol=TOL)


BASE = dict(n_vocab=23, n_ctx=9, n_model=16, n_heads=4, n_layers=2, d_ff=24)

# The full product of the architecture switches: placement x norm x activation x positions x causal x bias.
ARCH = list(
    itertools.product(("pre", "post"), ("layer", "rms"), ("relu", "gelu", "swiglu"),
                      ("sinusoidal", "learned", "rope", "none"), (True, False), (False, True))
)


@pytest.mark.parametrize(
    "placement,norm,activation,positions,causal,bias", ARCH,
    ids=["-".join(str(v) for v in combo) for combo in ARCH],
)
def test_matches_torch_reference(placement, norm, activation, positions, causal, bias):
    cfg = slm.Config(**BASE, norm_placement=placement, norm=norm, activation=activation, positions=positions,
                     causal=causal, bias=bias)
    _compare(cfg)


@pytest.mark.parametrize("n_kv_heads", [1, 2, 4])
@pytest.mark.parametrize("positions", ["rope", "learned"])
@pytest.mark.parametrize("causal", [True, False])
def test_grouped_query_matches_torch_reference(n_kv_heads, positions, causal):
    cfg = slm.Config(**BASE, n_kv_heads=n_kv_heads, positions=positions, causal=causal, bias=True)
    _compare(cfg, seed=3)


@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("rope_scale,rope_base", [(1.0, 10000.0), (4.0, 500.0)])
def test_tied_and_rope_settings_match_torch_reference(tied, rope_scale, rope_base):
    cfg = slm.Config(**BASE, positions="rope", tied=tied, rope_scale=rope_scale, rope_base=rope_base,
                     activation="swiglu", norm="rms")
    _compare(cfg, seed=5)


@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("rotary_dim", [None, 2])
def test_gpt_neox_pieces_match_torch_reference(parallel, rotary_dim):
    """Parallel attention and FFN, RoPE on the first r coordinates of each head, exact GELU, biases (Pythia)."""
    cfg = slm.Config(**BASE, positions="rope", rotary_dim=rotary_dim, parallel_residual=parallel,
                     activation="gelu_erf", bias=True, rope_base=300.0)
    _compare(cfg, seed=9)


def test_shorter_sequence_and_eight_heads_match_torch_reference():
    cfg = slm.Config(n_vocab=31, n_ctx=12, n_model=32, n_heads=8, n_kv_heads=2, n_layers=3, positions="rope",
                     activation="gelu", eps=1e-6)
    _compare(cfg, seed=7, t=5)


def test_reference_is_sensitive_to_a_wrong_convention():
    """The comparison can fail: the reference reading w_q transposed (as an input-rows matrix) disagrees."""
    cfg = slm.Config(**BASE)
    model = slm.Model.init(cfg, seed=0, dtype=np.float32)
    params = dict(model.params)
    params["blocks.0.attn.w_q"] = params["blocks.0.attn.w_q"].T.copy()
    tokens = np.arange(cfg.n_ctx)
    with torch.inference_mode():
        ref = TorchReference(cfg, params)(torch.tensor(tokens))
    assert not np.allclose(model.forward(tokens).logits, ref["logits"].numpy(), rtol=TOL, atol=TOL)
