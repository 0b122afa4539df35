"""Servers that stopped answering: after several calls in a row could not even connect to a
model server, every later call to it raises ``ServerUnavailable`` at once (the run stops with
one line instead of failing every later call slowly and dropping every query as if the model
had answered badly)."""

from __future__ import annotations

from tasks.gateway.keys import normalise_api_base
from tasks.model_entry import ModelSpec


class ServerUnavailable(Exception):
    """A model server stopped answering: several calls in a row could not even connect.

    Raised (not returned) so the run stops at once with one line. What was written before
    stays (each batch is one transaction); nothing is half-written."""


def server_of(spec: ModelSpec) -> str:
    """The server a model entry calls: its normalised api_base, or the model string."""
    return normalise_api_base(spec.api_base) or spec.model


class ServerWatch:
    """Per server: calls in a row that could not connect after all their retries, and the
    error line that tripped it at ``max_failures``."""

    def __init__(self, max_failures: int):
        self.max_failures = max_failures
        self._count: dict[str, int] = {}
        self._down: dict[str, str] = {}

    def check(self, spec: ModelSpec) -> None:
        """Raise ServerUnavailable if the entry's server was found down."""
        down = self._down.get(server_of(spec))
        if down is not None:
            raise ServerUnavailable(down)

    def note(self, spec: ModelSpec, r) -> None:
        """Count a decided call (``r.connect_failed``: it never connected); trip at the limit."""
        server = server_of(spec)
        if not r.connect_failed:
            self._count[server] = 0
            return
        n = self._count[server] = self._count.get(server, 0) + 1
        if n >= self.max_failures and server not in self._down:
            self._down[server] = (
                f"model server {spec.api_base or spec.model} stopped answering: {n} calls in a "
                f"row could not connect after {spec.max_retries} retries each (last: {r.error}); "
                "the run stops here, what was written so far is complete")
            raise ServerUnavailable(self._down[server])
