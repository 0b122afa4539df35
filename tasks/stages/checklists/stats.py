"""The checklists stage's statistics: per run, from the per-item summaries that
``tasks.stages.checklists.build.build_batch`` returns."""

from __future__ import annotations

# The pipeline's steps, in order (an item's summary names the step that dropped it).
STEPS = ["ensemble", "guard", "decompose", "merge", "misuse"]


def _share(num: int, den: int) -> float | None:
    return round(num / den, 4) if den else None


def stage_stats(summaries: list[dict]) -> dict:
    """Per run: items in and with a checklist, questions per checklist (min, mean, max), the
    share dropped at each step (of what entered that step), the answers the guard dropped as
    harmful or as refusals and those cut off at max_tokens, and the items whose merged list
    the cap cut."""
    n = len(summaries)
    built = [s for s in summaries if s["version"]]
    items = [s["n_items"] for s in built]

    def total(key):
        return sum(s["counts"].get(key, 0) for s in summaries)

    reached = {step: sum(1 for s in summaries if s["step"] is None or
                         STEPS.index(s["step"]) >= STEPS.index(step)) for step in STEPS}
    dropped = {step: sum(1 for s in summaries if s["step"] == step) for step in STEPS}
    req, ok, harmless = total("answers_requested"), total("answers_ok"), total("answers_harmless")
    merged, misuse_dropped = total("merged_items"), total("misuse_dropped")
    # Each share counts only the items whose step produced an answer.
    merged_in = sum(s["counts"].get("decomposed_items", 0) for s in summaries if "merged_items" in s["counts"])
    misuse_in = sum(s["counts"].get("merged_items", 0) for s in summaries if "misuse_dropped" in s["counts"])
    return {
        "items": n,
        "checklists": len(built),
        "questions_per_checklist": {"min": min(items), "mean": round(sum(items) / len(items), 2),
                                    "max": max(items)} if items else None,
        "items_dropped": {step: {"dropped": dropped[step], "entered": reached[step],
                                 "share": _share(dropped[step], reached[step])} for step in STEPS},
        "answers": {"requested": req, "failed_share": _share(req - ok, req),
                    "guard_dropped_share": _share(ok - harmless, ok),
                    "harmful": total("answers_harmful"), "refused": total("answers_refused"),
                    "truncated": total("answers_truncated")},
        "merge_cap": {"items_capped": sum(1 for s in summaries if s.get("capped_from")),
                      "questions_cut": total("merge_capped")},
        "questions": {"decomposed": total("decomposed_items"), "merged": merged,
                      "merge_removed_share": _share(merged_in - merged, merged_in),
                      "misuse_dropped_share": _share(misuse_dropped, misuse_in),
                      "final": sum(items)},
    }
