"""When a stage counts as failed, and the one-line reason it gives.

A stage that had work (> 0 inputs) and produced no output at all, because every attempt ended
in a model/call error, is a failed stage, not a completed one: a run whose checklist models
were all unreachable must not say "succeeded" and go on to write an empty report. A stage
with nothing to do (0 inputs) is not failed, and neither is one where some items succeeded
(the failures are then data, recorded per item), nor one whose items were all dropped by a
content decision (a guard verdict, the misuse filter) rather than by an error.

"Model/call error" = a gateway ``CallResult`` error (``error_kind`` one of
``retries_exhausted``, ``api_error``, ``invalid_output``, ``empty_output``,
``context_exceeded``, ``reasoning_exhausted``; not ``content_blocked``, a provider's refusal,
which is content); the stored reasons carry it as ``"<error_kind>: <message>"``.
"""

from __future__ import annotations

import re
from collections import Counter

ERROR_KINDS = ("retries_exhausted", "api_error", "invalid_output", "empty_output", "context_exceeded",
               "reasoning_exhausted")
_KIND = re.compile(r"\b(" + "|".join(ERROR_KINDS) + r"): ")
# The call errors that say nothing about the content (the request never got an answer: a
# transport fault, a rate limit or a timeout past the retries, an error status): a rerun may
# well succeed, so what such a call would have decided is unknown, never a verdict.
TRANSPORT_KINDS = ("retries_exhausted", "api_error")
MAX_REASON_CHARS = 300


class StageFailed(Exception):
    """A stage had work and did none of it because its model calls failed.

    ``str(e)`` is one line: ``"<stage>: <what failed>: <most common cause> (<n> times)"``."""

    def __init__(self, stage: str, cause: str, summary: dict | None = None):
        self.stage, self.cause, self.summary = stage, cause, summary or {}
        super().__init__(f"{stage}: {cause}")

    def __reduce__(self):  # picklable (Prefect may persist a failed state's exception)
        return (type(self), (self.stage, self.cause, self.summary))


def is_call_error(reason: str | None) -> bool:
    """True if a stored reason names a gateway error kind (not a content decision)."""
    return bool(reason) and bool(_KIND.search(reason))


def is_transport_error(error_kind: str | None) -> bool:
    """True for a call that got no answer at all (``TRANSPORT_KINDS``)."""
    return error_kind in TRANSPORT_KINDS


def _clip(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_REASON_CHARS else text[:MAX_REASON_CHARS - 1] + "…"


def causes(reasons: list[str]) -> str:
    """The most common reason with its count, and how many other distinct reasons there are."""
    counts = Counter(_clip(r) for r in reasons)
    (top, n), others = counts.most_common(1)[0], len(counts) - 1
    return f"{top} ({n} time{'s' if n != 1 else ''})" + (
        f"; and {others} other cause(s)" if others else "")


def every(n: int, singular: str, plural: str) -> str:
    """"all 3 queries", or "the only query" for one."""
    return f"the only {singular}" if n == 1 else f"all {n} {plural}"


def all_failed(n_inputs: int, n_outputs: int, reasons: list[str | None], what: str) -> str | None:
    """The failure line when ``n_inputs > 0``, ``n_outputs == 0`` and every recorded reason is
    a call error; else None. ``what`` reads like "all 3 queries dropped"."""
    if n_inputs <= 0 or n_outputs > 0:
        return None
    if not reasons or not all(is_call_error(r) for r in reasons):
        return None
    return f"{what}: {causes([r for r in reasons if r])}"


# ----- why each CarryOnBench stage failed (read from the rows it wrote) ----------------------
def _drop_reason(s: dict, guard_errors: dict[str, str]) -> str | None:
    step, reason = s["step"], s["reason"] or ""
    if step == "intent":
        reason = reason.removeprefix("no benign intent: ")
    elif step == "guard" and s["query_id"] in guard_errors:
        reason = guard_errors[s["query_id"]]  # the guard calls failed: not a verdict
    return f"{step}: {reason}"


def checklists_failure(wh, summaries: list[dict]) -> str | None:
    """Why the stage failed, when it had queries, built no checklist, and every query was
    dropped by a model/call error (a query dropped by a guard verdict or the misuse filter is
    a content decision, not a failure of the stage). None otherwise."""
    if not summaries or any(s["version"] for s in summaries):
        return None
    guard_ids = [s["query_id"] for s in summaries if s["step"] == "guard"]
    guard_errors: dict[str, str] = {}
    if guard_ids:
        # A query dropped at the guard step lost its answers either to harmful verdicts (data)
        # or to failed guard calls; only the latter, for every dropped answer, is an error.
        rows = wh.query("SELECT query_id, reason FROM guard_verdicts "
                        "WHERE list_contains(?, query_id) AND NOT kept", [guard_ids])
        by_query: dict[str, list[str]] = {}
        for r in rows:
            by_query.setdefault(r["query_id"], []).append(r["reason"] or "")
        guard_errors = {q: rs[0] for q, rs in by_query.items() if rs and all(is_call_error(x) for x in rs)}
    reasons = [_drop_reason(s, guard_errors) for s in summaries]
    return all_failed(len(summaries), 0, reasons, every(len(summaries), "query", "queries") + " dropped")


def checklists_unbuilt(summaries: list[dict]) -> str | None:
    """Why the stage failed when some queries could not be built because a call got no answer
    (``failed``: a transport fault past the retries, never a filter's verdict): the checklists
    it built are kept, the rerun builds the rest. None when every query was built or dropped
    by a decision."""
    failed = [s for s in summaries if s.get("failed")]
    if not failed:
        return None
    reasons = [f"{s['step']}: {s['reason']}" for s in failed]
    return (f"{len(failed)} of {len(summaries)} queries could not be built because their calls "
            f"failed (a rerun retries them; the other {len(summaries) - len(failed)} were built "
            f"or dropped by a filter): {causes(reasons)}")


def simulate_failure(wh, queries, ready, skipped: dict, by_status: dict, query_ids: list[str],
                     targets: list[str]) -> str | None:
    """Why the stage failed: it had queries but every one lacked its checklist because the
    checklist stage's calls failed (the reasons are call errors), or it ran conversations and
    none completed because their calls failed (target_error, simulator_error,
    context_exceeded). None otherwise: queries skipped by a content decision (a guard verdict,
    the misuse filter) or not built yet leave the stage with nothing to do, not failed."""
    if queries and not ready:
        reasons = [(r or "").removeprefix("no checklist: ").replace("no benign intent: ", "", 1)
                   for r in skipped.values()]
        return all_failed(len(queries), 0, reasons, every(len(queries), "query", "queries") + " skipped")
    n = sum(by_status.values())
    # Conversations the move checker excluded ran to their end: that is not a call failure.
    if not n or by_status.get("completed", 0) or by_status.get("move_check_failed", 0):
        return None
    rows = wh.query("SELECT status, error FROM conversations WHERE list_contains(?, query_id) "
                    "AND list_contains(?, target) AND status <> 'completed'", [query_ids, targets])
    return all_failed(n, 0, [f"{r['status']}: {r['error']}" for r in rows],
                      every(n, "conversation", "conversations") + " failed")


def judge_failure(wh, plan) -> str | None:
    """Why the stage failed: for Ben-Util or safety, there were judgments to make and every
    one is unscored because its judge calls failed (an unscored verdict from a tie or a
    missing majority is a judges' disagreement, not a failure). None otherwise, and None
    with nothing to judge."""
    cids = [c for c, _ in plan.conversations]
    if not cids:
        return None
    out = []
    for kind, table, value, set_id in (("Ben-Util", "item_judgments", "fulfilled", plan.benutil_set),
                                       ("safety", "safety_judgments", "score", plan.safety_set)):
        rows = wh.query(f"SELECT {value} IS NOT NULL AS scored, reason FROM {table} "
                        "WHERE judgment_set_id = ? AND list_contains(?, conversation_id)", [set_id, cids])
        what = every(len(rows), f"{kind} judgment", f"{kind} judgments") + " unscored"
        line = all_failed(len(rows), sum(r["scored"] for r in rows), [r["reason"] for r in rows], what)
        if line:
            out.append(line)
    return "; ".join(out) or None
