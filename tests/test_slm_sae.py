"""slm.sae: the backward pass, training, planted features, SAELens's file layout, splicing and steering."""

from __future__ import annotations

import json

import numpy as np
import pytest

import slm
from slm import sae as S
from slm.sae import files

# ---- the objective's gradients, against central finite differences (float64) ----


def _numeric_grads(sae: S.SAE, x: np.ndarray, l1: float, eps: float = 1e-6) -> dict[str, np.ndarray]:
    out = {}
    for name, p in sae.params.items():
        g = np.zeros_like(p)
        for i in np.ndindex(p.shape):
            keep = p[i]
            p[i] = keep + eps
            up = S.loss_and_grads(sae, x, l1)[0]
            p[i] = keep - eps
            down = S.loss_and_grads(sae, x, l1)[0]
            p[i] = keep
            g[i] = (up - down) / (2 * eps)
        out[name] = g
    return out


@pytest.mark.parametrize("activation, k, l1, b_dec_in", [("relu", None, 0.3, True), ("relu", None, 0.0, False),
                                                        ("topk", 3, 0.0, True)])
def test_gradients_match_finite_differences(activation, k, l1, b_dec_in):
    rng = np.random.default_rng(1)
    sae = S.SAE.init(5, 9, activation, k, seed=2, dtype=np.float64, b_dec=rng.normal(size=5) * 0.1)
    sae.apply_b_dec_to_input = b_dec_in
    sae.params["b_enc"][:] = rng.normal(size=9) * 0.3
    x = rng.normal(size=(11, 5))
    _, _, grads, f = S.loss_and_grads(sae, x, l1)
    assert 0 < (f > 0).mean() < 1  # some units on, some off: both branches of the activation are checked
    numeric = _numeric_grads(sae, x, l1)
    for name in sae.params:
        np.testing.assert_allclose(grads[name], numeric[name], rtol=1e-5, atol=1e-7, err_msg=name)


def test_aux_loss_gradients_with_the_residual_held_fixed():
    """AuxK's gradient treats the main error e = x − x̂ as a constant (SAELens detaches it): checked against finite
    differences of an independent formula of the total with e frozen at its value before the perturbation."""
    rng = np.random.default_rng(6)
    sae = S.SAE.init(6, 12, "topk", 2, seed=3, dtype=np.float64, b_dec=rng.normal(size=6) * 0.1)
    sae.params["b_enc"][:] = rng.normal(size=12) * 0.3
    x = rng.normal(size=(9, 6))
    dead = np.zeros(12, dtype=bool)
    dead[[1, 4, 5, 7, 10]] = True  # 5 dead, k_aux = d_in // 2 = 3: the 3 largest dead pre-activations per row
    _, parts, grads, _ = S.loss_and_grads(sae, x, 0.0, dead, aux=0.7)
    frozen = x - sae(x)
    assert parts["aux"] > 0

    def total(s: S.SAE) -> float:
        main = S.loss_and_grads(s, x)[0]
        pre = (x - s.b_dec) @ s.W_enc + s.b_enc
        pre_dead = pre[:, dead]
        kth = np.sort(pre_dead, axis=1)[:, -3][:, None]
        acts = np.where(pre_dead >= kth, np.maximum(pre_dead, 0), 0)
        diff = acts @ s.W_dec[dead] - frozen
        return main + 0.7 * min(5 / 3, 1.0) * float((diff**2).sum()) / x.shape[0]

    eps = 1e-6
    for name, p in sae.params.items():
        for i in np.ndindex(p.shape):
            keep = p[i]
            p[i] = keep + eps
            up = total(sae)
            p[i] = keep - eps
            down = total(sae)
            p[i] = keep
            assert grads[name][i] == pytest.approx((up - down) / (2 * eps), rel=1e-5, abs=1e-7), (name, i)


def test_topk_keeps_k_largest_and_relu():
    sae = S.SAE.init(3, 6, "topk", 2, dtype=np.float64)
    pre = np.array([[0.5, -1.0, 2.0, 0.1, 1.5, -3.0], [-0.2, -0.1, -0.5, -0.3, -0.4, 0.05]])
    np.testing.assert_array_equal(sae.activate(pre), [[0, 0, 2.0, 0, 1.5, 0], [0, 0, 0, 0, 0, 0.05]])


# ---- training ----


def _planted(n_rows: int, d: int = 16, n_dirs: int = 32, p: float = 0.06, seed: int = 0):
    """Rows made of sparse positive combinations of n_dirs known unit directions."""
    rng = np.random.default_rng(seed)
    dirs = rng.normal(size=(n_dirs, d))
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    coef = (rng.random((n_rows, n_dirs)) < p) * rng.uniform(1.0, 3.0, size=(n_rows, n_dirs))
    return coef @ dirs + 0.01 * rng.normal(size=(n_rows, d)), dirs


def test_loss_falls_and_the_trainer_runs_in_chunks():
    x, _ = _planted(4000, seed=3)
    settings = S.Settings(d_sae=64, activation="relu", l1=0.5, steps=150, batch_size=256, lr=3e-3, l1_warmup=20)
    trainer = S.Trainer(x, settings)
    first = trainer.step(1)
    chunks = list(trainer.run(50))  # the rest, as a UI would run it
    assert trainer.done and trainer.t == 150 and len(trainer.history) == 150 and len(chunks) == 3
    assert chunks[-1]["loss"] < 0.3 * first["loss"]
    np.testing.assert_allclose(np.linalg.norm(trainer.model_sae.W_dec, axis=1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("activation, lr", [("topk", 1e-2), ("relu", 2e-2)])
def test_planted_features_are_recovered(activation, lr):
    x, dirs = _planted(20000, seed=4)
    settings = S.Settings(d_sae=64, activation=activation, k=4, l1=1.0, steps=700, batch_size=256, lr=lr,
                          resample_every=100, dead_after=5000, l1_warmup=100)
    trainer = S.Trainer(x, settings)
    for _ in trainer.run(100):
        pass
    sae = trainer.sae()
    w = sae.W_dec / np.linalg.norm(sae.W_dec, axis=1, keepdims=True)
    best = (dirs @ w.T).max(axis=1)  # each planted direction's closest decoder row
    assert (best >= 0.9).mean() >= 0.8, np.sort(best)
    assert S.reconstruction_metrics(sae, x)["fve"] > 0.9


def test_folded_sae_reads_raw_activations():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(300, 8)) * 7.0 + 2.0
    trainer = S.Trainer(x, S.Settings(d_sae=16, activation="topk", k=3, steps=5, batch_size=64))
    trainer.run(5).__next__()
    raw, scaled = trainer.sae(), trainer.model_sae
    np.testing.assert_allclose(raw.encode(x), scaled.encode(x * trainer.scale), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(raw(x), scaled(x * trainer.scale) / trainer.scale, rtol=1e-4, atol=1e-4)
    assert trainer.scale == pytest.approx(np.sqrt(8) / np.linalg.norm(x, axis=1).mean(), rel=1e-5)


# ---- files in SAELens's layout ----


def _trained_like(activation="topk", seed=0) -> S.SAE:
    rng = np.random.default_rng(seed)
    sae = S.SAE.init(6, 10, activation, 3 if activation == "topk" else None, "blocks.0.hook_resid_post", seed)
    for p in sae.params.values():
        p += rng.normal(size=p.shape).astype(p.dtype) * 0.1
    sae.metadata["model_name"] = "shipped"
    return sae


@pytest.mark.parametrize("activation", ["topk", "relu"])
def test_save_load_round_trip(tmp_path, activation):
    sae = _trained_like(activation)
    files.save(sae, tmp_path / "sae")
    cfg = json.loads((tmp_path / "sae" / "cfg.json").read_text())
    assert cfg["architecture"] == {"topk": "topk", "relu": "standard"}[activation]
    assert cfg["metadata"]["hook_name"] == "blocks.0.hook_resid_post" and cfg["normalize_activations"] == "none"
    assert (cfg["d_in"], cfg["d_sae"], cfg.get("k")) == (6, 10, sae.k)
    back = files.load(tmp_path / "sae")
    assert (back.activation, back.k, back.hook_name) == (sae.activation, sae.k, sae.hook_name)
    assert back.metadata["model_name"] == "shipped"
    for name in ("W_enc", "b_enc", "W_dec", "b_dec"):
        np.testing.assert_array_equal(back.params[name], sae.params[name])
    assert files.load(files.to_files(sae)).hook_name == sae.hook_name  # the {name: bytes} form a page uses
    header = (tmp_path / "sae" / "sae_weights.safetensors").read_bytes()
    assert int.from_bytes(header[:8], "little") % 8 == 0


def test_reads_an_old_layout_file_with_hook_name_at_the_top(tmp_path):
    sae = _trained_like("topk", seed=1)
    written = files.to_files(sae)
    old = {"d_in": 6, "d_sae": 10, "dtype": "float32", "device": "cpu", "model_name": "gpt2",
           "hook_point": "blocks.3.hook_resid_pre", "hook_point_layer": 3, "activation_fn_str": "topk",
           "activation_fn_kwargs": {"k": 3}, "apply_b_dec_to_input": True, "normalize_activations": False,
           "sae_lens_training_version": "3.5.0"}
    back = files.load({"cfg.json": json.dumps(old).encode(), "sae_weights.safetensors": written[files.WEIGHTS_FILE]})
    assert (back.activation, back.k, back.hook_name, back.metadata["model_name"]) == (
        "topk", 3, "blocks.3.hook_resid_pre", "gpt2")
    v5 = dict(old, hook_name="blocks.2.hook_resid_post", activation_fn_str="relu", architecture="standard")
    del v5["hook_point"]
    assert files.load({"cfg.json": json.dumps(v5), "sae_weights.safetensors": written[files.WEIGHTS_FILE]}
                      ).hook_name == "blocks.2.hook_resid_post"
    with pytest.raises(ValueError, match="normalize_activations"):
        files.load({"cfg.json": json.dumps(dict(old, normalize_activations="constant_norm_rescale")),
                    "sae_weights.safetensors": written[files.WEIGHTS_FILE]})


def test_jumprelu_with_log_threshold():
    sae = _trained_like("relu", seed=2)
    tensors = {n: sae.params[n] for n in ("W_enc", "b_enc", "W_dec", "b_dec")}
    tensors["log_threshold"] = np.log(np.full(10, 0.2, dtype=np.float32))
    cfg = {"d_in": 6, "d_sae": 10, "architecture": "jumprelu", "metadata": {"hook_name": "blocks.1.hook_mlp_out"}}
    back = files.load({"cfg.json": json.dumps(cfg), "sae_weights.safetensors": files.safetensors_bytes(tensors)})
    x = np.random.default_rng(0).normal(size=(20, 6)).astype(np.float32)
    pre = (x - sae.b_dec) @ sae.W_enc + sae.b_enc
    np.testing.assert_allclose(back.encode(x), np.where(pre > 0.2, pre, 0), rtol=1e-5, atol=1e-6)


def test_saelens_reads_what_slm_writes_and_the_reverse(tmp_path):
    sae_lens = pytest.importorskip("sae_lens")  # in requirements.txt: only a bare environment skips this
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(3).normal(size=(32, 6)).astype(np.float32)
    for activation in ("topk", "relu"):
        ours = _trained_like(activation, seed=4)
        files.save(ours, tmp_path / activation)
        theirs = sae_lens.SAE.load_from_disk(str(tmp_path / activation))
        assert theirs.cfg.metadata.hook_name == "blocks.0.hook_resid_post"
        with torch.no_grad():
            f = theirs.encode(torch.from_numpy(x))
            np.testing.assert_allclose(f.numpy(), ours.encode(x), rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(theirs.decode(f).numpy(), ours(x), rtol=1e-5, atol=1e-5)
        theirs.save_model(str(tmp_path / f"{activation}-saelens"))
        back = files.load(tmp_path / f"{activation}-saelens")
        assert (back.activation, back.k, back.hook_name) == (ours.activation, ours.k, ours.hook_name)
        np.testing.assert_allclose(back(x), ours(x), rtol=1e-6, atol=1e-6)


# ---- on a model: splicing, metrics, features, steering ----


@pytest.fixture(scope="module")
def shipped():
    return slm.load_pretrained()


@pytest.fixture(scope="module")
def small_sae(shipped):
    tokens = S.corpus_windows(shipped, 60, seed=0)
    trainer = S.Trainer(S.gather(shipped, tokens, "blocks.0.hook_resid_post"),
                        S.Settings(d_sae=128, k=6, steps=60, batch_size=256), "blocks.0.hook_resid_post",
                        dtype=np.float64)
    for _ in trainer.run(60):
        pass
    return trainer.sae()


def test_splice_via_run_with_hooks_equals_manual_reconstruction(shipped, small_sae):
    tokens = S.corpus_windows(shipped, 3, seed=7)
    _, cache = shipped.run_with_cache(tokens, names="blocks.0.hook_resid_post")
    resid = cache["blocks.0.hook_resid_post"]
    pre = (resid - small_sae.b_dec) @ small_sae.W_enc + small_sae.b_enc
    kth = np.sort(pre, axis=-1)[..., -small_sae.k][..., None]  # by hand: keep the k largest, then ReLU
    manual = np.where(pre >= kth, np.maximum(pre, 0), 0) @ small_sae.W_dec + small_sae.b_dec
    expected = shipped.run_with_hooks(manual, start_at_layer=1)
    spliced = shipped.run_with_hooks(tokens, fwd_hooks=[S.splice_hook(small_sae)])
    np.testing.assert_allclose(spliced, expected, rtol=1e-9, atol=1e-9)


def test_ce_recovered_is_one_for_an_exact_sae_and_zero_for_a_null_one(shipped):
    d = shipped.cfg.n_model
    eye = np.eye(d)
    exact = S.SAE({"W_enc": np.hstack([eye, -eye]), "b_enc": np.zeros(2 * d), "W_dec": np.vstack([eye, -eye]),
                   "b_dec": np.zeros(d)}, "relu", hook_name="blocks.0.hook_resid_post")
    tokens = S.corpus_windows(shipped, 8, seed=2)
    m = S.evaluate(shipped, exact, tokens)
    assert m["ce_recovered"] == pytest.approx(1.0, abs=1e-9) and m["fve"] == pytest.approx(1.0, abs=1e-9)
    assert m["ce_zero"] > m["ce_clean"] + 1.0
    null = S.SAE({n: np.zeros_like(v) for n, v in exact.params.items()}, "relu", hook_name=exact.hook_name)
    m = S.evaluate(shipped, null, tokens)
    assert m["ce_recovered"] == pytest.approx(0.0, abs=1e-9) and m["dead"] == 1.0 and m["l0"] == 0.0


def test_steering_adds_alpha_times_the_decoder_row_at_the_hook(shipped, small_sae):
    tokens = S.corpus_windows(shipped, 2, seed=3)
    feature, alpha = 5, 4.0
    name = "blocks.0.hook_resid_post"
    _, clean = shipped.run_with_cache(tokens, names=name)
    hook = S.steering_hook(small_sae, feature, alpha)
    logits, steered = shipped.run_with_cache(tokens, names=name, fwd_hooks=[hook])
    np.testing.assert_allclose(steered[name] - clean[name],
                               np.broadcast_to(alpha * small_sae.W_dec[feature], clean[name].shape), atol=1e-12)
    np.testing.assert_allclose(logits, shipped.run_with_hooks(clean[name] + alpha * small_sae.W_dec[feature],
                                                               start_at_layer=1), rtol=1e-9, atol=1e-9)
    # generation: the first steered step's distribution is the steered model's at the prompt's last position
    ids = list(tokens[0, :10])
    pairs = list(S.steer(shipped, small_sae, feature, alpha, ids, max_new_tokens=3, seed=1))
    first = pairs[0][0]
    manual = shipped.run_with_hooks(np.array(ids), fwd_hooks=[hook])[0, -1]
    np.testing.assert_allclose(first.probs, slm.layers.softmax(manual), rtol=1e-9, atol=1e-12)
    assert not np.allclose(pairs[0][1].probs, first.probs)
    # both texts in one batch: each is what generate gives it alone, the steered one with the hook
    for got, hooks in zip(zip(*pairs, strict=True), ([hook], []), strict=True):
        alone = list(slm.generate(shipped, ids, 3, seed=1, fwd_hooks=hooks))
        assert [s.token for s in got] == [s.token for s in alone]
        np.testing.assert_allclose(np.array([s.probs for s in got]), np.array([s.probs for s in alone]),
                                   rtol=1e-5, atol=1e-7)
    # the hook on one row of a batch changes that row only
    row_hook = S.steering_hook(small_sae, feature, alpha, row=1)
    _, batch = shipped.run_with_cache(np.stack([tokens[0], tokens[0]]), names=name, fwd_hooks=[row_hook])
    np.testing.assert_allclose(batch[name][0], clean[name][0], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(batch[name][1] - clean[name][0], np.broadcast_to(
        alpha * small_sae.W_dec[feature], clean[name][0].shape), atol=1e-5)


def test_feature_index_matches_brute_force(shipped, small_sae):
    tokens = S.corpus_windows(shipped, 30, seed=9)
    index = S.FeatureIndex(small_sae, shipped, n_top=5)
    index.add(tokens[:12])
    index.add(tokens[12:])  # two chunks, as a UI adds them
    f = small_sae.encode(S.gather(shipped, tokens, small_sae.hook_name)).reshape(30, tokens.shape[1], -1)
    np.testing.assert_allclose(index.density, (f > 0).reshape(-1, f.shape[-1]).mean(axis=0))
    feature = int(np.argmax(index.density))
    contexts = index.top_contexts(feature, before=3, after=1)
    flat = f[..., feature].ravel()
    order = np.argsort(-flat, kind="stable")[:5]
    assert [c.activation for c in contexts] == pytest.approx(flat[order].tolist())
    c = contexts[0]
    assert f[c.window, c.position, feature] == pytest.approx(c.activation)
    assert c.tokens[c.at] == tokens[c.window, c.position]
    assert c.tokens == tokens[c.window, max(0, c.position - 3):c.position + 2].tolist()
    acts = S.prompt_features(small_sae, shipped, tokens[0])
    np.testing.assert_allclose(acts, f[0], rtol=1e-6, atol=1e-6)
    top = S.firing(acts[4], k=3)
    assert [a for _, a in top] == sorted((a for a in acts[4] if a > 0), reverse=True)[:3]


def test_logit_effect_goes_through_the_final_norm_weight(shipped, small_sae):
    up, down = S.logit_effect(small_sae, shipped, 3, k=4)
    d = small_sae.W_dec[3].astype(np.float64)
    by_hand = ((d - d.mean()) * shipped.params["norm_f.weight"]) @ shipped.params["unembed"]
    assert [i for i, _ in up] == list(np.argsort(-by_hand)[:4])
    assert [i for i, _ in down] == list(np.argsort(by_hand)[:4])
    assert up[0][1] == pytest.approx(by_hand.max())


def test_corpus_windows_from_text_and_from_the_models_own_samples(shipped):
    windows = S.corpus_windows(shipped, 5, seq_len=6, text="the dog ( near the barn ) was hungry .")
    ids = shipped.tokenizer.encode("the dog ( near the barn ) was hungry .").ids
    assert windows.shape == (5, 6)
    for row in windows:  # every window is a run of the text's ids, repeated end to end
        assert any(list(row) == (ids * 3)[s:s + 6] for s in range(len(ids))), row
    bare = slm.Model.init(slm.Config(n_vocab=11, n_ctx=8, n_model=8, n_heads=2), seed=0)
    sampled = S.corpus_windows(bare, 3, seed=4)
    assert sampled.shape == (3, 8) and sampled.max() < 11 and (sampled[:, 0] == 1).all()
    np.testing.assert_array_equal(sampled, S.corpus_windows(bare, 3, seed=4))  # seeded


def test_cli_trains_prints_and_saves(tmp_path, capsys):
    from slm.sae.__main__ import main

    metrics = main(["--preset", "quick", "--steps", "20", "--windows", "40", "--eval-windows", "8", "--d-sae", "64",
                    "--out", str(tmp_path / "sae")])
    out = capsys.readouterr().out
    assert "blocks.0.hook_resid_post" in out and "ce_recovered" in out and "step    20" in out
    back = S.load(tmp_path / "sae")
    assert (back.d_in, back.d_sae, back.k, back.hook_name) == (64, 64, 8, "blocks.0.hook_resid_post")
    assert 0 < metrics["fve"] <= 1 and metrics["l0"] == pytest.approx(8.0)
