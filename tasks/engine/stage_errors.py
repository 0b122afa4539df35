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

from tasks.core.stages import Pending

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


def not_prepared(stage: str, left: dict[str, str], n_items: int, summary: dict,
                 what: str) -> None:
    """The items the prepare stages before ``stage`` left out, counted in ``summary`` by
    reason (``items_not_prepared``); when no item reached the stage and some were left out
    only because an earlier stage has not prepared them yet (``Pending``), the stage did none
    of its work: StageFailed (``what``: "reached the stage", "was prepared")."""
    if not left:
        return
    summary["items_not_prepared"] = dict(Counter(left.values()).most_common())
    pending = [r for r in left.values() if isinstance(r, Pending)]
    if not n_items and pending:
        raise StageFailed(stage, f"none of the {len(left)} items {what}: {causes(pending)}",
                          summary)
