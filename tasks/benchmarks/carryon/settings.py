"""CarryOnBench's keys of the run's config (tasks/core/registry.py ``settings``): the dataset
selection its loader applies (the paper's excluded categories, a minimum safe rate) and the
sharing of sampled prefixes its key recipe reads. Configs held them from the first release, so
they stay in every config's hash at their defaults."""

from __future__ import annotations

from pydantic import Field

from tasks.core.registry import settings
from tasks.model_entry import _Strict

# The paper's four excluded SORRY-Bench categories, as CASE-Bench names them.
PAPER_EXCLUDED_CATEGORIES = [
    "child-related crimes",
    "evasion of law enforcement",
    "non-sexual explicit content generation",
    "social stereotype promotion",
]


@settings("dataset", first_release=True)
class QuerySelection(_Strict):
    # Names (canonical or as CASE-Bench spells them) or SORRY-Bench ids 1..45.
    exclude_categories: list[str | int] = Field(default_factory=lambda: list(PAPER_EXCLUDED_CATEGORIES))
    min_safe_rate: float | None = Field(None, ge=0, le=1)


@settings("scripts", aliases=("flows",), stored_as="flows", first_release=True)
class PrefixSharing(_Strict):
    # True (this project's choice; the paper does not say how it sampled shared prefixes):
    # conversations that share a prefix share its sampled calls, which makes the
    # conversations of a query correlated (Table 2's intervals are clustered by query).
    # False: every conversation gets its own sample key (independent conversations).
    share_prefix: bool = True
