"""The command line's plain-text table (every command that prints rows uses it)."""

from __future__ import annotations

import typer


def _print_table(rows: list[dict], max_width: int = 60) -> None:
    if not rows:
        typer.echo("(no rows)")
        return
    cols = list(rows[0])

    def cell(v):
        if isinstance(v, float):
            v = f"{v:.4g}"
        s = "NULL" if v is None else str(v).replace("\n", " ")
        return s if len(s) <= max_width else s[: max_width - 1] + "…"

    cells = [[cell(r[c]) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    typer.echo("  ".join(c.ljust(w) for c, w in zip(cols, widths)))
    typer.echo("  ".join("-" * w for w in widths))
    for row in cells:
        typer.echo("  ".join(v.ljust(w) for v, w in zip(row, widths)))
