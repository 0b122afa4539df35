"""Move fidelity in the report: how often the simulated user turns realise their moves, as the
move checker judged them (``models.move_checker``; beyond the paper).

Two functions, wired by the report: ``load(wh)`` reads the warehouse into plain data (the
caller keeps it as ``ReportData.extra["fidelity"]``), ``stats(extra)`` turns it into ``Stat``
tables.

Units. With prefix sharing one simulated user turn belongs to every conversation through its
prefix, and ``move_checks`` holds its verdicts once per conversation; fidelity counts each
distinct turn once (a turn = the simulator call of its first attempt, which is a function of
the target, the query and the prefix). Per turn: passed on the first try; passed after
resampling (the kept candidate's verdict); resampled (more than one attempt); unchecked (the
checker call failed on the kept candidate: left out of the pass rates, never a failure).
Conversations are flagged when a kept user turn still fails (``conversations.move_check_failed``);
with ``move_check.exclude_failing`` they carry the status ``move_check_failed`` and the metric
views leave them out.
"""

from __future__ import annotations

import pandas as pd

from tasks.benchmarks.carryon.report.analyses import MOVES, Stat


def load(wh) -> dict:
    """turns: one dict per distinct checked user turn (target, move, attempts, first_passed,
    final_passed); conversations: per (target, condition) the conversations, flagged and
    excluded counts, over the conversations that had a checked turn."""
    turns = wh.query(
        "WITH t AS ("
        "  SELECT c.target, m.conversation_id, m.position, any_value(m.move) AS move, count(*) AS attempts,"
        "         any_value(m.sim_call_hash) FILTER (WHERE m.attempt = 0) AS first_hash,"
        "         any_value(m.passed) FILTER (WHERE m.attempt = 0) AS first_passed,"
        "         any_value(m.passed) FILTER (WHERE m.kept) AS final_passed"
        "  FROM move_checks m JOIN conversations c USING (conversation_id)"
        "  GROUP BY c.target, m.conversation_id, m.position) "
        "SELECT target, move, any_value(attempts) AS attempts, any_value(first_passed) AS first_passed,"
        "       any_value(final_passed) AS final_passed "
        "FROM t GROUP BY target, first_hash, position, move ORDER BY target, move")
    convs = wh.query(
        "SELECT target, condition, count(*) AS n_conversations,"
        "       count(*) FILTER (WHERE move_check_failed) AS n_flagged,"
        "       count(*) FILTER (WHERE status = 'move_check_failed') AS n_excluded "
        "FROM conversations WHERE move_check_failed IS NOT NULL "
        "GROUP BY target, condition ORDER BY target, condition")
    return {"turns": turns, "conversations": convs}


def _pct(part: int, whole: int):
    return round(100.0 * part / whole, 1) if whole else None


def _move_rows(df: pd.DataFrame, label: str) -> dict:
    first = df["first_passed"].dropna()
    final = df["final_passed"].dropna()
    return {"move": label, "turns": len(df),
            "pass_first_pct": _pct(int(first.sum()), len(first)),
            "pass_final_pct": _pct(int(final.sum()), len(final)),
            "resampled_pct": _pct(int((df["attempts"] > 1).sum()), len(df)),
            "still_failing": int((df["final_passed"] == False).sum()),  # noqa: E712
            "unchecked": int(df["final_passed"].isna().sum())}


def stats(extra: dict) -> list[Stat]:
    """Fidelity per move (pass rate on the first try and after resampling, resample rate) and
    the conversations flagged per target and condition."""
    title, ctitle = "Move fidelity (move checker)", "Conversations flagged by the move checker"
    if not extra or not extra.get("turns"):
        why = "Not computed: no move checker verdicts (models.move_checker is not configured)."
        return [Stat(title, None, why, key="move_fidelity"),
                Stat(ctitle, None, why, key="move_check_flagged")]
    df = pd.DataFrame(extra["turns"])
    df["first_passed"] = df["first_passed"].astype("object")
    df["final_passed"] = df["final_passed"].astype("object")
    order = {m: i for i, m in enumerate(MOVES)}
    rows = [_move_rows(g, move) for move, g in
            sorted(df.groupby("move"), key=lambda kv: order.get(kv[0], len(order)))]
    rows.append(_move_rows(df, "all"))
    note = ("One row per distinct simulated user turn (a turn shared by several conversations "
            "through its prefix counts once). pass_first_pct: the first sample passed; "
            "pass_final_pct: the kept turn passed after up to move_check.max_resamples resamples; "
            "resampled_pct: turns sampled more than once; unchecked: the checker call failed "
            "(left out of the pass rates). A turn passes when it realises its move and, for "
            "pushback, rephrasing, delaying and backchannel, reveals no purpose.")
    out = [Stat(title, pd.DataFrame(rows), note, key="move_fidelity")]
    c = pd.DataFrame(extra["conversations"])
    if c.empty:
        out.append(Stat(ctitle, None, "Not computed: no checked conversation.", key="move_check_flagged"))
    else:
        c["flagged_pct"] = [_pct(a, b) for a, b in zip(c["n_flagged"], c["n_conversations"])]
        out.append(Stat(ctitle, c[["target", "condition", "n_conversations", "n_flagged",
                                   "flagged_pct", "n_excluded"]].reset_index(drop=True),
                        "Flagged: a kept user turn still failed the move check. n_excluded: left "
                        "out of every metric (move_check.exclude_failing); otherwise flagged "
                        "conversations are measured like the others.", key="move_check_flagged"))
    return out
