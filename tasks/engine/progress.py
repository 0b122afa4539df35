"""Progress on long work: a line on stderr every few seconds and, inside a Prefect flow run,
a progress artifact the UI shows per stage.

A stage can go a long time without finishing a unit (one query's checklist on a slow local
model takes minutes), so besides the line printed when work advances, a heartbeat prints the
stage's state at least every ``HEARTBEAT_S`` seconds while the stage is open, with what the
model gateway has done meanwhile (``set_activity``: the run registers its gateway's counters).
The heartbeat runs on the stage's event loop (``call_later``), so it can never outlive it.

A stage's unit (a query, a conversation) is counted when its batch ends, and one batch may be
the whole stage (the demo's one query): the headline count would sit at 0 for minutes. So each
line also carries the model calls the stage has resolved so far (answered, from the cache, or
failed: ``set_calls``, the run's gateway counters read at the stage's start and since), which
moves with every call. Lines stay rate-limited: at most one per ``every_s`` as units finish,
and a heartbeat only when nothing was printed for ``heartbeat_s``.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Callable

HEARTBEAT_S = 8.0  # at least one line this often (the demo promises one every 10 s)
_activity: Callable[[], str] | None = None
_calls: Callable[[], tuple[int, int]] | None = None


def set_activity(fn: Callable[[], str] | None) -> None:
    """Register a one-line summary of ongoing work (e.g. the gateway's calls so far)."""
    global _activity
    _activity = fn


def set_calls(fn: Callable[[], tuple[int, int]] | None) -> None:
    """Register ``() -> (calls resolved so far, calls in flight)`` (e.g. ``gateway_calls``)."""
    global _calls
    _calls = fn


def gateway_calls(gw) -> tuple[int, int]:
    """A gateway's calls resolved so far (answered once, whatever its retries; from the
    cache; a remembered failure) and in flight, from its per-role counters."""
    done = 0
    for st in list(getattr(gw, "stats", {}).values()):
        done += (getattr(st, "requests", 0) - getattr(st, "retries", 0) + getattr(st, "hits", 0)
                 + getattr(st, "remembered", 0))
    return done, len(getattr(gw, "_inflight", ()) or ())


def _read_calls() -> tuple[int, int] | None:
    if _calls is None:
        return None
    try:
        return _calls()
    except Exception:  # progress lines must never fail a stage
        return None


class Progress:
    def __init__(self, stage: str, total: int, unit: str = "items", every_s: float = 2.0,
                 heartbeat_s: float = HEARTBEAT_S):
        self.stage, self.total, self.unit, self.every_s = stage, max(total, 0), unit, every_s
        self.heartbeat_s = heartbeat_s
        self.done = 0
        self._last = 0.0
        self._t0 = time.monotonic()
        self._artifact = None
        self._timer = None
        self._closed = False
        # The run's counters when the stage began; a counter registered later (the run's
        # gateway opened inside the stage) starts from 0.
        self._calls_fn, self._calls0 = _calls, _read_calls()
        # The UI's progress artifact is created at the first update after the start, at that
        # moment's percentage: a stage done within ``every_s`` (every stage of a cached rerun)
        # costs one API call instead of three (each builds a Prefect client, ~50 ms).
        self._in_flow_run = False
        try:
            from prefect.context import FlowRunContext

            self._in_flow_run = FlowRunContext.get() is not None
        except Exception:  # no Prefect run (tests calling a task body directly): stderr only
            pass
        if self.total:
            self._emit(started=True)
            self._schedule()

    def _schedule(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a synchronous caller): lines only when work advances
        self._timer = loop.call_later(self.heartbeat_s, self._beat)

    def _beat(self) -> None:
        if self._closed or self.done >= self.total:
            return
        if time.monotonic() - self._last >= self.heartbeat_s * 0.9:
            self._emit()
        self._schedule()

    def advance(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if now - self._last >= self.every_s or self.done >= self.total:
            self._emit()
        if self.done >= self.total:
            self.close()

    def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _emit(self, started: bool = False) -> None:
        self._last = time.monotonic()
        elapsed = self._last - self._t0
        pct = 100.0 * self.done / self.total if self.total else 100.0
        line = f"[{self.stage}] {self.done}/{self.total} {self.unit}"
        calls = self.calls_line() if not started else ""
        if calls:
            line += f", {calls}"
        line += f" ({pct:.0f}%, {elapsed:.0f} s"
        if self.done and not started:
            line += f", {self.done / max(1e-9, elapsed):.2f}/s"
        line += ")"
        if _activity is not None and not started:
            try:
                line += f"; {_activity()}"
            except Exception:
                pass
        print(line, file=sys.stderr, flush=True)
        if not started:
            self._publish(pct)

    def calls_line(self) -> str:
        """"N model calls done (+M in flight)" since the stage began; "" when not known."""
        now = _read_calls()
        if now is None:
            return ""
        base = self._calls0 if (_calls is self._calls_fn and self._calls0) else (0, 0)
        done = max(0, now[0] - base[0])
        return f"{done} model calls done" + (f" (+{now[1]} in flight)" if now[1] else "")

    def _publish(self, pct: float) -> None:
        if not self._in_flow_run:
            return
        try:
            # _sync: inside an async flow Prefect would otherwise hand back an un-awaited
            # coroutine; an update every few seconds may block the loop for a moment.
            if self._artifact is None:
                from prefect.artifacts import create_progress_artifact

                self._artifact = create_progress_artifact(
                    pct, key=f"progress-{self.stage}",
                    description=f"{self.stage}: {self.total} {self.unit}", _sync=True)
            else:
                from prefect.artifacts import update_progress_artifact

                update_progress_artifact(self._artifact, pct, _sync=True)
        except Exception:  # the UI's view only: never fail the stage over it
            self._in_flow_run = False
