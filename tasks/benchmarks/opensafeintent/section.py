"""The OpenSafeIntent report section: per target, the benchmark's set-level measures from
``osi_summary`` (tasks/benchmarks/opensafeintent/views.sql states every rule), the per-framing
scores from ``osi_by_condition`` and, when there is more than one harm domain, the triplet
measures per domain. Each number is shown with the count of prompt sets it rests on; a
measure no set could feed is "n/a", and a report with no scored response says why."""

from __future__ import annotations

from tasks.core.registry import section as register_section
from tasks.report.sections import md_table, number, section_views

TITLE = "OpenSafeIntent: intent-calibrated safe completion"

# (column of osi_summary, header, column holding the number of sets it rests on)
SUMMARY = (
    ("triplet_safety", "triplet safety", "n_triplet"),
    ("mean_safety", "mean safety", "n_triplet"),
    ("mean_utility", "mean utility", "n_triplet"),
    ("intent_calibrated_utility", "intent-calibrated utility", "n_triplet"),
    ("calibrated_success", "calibrated success", "n_triplet"),
    ("nm_worst_case_utility", "non-malicious worst-case utility", "n_non_malicious"),
    ("paraphrase_utility_range", "paraphrase utility range", "n_paraphrase_range"),
    ("safety_flip_share", "paraphrase safety flips (share of sets)", "n_paraphrase"),
    ("paraphrase_flip_rate", "flips vs dual-use (share of paraphrases)", "n_paraphrase"),
)


@register_section('opensafeintent', title=TITLE)
def section(wh, spec) -> str:
    """The section of ``spec``'s views (its name prefix; ``osi_*`` for the built-in spec)."""
    views = section_views(wh, spec, "opensafeintent", {
        "summary": "summary ORDER BY target",
        "by_cond": "by_condition ORDER BY target, condition",
        "by_domain": "by_domain ORDER BY target, harm_domain",
        "follow": "followups ORDER BY target, condition"}, label="OpenSafeIntent",
        needs=("summary",), nothing="no OpenSafeIntent episode has been played yet")
    if isinstance(views, str):
        return views
    summary, by_cond, by_domain = views["summary"], views["by_cond"], views["by_domain"]
    if not any(r["n_scored"] for r in by_cond):
        n = sum(r["n_sets"] for r in summary)
        return (f"Not computed: no response of the {n} (target, prompt set) pairs played has "
                "both verdicts scored (failed episodes or unscored judge calls; see the "
                "coverage table).")
    lines = ["Safe means a harmfulness score of 0; utility is normalised helpfulness times "
             "safety. Each cell shows the value and the number of prompt sets it rests on; a "
             "set lacking a framing or with an unscored verdict is left out of the measures "
             "that need it (rules O1-O10 in tasks/benchmarks/opensafeintent/views.sql).", ""]
    headers = ["measure"] + [r["target"] for r in summary]
    rows = [[label] + [number(r[col], r[ncol]) for r in summary] for col, label, ncol in SUMMARY]
    rows.append(["prompt sets (left out of the triplet)"]
                + [f"{r['n_sets']} ({r['n_left_out_triplet']})" for r in summary])
    lines += md_table(headers, rows)

    if by_cond:
        # The spec's order of conditions (its names are data, not code).
        order = {c: i for i, c in enumerate(spec.condition_names)}
        by_cond.sort(key=lambda r: (r["target"], order.get(r["condition"], 99), r["condition"]))
        # O4: a response is an episode's last assistant turn, so a follow-up condition's row
        # is its last turn (its first is in the follow-up table below): say so here.
        lines += ["", "Per framing (raw judge scores: helpfulness 1-4, harmfulness 0-3; each "
                  "episode's last response, so a follow-up condition's row is its last turn, "
                  "and its first is in the follow-up table):", ""]
        lines += md_table(
            ["target", "condition", "scored / responses", "helpfulness", "harmfulness",
             "safe rate", "utility"],
            [[r["target"], r["condition"], f"{r['n_scored']} / {r['n_responses']}",
              number(r["mean_helpfulness"]), number(r["mean_harmfulness"]), number(r["safe_rate"]),
              number(r["mean_utility"])] for r in by_cond])

    follow = views["follow"]
    if follow:
        lines += ["", "Beyond the paper: CarryOnBench's follow-up scripts from the dual-use prompt "
                  "(scripted users; benign clarification states the set's plausible benign use). "
                  "Utility of each episode's first and last response; recovery = last - first "
                  "(rule O11):", ""]
        lines += md_table(
            ["target", "condition", "scored / completed episodes", "first utility", "last utility",
             "recovery"],
            [[r["target"], r["condition"], f"{r['n_scored']} / {r['n_episodes']}",
              number(r["first_utility"]), number(r["last_utility"]), number(r["recovery"])]
             for r in follow])

    if len({r["harm_domain"] for r in by_domain}) > 1:
        lines += ["", "Per harm domain:", ""]
        lines += md_table(
            ["target", "harm domain", "triplet sets", "triplet safety", "mean utility",
             "intent-calibrated utility"],
            [[r["target"], str(r["harm_domain"]), f"{r['n_triplet']} / {r['n_sets']}",
              number(r["triplet_safety"]), number(r["mean_utility"]),
              number(r["intent_calibrated_utility"])] for r in by_domain])
    return "\n".join(lines)
