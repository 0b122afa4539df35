"""``carryon import``: an export read back into a fresh home gives the same metric views,
refuses what is not an export or a home that already has a warehouse, and leaves nothing
half-written."""

from __future__ import annotations

import json

import pytest

from tasks.bench import load_spec
from tasks.export.hf import MANIFEST, benchmark_views, write
from tasks.export.importer import import_export
from tasks.export.run_info import ExportError
from tests.support import export_home
from warehouse import Warehouse


def views_of(wh, spec) -> dict:
    out = {}
    for v in benchmark_views(spec):
        cols = [r["column_name"] for r in wh.query(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ?", [v])]
        where = "WHERE benchmark = 'opensafeintent'" if "benchmark" in cols else ""
        out[v] = wh.query(f"SELECT * FROM {v} {where} ORDER BY ALL")
    return out


@pytest.mark.slow  # one of the fast suite's slowest (kept under 5 min on 2 cores)
def test_import_gives_a_home_whose_views_equal_the_original(tmp_path):
    spec = load_spec("opensafeintent")
    wh = export_home.build(tmp_path / "w.duckdb")
    write(wh, spec, tmp_path / "out")
    counts = import_export(tmp_path / "out", tmp_path / "home2")
    assert counts["episodes"] == 3 and counts["episode_turns"] == 7
    assert counts["verdicts"] == 6 and counts["verdict_votes"] == 2
    new = Warehouse(tmp_path / "home2" / "warehouse.duckdb")
    before, after = views_of(wh, spec), views_of(new, spec)
    assert before == after
    assert sum(len(v) for v in after.values()) > 10  # the comparison compared something
    # The rows themselves: the benchmark's, no other's (clarify's episode x1 stayed out).
    assert [r["episode_id"] for r in new.query("SELECT episode_id FROM episodes ORDER BY 1")] == [
        "e1", "e2", "e3"]
    assert new.query("SELECT content FROM episode_turns WHERE episode_id = 'e1' AND position = 3"
                     )[0]["content"] == "Check the hologram and the feel of the paper."


def test_import_refusals(tmp_path):
    spec = load_spec("opensafeintent")
    wh = export_home.build(tmp_path / "w.duckdb")
    write(wh, spec, tmp_path / "out")
    with pytest.raises(ExportError, match="not a CarryOnBench export"):
        import_export(tmp_path, tmp_path / "h")
    (tmp_path / "used").mkdir()
    Warehouse(tmp_path / "used" / "warehouse.duckdb").init()
    with pytest.raises(ExportError, match="a warehouse is already there"):
        import_export(tmp_path / "out", tmp_path / "used")
    manifest = json.loads((tmp_path / "out" / MANIFEST).read_text())
    (tmp_path / "out" / manifest["configs"]["episodes"]["path"]).unlink()
    with pytest.raises(ExportError, match="configs.episodes: file data/episodes/episodes.parquet is missing"):
        import_export(tmp_path / "out", tmp_path / "h2")
    assert not (tmp_path / "h2" / "warehouse.duckdb").exists()


def test_a_failed_import_leaves_no_warehouse(tmp_path):
    spec = load_spec("opensafeintent")
    wh = export_home.build(tmp_path / "w.duckdb")
    write(wh, spec, tmp_path / "out")
    path = tmp_path / "out" / "data" / "verdicts" / "verdicts.parquet"
    path.write_bytes(b"not parquet")
    with pytest.raises(Exception):
        import_export(tmp_path / "out", tmp_path / "h")
    assert [p.name for p in (tmp_path / "h").iterdir()] == []
