"""The backward pass against finite differences and against PyTorch autograd (float64, tiny configs)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from slm import Config, Model
from slm.train.backward import backward, cross_entropy, loss_and_grads, next_token_targets

TOL = 1e-6

# Each config switches on a different set of pieces; together they cover every option of Config.
CONFIGS = {
    "shipped-like": dict(activation="relu", positions="sinusoidal"),
    "gelu-learned-tied": dict(activation="gelu", positions="learned", tied=True),
    "rms-swiglu-rope-mqa-bias": dict(norm="rms", activation="swiglu", positions="rope", n_kv_heads=1, bias=True),
    "post-gqa-bias-nopos-bidir": dict(
        norm_placement="post", bias=True, n_heads=4, n_kv_heads=2, positions="none", causal=False
    ),
    "neox-parallel-partial-rope": dict(activation="gelu", positions="rope", rotary_dim=2, rope_base=100.0,
                                       parallel_residual=True, bias=True),
}


def _tiny(**overrides) -> tuple[Model, np.ndarray, np.ndarray]:
    fields = dict(n_vocab=7, n_ctx=8, n_model=8, n_heads=2, n_layers=2, d_ff=12)
    fields.update(overrides)
    model = Model.init(Config(**fields), seed=1)
    rng = np.random.default_rng(0)
    for value in model.params.values():  # norms and biases away from 1 and 0, so their gradients are not special
        if value.ndim == 1:
            value += 0.3 * rng.standard_normal(value.shape)
    tokens = rng.integers(0, 7, size=(3, 6))
    lengths = np.array([6, 4, 2])
    return model, tokens, lengths


def _rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / max(np.abs(a).max(), np.abs(b).max(), 1e-300))


def _assert_close(pname: str, ours: np.ndarray, reference: np.ndarray) -> None:
    if np.abs(reference).max() <= 1e-9:
        # Without RoPE the key bias adds q·b_k to a whole row of scores, which softmax ignores: its gradient is
        # zero up to rounding, where a relative error means nothing; then both sides must be ~0 instead.
        assert pname.endswith("attn.b_k") and np.abs(ours).max() <= 1e-12, pname
    else:
        assert _rel_err(ours, reference) <= TOL, pname


@pytest.mark.parametrize("name", list(CONFIGS))
def test_gradients_match_finite_differences(name):
    model, tokens, lengths = _tiny(**CONFIGS[name])
    _, grads, _ = loss_and_grads(model, tokens, lengths)
    assert grads.keys() == model.params.keys()
    eps = 1e-5
    for pname, value in model.params.items():
        numeric = np.zeros_like(value)
        flat, out = value.reshape(-1), numeric.reshape(-1)
        for j in range(flat.size):
            orig = flat[j]
            flat[j] = orig + eps
            plus = loss_and_grads(model, tokens, lengths)[0]
            flat[j] = orig - eps
            minus = loss_and_grads(model, tokens, lengths)[0]
            flat[j] = orig
            out[j] = (plus - minus) / (2 * eps)
        assert grads[pname].shape == value.shape
        _assert_close(pname, grads[pname], numeric)


# ---- an independent PyTorch model loading the same weights ----


def _torch_loss(cfg: Config, params: dict, tokens: np.ndarray, lengths: np.ndarray):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    p = {n: torch.tensor(v, dtype=torch.float64, requires_grad=True) for n, v in params.items()}
    ids = torch.tensor(tokens)
    n_batch, n_time = tokens.shape
    d, h, g, k = cfg.n_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_size
    pos_idx = torch.arange(n_time, dtype=torch.float64)

    def norm(name, x):
        if cfg.norm == "layer":
            return F.layer_norm(x, (d,), p[f"{name}.weight"], p[f"{name}.bias"], cfg.eps)
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + cfg.eps) * p[f"{name}.weight"]

    def rope(t):  # (B, heads, T, k), pairs (2i, 2i+1) of the first r coordinates
        r = cfg.rotary_dim or k
        freqs = cfg.rope_base ** (-torch.arange(0, r, 2, dtype=torch.float64) / r)
        ang = pos_idx[:, None] * freqs[None, :] / cfg.rope_scale
        cos, sin = torch.cos(ang), torch.sin(ang)
        even, odd = t[..., 0:r:2], t[..., 1:r:2]
        turned = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)
        return torch.cat([turned, t[..., r:]], dim=-1)

    def lin(x, name, which):  # attention matrices: output units as rows
        out = x @ p[f"{name}.w_{which}"].T
        return out + p[f"{name}.b_{which}"] if cfg.bias else out

    allowed = torch.ones(n_time, n_time, dtype=torch.bool)
    if cfg.causal:
        allowed = torch.tril(allowed)
    key_ok = torch.arange(n_time)[None, :] < torch.tensor(lengths)[:, None]  # (B, S)
    allowed = allowed[None, None] & key_ok[:, None, None, :]

    def attn(i, x):
        a = f"blocks.{i}.attn"
        q = lin(x, a, "q").view(n_batch, n_time, h, k).transpose(1, 2)
        kk = lin(x, a, "k").view(n_batch, n_time, g, k).transpose(1, 2)
        v = lin(x, a, "v").view(n_batch, n_time, g, k).transpose(1, 2)
        if cfg.positions == "rope":
            q, kk = rope(q), rope(kk)
        kk, v = kk.repeat_interleave(h // g, dim=1), v.repeat_interleave(h // g, dim=1)
        scores = (q @ kk.transpose(-1, -2)) / math.sqrt(k)
        weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
        out = (weights @ v).transpose(1, 2).reshape(n_batch, n_time, h * k) @ p[f"{a}.w_o"].T
        return out + p[f"{a}.b_o"] if cfg.bias else out

    def ffn(i, x):  # feed-forward matrices: input coordinates as rows
        f = f"blocks.{i}.ffn"
        pre = x @ p[f"{f}.w_in"] + (p[f"{f}.b_in"] if cfg.bias else 0)
        if cfg.activation == "relu":
            act = torch.relu(pre)
        elif cfg.activation == "gelu":
            act = F.gelu(pre, approximate="tanh")
        else:
            act = F.silu(x @ p[f"{f}.w_gate"]) * pre
        return act @ p[f"{f}.w_out"] + (p[f"{f}.b_out"] if cfg.bias else 0)

    x = p["tok_emb"][ids]
    if cfg.positions == "learned":
        x = x + p["pos_emb"][:n_time]
    elif cfg.positions == "sinusoidal":
        i2 = torch.arange(0, d, 2, dtype=torch.float64)
        ang = pos_idx[:, None] / 10000.0 ** (i2 / d)
        x = x + torch.stack([torch.sin(ang), torch.cos(ang)], dim=-1).flatten(-2)
    for i in range(cfg.n_layers):
        b = f"blocks.{i}"
        if cfg.parallel_residual:
            x = x + attn(i, norm(f"{b}.norm1", x)) + ffn(i, norm(f"{b}.norm2", x))
        elif cfg.norm_placement == "pre":
            x = x + attn(i, norm(f"{b}.norm1", x))
            x = x + ffn(i, norm(f"{b}.norm2", x))
        else:
            x = norm(f"{b}.norm1", x + attn(i, x))
            x = norm(f"{b}.norm2", x + ffn(i, x))
    if cfg.norm_placement == "pre":
        x = norm("norm_f", x)
    logits = x @ (p["tok_emb"].T if cfg.tied else p["unembed"])

    targets = torch.full((n_batch, n_time), -100, dtype=torch.long)
    for row, length in enumerate(lengths):
        targets[row, : length - 1] = ids[row, 1:length]
    loss = F.cross_entropy(logits.reshape(-1, cfg.n_vocab), targets.reshape(-1), ignore_index=-100)
    loss.backward()
    return loss.item(), {n: t.grad.numpy() for n, t in p.items()}, logits.detach().numpy()


@pytest.mark.parametrize("name", list(CONFIGS))
def test_gradients_match_torch_autograd(name):
    model, tokens, lengths = _tiny(**CONFIGS[name])
    loss, grads, trace = loss_and_grads(model, tokens, lengths)
    t_loss, t_grads, t_logits = _torch_loss(model.cfg, model.params, tokens, lengths)
    valid = np.arange(tokens.shape[1])[None, :] < lengths[:, None]
    np.testing.assert_allclose(trace.logits[valid], t_logits[valid], rtol=1e-10, atol=1e-12)
    assert abs(loss - t_loss) <= 1e-12 * abs(t_loss)
    for pname in model.params:
        _assert_close(pname, grads[pname], t_grads[pname])


def test_padding_is_ignored():
    """A padded row's gradient equals the gradient of the same row run alone at its own length."""
    model, tokens, _ = _tiny()
    short = tokens[1, :4]
    padded = tokens.copy()
    padded[1, 4:] = 0
    other = tokens.copy()
    other[1, 4:] = 5  # different padding tokens: nothing changes
    _, g_pad, _ = loss_and_grads(model, padded[1:2], [4])
    _, g_other, _ = loss_and_grads(model, other[1:2], [4])
    _, g_alone, _ = loss_and_grads(model, short[None], None)
    for pname in model.params:
        np.testing.assert_allclose(g_pad[pname], g_alone[pname], rtol=1e-10, atol=1e-14)
        np.testing.assert_allclose(g_other[pname], g_alone[pname], rtol=1e-10, atol=1e-14)


def test_backward_accepts_targets_or_dlogits_and_unbatched_traces():
    model, tokens, _ = _tiny()
    row = tokens[0]
    trace = model.forward(row)
    by_targets = backward(model, trace, targets=True)
    nxt = np.append(row[1:], -1)
    by_array = backward(model, trace, targets=nxt)
    tgt, valid = next_token_targets(row[None])
    _, dlogits = cross_entropy(trace.logits, tgt[0], valid[0])
    by_dlogits = backward(model, trace, dlogits=dlogits)
    batched = loss_and_grads(model, row[None])[1]
    for pname in model.params:
        np.testing.assert_allclose(by_targets[pname], batched[pname], rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(by_array[pname], batched[pname], rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(by_dlogits[pname], batched[pname], rtol=1e-12, atol=1e-15)
    with pytest.raises(ValueError):
        backward(model, trace)


def test_cross_entropy_of_uniform_logits_is_log_vocab():
    loss, dlogits = cross_entropy(np.zeros((2, 3, 5)), np.zeros((2, 3), dtype=int))
    assert loss == pytest.approx(math.log(5))
    np.testing.assert_allclose(dlogits.sum(axis=-1), 0, atol=1e-15)
