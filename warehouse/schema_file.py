"""The warehouse's tables as a shipped file (``schema.json``), rendered from the SQLModel classes.

The SQLModel classes in ``warehouse.schema`` are where a table is defined. Rendering their DDL
goes through sqlalchemy and duckdb_engine, about 0.5 s of imports that every ``carryon``
command would pay before its first stage, and the run itself writes by table name. So the
rendered DDL, each table's columns (DuckDB type, whether required) and its primary key ship
in ``schema.json`` beside this file; the warehouse reads that. A test renders the classes again
and fails when the file is out of date.

    python -m warehouse.schema_file     # rewrite schema.json after changing a table
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

SCHEMA_JSON = Path(__file__).with_name("schema.json")


def render() -> dict:
    """The schema from the SQLModel classes: ``ddl`` (CREATE TABLE / INDEX IF NOT EXISTS, in
    dependency order) and ``tables`` (name -> columns and primary key), in the same order."""
    from duckdb_engine import Dialect
    from sqlalchemy.schema import CreateIndex, CreateTable
    from sqlmodel import SQLModel

    import warehouse.schema  # noqa: F401  (registers every table on SQLModel.metadata)

    dialect = Dialect()
    ddl, tables = [], {}
    for table in SQLModel.metadata.sorted_tables:
        ddl.append(str(CreateTable(table, if_not_exists=True).compile(dialect=dialect)))
        ddl += [str(CreateIndex(ix, if_not_exists=True).compile(dialect=dialect))
                for ix in sorted(table.indexes, key=lambda ix: ix.name)]
        tables[table.name] = {
            "primary_key": [c.name for c in table.primary_key.columns],
            "columns": [{"name": c.name, "type": c.type.compile(dialect=dialect),
                         "required": bool(c.primary_key or (not c.nullable and c.default is None))}
                        for c in table.columns]}
    return {"ddl": ddl, "tables": tables}


@functools.lru_cache(maxsize=1)
def load() -> dict:
    """The shipped schema (see the module docstring)."""
    return json.loads(SCHEMA_JSON.read_text(encoding="utf-8"))


def write() -> Path:
    SCHEMA_JSON.write_text(json.dumps(render(), indent=1) + "\n", encoding="utf-8")
    return SCHEMA_JSON


if __name__ == "__main__":
    print(f"wrote {write()}")
