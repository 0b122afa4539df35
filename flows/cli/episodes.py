"""The parts of the ``carryon`` command line that differ for an episode benchmark (a sister
benchmark): its items (``carryon data``) and its report (``carryon report``)."""

from __future__ import annotations

import json
from typing import Optional

import typer

from flows.cli.table import _print_table


def print_items(cfg, json_out: bool, limit: Optional[int]) -> None:
    """``carryon data`` for an episode benchmark: its items, the conditions each can take."""
    from tasks.engine.episode import opening
    from tasks.engine.items import select_items

    items = select_items(cfg, limit)
    rows = []
    for it in items:
        conds = [c.name for c in cfg.spec.conditions if opening(it, c) is not None]
        if json_out:
            typer.echo(json.dumps({"item_id": it.item_id, "source_row": it.source_row,
                                   "prompts": it.prompts, "meta": it.meta, "conditions": conds}))
            continue
        first = next(iter(it.prompts.values()), "")
        rows.append({"id": it.item_id, "row": it.source_row, "conditions": ",".join(conds),
                     "meta": json.dumps(it.meta, ensure_ascii=False), "prompt": first})
    if not json_out:
        _print_table(rows)
        typer.echo(f"{len(items)} items selected ({cfg.spec.title})")


def episode_report(cfg, run_id: Optional[str]):
    """Write the latest (or the given) run's report.md; ReportError when there is none."""
    from tasks.report import ReportError
    from tasks.report.episodes import write
    from warehouse import Warehouse

    path = cfg.home_path / "warehouse.duckdb"
    if not path.exists():
        raise ReportError(f"{path}: no warehouse yet (run `carryon run` first)")
    wh = Warehouse(path).init()
    if run_id is None:
        rows = wh.query("SELECT run_id FROM runs ORDER BY started DESC LIMIT 1")
        if not rows:
            raise ReportError(f"{path}: no run recorded yet (run `carryon run` first)")
        run_id = rows[0]["run_id"]
    folder, _ = write(cfg, wh, run_id)
    return folder
