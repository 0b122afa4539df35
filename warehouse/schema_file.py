"""The warehouse's tables as shipped files (``schema.json``), rendered from the SQLModel classes.

The SQLModel classes are where a table is defined: the shared ones in ``warehouse.schema``, a
stage's or a benchmark's own in a module beside it (the checklists stage's, CarryOnBench's),
which its component registers (tasks/core/registry.py ``tables``). Rendering their DDL goes
through sqlalchemy and duckdb_engine, about 0.5 s of imports that every ``carryon`` command
would pay before its first stage, and the run itself writes by table name. So the rendered
DDL, each table's columns (DuckDB type, whether required) and its primary key ship in a
``schema.json`` beside the classes; the warehouse reads those (warehouse/store.py
``schema``). A test renders the classes again and fails when a file is out of date.

    python -m warehouse.schema_file                # rewrite warehouse/schema.json (shared)
    python -m warehouse.schema_file MODULE FILE    # rewrite a stage's or a benchmark's own
"""

from __future__ import annotations

import functools
import importlib
import json
import sys
from pathlib import Path

SCHEMA_JSON = Path(__file__).with_name("schema.json")
SHARED = "warehouse.schema"  # the package of the shared tables


def render(module: str = SHARED) -> dict:
    """The schema of the tables ``module`` defines (a package: the classes it exports):
    ``ddl`` (CREATE TABLE / INDEX IF NOT EXISTS, in dependency order) and ``tables`` (name ->
    columns and primary key), in the same order."""
    from duckdb_engine import Dialect
    from sqlalchemy.schema import CreateIndex, CreateTable
    from sqlmodel import SQLModel

    mod = importlib.import_module(module)
    names = {cls.__table__.name for cls in vars(mod).values()
             if isinstance(cls, type) and issubclass(cls, SQLModel) and hasattr(cls, "__table__")}
    dialect = Dialect()
    ddl, tables = [], {}
    for table in SQLModel.metadata.sorted_tables:
        if table.name not in names:
            continue
        ddl.append(str(CreateTable(table, if_not_exists=True).compile(dialect=dialect)))
        ddl += [str(CreateIndex(ix, if_not_exists=True).compile(dialect=dialect))
                for ix in sorted(table.indexes, key=lambda ix: ix.name)]
        tables[table.name] = {
            "primary_key": [c.name for c in table.primary_key.columns],
            "columns": [{"name": c.name, "type": c.type.compile(dialect=dialect),
                         "required": bool(c.primary_key or (not c.nullable and c.default is None))}
                        for c in table.columns]}
    return {"ddl": ddl, "tables": tables}


@functools.lru_cache(maxsize=None)
def load(path: Path = SCHEMA_JSON) -> dict:
    """A shipped schema (see the module docstring); the shared one by default."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def write(module: str = SHARED, path: Path = SCHEMA_JSON) -> Path:
    Path(path).write_text(json.dumps(render(module), indent=1) + "\n", encoding="utf-8")
    return Path(path)


if __name__ == "__main__":
    print(f"wrote {write(*sys.argv[1:3]) if len(sys.argv) >= 3 else write()}")
