"""Warehouse at paper scale: a bulk write of 1,000,000 item judgments, and every metric view.

    .venv/bin/python perf/warehouse_bulk.py [--judgments 1000000] [--keep DIR]

Rows come from ``tests.support.report.build_synthetic`` (consistent runs, queries, checklists,
judgment sets, BC/NC/oracle conversations, turns, item and safety judgments, unscored
verdicts), with enough targets and queries for the requested number of item judgments, stored
as the verdicts stage stores them (``verdicts`` rows of the Ben-Util and safety sets, read
back through the views ``item_judgments`` and ``safety_judgments``); each Ben-Util verdict is
then filled out as the stage writes it (evidence text, the checklist version, a 64-hex call
hash), so the write moves real-sized rows.

Timed, each on its own:
- the other tables, in one ``write_many`` transaction (not a target; for context);
- ``Warehouse.write("verdicts", rows)`` of all item judgments and safety judgments: ONE
  transaction through the Arrow path, upsert on the natural key (target <= 15 s);
- the same write again (a rerun replacing every row: the idempotent path), checking that the
  table still holds exactly one row per key;
- every view of ``tasks/benchmarks/carryon/views.sql``, fully materialised (``SELECT *`` fetched to Arrow), on
  a fresh connection each (target <= 5 s each).
Row generation is not timed.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tests.support.report as synthetic  # noqa: E402
from warehouse import Warehouse  # noqa: E402
from tasks.bench import load_spec, views_sql  # noqa: E402

N_TARGETS = 6
# build_synthetic's shape: per (target, query) 10 conversations with 28 assistant turns in all,
# 5-8 checklist items per query (6.5 on average).
JUDGMENTS_PER_TARGET_QUERY = 28 * 6.5


class _Capture(Warehouse):
    """A Warehouse whose writes are captured instead of performed, so build_synthetic's rows
    can be written (and timed) table by table."""

    captured: list[tuple] = []

    def write_many(self, batches):
        _Capture.captured = list(batches)
        return 0


def view_names() -> list[str]:
    return re.findall(r"CREATE OR REPLACE VIEW (\w+)", views_sql(load_spec("carryon")))


def make_rows(home: Path, n_judgments: int) -> dict[str, list[dict]]:
    # 3 % margin: item counts are random (5-8 per query), the result must reach n_judgments.
    n_queries = int(1.03 * n_judgments / (N_TARGETS * JUDGMENTS_PER_TARGET_QUERY)) + 1
    original = synthetic.Warehouse
    synthetic.Warehouse = _Capture
    try:
        synthetic.build_synthetic(home, n_targets=N_TARGETS, n_queries=n_queries)
    finally:
        synthetic.Warehouse = original
    rows = {name: list(r) for name, r in _Capture.captured}
    for i, r in enumerate(rows["verdicts"]):  # as the verdicts stage writes Ben-Util's
        if not r["measure"].startswith("fulfilled:"):
            continue
        item = r["measure"].split(":")[1]
        r["evidence"] = (None if r["value"] is None
                         else f"the response explains point {item} in its second paragraph")
        r["reason"] = "invalid_output: fulfilled: Field required" if r["value"] is None else None
        r["item_version"] = "v1"
        r["call_hash"] = f"{i:064x}"
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--judgments", type=int, default=1_000_000)
    ap.add_argument("--keep", type=Path, help="build the warehouse here and keep it")
    ap.add_argument("--json", type=Path, help="also write the figures to this file")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = args.keep or Path(tmp)
        home.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        rows = make_rows(home, args.judgments)
        items = rows.pop("verdicts")
        gen_s = time.perf_counter() - t0
        wh = Warehouse(home / "warehouse.duckdb").init()
        t0 = time.perf_counter()
        wh.write_many(list(rows.items()))
        other_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        wh.write("verdicts", items)
        write_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        wh.write("verdicts", items)
        rewrite_s = time.perf_counter() - t0
        stored = wh.count("verdicts")
        if stored != len(items):
            raise SystemExit(f"verdicts holds {stored} rows after two writes of {len(items)}")
        n_items = wh.count("item_judgments")
        views = {}
        for v in view_names():
            t0 = time.perf_counter()
            with wh.connect(read_only=True) as con:
                n = con.sql(f"SELECT * FROM {v}").to_arrow_table().num_rows
            views[v] = {"seconds": round(time.perf_counter() - t0, 3), "rows": n}
        out = {"item_judgments": n_items, "verdicts": len(items),
               "other_rows": {k: len(v) for k, v in rows.items()},
               "generate_s": round(gen_s, 2), "other_tables_write_s": round(other_s, 2),
               "item_judgments_write_s": round(write_s, 2),
               "item_judgments_rewrite_s": round(rewrite_s, 2), "views": views,
               "db_mb": round((home / "warehouse.duckdb").stat().st_size / 1e6, 1)}
    print(json.dumps(out))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    ok = "met" if write_s <= 15 else "NOT met"
    print(f"\nbulk write of {len(items):,} verdicts ({n_items:,} item judgments): {write_s:.2f} s "
          f"(target ≤ 15 s: {ok}); "
          f"rewrite (upsert replacing every row): {rewrite_s:.2f} s; other tables "
          f"({sum(out['other_rows'].values()):,} rows): {other_s:.2f} s; warehouse {out['db_mb']} MB")
    print("\n| view | rows | seconds | ≤ 5 s |")
    print("|---|---|---|---|")
    for v, r in views.items():
        print(f"| {v} | {r['rows']:,} | {r['seconds']:.3f} | {'yes' if r['seconds'] <= 5 else 'NO'} |")


if __name__ == "__main__":
    main()
