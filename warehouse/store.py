"""The warehouse: one DuckDB file at ``<home>/warehouse.duckdb``.

SQLModel classes (``warehouse.schema``) define the tables, shipped rendered as ``schema.json``
(warehouse/schema_file.py: reading it spares every command sqlalchemy's imports); rows are
written in bulk through DuckDB's Arrow path (an ORM insert costs ~65 µs a row), inside one
transaction, with ``INSERT OR REPLACE`` on each table's natural key so a rerun replaces rather
than duplicates.
The episode engine's views live in ``views_engine.sql`` beside this file; every benchmark's own
metric views (CarryOnBench's included: tasks/benchmarks/carryon/views.sql) live beside its
spec and reach ``init`` through ``on_views`` (this package never imports the benchmarks;
importing tasks.bench registers them), so ad-hoc SQL and the report read the same numbers.

DuckDB allows one writing process per file; the file is attached per operation and a lock
held by another process is waited for (bounded), so two runs can take turns.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from pathlib import Path

import duckdb
import pyarrow as pa

from warehouse.schema_file import load as load_schema

ENGINE_VIEWS_SQL = Path(__file__).with_name("views_engine.sql")


def view_files() -> list[Path]:
    """The episode engine's views: every benchmark's own views (``on_views``, CarryOnBench's
    included) come after them, since they may read the engine's."""
    return [ENGINE_VIEWS_SQL]
_LOCK_WAIT_S = 60.0
_ALIAS = "wh"


def _sql_str(path: Path) -> str:
    return str(path).replace("'", "''")


class WarehouseError(Exception):
    pass


def _table_name(table) -> str:
    return table if isinstance(table, str) else table.__tablename__


# When the one DuckDB instance is replaced by a new one (Warehouse.connect): after an operation
# that left the process this much larger (where /proc tells; else one that took this long), or
# after this many operations.
_RENEW_AFTER_MB = 8
_RENEW_AFTER_S = 0.25
_RENEW_EVERY = 200
_PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 2**20 if hasattr(os, "sysconf") else 0.0


def _resident_mb() -> float | None:
    """This process's resident memory in MB (None where /proc is missing)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE_MB
    except (OSError, ValueError, IndexError):
        return None


class Warehouse:
    def __init__(self, path: Path):
        self.path = Path(path)
        # One in-memory DuckDB instance per Warehouse, onto which the file is ATTACHed for
        # each operation and DETACHed after: that takes and releases DuckDB's cross-process
        # file lock like a fresh connection would, at ~2.5 ms instead of ~15 ms (creating a
        # DuckDB instance is the expensive part). The RLock serialises use of the one handle.
        self._lock = threading.RLock()
        self._base = None
        self._depth = 0
        self._uses = 0  # operations since the instance was made
        # DuckDB threads of the operations (None: DuckDB's default, one per core); see
        # ``one_thread``. The instance is made with it, and made anew when it changes.
        self._threads: int | None = None
        self._base_threads: int | None = None

    @contextlib.contextmanager
    def one_thread(self):
        """Operations inside run on one DuckDB thread. Reading the metric views' whole chain,
        each DuckDB thread builds its own hash tables and window partitions over every
        judgment, so two threads held about twice the memory of one (192 against 119 MB for
        the model summary at 6,400 conversations) for ~0.1 s more: the report reads this
        way (tasks/report/assemble.py), where these reads were its largest allocations."""
        with self._lock:
            before, self._threads = self._threads, 1
        try:
            yield self
        finally:
            with self._lock:
                self._threads = before

    # ----- connections -------------------------------------------------------------------------
    @contextlib.contextmanager
    def connect(self, read_only: bool = False, lock_wait_s: float = _LOCK_WAIT_S):
        with self._lock:
            if self._depth:  # nested use inside an open operation: same attachment
                self._depth += 1
                try:
                    yield self._base
                finally:
                    self._depth -= 1
                return
            if self._base is not None and self._base_threads != self._threads:
                self._base.close()
                self._base = None
            if self._base is None:
                self._base = duckdb.connect(
                    ":memory:", config={"threads": self._threads} if self._threads else {})
                self._base_threads, self._uses = self._threads, 0
            base = self._base
            started, resident = time.monotonic(), _resident_mb()
            mode = " (READ_ONLY)" if read_only else ""
            deadline = time.monotonic() + lock_wait_s
            while True:
                try:
                    base.execute(f"ATTACH '{_sql_str(self.path)}' AS {_ALIAS}{mode}")
                    break
                except duckdb.Error as e:
                    if "lock" not in str(e).lower() or time.monotonic() > deadline:
                        raise WarehouseError(f"{self.path}: cannot open the warehouse: "
                                             f"{str(e).splitlines()[0]}") from None
                    time.sleep(0.2)
            base.execute(f"USE {_ALIAS}")
            self._depth = 1
            try:
                yield base
            finally:
                self._depth = 0
                with contextlib.suppress(duckdb.Error):
                    base.execute("ROLLBACK")  # only if a caller left a transaction open
                base.execute("USE memory")
                # Detach the warehouse and anything a caller attached (merge sources).
                for (name,) in base.execute(
                        "SELECT database_name FROM duckdb_databases() "
                        "WHERE NOT internal AND database_name <> 'memory'").fetchall():
                    base.execute(f'DETACH "{name}"')
                # The instance keeps much of what its queries allocated after the file is
                # detached (about 120 MB after a report's views over 1,200 conversations), and
                # it adds up over a run: a new one (~15 ms) after an operation that grew the
                # process, or every _RENEW_EVERY operations.
                self._uses += 1
                now = _resident_mb()
                grew = (now - resident > _RENEW_AFTER_MB if now is not None and resident is not None
                        else time.monotonic() - started > _RENEW_AFTER_S)
                if grew or self._uses >= _RENEW_EVERY:
                    self._base.close()
                    self._base = None

    def init(self) -> "Warehouse":
        """Create missing tables and (re)create the views. Safe to call on every start."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise WarehouseError(f"{self.path.parent}: cannot create the home folder: {e.strerror}") from None
        with self._lock, self.connect() as con:
            # The DDL rendered from the SQLModel classes (schema.json), run on our own
            # connection, so the cross-process lock is taken (and waited for) like every
            # other operation.
            con.execute("BEGIN TRANSACTION")
            try:
                for ddl in _ddl():
                    con.execute(ddl)
                for ddl in _add_missing_columns(con):
                    con.execute(ddl)
                for hook in _INIT_HOOKS:
                    hook(con)
                for views in view_files():
                    con.execute(views.read_text())
                for source in _VIEW_SOURCES:
                    for sql in source():
                        con.execute(sql)
                con.execute("COMMIT")
            except Exception:
                con.execute("ROLLBACK")
                raise
        return self

    # ----- writes ---------------------------------------------------------------------------------
    def write(self, table, rows: list[dict], *, delete: tuple[str, list] | None = None) -> int:
        """Bulk upsert ``rows`` into ``table`` in one transaction (see ``write_many``)."""
        return self.write_many([(table, rows, delete)])

    def write_many(self, batches: list[tuple]) -> int:
        """Upsert several tables in ONE transaction: all land or none does.

        Each batch is ``(table, rows)`` or ``(table, rows, (where_sql, params))``; the optional
        delete runs first, for replacing a whole slice (e.g. a conversation's turns).
        """
        total = 0
        with self._lock, self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            try:
                for batch in batches:
                    table, rows = batch[0], batch[1]
                    delete = batch[2] if len(batch) > 2 else None
                    name = _table_name(table)
                    if delete:
                        con.execute(f"DELETE FROM {name} WHERE {delete[0]}", delete[1])
                    if not rows:
                        continue
                    arrow = pa.Table.from_pylist(_same_keys(_dedupe(con, name, rows)))  # noqa: F841
                    con.execute(f"INSERT OR REPLACE INTO {name} BY NAME SELECT * FROM arrow")
                    total += arrow.num_rows
                con.execute("COMMIT")
            except Exception:
                con.execute("ROLLBACK")
                raise
        return total

    # ----- reads -----------------------------------------------------------------------------------
    def query(self, sql: str, params: list | None = None) -> list[dict]:
        with self.connect() as con:
            cur = con.execute(sql, params or [])
            cols = [d[0] for d in cur.description] if cur.description else []
            return [dict(zip(cols, row)) for row in cur.fetchall()]

    def user_query(self, sql: str, write: bool = False, lock_wait_s: float = 5.0) -> list[dict]:
        """A user's ad-hoc SQL (``carryon sql``): on a read-only attachment with no file or
        network access (no DELETE, DROP, COPY ... TO, ATTACH or reading other files) unless
        ``write``. A warehouse another process holds is one WarehouseError line naming it."""
        with self.connect(read_only=not write, lock_wait_s=lock_wait_s) as con:
            if not write:
                # One-way for this in-memory instance: it can no longer reach any file but
                # the warehouse already attached.
                con.execute("SET enable_external_access = false")
            cur = con.execute(sql)
            cols = [d[0] for d in cur.description] if cur.description else []
            return [dict(zip(cols, row)) for row in cur.fetchall()]

    def df(self, sql: str, params: list | None = None):
        """A pandas DataFrame of a query (for analyses and the report)."""
        with self.connect() as con:
            return con.execute(sql, params or []).df()

    @staticmethod
    def columns(table: str) -> list[str]:
        """A table's columns, in the shipped schema's order."""
        return [c["name"] for c in schema()["tables"][table]["columns"]]

    def count(self, table) -> int:
        return self.query(f"SELECT count(*) AS n FROM {_table_name(table)}")[0]["n"]

    def run_row(self, run_id: str) -> dict | None:
        """The ``runs`` row of ``run_id`` (None: no such run)."""
        rows = self.query("SELECT * FROM runs WHERE run_id = ?", [run_id])
        return rows[0] if rows else None

    def recorded_call_hashes(self) -> set[str]:
        """The cache keys of every call a recorded run made (what `carryon cache prune` keeps)."""
        return {r["call_hash"] for r in self.query("SELECT DISTINCT call_hash FROM llm_calls")}


# Callables returning the schema files (``schema.json`` beside a stage's or a benchmark's own
# tables: warehouse/schema_file.py) of the tables the layers above bring, created after the
# shared ones (tasks/bench.py registers the components' ones).
_TABLE_SOURCES: list = []


def on_tables(source) -> None:
    """Register ``source() -> list[Path]`` of schema files for every warehouse."""
    if source not in _TABLE_SOURCES:
        _TABLE_SOURCES.append(source)


def schema() -> dict:
    """Every table this process knows: the shared schema, then those the layers above bring
    (``on_tables``), as one ``{"ddl": [...], "tables": {...}}``."""
    paths = tuple(dict.fromkeys(p for source in _TABLE_SOURCES for p in source()))
    return _merged(paths)


@functools.lru_cache(maxsize=16)
def _merged(paths: tuple) -> dict:
    out = {"ddl": list(load_schema()["ddl"]), "tables": dict(load_schema()["tables"])}
    for path in paths:
        extra = load_schema(path)
        clash = sorted(set(extra["tables"]) & set(out["tables"]))
        if clash:
            raise WarehouseError(f"{path}: table {clash[0]} is defined twice")
        out["ddl"] += extra["ddl"]
        out["tables"].update(extra["tables"])
    return out


# Callbacks run inside init's transaction, after the tables exist and before the views are
# (re)created: how the layers above seed rows the views need (the benchmark specs' condition
# names, registered by tasks/bench.py) without this package importing them.
_INIT_HOOKS: list = []


def on_init(hook) -> None:
    """Register ``hook(connection)`` to run in every ``Warehouse.init()``."""
    if hook not in _INIT_HOOKS:
        _INIT_HOOKS.append(hook)


# Callables returning SQL texts of views to (re)create after this package's own views: the
# benchmarks' metric views, which live beside their specs (tasks/bench.py registers them).
_VIEW_SOURCES: list = []


# Callables naming tables an older version wrote that a migration (an init hook) moves to
# today's tables: a merge refuses a source that still has them (it is attached read-only).
_LEGACY_SOURCES: list = []


def on_legacy(source) -> None:
    """Register ``source() -> list[str]`` of such table names."""
    if source not in _LEGACY_SOURCES:
        _LEGACY_SOURCES.append(source)


def legacy_tables() -> list[str]:
    return [t for source in _LEGACY_SOURCES for t in source()]


def on_views(source) -> None:
    """Register ``source() -> list[str]`` of view SQL for every ``Warehouse.init()``."""
    if source not in _VIEW_SOURCES:
        _VIEW_SOURCES.append(source)


def _ddl() -> list[str]:
    """CREATE TABLE / INDEX IF NOT EXISTS for every table, in DuckDB's dialect."""
    return list(schema()["ddl"])


def _add_missing_columns(con) -> list[str]:
    """ALTER TABLE ... ADD COLUMN for columns a newer schema added to an existing table.

    The only migration the warehouse needs so far: new columns are nullable (or have a
    default), so a warehouse written by an older version gains them as NULL and keeps every
    row. A column that changed type or a new primary-key column would need more and fails
    loudly instead (the ALTER raises)."""
    have: dict[str, set[str]] = {}
    for t, c in con.execute("SELECT table_name, column_name FROM information_schema.columns "
                            "WHERE table_catalog = current_database()").fetchall():
        have.setdefault(t, set()).add(c)
    out = []
    for name, table in schema()["tables"].items():
        if name not in have:
            continue
        for col in table["columns"]:
            if col["name"] in have[name]:
                continue
            if col["required"]:
                raise WarehouseError(f"table {name}: new column {col['name']} is required; "
                                     "this warehouse was written by an older version and cannot "
                                     "be migrated in place (start a new home or merge into one)")
            out.append(f'ALTER TABLE "{name}" ADD COLUMN IF NOT EXISTS "{col["name"]}" {col["type"]}')
    return out


def _primary_key(con, name: str) -> list[str]:
    table = schema()["tables"].get(name)
    return table["primary_key"] if table is not None else []


def _same_keys(rows: list[dict]) -> list[dict]:
    """Rows with one set of keys: pyarrow takes the columns from the first row alone, so a
    field that only later rows set would be dropped without a word (None where absent)."""
    first = rows[0].keys()
    if all(r.keys() == first for r in rows):
        return rows
    keys = list(dict.fromkeys(k for r in rows for k in r))
    return [{k: r.get(k) for k in keys} for r in rows]


def _dedupe(con, name: str, rows: list[dict]) -> list[dict]:
    """Keep the last row per natural key: DuckDB rejects one insert that repeats a key."""
    pk = _primary_key(con, name)
    if not pk:
        return rows
    seen: dict[tuple, dict] = {}
    for r in rows:
        seen[tuple(r.get(k) for k in pk)] = r
    return list(seen.values()) if len(seen) != len(rows) else rows
