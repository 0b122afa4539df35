"""``carryon cache stats|prune|clear|convert``: inspect, trim and convert the LLM response cache."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer

from flows.cli.common import _fail, _home
from flows.cli.table import _print_table
from tasks.config import ConfigError, load_config

cache_app = typer.Typer(no_args_is_help=True, help="Inspect and trim the LLM response cache.")


def _cache_dir(config: Optional[str]) -> Path:
    return (load_config(config).cache_path if config else
            Path(os.environ.get("CARRYON_CACHE_DIR") or _home(None) / "cache"))


def _cache(config: Optional[str]):
    from tasks.gateway.cache import CacheError, ResponseCache

    try:
        return ResponseCache(_cache_dir(config))
    except (ConfigError, CacheError) as e:
        _fail(str(e))


@cache_app.command("stats")
def cache_stats(config: Optional[str] = typer.Option(None, "--config", "-c"),
                role: Optional[str] = None, model: Optional[str] = None):
    """Entries per role and model, and the cache's size on disk."""
    st = _cache(config).stats()
    rows = [{"role": r, "model": m, "entries": n} for (r, m), n in sorted(st["by_role_model"].items(), key=str)
            if (role is None or r == role) and (model is None or m == model)]
    _print_table(rows)
    typer.echo(f"total entries: {st['entries']}, {st['volume_bytes'] / 1e6:.1f} MB on disk")


@cache_app.command("prune")
def cache_prune(config: Optional[str] = typer.Option(None, "--config", "-c"),
                role: Optional[str] = None, model: Optional[str] = None):
    """Drop entries no run in the warehouse used (optionally only of one role/model)."""
    from warehouse import Warehouse

    cache = _cache(config)
    path = _home(config) / "warehouse.duckdb"
    used = Warehouse(path).recorded_call_hashes() if path.exists() else set()
    n = cache.delete_where(role, model, keep=used)
    typer.echo(f"pruned {n} entries not referenced by any recorded run")


@cache_app.command("clear")
def cache_clear(config: Optional[str] = typer.Option(None, "--config", "-c"),
                role: Optional[str] = None, model: Optional[str] = None):
    """Drop every entry (or every entry of one role/model)."""
    n = _cache(config).delete_where(role, model)
    typer.echo(f"cleared {n} entries")


@cache_app.command("convert")
def cache_convert(config: Optional[str] = typer.Option(None, "--config", "-c")):
    """Once, for a cache written before values were JSON: rewrite its pickled entries as JSON.
    Reading them runs pickle: convert only a folder you trust (your own)."""
    from tasks.gateway.cache import CacheError, convert_legacy

    try:
        directory = _cache_dir(config)
        if not directory.is_dir():
            _fail(f"{directory}: no response cache here")
        n = convert_legacy(directory)
    except (ConfigError, CacheError) as e:
        _fail(str(e))
    typer.echo(f"{directory}: {n} entries converted to JSON" if n
               else f"{directory}: nothing to convert (its values are JSON already)")
