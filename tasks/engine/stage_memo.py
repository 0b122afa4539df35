"""Stage memos: a rerun skips a stage whose inputs are unchanged since it last ran whole.

A fully cached rerun replays every call of every stage from the response cache and finds each
row it would write already stored; on this machine that took most of a warm rerun's time
(thousands of cache reads, prompt renders, the stage's Prefect subflow and tasks). A stage
memo says the same thing without the replay: "this stage, on exactly these inputs, wrote
exactly these rows". Kept in the warehouse table ``stage_memos``.

The fingerprint of a stage holds everything a replay's calls and rows are computed from:

- the project's source (every file of ``tasks/``, ``flows/``, ``warehouse/`` and the prompt
  templates) and the versions of the libraries that parse and render (pydantic, jinja2, ...);
- the resolved config: the config document, every role's resolved model entry (the
  environment's ``CARRYON_API_BASE`` included), the home and cache folders;
- the run's queries or items (dataset, limit and shard applied), in full;
- a spec loaded from a path: the code beside it (its spec, component modules, views);
- the response cache's generation token (tasks/gateway/cache.py), which changes when entries
  are deleted or the folder is new: a skip relies on the stage's answers still being there;
- the tables of the earlier stages (and the shared ``bench_conditions``), as a row count and
  an order-free sum of DuckDB row hashes per table.

A memo is written only when the stage returned (no StageFailed) and none of its calls failed
(failed calls are not cached, so a rerun must try them again). A rerun skips the stage when a
memo with its fingerprint exists and the stage's own tables still hash as the memo recorded
(rows deleted or edited by hand: the stage runs). Anything else runs the stage as before, so
a skip is never required for correctness; editing any source file, for instance, replays
every stage once. ``carryon run --replay`` (or ``replay=True``) runs every stage regardless.

Every stage that writes tables keeps a memo (its ``outputs``, tasks/stages/): the engine's
episodes and verdicts, and a benchmark's own (CarryOnBench's checklists). The engine's tables
hold every benchmark's rows, so a run of another benchmark in the same home changes them: the
next rerun replays its stages once (from the cache) instead of skipping them.

The report keeps one too: it reads any table, so its memo watches every table of the
warehouse as it stood once the report was written, but the run bookkeeping (``runs``,
``stage_memos``) and the tables the report itself refreshes each time (a section's
``writes``: CarryOnBench's ``table2_ci``), beside the source, the config, the run's work and
the versions of the libraries that compute and draw. A rerun that finds them all as they
were, and the report folder still there, keeps that folder (the summary names it and the run
that wrote it) instead of writing the same numbers again; ``carryon report`` writes one for
any run at any time.

``kept_stages`` answers, before a run starts its Prefect server, whether every stage of it
would be skipped: then ``carryon run`` records the run without Prefect at all
(flows/cli/run.py).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import hashlib
import json
import sys
from pathlib import Path

SHARED = ("bench_conditions",)  # written by every run's open_run (the spec's condition names)
# Tables a report does not read as data: each run's own row, and the memos themselves.
BOOKKEEPING = ("runs", "stage_memos")
# The libraries between a cached answer and a stored row (parsing, templates, hashing).
_LIBRARIES = ("pydantic", "jinja2", "duckdb", "json-repair", "litellm")
# And those between stored rows and a report (statistics, figures).
_REPORT_LIBRARIES = ("pandas", "numpy", "scipy", "statsmodels", "matplotlib")
_ROOT = Path(__file__).resolve().parents[2]
_SOURCE_DIRS = ("tasks", "flows", "warehouse")


def input_tables(spec, stage: str) -> tuple[str, ...]:
    """The tables a stage's inputs are read from: those of the spec's stages before it."""
    order = spec.stages
    return SHARED + tuple(t for s in order[:order.index(stage)] for t in spec.stage(s).outputs)


# The files of a spec's folder that shape a run: the spec, its component modules, its views and
# templates, and every template of its prompts/ folder. Its data files are not hashed here (a
# folder may hold gigabytes): the run's items are in the fingerprint in full.
_SPEC_SUFFIXES = (".yaml", ".yml", ".py", ".sql", ".j2")


def spec_folder_version(spec) -> str | None:
    """A hash of the code beside a spec loaded from outside the project (its components, views
    and templates are not in the project's source); None for a built-in spec."""
    folder = Path(spec.source_path).resolve().parent if spec.source_path else None
    if folder is None or _ROOT in folder.parents:
        return None
    h = hashlib.sha256()
    files = [p for p in folder.iterdir() if p.is_file() and p.suffix in _SPEC_SUFFIXES]
    # A folder without prompts/ hashes as it did before benchmarks could have one.
    files += [p for p in (folder / "prompts").rglob("*.j2") if p.is_file()]
    for path in sorted(files):
        h.update(f"{path.relative_to(folder)}\0".encode())
        h.update(path.read_bytes())
    return h.hexdigest()


@functools.lru_cache(maxsize=2)
def _library_versions(names: tuple[str, ...] = _LIBRARIES) -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for name in names:
        try:
            out.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            out.append(f"{name} -")
    return "; ".join(out)


def source_version() -> str:
    """A hash of the project's source and prompt templates (read on every call, ~10 ms: a
    template edited between two runs of one process must count)."""
    import prompts

    h = hashlib.sha256(_library_versions().encode())
    roots = [(_ROOT / d, d) for d in _SOURCE_DIRS] + [(Path(prompts.PROMPTS_DIR), "prompts")]
    for root, tag in roots:
        for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            h.update(f"{tag}/{path.relative_to(root)}\0".encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def data_tables(wh, spec) -> tuple[str, ...]:
    """Every table of the warehouse but ``BOOKKEEPING`` and those the spec's report writes
    itself (its sections' ``writes``): what a report may read."""
    from tasks.report.assemble import written_tables

    with wh.connect(read_only=True) as con:
        names = {r[0] for r in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_catalog = "
            "current_database() AND table_type = 'BASE TABLE'").fetchall()}
    return tuple(sorted(names - set(BOOKKEEPING) - set(written_tables(spec))))


def table_digests(wh, tables) -> dict[str, list]:
    """{table: [row count, sum of DuckDB's row hashes]}: order-free, computed in the database
    (a few ms a table). A table missing from an old warehouse reads as absent."""
    out: dict[str, list] = {}
    with wh.connect(read_only=True) as con:
        present = {r[0] for r in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_catalog = current_database()"
        ).fetchall()}
        for t in tables:
            if t not in present:
                out[t] = None
                continue
            n, s = con.execute(f"SELECT count(*), sum(hash(r)) FROM (SELECT * FROM {t}) r").fetchone()
            out[t] = [int(n), str(s or 0)]
    return out


def _config_doc(cfg) -> dict:
    specs = {role: [dataclasses.asdict(s) for s in ss] for role, ss in cfg.all_specs().items()}
    # The cap (budget_usd) shapes how much a run may spend, not the rows a stage writes.
    return {"config": cfg.model_dump(mode="json", exclude={"budget_usd"}), "specs": specs,
            "home": str(cfg.home_path), "cache": str(cfg.cache_path)}


@dataclasses.dataclass
class StageMemo:
    """The memo of one stage of one run: ``skipped()`` before it, ``record()`` after it."""

    ctx: object
    stage: str
    fingerprint: str | None = None
    failures_before: int = 0

    @property
    def outputs(self) -> tuple[str, ...]:
        """The tables whose state the memo records: the stage's own, or for the report every
        table it may read (see the module docstring)."""
        if is_report(self.ctx.config.spec, self.stage):
            return data_tables(self.ctx.warehouse, self.ctx.config.spec)
        return self.ctx.config.spec.stage(self.stage).outputs

    @classmethod
    def open(cls, ctx, stage: str, work_rows: list[dict],
             source: str | None = None) -> "StageMemo | None":
        """``work_rows``: the run's queries or items as rows; ``source``: ``source_version()``
        when the caller just computed it. None: the stage keeps no memo."""
        cfg = ctx.config
        source = source or source_version()
        if is_report(cfg.spec, stage):
            doc = {"stage": stage, "source": source, "config": _config_doc(cfg),
                   "work": work_rows, "libraries": _library_versions(_REPORT_LIBRARIES)}
        elif cfg.spec.stage(stage).outputs:
            from tasks.gateway.cache import generation

            doc = {"stage": stage, "source": source, "config": _config_doc(cfg),
                   "work": work_rows,
                   "cache_generation": generation(cfg.cache_path),
                   "inputs": table_digests(ctx.warehouse, input_tables(cfg.spec, stage))}
        else:
            return None
        spec_version = spec_folder_version(cfg.spec)
        if spec_version:  # only then: the fingerprints of built-in specs stay as they were
            doc["spec_folder"] = spec_version
        blob = json.dumps(doc, sort_keys=True, ensure_ascii=False, default=str)
        memo = cls(ctx, stage, hashlib.sha256(blob.encode()).hexdigest())
        memo.failures_before = memo._failures()
        return memo

    def _failures(self) -> int:
        gw = self.ctx._gateway
        return sum(s.failures for s in gw.stats.values()) if gw is not None else 0

    def skipped(self, say: bool = True) -> dict | None:
        """The recorded summary when the stage may be skipped (its own tables as recorded;
        a report's folder still there), marked ``unchanged_since``; None: run it. ``say``:
        print the line that says so."""
        wh = self.ctx.warehouse
        rows = wh.query("SELECT * FROM stage_memos WHERE fingerprint = ?", [self.fingerprint])
        if not rows or json.loads(rows[0]["outputs"]) != table_digests(wh, self.outputs):
            return None
        summary = json.loads(rows[0]["summary"])
        report = is_report(self.ctx.config.spec, self.stage)
        if report and not Path(str(summary.get("report", ""))).is_dir():
            return None  # the folder was moved or deleted: write it again
        summary.pop("calls", None)  # the recording run's requests, not this run's (none)
        summary["unchanged_since"] = rows[0]["run_id"]
        if say:
            say_kept(self.ctx.config.spec, self.stage, summary)
        return summary

    def record(self, summary: dict) -> bool:
        """Keep the memo of a stage that returned ``summary``, unless one of its calls failed."""
        if self._failures() != self.failures_before:
            return False
        wh = self.ctx.warehouse
        wh.write("stage_memos", [{
            "fingerprint": self.fingerprint, "stage": self.stage,
            "outputs": json.dumps(table_digests(wh, self.outputs)),
            "summary": json.dumps(summary, default=str), "run_id": self.ctx.run_id,
            "created": dt.datetime.now(dt.timezone.utc)}])
        return True


def is_report(spec, stage: str) -> bool:
    return spec.stage(stage).phase == "report"


def keeps_memo(spec, stage: str) -> bool:
    """A stage that writes tables, or the report."""
    return bool(spec.stage(stage).outputs) or is_report(spec, stage)


def say_kept(spec, stage: str, summary: dict) -> None:
    """The line a skipped stage prints."""
    what = "its report is that run's" if is_report(spec, stage) else "its rows are as that run wrote them"
    print(f"[{stage}] inputs unchanged since run {summary['unchanged_since']}: skipped, {what}",
          file=sys.stderr, flush=True)


def kept_stages(ctx) -> dict | None:
    """Every selected stage's kept summary (``skipped``), in order, when all of them would be
    skipped; None as soon as one would run (or keeps no memo). Prints nothing: the run that
    follows says what it skips."""
    work_rows, source = ctx.config.spec.work_stage().rows(ctx), source_version()
    kept = {}
    # One attachment for every read (each alone costs a DuckDB ATTACH, ~15 ms here).
    with ctx.warehouse.connect(read_only=True):
        for stage in ctx.stages:
            memo = StageMemo.open(ctx, stage, work_rows, source)
            summary = memo.skipped(say=False) if memo is not None else None
            if summary is None:
                return None
            kept[stage] = summary
    return kept
