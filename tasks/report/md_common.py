"""The Markdown pieces every report uses, the sister benchmarks' and CarryOnBench's: numbers
as text, tables (a cell's pipes and line breaks escaped) and the run's status line. No
benchmark's own code: the engine's report imports this, never the paper report's modules."""

from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pandas costs a third of a second to import: commands that only register
    import pandas as pd  # sections (plan, data) need none of it


def _missing(v) -> bool:
    pd = sys.modules.get("pandas")  # not imported: v cannot be one of its missing values
    return (v is None or (pd is not None and (v is pd.NA or v is pd.NaT))
            or (isinstance(v, float) and math.isnan(v)))


def fmt(v, col: str = "") -> str:
    if _missing(v):
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.3g}" if col == "p" else f"{v:.2f}"
    if hasattr(v, "item"):  # numpy scalars
        return fmt(v.item(), col)
    return str(v)


def table_rows(df: pd.DataFrame, headers: dict | None = None) -> tuple[list[str], list[list[str]]]:
    cols = list(df.columns)
    head = [(headers or {}).get(c, c) for c in cols]
    # itertuples keeps each column's dtype (iterrows would turn an int column into floats).
    return head, [[fmt(v, c) for v, c in zip(row, cols)] for row in df.itertuples(index=False)]


def _md_cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def md_lines(headers: list[str], rows: list[list[str]]) -> list[str]:
    """Markdown table lines (a cell's pipes and line breaks escaped)."""
    out = ["| " + " | ".join(map(_md_cell, headers)) + " |", "|" + "---|" * len(headers)]
    return out + ["| " + " | ".join(map(_md_cell, r)) + " |" for r in rows]


def md_table(df: pd.DataFrame, headers: dict | None = None) -> str:
    return "\n".join(md_lines(*table_rows(df, headers)))


def run_line(run: dict) -> str:
    """The provenance line with the run's status (rewritten in place when the run closes)."""
    finished = f", finished {run['finished']}" if run.get("finished") else ""
    error = f"; error: {' '.join(str(run['error']).split())}" if run.get("error") else ""
    return (f"- Run: `{run['run_id']}` (status {run.get('status')}, started {run.get('started')}"
            f"{finished}, git {run.get('git_rev') or 'unknown'}{error})")
