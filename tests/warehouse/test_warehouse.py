"""The warehouse: tables from SQLModel, bulk idempotent upserts, all-or-nothing writes."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import pytest

from warehouse import Warehouse, WarehouseError
from warehouse.schema import Episode, EpisodeTurn


@pytest.fixture
def wh(tmp_path):
    return Warehouse(tmp_path / "w.duckdb").init()


def ep(eid, status="completed"):
    return {"episode_id": eid, "benchmark": "b", "item_id": "q", "condition": "NC",
            "target": "t", "user_policy": "scripted", "status": status,
            "termination": "turn_cap", "n_turns": 4}


def test_tables_exist_with_natural_keys(wh):
    tables = {r["table_name"] for r in wh.query("SELECT table_name FROM information_schema.tables")}
    for name in ("runs", "llm_calls", "queries", "episodes", "episode_turns", "item_judgments",
                 "safety_judgments", "checklist_items", "judgment_sets",
                 "conversations", "turns"):  # the last two: CarryOnBench's views
        assert name in tables
    wh.init()  # idempotent


def test_upsert_replaces_rather_than_duplicates(wh):
    wh.write(Episode, [ep("a"), ep("b")])
    wh.write(Episode, [ep("a", status="target_error")])
    rows = wh.query("SELECT episode_id, status FROM episodes ORDER BY 1")
    assert rows == [{"episode_id": "a", "status": "target_error"},
                    {"episode_id": "b", "status": "completed"}]


def test_repeated_key_within_one_batch_keeps_the_last(wh):
    wh.write(Episode, [ep("a"), ep("a", status="context_exceeded")])
    assert wh.query("SELECT status FROM episodes") == [{"status": "context_exceeded"}]


def test_a_field_only_later_rows_set_is_kept(wh):
    # pyarrow takes a batch's columns from its first row; the write must not drop the
    # fields that only later rows carry.
    wh.write(Episode, [ep("a"), {**ep("b"), "script": "pushback", "error": "x"}])
    rows = wh.query("SELECT episode_id, script, error FROM episodes ORDER BY 1")
    assert rows == [{"episode_id": "a", "script": None, "error": None},
                    {"episode_id": "b", "script": "pushback", "error": "x"}]


def test_write_many_is_all_or_nothing(wh):
    good = [ep("a")]
    bad_turns = [{"episode_id": "a", "position": 0}]  # missing NOT NULL columns
    with pytest.raises(duckdb.ConstraintException,
                       match=r'NOT NULL constraint failed: episode_turns\."role"'):
        wh.write_many([(Episode, good), (EpisodeTurn, bad_turns)])
    assert wh.count(Episode) == 0


def test_delete_then_insert_replaces_a_slice(wh):
    turn = lambda eid, pos: {"episode_id": eid, "position": pos, "role": "user", "model_turn": 1,
                             "content": "x"}
    wh.write(EpisodeTurn, [turn("a", 0), turn("a", 1), turn("a", 2), turn("b", 0)])
    wh.write(EpisodeTurn, [turn("a", 0)], delete=("episode_id = ?", ["a"]))
    assert wh.query("SELECT episode_id, position FROM episode_turns ORDER BY 1, 2") == [
        {"episode_id": "a", "position": 0}, {"episode_id": "b", "position": 0}]


def test_bulk_write_is_fast_enough_for_a_stage(wh):
    rows = [{"episode_id": f"c{i}", "position": 1, "role": "assistant", "model_turn": 1,
             "content": "x" * 50} for i in range(20000)]
    t0 = dt.datetime.now()
    wh.write(EpisodeTurn, rows)
    assert wh.count(EpisodeTurn) == 20000
    assert (dt.datetime.now() - t0).total_seconds() < 20  # ORM row-by-row would take far longer


def test_unwritable_home_is_a_clear_error(tmp_path):
    # Root ignores directory permissions (CI runs as root), so the home is made impossible
    # the root-proof way: a path under a regular file (as tests/gateway/test_cache_faults.py does).
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(WarehouseError, match=r"file/sub: cannot create the home folder: Not a directory"):
        Warehouse(blocker / "sub" / "w.duckdb").init()
    assert blocker.read_text() == "x"  # nothing written over it


def test_shipped_schema_is_the_models_rendered():
    """Each schema.json (what the warehouse creates and migrates from: the shared one, and
    those of the tables components bring) is its SQLModel classes rendered now: a table
    changed without `python -m warehouse.schema_file` fails here."""
    from tasks.bench import component_tables
    from tasks.core import registry
    from warehouse import schema_file

    assert schema_file.render() == schema_file.load(), \
        "warehouse/schema.json is out of date: run `python -m warehouse.schema_file`"
    component_tables()  # the built-in benchmarks' components registered
    sources = registry.table_sources()
    assert {m for m, _ in sources} >= {"tasks.stages.checklists.tables",
                                       "tasks.benchmarks.carryon.tables"}
    for module, path in sources:
        assert schema_file.render(module) == schema_file.load(path), \
            f"{path} is out of date: run `python -m warehouse.schema_file {module} {path}`"


def test_every_warehouse_holds_the_tables_components_bring(tmp_path):
    # The shared schema holds only what every benchmark uses; the checklists stage's and
    # CarryOnBench's tables come with them, in every warehouse this process opens.
    import json

    from warehouse.schema_file import load

    shared = set(load()["tables"])
    assert not shared & {"checklists", "checklist_items", "queries", "intents", "table2_ci"}
    wh = Warehouse(tmp_path / "w.duckdb").init()
    have = {r["table_name"] for r in wh.query(
        "SELECT table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE'")}
    assert have >= shared | {"checklists", "checklist_items", "queries", "intents", "table2_ci"}
    assert json.loads(json.dumps(Warehouse.columns("queries")))[:2] == ["query_id", "source"]


@pytest.mark.slow  # one of the fast suite's slowest (kept under 5 min on 2 cores)
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
                         cwd=Path(__file__).resolve().parents[2]).stdout
    assert out.strip().splitlines()[-1] == "[]"


@pytest.mark.slow  # one of the fast suite's slowest (kept under 5 min on 2 cores)
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


def test_a_merge_refuses_a_source_an_older_version_wrote_until_it_is_opened(tmp_path):
    # A source is attached read-only: one whose CarryOnBench conversations are still tables
    # (written before they were episodes) would lose them in the merge, so it is refused
    # with what to do; opened once by this version (migrated), it merges.
    import tarfile

    import tasks.bench  # noqa: F401  (registers the benchmarks' migrations)
    from warehouse.merge import MergeError, merge_warehouses

    home = tmp_path / "old"
    compat = Path(__file__).resolve().parents[1] / "fixtures" / "compat_home"
    with tarfile.open(compat / "home.tar.gz") as tar:
        tar.extractall(home, filter="data")
    shard = home / "warehouse.duckdb"
    with pytest.raises(MergeError, match=r"old/warehouse.duckdb: written by an older version "
                                         r"\(table conversations is now a view\): open its home"):
        merge_warehouses(tmp_path / "m.duckdb", [shard])
    assert not (tmp_path / "m.duckdb").exists()
    n = Warehouse(shard).init().count("conversations")
    assert n > 0
    merge_warehouses(tmp_path / "m.duckdb", [shard])
    assert Warehouse(tmp_path / "m.duckdb").count("conversations") == n


def test_the_duckdb_instance_is_renewed_after_an_operation_that_grew_the_process(wh, monkeypatch):
    """What DuckDB's instance keeps after a heavy query does not add up over a run: the next
    operation gets a new instance (the rows are in the file, so every read is the same)."""
    from warehouse import store

    resident = iter([100.0, 101.0, 101.0, 101.0 + store._RENEW_AFTER_MB + 1] * 3)
    monkeypatch.setattr(store, "_resident_mb", lambda: next(resident))
    wh.write("episodes", [ep("e1")])  # grew 1 MB: the instance is kept
    first = wh._base
    assert first is not None
    assert wh.query("SELECT episode_id FROM episodes") == [{"episode_id": "e1"}]  # grew more
    assert wh._base is None  # renewed
    assert wh.query("SELECT episode_id FROM episodes") == [{"episode_id": "e1"}]
    assert wh._base is not None and wh._base is not first
    # Without /proc, every _RENEW_EVERY operations.
    monkeypatch.setattr(store, "_resident_mb", lambda: None)
    wh._uses = store._RENEW_EVERY - 1
    kept = wh._base
    wh.query("SELECT 1 AS one")
    assert wh._base is None and kept is not None
