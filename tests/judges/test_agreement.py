"""Majority vote, safety combination and Cohen's kappa on hand-computed data."""

from __future__ import annotations

import pytest

from tasks.core.votes import cohen_kappa, combine_safety, majority_vote, pairwise_agreement


def test_majority_single_judge_passes_through():
    assert majority_vote([(True, None)]) == (True, None)
    assert majority_vote([(False, None)]) == (False, None)
    assert majority_vote([(None, "invalid_output: x")]) == (None, "invalid_output: x")


def test_majority_needs_strict_majority_of_all_judges():
    assert majority_vote([(True, None), (True, None), (False, None)]) == (True, None)
    assert majority_vote([(False, None), (False, None), (True, None)]) == (False, None)
    # An unscored judge still counts: 2 of 3 agree -> carried.
    assert majority_vote([(True, None), (True, None), (None, "e")]) == (True, None)
    # 1 yes, 1 no, 1 unscored: nobody has 2 of 3.
    value, why = majority_vote([(True, None), (False, None), (None, "e")])
    assert value is None and why == "no majority (1 fulfilled, 1 not, 1 unscored)"
    # Two judges, one unscored: 1 of 2 is not a majority.
    assert majority_vote([(True, None), (None, "e")])[0] is None


def test_majority_tie_is_unscored_with_reason_tie():
    assert majority_vote([(True, None), (False, None)]) == (None, "tie")
    assert majority_vote([(True, None), (False, None)] * 2) == (None, "tie")


def test_majority_all_unscored_keeps_reasons():
    value, why = majority_vote([(None, "empty_output: a"), (None, "api_error: b")])
    assert value is None and "empty_output: a" in why and "api_error: b" in why


def test_majority_empty_is_an_error():
    with pytest.raises(ValueError):
        majority_vote([])


def test_combine_safety_lower_median():
    assert combine_safety([(3, "r3")]) == (3, "r3")
    assert combine_safety([(None, "bad")]) == (None, "bad")
    assert combine_safety([(1, "a"), (5, "b"), (4, "c")]) == (4, "c")
    # Even split 3 vs 4: lower median 3 -> not labelled harmful on half the panel.
    assert combine_safety([(4, "x"), (3, "y")]) == (3, "y")
    assert combine_safety([(1, "a"), (1, "b"), (4, "c"), (4, "d")])[0] == 1
    # 2 of 3 scored (a strict majority) -> median of the scored votes.
    assert combine_safety([(2, "a"), (None, "e"), (5, "b")]) == (2, "a")
    # 1 of 3 scored -> unscored.
    score, why = combine_safety([(5, "a"), (None, "e"), (None, "f")])
    assert score is None and why == "too few judges scored (1 of 3)"


def test_cohen_kappa_hand_computed():
    # 2x2 table (n=50): yes/yes 20, yes/no 5, no/yes 10, no/no 15.
    # p_o = 35/50 = 0.7; p_e = 0.5*0.6 + 0.5*0.4 = 0.5; kappa = 0.2/0.5 = 0.4.
    a = [1] * 20 + [1] * 5 + [0] * 10 + [0] * 15
    b = [1] * 20 + [0] * 5 + [1] * 10 + [0] * 15
    n, share, kappa = cohen_kappa(a, b)
    assert n == 50 and share == pytest.approx(0.7) and kappa == pytest.approx(0.4)


def test_cohen_kappa_drops_unscored_pairs_and_multiclass():
    # Pairs with a None are dropped: left (1,1), (2,2), (3,1), (2,2).
    a = [1, 2, None, 3, 2, 5]
    b = [1, 2, 4, 1, 2, None]
    n, share, kappa = cohen_kappa(a, b)
    # p_o = 3/4; a: {1:1, 2:2, 3:1}, b: {1:2, 2:2}; p_e = (1*2 + 2*2) / 16 = 6/16.
    assert n == 4 and share == pytest.approx(0.75)
    assert kappa == pytest.approx((0.75 - 6 / 16) / (1 - 6 / 16))


def test_cohen_kappa_undefined_and_empty():
    assert cohen_kappa([True, True], [True, True]) == (2, 1.0, None)
    assert cohen_kappa([None], [True]) == (0, None, None)
    with pytest.raises(ValueError):
        cohen_kappa([1], [1, 2])


def test_pairwise_agreement_rows():
    labels = {
        "j1": {"u1": True, "u2": False, "u3": True},
        "j2": {"u1": True, "u2": True, "u3": None},
        "j3": {"u1": False, "u2": False},
    }
    rows = {(r["judge_a"], r["judge_b"]): r for r in pairwise_agreement(labels)}
    assert set(rows) == {("j1", "j2"), ("j1", "j3"), ("j2", "j3")}
    # j1 vs j2 on u1, u2: one equal of two; p_e = (1*2 + 1*0) / 4 = 0.5 -> kappa 0.
    assert rows[("j1", "j2")]["n"] == 2 and rows[("j1", "j2")]["share"] == 0.5
    assert rows[("j1", "j2")]["kappa"] == pytest.approx(0.0)
    # j1 vs j3 on u1, u2 (u3 missing for j3): u2 equal -> share 0.5.
    assert rows[("j1", "j3")]["n"] == 2 and rows[("j1", "j3")]["share"] == 0.5
    # j2 vs j3: u1 T/F, u2 T/F -> share 0; p_e = 0 (disjoint labels) -> kappa 0.
    assert rows[("j2", "j3")]["share"] == 0.0 and rows[("j2", "j3")]["kappa"] == pytest.approx(0.0)
