"""``Stat``: what every analysis of the report returns, a table or a note saying why there is
none. A leaf, so that failure_modes.py need not import analyses.py (which re-exports them)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd


@dataclass
class Stat:
    title: str  # the display title (may change with the data, e.g. a unit suffix)
    table: pd.DataFrame | None
    note: str = ""  # why there is no table, or a caveat printed under it
    extra: dict = field(default_factory=dict)
    # A stable identifier, the same whether or not a number was computed: code that picks a
    # Stat (figures, tests) uses the key, never the display title.
    key: str = ""


def _too_few(title: str, what: str, key: str = "") -> Stat:
    return Stat(title, None, f"Not computed: {what}.", key=key)
