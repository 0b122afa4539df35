"""A run: its context (config, warehouse, gateway), provenance and pre-flight checks.

Everything that can fail before spending money or writing rows is checked in ``open_run``:
the config, named API-key variables, and that each ``api_base`` the selected stages use
accepts TCP connections. Only then is the ``runs`` row written.
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
import socket
import subprocess
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from urllib.parse import urlsplit

from tasks.config import Config, ConfigError, check_secrets, load_config
from warehouse import Warehouse
from warehouse.schema import Run

STAGES = ["checklists", "simulate", "judge", "report"]

# The model roles each stage calls (for pre-flight checks and ``carryon plan``).
STAGE_ROLES = {
    "checklists": ["intent_rewriter", "ensemble", "wildguard", "decomposer", "merger", "misuse_filter"],
    "simulate": ["intent_rewriter", "targets", "user_simulator"],
    "judge": ["benutil_judge", "safety_judge"],
    "report": [],
}

# Packages whose versions shape results, recorded with every run.
PROVENANCE_PACKAGES = ["carryonbench", "litellm", "prefect", "duckdb", "sqlmodel", "pydantic",
                       "jinja2", "diskcache", "statsmodels"]


@dataclass
class RunContext:
    run_id: str
    config: Config
    warehouse: Warehouse
    stages: list[str]
    limit: int | None = None
    shard_index: int = 0
    shard_count: int = 1
    _gateway: object = field(default=None, repr=False)

    @property
    def home(self) -> Path:
        return self.config.home_path

    @property
    def gateway(self):
        if self._gateway is None:
            from tasks.gateway import Gateway

            self._gateway = Gateway(self.config.cache_path, self.run_id, self.config.gateway)
        return self._gateway

    def flush_calls(self) -> int:
        """Write the gateway's provenance rows to ``llm_calls`` (bulk, idempotent)."""
        if self._gateway is None:
            return 0
        rows = self._gateway.drain_records()
        if rows:
            self.warehouse.write("llm_calls", rows)
        return len(rows)


# Live contexts by run id: Prefect subflows receive the run id (a plain string parameter),
# never the context object, so no secret or handle ever lands in Prefect's parameters.
_RUNS: dict[str, RunContext] = {}


def get_run(run_id: str) -> RunContext:
    try:
        return _RUNS[run_id]
    except KeyError:
        raise RuntimeError(f"run {run_id} is not open in this process") from None


def parse_stages(stages: str | list[str] | None) -> list[str]:
    if stages in (None, "", "all"):
        return list(STAGES)
    names = [s.strip() for s in (stages.split(",") if isinstance(stages, str) else stages) if s.strip()]
    unknown = [s for s in names if s not in STAGES]
    if unknown:
        raise ConfigError(f"unknown stage(s) {unknown}; choose from {', '.join(STAGES)}")
    return [s for s in STAGES if s in names]  # pipeline order whatever the user's order


def _reachable(api_base: str, timeout: float = 3.0) -> str | None:
    """None if a TCP connection to api_base's host:port succeeds, else the reason."""
    parts = urlsplit(api_base)
    if not parts.hostname:
        return "not a URL"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout):
            return None
    except OSError as e:
        return e.strerror or str(e) or type(e).__name__


def preflight(cfg: Config, stages: list[str], limit: int | None = None) -> None:
    if any(s in stages for s in ("checklists", "simulate", "judge")):
        from tasks.data import select_queries

        select_queries(cfg, limit)  # a bad dataset file fails here, naming file, row and field
    roles = sorted({r for s in stages for r in STAGE_ROLES[s]})
    for role in roles:
        if not cfg.role_specs(role):
            raise ConfigError(f"{cfg.source_path}: models.{role}: needed by stage(s) "
                              f"{[s for s in stages if role in STAGE_ROLES[s]]} but not configured")
    check_secrets(cfg, roles)
    seen: dict[str, str | None] = {}
    for role in roles:
        for spec in cfg.role_specs(role):
            if spec.api_base and spec.api_base not in seen:
                seen[spec.api_base] = _reachable(spec.api_base)
            if spec.api_base and seen[spec.api_base]:
                raise ConfigError(f"{cfg.source_path}: {spec.where} ({spec.model}): api_base "
                                  f"{spec.api_base} is unreachable: {seen[spec.api_base]}")


def check_home(home: Path) -> None:
    """The home folder must exist (or be creatable) and accept writes: a read-only or full
    disk fails here, with the path and the reason, before any stage starts."""
    probe = home / f".write-probe-{secrets.token_hex(4)}"
    try:
        home.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"x" * 4096)
    except OSError as e:
        raise ConfigError(f"{home}: the home folder is not writable: {e.strerror or e}") from None
    finally:
        try:
            probe.unlink()
        except OSError:
            pass


def git_revision() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=5)
        if out.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=Path(__file__).parent, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def package_versions() -> dict:
    out = {}
    for name in PROVENANCE_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def new_run_id(cfg: Config) -> str:
    now = dt.datetime.now(dt.timezone.utc)
    return f"{now:%Y%m%d-%H%M%S}-{cfg.config_hash()[:6]}-{secrets.token_hex(2)}"


def open_run(config_path: str, stages=None, limit: int | None = None, shard_index: int = 0,
             shard_count: int = 1, check: bool = True) -> RunContext:
    """Validate everything, then record the run. Raises ConfigError before writing anything."""
    cfg = load_config(config_path)
    selected = parse_stages(stages)
    if limit is not None and limit <= 0:
        raise ConfigError("--limit must be a positive number of queries")
    if shard_count < 1 or not 0 <= shard_index < shard_count:
        raise ConfigError(f"shard index {shard_index} is not in 0..{shard_count - 1}")
    if check:
        preflight(cfg, selected, limit)
    check_home(cfg.home_path)
    wh = Warehouse(cfg.home_path / "warehouse.duckdb").init()
    run_id = new_run_id(cfg)
    wh.write(Run, [{
        "run_id": run_id, "config_path": str(config_path), "config_hash": cfg.config_hash(),
        "config_json": json.dumps(cfg.model_dump(mode="json"), sort_keys=True),
        "git_rev": git_revision(), "packages": json.dumps(package_versions()), "seed": cfg.seed,
        "stages": ",".join(selected), "started": dt.datetime.now(dt.timezone.utc),
        "status": "running",
    }])
    ctx = RunContext(run_id=run_id, config=cfg, warehouse=wh, stages=selected, limit=limit,
                     shard_index=shard_index, shard_count=shard_count)
    _RUNS[run_id] = ctx
    return ctx


def finish_run(ctx: RunContext, status: str, error: str | None = None) -> None:
    ctx.flush_calls()
    requests = hits = None
    if ctx._gateway is not None:
        requests = sum(s.requests for s in ctx._gateway.stats.values())
        hits = sum(s.hits for s in ctx._gateway.stats.values())
        ctx._gateway.close()
    row = ctx.warehouse.query("SELECT * FROM runs WHERE run_id = ?", [ctx.run_id])[0]
    row.update(finished=dt.datetime.now(dt.timezone.utc), status=status, error=error,
               requests=requests, cache_hits=hits)
    ctx.warehouse.write(Run, [row])
    _RUNS.pop(ctx.run_id, None)
