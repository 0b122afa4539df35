"""The move-fidelity report (tasks/benchmarks/carryon/report/fidelity.py) on hand-written warehouse rows."""

from __future__ import annotations

import pandas as pd

from tasks.benchmarks.carryon.report import fidelity
from tests.support.factories import as_episodes
from warehouse import Warehouse


def _conv(cid, condition, flagged, status="completed"):
    return {"conversation_id": cid, "target": "T", "query_id": "q1", "flow_id": "x",
            "condition": condition, "length": 4, "n_moves": 1, "status": status,
            "n_turns": 4, "move_check_failed": flagged}


def _check(cid, pos, attempt, move, sim, passed, kept):
    return {"conversation_id": cid, "position": pos, "attempt": attempt, "move": move,
            "content": f"{move} {attempt}", "sim_call_hash": sim, "realises_move": passed,
            "reveals_purpose": False, "passed": passed, "kept": kept,
            "reasoning": None if passed is None else "r", "error": "api_error: x" if passed is None else None,
            "call_hash": f"chk-{cid}-{pos}-{attempt}"}


def _warehouse(tmp_path) -> Warehouse:
    wh = Warehouse(tmp_path / "w.duckdb").init()
    convs = [_conv("c1", "NC", True), _conv("c2", "NC", False), _conv("c3", "BC", False),
             _conv("c4", "BC", True, status="move_check_failed"), _conv("c5", "oracle", None)]
    pushback = [("pushback", "h1", False, False), ("pushback", "h1b", True, True)]  # shared prefix
    checks = []
    for cid in ("c1", "c2"):
        checks += [_check(cid, 2, a, m, s, p, k) for a, (m, s, p, k) in enumerate(pushback)]
    checks += [_check("c1", 4, a, "rephrasing", f"h3{a}", False, a == 2) for a in range(3)]
    checks += [_check("c2", 4, 0, "delaying", "h4", None, True)]  # the checker failed
    checks += [_check("c3", 2, 0, "benign_justification", "h5", True, True)]
    checks += [_check("c4", 2, a, "backchannel", f"h6{a}", False, a == 1) for a in range(2)]
    wh.write_many(list(as_episodes({"conversations": convs, "move_checks": checks}).items()))
    return wh


def test_fidelity_by_hand(tmp_path):
    extra = fidelity.load(_warehouse(tmp_path))
    # The pushback turn is shared by c1 and c2 (one prefix): it counts once.
    assert len(extra["turns"]) == 5
    fid, flagged = fidelity.stats(extra)
    assert fid.key == "move_fidelity" and flagged.key == "move_check_flagged"
    t = fid.table.set_index("move")
    assert list(t.index) == ["benign_justification", "pushback", "rephrasing", "delaying",
                             "backchannel", "all"]
    want = {  # turns, first %, final %, resampled %, still failing, unchecked
        "benign_justification": (1, 100.0, 100.0, 0.0, 0, 0),
        "pushback": (1, 0.0, 100.0, 100.0, 0, 0),
        "rephrasing": (1, 0.0, 0.0, 100.0, 1, 0),
        "delaying": (1, None, None, 0.0, 0, 1),
        "backchannel": (1, 0.0, 0.0, 100.0, 1, 0),
        # first tries: 1 of 4 checked passed; kept: 2 of 4; resampled 3 of 5 turns
        "all": (5, 25.0, 50.0, 60.0, 2, 1),
    }
    cols = ["turns", "pass_first_pct", "pass_final_pct", "resampled_pct", "still_failing", "unchecked"]
    for move, vals in want.items():
        got = tuple(None if pd.isna(v) else v for v in t.loc[move, cols])
        assert got == vals, move
    f = flagged.table.set_index("condition")
    assert f.loc["BC", ["n_conversations", "n_flagged", "flagged_pct", "n_excluded"]].tolist() == [2, 1, 50.0, 1]
    assert f.loc["NC", ["n_conversations", "n_flagged", "flagged_pct", "n_excluded"]].tolist() == [2, 1, 50.0, 0]
    assert "oracle" not in f.index


def test_fidelity_without_a_checker(tmp_path):
    wh = Warehouse(tmp_path / "w.duckdb").init()
    extra = fidelity.load(wh)
    assert extra == {"turns": [], "conversations": []}
    stats = fidelity.stats(extra)
    assert [s.table for s in stats] == [None, None] and "not configured" in stats[0].note
