"""A run: its context (config, warehouse, gateway), provenance and pre-flight checks.

Everything that can fail before spending money or writing rows is checked in ``open_run``:
the config, named API-key variables, and that each ``api_base`` the selected stages use
accepts TCP connections. Only then is the ``runs`` row written.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
import socket
import subprocess
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from urllib.parse import urlsplit

from tasks.bench import condition_rows
from tasks.config import Config, ConfigError, check_secrets, load_config
from tasks.core.items import check_items
from warehouse import Warehouse


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

            self._gateway = Gateway(self.config.cache_path, self.run_id, self.config.gateway,
                                    shards=self.shard_count)
            self._gateway.batch_store = self.warehouse  # batch mode records its batches here
            if self.config.budget_usd is not None:  # the cap, and what this home spent before
                from tasks.gateway.budget import Budget

                self._gateway.budget = Budget(self.config.budget_usd, recorded_spend(self.warehouse))
            from tasks.engine.progress import gateway_calls, set_activity, set_calls

            set_activity(self._gateway.activity)  # heartbeat lines say what the models did
            gw = self._gateway
            set_calls(lambda: gateway_calls(gw))  # and the count moves within a stage
        return self._gateway

    def flush_calls(self) -> int:
        """Write the gateway's provenance rows to ``llm_calls`` (bulk, idempotent), each merged
        into the row this run already stored for its call hash (the gateway holds only the
        rows since its last drain)."""
        if self._gateway is None:
            return 0
        rows = self._gateway.drain_records()
        if rows:
            rows = merged_calls(self.warehouse, self.run_id, rows)
        if rows:
            self.warehouse.write("llm_calls", rows)
        return len(rows)


def merged_calls(wh: Warehouse, run_id: str, rows: list[dict]) -> list[dict]:
    """Drained provenance rows merged into the ones this run stored for the same call hashes
    (tasks/gateway/client.py ``merge_call_rows``): what to write; a row that adds nothing (a
    hit after the stored real request) is left out."""
    from tasks.gateway.client import merge_call_rows

    stored = {r["call_hash"]: r for r in wh.query(
        "SELECT * FROM llm_calls WHERE run_id = ? AND call_hash IN (SELECT unnest(?::VARCHAR[]))",
        [run_id, [r["call_hash"] for r in rows]])}
    if not stored:
        return rows
    out = []
    for r in rows:
        m = merge_call_rows(stored.get(r["call_hash"]), r)
        if m is not None:
            out.append({**m, "latency_s": round(m["latency_s"], 4)})
    return out


# Live contexts by run id: Prefect subflows receive the run id (a plain string parameter),
# never the context object, so no secret or handle ever lands in Prefect's parameters.
_RUNS: dict[str, RunContext] = {}


def get_run(run_id: str) -> RunContext:
    try:
        return _RUNS[run_id]
    except KeyError:
        raise RuntimeError(f"run {run_id} is not open in this process") from None


def parse_stages(stages: str | list[str] | None, known: list[str],
                 renamed: dict[str, str] | None = None) -> list[str]:
    """The selected stages in pipeline order; ``known`` = the benchmark's stages, ``renamed``
    its older stage names (the spec's ``renamed_stages``: what a command written before a
    stage was renamed selects)."""
    known = list(known)
    if stages in (None, "", "all"):
        return known
    names = [s.strip() for s in (stages.split(",") if isinstance(stages, str) else stages) if s.strip()]
    expanded = []
    for s in names:
        new = (renamed or {}).get(s, s)
        expanded += [new] if isinstance(new, str) else list(new)
    names = expanded
    unknown = [s for s in names if s not in known]
    if unknown:
        raise ConfigError(f"unknown stage(s) {unknown}; choose from {', '.join(known)}")
    return [s for s in known if s in names]  # pipeline order whatever the user's order


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


def recorded_spend(wh: Warehouse) -> float:
    """What this home has paid for model calls: every run's requests sent (cache hits cost
    nothing; a hit's row repeats its answer's cost), as recorded in ``llm_calls``."""
    return float(wh.query("SELECT coalesce(sum(cost_usd), 0) AS usd FROM llm_calls "
                          "WHERE NOT cache_hit")[0]["usd"])


def with_budget(cfg: Config, budget_usd: float | None) -> Config:
    """The config with ``carryon run --budget-usd`` in place of its ``budget_usd``."""
    if budget_usd is None:
        return cfg
    if not budget_usd > 0 or budget_usd == float("inf"):
        raise ConfigError(f"--budget-usd {budget_usd}: a number of dollars above 0")
    return cfg.model_copy(update={"budget_usd": float(budget_usd)})


def check_budget(cfg: Config, roles: list[str]) -> None:
    """A cap needs every model it may pay for priced: an unpriced model's spend could not be
    counted, so a run with ``budget_usd`` refuses to start with one (one line naming each)."""
    if cfg.budget_usd is None:
        return
    from tasks.gateway.prices import MEMO_NAME, rates

    memo = cfg.cache_path / MEMO_NAME
    unpriced = [f"{s.where} ({s.model})" for role in roles for s in cfg.role_specs(role)
                if not rates(s, memo if memo.parent.is_dir() else None).priced]
    if unpriced:
        raise ConfigError(f"{cfg.source_path or 'config'}: budget_usd: cannot count the spend "
                          f"of unpriced models: {', '.join(unpriced)}; give each a price: (USD "
                          "per million tokens; 0 where nobody bills it) or run without a cap")


def preflight(cfg: Config, stages: list[str], limit: int | None = None) -> None:
    check_folders(cfg)
    # A bad dataset file fails here, naming file, row and field (the work stage selects the
    # run's work for every model stage).
    if any(cfg.spec.stage(s).phase != "report" for s in stages):
        from tasks.engine.plan import foreseen_items

        # What a component needs of an item (Ben-Util: its checklist; a clarifying user: its
        # intent) fails here too, before anything is played, for the items as the prepare
        # stages will leave them (a checklist the checklists stage will build is there).
        check_items(cfg, foreseen_items(cfg, cfg.spec.work_stage().select(cfg, limit)))
    by_stage, optional = _stage_roles(cfg, stages)
    roles = sorted({r for s in stages for r in by_stage[s]})
    # Every missing role in one line (not one per run).
    missing = [r for r in roles if not cfg.role_specs(r) and r not in optional]
    if missing:
        needed = [s for s in stages if set(missing) & set(by_stage[s])]
        raise ConfigError(f"{cfg.source_path}: " + ", ".join(f"models.{r}" for r in missing)
                          + f": needed by stage(s) {needed} but not configured")
    check_secrets(cfg, roles)
    check_budget(cfg, roles)
    seen: dict[str, str | None] = {}
    for role in roles:
        for spec in cfg.role_specs(role):
            if spec.api_base and spec.api_base not in seen:
                seen[spec.api_base] = _reachable(spec.api_base)
            if spec.api_base and seen[spec.api_base]:
                raise ConfigError(f"{cfg.source_path}: {spec.where} ({spec.model}): api_base "
                                  f"{spec.api_base} is unreachable: {seen[spec.api_base]}")


def _stage_roles(cfg: Config, stages: list[str]) -> tuple[dict[str, list[str]], set[str]]:
    """The roles each selected stage calls, and those it calls only when configured (the
    spec's: tasks/core/spec.py ``stage_roles``)."""
    out, optional = {}, set()
    for s in stages:
        out[s], opt = cfg.spec.stage_roles(s)
        optional |= opt
    return out, optional


def check_home(home: Path, what: str = "home folder") -> None:
    """The folder must exist (or be creatable) and accept writes: a file in its place, a
    read-only, virtual (/proc) or full disk fails here, with the path and the reason, before
    any stage starts (and before Prefect's server is started)."""
    home = Path(home)
    for p in (home, *home.parents):
        if p.exists():
            if not p.is_dir():
                raise ConfigError(f"{home}: the {what} is not usable: {p} is a file, not a folder")
            break
    probe = home / f".write-probe-{secrets.token_hex(4)}"
    try:
        home.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"x" * 4096)
    except OSError as e:
        raise ConfigError(f"{home}: the {what} is not writable: {e.strerror or e}") from None
    finally:
        try:
            probe.unlink()
        except OSError:
            pass


def check_folders(cfg: Config) -> None:
    """The home and the cache folder (they may differ) both accept writes. A pre-flight check
    leaves nothing behind: folders it had to create to find out are removed again."""
    where = cfg.source_path or "config"
    for path, what, field_ in ((cfg.home_path, "home folder", "home"),
                               (cfg.cache_path, "cache folder", "cache_dir")):
        path = Path(path).absolute()
        missing = [p for p in (path, *path.parents) if not p.exists()]
        try:
            check_home(path, what)
        except ConfigError as e:
            raise ConfigError(f"{where}: {field_}: {e}") from None
        finally:
            for p in missing:  # deepest first
                try:
                    p.rmdir()
                except OSError:
                    break


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
             shard_count: int = 1, check: bool = True,
             budget_usd: float | None = None, loaded: Config | None = None) -> RunContext:
    """Validate everything, then record the run. Raises ConfigError before writing anything.
    ``budget_usd``: the cap in place of the config's (``carryon run --budget-usd``);
    ``loaded``: the config at ``config_path`` as the caller already loaded it (with that cap)."""
    cfg = loaded or with_budget(load_config(config_path), budget_usd)
    selected = parse_stages(stages, cfg.spec.stages, cfg.spec.renamed_stages)
    if limit is not None and limit <= 0:
        raise ConfigError("--limit must be a positive number of queries")
    if shard_count < 1 or not 0 <= shard_index < shard_count:
        raise ConfigError(f"shard index {shard_index} is not in 0..{shard_count - 1}")
    if check:
        preflight(cfg, selected, limit)
    check_home(cfg.home_path)
    wh = Warehouse(cfg.home_path / "warehouse.duckdb").init()
    from tasks import untrusted

    untrusted.configure(cfg.limits)  # the per-turn cap on model text in prompts, for this run
    run_id = new_run_id(cfg)
    mark_interrupted(wh, run_id)  # rows left 'running' by a process that is gone
    wh.write_many([("runs", [{
        "run_id": run_id, "config_path": str(config_path), "config_hash": cfg.config_hash(),
        "config_json": json.dumps(cfg.model_dump(mode="json"), sort_keys=True),
        "git_rev": git_revision(), "packages": json.dumps(package_versions()), "seed": cfg.seed,
        "stages": ",".join(selected), "started": dt.datetime.now(dt.timezone.utc),
        "status": "running", "pid": os.getpid(), "host": socket.gethostname(),
    }]), ("bench_conditions", condition_rows(cfg.spec), ("benchmark = ?", [cfg.spec.name]))])
    # (the views read the condition names of the spec this run uses)
    ctx = RunContext(run_id=run_id, config=cfg, warehouse=wh, stages=selected, limit=limit,
                     shard_index=shard_index, shard_count=shard_count)
    _RUNS[run_id] = ctx
    return ctx


def run_totals(ctx: RunContext) -> dict:
    """What a finished run's summary says of its model calls."""
    from tasks import untrusted

    gw = ctx._gateway
    stats = gw.stats if gw is not None else {}
    return {"requests": sum(s.requests for s in stats.values()),
            "cache_hits": sum(s.hits for s in stats.values()),
            "failures": {r: s.failures for r, s in stats.items() if s.failures},
            # Failures read back from earlier runs (deterministic junk), not sent again.
            "remembered_failures": {r: s.remembered for r, s in stats.items() if s.remembered},
            # Model-written turns cut to limits.prompt_turn_chars in the prompts that showed them.
            "capped_turns": untrusted.cuts()}


def finish_if_unchanged(ctx: RunContext) -> dict | None:
    """An open run whose every stage is unchanged since it last ran whole (its memo,
    tasks/engine/stage_memo.py ``kept_stages``; the report's too): recorded as succeeded with
    each stage's kept summary, and that summary returned, with no Prefect flow and no model
    call. None: a stage must run; the run stays open for the flow (flows/carryon.py)."""
    from tasks.engine.stage_memo import kept_stages, say_kept

    try:
        kept = kept_stages(ctx)
        if kept is None:
            return None
        for stage, summary in kept.items():
            say_kept(ctx.config.spec, stage, summary)
        out = {"run_id": ctx.run_id, "benchmark": ctx.config.spec.name, "home": str(ctx.home),
               "stages": kept, "seconds": {}, **run_totals(ctx)}
    except BaseException as e:  # a Ctrl-C, a damaged warehouse: the row says so, never 'running'
        interrupted = isinstance(e, KeyboardInterrupt)
        finish_run(ctx, "interrupted" if interrupted else "failed",
                   "interrupted by SIGINT" if interrupted else f"{type(e).__name__}: {e}")
        raise
    finish_run(ctx, "succeeded")
    return out


def close_if_open(run_id: str | None, status: str, error: str) -> None:
    """Finish a run this process opened and no flow finished (its server failed to start,
    a Ctrl-C came before the flow began): its row says so instead of staying 'running'."""
    ctx = _RUNS.get(run_id) if run_id else None
    if ctx is not None:
        finish_run(ctx, status, error)


def finish_run(ctx: RunContext, status: str, error: str | None = None) -> None:
    ctx.flush_calls()
    requests = hits = 0  # no gateway opened (every model stage skipped or none selected): none
    if ctx._gateway is not None:
        requests = sum(s.requests for s in ctx._gateway.stats.values())
        hits = sum(s.hits for s in ctx._gateway.stats.values())
        ctx._gateway.close()
    row = ctx.warehouse.run_row(ctx.run_id)
    row.update(finished=dt.datetime.now(dt.timezone.utc), status=status, error=error,
               requests=requests, cache_hits=hits)
    ctx.warehouse.write("runs", [row])
    _RUNS.pop(ctx.run_id, None)


# ----------------------------------------------------------------------------- dead runs

def _boot_time() -> float | None:
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except OSError:
        pass
    return None


def process_started(pid: int) -> float | None:
    """When process ``pid`` started (Unix time, to a clock tick), or None where /proc has no
    answer; raises ProcessLookupError if it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    except FileNotFoundError:
        raise ProcessLookupError(pid) from None
    except (OSError, IndexError):
        return None
    if stat[0] in ("Z", "X"):
        raise ProcessLookupError(pid)
    boot = _boot_time()
    if boot is None:
        return None
    return boot + int(stat[19]) / os.sysconf("SC_CLK_TCK")


def run_process_alive(pid: int | None, started: dt.datetime | None, slack_s: float = 2.0) -> bool:
    """Whether the process that wrote a runs row on this host may still be running it.

    Alive means: the pid exists, is not a zombie, and started no later than the row did
    (``slack_s`` for clock ticks). A live pid that started after the row is another process
    that reused the number, so the run's own process is gone. Whether the process "is
    carryon" is not asked: a run can live in any Python process (``carryon run``, a
    worker's ``python -m prefect.engine``, a notebook, pytest); the start time identifies it.
    A row with no pid (written before pids were recorded) counts as alive: it is left alone.
    """
    if not pid or pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, another user's
    try:
        t0 = process_started(pid)
    except ProcessLookupError:
        return False
    if t0 is None or started is None:
        return True  # no /proc (not Linux): the pid exists, trust it
    if started.tzinfo is None:
        started = started.replace(tzinfo=dt.timezone.utc)  # the warehouse stores UTC
    return t0 <= started.timestamp() + slack_s


def mark_interrupted(wh: Warehouse, found_by: str, now: dt.datetime | None = None) -> list[str]:
    """Mark this host's runs rows that are 'running' but whose process is gone as
    'interrupted' (finished = now, error says who found it, when, and which process died);
    return their run ids. Rows of other hosts are left alone: their pids mean nothing here."""
    now = now or dt.datetime.now(dt.timezone.utc)
    host = socket.gethostname()
    rows = wh.query("SELECT * FROM runs WHERE status = 'running' AND host = ? AND pid IS NOT NULL",
                    [host])
    dead = [r for r in rows if not run_process_alive(r["pid"], r["started"])]
    for r in dead:
        r.update(status="interrupted", finished=now,
                 error=(f"interrupted: found by run {found_by} at {now.isoformat(timespec='seconds')}; "
                        f"the process (pid {r['pid']} on host {r['host']}) is gone"))
    if dead:
        wh.write("runs", dead)
    return [r["run_id"] for r in dead]
