"""What the ``carryon`` commands share: the ``--config`` option, the one-line error exit and
the home folder (a config's, else ``$CARRYON_HOME`` or ``.carryon``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer

from tasks.config import load_config

ConfigOpt = typer.Option(..., "--config", "-c", help="The run's YAML config file.")


def _fail(msg: str, code: int = 2):
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(code)


def _home(config: Optional[str]) -> Path:
    if config:
        return load_config(config).home_path
    return Path(os.environ.get("CARRYON_HOME") or ".carryon")


def _warehouse_path(config: Optional[str]) -> Path:
    """The home's warehouse file; one line and exit 2 for a bad config or no warehouse yet."""
    from tasks.config import ConfigError

    try:
        path = _home(config) / "warehouse.duckdb"
    except ConfigError as e:
        _fail(str(e))
    if not path.exists():
        _fail(f"{path}: no warehouse yet (run `carryon run` first)")
    return path
