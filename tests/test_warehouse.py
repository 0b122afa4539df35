"""The warehouse: tables from SQLModel, bulk idempotent upserts, all-or-nothing writes."""

from __future__ import annotations

import datetime as dt

import duckdb
import pytest

from warehouse import Warehouse, WarehouseError
from warehouse.schema import Conversation, Turn


@pytest.fixture
def wh(tmp_path):
    return Warehouse(tmp_path / "w.duckdb").init()


def conv(cid, status="completed"):
    return {"conversation_id": cid, "target": "t", "query_id": "q", "flow_id": "pushback",
            "condition": "NC", "length": 4, "n_moves": 1, "status": status}


def test_tables_exist_with_natural_keys(wh):
    tables = {r["table_name"] for r in wh.query("SELECT table_name FROM information_schema.tables")}
    for name in ("runs", "llm_calls", "queries", "conversations", "turns", "item_judgments",
                 "safety_judgments", "checklist_items", "judgment_sets"):
        assert name in tables
    wh.init()  # idempotent


def test_upsert_replaces_rather_than_duplicates(wh):
    wh.write(Conversation, [conv("a"), conv("b")])
    wh.write(Conversation, [conv("a", status="target_error")])
    rows = wh.query("SELECT conversation_id, status FROM conversations ORDER BY 1")
    assert rows == [{"conversation_id": "a", "status": "target_error"},
                    {"conversation_id": "b", "status": "completed"}]


def test_repeated_key_within_one_batch_keeps_the_last(wh):
    wh.write(Conversation, [conv("a"), conv("a", status="context_exceeded")])
    assert wh.query("SELECT status FROM conversations") == [{"status": "context_exceeded"}]


def test_a_field_only_later_rows_set_is_kept(wh):
    # pyarrow takes a batch's columns from its first row; the write must not drop the
    # fields that only later rows carry.
    wh.write(Conversation, [conv("a"), {**conv("b"), "n_blocked": 2, "error": "x"}])
    rows = wh.query("SELECT conversation_id, n_blocked, error FROM conversations ORDER BY 1")
    assert rows == [{"conversation_id": "a", "n_blocked": None, "error": None},
                    {"conversation_id": "b", "n_blocked": 2, "error": "x"}]


def test_write_many_is_all_or_nothing(wh):
    good = [conv("a")]
    bad_turns = [{"conversation_id": "a", "position": 0}]  # missing NOT NULL columns
    with pytest.raises(duckdb.ConstraintException, match=r'NOT NULL constraint failed: turns\."role"'):
        wh.write_many([(Conversation, good), (Turn, bad_turns)])
    assert wh.count(Conversation) == 0


def test_delete_then_insert_replaces_a_slice(wh):
    turn = lambda cid, pos: {"conversation_id": cid, "position": pos, "role": "user", "model_turn": 1,
                             "move": "query", "content": "x"}
    wh.write(Turn, [turn("a", 0), turn("a", 1), turn("a", 2), turn("b", 0)])
    wh.write(Turn, [turn("a", 0)], delete=("conversation_id = ?", ["a"]))
    assert wh.query("SELECT conversation_id, position FROM turns ORDER BY 1, 2") == [
        {"conversation_id": "a", "position": 0}, {"conversation_id": "b", "position": 0}]


def test_bulk_write_is_fast_enough_for_a_stage(wh):
    rows = [{"conversation_id": f"c{i}", "position": 1, "role": "assistant", "model_turn": 1,
             "move": "query", "content": "x" * 50} for i in range(20000)]
    t0 = dt.datetime.now()
    wh.write(Turn, rows)
    assert wh.count(Turn) == 20000
    assert (dt.datetime.now() - t0).total_seconds() < 20  # ORM row-by-row would take far longer


def test_unwritable_home_is_a_clear_error(tmp_path):
    # Root ignores directory permissions (CI runs as root), so the home is made impossible
    # the root-proof way: a path under a regular file (as tests/test_cache_faults.py does).
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(WarehouseError, match=r"file/sub: cannot create the home folder: Not a directory"):
        Warehouse(blocker / "sub" / "w.duckdb").init()
    assert blocker.read_text() == "x"  # nothing written over it


def test_shipped_schema_is_the_models_rendered():
    """schema.json (what the warehouse creates and migrates from) is the SQLModel classes
    rendered now: a table changed without `python -m warehouse.schema_file` fails here."""
    from warehouse import schema_file

    assert schema_file.render() == schema_file.load(), \
        "warehouse/schema.json is out of date: run `python -m warehouse.schema_file`"


def test_a_command_starts_without_sqlalchemy():
    """The CLI and the flow import without sqlalchemy/sqlmodel (about 0.5 s of every start):
    the warehouse reads its shipped schema and the run writes by table name."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys, flows.cli, flows.carryon\n"
            "print(sorted(m for m in ('sqlalchemy', 'sqlmodel', 'warehouse.schema', 'litellm') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1]).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_a_merge_keeps_the_benchmarks_views_of_its_sources(tmp_path):
    # A benchmark's own views reach a warehouse through the process that loaded its spec;
    # a merge made by a process that never did still has them, copied from the sources.
    import subprocess
    import sys

    from warehouse.merge import merge_warehouses

    shard = tmp_path / "a.duckdb"
    subprocess.run([sys.executable, "-c", "import sys, tasks.bench; from warehouse import "
                    f"Warehouse; Warehouse(sys.argv[1]).init()", str(shard)], check=True)
    merged = tmp_path / "m.duckdb"
    merge_warehouses(merged, [shard])
    con = duckdb.connect(str(merged), read_only=True)
    views = {n for (n,) in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    assert {"clarify_summary", "osi_summary", "model_summary", "episode_verdicts"} <= views
    assert con.execute("SELECT count(*) FROM clarify_summary").fetchone() == (0,)
