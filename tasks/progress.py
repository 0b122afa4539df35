"""Progress on long work: a line on stderr every few seconds and, inside a Prefect flow run,
a progress artifact the UI shows per stage.

A stage can go a long time without finishing a unit (one query's checklist on a slow local
model takes minutes), so besides the line printed when work advances, a heartbeat prints the
stage's state at least every ``HEARTBEAT_S`` seconds while the stage is open, with what the
model gateway has done meanwhile (``set_activity``: the run registers its gateway's counters).
The heartbeat runs on the stage's event loop (``call_later``), so it can never outlive it.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Callable

HEARTBEAT_S = 8.0  # at least one line this often (the demo promises one every 10 s)
_activity: Callable[[], str] | None = None


def set_activity(fn: Callable[[], str] | None) -> None:
    """Register a one-line summary of ongoing work (e.g. the gateway's calls so far)."""
    global _activity
    _activity = fn


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
        line = f"[{self.stage}] {self.done}/{self.total} {self.unit} ({pct:.0f}%, {elapsed:.0f} s"
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
