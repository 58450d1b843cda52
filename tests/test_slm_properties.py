"""Property-based tests over random configs covering every option combination."""

from __future__ import annotations

import io

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import slm

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def configs(draw) -> slm.Config:
    n_heads = draw(st.sampled_from([1, 2, 3, 4]))
    head_size = draw(st.sampled_from([2, 4]))
    positions = draw(st.sampled_from(["sinusoidal", "learned", "rope", "none"]))
    norm_placement = draw(st.sampled_from(["pre", "post"]))
    return slm.Config(
        n_vocab=draw(st.integers(2, 20)),
        n_ctx=draw(st.integers(1, 9)),
        n_model=n_heads * head_size,
        n_heads=n_heads,
        n_kv_heads=draw(st.sampled_from([g for g in range(1, n_heads + 1) if n_heads % g == 0])),
        n_layers=draw(st.integers(1, 3)),
        d_ff=draw(st.integers(1, 16)),
        activation=draw(st.sampled_from(["relu", "gelu", "swiglu"])),
        norm=draw(st.sampled_from(["layer", "rms"])),
        norm_placement=norm_placement,
        positions=positions,
        rope_base=draw(st.sampled_from([10.0, 10000.0])),
        rope_scale=draw(st.sampled_from([1.0, 2.5])),
        rotary_dim=draw(st.sampled_from([None, 2])) if positions == "rope" else None,
        parallel_residual=draw(st.booleans()) if norm_placement == "pre" else False,
        causal=draw(st.booleans()),
        bias=draw(st.booleans()),
        tied=draw(st.booleans()),
    )


@st.composite
def model_and_tokens(draw, causal: bool | None = None, min_len: int = 1):
    cfg = draw(configs())
    if causal is not None:
        cfg = cfg.replace(causal=causal)
    if cfg.n_ctx < min_len:
        cfg = cfg.replace(n_ctx=min_len)
    model = slm.Model.init(cfg, seed=draw(st.integers(0, 2**16)))
    t = draw(st.integers(min_len, cfg.n_ctx))
    tokens = np.array(draw(st.lists(st.integers(0, cfg.n_vocab - 1), min_size=t, max_size=t)))
    return model, tokens


def _hand_count(cfg: slm.Config) -> int:
    d, f, v, c, k = cfg.n_model, cfg.d_ff, cfg.n_vocab, cfg.n_ctx, cfg.head_size
    h, g = cfg.n_heads, cfg.n_kv_heads
    norm = 2 * d if cfg.norm == "layer" else d
    attn = 2 * h * k * d + 2 * g * k * d + (h * k + 2 * g * k + d) * cfg.bias
    ffn = (3 if cfg.activation == "swiglu" else 2) * d * f + (f + d) * cfg.bias
    return (v * d + c * d * (cfg.positions == "learned") + cfg.n_layers * (2 * norm + attn + ffn)
            + norm * (cfg.norm_placement == "pre") + d * v * (not cfg.tied))


@SETTINGS
@given(configs())
def test_config_json_round_trip_and_exact_count(cfg):
    assert slm.Config.from_json(cfg.to_json()) == cfg
    params = slm.init_params(cfg)
    assert slm.count_params(cfg) == _hand_count(cfg) == sum(a.size for a in params.values())


@SETTINGS
@given(model_and_tokens())
def test_shapes_and_distributions(mt):
    model, tokens = mt
    cfg, t = model.cfg, len(tokens)
    tr = model.forward(tokens)
    assert tr.logits.shape == (t, cfg.n_vocab)
    assert tr.attention.shape == (cfg.n_layers, cfg.n_heads, t, t)
    assert tr.layers[0].k.shape == (cfg.n_kv_heads, t, cfg.head_size)
    assert tr.layers[-1].ff_act.shape == (t, cfg.d_ff)
    assert np.all(np.isfinite(tr.logits))
    np.testing.assert_allclose(tr.probs.sum(-1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(tr.attention.sum(-1), 1.0, rtol=1e-12)
    if cfg.causal:
        assert np.all(tr.attention[..., np.triu(np.ones((t, t), dtype=bool), 1)] == 0.0)
    for i, layer in enumerate(tr.layers):
        b_o = model.params[f"blocks.{i}.attn.b_o"] if cfg.bias else 0.0
        np.testing.assert_allclose(layer.head_out.sum(0) + b_o, layer.attn_out, rtol=1e-12, atol=1e-12)


@SETTINGS
@given(model_and_tokens(causal=True, min_len=2), st.data())
def test_causality(mt, data):
    model, tokens = mt
    changed = tokens.copy()
    changed[-1] = data.draw(st.integers(0, model.cfg.n_vocab - 1))
    a, b = model.forward(tokens), model.forward(changed)
    np.testing.assert_array_equal(a.logits[:-1], b.logits[:-1])
    np.testing.assert_array_equal(a.attention[..., :-1, :], b.attention[..., :-1, :])


@SETTINGS
@given(model_and_tokens(causal=True))
def test_cache_equals_recompute(mt):
    model, tokens = mt
    cache = slm.KVCache(model.cfg.n_layers)
    split = max(1, len(tokens) // 2)
    first = model.forward(tokens[:split], cache=cache)
    full = model.forward(tokens)
    np.testing.assert_allclose(first.logits, full.logits[:split], rtol=1e-12, atol=1e-12)
    for i in range(split, len(tokens)):
        step = model.forward(tokens[i:i + 1], cache=cache)
        np.testing.assert_allclose(step.logits[0], full.logits[i], rtol=1e-12, atol=1e-12)


@SETTINGS
@given(model_and_tokens())
def test_generate_cache_equals_recompute(mt):
    model, tokens = mt
    a = list(slm.generate(model, tokens, 4, temperature=1.0, seed=0))
    b = list(slm.generate(model, tokens, 4, temperature=1.0, seed=0, use_cache=False))
    assert [s.token for s in a] == [s.token for s in b]
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(x.probs, y.probs, rtol=1e-12, atol=1e-14)


@SETTINGS
@given(model_and_tokens(), st.data())
def test_padding_invariance(mt, data):
    model, tokens = mt
    t = len(tokens)
    n = data.draw(st.integers(1, t))
    batch = np.stack([tokens, np.concatenate([tokens[:n], np.zeros(t - n, dtype=tokens.dtype)])])
    tr = model.forward(batch, lengths=np.array([t, n]))
    np.testing.assert_allclose(tr.logits[0], model.forward(tokens).logits, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tr.logits[1, :n], model.forward(tokens[:n]).logits, rtol=1e-12, atol=1e-12)
    assert np.all(tr.attention[1, ..., n:] == 0.0)


@SETTINGS
@given(model_and_tokens())
def test_save_load_round_trip(mt):
    model, tokens = mt
    buffer = io.BytesIO()
    model.save(buffer)
    loaded = slm.Model.load(buffer.getvalue())
    assert loaded.cfg == model.cfg
    np.testing.assert_array_equal(loaded.forward(tokens).logits, model.forward(tokens).logits)
