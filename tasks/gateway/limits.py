"""Per-model concurrency and request-rate limits, enforced inside the gateway.

Prefect's thread pool is unbounded on purpose and litellm's Router fails instead of waiting,
so the gateway throttles itself: a semaphore for in-flight calls and a sliding one-minute
window for requests per minute. Limits live on one event loop (the run's loop). Shards and
workers of a deployment also draw on one budget per model (shared_limits.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque

from tasks.gateway.shared_limits import SharedLimitsUnavailable

log = logging.getLogger("carryon.gateway")


class RateLimiter:
    """At most ``rpm`` request starts in any ``window_s`` window (60 s: requests per minute)."""

    def __init__(self, rpm: float, window_s: float = 60.0):
        self.rpm = rpm
        self.window_s = window_s
        self._starts: deque[float] = deque()
        self._lock = asyncio.Lock()

    async def acquire(self) -> None:
        async with self._lock:
            while True:
                now = time.monotonic()
                while self._starts and now - self._starts[0] >= self.window_s:
                    self._starts.popleft()
                if len(self._starts) < self.rpm:
                    self._starts.append(now)
                    return
                await asyncio.sleep(self.window_s - (now - self._starts[0]) + 0.001)


class ModelLimits:
    def __init__(self, max_concurrency: int, rpm: float | None):
        self.semaphore = asyncio.Semaphore(max_concurrency)
        self.rate = RateLimiter(rpm) if rpm else None
        # The deployment-wide budget of the same limits (shared_limits.SharedLimits), when the
        # gateway shares them; this process's own limits above still apply inside it.
        self.shared = None

    @contextlib.asynccontextmanager
    async def slot(self):
        """Hold one request's place: this process's semaphore, the shared budget's slot (if
        any), then a start under the rpm window."""
        async with self.semaphore:
            shared = await self._shared_slot()
            try:
                if self.rate:
                    await self.rate.acquire()
                yield
            finally:
                if shared is not None:
                    shared.release()

    async def _shared_slot(self):
        # A Prefect server that cannot be reached leaves this process's own limits in charge,
        # said once.
        shared = self.shared
        if shared is None:
            return None
        try:
            await shared.acquire()
            return shared
        except SharedLimitsUnavailable as e:
            if self.shared is shared:
                self.shared = None
                log.warning("%s; this process applies its own limits only", e)
            return None
