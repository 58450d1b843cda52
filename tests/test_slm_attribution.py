"""slm.attribution: the residual decomposition, direct logit attribution, the logit lens."""

from __future__ import annotations

import numpy as np
import pytest

import slm
from slm import attribution

CASES = [dict(), dict(bias=True), dict(bias=True, norm="rms", positions="learned", activation="swiglu"),
         dict(positions="rope", n_kv_heads=1, activation="gelu"), dict(positions="none", tied=True, bias=True)]


def _model(seed=0, **kw) -> slm.Model:
    cfg = slm.Config(**{**dict(n_vocab=15, n_ctx=8, n_model=12, n_heads=3, n_layers=3, d_ff=16), **kw})
    model = slm.Model.init(cfg, seed)
    rng = np.random.default_rng(seed)
    for name, value in model.params.items():  # non-trivial biases and norm parameters
        if name.endswith((".weight", ".bias")) or ".b_" in name:
            model.params[name] = value + 0.3 * rng.standard_normal(value.shape)
    return model


@pytest.mark.parametrize("kw", CASES)
def test_components_sum_to_the_final_residual(kw):
    model = _model(**kw)
    trace = model.forward(np.array([1, 4, 2, 8, 5, 7]))
    comps = attribution.residual_components(model, trace)
    n_pos = 1 if model.cfg.positions in ("sinusoidal", "learned") else 0
    n_bias = 2 if model.cfg.bias else 0
    assert len(comps.names) == comps.vectors.shape[0] == 1 + n_pos + 3 * (3 + 1 + n_bias)
    assert comps.vectors.shape[1:] == (6, 12)
    assert comps.names[0] == "embed" and "L2.H1" in comps.names and "L0.ffn" in comps.names
    np.testing.assert_allclose(comps.vectors.sum(axis=0), trace.layers[-1].y, rtol=0, atol=1e-9)
    head = comps.names.index("L1.H2")
    np.testing.assert_array_equal(comps.vectors[head], trace.layers[1].head_out[2])


@pytest.mark.parametrize("kw", CASES)
def test_direct_logit_attribution_sums_to_the_logit(kw):
    model = _model(**kw)
    trace = model.forward(np.array([1, 4, 2, 8, 5, 7]))
    for position, token in ((0, 3), (5, 11), (2, 0)):
        parts = attribution.direct_logit_attribution(model, trace, position, token)
        assert sum(parts.values()) == pytest.approx(trace.logits[position, token], abs=1e-9)
        assert ("norm_f.bias" in parts) == (model.cfg.norm == "layer")


def test_direct_logit_attribution_by_hand_for_one_component():
    model = _model(norm="rms")
    trace = model.forward(np.array([1, 2, 3]))
    y = trace.layers[-1].y[2]
    scale = np.sqrt(np.mean(y**2) + model.cfg.eps)
    head = trace.layers[0].head_out[1, 2]
    expected = head / scale * model.params["norm_f.weight"] @ model.params["unembed"][:, 4]
    parts = attribution.direct_logit_attribution(model, trace, 2, 4)
    assert parts["L0.H1"] == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_logit_lens_last_row_is_the_prediction(placement):
    model = _model(norm_placement=placement)
    trace = model.forward(np.array([3, 1, 4, 1, 5]))
    lens = attribution.logit_lens(model, trace)
    assert [row.stage for row in lens] == ["x", "L0.h", "L0.y", "L1.h", "L1.y", "L2.h", "L2.y"]
    np.testing.assert_allclose(lens[-1].probs, trace.probs, rtol=1e-12, atol=1e-15)
    for row in lens:
        np.testing.assert_allclose(row.probs.sum(-1), 1.0, rtol=1e-12)
    assert not np.allclose(lens[0].probs, trace.probs)


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_logit_lens_at_one_position_is_that_row_of_the_whole_lens(placement):
    """With `position`, every stage's row comes from one product over the stacked rows: the same numbers."""
    model = _model(norm_placement=placement)
    trace = model.forward(np.array([3, 1, 4, 1, 5]))
    whole = attribution.logit_lens(model, trace)
    for position in (0, 2, 4):
        one = attribution.logit_lens(model, trace, position)
        assert [row.stage for row in one] == [row.stage for row in whole]
        for a, b in zip(one, whole, strict=True):
            assert a.probs.shape == (1, b.probs.shape[-1])
            np.testing.assert_allclose(a.probs[0], b.probs[position], rtol=1e-12, atol=1e-15)


def test_residual_norms_by_hand():
    model = _model()
    trace = model.forward(np.array([1, 2]))
    norms = dict(attribution.residual_norms(trace))
    np.testing.assert_allclose(norms["x"], np.sqrt((trace.x**2).sum(-1)), rtol=1e-12)
    np.testing.assert_allclose(norms["L1.h"], np.sqrt((trace.layers[1].h ** 2).sum(-1)), rtol=1e-12)


def test_post_norm_and_batched_traces_are_rejected():
    post = _model(norm_placement="post")
    with pytest.raises(ValueError, match="pre-norm"):
        attribution.residual_components(post, post.forward(np.array([1, 2])))
    model = _model()
    with pytest.raises(ValueError, match="unbatched"):
        attribution.residual_components(model, model.forward(np.array([[1, 2]])))
