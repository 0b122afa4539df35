"""Why the checklists stage failed, read from the rows it wrote: the engine's rule
(tasks/engine/stage_errors.py: a stage with work that produced nothing because every attempt
was a call error) applied to its tables, and the stage's own (items left unbuilt because a
call got no answer)."""

from __future__ import annotations

from tasks.engine.stage_errors import all_failed, causes, every, is_call_error


def _drop_reason(s: dict, guard_errors: dict[str, str]) -> str | None:
    step, reason = s["step"], s["reason"] or ""
    if step == "guard" and s["item_id"] in guard_errors:
        reason = guard_errors[s["item_id"]]  # the guard calls failed: not a verdict
    return f"{step}: {reason}"


def checklists_failure(wh, summaries: list[dict]) -> str | None:
    """Why the stage failed, when it had items, built no checklist, and every item was
    dropped by a model/call error (an item dropped by a guard verdict or the misuse filter is
    a content decision, not a failure of the stage). None otherwise."""
    if not summaries or any(s["version"] for s in summaries):
        return None
    guard_ids = [s["item_id"] for s in summaries if s["step"] == "guard"]
    guard_errors: dict[str, str] = {}
    if guard_ids:
        # An item dropped at the guard step lost its answers either to harmful verdicts (data)
        # or to failed guard calls; only the latter, for every dropped answer, is an error.
        rows = wh.query("SELECT query_id, reason FROM guard_verdicts "
                        "WHERE list_contains(?, query_id) AND NOT kept", [guard_ids])
        by_query: dict[str, list[str]] = {}
        for r in rows:
            by_query.setdefault(r["query_id"], []).append(r["reason"] or "")
        guard_errors = {q: rs[0] for q, rs in by_query.items() if rs and all(is_call_error(x) for x in rs)}
    reasons = [_drop_reason(s, guard_errors) for s in summaries]
    return all_failed(len(summaries), 0, reasons, every(len(summaries), "item", "items") + " dropped")


def checklists_unbuilt(summaries: list[dict]) -> str | None:
    """Why the stage failed when some items could not be built because a call got no answer
    (``failed``: a transport fault past the retries, never a filter's verdict): the checklists
    it built are kept, the rerun builds the rest. None when every item was built or dropped
    by a decision."""
    failed = [s for s in summaries if s.get("failed")]
    if not failed:
        return None
    reasons = [f"{s['step']}: {s['reason']}" for s in failed]
    return (f"{len(failed)} of {len(summaries)} items could not be built because their calls "
            f"failed (a rerun retries them; the other {len(summaries) - len(failed)} were built "
            f"or dropped by a filter): {causes(reasons)}")
