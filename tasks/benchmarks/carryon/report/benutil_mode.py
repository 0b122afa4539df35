"""The report's statement of the judgment sets its numbers rest on (key ``benutil_mode``):
each set the views read (R1) with Ben-Util's mode (per_item, the paper's; per_response, ours)
and, beside it, the latest ``carryon calibrate`` in which that set's setting was one of the two
(tasks/engine/calibrate.py: agreement, Cohen's kappa with its interval, against what); a
per-response set that no calibration measures is named. ``load(wh)`` into
``ReportData.extra["calibration"]``, ``mode_stat(extra)`` its Stat."""

from __future__ import annotations

import json

import pandas as pd

TITLE = "Ben-Util mode and measured agreement of the judgment sets in use"
_PAPER_MODE = "per_item"


def load(wh, run_id=None) -> dict:
    """The judgment sets the views read (R1), each with its Ben-Util mode, and every stored
    calibration (``judge_calibrations``)."""
    sets = wh.df(
        "SELECT s.judgment_set_id, s.kind, s.judges, s.prompt_version, s.n_queries, "
        "  json_extract_string(v.args, '$.mode') AS mode "
        "FROM selected_judgment_sets s JOIN verdict_sets v USING (judgment_set_id) "
        "ORDER BY s.kind, s.judgment_set_id")
    cal = wh.df("SELECT * FROM judge_calibrations ORDER BY created DESC, calibration_id")
    return {"sets": sets, "calibrations": cal}


def _other(cal: dict, side: str) -> str:
    """The calibration's other setting (``side``), in a few words: its mode, its models and
    the arguments in which it differs from the set's own."""
    s = json.loads(cal[f"setting_{side}"])
    own = json.loads(cal[f"setting_{'a' if side == 'b' else 'b'}"]).get("args", {})
    args = {k: v for k, v in s.get("args", {}).items() if own.get(k) != v}
    mode = s.get("args", {}).get("mode") or (_PAPER_MODE if s.get("kind") == "benutil" else None)
    args.pop("mode", None)
    parts = ([f"mode {mode}"] if mode else []) + [", ".join(s.get("models") or [])]
    if args:
        parts.append(json.dumps(args, sort_keys=True))
    return "; ".join(p for p in parts if p)


def _matches(cal, js, side: str) -> bool:
    return (cal[f"prompt_version_{side}"] == js["prompt_version"]
            and cal[f"judges_{side}"] == js["judges"])


def mode_stat(extra: dict):
    """One row per judgment set in use: its mode (Ben-Util) and, beside it, the latest
    calibration one of whose settings it is (agreement and Cohen's kappa with its interval,
    against which setting), or that none exists."""
    from tasks.benchmarks.carryon.report.analyses import Stat

    sets, cal = extra.get("sets"), extra.get("calibrations")
    if sets is None or sets.empty:
        return Stat(TITLE, None, "Not computed: no judgment set in use.", key="benutil_mode")
    main = {"benutil": "fulfilled", "safety": "score"}
    rows, uncalibrated = [], []
    for js in sets.to_dict("records"):
        mode = None
        if js["kind"] == "benutil":  # a set without the argument is the paper's per-item mode
            mode = _PAPER_MODE if pd.isna(js["mode"]) or not js["mode"] else js["mode"]
        row = {"kind": js["kind"], "judgment_set_id": js["judgment_set_id"], "mode": mode,
               "judges": js["judges"], "n_queries": js["n_queries"], "calibration_id": None,
               "against": None, "n_units": None, "agreement_pct": None, "kappa": None,
               "kappa_ci": None}
        found = None
        for c in ([] if cal is None else cal.to_dict("records")):
            if c["kind"] != js["kind"] or c["measure"] != main.get(js["kind"], c["measure"]):
                continue
            side = "a" if _matches(c, js, "a") else "b" if _matches(c, js, "b") else None
            if side:
                found = (c, "b" if side == "a" else "a")
                break  # the latest first
        if found:
            c, other = found
            row.update(calibration_id=c["calibration_id"], against=_other(c, other),
                       n_units=c["n"],
                       agreement_pct=None if c["share"] is None else round(100 * c["share"], 1),
                       kappa=None if c["kappa"] is None else round(c["kappa"], 3),
                       kappa_ci=(None if c["kappa_lo"] is None else
                                 f"[{c['kappa_lo']:.3f}, {c['kappa_hi']:.3f}]"))
        elif mode and mode != _PAPER_MODE:
            uncalibrated.append(js["judgment_set_id"])
        rows.append(row)
    note = ("Ben-Util's mode: per_item is the paper's method (one judge call per response and "
            "checklist item); per_response judges a response's whole checklist in one call "
            "(about a tenth of the calls), which is not the paper's method. Beside each set, "
            "the latest `carryon calibrate` in which it was one of the two settings: the share "
            "of units both settings judged alike and Cohen's kappa with its 95 % interval "
            "(bootstrap over queries), against the other setting (docs/fidelity.md).")
    if uncalibrated:
        note += (" Not calibrated: " + ", ".join(uncalibrated) + " is per_response and no "
                 "calibration measures it: run `carryon calibrate --judge benutil --sample 300` "
                 "before trusting its numbers.")
    table = pd.DataFrame(rows)
    for col in ("n_queries", "n_units"):  # counts, blank where there is none
        table[col] = table[col].astype("Int64")
    return Stat(TITLE, table, note, key="benutil_mode")
