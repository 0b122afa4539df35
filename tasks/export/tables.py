"""What an export reads from a warehouse, found by the warehouse's own catalogue, never by a
list of benchmarks: every base table, its columns and primary key (DuckDB's catalogue, so a
table a benchmark brings is found like the engine's), which of its rows belong to a benchmark
(by the key columns every benchmark shares, below), and the benchmark's views (the names its
spec's views file creates, and the engine's views that carry a ``benchmark`` column).

A table's rows belong to benchmark B by the first of its primary-key columns that ties them
to B (a table whose key ties to nothing, e.g. a validation sample or a report cache, is not
exported, and the export says so):

- ``benchmark``: rows of B;
- ``episode_id`` / ``conversation_id``: rows of B's episodes;
- ``judgment_set_id``: rows of B's verdict sets;
- ``query_id`` / ``item_id``: rows of no other benchmark's items (a query B selected but never
  played stays: the views count it);
- ``run_id``: rows of B's runs (``runs_of``).

Two of the engine's tables are shown nested in their parent's rows (``NESTED``): an episode
with its turns, a verdict with its votes. An input whose text may not be redistributed has
that text left out (``Withheld``): the items' prompts and hidden fields, any text column of a
row tied to such an item that contains one of those texts verbatim, and the columns the
benchmark's ``sources.yaml`` names under ``withhold:``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

ITEMS = "bench_items"
# child table -> (parent table, the list column holding the child's rows in the parent's).
NESTED = {"episode_turns": ("episodes", "turns"), "verdict_votes": ("verdicts", "votes")}
# The config a table is published as, where it is not the table's own name.
CONFIG_NAMES = {ITEMS: "items"}
EPISODE_KEYS = ("episode_id", "conversation_id")
ITEM_KEYS = ("query_id", "item_id")
# Texts shorter than this are not searched for in other columns (a one-word prompt would
# withhold every turn that says it).
MIN_WITHHELD_CHARS = 16


@dataclass
class Table:
    name: str
    columns: list[tuple[str, str]]   # (name, DuckDB type), in the table's order
    pk: list[str] = field(default_factory=list)
    view: bool = False

    @property
    def names(self) -> list[str]:
        return [c for c, _ in self.columns]


def q(name: str) -> str:
    """A quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def lit(value: str) -> str:
    """A quoted SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


def catalogue(con, views: bool = False) -> dict[str, Table]:
    """The warehouse's base tables (or views), with columns and primary keys."""
    kind = "VIEW" if views else "BASE TABLE"
    names = [n for (n,) in con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_type = ? "
        "AND table_catalog = current_database() AND table_schema = 'main' ORDER BY table_name",
        [kind]).fetchall()]
    cols: dict[str, list] = {}
    for t, c, typ in con.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_catalog = current_database() AND table_schema = 'main' "
            "ORDER BY table_name, ordinal_position").fetchall():
        cols.setdefault(t, []).append((c, typ))
    pks = {t: list(c) for t, c in con.execute(
        "SELECT table_name, constraint_column_names FROM duckdb_constraints() "
        "WHERE constraint_type = 'PRIMARY KEY' AND database_name = current_database()").fetchall()}
    return {n: Table(n, cols.get(n, []), pks.get(n, []), views) for n in names}


def runs_of(con, benchmark: str, spec_name) -> list[str]:
    """The ids of the runs whose config ran ``benchmark`` (``spec_name(config) -> name``)."""
    out = []
    for run_id, config_json in con.execute("SELECT run_id, config_json FROM runs").fetchall():
        try:
            doc = json.loads(config_json or "{}")
        except ValueError:
            continue
        if isinstance(doc, dict) and spec_name(doc) == benchmark:
            out.append(run_id)
    return sorted(out)


def scope(t: Table, benchmark: str, run_ids: list[str]) -> tuple[str, str] | None:
    """(the key column, a WHERE clause) that keeps ``t``'s rows of ``benchmark``; None: its key
    ties its rows to no benchmark."""
    b = lit(benchmark)
    keys = t.names if t.view else t.pk
    if "benchmark" in t.names:
        return "benchmark", f"benchmark = {b}"
    for col in EPISODE_KEYS:
        if col in keys:
            return col, f"{q(col)} IN (SELECT episode_id FROM episodes WHERE benchmark = {b})"
    if "judgment_set_id" in keys:
        return "judgment_set_id", (f"judgment_set_id IN (SELECT judgment_set_id FROM verdict_sets "
                                   f"WHERE benchmark = {b})")
    for col in ITEM_KEYS:
        if col in keys:
            return col, (f"{q(col)} NOT IN (SELECT item_id FROM {ITEMS} "
                         f"WHERE benchmark <> {b})")
    if "run_id" in keys:
        return "run_id", f"run_id IN ({', '.join(map(lit, run_ids)) or 'NULL'})"
    return None


def view_names(sql: str) -> list[str]:
    """The views a views file creates, in its order."""
    return re.findall(r"CREATE\s+(?:OR\s+REPLACE\s+)?VIEW\s+(?:IF\s+NOT\s+EXISTS\s+)?\"?(\w+)",
                      sql, flags=re.IGNORECASE)


# ----- texts an export leaves out ------------------------------------------------------------
@dataclass
class Withheld:
    """The texts of items whose source may not be redistributed, by item id, and the columns
    (``table.column``) that hold such text in a benchmark's own tables."""

    texts: dict[str, list[str]] = field(default_factory=dict)
    columns: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.texts or self.columns)


def item_texts(prompts: str, hidden: str) -> list[str]:
    """Every text of an item's prompts and hidden fields (JSON), for searching."""
    out: list[str] = []

    def walk(v):
        if isinstance(v, str):
            if len(v) >= MIN_WITHHELD_CHARS:
                out.append(v)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    for doc in (prompts, hidden):
        try:
            walk(json.loads(doc or "{}"))
        except ValueError:
            pass
    return sorted(set(out))


def blank_json(doc: str) -> str:
    """A JSON document with every text replaced by null (its keys and shape kept)."""
    def walk(v):
        if isinstance(v, str):
            return None
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    try:
        return json.dumps(walk(json.loads(doc or "{}")), ensure_ascii=False)
    except ValueError:
        return "null"


def is_text(t: Table, col: str, typ: str) -> bool:
    """A column that may hold an input's text (not a key, an id or a hash)."""
    return (typ == "VARCHAR" and col not in t.pk and not col.endswith(("_id", "_hash"))
            and col not in ("benchmark",))


def select_list(t: Table, link: str | None, withheld: Withheld, alias: str = "x") -> str:
    """The columns of ``t`` with withheld text left out (NULL)."""
    out = []
    for col, typ in t.columns:
        expr = f"{alias}.{q(col)}"
        if f"{t.name}.{col}" in withheld.columns:
            expr = f"CAST(NULL AS {typ})"
        elif withheld.texts and link and is_text(t, col, typ):
            items = ("(SELECT item_id FROM episodes e WHERE e.episode_id = "
                     f"{alias}.{q(link)})") if link in EPISODE_KEYS else f"{alias}.{q(link)}"
            expr = (f"CASE WHEN EXISTS (SELECT 1 FROM withheld_texts w WHERE w.item_id = {items} "
                    f"AND contains({expr}, w.t)) THEN NULL ELSE {expr} END")
        out.append(f"{expr} AS {q(col)}")
    return ", ".join(out)


def relation(t: Table, benchmark: str, run_ids: list[str], withheld: Withheld) -> str | None:
    """SELECT of ``t``'s rows of the benchmark, withheld text left out, in key order; None:
    the table's rows tie to no benchmark."""
    found = scope(t, benchmark, run_ids)
    if found is None:
        return None
    link, where = found
    link = link if link in EPISODE_KEYS + ITEM_KEYS else None
    order = ", ".join(q(c) for c in t.pk) if t.pk else "ALL"
    return f"SELECT {select_list(t, link, withheld)} FROM {q(t.name)} x WHERE {where} ORDER BY {order}"


def nested_relation(parent: Table, child: Table, fld: str, benchmark: str, run_ids: list[str],
                    withheld: Withheld) -> str:
    """The parent's rows, each with its child rows as a list of structs (key order) in ``fld``."""
    keys = parent.pk
    rest = [c for c in child.names if c not in keys]
    struct = "{" + ", ".join(f"{lit(c)}: c.{q(c)}" for c in rest) + "}"
    inner_order = ", ".join(f"c.{q(c)}" for c in child.pk if c not in keys) or "1"
    child_sql = relation(child, benchmark, run_ids, withheld)
    parent_sql = relation(parent, benchmark, run_ids, withheld)
    on = " AND ".join(f"p.{q(k)} IS NOT DISTINCT FROM k.{q(k)}" for k in keys)
    key_list = ", ".join(f"c.{q(k)}" for k in keys)
    return (f"SELECT p.*, k.{q(fld)} FROM ({parent_sql}) p LEFT JOIN ("
            f"SELECT {key_list}, list({struct} ORDER BY {inner_order}) AS {q(fld)} "
            f"FROM ({child_sql}) c GROUP BY ALL) k ON {on} "
            f"ORDER BY {', '.join('p.' + q(k) for k in keys)}")
