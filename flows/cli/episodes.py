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
    """Write the report.md of the given run, or of this config's latest (tasks/report/data.py
    find_run); ReportError when there is none."""
    from tasks.report import ReportError
    from tasks.report.data import find_run
    from tasks.report.episodes import write
    from warehouse import Warehouse

    path = cfg.home_path / "warehouse.duckdb"
    if not path.exists():
        raise ReportError(f"{path}: no warehouse yet (run `carryon run` first)")
    wh = Warehouse(path).init()
    if run_id is None:
        run_id = find_run(wh, cfg)  # this config's, never another benchmark's latest
    folder, _ = write(cfg, wh, run_id)
    return folder
