"""slm.layers: the building blocks, checked against worked examples and hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

import slm
from slm import layers

# ---- norms ----


def test_layer_norm_worked_example():
    x = np.array([[2.0, 4.0, 6.0, 8.0], [100.0, 101.0, 99.0, 100.0]])
    out = layers.layer_norm(x, eps=1e-5)
    np.testing.assert_allclose(out.mean(axis=-1), [0.0, 0.0], atol=1e-4)
    np.testing.assert_allclose(out.std(axis=-1), [1.0, 1.0], atol=1e-4)
    # By hand: row 0 has mean 5 and population variance 5, so 2 -> -3 / sqrt(5 + 1e-5).
    np.testing.assert_allclose(out[0, 0], -3.0 / math.sqrt(5.0 + 1e-5), rtol=1e-12)
    # Row 1 has mean 100 and variance 0.5, so 101 -> 1 / sqrt(0.5 + 1e-5).
    np.testing.assert_allclose(out[1, 1], 1.0 / math.sqrt(0.5 + 1e-5), rtol=1e-12)


def test_layer_norm_scale_and_shift_apply_per_feature():
    x = np.array([[1.0, 3.0]])  # mean 2, variance 1: normalised [-1, 1] (up to eps)
    out = layers.layer_norm(x, np.array([2.0, 10.0]), np.array([0.5, -1.0]), eps=0.0)
    np.testing.assert_allclose(out, [[-2.0 + 0.5, 10.0 - 1.0]])


def test_rms_norm_by_hand():
    x = np.array([[3.0, 4.0]])  # rms = sqrt((9 + 16) / 2) = sqrt(12.5)
    out = layers.rms_norm(x, np.array([1.0, 2.0]), eps=0.0)
    np.testing.assert_allclose(out, [[3.0 / math.sqrt(12.5), 8.0 / math.sqrt(12.5)]], rtol=1e-12)
    # no centring: a constant row keeps its sign
    np.testing.assert_allclose(layers.rms_norm(np.array([[5.0, 5.0, 5.0]]), eps=0.0), [[1.0, 1.0, 1.0]])


# ---- softmax ----


def test_softmax_by_hand_and_stable():
    np.testing.assert_allclose(layers.softmax(np.array([0.0, math.log(3.0)])), [0.25, 0.75], rtol=1e-12)
    huge = layers.softmax(np.array([1000.0, 1000.0 + math.log(3.0)]))  # naive exp overflows
    np.testing.assert_allclose(huge, [0.25, 0.75], rtol=1e-12)
    tiny = layers.softmax(np.array([-1000.0, -1000.0]))
    np.testing.assert_allclose(tiny, [0.5, 0.5])


def test_softmax_masked_entries_are_exactly_zero_and_rows_sum_to_one():
    x = np.array([[1.0, 2.0, 3.0], [4.0, -1.0, 0.5]])
    mask = np.array([[True, False, True], [False, True, True]])
    out = layers.softmax(x, mask=mask)
    assert out[0, 1] == 0.0 and out[1, 0] == 0.0
    np.testing.assert_allclose(out.sum(axis=-1), 1.0, rtol=1e-15)
    e = math.exp(2.0)  # row 0 is softmax over [1, 3]
    np.testing.assert_allclose(out[0], [1 / (1 + e), 0.0, e / (1 + e)], rtol=1e-12)
    # -inf scores behave like masked entries
    np.testing.assert_array_equal(layers.softmax(np.array([0.0, -np.inf])), [1.0, 0.0])


def test_softmax_fully_masked_row_is_zeros_not_nan():
    out = layers.softmax(np.array([[1.0, 2.0], [3.0, 4.0]]), mask=np.array([[False, False], [True, True]]))
    np.testing.assert_array_equal(out[0], [0.0, 0.0])
    assert np.isfinite(out).all()


def test_softmax_along_another_axis():
    x = np.array([[0.0, 0.0], [math.log(3.0), 0.0]])
    np.testing.assert_allclose(layers.softmax(x, axis=0), [[0.25, 0.5], [0.75, 0.5]], rtol=1e-12)


# ---- activations ----


def test_activations_by_hand():
    x = np.array([-2.0, -0.5, 0.0, 0.5, 2.0])
    np.testing.assert_array_equal(layers.relu(x), [0.0, 0.0, 0.0, 0.5, 2.0])
    c = math.sqrt(2 / math.pi)
    expected_gelu = [0.5 * v * (1 + math.tanh(c * (v + 0.044715 * v**3))) for v in x]
    np.testing.assert_allclose(layers.gelu(x), expected_gelu, rtol=1e-14)
    np.testing.assert_allclose(layers.gelu(np.array([1.0])), [0.8411919906082768], rtol=1e-12)  # GPT-2 value
    np.testing.assert_allclose(layers.silu(x), [v / (1 + math.exp(-v)) for v in x], rtol=1e-14)
    np.testing.assert_allclose(layers.silu(np.array([1.0])), [0.7310585786300049], rtol=1e-12)


@pytest.mark.parametrize("fn", [layers.relu, layers.gelu, layers.silu, layers.layer_norm, layers.rms_norm,
                                layers.softmax])
def test_float32_stays_float32(fn):
    x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    assert fn(x).dtype == np.float32


# ---- feed-forward ----


def test_feed_forward_worked_example():
    x = np.array([[1.0, -1.0], [2.0, 1.0]])
    w1 = np.array([[1.0, 0.0, 1.0], [0.0, 1.0, -1.0]])
    w2 = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    ff = layers.feed_forward(x, w1, w2, "relu")
    np.testing.assert_array_equal(ff.pre, [[1.0, -1.0, 2.0], [2.0, 1.0, 1.0]])
    np.testing.assert_array_equal(ff.act, [[1.0, 0.0, 2.0], [2.0, 1.0, 1.0]])
    np.testing.assert_array_equal(ff.out, [[3.0, 2.0], [3.0, 2.0]])
    assert ff.gate is None


def test_feed_forward_biases_and_swiglu_by_hand():
    x = np.array([[1.0, 2.0]])
    w_in = np.array([[1.0], [1.0]])  # pre = 3 + b_in
    w_gate = np.array([[0.5], [0.0]])  # gate = 0.5
    w_out = np.array([[2.0, -1.0]])
    ff = layers.feed_forward(x, w_in, w_out, "swiglu", np.array([1.0]), np.array([0.25, 0.0]), w_gate)
    silu_half = 0.5 / (1 + math.exp(-0.5))
    np.testing.assert_allclose(ff.gate, [[0.5]])
    np.testing.assert_allclose(ff.pre, [[4.0]])
    np.testing.assert_allclose(ff.act, [[silu_half * 4.0]], rtol=1e-14)
    np.testing.assert_allclose(ff.out, [[2 * silu_half * 4.0 + 0.25, -silu_half * 4.0]], rtol=1e-14)


def test_feed_forward_rejects_bad_activation_and_missing_gate():
    x, w = np.ones((1, 2)), np.ones((2, 2))
    with pytest.raises(ValueError, match="w_gate"):
        layers.feed_forward(x, w, w, "swiglu")
    with pytest.raises(ValueError, match="tanh"):
        layers.feed_forward(x, w, w, "tanh")


# ---- heads ----


def test_split_then_merge_round_trips():
    x = np.arange(2 * 5 * 12, dtype=float).reshape(2, 5, 12)
    for n_heads in (1, 2, 3, 4, 6, 12):
        split = layers.split_heads(x, n_heads)
        assert split.shape == (2, n_heads, 5, 12 // n_heads)
        np.testing.assert_array_equal(layers.merge_heads(split), x)


def test_head_one_of_two_sees_columns_four_to_seven():
    x = np.arange(40, dtype=float).reshape(5, 8)
    heads = layers.split_heads(x, 2)
    assert heads.shape == (2, 5, 4)
    np.testing.assert_array_equal(heads[1], x[:, 4:8])
    np.testing.assert_array_equal(heads[0], x[:, 0:4])


def test_split_heads_rejects_indivisible_width():
    with pytest.raises(ValueError, match="n_heads"):
        layers.split_heads(np.zeros((3, 10)), 3)


# ---- masks ----


def test_causal_mask_by_hand():
    expected = np.array([[1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=bool)
    np.testing.assert_array_equal(layers.causal_mask(3), expected)
    # two new queries following a cache of two positions: they are positions 2 and 3 of 4
    np.testing.assert_array_equal(layers.causal_mask(2, 4), [[1, 1, 1, 0], [1, 1, 1, 1]])
    assert layers.causal_mask(2, 4).dtype == bool


def test_padding_mask_by_hand():
    np.testing.assert_array_equal(layers.padding_mask(np.array([3, 1]), 4), [[1, 1, 1, 0], [1, 0, 0, 0]])


# ---- positions ----


def test_sinusoidal_table_is_the_vaswani_formula():
    n, d = 7, 6
    table = layers.sinusoidal_positions(n, d)
    assert table.shape == (n, d)
    for p in range(n):
        for i in range(d // 2):
            angle = p / 10000 ** (2 * i / d)
            assert table[p, 2 * i] == pytest.approx(math.sin(angle), abs=1e-15)
            assert table[p, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-15)
    np.testing.assert_array_equal(table[0], [0, 1, 0, 1, 0, 1])


def test_rope_rotates_pairs_by_hand():
    # k = 4: pair 0 turns by pos * 1, pair 1 by pos * base^(-1/2) = pos / 100 for base 10000.
    x = np.array([[1.0, 0.0, 0.0, 2.0]] * 3)
    out = layers.rope(x, np.arange(3))
    for p in range(3):
        a0, a1 = p * 1.0, p / 100.0
        expected = [math.cos(a0), math.sin(a0), -2 * math.sin(a1), 2 * math.cos(a1)]
        np.testing.assert_allclose(out[p], expected, rtol=1e-12, atol=1e-15)


def test_rope_scale_slows_the_rotation_and_base_sets_the_frequencies():
    x = np.array([[1.0, 0.0, 1.0, 0.0]])
    scaled = layers.rope(x, np.array([6]), base=100.0, scale=3.0)
    a0, a1 = 6 / 3.0, 6 * 100.0 ** (-0.5) / 3.0
    np.testing.assert_allclose(scaled[0], [math.cos(a0), math.sin(a0), math.cos(a1), math.sin(a1)], rtol=1e-12)
    # scale s at position s*p equals scale 1 at position p
    np.testing.assert_allclose(layers.rope(x, np.array([6]), scale=3.0), layers.rope(x, np.array([2])), rtol=1e-12)


def test_rope_preserves_lengths_and_position_zero():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5, 8))
    out = layers.rope(x, np.arange(5))
    np.testing.assert_allclose(np.linalg.norm(out, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-12)
    np.testing.assert_array_equal(out[:, 0], x[:, 0])


def test_rope_scores_depend_only_on_the_position_gap():
    rng = np.random.default_rng(1)
    q, k = rng.standard_normal(8), rng.standard_normal(8)

    def score(i, j):
        return layers.rope(q[None], np.array([i]))[0] @ layers.rope(k[None], np.array([j]))[0]

    for gap in (0, 1, 3):
        values = [score(start + gap, start) for start in (0, 2, 7, 20)]
        np.testing.assert_allclose(values, values[0], rtol=1e-10)
    assert abs(score(3, 0) - score(1, 0)) > 1e-3  # and does depend on it


# ---- attention ----


def test_attention_by_hand():
    # one head, k = 1: scores q k / 1; query 1 sees keys 0 and 1 with scores 0 and ln 3
    q = np.array([[[0.0], [1.0]]])
    k = np.array([[[0.0], [math.log(3.0)]]])
    v = np.array([[[4.0], [8.0]]])
    att = layers.attention(q, k, v, layers.causal_mask(2))
    np.testing.assert_allclose(att.scores[0], [[0.0, -np.inf], [0.0, math.log(3.0)]])
    np.testing.assert_allclose(att.weights[0], [[1.0, 0.0], [0.25, 0.75]], rtol=1e-12)
    np.testing.assert_allclose(att.out[0], [[4.0], [7.0]], rtol=1e-12)


def test_attention_scales_by_sqrt_head_size():
    q = np.ones((1, 1, 4))
    k = np.array([[[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]]])
    att = layers.attention(q, k, np.zeros((1, 2, 4)))
    np.testing.assert_allclose(att.scores[0, 0], [4.0 / 2.0, 0.0])
    np.testing.assert_allclose(att.weights[0, 0], [math.exp(2) / (1 + math.exp(2)), 1 / (1 + math.exp(2))])


def test_attention_masks_and_rows():
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((3, 6, 4)) for _ in range(3))
    att = layers.attention(q, k, v, layers.causal_mask(6))
    upper = ~layers.causal_mask(6)
    assert np.all(att.weights[:, upper] == 0.0)
    assert np.all(np.isneginf(att.scores[:, upper]))
    assert np.all(att.weights[:, ~upper] > 0.0)
    np.testing.assert_allclose(att.weights.sum(axis=-1), 1.0, rtol=1e-14)


def test_grouped_query_attention_matches_a_loop():
    rng = np.random.default_rng(3)
    h, g, t, k = 6, 2, 5, 4
    q = rng.standard_normal((h, t, k))
    kk, v = rng.standard_normal((g, t, k)), rng.standard_normal((g, t, k))
    mask = layers.causal_mask(t)
    att = layers.attention(q, kk, v, mask)
    for j in range(h):
        kv = j // (h // g)
        s = q[j] @ kk[kv].T / math.sqrt(k)
        s = np.where(mask, s, -np.inf)
        w = np.exp(s - s.max(axis=-1, keepdims=True))
        w /= w.sum(axis=-1, keepdims=True)
        np.testing.assert_allclose(att.weights[j], w, rtol=1e-12)
        np.testing.assert_allclose(att.out[j], w @ v[kv], rtol=1e-12)


# ---- parameter count of one block ----


def test_one_block_has_twelve_d_squared_weights():
    cfg = slm.Config(n_vocab=10, n_ctx=8, n_model=16, n_heads=4, d_ff=64, bias=False)
    block = {n: s for n, s in slm.param_shapes(cfg).items()
             if n.startswith("blocks.0.") and ".norm" not in n}
    total = sum(math.prod(s) for s in block.values())
    assert total == 3072 == 12 * 16**2


@pytest.mark.parametrize("tied", [True, False])
def test_the_products_pyodide_runs_give_the_same_logits(monkeypatch, tied):
    """Under Pyodide (layers.FOLD_EVERY_STACK) every stack is folded into one product, and a weight used
    transposed goes through einsum: the same logits within rounding, for a batch and for a single sequence."""
    cfg = slm.Config(n_vocab=13, n_ctx=8, n_model=16, n_heads=4, n_kv_heads=2, n_layers=2, activation="swiglu",
                     bias=True, tied=tied)
    model = slm.Model.init(cfg, seed=5)
    tokens = np.random.default_rng(1).integers(0, 13, size=(3, 8))
    monkeypatch.setattr(layers, "FOLD_EVERY_STACK", False)
    plain = [model.forward(tokens).logits, model.forward(tokens[0]).logits]
    monkeypatch.setattr(layers, "FOLD_EVERY_STACK", True)
    fast = [model.forward(tokens).logits, model.forward(tokens[0]).logits]
    for a, b in zip(plain, fast, strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-12)
