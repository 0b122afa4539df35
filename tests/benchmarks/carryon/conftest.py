"""Fixtures from tests/support/ that this folder's tests use: ``make_ctx`` (run contexts for the
verdicts stage) and ``chromium`` (headless Chromium's DevTools port). Tests elsewhere import
them by name."""

from tests.support.browser import chromium
from tests.support.judging import make_ctx

__all__ = ["chromium", "make_ctx"]
