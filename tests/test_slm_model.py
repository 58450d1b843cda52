"""slm.Model: the traced forward pass, masks, positions, grouped-query attention, batching, save and load.

`spec_forward` below is a plain per-head loop written from the documented equations (float64), independent of
slm's vectorised code; the trace's every field is checked against it.
"""

from __future__ import annotations

import io
import itertools
import math

import numpy as np
import pytest

import slm


def _norm(cfg, p, name, x):
    w = p[f"{name}.weight"]
    if cfg.norm == "layer":
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + cfg.eps) * w + p[f"{name}.bias"]
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + cfg.eps) * w


def _rotate(rows, base, scale):
    """RoPE by the spec, one position and one pair at a time."""
    out = rows.copy()
    k = rows.shape[-1]
    for pos in range(rows.shape[0]):
        for i in range(k // 2):
            a = pos * base ** (-2 * i / k) / scale
            x0, x1 = rows[pos, 2 * i], rows[pos, 2 * i + 1]
            out[pos, 2 * i] = x0 * math.cos(a) - x1 * math.sin(a)
            out[pos, 2 * i + 1] = x0 * math.sin(a) + x1 * math.cos(a)
    return out


def spec_forward(model: slm.Model, tokens: np.ndarray) -> dict:
    cfg, p = model.cfg, model.params
    t, d, h, g, k = len(tokens), cfg.n_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_size
    out: dict = {"tok": p["tok_emb"][tokens]}
    if cfg.positions == "sinusoidal":
        pos = np.array([[math.sin(q / 10000 ** (2 * (c // 2) / d)) if c % 2 == 0 else
                         math.cos(q / 10000 ** (2 * (c // 2) / d)) for c in range(d)] for q in range(t)])
    elif cfg.positions == "learned":
        pos = p["pos_emb"][:t]
    else:
        pos = np.zeros((t, d))
    out["pos"] = pos
    x = out["tok"] + pos
    out["x"] = x
    out["layers"] = []
    act = {"relu": lambda z: np.maximum(z, 0),
           "gelu": lambda z: 0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z**3)))}
    for i in range(cfg.n_layers):
        a, f, lt = f"blocks.{i}.attn", f"blocks.{i}.ffn", {}
        pre = cfg.norm_placement == "pre"
        lt["attn_in"] = _norm(cfg, p, f"blocks.{i}.norm1", x) if pre else x
        z = lt["attn_in"]
        qs, ks, vs, scores, weights, head_out = [], [], [], [], [], []
        for j in range(g):
            kj = z @ p[f"{a}.w_k"][j * k:(j + 1) * k].T + (p[f"{a}.b_k"][j * k:(j + 1) * k] if cfg.bias else 0)
            vj = z @ p[f"{a}.w_v"][j * k:(j + 1) * k].T + (p[f"{a}.b_v"][j * k:(j + 1) * k] if cfg.bias else 0)
            ks.append(_rotate(kj, cfg.rope_base, cfg.rope_scale) if cfg.positions == "rope" else kj)
            vs.append(vj)
        for j in range(h):
            qj = z @ p[f"{a}.w_q"][j * k:(j + 1) * k].T + (p[f"{a}.b_q"][j * k:(j + 1) * k] if cfg.bias else 0)
            qj = _rotate(qj, cfg.rope_base, cfg.rope_scale) if cfg.positions == "rope" else qj
            kv = j // (h // g)
            s = np.empty((t, t))
            for r in range(t):
                for c in range(t):
                    s[r, c] = qj[r] @ ks[kv][c] / math.sqrt(k) if (c <= r or not cfg.causal) else -np.inf
            w = np.exp(s - s.max(-1, keepdims=True))
            w /= w.sum(-1, keepdims=True)
            qs.append(qj)
            scores.append(s)
            weights.append(w)
            head_out.append(w @ vs[kv] @ p[f"{a}.w_o"][:, j * k:(j + 1) * k].T)
        lt.update(q=np.array(qs), k=np.array(ks), v=np.array(vs), scores=np.array(scores),
                  attention=np.array(weights), head_out=np.array(head_out))
        lt["attn_out"] = sum(head_out) + (p[f"{a}.b_o"] if cfg.bias else 0)
        hh = x + lt["attn_out"]
        lt["h"] = hh if pre else _norm(cfg, p, f"blocks.{i}.norm1", hh)
        lt["ffn_in"] = _norm(cfg, p, f"blocks.{i}.norm2", lt["h"]) if pre else lt["h"]
        lt["ff_pre"] = lt["ffn_in"] @ p[f"{f}.w_in"] + (p[f"{f}.b_in"] if cfg.bias else 0)
        if cfg.activation == "swiglu":
            gate = lt["ffn_in"] @ p[f"{f}.w_gate"]
            lt["ff_act"] = gate / (1 + np.exp(-gate)) * lt["ff_pre"]
        else:
            lt["ff_act"] = act[cfg.activation](lt["ff_pre"])
        lt["ff_out"] = lt["ff_act"] @ p[f"{f}.w_out"] + (p[f"{f}.b_out"] if cfg.bias else 0)
        yy = lt["h"] + lt["ff_out"]
        lt["y"] = yy if pre else _norm(cfg, p, f"blocks.{i}.norm2", yy)
        out["layers"].append(lt)
        x = lt["y"]
    out["final"] = _norm(cfg, p, "norm_f", x) if cfg.norm_placement == "pre" else x
    out["logits"] = out["final"] @ (p["tok_emb"].T if cfg.tied else p["unembed"])
    e = np.exp(out["logits"] - out["logits"].max(-1, keepdims=True))
    out["probs"] = e / e.sum(-1, keepdims=True)
    return out


def _randomise_norms_and_biases(model: slm.Model, seed: int = 0) -> slm.Model:
    rng = np.random.default_rng(seed)
    for name, value in model.params.items():
        if name.endswith((".weight", ".bias")) or ".b_" in name:
            model.params[name] = value + 0.3 * rng.standard_normal(value.shape)
    return model


def _model(seed=0, **kw) -> slm.Model:
    fields = dict(n_vocab=19, n_ctx=10, n_model=12, n_heads=3, n_layers=2, d_ff=20)
    fields.update(kw)
    return _randomise_norms_and_biases(slm.Model.init(slm.Config(**fields), seed=seed), seed)


SPEC_CASES = [
    dict(),
    dict(norm="rms", activation="gelu", bias=True, positions="learned"),
    dict(norm_placement="post", activation="swiglu", positions="rope", causal=False),
    dict(norm_placement="post", norm="rms", bias=True, positions="none", tied=True),
    dict(n_model=16, n_heads=4, n_kv_heads=2, positions="rope", bias=True, rope_scale=2.0, rope_base=100.0),
    dict(n_model=16, n_heads=4, n_kv_heads=1, activation="swiglu", bias=True, causal=False),
]


@pytest.mark.parametrize("kw", SPEC_CASES, ids=[str(i) for i in range(len(SPEC_CASES))])
def test_every_trace_field_matches_the_spec_loop(kw):
    model = _model(**kw)
    tokens = np.array([3, 1, 4, 1, 5, 9, 2, 6])
    trace, ref = model.forward(tokens), spec_forward(model, tokens)
    np.testing.assert_array_equal(trace.tokens, tokens)
    for name in ("tok", "pos", "x", "final", "logits", "probs"):
        np.testing.assert_allclose(getattr(trace, name), ref[name], rtol=1e-10, atol=1e-12, err_msg=name)
    for layer, expected in zip(trace.layers, ref["layers"], strict=True):
        for name, value in expected.items():
            np.testing.assert_allclose(getattr(layer, name), value, rtol=1e-10, atol=1e-12, err_msg=name)


def test_shapes_unbatched_and_batched():
    cfg = slm.Config(n_vocab=19, n_ctx=10, n_model=12, n_heads=6, n_kv_heads=2, n_layers=3, d_ff=20)
    model = slm.Model.init(cfg)
    t, d, h, g, k, f, v = 7, 12, 6, 2, 2, 20, 19
    for lead in ((), (4,)):
        tr = model.forward(np.zeros(lead + (t,), dtype=int))
        expect = {"tokens": (t,), "tok": (t, d), "pos": (t, d), "x": (t, d), "final": (t, d), "logits": (t, v),
                  "probs": (t, v), "attention": (3, h, t, t)}
        for name, shape in expect.items():
            assert getattr(tr, name).shape == lead + shape, name
        layer_expect = {"attn_in": (t, d), "q": (h, t, k), "k": (g, t, k), "v": (g, t, k), "scores": (h, t, t),
                        "attention": (h, t, t), "head_out": (h, t, d), "attn_out": (t, d), "h": (t, d),
                        "ffn_in": (t, d), "ff_pre": (t, f), "ff_act": (t, f), "ff_out": (t, d), "y": (t, d)}
        assert len(tr.layers) == 3
        for name, shape in layer_expect.items():
            assert getattr(tr.layers[1], name).shape == lead + shape, name


@pytest.mark.parametrize("causal", [True, False])
def test_masks_and_attention_rows(causal):
    model = _model(causal=causal, bias=True)
    tr = model.forward(np.array([1, 2, 3, 4, 5, 6]))
    upper = np.triu(np.ones((6, 6), dtype=bool), 1)
    for layer in tr.layers:
        np.testing.assert_allclose(layer.attention.sum(-1), 1.0, rtol=1e-14)
        if causal:
            assert np.all(layer.attention[:, upper] == 0.0)
            assert np.all(np.isneginf(layer.scores[:, upper]))
            assert np.all(np.isfinite(layer.scores[:, ~upper]))
        else:
            assert np.all(layer.attention > 0.0) and np.all(np.isfinite(layer.scores))
    np.testing.assert_allclose(tr.probs.sum(-1), 1.0, rtol=1e-14)
    np.testing.assert_array_equal(tr.attention, np.stack([layer.attention for layer in tr.layers]))


def test_causality_future_token_does_not_change_earlier_rows():
    model = _model(positions="rope", activation="swiglu", bias=True)
    a, b = model.forward(np.array([1, 2, 3, 4, 5])), model.forward(np.array([1, 2, 3, 4, 17]))
    for ta, tb in ((a, b), (a.layers[1], b.layers[1])):
        for name in ("x", "h", "y", "logits", "probs", "attn_out", "ff_out"):
            if hasattr(ta, name):
                np.testing.assert_array_equal(getattr(ta, name)[:4], getattr(tb, name)[:4], err_msg=name)
                assert not np.allclose(getattr(ta, name)[4], getattr(tb, name)[4]), name


def test_non_causal_future_token_changes_earlier_rows():
    model = _model(causal=False)
    a, b = model.forward(np.array([1, 2, 3, 4, 5])), model.forward(np.array([1, 2, 3, 4, 17]))
    assert not np.allclose(a.logits[0], b.logits[0])


def test_sinusoidal_positions_are_added_unscaled_and_learned_rows_are_pos_emb():
    model = _model(positions="sinusoidal")
    tr = model.forward(np.array([0, 5, 5]))
    np.testing.assert_array_equal(tr.tok, model.params["tok_emb"][[0, 5, 5]])
    np.testing.assert_allclose(tr.pos[1, :4], [math.sin(1), math.cos(1), math.sin(10 ** (-2 / 3)),
                                               math.cos(10 ** (-2 / 3))], rtol=1e-12)
    np.testing.assert_allclose(tr.x, tr.tok + tr.pos, rtol=0, atol=0)
    assert not np.allclose(tr.x[1], tr.x[2])  # same token, different positions
    learned = _model(positions="learned")
    tr = learned.forward(np.array([0, 5, 5]))
    np.testing.assert_array_equal(tr.pos, learned.params["pos_emb"][:3])
    for positions in ("rope", "none"):
        tr = _model(positions=positions).forward(np.array([0, 5, 5]))
        np.testing.assert_array_equal(tr.pos, 0.0)
        np.testing.assert_array_equal(tr.x[1], tr.x[2])


def test_positions_none_is_order_blind_without_a_mask():
    model = _model(positions="none", causal=False)
    a, b = model.forward(np.array([1, 2, 3])), model.forward(np.array([3, 2, 1]))
    np.testing.assert_allclose(a.logits[::-1], b.logits, rtol=1e-12)


def test_rope_scores_depend_only_on_the_gap():
    model = _model(positions="rope", causal=False, n_layers=1)
    tr = model.forward(np.full(9, 7))  # the same token everywhere: only positions differ
    s = tr.layers[0].scores
    for gap in range(-8, 9):
        diagonal = np.diagonal(s, offset=-gap, axis1=-2, axis2=-1)  # entries (r, r - gap)
        np.testing.assert_allclose(diagonal, diagonal[..., :1] * np.ones_like(diagonal), rtol=1e-10, atol=1e-12)
    assert not np.allclose(s[:, 3, 2], s[:, 3, 0])


def test_rope_scale_above_one_slows_the_rotation():
    slow = _model(positions="rope", rope_scale=2.0).forward(np.array([4, 4, 4, 4, 4]))
    fast = _model(positions="rope").forward(np.array([4, 4, 4, 4, 4]))
    # position 4 at scale 2 is rotated like position 2 at scale 1
    np.testing.assert_allclose(slow.layers[0].q[:, 4], fast.layers[0].q[:, 2], rtol=1e-12)
    np.testing.assert_allclose(slow.layers[0].k[:, 2], fast.layers[0].k[:, 1], rtol=1e-12)


@pytest.mark.parametrize("g", [1, 2])
@pytest.mark.parametrize("positions", ["rope", "sinusoidal"])
def test_grouped_query_equals_multi_head_with_duplicated_kv_weights(g, positions):
    h, k = 4, 4
    gqa = _model(n_model=16, n_heads=h, n_kv_heads=g, bias=True, positions=positions, causal=False)
    cfg = gqa.cfg.replace(n_kv_heads=h)
    params = dict(gqa.params)
    for i in range(cfg.n_layers):
        for w in ("w_k", "w_v", "b_k", "b_v"):
            name = f"blocks.{i}.attn.{w}"
            blocks = [gqa.params[name][(j // (h // g)) * k:(j // (h // g) + 1) * k] for j in range(h)]
            params[name] = np.concatenate(blocks)
    mha = slm.Model(cfg, params)
    tokens = np.array([2, 7, 1, 8, 2, 8])
    a, b = gqa.forward(tokens), mha.forward(tokens)
    np.testing.assert_allclose(a.logits, b.logits, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(a.attention, b.attention, rtol=1e-12, atol=1e-15)
    assert a.layers[0].k.shape[0] == g and b.layers[0].k.shape[0] == h


def test_tied_unembedding_is_the_token_embedding():
    model = _model(tied=True)
    tr = model.forward(np.array([1, 2, 3]))
    assert "unembed" not in model.params
    np.testing.assert_allclose(tr.logits, tr.final @ model.params["tok_emb"].T, rtol=1e-14)


def test_post_norm_has_no_final_norm():
    model = _model(norm_placement="post")
    tr = model.forward(np.array([1, 2, 3]))
    assert "norm_f.weight" not in model.params
    np.testing.assert_array_equal(tr.final, tr.layers[-1].y)


@pytest.mark.parametrize("causal", [True, False])
def test_padding_rows_equal_unbatched_runs(causal):
    model = _model(causal=causal, positions="rope", bias=True)
    seqs = [[1, 2, 3, 4, 5, 6], [7, 8, 9], [10]]
    padded = np.array([s + [0] * (6 - len(s)) for s in seqs])
    lengths = np.array([len(s) for s in seqs])
    tr = model.forward(padded, lengths=lengths)
    assert tr.logits.shape == (3, 6, 19) and tr.attention.shape == (3, 2, 3, 6, 6)
    for b, seq in enumerate(seqs):
        n = len(seq)
        single = model.forward(np.array(seq))
        np.testing.assert_allclose(tr.logits[b, :n], single.logits, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(tr.layers[1].y[b, :n], single.layers[1].y, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(tr.attention[b, :, :, :n, :n], single.attention, rtol=1e-12, atol=1e-14)
        assert np.all(tr.attention[b, ..., n:] == 0.0)  # padded keys never attended, from any row
    # and the padding tokens' values do not matter
    other = padded.copy()
    other[1, 3:] = 18
    np.testing.assert_array_equal(model.forward(other, lengths=lengths).logits[1, :3], tr.logits[1, :3])


def test_batch_without_lengths_equals_each_row():
    model = _model()
    batch = np.array([[1, 2, 3, 4], [4, 3, 2, 1]])
    tr = model.forward(batch)
    for b in range(2):
        np.testing.assert_allclose(tr.logits[b], model.forward(batch[b]).logits, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kw", SPEC_CASES, ids=[str(i) for i in range(len(SPEC_CASES))])
def test_output_positions_are_those_rows_of_the_full_logits(kw):
    model = _model(**kw)
    tokens = np.array([[3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8, 1, 8]])
    full = model.forward(tokens, lengths=[8, 5])
    part = model.forward(tokens, lengths=[8, 5], output_positions=[-1, 2, 4])
    assert part.logits.shape == (2, 3, 19)
    np.testing.assert_array_equal(part.output_positions, [7, 2, 4])
    np.testing.assert_allclose(part.logits, full.logits[:, [7, 2, 4]], rtol=0, atol=1e-12)
    np.testing.assert_allclose(part.probs, full.probs[:, [7, 2, 4]], rtol=0, atol=1e-12)
    # everything before the unembedding is the full trace's, at every row
    np.testing.assert_array_equal(part.final, full.final)
    np.testing.assert_array_equal(part.layers[-1].attention, full.layers[-1].attention)
    assert part.logit_row(4) == 2 and part.logit_row(-1) == 0 and full.logit_row(-1) == 7
    # the same argument as run_with_hooks's, with the same output
    np.testing.assert_allclose(model.run_with_hooks(tokens, lengths=[8, 5], output_positions=[-1, 2, 4]), part.logits,
                               rtol=0, atol=1e-12)
    with pytest.raises(KeyError, match="output_positions"):
        part.logit_row(3)
    one = model.forward(tokens[0], output_positions=5)
    np.testing.assert_allclose(one.logits, full.logits[0, [5]], rtol=0, atol=1e-12)


def test_output_positions_with_a_cache_count_the_rows_run_now():
    model = _model(positions="rope")
    cache = slm.KVCache(model.cfg.n_layers)
    model.forward(np.array([1, 2, 3]), cache=cache, output_positions=-1)
    part = model.forward(np.array([4, 5]), cache=cache, output_positions=0)
    full = model.forward(np.array([1, 2, 3, 4, 5]))
    np.testing.assert_allclose(part.logits, full.logits[[3]], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("bad", [[], [8], [-9], [[1]], 1.5])
def test_bad_output_positions_are_value_errors(bad):
    with pytest.raises(ValueError, match="output_positions"):
        _model().forward(np.arange(8), output_positions=bad)


def test_generation_unembeds_only_the_last_row(monkeypatch):
    shapes, unembedded = [], []

    class Counting(slm.Model):
        def next_logits(self, tokens, *args, **kwargs):
            shapes.append(np.shape(tokens)[-1])
            return super().next_logits(tokens, *args, **kwargs)

    base = _model(positions="rope")
    model = Counting(base.cfg, base.params)
    linear = slm.layers.linear

    def counting_linear(x, w):
        if w.shape[-1] == model.cfg.n_vocab:
            unembedded.append(int(np.prod(x.shape[:-1])))
        return linear(x, w)

    monkeypatch.setattr(slm.layers, "linear", counting_linear)
    prompt = [1, 2, 3, 4]
    cached = [step.token for step in slm.generate(model, prompt, 6, temperature=0, use_cache=True)]
    monkeypatch.undo()
    assert shapes[0] == 4 and unembedded == [1] * 6  # the prompt's 4 rows, 1 unembedded, ...
    assert shapes[1:] == [1] * 5  # then the new token alone, and no pass after the last token
    # and the tokens are those of full recomputation with every row's logits
    sequence = list(prompt)
    for _ in range(6):
        sequence.append(int(np.argmax(base.forward(np.array(sequence)).logits[-1])))
    assert cached == sequence[4:]


def test_float32_model_stays_float32():
    model = slm.Model.init(slm.Config(n_vocab=9, n_ctx=6, n_model=8, n_heads=2, activation="gelu",
                                      positions="rope", bias=True), dtype=np.float32)
    tr = model.forward(np.array([1, 2, 3]))
    for name in ("tok", "x", "final", "logits", "probs"):
        assert getattr(tr, name).dtype == np.float32, name
    for name, value in vars(tr.layers[0]).items():
        assert value.dtype == np.float32, name


# ---- input checks ----


@pytest.mark.parametrize(
    "tokens,match",
    [(np.array([1, 19]), "tokens"), (np.array([-1]), "tokens"), (np.zeros((2, 2, 2), int), "tokens"),
     (np.array([], dtype=int), "tokens"), (np.array([0.5]), "tokens"), (np.arange(11), "n_ctx")],
)
def test_bad_tokens_are_value_errors(tokens, match):
    with pytest.raises(ValueError, match=match):
        _model().forward(tokens)


def test_bad_lengths_are_value_errors():
    model = _model()
    with pytest.raises(ValueError, match="lengths"):
        model.forward(np.array([[1, 2], [3, 4]]), lengths=np.array([3, 1]))
    with pytest.raises(ValueError, match="lengths"):
        model.forward(np.array([[1, 2], [3, 4]]), lengths=np.array([0, 1]))
    with pytest.raises(ValueError, match="lengths"):
        model.forward(np.array([1, 2]), lengths=np.array([2]))
    with pytest.raises(ValueError, match="lengths"):
        model.forward(np.array([[1, 2], [3, 4]]), lengths=np.array([2]))


def test_list_tokens_and_integral_floats_are_accepted():
    model = _model()
    np.testing.assert_array_equal(model.forward([1, 2]).logits, model.forward(np.array([1.0, 2.0])).logits)


# ---- save and load ----


def _assert_same_model(a: slm.Model, b: slm.Model) -> None:
    assert a.cfg == b.cfg and a.meta == b.meta
    assert set(a.params) == set(b.params)
    for name in a.params:
        np.testing.assert_array_equal(a.params[name], b.params[name])
        assert a.params[name].dtype == b.params[name].dtype


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_save_load_round_trip_path_bytes_and_file(tmp_path, dtype):
    cfg = slm.Config(n_vocab=9, n_ctx=6, n_model=8, n_heads=4, n_kv_heads=2, positions="learned", bias=True,
                     activation="swiglu", rope_scale=3.0)
    model = slm.Model(cfg, slm.init_params(cfg, 3, dtype), meta={"vocab": list("abcdefghi"), "note": "x"})
    path = tmp_path / "m.npz"
    model.save(path)
    _assert_same_model(model, slm.Model.load(path))
    _assert_same_model(model, slm.Model.load(str(path)))
    _assert_same_model(model, slm.Model.load(path.read_bytes()))
    buffer = io.BytesIO()
    model.save(buffer)
    _assert_same_model(model, slm.Model.load(buffer.getvalue()))
    buffer.seek(0)
    _assert_same_model(model, slm.Model.load(buffer))
    tokens = np.array([1, 2, 3])
    np.testing.assert_array_equal(slm.Model.load(path).forward(tokens).logits, model.forward(tokens).logits)


def _npz_bytes(arrays: dict) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def test_load_names_missing_extra_and_misshaped_arrays():
    cfg = slm.Config(n_vocab=9, n_ctx=6, n_model=8, n_heads=2)
    arrays = {**slm.init_params(cfg), "__config__": np.array(cfg.to_json())}
    slm.Model.load(_npz_bytes(arrays))
    missing = {n: a for n, a in arrays.items() if n != "blocks.0.ffn.w_out"}
    with pytest.raises(ValueError, match=r"blocks\.0\.ffn\.w_out"):
        slm.Model.load(_npz_bytes(missing))
    with pytest.raises(ValueError, match="pos_emb"):
        slm.Model.load(_npz_bytes({**arrays, "pos_emb": np.zeros((6, 8))}))
    with pytest.raises(ValueError, match=r"blocks\.0\.attn\.w_q"):
        slm.Model.load(_npz_bytes({**arrays, "blocks.0.attn.w_q": np.zeros((8, 9))}))
    with pytest.raises(ValueError, match="__config__"):
        slm.Model.load(_npz_bytes({n: a for n, a in arrays.items() if n != "__config__"}))
    with pytest.raises(ValueError):
        slm.Model.load(b"definitely not a zip file")


def test_model_constructor_checks_params():
    cfg = slm.Config(n_vocab=9, n_ctx=6, n_model=8, n_heads=2)
    params = slm.init_params(cfg)
    del params["norm_f.bias"]
    with pytest.raises(ValueError, match="norm_f.bias"):
        slm.Model(cfg, params)


def test_all_option_combinations_run():
    for placement, norm, act, positions in itertools.product(("pre", "post"), ("layer", "rms"),
                                                             ("relu", "gelu", "swiglu"),
                                                             ("sinusoidal", "learned", "rope", "none")):
        model = _model(norm_placement=placement, norm=norm, activation=act, positions=positions)
        probs = model.forward(np.array([1, 2, 3])).probs
        np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-12)
