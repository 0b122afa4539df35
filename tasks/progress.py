"""Progress on long work: a line on stderr every few seconds and, inside a Prefect flow run,
a progress artifact the UI shows per stage."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, stage: str, total: int, unit: str = "items", every_s: float = 2.0):
        self.stage, self.total, self.unit, self.every_s = stage, max(total, 0), unit, every_s
        self.done = 0
        self._last = 0.0
        self._t0 = time.monotonic()
        self._artifact = None
        try:
            from prefect.artifacts import create_progress_artifact
            from prefect.context import FlowRunContext

            if FlowRunContext.get() is not None:
                # _sync: inside an async flow Prefect would otherwise hand back an un-awaited
                # coroutine; an update every few seconds may block the loop for a moment.
                self._artifact = create_progress_artifact(
                    0.0, key=f"progress-{stage}", description=f"{stage}: {total} {unit}", _sync=True)
        except Exception:  # no Prefect run (tests calling a task body directly): stderr only
            self._artifact = None

    def advance(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if now - self._last >= self.every_s or self.done >= self.total:
            self._last = now
            self._emit()

    def _emit(self) -> None:
        pct = 100.0 * self.done / self.total if self.total else 100.0
        rate = self.done / max(1e-9, time.monotonic() - self._t0)
        print(f"[{self.stage}] {self.done}/{self.total} {self.unit} ({pct:.0f}%, {rate:.1f}/s)",
              file=sys.stderr, flush=True)
        if self._artifact is not None:
            try:
                from prefect.artifacts import update_progress_artifact

                update_progress_artifact(self._artifact, pct, _sync=True)
            except Exception:
                self._artifact = None
