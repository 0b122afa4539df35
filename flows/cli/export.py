"""``carryon export`` (a run as a Hugging Face dataset folder or as Inspect AI eval logs) and
``carryon import`` (such a dataset folder back into a fresh home); docs/export.md."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from flows.cli.common import ConfigOpt, _fail, _home, _warehouse_path
from tasks.config import ConfigError, load_config


def export(config: str = ConfigOpt,
           out: Path = typer.Option(..., "--out", help="A new folder to write."),
           fmt: str = typer.Option("hf", "--format", help="hf (a Hugging Face dataset) or "
                                   "inspect (Inspect AI eval logs, the [inspect] extra)."),
           run_id: Optional[str] = typer.Option(None, "--run", help="Default: the latest run "
                                                "of the config's benchmark."),
           partial: bool = typer.Option(False, "--partial", help="Export a run that did not "
                                        "finish (the card says so)."),
           include_restricted: bool = typer.Option(
               False, "--include-restricted", help="Keep the text of inputs whose licence does "
                                                   "not allow redistribution (yours to share).")):
    """Export a run: --format hf writes Parquet configs and a dataset card; --format inspect
    one Inspect AI eval log per benchmark and target."""
    from tasks.export.run_info import ExportError
    from warehouse import Warehouse, WarehouseError

    if fmt not in ("hf", "inspect"):
        _fail(f"--format {fmt!r}: choose hf or inspect")
    try:
        cfg = load_config(config)
        wh = Warehouse(_warehouse_path(config))
        if fmt == "hf":
            from tasks.export.hf import write

            exp = write(wh, cfg.spec, out, run_id, partial, include_restricted)
            rows = ", ".join(f"{n} {c['rows']}" for n, c in exp.configs.items()
                             if c["kind"] != "view")
            typer.echo(f"export: {out} ({rows}; {sum(c['kind'] == 'view' for c in exp.configs.values())} views)")
        else:
            from tasks.export.inspect_logs import write_logs

            exp = write_logs(wh, cfg.spec, out, run_id, partial, include_restricted)
            typer.echo(f"export: {out} ({len(exp.logs)} eval logs, "
                       f"{sum(exp.logs.values())} samples)")
        if exp.withheld:
            typer.echo(f"left out: the text of {', '.join(exp.withheld)} (its licence does not "
                       "allow redistribution; --include-restricted keeps it)")
    except (ConfigError, ExportError, WarehouseError) as e:
        _fail(str(e))


def import_cmd(folder: Path = typer.Argument(..., help="A folder `carryon export --format hf` "
                                             "wrote."),
               config: Optional[str] = typer.Option(None, "--config", "-c", help=(
                   "Import into this config's home (default: $CARRYON_HOME or .carryon).")),
               home: Optional[Path] = typer.Option(None, "--home", help="The fresh home to "
                                                   "create (overrides --config).")):
    """Read an export back into a fresh home (its report and `carryon sql` then work on it)."""
    from tasks.export.importer import import_export
    from tasks.export.run_info import ExportError
    from warehouse import WarehouseError

    try:
        target = home or _home(config)
        counts = import_export(folder, target)
    except (ConfigError, ExportError, WarehouseError) as e:
        _fail(str(e))
    typer.echo(f"import: {target} ({', '.join(f'{t} {n}' for t, n in counts.items())})")
