"""``carryon server up|down|status|why|add-worker|stop-worker`` and ``carryon merge``.

Registered in flows/cli/__init__.py (``app.add_typer(server_app, name="server")`` and
``app.command("merge")(merge)``); without the console script: ``python -m flows.cli server
up|down|status|add-worker|stop-worker`` and ``python -m flows.cli merge``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

# Before Prefect is imported anywhere: no internet here, so no telemetry.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")

import typer  # noqa: E402

from flows.cli.common import _fail  # noqa: E402

server_app = typer.Typer(no_args_is_help=True,
                         help="A local Prefect server, the deployments and a worker (docs/deploy.md).")

HomeOpt = typer.Option(None, "--home", help="Where prefect/ (database, logs, state.json) lives. "
                                            "Default: $CARRYON_HOME or .carryon")


def _home(home: Optional[str]) -> Path:
    return Path(home or os.environ.get("CARRYON_HOME") or ".carryon").expanduser().resolve()


@server_app.command("up")
def server_up(home: Optional[str] = HomeOpt,
              port: int = typer.Option(4200, help="Port of the server on 127.0.0.1."),
              worker: bool = typer.Option(True, help="Also start a process worker here."),
              worker_limit: Optional[int] = typer.Option(None, help="Most flow runs the worker runs at once."),
              poll_s: float = typer.Option(5.0, help="How often the worker asks for new runs (s)."),
              timeout_s: float = typer.Option(180.0, help="Give up on any one step after this long.")):
    """Start the Prefect server (SQLite under <home>/prefect), deploy carryon/full and
    carryon/demo, and start a worker. Safe to run again."""
    from tasks.ops import prefect_server

    try:
        state = prefect_server.up(_home(home), port=port, worker=worker, worker_limit=worker_limit,
                                  poll_s=poll_s, timeout_s=timeout_s)
    except prefect_server.ServerError as e:
        _fail(str(e))
    typer.echo(f"Prefect server: {state['ui_url']}  (UI in a browser; logs in {state['prefect_home']})")
    typer.echo(f"workers: {', '.join(w['name'] for w in state['workers']) or '(none)'} on pool "
               f"{prefect_server.POOL}")
    typer.echo("deployments: carryon/full, carryon/demo. In your shell:")
    typer.echo(f"  {prefect_server.export_line(state)}")
    # The demo runs offline on the local model (`carryon local-model start`); carryon/full
    # takes your config (configs/paper.yaml needs the CASE-Bench file and provider keys).
    typer.echo("  prefect deployment run carryon/demo --watch")
    typer.echo("  prefect deployment run carryon/full --param config=<your config> --watch")


@server_app.command("add-worker")
def server_add_worker(name: str = typer.Argument(..., help="A name for the worker."),
                      home: Optional[str] = HomeOpt,
                      carryon_home: Optional[str] = typer.Option(
                          None, help="CARRYON_HOME of this worker's runs (its own warehouse and cache)."),
                      limit: Optional[int] = typer.Option(None, help="Most flow runs at once."),
                      poll_s: float = typer.Option(5.0, help="How often it asks for new runs (s).")):
    """Start one more worker on this machine's server (e.g. one per shard, each with its
    own --carryon-home; then `carryon merge`)."""
    from tasks.ops import prefect_server

    env = {"CARRYON_HOME": str(Path(carryon_home).expanduser().resolve())} if carryon_home else None
    try:
        rec = prefect_server.start_worker(_home(home), name, env=env, limit=limit, poll_s=poll_s)
    except prefect_server.ServerError as e:
        _fail(str(e))
    typer.echo(json.dumps(rec))


@server_app.command("stop-worker")
def server_stop_worker(name: str = typer.Argument(..., help="The worker's name."),
                       home: Optional[str] = HomeOpt):
    """Stop one worker started by `up` or `add-worker`."""
    from tasks.ops import prefect_server

    typer.echo("stopped" if prefect_server.stop_worker(_home(home), name) else "not running")


@server_app.command("down")
def server_down(home: Optional[str] = HomeOpt):
    """Stop the workers and the server started by `up` (TERM, then KILL)."""
    from tasks.ops import prefect_server

    typer.echo("stopped" if prefect_server.down(_home(home)) else "not running")


@server_app.command("why")
def server_why(flow_run: Optional[str] = typer.Argument(
        None, help="A flow run's id; default: the latest failed or crashed carryon run.")):
    """The one-line reason a deployment run failed (`prefect deployment run --watch` prints
    only the state's name): the failed state's message, from the server at PREFECT_API_URL."""
    import asyncio

    line = asyncio.run(failed_run_reason(flow_run))
    if line is None:
        _fail("no failed or crashed carryon flow run on this Prefect server", code=1)
    typer.echo(line)


async def failed_run_reason(flow_run: str | None) -> str | None:
    """"<run name> (<state>): <message>" of the flow run, or of the latest failed carryon run."""
    from uuid import UUID

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowFilter, FlowFilterName, FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType)
    from prefect.client.schemas.objects import StateType
    from prefect.client.schemas.sorting import FlowRunSort

    async with get_client() as client:
        if flow_run:
            runs = [await client.read_flow_run(UUID(flow_run))]
        else:
            runs = await client.read_flow_runs(
                flow_filter=FlowFilter(name=FlowFilterName(any_=["carryon"])),
                flow_run_filter=FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(
                    any_=[StateType.FAILED, StateType.CRASHED]))),
                sort=FlowRunSort.START_TIME_DESC, limit=1)
    if not runs or runs[0].state is None:
        return None
    state = runs[0].state
    # Prefect prefixes the exception's own one line; the rest of the traceback is in the logs.
    message = " ".join((state.message or "no message").split())
    message = message.removeprefix("Flow run encountered an exception: ")
    return f"{runs[0].name} ({state.name}): {message}"


@server_app.command("status")
def server_status(home: Optional[str] = HomeOpt):
    """Print the record with live flags; exit 1 if the server is not healthy."""
    from tasks.ops import prefect_server

    state = prefect_server.status(_home(home))
    if state is None:
        typer.echo("not running")
        raise typer.Exit(1)
    typer.echo(json.dumps(state, indent=2))
    if not state["healthy"]:
        raise typer.Exit(1)


def merge(into: str = typer.Option(..., "--into", help="Target: a warehouse .duckdb file or a home folder."),
          sources: list[str] = typer.Option(..., "--from", help="A shard's warehouse file or home (repeat)."),
          json_out: bool = typer.Option(False, "--json", help="Print the row counts as JSON.")):
    """Merge shard warehouses into one (upsert on natural keys, one transaction)."""
    import tasks.bench  # noqa: F401  (registers the benchmarks' views for the merged file)
    from warehouse.merge import MergeError, merge_warehouses, resolve_warehouse

    try:
        counts = merge_warehouses(resolve_warehouse(into, must_exist=False),
                                  [resolve_warehouse(s) for s in sources])
    except MergeError as e:
        _fail(str(e))
    if json_out:
        typer.echo(json.dumps(counts))
        return
    for table, n in counts.items():
        typer.echo(f"{table:20s} {n:>9d} rows")

