"""slm.generate and the KV cache: greedy decoding, seeds, sampling filters, cache == recompute, sliding window."""

from __future__ import annotations

import math

import numpy as np
import pytest

import slm


def _model(**kw) -> slm.Model:
    fields = dict(n_vocab=13, n_ctx=12, n_model=16, n_heads=4, n_layers=2, d_ff=24)
    fields.update(kw)
    return slm.Model.init(slm.Config(**fields), seed=2)


def _full_logits(model: slm.Model, seq: list[int]) -> np.ndarray:
    """Next-token logits from a full forward of the window the model can see."""
    return model.forward(np.array(seq[-model.cfg.n_ctx:])).logits[-1]


# ---- the cache ----


@pytest.mark.parametrize("kw", [dict(), dict(positions="rope", n_kv_heads=2, bias=True),
                                dict(positions="learned", norm_placement="post", activation="swiglu"),
                                dict(n_kv_heads=1, norm="rms", activation="gelu")])
def test_cache_logits_equal_full_recomputation_at_every_step(kw):
    model = _model(**kw)
    seq = [1, 5, 2]
    cache = slm.KVCache(model.cfg.n_layers)
    trace = model.forward(np.array(seq), cache=cache)
    np.testing.assert_allclose(trace.logits, model.forward(np.array(seq)).logits, rtol=1e-12, atol=1e-12)
    rng = np.random.default_rng(0)
    for _ in range(model.cfg.n_ctx - len(seq)):
        seq.append(int(rng.integers(model.cfg.n_vocab)))
        step = model.forward(np.array(seq[-1:]), cache=cache)
        full = model.forward(np.array(seq))
        assert cache.length == len(seq)
        np.testing.assert_allclose(step.logits[-1], full.logits[-1], rtol=1e-12, atol=1e-12)
        # the step's keys are the cached keys plus its own: equal to the full run's keys
        np.testing.assert_allclose(step.layers[1].k, full.layers[1].k, rtol=1e-12, atol=1e-12)
        assert step.layers[0].attention.shape == (4, 1, len(seq))
        np.testing.assert_array_equal(step.positions, [len(seq) - 1])
    with pytest.raises(ValueError, match="n_ctx"):
        model.forward(np.array([1]), cache=cache)


def test_a_cache_holds_a_batch_of_one_length_and_is_continued_with_that_batch():
    model = _model(positions="rope", n_kv_heads=2)
    rows = np.array([[1, 2, 3], [4, 5, 6]])
    cache = slm.KVCache(model.cfg.n_layers)
    model.forward(rows, cache=cache)
    step = model.forward(np.array([[7], [8]]), cache=cache)
    for b, more in enumerate((7, 8)):  # each row as if run alone, without a cache
        full = model.forward(np.array([*rows[b], more]))
        np.testing.assert_allclose(step.logits[b, -1], full.logits[-1], rtol=1e-12, atol=1e-12)
    for tokens in (np.array([9]), np.array([[9], [9], [9]])):  # another batch cannot continue it
        with pytest.raises(ValueError, match="a batch of 2"):
            model.forward(tokens, cache=cache)
    single = slm.KVCache(model.cfg.n_layers)
    model.forward(np.array([1, 2]), cache=single)
    with pytest.raises(ValueError, match="one sequence"):
        model.forward(np.array([[3]]), cache=single)


@pytest.mark.parametrize("kw", [dict(positions="rope", n_kv_heads=2), dict(norm_placement="post"),
                                dict(parallel_residual=True, positions="rope", bias=True)])
def test_next_logits_are_the_last_rows_logits_of_forward_with_and_without_a_cache(kw):
    model = _model(**kw)
    rows = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    np.testing.assert_allclose(model.next_logits(rows[0]), model.forward(rows[0]).logits[-1], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(model.next_logits(rows), model.forward(rows).logits[:, -1], rtol=1e-12, atol=1e-12)
    cache, alone = slm.KVCache(model.cfg.n_layers), slm.KVCache(model.cfg.n_layers)
    model.next_logits(rows, cache)
    model.next_logits(rows[1], alone)
    assert cache.length == alone.length == 4
    longer = np.concatenate([rows, [[9], [10]]], axis=1)
    np.testing.assert_allclose(model.next_logits(longer[:, -1:], cache), model.forward(longer).logits[:, -1],
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(model.next_logits(longer[1, -1:], alone), model.forward(longer[1]).logits[-1],
                               rtol=1e-12, atol=1e-12)


def test_generations_one_product_of_the_heads_equals_their_writes_added_up():
    """next_logits adds the heads' writes in one product; a hook on hook_result gets them one by one (per head),
    and both give the logits forward() gives, step after step of a growing cache."""
    model = _model(positions="rope", n_kv_heads=2)
    seen = []
    reading = [("blocks.1.attn.hook_result", lambda value, hook: seen.append(value.shape))]
    ids = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]
    fused, per_head = slm.KVCache(model.cfg.n_layers), slm.KVCache(model.cfg.n_layers)
    for t in range(3, len(ids) + 1):
        new = ids[:t] if t == 3 else ids[t - 1:t]
        a = model.next_logits(new, fused)
        b = model.next_logits(new, per_head, reading)
        full = model.forward(np.array(ids[:t])).logits[-1]
        np.testing.assert_allclose(a, full, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(b, full, rtol=1e-12, atol=1e-12)
    assert seen[-1] == (1, model.cfg.n_heads, model.cfg.n_model)  # the last row, per head (TransformerLens's order)


def test_cache_rejects_padding_and_non_causal_models():
    model = _model()
    with pytest.raises(ValueError, match="lengths"):
        model.forward(np.array([[1, 2]]), lengths=np.array([2]), cache=slm.KVCache(2))
    with pytest.raises(ValueError, match="causal"):
        _model(causal=False).forward(np.array([1, 2]), cache=slm.KVCache(2))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_generate_with_cache_equals_without(causal, temperature):
    model = _model(causal=causal, positions="rope")
    kwargs = dict(max_new_tokens=15, temperature=temperature, seed=11)  # 3 + 15 > n_ctx: the window slides
    a = list(slm.generate(model, [1, 2, 3], **kwargs))
    b = list(slm.generate(model, [1, 2, 3], use_cache=False, **kwargs))
    assert [s.token for s in a] == [s.token for s in b]
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(x.probs, y.probs, rtol=1e-12, atol=1e-14)


# ---- decoding ----


def test_greedy_is_the_argmax_of_a_full_recomputation():
    model = _model()
    seq = [0, 4]
    steps = list(slm.generate(model, seq, max_new_tokens=8, temperature=0))
    assert len(steps) == 8
    for step in steps:
        logits = _full_logits(model, seq)
        assert step.token == int(np.argmax(logits))
        expected = np.exp(logits - logits.max())
        expected /= expected.sum()
        np.testing.assert_allclose(step.probs, expected, rtol=1e-12, atol=1e-15)
        assert step.prob == pytest.approx(expected[step.token], rel=1e-12)
        np.testing.assert_array_equal(step.sampled_from, np.eye(13)[step.token])
        seq.append(step.token)


def test_window_slides_past_n_ctx():
    model = _model(n_ctx=5, positions="learned")
    seq = [1, 2, 3, 4, 5, 6, 7]  # the prompt alone is longer than n_ctx
    for step in slm.generate(model, seq, max_new_tokens=9, temperature=0.7, seed=3):
        logits = _full_logits(model, seq)
        expected = np.exp(logits - logits.max())
        np.testing.assert_allclose(step.probs, expected / expected.sum(), rtol=1e-12, atol=1e-15)
        seq.append(step.token)
    assert len(seq) == 16


def test_seed_reproducible_and_seed_matters():
    model = _model()
    run = lambda seed: [s.token for s in slm.generate(model, [0], 10, temperature=1.5, seed=seed)]  # noqa: E731
    assert run(5) == run(5)
    assert len({tuple(run(seed)) for seed in range(6)}) > 1


def test_samples_follow_the_distribution():
    model = _model(n_vocab=5)
    probs = next(slm.generate(model, [1, 2], 1, temperature=0)).probs
    n = 3000
    counts = np.bincount([next(slm.generate(model, [1, 2], 1, seed=s)).token for s in range(n)], minlength=5)
    sigma = np.sqrt(n * probs * (1 - probs))
    assert np.all(np.abs(counts - n * probs) < 5 * sigma + 1)


def test_stop_ids_end_generation_after_the_stop_token():
    model = _model()
    first = next(slm.generate(model, [3], 1, temperature=0)).token
    steps = list(slm.generate(model, [3], 10, temperature=0, stop_ids=[first]))
    assert [s.token for s in steps] == [first]
    assert list(slm.generate(model, [3], 0)) == []


@pytest.mark.parametrize("n_ctx", [12, 6])  # 6: the window slides after two new tokens
def test_generate_batch_gives_each_prompt_what_generate_gives_it_alone(n_ctx):
    model = _model(positions="rope", n_ctx=n_ctx)
    prompts = [[1, 2, 3, 4], [5, 6, 7, 8], [1, 2, 3, 4]]
    kwargs = dict(max_new_tokens=7, temperature=1.3, top_k=6, seed=4)
    alone = [list(slm.generate(model, p, **kwargs)) for p in prompts]
    rows = list(zip(*slm.generate_batch(model, prompts, **kwargs), strict=True))
    for got, want in zip(rows, alone, strict=True):
        assert [s.token for s in got] == [s.token for s in want]
        for x, y in zip(got, want, strict=True):
            np.testing.assert_allclose(x.probs, y.probs, rtol=1e-10, atol=1e-14)
    with pytest.raises(ValueError, match="one length"):
        list(slm.generate_batch(model, [[1, 2], [3]], 2))


def test_generate_batch_goes_on_after_one_prompt_stops_and_its_hooks_see_the_batch():
    model = _model()
    first = next(slm.generate(model, [3], 1, temperature=0)).token
    other = next(p for p in range(13) if first not in [s.token for s in slm.generate(model, [p], 5, temperature=0)])
    seen = []

    def hook(value, point):
        seen.append(value.shape[0])

    steps = list(slm.generate_batch(model, [[3], [other]], 5, temperature=0, stop_ids=[first],
                                    fwd_hooks=[("blocks.0.hook_resid_post", hook)]))
    assert steps[0][0].token == first and all(s[0] is None for s in steps[1:]) and len(steps) == 5
    assert [s[1].token for s in steps] == [s.token for s in slm.generate(model, [other], 5, temperature=0,
                                                                          stop_ids=[first])]
    assert set(seen) == {2}


def test_top_k_and_temperature_in_generate():
    model = _model()
    for step in slm.generate(model, [1], 6, temperature=0.5, top_k=3, seed=0):
        assert np.count_nonzero(step.sampled_from) == 3
        assert step.sampled_from[step.token] > 0
        top3 = np.argsort(step.probs)[-3:]
        sharpened = step.probs[top3] ** 2 / (step.probs[top3] ** 2).sum()  # temperature 1/2 squares the probs
        np.testing.assert_allclose(step.sampled_from[top3], sharpened, rtol=1e-10)


# ---- the sampling distribution by hand ----


def test_sampling_distribution_by_hand():
    logits = np.log(np.array([0.05, 0.5, 0.15, 0.3]))
    np.testing.assert_allclose(slm.sampling_distribution(logits), [0.05, 0.5, 0.15, 0.3], rtol=1e-12)
    np.testing.assert_array_equal(slm.sampling_distribution(logits, temperature=0), [0, 1, 0, 0])
    np.testing.assert_allclose(slm.sampling_distribution(logits, top_k=2), [0, 0.625, 0, 0.375], rtol=1e-12)
    np.testing.assert_allclose(slm.sampling_distribution(logits, top_p=0.7), [0, 0.625, 0, 0.375], rtol=1e-12)
    np.testing.assert_allclose(slm.sampling_distribution(logits, top_p=0.5), [0, 1, 0, 0])
    np.testing.assert_allclose(slm.sampling_distribution(logits, top_p=0.81), [0, 0.5, 0.15, 0.3] / np.float64(0.95),
                               rtol=1e-12)
    hot = slm.sampling_distribution(logits, temperature=2.0)
    root = np.sqrt([0.05, 0.5, 0.15, 0.3])
    np.testing.assert_allclose(hot, root / root.sum(), rtol=1e-12)
    np.testing.assert_allclose(slm.sampling_distribution(logits, top_k=10), [0.05, 0.5, 0.15, 0.3], rtol=1e-12)


@pytest.mark.parametrize(
    "kwargs",
    [dict(max_new_tokens=-1), dict(max_new_tokens=1.5), dict(temperature=-0.1), dict(temperature=math.inf),
     dict(top_k=0), dict(top_p=0.0), dict(top_p=1.5)],
)
def test_bad_settings_are_value_errors(kwargs):
    args = dict(max_new_tokens=3)
    args.update(kwargs)
    with pytest.raises(ValueError):
        list(slm.generate(_model(), [1], **args))


def test_empty_prompt_is_a_value_error():
    with pytest.raises(ValueError, match="token"):
        list(slm.generate(_model(), [], 3))


def test_float32_model_generates():
    model = slm.Model.init(slm.Config(n_vocab=9, n_ctx=6, n_model=8, n_heads=2, activation="gelu"),
                           dtype=np.float32)
    steps = list(slm.generate(model, [1], 8, seed=0))
    assert len(steps) == 8
    for s in steps:
        assert s.probs.dtype == np.float64 and math.isclose(s.probs.sum(), 1.0, rel_tol=1e-12)
