"""The lesson model: `<start> the cat dog lay was tired`, four numbers per token, two heads."""

from __future__ import annotations

import numpy as np

import slm

# Per trace array: the axis along which rows are positions.
TRACE_ROWS = {"tokens": 0, "tok": 0, "pos": 0, "x": 0, "final": 0, "logits": 0, "probs": 0}
LAYER_ROWS = {"attn_in": 0, "q": 1, "k": 1, "v": 1, "scores": 1, "attention": 1, "head_out": 1, "attn_out": 0,
              "h": 0, "ffn_in": 0, "ff_pre": 0, "ff_act": 0, "ff_out": 0, "y": 0}


def test_lesson_model_shape_and_vocabulary():
    model = slm.CausalLanguageModel(n_vocab=7, n_model=4, n_heads=2)
    assert isinstance(model, slm.Model)
    cfg = model.cfg
    assert (cfg.n_vocab, cfg.n_model, cfg.n_heads, cfg.n_layers, cfg.d_ff) == (7, 4, 2, 1, 8)
    assert cfg.causal and cfg.norm_placement == "pre"
    assert slm.LESSON_VOCAB == ("<start>", "the", "cat", "dog", "lay", "was", "tired")
    assert model.meta["vocab"] == list(slm.LESSON_VOCAB)
    assert model.tokenizer.encode("the cat was tired").ids == [1, 2, 5, 6]
    assert slm.tokenizer_for(model).decode([0, 1, 3, 4]) == "<start> the dog lay"


def test_respond_to_returns_a_full_trace():
    trace = slm.CausalLanguageModel(n_vocab=7, n_model=4, n_heads=2).respond_to(np.array([0, 1, 2]))
    assert isinstance(trace, slm.Trace)
    assert trace.x.shape == (3, 4) and trace.logits.shape == (3, 7)
    assert trace.attention.shape == (1, 2, 3, 3)
    assert trace.layers[0].q.shape == (2, 3, 2) and trace.layers[0].ff_act.shape == (3, 8)
    np.testing.assert_allclose(trace.probs.sum(-1), 1.0, rtol=1e-14)
    assert trace.attention[0, :, 0, 0].tolist() == [1.0, 1.0]  # the first token can only see itself


def test_changing_the_last_token_changes_only_the_last_row():
    model = slm.CausalLanguageModel(n_vocab=7, n_model=4, n_heads=2)
    cat, dog = model.respond_to(np.array([0, 1, 2])), model.respond_to(np.array([0, 1, 3]))
    # pos is the position table: it does not depend on the tokens at all
    np.testing.assert_array_equal(cat.pos, dog.pos)
    pairs = [(getattr(cat, n), getattr(dog, n), axis) for n, axis in TRACE_ROWS.items() if n != "pos"]
    pairs += [(getattr(cat.layers[0], n), getattr(dog.layers[0], n), axis) for n, axis in LAYER_ROWS.items()]
    pairs.append((cat.attention, dog.attention, 2))
    assert {n for n in vars(cat.layers[0])} == set(LAYER_ROWS)  # every trace array is covered
    for a, b, axis in pairs:
        earlier = [slice(None)] * axis + [slice(0, 2)]
        last = [slice(None)] * axis + [2]
        np.testing.assert_array_equal(a[tuple(earlier)], b[tuple(earlier)])  # bit for bit
        assert not np.array_equal(a[tuple(last)], b[tuple(last)])


def test_same_seed_same_weights_and_overrides_redraw():
    a, b = slm.CausalLanguageModel(), slm.CausalLanguageModel()
    for name in a.params:
        np.testing.assert_array_equal(a.params[name], b.params[name])
    rms = slm.CausalLanguageModel(norm="rms", positions="rope", n_kv_heads=1, causal=False)
    assert rms.cfg.norm == "rms" and rms.cfg.n_kv_heads == 1 and not rms.cfg.causal
    assert rms.params["blocks.0.attn.w_k"].shape == (2, 4)
    assert rms.respond_to([0, 1, 2]).attention.shape == (1, 2, 3, 3)
    other = slm.CausalLanguageModel(n_vocab=10)
    assert other.meta["vocab"][0] == "t0" and other.cfg.n_vocab == 10
