"""slm.interventions against a forward pass written here by hand (per head, per position, from the parameter
dictionary), in which an ablated head's output or a patched residual row is replaced directly. The last tests
feed deliberately wrong implementations to the same checks and show that they fail."""

from __future__ import annotations

import numpy as np
import pytest

import slm
from slm import interventions as iv
from slm.layers import sinusoidal_positions


def _model(seed: int = 0) -> slm.Model:
    cfg = slm.Config(n_vocab=20, n_ctx=16, n_model=16, n_heads=4, n_layers=3, d_ff=32)
    model = slm.Model.init(cfg, seed)
    rng = np.random.default_rng(seed)
    for name, value in model.params.items():  # norms that are not the identity
        if name.endswith((".weight", ".bias")):
            model.params[name] = value + 0.3 * rng.standard_normal(value.shape)
    return model


def _norm(x, weight, bias, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps) * weight + bias


def forward_by_hand(model: slm.Model, ids, replace_head=None, replace_row=None):
    """Logits (T, V) of a pre-norm, layer-norm, ReLU, sinusoidal, bias-free model, computed head by head.

    replace_head: {(layer, head): (T, d) array} used instead of that head's output;
    replace_row: {(layer, position): (d,) array} used instead of that row of the residual entering the block.
    Returns (logits, rows entering each block, head outputs {(layer, head): (T, d)})."""
    p, cfg = model.params, model.cfg
    n_pos, k = len(ids), cfg.n_model // cfg.n_heads
    x = p["tok_emb"][ids] + sinusoidal_positions(cfg.n_ctx, cfg.n_model)[:n_pos]
    inputs, outs = [], {}
    for i in range(cfg.n_layers):
        x = x.copy()
        for (layer, pos), row in (replace_row or {}).items():
            if layer == i:
                x[pos] = row
        inputs.append(x)
        a = _norm(x, p[f"blocks.{i}.norm1.weight"], p[f"blocks.{i}.norm1.bias"])
        q, kk, v = (a @ p[f"blocks.{i}.attn.w_{n}"].T for n in "qkv")
        written = np.zeros_like(x)
        for j in range(cfg.n_heads):
            cols = slice(j * k, (j + 1) * k)
            scores = q[:, cols] @ kk[:, cols].T / np.sqrt(k)
            scores[np.triu_indices(n_pos, 1)] = -np.inf
            w = np.exp(scores - scores.max(-1, keepdims=True))
            w /= w.sum(-1, keepdims=True)
            out = (w @ v[:, cols]) @ p[f"blocks.{i}.attn.w_o"][:, cols].T
            out = (replace_head or {}).get((i, j), out)
            outs[i, j] = out
            written = written + out
        h = x + written
        f = _norm(h, p[f"blocks.{i}.norm2.weight"], p[f"blocks.{i}.norm2.bias"])
        x = h + np.maximum(f @ p[f"blocks.{i}.ffn.w_in"], 0) @ p[f"blocks.{i}.ffn.w_out"]
    final = _norm(x, p["norm_f.weight"], p["norm_f.bias"])
    return final @ p["unembed"], inputs, outs


CLEAN = np.array([1, 5, 7, 3, 9, 2, 11, 4])
CORRUPT = np.array([1, 5, 8, 3, 9, 2, 12, 4])  # two tokens changed
GOOD, BAD = 6, 13


def test_the_hand_forward_is_the_model_forward():
    model = _model()
    logits, inputs, outs = forward_by_hand(model, CLEAN)
    trace = model.forward(CLEAN)
    np.testing.assert_allclose(logits, trace.logits, atol=1e-10)
    np.testing.assert_allclose(outs[1, 2], trace.layers[1].head_out[2], atol=1e-10)
    for layer, rows in enumerate(iv.block_inputs(trace)):
        np.testing.assert_allclose(rows, inputs[layer], atol=1e-10)


def check_ablation(run_ablated) -> None:
    model = _model()
    means = iv.head_means(model, [CLEAN, CORRUPT, CLEAN[:5]])
    _, _, outs = forward_by_hand(model, CLEAN)
    # the mean write of head (2, 1) over the three prompts, by hand
    by_hand_mean = np.concatenate([forward_by_hand(model, ids)[2][2, 1] for ids in (CLEAN, CORRUPT, CLEAN[:5])])
    np.testing.assert_allclose(means[2, 1], by_hand_mean.mean(0), atol=1e-12)
    for how in ("zero", "mean"):
        for heads in ([(0, 3)], [(1, 0), (2, 1)]):
            replaced = {lh: np.zeros((len(CLEAN), 16)) if how == "zero" else np.tile(means[lh], (len(CLEAN), 1))
                        for lh in heads}
            expected, _, _ = forward_by_hand(model, CLEAN, replace_head=replaced)
            got = run_ablated(model, CLEAN, heads, how, means).logits
            np.testing.assert_allclose(got, expected, atol=1e-10)
            assert not np.allclose(got, model.forward(CLEAN).logits, atol=1e-3)  # the ablation did something


def check_patching(patching) -> None:
    model = _model()
    _, clean_in, clean_outs = forward_by_hand(model, CLEAN)
    corrupt_logits, _, _ = forward_by_hand(model, CORRUPT)
    result = patching(model, CORRUPT, CLEAN, -1, GOOD, BAD)
    assert result.target == pytest.approx(corrupt_logits[-1, GOOD] - corrupt_logits[-1, BAD], abs=1e-10)
    for layer in range(3):
        for pos in range(len(CLEAN)):
            logits, _, _ = forward_by_hand(model, CORRUPT, replace_row={(layer, pos): clean_in[layer][pos]})
            assert result.residual[layer, pos] == pytest.approx(logits[-1, GOOD] - logits[-1, BAD], abs=1e-9)
        for head in range(4):
            logits, _, _ = forward_by_hand(model, CORRUPT, replace_head={(layer, head): clean_outs[layer, head]})
            assert result.heads[layer, head] == pytest.approx(logits[-1, GOOD] - logits[-1, BAD], abs=1e-9)


def test_zero_and_mean_ablation():
    check_ablation(iv.run_ablated)


def test_activation_patching_of_the_residual_and_of_each_head():
    check_patching(iv.activation_patching)


def test_patching_facts():
    model = _model()
    result = iv.activation_patching(model, CORRUPT, CLEAN, -1, GOOD, BAD)
    clean = model.forward(CLEAN)
    source = clean.logits[-1, GOOD] - clean.logits[-1, BAD]
    assert result.source == pytest.approx(source)
    np.testing.assert_allclose(result.residual[:, :2], result.target)  # before the first change: no effect
    rec = result.recovered(result.residual)
    np.testing.assert_allclose(rec, (result.residual - result.target) / (source - result.target))
    assert rec[0, 0] == 0.0
    # patching the changed tokens' rows entering block 0 is running the clean prompt
    both = [("blocks.0.hook_resid_pre", lambda x, hook: np.where(np.isin(np.arange(8), [2, 6])[:, None], clean.x, x))]
    np.testing.assert_allclose(model.forward(CORRUPT, fwd_hooks=both).logits, clean.logits, atol=1e-10)
    # a batched patched run equals single runs, patch by patch
    sites = [iv.Site("resid", 1, 4), iv.Site("head", 2, 3)]
    batched = iv.run_patched(model, CORRUPT, clean, sites)
    for b, site in enumerate(sites):
        single = iv.run_patched(model, CORRUPT, clean, [site])
        np.testing.assert_allclose(batched.logits[b], single.logits[0], atol=1e-10)


def test_bad_arguments_are_clear_errors():
    model = _model()
    with pytest.raises(ValueError, match="same length"):
        iv.activation_patching(model, CORRUPT, CLEAN[:-1], -1, GOOD, BAD)
    with pytest.raises(ValueError, match="no head 4"):
        iv.run_ablated(model, CLEAN, [(0, 4)])
    with pytest.raises(ValueError, match="means"):
        iv.run_ablated(model, CLEAN, [(0, 1)], how="mean")
    with pytest.raises(ValueError, match="how"):
        iv.run_ablated(model, CLEAN, [(0, 1)], how="resample")
    with pytest.raises(ValueError, match="position"):
        iv.activation_patching(model, CORRUPT, CLEAN, 8, GOOD, BAD)
    with pytest.raises(ValueError, match="shape"):
        model.forward(CLEAN, fwd_hooks=[("blocks.0.hook_resid_pre", lambda x, hook: x[:-1])])


def test_hooks_that_return_their_input_change_nothing():
    model = _model()
    points = ("hook_resid_pre", "attn.hook_result")
    same = [(f"blocks.{i}.{point}", lambda v, hook: v) for i in range(3) for point in points]
    np.testing.assert_array_equal(model.forward(CLEAN, fwd_hooks=same).logits, model.forward(CLEAN).logits)


# ---- the checks above reject wrong implementations ----

def test_the_checks_reject_a_wrong_ablation(monkeypatch):
    def ablates_the_next_head(model, tokens, heads, how="zero", means=None):
        return iv.run_ablated(model, tokens, [(layer, (head + 1) % 4) for layer, head in heads], how, means)

    def zeroes_the_attention_sublayer(model, tokens, heads, how="zero", means=None):
        hooks = [(f"blocks.{layer}.attn.hook_result", lambda out, hook: out * 0) for layer, _ in heads]
        return model.forward(tokens, fwd_hooks=hooks)

    for wrong in (ablates_the_next_head, zeroes_the_attention_sublayer):
        with pytest.raises(AssertionError):
            check_ablation(wrong)


def test_the_checks_reject_wrong_patching(monkeypatch):
    # patch the rows leaving block l (its y) instead of the rows entering it
    with monkeypatch.context() as m:
        m.setattr(iv, "block_inputs", lambda trace: [layer.y for layer in trace.layers])
        with pytest.raises(AssertionError):
            check_patching(iv.activation_patching)
    # patch position p - 1 instead of p
    original = iv.patch_hooks

    def shifted(source, sites):
        return original(source, [s._replace(index=s.index - 1) if s.kind == "resid" else s for s in sites])

    with monkeypatch.context() as m:
        m.setattr(iv, "patch_hooks", shifted)
        with pytest.raises(AssertionError):
            check_patching(iv.activation_patching)


@pytest.mark.parametrize("kw", [dict(positions="rope"), dict(positions="rope", n_kv_heads=2, bias=True),
                                dict(norm_placement="post", norm="rms", positions="learned"),
                                dict(causal=False, activation="swiglu"), dict(n_layers=1, activation="gelu")])
@pytest.mark.parametrize("position", [-1, 5])
def test_activation_patching_equals_the_hooked_forward_pass_for_every_option(kw, position):
    """activation_patching computes each layer's patches from that layer on and only the metric's row in the last
    block; run_patched runs the whole model with the same hooks. They agree for every architecture switch.
    (Checked to fail: the last block's query row without RoPE, and the last block reading keys past a causal
    row.)"""
    cfg = slm.Config(**{**dict(n_vocab=20, n_ctx=16, n_model=16, n_heads=4, n_layers=2, d_ff=32), **kw})
    model = slm.Model.init(cfg, 3)
    result = iv.activation_patching(model, CORRUPT, CLEAN, position, GOOD, BAD)
    clean = model.forward(CLEAN)
    sites = [iv.Site("resid", layer, p) for layer in range(cfg.n_layers) for p in range(8)]
    sites += [iv.Site("head", layer, h) for layer in range(cfg.n_layers) for h in range(4)]
    full = iv.logit_diff(iv.run_patched(model, CORRUPT, clean, sites), position, GOOD, BAD)
    for site, value in zip(sites, full, strict=True):
        got = (result.residual if site.kind == "resid" else result.heads)[site.layer, site.index]
        assert got == pytest.approx(value, abs=1e-9), site


def test_a_patching_job_in_steps_fills_in_the_same_grid():
    """PatchingJob with a deadline of 0 runs one patch a step: the grid fills in (NaN until a cell has run, the
    progress rising by each patch's blocks) and ends equal to the whole grid, which runs each layer as one batch."""
    cfg = slm.Config(n_vocab=20, n_ctx=16, n_model=16, n_heads=4, n_layers=3, d_ff=32, positions="rope")
    model = slm.Model.init(cfg, 5)
    whole = iv.activation_patching(model, CORRUPT, CLEAN, -1, GOOD, BAD)
    job = iv.PatchingJob(model, CORRUPT, CLEAN, -1, GOOD, BAD)
    n_cells = whole.residual.size + whole.heads.size
    missing = np.isnan(job.result.residual).sum() + np.isnan(job.result.heads).sum()
    assert 0 < missing < n_cells and job.done == 0 and not job.finished  # cells before the change need no run
    steps, before = 0, -1
    while not job.finished:
        job.run_for(0)
        steps += 1
        now = np.isnan(job.result.residual).sum() + np.isnan(job.result.heads).sum()
        assert now == missing - steps and job.done > before
        before = job.done
    assert steps == missing and job.done == job.total
    np.testing.assert_allclose(job.result.residual, whole.residual, rtol=0, atol=1e-12)
    np.testing.assert_allclose(job.result.heads, whole.heads, rtol=0, atol=1e-12)
