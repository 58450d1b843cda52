"""GPT-NeoX (Pythia) in slm: parallel attention and MLP (`parallel_residual`) and partial rotary (`rotary_dim`)
against equations written here, then GPTNeoXForCausalLM checkpoints made by `transformers` against the same models
run by `transformers` (logits within 1e-4 in float32, 20 greedy tokens), and every hook against TransformerLens's
HookedTransformer holding the weights TransformerLens's own NeoX conversion reads from the same checkpoint."""

from __future__ import annotations

import json
import warnings
from math import erf

import numpy as np
import pytest

import slm
from slm import hf, layers

BASE = dict(n_vocab=20, n_ctx=16, n_model=16, n_heads=2, n_layers=2, d_ff=24, positions="rope", bias=True)
NEOX = dict(BASE, parallel_residual=True, rotary_dim=4, activation="gelu_erf")
IDS = np.array([1, 5, 7, 3, 9, 2, 11, 4, 0, 6])


def _model(seed: int = 0, **kw) -> slm.Model:
    model = slm.Model.init(slm.Config(**{**NEOX, **kw}), seed)
    rng = np.random.default_rng(seed + 1)
    for value in model.params.values():  # norms and biases away from 1 and 0
        if value.ndim == 1:
            value += 0.3 * rng.standard_normal(value.shape)
    return model


def _layer_norm(x, w, b, eps=1e-5):
    centred = x - x.mean(-1, keepdims=True)
    return centred / np.sqrt((centred**2).mean(-1, keepdims=True) + eps) * w + b


def _turn(x, positions, r, base):
    """RoPE on the first r coordinates of x (T, k), pairs (2i, 2i+1) at angle p·base^(-2i/r); the rest as they are."""
    out = x.copy()
    for p, row in zip(positions, x, strict=True):
        for i in range(r // 2):
            a = p * base ** (-2 * i / r)
            out[p, 2 * i] = row[2 * i] * np.cos(a) - row[2 * i + 1] * np.sin(a)
            out[p, 2 * i + 1] = row[2 * i] * np.sin(a) + row[2 * i + 1] * np.cos(a)
    return out


# ---- the config ----

def test_config_fields_default_to_the_old_behaviour_and_are_checked():
    cfg = slm.Config(n_vocab=5, n_ctx=8, n_model=8, n_heads=2)
    assert cfg.parallel_residual is False and cfg.rotary_dim is None
    old = {k: v for k, v in cfg.to_dict().items() if k not in ("parallel_residual", "rotary_dim")}
    assert slm.Config.from_dict(old) == cfg  # files saved before these fields existed
    neox = slm.Config(**NEOX)
    assert slm.Config.from_json(neox.to_json()) == neox and neox.rope_dims == 4
    assert slm.Config(**BASE).rope_dims == 8
    assert slm.Config(**{**BASE, "n_model": 18, "rotary_dim": 4}).head_size == 9  # an odd head, an even r
    for bad, field in ((dict(rotary_dim=3), "rotary_dim"), (dict(rotary_dim=10), "rotary_dim"),
                       (dict(rotary_dim=0), "rotary_dim"), (dict(rotary_dim=4, positions="learned"), "rotary_dim"),
                       (dict(parallel_residual=1), "parallel_residual"),
                       (dict(parallel_residual=True, norm_placement="post"), "parallel_residual")):
        with pytest.raises(ValueError, match=f"Config.{field}"):
            slm.Config(**{**BASE, **bad})


def test_saved_model_keeps_the_new_fields(tmp_path):
    model = _model()
    model.save(tmp_path / "m.npz")
    back = slm.load(tmp_path / "m.npz")
    assert back.cfg == model.cfg
    np.testing.assert_array_equal(back.forward(IDS).logits, model.forward(IDS).logits)


# ---- the forward pass against the equations ----

def test_partial_rope_turns_the_first_r_coordinates_only():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 6, 8))  # (heads, T, k)
    positions = np.arange(6)
    turned = layers.rope(x, positions, 50.0, dims=4)
    for head in range(3):
        np.testing.assert_allclose(turned[head], _turn(x[head], positions, 4, 50.0), atol=1e-12)
    np.testing.assert_array_equal(layers.rope(x, positions, 50.0, dims=8), layers.rope(x, positions, 50.0))


@pytest.mark.parametrize("parallel", [True, False])
def test_a_block_is_the_equations(parallel):
    """y = x + Attn(N1(x)) + FFN(N2(x)) (parallel) or h = x + Attn(N1(x)), y = h + FFN(N2(h)), with attention
    written out here: RoPE on the first r coordinates of each head, exact GELU."""
    model = _model(parallel_residual=parallel)
    cfg, p, trace = model.cfg, model.params, model.forward(IDS)
    x, k, t = trace.x, cfg.head_size, len(IDS)
    causal = np.tril(np.ones((t, t), bool))
    for i, layer in enumerate(trace.layers):
        b = f"blocks.{i}"
        a = _layer_norm(x, p[f"{b}.norm1.weight"], p[f"{b}.norm1.bias"])
        attn = np.broadcast_to(p[f"{b}.attn.b_o"], x.shape).copy()
        for j in range(cfg.n_heads):
            rows = slice(j * k, (j + 1) * k)
            q, kk, v = (a @ p[f"{b}.attn.w_{n}"][rows].T + p[f"{b}.attn.b_{n}"][rows] for n in "qkv")
            q, kk = _turn(q, np.arange(t), 4, cfg.rope_base), _turn(kk, np.arange(t), 4, cfg.rope_base)
            scores = np.where(causal, q @ kk.T / np.sqrt(k), -np.inf)
            weights = np.exp(scores - scores.max(-1, keepdims=True))
            weights /= weights.sum(-1, keepdims=True)
            np.testing.assert_allclose(layer.attention[j], weights, atol=1e-12)
            attn += weights @ v @ p[f"{b}.attn.w_o"][:, rows].T
        np.testing.assert_allclose(layer.attn_out, attn, atol=1e-12)
        mid = x if parallel else x + attn  # what the FFN's norm reads
        f = _layer_norm(mid, p[f"{b}.norm2.weight"], p[f"{b}.norm2.bias"])
        pre = f @ p[f"{b}.ffn.w_in"] + p[f"{b}.ffn.b_in"]
        act = pre * 0.5 * (1 + np.vectorize(erf)(pre / np.sqrt(2)))
        y = x + attn + act @ p[f"{b}.ffn.w_out"] + p[f"{b}.ffn.b_out"]
        np.testing.assert_allclose(layer.y, y, rtol=1e-6, atol=1e-6)  # slm's erf is a fit to 1.2e-7
        assert (layer.h is None) == parallel
        x = layer.y  # the next block from slm's own input: the erf fit's rounding does not build up


def test_hooks_of_a_parallel_model_have_no_resid_mid():
    model, sequential = _model(), _model(parallel_residual=False)
    names = model.hook_names()
    assert [n for n in sequential.hook_names() if not n.endswith("hook_resid_mid")] == names
    logits, cache = model.run_with_cache(IDS)
    assert list(cache) == names
    trace = model.forward(IDS)
    np.testing.assert_array_equal(logits[0], trace.logits)
    layer = trace.layers[1]
    np.testing.assert_array_equal(layer.ffn_in, cache["normalized", 1, "ln2"][0] * model.params["blocks.1.norm2.weight"]
                                  + model.params["blocks.1.norm2.bias"])
    np.testing.assert_allclose(cache["resid_post", 1], cache["resid_pre", 1] + cache["attn_out", 1]
                               + cache["mlp_out", 1], atol=1e-12)
    stack, labels = cache.accumulated_resid(incl_mid=True, return_labels=True)
    assert labels == ["0_pre", "1_pre", "final_post"]
    parts = cache.decompose_resid()
    np.testing.assert_allclose(parts.sum(0), cache["resid_post", 1], atol=1e-12)
    with pytest.raises(ValueError, match="hook_resid_mid"):
        model.run_with_hooks(IDS, fwd_hooks=[("blocks.0.hook_resid_mid", lambda v, hook: None)])
    # attribution: the components still sum to the last residual; the stages have no h
    comps = slm.attribution.residual_components(model, trace)
    np.testing.assert_allclose(comps.vectors.sum(0), trace.layers[-1].y, atol=1e-12)
    assert [n for n, _ in slm.attribution.residual_stages(trace)] == ["x", "L0.y", "L1.y"]


def test_cache_output_positions_and_layers_agree_with_the_full_pass():
    model = _model()
    full, cache = model.run_with_cache(IDS)
    np.testing.assert_allclose(model.run_with_hooks(IDS, output_positions=[3, -1]), full[:, [3, -1]], atol=1e-12)
    np.testing.assert_array_equal(model.run_with_hooks(cache["resid_pre", 1], start_at_layer=1), full)
    np.testing.assert_array_equal(model.run_with_hooks(IDS, stop_at_layer=1), cache["resid_pre", 1])
    cached = [s.token for s in slm.generate(model, IDS[:3], 10, temperature=0)]
    recomputed = [s.token for s in slm.generate(model, IDS[:3], 10, temperature=0, use_cache=False)]
    assert cached == recomputed


def test_the_lesson_model_takes_the_switches():
    lesson = slm.CausalLanguageModel(positions="rope", parallel_residual=True, rotary_dim=2)
    trace = lesson.respond_to(np.array([0, 1, 2]))
    assert trace.layers[0].h is None and lesson.cfg.rope_dims == 2
    np.testing.assert_allclose(trace.layers[0].y, trace.x + trace.layers[0].attn_out + trace.layers[0].ff_out,
                               atol=1e-12)


# ---- GPTNeoXForCausalLM checkpoints made by transformers ----

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from test_slm_checkpoints import VOCAB, assert_matches, hf_logits, save, spread  # noqa: E402 (the same checks)

# Pythia's shape in small: head size 16, so rotary_pct 0.25 turns 4 coordinates of each head.
NEOX_CONFIGS = {
    "pythia-parallel-quarter": dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2,
                                    intermediate_size=128, rotary_pct=0.25),
    "sequential-full-rotary": dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=3, intermediate_size=96,
                                   rotary_pct=1.0, use_parallel_residual=False, rotary_emb_base=500),
    "half-tanh-no-attention-bias-tied": dict(hidden_size=48, num_attention_heads=4, num_hidden_layers=2,
                                             intermediate_size=64, rotary_pct=0.5, hidden_act="gelu_new",
                                             attention_bias=False, tie_word_embeddings=True, layer_norm_eps=1e-6),
}


@pytest.fixture(scope="module")
def tokenizer():
    from testkit.trained_tokenizers import gpt2_style

    return gpt2_style(vocab_size=VOCAB)


def make_neox(name: str, seed: int = 0):
    cfg = transformers.GPTNeoXConfig(vocab_size=VOCAB, max_position_embeddings=48, bos_token_id=0, eos_token_id=0,
                                     **NEOX_CONFIGS[name])
    return spread(transformers.GPTNeoXForCausalLM(cfg), seed)


@pytest.mark.parametrize("name", NEOX_CONFIGS)
def test_neox_matches_transformers(name, tmp_path, tokenizer):
    torch.set_num_threads(1)
    model = save(make_neox(name), tokenizer, tmp_path)
    ours = slm.load(tmp_path)
    spec = NEOX_CONFIGS[name]
    k = spec["hidden_size"] // spec["num_attention_heads"]
    cfg = ours.cfg
    assert (cfg.parallel_residual, cfg.rope_dims, cfg.tied, cfg.n_layers) == (
        spec.get("use_parallel_residual", True), int(k * spec["rotary_pct"]), spec.get("tie_word_embeddings", False),
        spec["num_hidden_layers"])
    assert cfg.activation == ("gelu" if spec.get("hidden_act") == "gelu_new" else "gelu_erf")
    assert "GPTNeoXForCausalLM" in ours.meta["source"]
    assert_matches(model, ours, tokenizer)


@pytest.mark.parametrize("name", ["pythia-parallel-quarter", "half-tanh-no-attention-bias-tied"])
def test_in_place_loading_keeps_the_weights_in_the_given_buffers(name, tmp_path, tokenizer):
    """query_key_value's three parts, rearranged within its own bytes; only biases the file lacks are made."""
    model = save(make_neox(name), tokenizer, tmp_path)
    files = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    reference = slm.load(files)
    handed = {key: bytearray(data) for key, data in files.items()}
    ours = slm.load(handed, in_place=True)
    weights = np.frombuffer(handed["model.safetensors"], np.uint8)
    for key, value in reference.params.items():
        np.testing.assert_array_equal(ours.params[key], value, err_msg=key)
    made = () if NEOX_CONFIGS[name].get("attention_bias", True) else ("attn.b_q", "attn.b_k", "attn.b_v", "attn.b_o")
    shared = [key for key, value in ours.params.items() if np.shares_memory(value, weights)]
    assert sorted(shared) == sorted(k for k in ours.params if not k.endswith(made))
    assert_matches(model, ours, tokenizer)


def test_pythias_own_file_layout_loads(tmp_path, tokenizer):
    """Pythia's config.json names rotary_pct and rotary_emb_base (no rope_parameters), and its weights carry the
    causal-mask and frequency buffers older transformers saved; transformers reads it as the same model."""
    torch.set_num_threads(1)
    import safetensors.torch

    model = save(make_neox("pythia-parallel-quarter", seed=3), tokenizer, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    rope = config.pop("rope_parameters")
    config.update(rotary_pct=rope["partial_rotary_factor"], rotary_emb_base=rope["rope_theta"],
                  transformers_version="4.24.0", torch_dtype="float32")
    (tmp_path / "config.json").write_text(json.dumps(config))
    weights = safetensors.torch.load_file(tmp_path / "model.safetensors")
    assert "embed_out.weight" in weights  # what save_pretrained writes, as Pythia's files have it
    for i in range(config["num_hidden_layers"]):
        t = f"gpt_neox.layers.{i}.attention"
        weights[f"{t}.bias"] = torch.tril(torch.ones(48, 48, dtype=torch.bool))[None, None]
        weights[f"{t}.masked_bias"] = torch.tensor(-1e9)
        weights[f"{t}.rotary_emb.inv_freq"] = torch.ones(2)
    safetensors.torch.save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reread = transformers.GPTNeoXForCausalLM.from_pretrained(tmp_path).eval()
    ids = np.arange(12) * 7 % VOCAB
    np.testing.assert_array_equal(hf_logits(reread, ids), hf_logits(model, ids))
    ours = slm.load(tmp_path)
    assert ours.cfg.rope_dims == 4 and ours.cfg.parallel_residual
    assert_matches(model, ours, tokenizer)


def test_config_fields_slm_does_not_compute_are_named():
    good = dict(model_type="gpt_neox", hidden_size=64, num_attention_heads=4, num_hidden_layers=2,
                intermediate_size=96, vocab_size=100, rotary_pct=0.25)
    assert hf.config_from_hf(good).rope_dims == 4
    assert hf.config_from_hf({k: v for k, v in good.items() if k != "rotary_pct"}).rope_dims == 4  # HF's default
    for bad, field in ((dict(rotary_pct=0.1), "rotary_pct"), (dict(rotary_pct=0), "rotary_pct"),
                       (dict(hidden_act="gelu_fast"), "hidden_act"),
                       (dict(rope_scaling={"type": "dynamic", "factor": 2.0}), "rope scaling"),
                       (dict(rope_parameters={"rope_type": "linear", "factor": 2.0}), "rope scaling"),
                       (dict(architectures=["GPTNeoXForSequenceClassification"]), "architectures"),
                       (dict(hidden_size=65), "hidden_size")):
        with pytest.raises(ValueError, match=f"config.json: {field}"):
            hf.config_from_hf({**good, **bad})


# ---- the hooks against TransformerLens, which converts the same checkpoint itself ----

def _rotate_half_index(k: int, r: int) -> np.ndarray:
    """For each of slm's coordinates of a head, the coordinate of transformers' layout holding the same value:
    slm pairs (2i, 2i + 1) where transformers pairs (i, i + r/2); coordinates from r on are the same."""
    return np.array([c // 2 + (c % 2) * (r // 2) if c < r else c for c in range(k)])


@pytest.mark.parametrize("name", ["pythia-parallel-quarter", "sequential-full-rotary"])
def test_every_hook_matches_transformer_lens(name, tmp_path, tokenizer):
    torch.set_num_threads(1)
    try:
        from transformer_lens import HookedTransformer, HookedTransformerConfig
        from transformer_lens.pretrained.weight_conversions.neox import convert_neox_weights
    except ImportError as exc:  # not installed, or a version without HookedTransformer (4.0 removed it)
        pytest.skip(f"TransformerLens's HookedTransformer cannot be imported: {exc}")
    reference = save(make_neox(name, seed=1), tokenizer, tmp_path)
    ours = slm.load(tmp_path)
    hc = reference.config
    k = hc.hidden_size // hc.num_attention_heads
    r = int(k * hc.rope_parameters["partial_rotary_factor"])
    # The fields TransformerLens's loader sets for GPTNeoXForCausalLM, plus each head's result.
    tl_cfg = HookedTransformerConfig(
        d_model=hc.hidden_size, d_head=k, n_heads=hc.num_attention_heads, d_mlp=hc.intermediate_size,
        n_layers=hc.num_hidden_layers, n_ctx=hc.max_position_embeddings, eps=hc.layer_norm_eps,
        d_vocab=hc.vocab_size, act_fn=hc.hidden_act, parallel_attn_mlp=hc.use_parallel_residual,
        positional_embedding_type="rotary", rotary_adjacent_pairs=False, rotary_dim=r,
        rotary_base=hc.rope_parameters["rope_theta"], normalization_type="LN",
        original_architecture="GPTNeoXForCausalLM", use_attn_result=True, device="cpu", dtype=torch.float32)
    with warnings.catch_warnings():  # 3.x says HookedTransformer goes in 4.0: it is what the tutorials use
        warnings.simplefilter("ignore", DeprecationWarning)
        tl = HookedTransformer(tl_cfg)
    state = tl.state_dict()
    state.update(convert_neox_weights(reference, tl_cfg))
    tl.load_state_dict(state)
    ids = np.array([[3, 17, 250, 9, 41, 41, 7, 120, 3, 17]])
    logits, cache = ours.run_with_cache(ids)
    with torch.no_grad():
        tl_logits, tl_cache = tl.run_with_cache(torch.tensor(ids))
    np.testing.assert_allclose(tl_logits.numpy(), logits, atol=1e-4)
    names = ours.hook_names()
    assert not [n for n in names if n not in tl_cache]  # every slm hook has its TransformerLens twin
    assert any(n.endswith("hook_resid_mid") for n in tl_cache) != hc.use_parallel_residual
    in_head = _rotate_half_index(k, r)
    for name in names:
        theirs, mine = tl_cache[name].numpy(), cache[name]
        if name.endswith(("hook_q", "hook_k", "hook_rot_q", "hook_rot_k")):
            theirs = theirs[..., in_head]
        finite = np.isfinite(mine)
        assert theirs.shape == mine.shape, name
        assert np.array_equal(finite, np.isfinite(theirs)) or name.endswith("hook_attn_scores"), name
        np.testing.assert_allclose(mine[finite], theirs[finite], atol=1e-4, err_msg=name)
