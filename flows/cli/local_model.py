"""``carryon local-model start|stop|status``: the offline llama.cpp server (tasks/ops/local_model.py)."""

from __future__ import annotations

import json
from typing import Optional

import typer

from flows.cli.common import _fail, _home
from tasks.config import ConfigError

local_app = typer.Typer(no_args_is_help=True, help="The offline local model server (llama.cpp).")


@local_app.command("start")
def local_start(config: Optional[str] = typer.Option(None, "--config", "-c"),
                port: Optional[int] = None, model_path: Optional[str] = None,
                threads: Optional[int] = typer.Option(
                    None, help="CPU threads for llama.cpp (default: every core).")):
    """Start the llama.cpp server on loopback and wait until it answers."""
    from tasks.ops import local_model

    try:
        info = local_model.start(_home(config), port=port, model_path=model_path,
                                 threads=threads)
    except (RuntimeError, ConfigError) as e:
        _fail(str(e))
    typer.echo(json.dumps(info))


@local_app.command("stop")
def local_stop(config: Optional[str] = typer.Option(None, "--config", "-c")):
    """Stop the server started by `local-model start`."""
    from tasks.ops import local_model

    typer.echo("stopped" if local_model.stop(_home(config)) else "not running")


@local_app.command("status")
def local_status(config: Optional[str] = typer.Option(None, "--config", "-c")):
    """Print the running server's record, or exit 1 if none."""
    from tasks.ops import local_model

    info = local_model.status(_home(config))
    if info is None:
        typer.echo("not running")
        raise typer.Exit(1)
    typer.echo(json.dumps(info))
