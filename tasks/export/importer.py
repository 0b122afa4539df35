"""``carryon import DIR``: an export (hf.py) read back into a fresh home, so two exports can be
compared with the report and ``carryon sql``.

The warehouse is built beside its final name and renamed into place when every table has
landed (a failed import leaves no warehouse). Each config the manifest names a table goes
back into that table (a nested one into its table and its child's: an episode's turns, a
verdict's votes); the views are the warehouse's own and compute on the imported rows.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tasks.export import tables as tb
from tasks.export.hf import FORMAT_VERSION, MANIFEST
from tasks.export.run_info import ExportError

WAREHOUSE_FILE = "warehouse.duckdb"


def read_manifest(folder: Path) -> dict:
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise ExportError(f"{folder}: not a CarryOnBench export (no {MANIFEST})")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise ExportError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT_VERSION:
        raise ExportError(f"{path}: format {doc.get('format') if isinstance(doc, dict) else '?'}"
                          f" is not {FORMAT_VERSION} (an export of another version)")
    for name, c in (doc.get("configs") or {}).items():
        if not (Path(folder) / c.get("path", "")).is_file():
            raise ExportError(f"{path}: configs.{name}: file {c.get('path')} is missing")
    return doc


def import_export(folder: Path, home: Path) -> dict:
    """Read the export in ``folder`` into a new warehouse in ``home``; {table: rows}."""
    from warehouse import Warehouse

    folder, home = Path(folder), Path(home)
    doc = read_manifest(folder)
    final = home / WAREHOUSE_FILE
    if final.exists():
        raise ExportError(f"{final}: a warehouse is already there (import into a fresh home)")
    home.mkdir(parents=True, exist_ok=True)
    tmp = home / f".{WAREHOUSE_FILE}.importing"
    tmp.unlink(missing_ok=True)
    counts: dict[str, int] = {}
    try:
        wh = Warehouse(tmp).init()
        with wh.connect() as con:
            cat = tb.catalogue(con)
            con.execute("BEGIN TRANSACTION")
            for name, c in doc["configs"].items():
                if c["kind"] == "view":
                    continue
                src = f"read_parquet({tb.lit(str((folder / c['path']).resolve()))})"
                if c["kind"] == "nested":
                    fld = tb.q(c["field"])
                    keys = ", ".join(tb.q(k) for k in c["key"])
                    counts[c["table"]] = _insert(con, cat, c["table"],
                                                 f"SELECT * EXCLUDE ({fld}) FROM {src}")
                    counts[c["child"]] = _insert(
                        con, cat, c["child"],
                        f"SELECT {keys}, unnest(k.{fld}, recursive := true) FROM {src} k "
                        f"WHERE k.{fld} IS NOT NULL")
                else:
                    counts[c["table"]] = _insert(con, cat, c["table"], f"SELECT * FROM {src}")
            con.execute("COMMIT")
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
        Path(f"{tmp}.wal").unlink(missing_ok=True)
    return counts


def _insert(con, cat: dict, table: str, select: str) -> int:
    if table not in cat:  # a table this version's schema lacks: kept as the export typed it
        con.execute(f"CREATE TABLE {tb.q(table)} AS {select}")
    else:
        verb = "INSERT OR REPLACE" if cat[table].pk else "INSERT"
        con.execute(f"{verb} INTO {tb.q(table)} BY NAME {select}")
    return con.execute(f"SELECT count(*) FROM {tb.q(table)}").fetchone()[0]
