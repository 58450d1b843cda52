"""AdamW against torch.optim.AdamW, gradient clipping, the warmup + cosine schedule, one training step."""

from __future__ import annotations

import math

import numpy as np
import pytest

from slm.train.optim import AdamW, clip_gradients, global_norm, lr_at


def test_adamw_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((3, 4)), "b": rng.standard_normal(4)}
    ours = AdamW({n: v.copy() for n, v in params.items()}, betas=(0.9, 0.98), eps=1e-8, weight_decay=0.1)
    tw = torch.tensor(params["w"], requires_grad=True)
    tb = torch.tensor(params["b"], requires_grad=True)
    opt = torch.optim.AdamW([{"params": [tw], "weight_decay": 0.1}, {"params": [tb], "weight_decay": 0.0}],
                            lr=1.0, betas=(0.9, 0.98), eps=1e-8)
    for step in range(5):
        grads = {"w": rng.standard_normal((3, 4)), "b": rng.standard_normal(4)}
        lr = 0.01 * (step + 1)
        ours.step(grads, lr)
        for group in opt.param_groups:
            group["lr"] = lr
        tw.grad, tb.grad = torch.tensor(grads["w"]), torch.tensor(grads["b"])
        opt.step()
    np.testing.assert_allclose(ours.params["w"], tw.detach().numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(ours.params["b"], tb.detach().numpy(), rtol=1e-12, atol=1e-14)


def test_clipping_scales_to_max_norm_and_reports_the_norm_before():
    grads = {"a": np.array([3.0, 0.0]), "b": np.array([[4.0]])}
    assert global_norm(grads) == 5.0
    assert clip_gradients(grads, 1.0) == 5.0
    assert global_norm(grads) == pytest.approx(1.0)
    np.testing.assert_allclose(grads["a"], [0.6, 0.0])
    untouched = {"a": np.array([0.3])}
    clip_gradients(untouched, 1.0)
    assert untouched["a"][0] == 0.3


def test_schedule_warms_up_then_decays_to_the_floor():
    peak, warmup, total = 1e-3, 10, 110
    lrs = [lr_at(s, peak, warmup, total, floor=0.1) for s in range(total + 5)]
    assert lrs[0] == pytest.approx(peak / warmup)
    assert lrs[warmup - 1] == pytest.approx(peak)
    assert lrs[warmup] == pytest.approx(peak)
    assert all(a >= b for a, b in zip(lrs[warmup:], lrs[warmup + 1:], strict=False))
    assert lrs[total] == pytest.approx(0.1 * peak)
    assert lrs[-1] == pytest.approx(0.1 * peak)
    middle = warmup + (total - warmup) // 2
    assert lrs[middle] == pytest.approx(peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi / 2))))


def _tiny_model():
    import slm
    return slm.Model.init(slm.Config(n_vocab=11, n_ctx=8, n_model=16, n_heads=2, n_layers=1, positions="rope"),
                          seed=3, dtype=np.float32)


def test_train_step_is_forward_backward_clip_then_adamw():
    from slm.train.backward import loss_and_grads
    from slm.train.step import train_step
    batch = np.random.default_rng(0).integers(0, 11, (4, 8))
    stepped, by_hand = _tiny_model(), _tiny_model()
    opt_a = AdamW(stepped.params, weight_decay=0.1)
    opt_b = AdamW(by_hand.params, weight_decay=0.1)
    for lr in (1e-2, 5e-3):
        loss, norm = train_step(stepped, opt_a, batch, lr, clip=0.5)
        want_loss, grads, _ = loss_and_grads(by_hand, batch)
        want_norm = clip_gradients(grads, 0.5)
        opt_b.step(grads, lr)
        assert (loss, norm) == (want_loss, want_norm) and norm > 0.5  # the clip did act
        for name, value in by_hand.params.items():
            np.testing.assert_array_equal(stepped.params[name], value, err_msg=name)


def test_a_non_finite_step_leaves_the_weights_alone():
    from slm.train.step import train_step
    model = _tiny_model()
    model.params["unembed"][:] = np.float32(3e38)  # the logits overflow to inf: the loss is NaN
    before = {n: v.copy() for n, v in model.params.items()}
    opt = AdamW(model.params)
    loss, norm = train_step(model, opt, np.arange(8)[None] % 11, 1e-2)
    assert not (math.isfinite(loss) and math.isfinite(norm))
    assert opt.t == 0
    for name, value in before.items():
        np.testing.assert_array_equal(model.params[name], value, err_msg=name)
