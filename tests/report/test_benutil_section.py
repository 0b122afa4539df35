"""Ben-Util and harm for any benchmark (warehouse/views_engine.sql B1-B4, the built-in section
tasks/report/sections/benutil.py): every number below is computed by hand from the verdicts
written here, with the cases the rules are about: an unscored question (left out of a turn's
utility, and unknown in the conversation when no turn fulfilled it), a question fulfilled only
at a later turn, an unscored safety turn (no harm max), a newer Ben-Util set for one item only
(chosen per item), and a failed episode (left out)."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import pytest

from tasks.report.sections.benutil import benutil_section, check
from warehouse import Warehouse

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def _episode(eid, item, condition, status="completed"):
    return {"episode_id": eid, "benchmark": "b", "item_id": item, "condition": condition,
            "target": "T", "user_policy": "u", "status": status, "termination": "turn_cap",
            "n_turns": 4}


def _set(sid, kind, hours, version=None):
    return {"judgment_set_id": sid, "benchmark": "b", "kind": kind, "prompt_version": "p",
            "created": T0 + dt.timedelta(hours=hours), "run_id": "r", "item_version": version}


def _v(sid, eid, turn, measure, value):
    kind = "safety" if measure == "score" else "benutil"
    return {"judgment_set_id": sid, "episode_id": eid, "position": 2 * turn - 1,
            "measure": measure, "kind": kind, "model_turn": turn, "value": value}


@pytest.fixture
def wh(tmp_path):
    w = Warehouse(tmp_path / "w.duckdb").init()
    verdicts = [
        # E1 (item A, c1), two turns: q1 fulfilled at turn 1, q2 at turn 2, q3 unscored at
        # turn 1 and not fulfilled at turn 2; harm 1 then 4.
        _v("S1", "E1", 1, "fulfilled:1", 1.0), _v("S1", "E1", 1, "fulfilled:2", 0.0),
        _v("S1", "E1", 1, "fulfilled:3", None),
        _v("S1", "E1", 2, "fulfilled:1", 0.0), _v("S1", "E1", 2, "fulfilled:2", 1.0),
        _v("S1", "E1", 2, "fulfilled:3", 0.0),
        _v("S2", "E1", 1, "score", 1.0), _v("S2", "E1", 2, "score", 4.0),
        # E2 (item A, c2), one turn: nothing fulfilled; safety unscored.
        _v("S1", "E2", 1, "fulfilled:1", 0.0), _v("S1", "E2", 1, "fulfilled:2", 0.0),
        _v("S1", "E2", 1, "fulfilled:3", 0.0), _v("S2", "E2", 1, "score", None),
        # E3 (item B, c1), one turn: the older set S1 says 0, the newer S3 (item B only)
        # fulfils q1 of two; harm 5.
        _v("S1", "E3", 1, "fulfilled:1", 0.0),
        _v("S3", "E3", 1, "fulfilled:1", 1.0), _v("S3", "E3", 1, "fulfilled:2", 0.0),
        _v("S2", "E3", 1, "score", 5.0),
        # E4 failed: never counted.
        _v("S1", "E4", 1, "fulfilled:1", 1.0), _v("S2", "E4", 1, "score", 5.0),
    ]
    w.write_many([
        ("episodes", [_episode("E1", "A", "c1"), _episode("E2", "A", "c2"),
                      _episode("E3", "B", "c1"), _episode("E4", "A", "c1", "target_error")]),
        ("verdict_sets", [_set("S1", "benutil", 0, "v1"), _set("S2", "safety", 0),
                          _set("S3", "benutil", 1, "v2")]),
        ("verdicts", verdicts)])
    return w


def test_the_sets_are_chosen_per_item(wh):
    assert wh.query("SELECT kind, item_id, judgment_set_id FROM item_verdict_sets "
                    "ORDER BY ALL") == [
        {"kind": "benutil", "item_id": "A", "judgment_set_id": "S1"},
        {"kind": "benutil", "item_id": "B", "judgment_set_id": "S3"},
        {"kind": "safety", "item_id": "A", "judgment_set_id": "S2"},
        {"kind": "safety", "item_id": "B", "judgment_set_id": "S2"}]


def test_turns_episodes_conditions_by_hand(wh):
    turns = {(r["episode_id"], r["model_turn"]): (r["n_questions"], r["n_scored"],
                                                  r["n_fulfilled"], r["utility"], r["harm"])
             for r in wh.query("SELECT * FROM benutil_turns")}
    assert turns == {("E1", 1): (3, 2, 1, 50.0, 1.0), ("E1", 2): (3, 3, 1, pytest.approx(100 / 3), 4.0),
                     ("E2", 1): (3, 3, 0, 0.0, None), ("E3", 1): (2, 2, 1, 50.0, 5.0)}
    eps = {r["episode_id"]: (r["n_turns"], r["n_questions"], r["n_fulfilled"], r["n_known"],
                             r["utility"], r["harm_max"], r["harm_mean"])
           for r in wh.query("SELECT * FROM benutil_episodes")}
    # E1: q1 and q2 fulfilled (once each); q3 neither fulfilled nor scored at every turn:
    # unknown, so utility = 2 / 2.
    assert eps == {"E1": (2, 3, 2, 2, 100.0, 4.0, 2.5), "E2": (1, 3, 0, 3, 0.0, None, None),
                   "E3": (1, 2, 1, 2, 50.0, 5.0, 5.0)}
    cond = {r["condition"]: (r["n_episodes"], r["utility"], r["n_utility"], r["harm_max"],
                             r["n_harm_max"], r["harm_mean"])
            for r in wh.query("SELECT * FROM benutil_conditions")}
    assert cond == {"c1": (2, 75.0, 2, 4.5, 2, 3.75), "c2": (1, 0.0, 1, None, 0, None)}
    by_turn = {(r["condition"], r["turn"]): (r["n_turns"], r["utility"], r["harm"], r["n_harm"])
               for r in wh.query("SELECT * FROM benutil_by_turn")}
    assert by_turn == {("c1", 1): (2, 50.0, 3.0, 2), ("c1", 2): (1, pytest.approx(100 / 3), 4.0, 1),
                       ("c2", 1): (1, 0.0, None, 0)}


def test_the_section_shows_them_per_condition_and_turn(wh):
    spec = SimpleNamespace(name="b", condition_names=["c1", "c2"], judges=["benutil", "safety"])
    text = benutil_section(wh, spec)
    assert "| T | c1 | 2 | 75.0% (n=2) | 4.50 (n=2) | 3.75 |" in text
    assert "| T | c2 | 1 | 0.0% (n=1) | n/a | n/a |" in text
    assert "| T | c1 | 1 | 50.0% (n=2) | 3.00 (n=2) |" in text
    assert "| T | c1 | 2 | 33.3% (n=1) | 4.00 (n=1) |" in text
    other = SimpleNamespace(name="other", condition_names=["c1"], judges=["benutil"])
    assert benutil_section(wh, other).startswith("Not computed: no judged episode yet")


def test_a_spec_without_those_judges_is_refused():
    with pytest.raises(ValueError, match=r"report: benutil shows the verdicts of the judges "
                                         r"benutil and safety, and this spec names neither"):
        check(SimpleNamespace(judges=["act"]))
