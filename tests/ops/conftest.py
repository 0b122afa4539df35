"""Fixtures from tests/support/ that this folder's tests use: ``timed_server`` (the loopback
server, recording when each request arrived). Tests elsewhere import it by name."""

from tests.support.interrupt import timed_server

__all__ = ["timed_server"]
