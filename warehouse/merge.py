"""Merge shard warehouses into one.

A sharded run (``shard_index``/``shard_count``) leaves one warehouse per worker home. Every
table is keyed on natural keys (content hashes, composite ids), so merging is an upsert of
each source's rows into the target: a row present in several sources (a query two shards
both recorded, a judgment set with the same id) lands once, and nothing is lost. The whole
merge is one transaction: a failure leaves the target as it was.

Sources are attached READ_ONLY, so a shard's file is never modified; the target is created
(tables and views) if it does not exist.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from warehouse.store import Warehouse, WarehouseError, legacy_tables, schema

WAREHOUSE_FILE = "warehouse.duckdb"


class MergeError(Exception):
    """A merge that cannot proceed; the message names the file (and table, column)."""


def resolve_warehouse(path: str | Path, must_exist: bool = True) -> Path:
    """A warehouse file from a path that is either the file or a home folder holding it.
    A path that does not exist yet is a home folder unless it ends in ``.duckdb``."""
    p = Path(path).expanduser()
    if p.is_dir() or (not p.exists() and p.suffix != ".duckdb"):
        p = p / WAREHOUSE_FILE
    if must_exist and not p.is_file():
        raise MergeError(f"{p}: no warehouse here (give a {WAREHOUSE_FILE} file or a home folder)")
    return p.resolve() if p.exists() else p.absolute()


def tables() -> list[tuple[str, list[str]]]:
    """(name, columns) of every table of the schema (the shared tables and those the
    components bring: warehouse/store.py ``schema``), in creation order."""
    return [(name, [c["name"] for c in t["columns"]]) for name, t in schema()["tables"].items()]


def _source_columns(con, alias: str) -> dict[str, set[str]]:
    rows = con.execute(
        "SELECT table_name, column_name FROM information_schema.columns WHERE table_catalog = ?",
        [alias]).fetchall()
    out: dict[str, set[str]] = {}
    for t, c in rows:
        out.setdefault(t, set()).add(c)
    return out


def merge_warehouses(target: Path, sources: list[Path]) -> dict:
    """Upsert every table's rows from each source into ``target``, in one transaction.

    Returns ``{table: rows in the target after the merge}`` for every table of the schema.
    Raises MergeError (naming the file, table and column) before writing anything if a
    source is missing, is the target, repeats, or lacks a column of the schema.
    """
    target = Path(target).absolute()
    srcs = [Path(s).absolute() for s in sources]
    if not srcs:
        raise MergeError("nothing to merge: give at least one source warehouse")
    for s in srcs:
        if not s.is_file():
            raise MergeError(f"{s}: source warehouse does not exist")
        if target.exists() and s.resolve() == target.resolve():
            raise MergeError(f"{s}: a source cannot be the target")
    dup = {str(s) for s in srcs if srcs.count(s) > 1}
    if dup:
        raise MergeError(f"source(s) given twice: {sorted(dup)}")

    for s in srcs:  # every source opens before the target is touched
        try:
            duckdb.connect(str(s), read_only=True).close()
        except duckdb.Error as e:
            raise MergeError(f"{s}: cannot open as a DuckDB warehouse: {str(e).splitlines()[0]}") from None
    created = not target.exists()
    try:
        return _merge_into(target, srcs)
    except BaseException:
        if created:  # a failed merge into a new file leaves no empty warehouse behind
            for leftover in (target, target.with_name(target.name + ".wal")):
                leftover.unlink(missing_ok=True)
        raise


def _merge_into(target: Path, srcs: list[Path]) -> dict:
    wh = Warehouse(target)
    try:
        wh.init()  # tables and views, so the merged file is a complete warehouse
        with wh.connect() as con:
            aliases = []
            for i, s in enumerate(srcs):
                alias = f"shard_{i}"
                try:
                    con.execute(f"ATTACH '{_sql_str(s)}' AS {alias} (READ_ONLY)")
                except duckdb.Error as e:
                    raise MergeError(f"{s}: cannot open as a DuckDB warehouse: {str(e).splitlines()[0]}") from None
                aliases.append((alias, s))
            plan = _plan(con, aliases)
            con.execute("BEGIN TRANSACTION")
            try:
                for table, cols, alias in plan:
                    col_sql = ", ".join(f'"{c}"' for c in cols)
                    con.execute(f'INSERT OR REPLACE INTO main."{table}" ({col_sql}) '
                                f'SELECT {col_sql} FROM {alias}."{table}"')
                con.execute("COMMIT")
            except Exception:
                con.execute("ROLLBACK")
                raise
            _copy_views(con, aliases)
            return {name: con.execute(f'SELECT count(*) FROM main."{name}"').fetchone()[0]
                    for name, _ in tables()}
    except WarehouseError as e:
        raise MergeError(str(e)) from None
    except duckdb.Error as e:
        raise MergeError(f"{target}: merge failed, nothing written: {str(e).splitlines()[0]}") from None


def _copy_views(con, aliases: list[tuple[str, Path]]) -> None:
    """Views a source has and the target lacks (a benchmark's own metric views, which the runs
    that wrote the sources created) are created in the target too, in an order their
    dependencies allow: the merged file answers the same queries as its shards."""
    have = {n for (n,) in con.execute("SELECT view_name FROM duckdb_views() "
                                      "WHERE database_name = current_database() AND NOT internal").fetchall()}
    todo: dict[str, str] = {}
    for alias, _ in aliases:
        for name, sql in con.execute("SELECT view_name, sql FROM duckdb_views() "
                                     "WHERE database_name = ? AND NOT internal", [alias]).fetchall():
            if name not in have:
                todo.setdefault(name, sql)
    while todo:
        done = []
        for name, sql in todo.items():
            try:
                con.execute(sql)
                done.append(name)
            except duckdb.Error:
                pass  # it reads a view not created yet: the next round
        if not done:
            return  # the rest read something this schema lacks: left out
        for name in done:
            del todo[name]


def _plan(con, aliases: list[tuple[str, Path]]) -> list[tuple[str, list[str], str]]:
    """(table, columns, source alias) for every insert; checks every source first, so a
    bad source stops the merge before any row is written."""
    plan = []
    for alias, path in aliases:
        have = _source_columns(con, alias)
        base = {n for (n,) in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_catalog = ? "
            "AND table_type = 'BASE TABLE'", [alias]).fetchall()}
        older = sorted(base & set(legacy_tables()))
        if older:  # its rows would be left behind: it must move them to today's tables first
            raise MergeError(f"{path}: written by an older version (table {older[0]} is now a "
                             "view): open its home once with this version (any carryon command, "
                             "e.g. carryon sql \"SELECT 1\" --config <its config>), then merge")
        for name, cols in tables():
            if name not in have:
                continue  # an older or partial warehouse without this stage's tables
            missing = [c for c in cols if c not in have[name]]
            if missing:
                raise MergeError(f"{path}: table {name}: missing column(s) {missing} "
                                 f"(written by another version of the schema?)")
            plan.append((name, cols, alias))
    return plan


def _sql_str(path: Path) -> str:
    return str(path).replace("'", "''")
