"""slm.Config and the parameter contract (slm.params): validation, JSON, shapes, exact counts, initialisation."""

from __future__ import annotations

import dataclasses
import itertools
import json

import numpy as np
import pytest

import slm
from slm.params import check_params

BASE = dict(n_vocab=11, n_ctx=8, n_model=12, n_heads=3)


# ---- Config ----


def test_defaults():
    cfg = slm.Config(**BASE)
    assert cfg.n_layers == 1 and cfg.d_ff == 48 and cfg.n_kv_heads == 3
    assert (cfg.activation, cfg.norm, cfg.norm_placement, cfg.positions) == ("relu", "layer", "pre", "sinusoidal")
    assert cfg.rope_base == 10000 and cfg.rope_scale == 1.0 and cfg.eps == 1e-5
    assert cfg.causal is True and cfg.bias is False and cfg.tied is False
    assert cfg.head_size == 4 and cfg.group_size == 1


def test_config_is_frozen_and_hashable():
    cfg = slm.Config(**BASE)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.n_model = 4  # type: ignore[misc]
    assert hash(cfg) == hash(slm.Config(**BASE))


def test_json_round_trip_all_fields():
    cfg = slm.Config(n_vocab=50, n_ctx=33, n_model=24, n_heads=6, n_kv_heads=2, n_layers=3, d_ff=40,
                     activation="swiglu", norm="rms", norm_placement="post", positions="rope", rope_base=500.0,
                     rope_scale=2.5, causal=False, bias=True, tied=True, eps=1e-6)
    text = cfg.to_json()
    assert json.loads(text)["rope_scale"] == 2.5
    assert slm.Config.from_json(text) == cfg
    assert slm.Config.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize(
    "changes,field",
    [
        (dict(n_vocab=0), "n_vocab"),
        (dict(n_ctx=-1), "n_ctx"),
        (dict(n_model=12.0), "n_model"),
        (dict(n_heads=True), "n_heads"),
        (dict(n_heads=5), "n_heads"),  # 12 % 5
        (dict(n_kv_heads=2), "n_kv_heads"),  # does not divide 3
        (dict(n_kv_heads=6), "n_kv_heads"),
        (dict(n_kv_heads=0), "n_kv_heads"),
        (dict(n_layers=0), "n_layers"),
        (dict(d_ff=0), "d_ff"),
        (dict(activation="tanh"), "activation"),
        (dict(norm="batch"), "norm"),
        (dict(norm_placement="middle"), "norm_placement"),
        (dict(positions="alibi"), "positions"),
        (dict(rope_base=0.0), "rope_base"),
        (dict(rope_scale=-1.0), "rope_scale"),
        (dict(eps=0), "eps"),
        (dict(causal=1), "causal"),
        (dict(bias="no"), "bias"),
        (dict(tied=None), "tied"),
    ],
)
def test_invalid_field_is_a_value_error_naming_it(changes, field):
    with pytest.raises(ValueError, match=field):
        slm.Config(**{**BASE, **changes})


def test_odd_head_size_with_rope_and_odd_width_with_sinusoids_are_rejected():
    with pytest.raises(ValueError, match="positions"):
        slm.Config(n_vocab=5, n_ctx=4, n_model=9, n_heads=3, positions="rope")
    with pytest.raises(ValueError, match="positions"):
        slm.Config(n_vocab=5, n_ctx=4, n_model=9, n_heads=3, positions="sinusoidal")
    slm.Config(n_vocab=5, n_ctx=4, n_model=9, n_heads=3, positions="learned")  # fine


def test_from_json_and_from_dict_errors():
    with pytest.raises(ValueError, match="JSON"):
        slm.Config.from_json("{not json")
    with pytest.raises(ValueError, match="colour"):
        slm.Config.from_dict({**BASE, "colour": "red"})
    with pytest.raises(ValueError, match="n_heads"):
        slm.Config.from_dict({"n_vocab": 3, "n_ctx": 2, "n_model": 4})
    with pytest.raises(ValueError):
        slm.Config.from_json("[1, 2]")


def test_replace_revalidates_and_rederives():
    cfg = slm.Config(**BASE)
    wider = cfg.replace(n_model=24)
    assert wider.d_ff == 96 and wider.n_kv_heads == 3
    assert cfg.replace(n_heads=6).n_kv_heads == 6
    assert slm.Config(**BASE, d_ff=7).replace(n_model=24).d_ff == 7
    with pytest.raises(ValueError, match="n_heads"):
        cfg.replace(n_heads=5)


# ---- parameter shapes: the documented contract ----


def test_param_shapes_contract_full():
    cfg = slm.Config(n_vocab=13, n_ctx=7, n_model=12, n_heads=6, n_kv_heads=2, n_layers=2, d_ff=20,
                     activation="swiglu", positions="learned", bias=True)
    d, k, f, h, g, v, c = 12, 2, 20, 6, 2, 13, 7
    expected = {"tok_emb": (v, d), "pos_emb": (c, d)}
    for i in range(2):
        b = f"blocks.{i}"
        expected.update({
            f"{b}.norm1.weight": (d,), f"{b}.norm1.bias": (d,),
            f"{b}.attn.w_q": (h * k, d), f"{b}.attn.w_k": (g * k, d), f"{b}.attn.w_v": (g * k, d),
            f"{b}.attn.w_o": (d, h * k),
            f"{b}.attn.b_q": (h * k,), f"{b}.attn.b_k": (g * k,), f"{b}.attn.b_v": (g * k,), f"{b}.attn.b_o": (d,),
            f"{b}.norm2.weight": (d,), f"{b}.norm2.bias": (d,),
            f"{b}.ffn.w_in": (d, f), f"{b}.ffn.w_gate": (d, f), f"{b}.ffn.w_out": (f, d),
            f"{b}.ffn.b_in": (f,), f"{b}.ffn.b_out": (d,),
        })
    expected.update({"norm_f.weight": (d,), "norm_f.bias": (d,), "unembed": (d, v)})
    assert slm.param_shapes(cfg) == expected


def test_param_shapes_minimal_options():
    cfg = slm.Config(n_vocab=5, n_ctx=4, n_model=8, n_heads=2, norm="rms", norm_placement="post", positions="rope",
                     tied=True)
    assert slm.param_shapes(cfg) == {
        "tok_emb": (5, 8),
        "blocks.0.norm1.weight": (8,),
        "blocks.0.attn.w_q": (8, 8), "blocks.0.attn.w_k": (8, 8), "blocks.0.attn.w_v": (8, 8),
        "blocks.0.attn.w_o": (8, 8),
        "blocks.0.norm2.weight": (8,),
        "blocks.0.ffn.w_in": (8, 32), "blocks.0.ffn.w_out": (32, 8),
    }


def _hand_count(cfg: slm.Config) -> int:
    """The parameter count written out from the contract, one term per option."""
    d, f, v, c, k = cfg.n_model, cfg.d_ff, cfg.n_vocab, cfg.n_ctx, cfg.n_model // cfg.n_heads
    h, g = cfg.n_heads, cfg.n_kv_heads
    norm = 2 * d if cfg.norm == "layer" else d
    attn = h * k * d + 2 * g * k * d + d * h * k + ((h * k + 2 * g * k + d) if cfg.bias else 0)
    ffn = (3 if cfg.activation == "swiglu" else 2) * d * f + ((f + d) if cfg.bias else 0)
    total = v * d + cfg.n_layers * (2 * norm + attn + ffn)
    total += c * d if cfg.positions == "learned" else 0
    total += norm if cfg.norm_placement == "pre" else 0
    total += 0 if cfg.tied else d * v
    return total


OPTIONS = list(itertools.product(("relu", "gelu", "swiglu"), ("layer", "rms"), ("pre", "post"),
                                 ("sinusoidal", "learned", "rope", "none"), (False, True), (False, True), (1, 2, 4)))


@pytest.mark.parametrize("activation,norm,placement,positions,bias,tied,g", OPTIONS)
def test_count_params_matches_hand_formula(activation, norm, placement, positions, bias, tied, g):
    cfg = slm.Config(n_vocab=17, n_ctx=9, n_model=16, n_heads=4, n_kv_heads=g, n_layers=3, d_ff=24,
                     activation=activation, norm=norm, norm_placement=placement, positions=positions, bias=bias,
                     tied=tied)
    assert slm.count_params(cfg) == _hand_count(cfg)
    assert slm.count_params(cfg) == sum(a.size for a in slm.init_params(cfg).values())


def test_count_params_worked_example():
    # V=10, C=8, d=16, h=4, f=64, 1 layer, LN, pre, sinusoidal, no bias, untied:
    # 160 (tok_emb) + 2*32 (norms) + 3072 (12 d^2) + 32 (norm_f) + 160 (unembed) = 3488
    cfg = slm.Config(n_vocab=10, n_ctx=8, n_model=16, n_heads=4, d_ff=64)
    assert slm.count_params(cfg) == 3488


# ---- initialisation ----


def test_init_is_reproducible_and_seeded():
    cfg = slm.Config(**BASE, n_layers=2, bias=True, positions="learned")
    a, b, c = slm.init_params(cfg, 4), slm.init_params(cfg, 4), slm.init_params(cfg, 5)
    assert list(a) == list(slm.param_shapes(cfg))
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
    assert not np.array_equal(a["tok_emb"], c["tok_emb"])
    m1, m2 = slm.Model.init(cfg, seed=4), slm.Model.init(cfg, seed=4)
    for name in m1.params:
        np.testing.assert_array_equal(m1.params[name], m2.params[name])


def test_init_values():
    cfg = slm.Config(n_vocab=400, n_ctx=8, n_model=64, n_heads=4, n_layers=2, bias=True)
    p = slm.init_params(cfg, 0)
    assert np.all(p["blocks.0.norm1.weight"] == 1.0) and np.all(p["blocks.1.norm2.bias"] == 0.0)
    assert np.all(p["norm_f.weight"] == 1.0) and np.all(p["blocks.0.attn.b_q"] == 0.0)
    assert np.all(p["blocks.0.ffn.b_in"] == 0.0)
    assert abs(p["tok_emb"].std() - 1.0) < 0.05
    assert abs(p["blocks.0.attn.w_q"].std() - 64**-0.5) < 0.1 * 64**-0.5
    assert abs(p["blocks.0.ffn.w_in"].std() - 64**-0.5) < 0.1 * 64**-0.5
    assert abs(p["blocks.0.ffn.w_out"].std() - 256**-0.5 / 2) < 0.1 * 256**-0.5 / 2  # 1/sqrt(2 * 2 layers)
    assert p["tok_emb"].dtype == np.float64
    assert slm.init_params(cfg, 0, np.float32)["tok_emb"].dtype == np.float32


def test_check_params_names_the_problem():
    cfg = slm.Config(**BASE)
    p = slm.init_params(cfg)
    check_params(cfg, p)
    with pytest.raises(ValueError, match="blocks.0.attn.w_k"):
        check_params(cfg, {n: a for n, a in p.items() if n != "blocks.0.attn.w_k"})
    with pytest.raises(ValueError, match="pos_emb"):
        check_params(cfg, {**p, "pos_emb": np.zeros((8, 12))})
    with pytest.raises(ValueError, match="unembed"):
        check_params(cfg, {**p, "unembed": np.zeros((11, 12))})
    with pytest.raises(ValueError, match="tok_emb"):
        check_params(cfg, {**p, "tok_emb": np.zeros((11, 12), dtype=int)})
