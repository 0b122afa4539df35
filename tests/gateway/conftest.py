"""Fixtures from tests/support/ that this folder's tests use: ``gateway`` (a gateway on a
temporary cache) and ``home`` (a folder with a warehouse, for the batch path). Tests elsewhere
import them by name."""

from tests.support.batch import home
from tests.support.gateway import gateway

__all__ = ["gateway", "home"]
