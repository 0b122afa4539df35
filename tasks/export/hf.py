"""``carryon export --format hf``: a folder ready to upload as a Hugging Face dataset.

    <out>/README.md                      the dataset card (card.py)
    <out>/carryon_export.json            what was written, for `carryon import` and readers
    <out>/data/<config>/<config>.parquet one Parquet file per config

Configs: ``items`` (the benchmark's items: prompts, hidden fields such as a checklist and its
version, and meta, each a JSON text as stored), ``episodes`` (each with its ``turns``),
``verdicts`` (each with its judges' ``votes``), every other table holding the benchmark's rows
under its own name (verdict sets, runs, calls, a benchmark's own tables), and every view the
benchmark's report reads under the view's name. The columns keep the warehouse's types.
DuckDB writes each file straight from the warehouse (nothing is held in Python but the
items), into a temporary folder renamed into place at the end: an export is whole or absent.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tasks.bench import views_sql
from tasks.export import tables as tb
from tasks.export.provenance import inputs_used, provenance
from tasks.export.run_info import ExportError, clean_run_row, spec_name
from warehouse.store import view_files

MANIFEST = "carryon_export.json"
FORMAT_VERSION = 1
DATA = "data"


@dataclass
class Export:
    """What an export wrote (the manifest's content)."""

    benchmark: str
    run_id: str
    run_status: str
    partial: bool
    include_restricted: bool
    configs: dict = field(default_factory=dict)    # name -> {kind, table, rows, path, ...}
    skipped: dict = field(default_factory=dict)    # table -> why it is not exported
    inputs: list = field(default_factory=list)     # [Source.model_dump()]
    withheld: list = field(default_factory=list)   # names of the sources whose text was left out

    def manifest(self) -> dict:
        return {"format": FORMAT_VERSION, "benchmark": self.benchmark, "run_id": self.run_id,
                "run_status": self.run_status, "partial": self.partial,
                "include_restricted": self.include_restricted, "configs": self.configs,
                "not_exported": self.skipped, "inputs": self.inputs, "withheld": self.withheld}


def choose_run(con, benchmark: str, run_id: str | None, run_ids: list[str]) -> dict:
    """The run named, else the benchmark's latest; ExportError (one line) when there is none."""
    if run_id is not None:
        rows = con.execute("SELECT * FROM runs WHERE run_id = ?", [run_id]).fetchall()
        if not rows:
            raise ExportError(f"--run {run_id}: no such run in this warehouse")
        if run_id not in run_ids:
            raise ExportError(f"--run {run_id}: a run of another benchmark than {benchmark}")
    elif not run_ids:
        raise ExportError(f"runs: this warehouse holds no run of {benchmark} "
                          "(run `carryon run` first)")
    cur = con.execute("SELECT * FROM runs WHERE run_id IN (SELECT unnest(?)) "
                      "ORDER BY started DESC LIMIT 1", [[run_id] if run_id else run_ids])
    cols = [d[0] for d in cur.description]
    return dict(zip(cols, cur.fetchone()))


@dataclass
class Prepared:
    """What every format of an export settles first: the run, the benchmark's runs, the
    inputs they used and the text to leave out."""

    run: dict
    run_ids: list
    inputs: list          # [Source]
    withheld: tb.Withheld
    withheld_names: list  # the sources whose text is left out


def prepare(con, spec, prov, run_id: str | None, partial: bool,
            include_restricted: bool) -> Prepared:
    """The run to export (refused in one line when it did not finish, unless ``partial``),
    and the inputs whose text is left out (unless ``include_restricted``)."""
    run_ids = tb.runs_of(con, spec.name, spec_name)
    run = choose_run(con, spec.name, run_id, run_ids)
    if run["status"] != "succeeded" and not partial:
        raise ExportError(f"run {run['run_id']}: status {run['status']!r}, not finished "
                          "(--partial exports it anyway, and says so)")
    configs = [json.loads(r or "{}") for (r,) in con.execute(
        "SELECT config_json FROM runs WHERE run_id IN (SELECT unnest(?))", [run_ids]).fetchall()]
    used = inputs_used(prov, configs)
    restricted = [s.name for s in used if not s.redistribute]
    withheld = tb.Withheld()
    if restricted and not include_restricted:
        withheld = _withheld(con, spec.name, prov)
    con.register("withheld_texts", pa.table(
        {"item_id": [i for i, ts in withheld.texts.items() for _ in ts],
         "t": [t for ts in withheld.texts.values() for t in ts]},
        schema=pa.schema([("item_id", pa.string()), ("t", pa.string())])))
    return Prepared(run, run_ids, used, withheld, restricted if withheld else [])


def new_folder(out: Path) -> Path:
    """The temporary folder an export writes before it is renamed to ``out``."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"{out}: already exists and is not an empty folder (choose a new --out)")
    tmp = out.with_name(f".{out.name}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def publish(tmp: Path, out: Path) -> None:
    """The finished folder in place of ``out`` (an export is whole or absent)."""
    out = Path(out)
    if out.exists():
        out.rmdir()
    os.replace(tmp, out)


def write(wh, spec, out: Path, run_id: str | None = None, partial: bool = False,
          include_restricted: bool = False) -> Export:
    """Export ``spec``'s rows of the warehouse ``wh`` to ``out`` (new or an empty folder)."""
    from tasks.export.card import render as render_card

    prov = provenance(spec)
    with wh.connect(read_only=True) as con:
        p = prepare(con, spec, prov, run_id, partial, include_restricted)
        run = p.run
        exp = Export(spec.name, run["run_id"], run["status"], run["status"] != "succeeded",
                     include_restricted, inputs=[s.model_dump() for s in p.inputs],
                     withheld=p.withheld_names)
        tmp = new_folder(out)
        try:
            (tmp / DATA).mkdir()
            _tables(con, spec.name, p.run_ids, p.withheld, tmp, exp)
            _views(con, spec, p.withheld, tmp, exp)
            (tmp / MANIFEST).write_text(json.dumps(exp.manifest(), indent=1, default=str),
                                        encoding="utf-8")
            (tmp / "README.md").write_text(render_card(con, spec, prov, run, exp, p.run_ids),
                                           encoding="utf-8")
            publish(tmp, out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return exp


def _withheld(con, benchmark: str, prov) -> tb.Withheld:
    rows = con.execute(f"SELECT item_id, prompts, hidden FROM {tb.ITEMS} WHERE benchmark = ?",
                       [benchmark]).fetchall()
    return tb.Withheld({i: tb.item_texts(p, h) for i, p, h in rows}, tuple(prov.withhold))


def _copy(con, sql: str, path: Path) -> int:
    """Write a query's rows to one Parquet file; its row count."""
    path.parent.mkdir(parents=True, exist_ok=True)
    con.execute(f"COPY ({sql}) TO {tb.lit(str(path))} (FORMAT parquet, COMPRESSION zstd)")
    return con.execute(f"SELECT count(*) FROM read_parquet({tb.lit(str(path))})").fetchone()[0]


def _config_path(name: str) -> str:
    return f"{DATA}/{name}/{name}.parquet"


def _tables(con, benchmark: str, run_ids: list[str], withheld: tb.Withheld, tmp: Path,
            exp: Export) -> None:
    cat = tb.catalogue(con)
    children = {parent: (child, fld) for child, (parent, fld) in tb.NESTED.items()}
    first = [tb.ITEMS, *children]
    for name, t in sorted(cat.items(), key=lambda kv: (kv[0] not in first,
                                                       first.index(kv[0]) if kv[0] in first else 0,
                                                       kv[0])):
        if name in tb.NESTED and tb.NESTED[name][0] in cat:
            continue  # written inside its parent's rows
        if tb.scope(t, benchmark, run_ids) is None:
            exp.skipped[name] = "its key ties its rows to no benchmark"
            continue
        config = tb.CONFIG_NAMES.get(name, name)
        rel = Path(_config_path(config))
        entry = {"kind": "table", "table": name, "path": str(rel)}
        if name == tb.ITEMS:
            n = _write_items(con, t, benchmark, withheld, tmp / rel)
        elif name == "runs":
            n = _write_runs(con, t, run_ids, tmp / rel)
        elif name in children and children[name][0] in cat:
            child, fld = children[name]
            sql = tb.nested_relation(t, cat[child], fld, benchmark, run_ids, withheld)
            n = _copy(con, sql, tmp / rel)
            entry.update(kind="nested", child=child, field=fld, key=t.pk)
        else:
            n = _copy(con, tb.relation(t, benchmark, run_ids, withheld), tmp / rel)
        if n == 0:
            (tmp / rel).unlink()
            shutil.rmtree((tmp / rel).parent, ignore_errors=True)
            exp.skipped[name] = "no rows of this benchmark"
            continue
        exp.configs[config] = {**entry, "rows": n}


def _arrow(con, sql: str, params: list) -> pa.Table:
    """A small query's rows as Arrow (the items, the runs: the copy DuckDB warns of is cheap)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return con.execute(sql, params).to_arrow_table()


def _write_items(con, t: tb.Table, benchmark: str, withheld: tb.Withheld, path: Path) -> int:
    """The items, their prompts and hidden fields blanked where their source is withheld."""
    arrow = _arrow(con, f"SELECT * FROM {tb.ITEMS} WHERE benchmark = ? ORDER BY item_id",
                   [benchmark])
    if withheld.texts:
        for col in ("prompts", "hidden"):
            blank = pa.array([tb.blank_json(v) for v in arrow[col].to_pylist()], pa.string())
            arrow = arrow.set_column(arrow.schema.get_field_index(col), col, blank)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(arrow, path, compression="zstd")
    return arrow.num_rows


def _write_runs(con, t: tb.Table, run_ids: list[str], path: Path) -> int:
    """The benchmark's runs, their configs without key names and the machine's details."""
    arrow = _arrow(con, "SELECT * FROM runs WHERE run_id IN (SELECT unnest(?)) ORDER BY run_id",
                   [run_ids])
    cols = arrow.column_names
    rows = [clean_run_row(dict(zip(cols, r))) for r in zip(*(arrow[c].to_pylist() for c in cols))]
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=arrow.schema), path, compression="zstd")
    return len(rows)


def benchmark_views(spec) -> list[str]:
    """The views a benchmark's report reads: its own views file's, then the engine's."""
    own = tb.view_names(views_sql(spec) or "")
    engine = [n for f in view_files() for n in tb.view_names(f.read_text(encoding="utf-8"))]
    return own + [n for n in engine if n not in own]


def _views(con, spec, withheld: tb.Withheld, tmp: Path, exp: Export) -> None:
    cat = tb.catalogue(con, views=True)
    own = set(tb.view_names(views_sql(spec) or ""))
    for name in benchmark_views(spec):
        t = cat.get(name)
        if t is None:
            continue
        if name not in own and "benchmark" not in t.names:
            continue  # an engine view over every benchmark's rows at once
        found = tb.scope(t, spec.name, []) if "benchmark" in t.names else None
        link = next((c for c in tb.EPISODE_KEYS + tb.ITEM_KEYS if c in t.names), None)
        where = f"WHERE {found[1]}" if found else ""
        sql = f"SELECT {tb.select_list(t, link, withheld)} FROM {tb.q(name)} x {where} ORDER BY ALL"
        config = name if name not in exp.configs else f"view_{name}"
        rel = Path(_config_path(config))
        n = _copy(con, sql, tmp / rel)
        if n == 0:
            shutil.rmtree((tmp / rel).parent, ignore_errors=True)
            exp.skipped[name] = "view: no rows"
            continue
        exp.configs[config] = {"kind": "view", "view": name, "path": str(rel), "rows": n}
