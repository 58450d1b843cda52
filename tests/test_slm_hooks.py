"""The hook points of slm.Model (named as in TransformerLens), run_with_hooks / run_with_cache and the cache's
helpers, the interventions written on them against references written here, and (where it is installed) every
shared hook against TransformerLens's HookedTransformer loaded with the same weights."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import slm
from slm import interventions as iv
from slm import layers
from slm.hooks import HookRun
from slm.model import _Span

BASE = dict(n_vocab=20, n_ctx=16, n_model=16, n_heads=4, n_layers=2, d_ff=32)
SWITCHES = {
    "pre-layer-sinusoidal": dict(), "learned": dict(positions="learned", bias=True), "rope": dict(positions="rope"),
    "none": dict(positions="none"), "post-rms": dict(norm_placement="post", norm="rms"),
    "gqa": dict(n_kv_heads=2, positions="rope"), "mqa": dict(n_kv_heads=1), "swiglu": dict(activation="swiglu"),
    "gelu-tied-bidirectional": dict(activation="gelu", tied=True, causal=False),
}
IDS = np.array([[1, 5, 7, 3, 9, 2, 11, 4], [3, 3, 8, 1, 0, 0, 0, 0]])
LENGTHS = np.array([8, 4])


def _model(kw, seed=0) -> slm.Model:
    return slm.Model.init(slm.Config(**{**BASE, **kw}), seed)


def expected_names(cfg: slm.Config) -> set[str]:
    """The table of docs/slm.md, written out again."""
    names = {"hook_embed"} | ({"hook_pos_embed"} if cfg.positions in ("sinusoidal", "learned") else set())
    for i in range(cfg.n_layers):
        b = f"blocks.{i}"
        names |= {f"{b}.{n}" for n in ("hook_resid_pre", "ln1.hook_normalized", "hook_attn_out", "hook_resid_mid",
                                         "ln2.hook_normalized", "hook_mlp_out", "hook_resid_post")}
        names |= {f"{b}.attn.hook_{n}" for n in ("q", "k", "v", "attn_scores", "pattern", "z", "result")}
        names |= {f"{b}.mlp.hook_{n}" for n in ("pre", "post")}
        if cfg.positions == "rope":
            names |= {f"{b}.attn.hook_rot_q", f"{b}.attn.hook_rot_k"}
        if cfg.activation == "swiglu":
            names.add(f"{b}.mlp.hook_pre_linear")
    return names | ({"ln_final.hook_normalized"} if cfg.norm_placement == "pre" else set())


@pytest.mark.parametrize("switch", SWITCHES)
@pytest.mark.parametrize("padded", [False, True])
def test_every_hook_name_exists_with_its_shape(switch, padded):
    model = _model(SWITCHES[switch])
    cfg = model.cfg
    logits, cache = model.run_with_cache(IDS, lengths=LENGTHS if padded else None)
    assert set(cache) == expected_names(cfg) == set(model.hook_names())
    assert list(cache) == model.hook_names()  # the order the pass reaches them
    b, t, d, h, g, k = 2, 8, cfg.n_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_size
    shapes = {"embed": (b, t, d), "q": (b, t, h, k), "k": (b, t, g, k), "v": (b, t, g, k), "z": (b, t, h, k),
              "result": (b, t, h, d), "attn_scores": (b, h, t, t), "pattern": (b, h, t, t), "pre": (b, t, cfg.d_ff),
              "post": (b, t, cfg.d_ff), "resid_pre": (b, t, d), "attn_out": (b, t, d), "mlp_out": (b, t, d)}
    for name, shape in shapes.items():
        assert cache[name, 1 if name != "embed" else None].shape == shape, name
    assert logits.shape == (b, t, cfg.n_vocab)
    np.testing.assert_array_equal(logits, model.forward(IDS, LENGTHS if padded else None).logits)
    if cfg.positions == "learned":
        assert "hook_pos_embed" in cache
    if padded:  # a padded row's real positions equal the unpadded run of that sequence
        _, alone = model.run_with_cache(IDS[1, :4])
        np.testing.assert_allclose(cache["resid_post", 1][1, :4], alone["resid_post", 1][0], atol=1e-12)
    assert cache["pattern", 0] is cache["blocks.0.attn.hook_pattern"]
    assert cache["normalized", 1, "ln2"] is cache["blocks.1.ln2.hook_normalized"]


def test_the_trace_holds_the_hooked_values():
    """Trace fields are the same arrays the hooks see (TransformerLens's axes: positions before heads)."""
    for kw in SWITCHES.values():
        model = _model(kw)
        _, cache = model.run_with_cache(IDS[0])
        trace = model.forward(IDS[0])
        layer = trace.layers[1]
        rot = "rot_" if model.cfg.positions == "rope" else ""
        np.testing.assert_array_equal(layer.q, np.swapaxes(cache[f"{rot}q", 1][0], 0, 1))
        np.testing.assert_array_equal(layer.k, np.swapaxes(cache[f"{rot}k", 1][0], 0, 1))
        np.testing.assert_array_equal(layer.head_out, np.swapaxes(cache["result", 1][0], 0, 1))
        np.testing.assert_array_equal(layer.attention, cache["pattern", 1][0])
        np.testing.assert_array_equal(layer.h, cache["resid_mid", 1][0])
        np.testing.assert_array_equal(layer.y, cache["resid_post", 1][0])
        np.testing.assert_array_equal(layer.ff_act, cache["post", 1][0])
        pre = "pre_linear" if model.cfg.activation == "swiglu" else "pre"
        np.testing.assert_array_equal(layer.ff_pre, cache[pre, 1][0])
        np.testing.assert_array_equal(trace.x, cache["resid_pre", 0][0])


@pytest.mark.parametrize("switch", SWITCHES)
def test_identity_hooks_leave_the_logits_bit_for_bit(switch):
    model = _model(SWITCHES[switch])
    plain = model.run_with_hooks(IDS)
    keep = model.run_with_hooks(IDS, fwd_hooks=[(lambda name: True, lambda value, hook: None)])
    same = model.run_with_hooks(IDS, fwd_hooks=[(lambda name: True, lambda value, hook: value.copy())])
    np.testing.assert_array_equal(keep, plain)
    np.testing.assert_array_equal(same, plain)
    np.testing.assert_array_equal(plain, model.forward(IDS).logits)


def test_a_replaced_value_changes_everything_downstream_and_nothing_before():
    model = _model(SWITCHES["rope"])
    _, clean = model.run_with_cache(IDS)
    seen = []

    def uniform(pattern, hook):
        seen.append((hook.name, hook.layer()))
        allowed = np.isfinite(clean["attn_scores", hook.layer()])
        return allowed / allowed.sum(-1, keepdims=True)

    _, cache = model.run_with_cache(IDS, fwd_hooks=[("blocks.1.attn.hook_pattern", uniform)])
    assert seen == [("blocks.1.attn.hook_pattern", 1)]
    for name in model.hook_names():
        before = model.hook_names().index(name) < model.hook_names().index("blocks.1.attn.hook_pattern")
        assert np.array_equal(cache[name], clean[name]) == before, name


def test_start_and_stop_at_layer():
    model = _model(SWITCHES["gqa"])
    logits, cache = model.run_with_cache(IDS)
    np.testing.assert_array_equal(model.run_with_hooks(cache["resid_pre", 1], start_at_layer=1), logits)
    np.testing.assert_array_equal(model.run_with_hooks(IDS, stop_at_layer=1), cache["resid_pre", 1])
    np.testing.assert_array_equal(model.run_with_hooks(IDS, stop_at_layer=-1), cache["resid_pre", 1])
    middle = model.run_with_hooks(cache["resid_pre", 0], start_at_layer=0, stop_at_layer=2)
    np.testing.assert_array_equal(middle, cache["resid_post", 1])
    _, part = model.run_with_cache(cache["resid_pre", 1], start_at_layer=1)
    assert "hook_embed" not in part and "blocks.0.hook_resid_post" not in part and "blocks.1.hook_q" not in part
    assert "blocks.1.attn.hook_q" in part


@pytest.mark.parametrize("switch", SWITCHES)
def test_output_positions_are_the_full_run_at_those_positions(switch):
    model = _model(SWITCHES[switch])
    full, cache = model.run_with_cache(IDS, lengths=LENGTHS)
    np.testing.assert_allclose(model.run_with_hooks(IDS, lengths=LENGTHS, output_positions=[3, -1]), full[:, [3, -1]],
                               rtol=0, atol=1e-12)
    seen = {}

    def shape(value, hook):
        seen[hook.name] = value.shape

    out = model.run_with_hooks(cache["resid_pre", 1], [(lambda name: True, shape)], LENGTHS, start_at_layer=1,
                               stop_at_layer=2, output_positions=2)
    np.testing.assert_allclose(out, cache["resid_post", 1][:, [2]], rtol=0, atol=1e-12)
    assert seen["blocks.1.attn.hook_pattern"] == (2, 4, 1, 8) and seen["blocks.1.hook_resid_post"] == (2, 1, 16)
    assert seen["blocks.1.attn.hook_k"][1] == 8  # keys and values at every position


def test_bad_hooks_are_clear_errors():
    model = _model({})
    with pytest.raises(ValueError, match="no hook point named"):
        model.run_with_hooks(IDS, fwd_hooks=[("blocks.0.attn.hook_qq", lambda v, h: None)])
    with pytest.raises(ValueError, match="shape"):
        model.run_with_hooks(IDS, fwd_hooks=[("blocks.0.hook_resid_pre", lambda v, h: v[:, :-1])])
    with pytest.raises(ValueError, match="not inside a block"):
        model.run_with_hooks(IDS, fwd_hooks=[("hook_embed", lambda v, h: h.layer())])
    with pytest.raises(ValueError, match="residual stream"):
        model.run_with_hooks(IDS, start_at_layer=1)


def test_decompose_resid_and_accumulated_resid():
    for kw in (dict(), dict(positions="learned", bias=True), dict(positions="rope", activation="swiglu")):
        model = _model(kw)
        logits, cache = model.run_with_cache(IDS)
        parts, labels = cache.decompose_resid(return_labels=True)
        assert labels[-2:] == ["1_attn_out", "1_mlp_out"] and ("pos_embed" in labels) == (kw.get("positions") != "rope")
        np.testing.assert_allclose(parts.sum(0), cache["resid_post", 1], atol=1e-12)
        np.testing.assert_allclose(cache.decompose_resid(layer=1).sum(0), cache["resid_pre", 1], atol=1e-12)
        stack, labels = cache.accumulated_resid(return_labels=True, incl_mid=True)
        assert labels == ["0_pre", "0_mid", "1_pre", "1_mid", "final_post"]
        np.testing.assert_allclose(model.norm("norm_f", stack[-1]) @ model.unembedding(), logits, atol=1e-12)
        heads, labels = cache.stack_head_results(return_labels=True)
        assert heads.shape == (8, 2, 8, 16) and labels[5] == "L1H1"
        b_o = model.params.get("blocks.1.attn.b_o", 0.0)
        np.testing.assert_allclose(heads[4:].sum(0) + b_o, cache["attn_out", 1], atol=1e-12)
    _, cache = _model(SWITCHES["post-rms"]).run_with_cache(IDS)
    with pytest.raises(ValueError, match="post-norm"):
        cache.decompose_resid()


def test_forward_runs_the_hooks_of_run_with_hooks():
    model = _model({})
    zero = [("blocks.1.attn.hook_result", lambda v, h: v * 0)]
    zeroed = model.forward(IDS, fwd_hooks=zero)
    np.testing.assert_array_equal(zeroed.logits, model.run_with_hooks(IDS, fwd_hooks=zero))
    assert not np.allclose(zeroed.logits, model.forward(IDS).logits)
    assert not zeroed.layers[1].head_out.any()  # the trace keeps the value the pass went on with
    seen = []
    model.forward(IDS[0], fwd_hooks=[("blocks.1.attn.hook_result", lambda v, h: seen.append(v.shape))])
    assert seen == [(8, 4, 16)]  # (pos, head, d) as in TransformerLens, without a batch axis for (T,) tokens
    with pytest.raises(ValueError, match="no hook point named"):  # the names before TransformerLens's are gone
        model.forward(IDS, fwd_hooks=[("blocks.0.x", lambda v, h: None)])


# ---- interventions on the shipped model (float64) ----

@pytest.fixture(scope="module")
def shipped():
    model = slm.load("shipped")
    assert model.dtype == np.float64
    tok = slm.tokenizer_for(model)
    clean = np.array([tok.index[w] for w in ["<start>", "the", "cat", "near", "the", "dogs"]])
    corrupt = clean.copy()
    corrupt[2] = tok.index["cats"]
    return model, clean, corrupt, tok.index["was"], tok.index["were"]


def _ablated_by_weights(model: slm.Model, layer: int, head: int) -> slm.Model:
    """Zero-ablation from the math: head j's write is z_j @ w_o[:, j*k:(j+1)*k].T, so zero those k columns."""
    params = dict(model.params)
    k = model.cfg.head_size
    w_o = params[f"blocks.{layer}.attn.w_o"].copy()
    w_o[:, head * k:(head + 1) * k] = 0.0
    params[f"blocks.{layer}.attn.w_o"] = w_o
    return slm.Model(model.cfg, params, model.meta)


def test_zero_ablation_through_hook_result_is_editing_the_weights(shipped):
    model, clean, _, _, _ = shipped
    rng = np.random.default_rng(0)
    batch = rng.integers(0, model.cfg.n_vocab, (3, model.cfg.n_ctx))
    for layer in range(model.cfg.n_layers):
        for head in range(model.cfg.n_heads):
            expected = _ablated_by_weights(model, layer, head).forward(batch).logits
            got = model.run_with_hooks(batch, fwd_hooks=iv.ablation_hooks(model, [(layer, head)]))
            np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
            np.testing.assert_allclose(iv.run_ablated(model, clean, [(layer, head)]).logits,
                                       _ablated_by_weights(model, layer, head).forward(clean).logits, atol=1e-12)


# The Patching grid as slm.interventions computed it before the hooks (commit cb7fe95), copied as the reference.
# Its private calls into the model go through _old_block / _old_feed_forward, which give the new pass the old
# hooks (translated by _named_hooks); everything else is the old code.

def _named_hooks(hooks):
    """The old {"blocks.{i}.x" | "blocks.{i}.head_out": fn(value)} as fwd_hooks: x is hook_resid_pre, head_out is
    hook_result in the (H, T, d) layout of LayerTrace.head_out (TransformerLens's is (T, H, d))."""
    pairs = []
    for point, fn in hooks.items():
        _, i, what = point.split(".")
        if what == "x":
            pairs.append((f"blocks.{i}.hook_resid_pre", lambda value, hook, fn=fn: fn(value)))
        else:
            pairs.append((f"blocks.{i}.attn.hook_result",
                          lambda value, hook, fn=fn: np.swapaxes(fn(np.swapaxes(value, -3, -2)), -3, -2)))
    return pairs


def _old_block(model, i, x, positions, mask, hooks):
    return model._block(i, x, _Span(positions, mask, None), HookRun(_named_hooks(hooks)))


def _old_feed_forward(model, i, x):
    return model._feed_forward(i, x, HookRun())


def old_block_inputs(trace):
    return [trace.x, *[layer.y for layer in trace.layers[:-1]]]


def old_patch_hooks(source, sites):
    inputs = old_block_inputs(source)
    hooks = {}
    for layer in {s.layer for s in sites}:
        resid = [(b, s.index) for b, s in enumerate(sites) if s.kind == "resid" and s.layer == layer]
        heads = [(b, s.index) for b, s in enumerate(sites) if s.kind == "head" and s.layer == layer]
        if resid:
            rows, pos = (np.array(v) for v in zip(*resid, strict=True))

            def patch_resid(x, rows=rows, pos=pos, layer=layer):
                x = x.copy()
                x[rows, pos] = inputs[layer][pos]
                return x
            hooks[f"blocks.{layer}.x"] = patch_resid
        if heads:
            rows, idx = (np.array(v) for v in zip(*heads, strict=True))

            def patch_head(out, rows=rows, idx=idx, layer=layer):
                out = out.copy()
                out[rows, idx] = source.layers[layer].head_out[idx]
                return out
            hooks[f"blocks.{layer}.head_out"] = patch_head
    return hooks


def old_activation_patching(model, target, source, position, good, bad):
    target_trace, source_trace = model.forward(target), model.forward(source)
    n_layers, n_heads, n_pos = model.cfg.n_layers, model.cfg.n_heads, target_trace.tokens.shape[0]
    base = iv.logit_diff(target_trace, position, good, bad)
    residual = np.full((n_layers, n_pos), base)
    heads = np.full((n_layers, n_heads), base)
    t_in, s_in = old_block_inputs(target_trace), old_block_inputs(source_trace)
    sites = [iv.Site("resid", layer, p) for layer in range(n_layers) for p in range(n_pos)
             if not np.array_equal(t_in[layer][p], s_in[layer][p])]
    sites += [iv.Site("head", layer, h) for layer in range(n_layers) for h in range(n_heads)
              if not np.array_equal(target_trace.layers[layer].head_out[h], source_trace.layers[layer].head_out[h])]
    for layer in range(n_layers):
        chosen = [s for s in sites if s.layer == layer]
        if chosen:
            values = _old_patched_logit_diffs(model, t_in[layer], layer, old_patch_hooks(source_trace, chosen),
                                              len(chosen), position, good, bad)
            for site, value in zip(chosen, values, strict=True):
                (residual if site.kind == "resid" else heads)[site.layer, site.index] = value
    return iv.Patching(residual, heads, base, iv.logit_diff(source_trace, position, good, bad))


def _old_patched_logit_diffs(model, rows, layer, hooks, batch, position, good, bad):
    cfg, n_pos = model.cfg, rows.shape[0]
    positions = np.arange(n_pos)
    mask = layers.causal_mask(n_pos, n_pos) if cfg.causal else np.ones((n_pos, n_pos), bool)
    hook = hooks.get(f"blocks.{layer}.x")
    x = np.broadcast_to(rows, (batch, *rows.shape))
    x = hook(x) if hook is not None else x
    for i in range(layer, cfg.n_layers - 1):
        x = _old_block(model, i, x, positions, mask, {k: v for k, v in hooks.items() if k.endswith("head_out")}).y
    final = _old_last_block_row(model, x, position % n_pos, hooks.get(f"blocks.{cfg.n_layers - 1}.head_out"))
    if cfg.norm_placement == "pre":
        final = model.norm("norm_f", final)
    logits = final @ model.unembedding()[:, [good, bad]]
    return logits[:, 0] - logits[:, 1]


def _old_last_block_row(model, x, row, head_hook=None):
    cfg, i = model.cfg, model.cfg.n_layers - 1
    a, pre = f"blocks.{i}.attn", cfg.norm_placement == "pre"
    n_keys = row + 1 if cfg.causal else x.shape[-2]
    attn_in = model.norm(f"blocks.{i}.norm1", x[:, :n_keys]) if pre else x[:, :n_keys]
    q = layers.split_heads(model._linear(attn_in[:, row:row + 1], a, "q"), cfg.n_heads)
    k = layers.split_heads(model._linear(attn_in, a, "k"), cfg.n_kv_heads)
    v = layers.split_heads(model._linear(attn_in, a, "v"), cfg.n_kv_heads)
    if cfg.positions == "rope":
        q = layers.rope(q, np.array([row]), cfg.rope_base, cfg.rope_scale)
        k = layers.rope(k, np.arange(n_keys), cfg.rope_base, cfg.rope_scale)
    w_o = model.params[f"{a}.w_o"].reshape(cfg.n_model, cfg.n_heads, cfg.head_size).transpose(1, 2, 0)
    head_out = layers.attention(q, k, v).out @ w_o  # (B, H, 1, d)
    if head_hook is not None:
        full = np.broadcast_to(head_out, (*head_out.shape[:2], x.shape[-2], head_out.shape[-1]))
        head_out = np.asarray(head_hook(full))[:, :, row:row + 1]
    attn_out = head_out.sum(axis=-3)[:, 0]
    if cfg.bias:
        attn_out = attn_out + model.params[f"{a}.b_o"]
    h = x[:, row] + attn_out if pre else model.norm(f"blocks.{i}.norm1", x[:, row] + attn_out)
    ffn = _old_feed_forward(model, i, model.norm(f"blocks.{i}.norm2", h) if pre else h)
    return h + ffn.out if pre else model.norm(f"blocks.{i}.norm2", h + ffn.out)


@pytest.mark.parametrize("prompt", ["app", "long"])
@pytest.mark.parametrize("direction", ["clean into corrupted", "corrupted into clean"])
def test_patching_through_run_with_hooks_is_the_old_grid(shipped, prompt, direction):
    model, clean, corrupt, good, bad = shipped
    if prompt == "long":
        clean = np.random.default_rng(1).integers(0, model.cfg.n_vocab, model.cfg.n_ctx)
        corrupt = clean.copy()
        corrupt[[3, 20]] = (clean[[3, 20]] + 1) % model.cfg.n_vocab
    target, source = (corrupt, clean) if direction.startswith("clean") else (clean, corrupt)
    for position in (-1, 4):
        old = old_activation_patching(model, target, source, position, good, bad)
        new = iv.activation_patching(model, target, source, position, good, bad)
        np.testing.assert_allclose(new.residual, old.residual, rtol=0, atol=1e-12)
        np.testing.assert_allclose(new.heads, old.heads, rtol=0, atol=1e-12)
        assert (new.target, new.source) == (old.target, old.source)
        assert not np.allclose(new.residual, new.target)  # the grid shows something


def test_patching_any_hook_point(shipped):
    """patch_hook_point on resid_pre is the grid's residual rows; at other points (per position, or per position
    and head) it equals run_patched, the whole batched pass with the same sites."""
    model, clean, corrupt, good, bad = shipped
    grid = iv.activation_patching(model, corrupt, clean, -1, good, bad)
    np.testing.assert_allclose(iv.patch_hook_point(model, corrupt, clean, "resid_pre", -1, good, bad),
                               grid.residual, atol=1e-12)
    _, source_cache = model.run_with_cache(clean)
    source = model.forward(clean)
    for kind, per_head in (("z", True), ("pattern", True), ("mlp_out", False), ("ln2", False), ("k", True)):
        got = iv.patch_hook_point(model, corrupt, clean, kind, -1, good, bad, per_head=per_head)
        n = got.shape[2] if per_head else 1
        sites = [iv.Site(kind, layer, p, h if per_head else None) for layer in range(2) for p in range(len(clean))
                 for h in range(n)]
        full = iv.logit_diff(iv.run_patched(model, corrupt, source, sites, source_cache), -1, good, bad)
        np.testing.assert_allclose(got.reshape(-1), full, atol=1e-10, err_msg=kind)
        assert got.shape == ((2, len(clean), n) if per_head else (2, len(clean)))
    assert iv.patch_hook_point(model, corrupt, clean, "k", -1, good, bad, per_head=True).shape[2] == 8


# ---- the same weights in TransformerLens ----

def _hooked_transformer(model: slm.Model):
    torch = pytest.importorskip("torch")
    try:
        from transformer_lens import HookedTransformer, HookedTransformerConfig
    except ImportError as exc:  # not installed, or a version without HookedTransformer (4.0 removed it)
        pytest.skip(f"TransformerLens's HookedTransformer cannot be imported: {exc}")
    cfg, p = model.cfg, model.params
    tl_cfg = HookedTransformerConfig(
        n_layers=cfg.n_layers, d_model=cfg.n_model, n_ctx=cfg.n_ctx, d_head=cfg.head_size, n_heads=cfg.n_heads,
        d_vocab=cfg.n_vocab, d_mlp=cfg.d_ff, act_fn="gelu_new", normalization_type="LN", eps=cfg.eps,
        positional_embedding_type="rotary" if cfg.positions == "rope" else "standard",
        rotary_adjacent_pairs=True, rotary_dim=cfg.head_size, rotary_base=int(cfg.rope_base),
        use_attn_result=True, dtype=torch.float64, device="cpu")
    with warnings.catch_warnings():  # 3.x says HookedTransformer goes in 4.0: it is what the tutorials use
        warnings.simplefilter("ignore", DeprecationWarning)
        tl = HookedTransformer(tl_cfg)
    h, k, d = cfg.n_heads, cfg.head_size, cfg.n_model
    state = {"embed.W_E": p["tok_emb"], "unembed.W_U": p["unembed"], "ln_final.w": p["norm_f.weight"],
             "ln_final.b": p["norm_f.bias"]}
    if cfg.positions == "learned":
        state["pos_embed.W_pos"] = p["pos_emb"]
    for i in range(cfg.n_layers):
        b, t = f"blocks.{i}", f"blocks.{i}"
        for n in ("1", "2"):
            state[f"{t}.ln{n}.w"], state[f"{t}.ln{n}.b"] = p[f"{b}.norm{n}.weight"], p[f"{b}.norm{n}.bias"]
        for n in "QKV":  # slm: q = x @ w_q.T, head j its rows j*k:(j+1)*k; TransformerLens: W_Q[j] is (d, k)
            state[f"{t}.attn.W_{n}"] = p[f"{b}.attn.w_{n.lower()}"].reshape(h, k, d).transpose(0, 2, 1)
        state[f"{t}.attn.W_O"] = p[f"{b}.attn.w_o"].reshape(d, h, k).transpose(1, 2, 0)
        state[f"{t}.mlp.W_in"], state[f"{t}.mlp.W_out"] = p[f"{b}.ffn.w_in"], p[f"{b}.ffn.w_out"]
    own = tl.state_dict()
    for name, value in state.items():
        own[name] = torch.tensor(np.ascontiguousarray(value))
    for name in own:  # TransformerLens's biases, absent in this config, are zero
        if name.split(".")[-1] in ("b_Q", "b_K", "b_V", "b_O", "b_in", "b_out", "b_U"):
            own[name] = torch.zeros_like(own[name])
    tl.load_state_dict(own)
    return tl, torch


@pytest.mark.parametrize("positions", ["learned", "rope"])
def test_every_shared_hook_matches_transformer_lens(positions):
    model = _model(dict(positions=positions, activation="gelu", norm="layer", n_layers=2), seed=4)
    for name, value in model.params.items():  # norms that are not the identity
        if "norm" in name:
            model.params[name] = value + 0.2 * np.random.default_rng(5).standard_normal(value.shape)
    tl, torch = _hooked_transformer(model)
    logits, cache = model.run_with_cache(IDS)
    with torch.no_grad():
        tl_logits, tl_cache = tl.run_with_cache(torch.tensor(IDS))
    np.testing.assert_allclose(tl_logits.numpy(), logits, atol=1e-5)
    shared = [name for name in model.hook_names() if name in tl_cache]
    assert set(model.hook_names()) - set(shared) == set()  # every slm hook has a TransformerLens twin here
    for name in shared:
        theirs, ours = tl_cache[name].detach().numpy(), cache[name]
        assert theirs.shape == ours.shape, name
        finite = np.isfinite(ours)
        assert np.array_equal(finite, np.isfinite(theirs)) or name.endswith("hook_attn_scores"), name
        np.testing.assert_allclose(ours[finite], theirs[finite], atol=1e-5, err_msg=name)
