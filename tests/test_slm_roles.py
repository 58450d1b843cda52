"""slm.roles: each role score equals a re-computation written here from the attention weights, with loops over
the positions a role names (the classic formulas: t -> t-1; t -> t-L+1 on R + R; ...). The last tests run the
same checks on deliberately wrong detectors and show that they fail."""

from __future__ import annotations

import numpy as np
import pytest

import slm
from slm import roles


def _words(text: str) -> list[str]:
    return text.split()


def _model(seed: int = 0, **kw) -> slm.Model:
    cfg = slm.Config(**{**dict(n_vocab=20, n_ctx=32, n_model=16, n_heads=4, n_layers=2, d_ff=32), **kw})
    model = slm.Model.init(cfg, seed)
    rng = np.random.default_rng(seed)
    for name in model.params:  # sharper attention than the init's, so that the heads differ a lot
        if ".w_q" in name or ".w_k" in name:
            model.params[name] = model.params[name] * 4 + 0.3 * rng.standard_normal(model.params[name].shape)
    return model


def _by_hand_previous(att: np.ndarray) -> np.ndarray:
    n_layers, n_heads, n_pos, _ = att.shape
    out = np.zeros((n_layers, n_heads))
    for layer in range(n_layers):
        for head in range(n_heads):
            out[layer, head] = np.mean([att[layer, head, t, t - 1] for t in range(1, n_pos)])
    return out


def _by_hand_repeat(att: np.ndarray, length: int, shift: int) -> np.ndarray:
    """On <start> + R + R: mean over the second copy's rows t of the weight on t - length + shift
    (shift 1: induction, the token after the earlier copy; shift 0: duplicate, the earlier copy itself)."""
    rows = range(1 + length, 1 + 2 * length)
    return np.mean([att[:, :, t, t - length + shift] for t in rows], axis=0)


def check_previous(detector) -> None:
    model = _model()
    ids = np.random.default_rng(1).integers(0, 20, size=17)
    trace = model.forward(ids)
    np.testing.assert_allclose(detector(trace, list(ids)), _by_hand_previous(trace.attention), rtol=0, atol=1e-12)


def check_repeat(detector, shift: int) -> None:
    model = _model(seed=3)
    rng = np.random.default_rng(2)
    for length in (3, 7, 12):
        ids = roles.repeated_tokens(range(1, 20), length, rng, start_id=0)
        trace = model.forward(ids)
        np.testing.assert_allclose(detector(trace, list(ids)), _by_hand_repeat(trace.attention, length, shift),
                                   rtol=0, atol=1e-12)


def real(role: str):
    return lambda trace, ids: roles.role_scores(trace, ids)[role].scores


def test_previous_token_score():
    check_previous(real("previous_token"))


def test_induction_score_on_a_repeated_random_sequence():
    check_repeat(real("induction"), shift=1)


def test_duplicate_token_score_on_a_repeated_random_sequence():
    check_repeat(real("duplicate_token"), shift=0)


def test_pronoun_and_bracket_targets_by_hand():
    words = _words("<start> the cat chased the balls because they rolled . the dog saw it")
    numbers = {"cat": "sg", "balls": "pl", "dog": "sg"}
    assert roles.pronoun_targets(words, numbers) == [(7, [5])]  # "it" at the end: no noun of the other number
    words = _words("<start> the dog ( near the barn [ the old one ] by the river ) ran .")
    assert roles.bracket_targets(words) == [(10, [7]), (14, [3])]
    assert roles.bracket_targets(_words("( a ] b )")) == []  # unmatched: no target


def test_pronoun_and_bracket_scores_are_the_weights_on_those_cells():
    model = _model(seed=5, n_vocab=40)
    words = _words("<start> the dog ( near the cats [ the old one ] by the river ) chased the ball because it ran")
    ids = np.arange(len(words)) % 40
    trace = model.forward(ids)
    att = trace.attention
    scores = roles.role_scores(trace, words, {"dog": "sg", "cats": "pl", "river": "sg", "ball": "sg"})
    # "it" (row 20): the singular nouns since the last "." (dog, river, ball), not "cats"
    np.testing.assert_allclose(scores["pronoun"].scores, att[:, :, 20, 2] + att[:, :, 20, 14] + att[:, :, 20, 18],
                               atol=1e-12)
    np.testing.assert_allclose(scores["bracket"].scores, (att[:, :, 10, 7] + att[:, :, 14, 3]) / 2, atol=1e-12)
    assert scores["pronoun"].n == 1 and scores["bracket"].n == 2


def test_no_instance_gives_nan_and_zero_count():
    model = _model()
    trace = model.forward(np.array([1, 2, 3]))
    score = roles.role_scores(trace, ["a", "b", "c"])["bracket"]
    assert score.n == 0 and np.isnan(score.scores).all()
    assert roles.strongest(score) is None
    with pytest.raises(ValueError, match="3"):
        roles.role_scores(trace, ["a", "b"])
    with pytest.raises(ValueError, match="role"):
        roles.role_targets("copying", ["a"])


def test_mean_scores_weights_every_row_once():
    a = roles.RoleScore(np.array([[1.0]]), 1)
    b = roles.RoleScore(np.array([[0.0]]), 3)
    assert roles.mean_scores([a, b]).scores[0, 0] == pytest.approx(0.25)
    assert roles.mean_scores([a, b]).n == 4


def test_strongest_names_the_argmax():
    score = roles.RoleScore(np.array([[0.1, 0.2], [0.9, 0.3]]), 5)
    assert roles.strongest(score) == (1, 0)


def test_copy_positions_predict_the_first_copys_next_token():
    ids = roles.repeated_tokens(range(10, 30), 6, np.random.default_rng(0), start_id=1)
    rows = roles.copy_positions(6)
    assert len(set(ids[1:7].tolist())) == 6
    for t in rows:  # the next token equals the one after the same token's first occurrence
        first = int(np.flatnonzero(ids[:t] == ids[t])[0])
        assert ids[t + 1] == ids[first + 1]
    assert rows.tolist() == list(range(7, 12))


# ---- the checks above reject wrong detectors ----

def test_the_checks_reject_wrong_detectors():
    def off_by_one_previous(trace, ids):  # t -> t-2
        return roles.score_targets(trace, [(t, [t - 2]) for t in range(2, len(ids))]).scores

    def induction_without_the_shift(trace, ids):  # the earlier occurrence instead of the token after it
        return roles.score_targets(trace, roles.duplicate_token_targets(ids)).scores

    def induction_summing_rows(trace, ids):  # a sum over rows instead of a mean
        targets = roles.induction_targets(ids)
        return roles.score_targets(trace, targets).scores * len([t for t in targets if t[1]])

    with pytest.raises(AssertionError):
        check_previous(off_by_one_previous)
    with pytest.raises(AssertionError):
        check_repeat(induction_without_the_shift, shift=1)
    with pytest.raises(AssertionError):
        check_repeat(induction_summing_rows, shift=1)
    with pytest.raises(AssertionError):
        check_repeat(real("duplicate_token"), shift=1)
